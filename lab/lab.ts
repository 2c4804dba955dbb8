// The lab: a real Kubernetes control plane on loopback with simulated nodes (kwok) and simulated BMCs
// (ipmi_sim). Lab.up() starts one; Lab.attach() finds a running one (how the CLI's later commands work).
import { existsSync, mkdirSync, rmSync } from "node:fs";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import {
  ApiextensionsV1Api,
  CoordinationV1Api,
  CoreV1Api,
  CustomObjectsApi,
  DiscoveryV1Api,
  KubeConfig,
  setHeaderOptions,
  type V1Node,
} from "@kubernetes/client-node";
import { binPaths, ensureBins, ensureRealNodeBins, repoRoot, which } from "./bins.ts";
import { attributeChassisRequests, parseBmcDatagrams, parseChassisLog, type BmcDatagram, type ChassisRequest } from "./bmc-log.ts";
import { newBmcPassword, startBmc, stopBmc, writeBmcConfig, ipmitool, setBmcReachable, bmcReachable } from "./bmc.ts";
import {
  components,
  componentAlive,
  defaultTimings,
  pidFile,
  startComponent,
  startWithFreshPorts,
  stopComponent,
  tail,
  KWOK_USER,
  type Component,
  type Timings,
} from "./control-plane.ts";
import type { BmcEndpoint, FaultDriver } from "./faults.ts";
import { tcpOpen, waitFor } from "./health.ts";
import { stopScaleKwok } from "./scale-kwok.ts";
import { boot, crash, heal, machineStatus, partition, shutdownMachine, type MachineStatus } from "./machine.ts";
import { createPki, writeKubeconfig } from "./pki.ts";
import { freeTcpPorts, freeUdpPort } from "./ports.ts";
import {
  appendEvent,
  nodeSpec,
  paths,
  readState,
  readText,
  withNodeLock,
  writeState,
  type LabState,
  type NodeSpec,
  type Runtime,
} from "./state.ts";
import {
  claimSlot,
  killSlotListeners,
  labNet,
  nodeIp,
  podCidr,
  releaseSlot,
  setupNodeNet,
  setupSwitch,
  slotsInUse,
  teardownNet,
} from "./real/net.ts";
import { recordHostSettings, restoreHostSettings } from "./real/host-settings.ts";
import { startClusterDns, stopClusterDns } from "./cluster-dns.ts";
import {
  realDisableWatchdog,
  realEnableWatchdog,
  realKillKubelet,
  realKillNodeAgent,
  realPartitionNodes,
  realContext,
  realReconnect,
} from "./real/machine.ts";
import { prepareWatchdog, removeWatchdog, setWatchdogTimeout, watchdogStatus, type WatchdogStatus } from "./watchdog.ts";
import { killSlotNodes, nodeCgroup, removeNodeCgroup } from "./real/node.ts";
import { clearRef, isAlive, readRef, signal, startDetached, stop, writeRef, type ProcRef } from "./processes.ts";
import { pooled } from "../src/kube/connections.ts";

export interface UpOptions {
  dir: string;
  nodes?: number;
  /** Zones the nodes are spread over, round-robin (topology.kubernetes.io/zone). */
  zones?: string[];
  timings?: Partial<Timings>;
  nodeLeaseSeconds?: number;
  log?: (msg: string) => void;
  /** kwok (simulated kubelets, the default) or real (a containerd and a kubelet per node; root only). */
  runtime?: Runtime;
  /** Real nodes: the sandbox image and the OCI image tars every node imports (lab/images.ts). */
  images?: { pauseImage: string; tars: string[]; refs: Record<string, string> };
  /** The providerID each node registers with (a kubelet's --provider-id; kwok nodes get it in spec), e.g.
   * `(n) => \`aws:///${n.zone}/i-...\``: cloud agents find the instance from it. None when absent. */
  providerID?: (node: { name: string; index: number; zone: string }) => string | undefined;
  /** Real nodes: every node's watchdog timeout (lab/watchdog.ts), seconds; DEFAULT_WATCHDOG_TIMEOUT_SECONDS if absent. */
  watchdogTimeoutSeconds?: number;
}

/** The programs a real-node lab runs besides the control plane's. */
const REAL_NODE_TOOLS = ["containerd", "runc", "ctr", "iptables", "nsenter", "unshare", "ip", "nft"];

/** What a lab that died without `down` left in its slot: its BMCs and machines (its own stop), then anything in the slot's cgroups. */
async function reclaimSlot(slot: number, owner: string): Promise<void> {
  await Lab.downDir(owner).catch(() => undefined);
  await killSlotNodes(slot);
  killSlotListeners(slot);
}

/** A slot's lab is gone when the process that set it up has exited and nothing of it runs (a lab being set
 * up has no component running yet, but its creator lives). */
function slotStale(owner: string, creatorAlive: boolean): boolean {
  return !creatorAlive && !Lab.running(owner);
}

const NODE_PREFIX = "node-";

const watchdogPidFile = (s: LabState) => join(paths(s.dir).pids, "watchdog.json");

/** Where a node's BMC answers, for FenceAgent templates: under node-restriction.kubernetes.io/, which a node's own
 * kubelet may not set (an annotation it could, and point fencing at another machine). */
function bmcLabels(node: NodeSpec): Record<string, string> {
  return { "node-restriction.kubernetes.io/bmc-host": node.bmc.address, "node-restriction.kubernetes.io/bmc-port": String(node.bmc.port) };
}

export class Lab implements FaultDriver {
  readonly state: LabState;
  readonly kc: KubeConfig;
  readonly core: CoreV1Api;

  private constructor(state: LabState) {
    this.state = state;
    const kc = new KubeConfig();
    kc.loadFromFile(paths(state.dir).kubeconfig);
    this.kc = pooled(kc); // a TLS handshake per request slowed populating thousands of pods
    this.core = this.kc.makeApiClient(CoreV1Api);
  }

  get dir(): string {
    return this.state.dir;
  }
  get kubeconfig(): string {
    return paths(this.state.dir).kubeconfig;
  }
  /**
   * Where pods reach the lab's BMCs and power/cloud peers (real nodes: the host's management address, which a
   * partition does not cut; kwok: loopback). Peers started with `host: lab.managementAddress` listen there.
   */
  get managementAddress(): string {
    return this.state.real?.managementIp ?? "127.0.0.1";
  }
  /** PATH with the lab's kubectl first. */
  get env(): NodeJS.ProcessEnv {
    return { ...process.env, KUBECONFIG: this.kubeconfig, PATH: `${this.state.binDir}:${process.env.PATH ?? ""}` };
  }

  static attach(dir: string): Lab {
    return new Lab(readState(dir));
  }

  static running(dir: string): boolean {
    if (!existsSync(paths(dir).state)) return false;
    const s = readState(dir);
    return components.some((c) => componentAlive(s, c));
  }

  static async up(o: UpOptions): Promise<Lab> {
    const log = o.log ?? (() => {});
    const n = o.nodes ?? 3;
    if (!Number.isInteger(n) || n < 1 || n > 50) throw new Error(`--nodes must be an integer from 1 to 50 (got ${o.nodes})`);
    if (Lab.running(o.dir)) throw new Error(`a lab is already running in ${o.dir}; stop it first with: npm run lab -- down`);
    const runtime = o.runtime ?? "kwok";
    const missing = ["openssl", "ipmi_sim", "ipmitool"].filter((t) => !which(t));
    if (missing.length) {
      throw new Error(`missing ${missing.join(", ")}: install the Debian packages openssl, openipmi and ipmitool (npm run setup does it)`);
    }
    if (runtime === "real") {
      const m = REAL_NODE_TOOLS.filter((t) => !which(t));
      if (m.length || !existsSync("/usr/lib/cni/bridge"))
        throw new Error(
          `real nodes need ${[...m, ...(existsSync("/usr/lib/cni/bridge") ? [] : ["/usr/lib/cni/bridge"])].join(", ")}: install the Debian packages containerd, runc, containernetworking-plugins, iptables, nftables (npm run setup does it)`,
        );
      if (process.getuid?.() !== 0) throw new Error("real nodes need root (network namespaces, cgroups, mounts)");
      if (!o.images) throw new Error("real nodes need images (lab/images.ts builds them)");
    }
    const t0 = Date.now();
    log("checking Kubernetes binaries (the first run builds them from the Go modules)");
    const bins = runtime === "real" ? ensureRealNodeBins() : ensureBins();
    rmSync(o.dir, { recursive: true, force: true });
    const p = paths(o.dir);
    for (const d of [o.dir, p.logs, p.pids, p.kubeconfigs]) mkdirSync(d, { recursive: true });

    const [etcd, etcdPeer, etcdProxy, apiserver, controllerManager, scheduler] = await freeTcpPorts(6);
    const slot = runtime === "real" ? await claimSlot(o.dir, slotStale, reclaimSlot) : 0;
    const zones = o.zones ?? ["zone-a"];
    const nodes: NodeSpec[] = [];
    for (let i = 0; i < n; i++) {
      const name = `${NODE_PREFIX}${i + 1}`;
      nodes.push({
        name,
        index: i,
        zone: zones[i % zones.length]!,
        cidr: runtime === "real" ? podCidr(slot, i) : `10.244.${i + 1}.0/24`,
        bmc: {
          // Real nodes' pods reach the BMCs on the management address; kwok labs keep loopback.
          address: runtime === "real" ? labNet(slot).managementIp : "127.0.0.1",
          port: await freeUdpPort(),
          username: "admin",
          passwordFile: join(p.node(name).dir, "bmc-password"),
        },
        ...(runtime === "real" ? { ip: nodeIp(slot, i) } : {}),
      });
      const providerID = o.providerID?.({ name, index: i, zone: nodes[i]!.zone });
      if (providerID) nodes[i]!.providerID = providerID;
    }
    const s: LabState = {
      version: 1,
      dir: o.dir,
      createdAt: new Date().toISOString(),
      apiserverUrl: `https://127.0.0.1:${apiserver}`,
      ports: {
        etcd: etcd!,
        etcdPeer: etcdPeer!,
        etcdProxy: etcdProxy!,
        apiserver: apiserver!,
        controllerManager: controllerManager!,
        scheduler: scheduler!,
      },
      binDir: bins.kubeDir,
      kwok: bins.kwok,
      kwokStages: bins.kwokStages,
      nodeBin: process.execPath,
      nodeLeaseSeconds: o.nodeLeaseSeconds ?? 8,
      timings: { ...defaultTimings, ...o.timings },
      nodes,
      runtime,
      ...(runtime === "real"
        ? {
            real: {
              slot,
              hostIp: labNet(slot).hostIp,
              forwardPort: 6443,
              managementIp: labNet(slot).managementIp,
              kubelet: bins.kubelet,
              kubeProxy: bins.kubeProxy,
              pauseImage: o.images!.pauseImage,
              imageTars: o.images!.tars,
              images: o.images!.refs,
            },
          }
        : {}),
    };
    writeState(s);
    appendEvent(s.dir, { kind: "lab", detail: { action: "up", nodes: n } });

    log("creating certificates");
    const clients = [
      { name: "admin", cn: "stockade-lab-admin", groups: ["system:masters"] },
      { name: "kube-controller-manager", cn: "system:kube-controller-manager", groups: [] },
      { name: "kube-scheduler", cn: "system:kube-scheduler", groups: [] },
      { name: "kwok", cn: KWOK_USER, groups: ["system:masters"] },
      // A real kubelet is what the Node authorizer and NodeRestriction expect: one identity per node.
      ...(runtime === "real"
        ? [
            ...nodes.map((nd) => ({ name: `node-${nd.name}`, cn: `system:node:${nd.name}`, groups: ["system:nodes"] })),
            // Bound to system:node-proxier by default.
            { name: "kube-proxy", cn: "system:kube-proxy", groups: [] },
            // The apiserver's identity towards the kubelets (kubectl logs/exec).
            { name: "apiserver-kubelet-client", cn: "kube-apiserver-kubelet-client", groups: [] },
          ]
        : []),
    ];
    const pki = createPki(p.pki, clients);
    const kubeconfig = (file: string, client: string, user: string) =>
      writeKubeconfig(file, { server: s.apiserverUrl, caCert: pki.caCert, ...pki.client(client), user });
    // Every kubeconfig that names the apiserver's address: written again if it has to move to another port.
    const apiserverClients = () => {
      kubeconfig(p.kubeconfig, "admin", "stockade-lab-admin");
      kubeconfig(join(p.kubeconfigs, "kube-controller-manager.kubeconfig"), "kube-controller-manager", "system:kube-controller-manager");
      kubeconfig(join(p.kubeconfigs, "kube-scheduler.kubeconfig"), "kube-scheduler", "system:kube-scheduler");
      kubeconfig(join(p.kubeconfigs, "kwok.kubeconfig"), "kwok", KWOK_USER);
      if (runtime !== "real") for (const node of nodes) kubeconfig(p.node(node.name).kubeconfig, "kwok", KWOK_USER);
    };
    for (const node of nodes) {
      mkdirSync(p.node(node.name).dir, { recursive: true });
      // Real kubelets reach the apiserver through the forwarder, started after it on its final port.
      if (runtime === "real")
        writeKubeconfig(p.node(node.name).kubeconfig, {
          server: `https://${s.real!.hostIp}:${s.real!.forwardPort}`,
          caCert: pki.caCert,
          ...pki.client(`node-${node.name}`),
          user: `system:node:${node.name}`,
          tlsServerName: "localhost",
        });
    }
    if (runtime === "real")
      writeKubeconfig(join(p.kubeconfigs, "kube-proxy.kubeconfig"), {
        server: `https://${s.real!.hostIp}:${s.real!.forwardPort}`,
        caCert: pki.caCert,
        ...pki.client("kube-proxy"),
        user: "system:kube-proxy",
        tlsServerName: "localhost",
      });
    apiserverClients();

    try {
      for (const c of components) {
        log(`starting ${c}`);
        await startWithFreshPorts(s, c, bins, log, apiserverClients);
      }
      const lab = new Lab(s);
      if (runtime === "real") {
        await lab.upRealNodes(log, o.watchdogTimeoutSeconds);
      } else {
        log(`creating ${n} nodes with their BMCs`);
        for (const node of nodes) {
          await lab.core.createNode({ body: lab.nodeObject(node) });
          writeBmcConfig(s, node, newBmcPassword());
          startBmc(s, node);
          await boot(s, node.name, "lab-up");
        }
      }
      log("waiting for every node to be Ready and the ServiceAccount machinery to work");
      await Promise.all(nodes.map((node) => lab.waitForNodeReady(node.name, { timeoutMs: 60_000 })));
      await lab.waitForDefaultServiceAccount("default");
      appendEvent(s.dir, { kind: "lab", detail: { action: "ready", seconds: (Date.now() - t0) / 1000 } });
      log(`lab ready in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
      return lab;
    } catch (e) {
      await Lab.stopAll(s);
      throw e;
    }
  }

  /** Network, forwarder, BMCs and machines of a real-node lab; the kubelets register their Nodes. */
  private async upRealNodes(log: (msg: string) => void, watchdogTimeoutSeconds?: number): Promise<void> {
    const s = this.state;
    const r = s.real!;
    const p = paths(s.dir);
    log(`creating the lab network (slot ${r.slot}, host ${r.hostIp})`);
    recordHostSettings();
    setupSwitch(r.slot);
    for (const node of s.nodes) setupNodeNet(r.slot, node.name, node.index, s.nodes.length);
    const forwarder = startDetached({
      cmd: s.nodeBin,
      args: [join(repoRoot, "lab/forwarder.ts"), r.hostIp, String(r.forwardPort), String(s.ports.apiserver)],
      logFile: join(p.logs, "forwarder.log"),
    });
    writeRef(join(p.pids, "forwarder.json"), forwarder);
    // Without it no kubelet registers: say so now, not after a minute of waiting for nodes (a lab left running
    // on the same slot by a killed test held its address once).
    const up = await waitFor(
      `the apiserver forwarder on ${r.hostIp}:${r.forwardPort}`,
      async () => (!isAlive(forwarder) ? "exited" : (await tcpOpen(r.hostIp, r.forwardPort)) && "listening"),
      { timeoutMs: 30_000 },
    );
    if (up === "exited")
      throw new Error(`the apiserver forwarder on ${r.hostIp}:${r.forwardPort} exited:\n${tail(join(p.logs, "forwarder.log"), 6)}`);
    // The `kubernetes` Service's endpoint (the apiserver's own reconciler is off: its address is loopback): a
    // pod's in-cluster config, https://10.96.0.1:443, goes through its node's kube-proxy to the forwarder.
    await this.kc.makeApiClient(DiscoveryV1Api).createNamespacedEndpointSlice({
      namespace: "default",
      body: {
        metadata: {
          name: "kubernetes-lab",
          labels: { "kubernetes.io/service-name": "kubernetes", "endpointslice.kubernetes.io/managed-by": "stockade-lab" },
        },
        addressType: "IPv4",
        endpoints: [{ addresses: [r.hostIp], conditions: { ready: true } }],
        ports: [{ name: "https", port: r.forwardPort, protocol: "TCP" }],
      },
    });
    // Cluster DNS on the host's lab address: StatefulSet members find each other by their stable names.
    await startClusterDns(s, { listen: { address: r.hostIp } });
    r.clusterDns = r.hostIp;
    writeState(s);
    log(`booting ${s.nodes.length} real nodes (containerd + kubelet each) with their BMCs`);
    for (const node of s.nodes) {
      writeBmcConfig(s, node, newBmcPassword());
      startBmc(s, node);
      prepareWatchdog(realContext(s, node.name).dir, watchdogTimeoutSeconds);
    }
    this.startWatchdogProcess();
    await Promise.all(s.nodes.map((node) => boot(s, node.name, "lab-up")));
    // Where each node's BMC answers: labels only an administrator may set (NodeRestriction refuses a kubelet).
    await Promise.all(
      s.nodes.map(async (node) => {
        await waitFor(
          `node ${node.name} to register`,
          () =>
            this.core.readNode({ name: node.name }).then(
              () => true,
              () => undefined,
            ),
          {
            timeoutMs: 60_000,
            intervalMs: 200,
          },
        );
        await this.core.patchNode(
          { name: node.name, body: { metadata: { labels: bmcLabels(node) } } },
          setHeaderOptions("Content-Type", "application/merge-patch+json"),
        );
      }),
    );
  }

  /** The lab's watchdog process (lab/watchdog-daemon.ts), under a supervisor that starts it again if it dies. */
  private startWatchdogProcess(): void {
    const s = this.state;
    const ref = startDetached({
      cmd: "sh",
      args: ["-c", 'while :; do "$@"; sleep 0.2; done', "watchdog-supervisor", s.nodeBin, join(repoRoot, "lab/watchdog-daemon.ts"), s.dir],
      logFile: join(paths(s.dir).logs, "watchdog.log"),
      env: { ...process.env, NODE_COMPILE_CACHE: join(s.dir, "node-compile-cache") },
    });
    writeRef(watchdogPidFile(s), ref);
  }

  private nodeObject(node: NodeSpec): V1Node {
    return {
      apiVersion: "v1",
      kind: "Node",
      metadata: {
        name: node.name,
        labels: {
          "kubernetes.io/hostname": node.name,
          "kubernetes.io/os": "linux",
          "kubernetes.io/arch": "amd64",
          "topology.kubernetes.io/zone": node.zone,
          type: "kwok",
          ...bmcLabels(node),
        },
        annotations: {
          "kwok.x-k8s.io/node": "fake",
          "node.alpha.kubernetes.io/ttl": "0",
        },
      },
      spec: node.providerID ? { providerID: node.providerID } : {},
      status: {
        allocatable: { cpu: "8", memory: "32Gi", pods: "110" },
        capacity: { cpu: "8", memory: "32Gi", pods: "110" },
      },
    };
  }

  /** Writes an admin kubeconfig for another server address (e.g. a TcpProxy in front of the apiserver). */
  writeKubeconfig(file: string, server: string): string {
    const pki = paths(this.dir).pki;
    writeKubeconfig(file, {
      server,
      caCert: join(pki, "ca.crt"),
      cert: join(pki, "admin.crt"),
      key: join(pki, "admin.key"),
      user: "stockade-lab-admin",
    });
    return file;
  }

  // ---- waiting -------------------------------------------------------------------------------------

  async node(name: string): Promise<V1Node> {
    return this.core.readNode({ name });
  }

  static readyStatus(n: V1Node): string | undefined {
    return n.status?.conditions?.find((c) => c.type === "Ready")?.status;
  }

  /** Waits until the node is Ready and reports the boot ID of its current boot (or `bootID`). */
  async waitForNodeReady(name: string, o: { bootID?: string; timeoutMs?: number } = {}): Promise<V1Node> {
    return waitFor(
      `node ${name} to be Ready`,
      async () => {
        const n = await this.node(name);
        const want = o.bootID ?? this.machine(name).bootID;
        return Lab.readyStatus(n) === "True" && n.status?.nodeInfo?.bootID === want ? n : undefined;
      },
      { timeoutMs: o.timeoutMs ?? 60_000, intervalMs: 250 },
    );
  }

  /**
   * Waits until the node's Lease shows a renewal stamped at or after `sinceMs`: what the operator reads to decide
   * the node is back. A Ready=True read right after a heal may be the condition from before the cut (the
   * controller-manager had not yet marked it Unknown), so it does not say the node came back.
   */
  async waitForLeaseRenewedAfter(name: string, sinceMs: number, timeoutMs = 60_000): Promise<Date> {
    const coordination = this.kc.makeApiClient(CoordinationV1Api);
    return waitFor(
      `a Lease renewal of ${name} after ${new Date(sinceMs).toISOString()}`,
      async () => {
        const lease = await coordination.readNamespacedLease({ name, namespace: "kube-node-lease" });
        const renewed = lease.spec?.renewTime ? new Date(lease.spec.renewTime) : undefined;
        return renewed && renewed.getTime() >= sinceMs ? renewed : undefined;
      },
      { timeoutMs, intervalMs: 250 },
    );
  }

  /**
   * Waits until every node is Ready and renewing its Lease on schedule: its renewTime (the kubelet's clock when it
   * sent the renewal) within one renewal period and a half of now. A node just reconnected may still be catching up
   * (TCP retransmits after a cut delivered a renewal here 4 s after the kubelet stamped it), so it would go silent
   * ahead of nodes cut off with it; tests of simultaneous failures start from this.
   */
  async waitForSteadyHeartbeats(names: readonly string[], timeoutMs = 60_000): Promise<void> {
    const coordination = this.kc.makeApiClient(CoordinationV1Api);
    const periodMs = (this.state.nodeLeaseSeconds * 1000) / 4;
    await waitFor(
      `steady heartbeats from ${names.join(", ")}`,
      async () => {
        for (const name of names) {
          const lease = await coordination.readNamespacedLease({ name, namespace: "kube-node-lease" });
          const renewed = lease.spec?.renewTime ? new Date(lease.spec.renewTime).getTime() : 0;
          if (Date.now() - renewed > periodMs * 1.5 || Lab.readyStatus(await this.node(name)) !== "True") return undefined;
        }
        return true;
      },
      { timeoutMs, intervalMs: 250 },
    );
  }

  async waitForNodeReadyStatus(name: string, status: "True" | "False" | "Unknown", timeoutMs = 60_000): Promise<V1Node> {
    return waitFor(
      `node ${name} Ready=${status}`,
      async () => {
        const n = await this.node(name);
        return Lab.readyStatus(n) === status ? n : undefined;
      },
      { timeoutMs, intervalMs: 250 },
    );
  }

  /**
   * Waits until the stockade.io CRDs are Established and their kinds are served. Not `kubectl wait`: a
   * CRD just created may have no status yet, and kubectl then fails instead of waiting (seen under load).
   */
  async waitForCrds(plurals = ["nodefences", "fencingpolicies", "fenceagents", "fencerecords"], timeoutMs = 60_000): Promise<void> {
    const ext = this.kc.makeApiClient(ApiextensionsV1Api);
    const custom = this.kc.makeApiClient(CustomObjectsApi);
    await waitFor(
      `CRDs ${plurals.join(", ")} Established and served`,
      async () => {
        for (const p of plurals) {
          const crd = await ext.readCustomResourceDefinition({ name: `${p}.stockade.io` }).catch(() => undefined);
          if (!crd?.status?.conditions?.some((c) => c.type === "Established" && c.status === "True")) return undefined;
          // The apiserver answers 429 until the new kind's storage is ready.
          if (
            !(await custom.listClusterCustomObject({ group: "stockade.io", version: "v1alpha1", plural: p }).then(
              () => true,
              () => false,
            ))
          )
            return undefined;
        }
        return true;
      },
      { timeoutMs, intervalMs: 250 },
    );
  }

  async waitForDefaultServiceAccount(namespace: string, timeoutMs = 60_000): Promise<void> {
    await waitFor(
      `ServiceAccount ${namespace}/default`,
      async () => {
        await this.core.readNamespacedServiceAccount({ name: "default", namespace });
        return true;
      },
      { timeoutMs, intervalMs: 250 },
    );
  }

  // ---- faults (FaultDriver) -----------------------------------------------------------------------

  nodes(): string[] {
    return this.state.nodes.map((n) => n.name);
  }
  crash(node: string): Promise<void> {
    return crash(this.state, nodeSpec(this.state, node).name);
  }
  partition(node: string): Promise<void> {
    return partition(this.state, nodeSpec(this.state, node).name);
  }
  heal(node: string): Promise<void> {
    return heal(this.state, nodeSpec(this.state, node).name);
  }
  /** Real nodes: cuts node `a` from node `b` both ways (each still reaches the control plane). */
  async partitionNodes(a: string, b: string): Promise<void> {
    this.requireReal("a node-to-node partition");
    const s = this.state;
    await withNodeLock(paths(s.dir).node(nodeSpec(s, a).name).lock, () => realPartitionNodes(s, a, nodeSpec(s, b).name));
  }
  /**
   * Real nodes: reconnects the node's network (a partition is a cut cable: it outlives a power cycle, so a
   * fenced node that was cut off comes back only once this is done). Works with the power off. kwok: no-op.
   */
  async reconnect(node: string): Promise<void> {
    if (this.state.runtime !== "real") return;
    const s = this.state;
    await withNodeLock(paths(s.dir).node(nodeSpec(s, node).name).lock, () => realReconnect(s, node));
  }
  /** Real nodes: the kubelet dies, its containers keep running (the hung-kubelet case); heal restarts it. */
  async killKubelet(node: string): Promise<void> {
    this.requireReal("killing a kubelet while its containers run");
    const s = this.state;
    await withNodeLock(paths(s.dir).node(nodeSpec(s, node).name).lock, () => realKillKubelet(s, node));
  }
  /** Real nodes: the node agent's containers die now and whenever they start again, until a new boot or heal. */
  async killNodeAgent(node: string): Promise<number[]> {
    this.requireReal("killing the node agent");
    const s = this.state;
    return withNodeLock(paths(s.dir).node(nodeSpec(s, node).name).lock, () => realKillNodeAgent(s, node));
  }
  /** Real nodes: the node's watchdog device goes (until enableWatchdog); the machine is never reset by it. */
  async disableWatchdog(node: string): Promise<void> {
    this.requireReal("disabling a watchdog");
    const s = this.state;
    await withNodeLock(paths(s.dir).node(nodeSpec(s, node).name).lock, () => realDisableWatchdog(s, node));
  }
  /** Real nodes: undoes disableWatchdog (a new, disarmed device; restart the node's agent to arm it). */
  async enableWatchdog(node: string): Promise<void> {
    this.requireReal("enabling a watchdog");
    const s = this.state;
    await withNodeLock(paths(s.dir).node(nodeSpec(s, node).name).lock, () => realEnableWatchdog(s, node));
  }
  /** Real nodes: the node's watchdog: enabled, device present, armed, last feed, timeout (lab/watchdog.ts). */
  watchdog(node: string): WatchdogStatus {
    this.requireReal("a watchdog");
    return watchdogStatus(this.machineDir(node));
  }
  /** Real nodes: the timeout the node's watchdog device reports (and counts) from now on. */
  setWatchdogTimeout(node: string, seconds: number): void {
    this.requireReal("a watchdog");
    setWatchdogTimeout(this.machineDir(node), seconds);
  }
  /** The supervisor of the lab's watchdog process (its child is the process itself). */
  watchdogProcess(): ProcRef | undefined {
    return readRef(watchdogPidFile(this.state));
  }
  private requireReal(what: string): void {
    if (this.state.runtime !== "real") throw new Error(`${what} needs real nodes (npm run lab -- up --runtime real)`);
  }
  get runtime(): Runtime {
    return this.state.runtime ?? "kwok";
  }
  /** The directory of a real node's machine (containerd, kubelet, process snapshots). */
  machineDir(node: string): string {
    return realContext(this.state, nodeSpec(this.state, node).name).dir;
  }

  machine(node: string): MachineStatus {
    return machineStatus(this.state, nodeSpec(this.state, node).name);
  }
  bmcEndpoint(node: string): BmcEndpoint {
    const n = nodeSpec(this.state, node);
    return { node: n.name, ...n.bmc };
  }
  async setBmcReachable(node: string, reachable: boolean): Promise<void> {
    await setBmcReachable(this.state, nodeSpec(this.state, node).name, reachable);
  }
  bmcReachable(node: string): boolean {
    return bmcReachable(this.state, nodeSpec(this.state, node).name);
  }
  /**
   * What the node's BMC received, from its own logs: every datagram (time, source address) and every chassis
   * request (get/set power...) with the datagram that carried it (lab/bmc-log.ts).
   */
  bmcRequests(node: string): { datagrams: BmcDatagram[]; chassis: ChassisRequest[] } {
    const p = paths(this.state.dir).node(nodeSpec(this.state, node).name);
    const datagrams = parseBmcDatagrams(readText(p.bmcLog) ?? "");
    return { datagrams, chassis: attributeChassisRequests(datagrams, parseChassisLog(readText(p.bmcChassisLog) ?? "")) };
  }

  /** Drives the node's BMC over IPMI with ipmitool, exactly as an operator would. */
  async bmc(node: string, action: "on" | "off" | "status"): Promise<"on" | "off"> {
    const spec = nodeSpec(this.state, node);
    if (action !== "status") {
      const r = await ipmitool(spec, ["chassis", "power", action]);
      if (r.code !== 0) throw new Error(`ipmitool chassis power ${action} on ${node}'s BMC failed: ${(r.stderr || r.stdout).trim()}`);
    }
    const status = async () => {
      const r = await ipmitool(spec, ["chassis", "power", "status"]);
      const m = /Chassis Power is (on|off)/i.exec(r.stdout);
      if (r.code !== 0 || !m) throw new Error(`ipmitool chassis power status on ${node}'s BMC failed: ${(r.stderr || r.stdout).trim()}`);
      return m[1]!.toLowerCase() as "on" | "off";
    };
    if (action === "status") return status();
    // The BMC acknowledges a command before the power has changed, as a real one does: as an administrator
    // would, watch the status until it says so, and (the lab knowing more) until the machine has finished
    // changing: after "on" the status says on at once, while the machine is still booting.
    const pending = paths(this.state.dir).node(spec.name).bmcOnRequested;
    const until = Date.now() + 30_000;
    for (;;) {
      const power = await status();
      if ((power === action && this.machine(node).power === action && !existsSync(pending)) || Date.now() > until) return power;
      await sleep(200);
    }
  }

  // ---- control plane -------------------------------------------------------------------------------

  componentStatus(): Record<string, boolean> {
    return Object.fromEntries(components.map((c) => [c, componentAlive(this.state, c)]));
  }

  /** Cuts kube-apiserver off from etcd (bytes dropped both ways, connections left open) or reconnects it. */
  async partitionEtcd(cut: boolean): Promise<void> {
    const ref = readRef(pidFile(this.state, "etcd-proxy"));
    if (!signal(ref, cut ? "SIGUSR1" : "SIGUSR2")) throw new Error("the lab's etcd proxy is not running");
    appendEvent(this.dir, { kind: "fault", detail: { fault: "apiserver-etcd-partition", cut } });
  }

  /** Kills a control-plane component (SIGKILL: no graceful hand-over), e.g. kube-controller-manager. */
  async killComponent(c: Component): Promise<void> {
    await stop(readRef(pidFile(this.state, c)), 0);
    appendEvent(this.dir, { kind: "fault", detail: { fault: "component-killed", component: c } });
  }

  /** Stops a control-plane component as a service manager does (SIGTERM, then SIGKILL), e.g. kube-apiserver for an outage. */
  async stopComponent(c: Component): Promise<void> {
    appendEvent(this.dir, { kind: "fault", detail: { fault: "component-stopped", component: c } }); // it stops serving from here
    await stopComponent(this.state, c);
  }

  /**
   * Deletes the node's Node object while its machine runs (a cloud controller or an administrator's `kubectl delete
   * node`); a real kubelet does not re-create it until it restarts.
   */
  async deleteNode(node: string): Promise<void> {
    await this.core.deleteNode({ name: nodeSpec(this.state, node).name });
    appendEvent(this.dir, { kind: "fault", node, detail: { fault: "node-deleted" } });
  }

  /** Sets the labels the lab gives a node after it registers (where its BMC answers): again after a Node re-created. */
  async labelNode(node: string, extra: Record<string, string> = {}): Promise<void> {
    await this.core.patchNode(
      { name: node, body: { metadata: { labels: { ...bmcLabels(nodeSpec(this.state, node)), ...extra } } } },
      setHeaderOptions("Content-Type", "application/merge-patch+json"),
    );
  }

  /** Starts a component that was killed or stopped; resolves once it is healthy. */
  async startComponent(c: Component): Promise<void> {
    if (componentAlive(this.state, c)) return;
    await startComponent(this.state, c, binPaths(), this.state.timings);
    appendEvent(this.dir, { kind: "lab", detail: { action: "component-started", component: c } });
  }

  /**
   * Stops and starts kube-apiserver (same port, same etcd): clients see their connections drop. `featureGates`
   * replaces its --feature-gates from then on (e.g. ["WatchList=false"], as Kubernetes 1.33 serves).
   */
  async restartApiserver(o: { featureGates?: string[] } = {}): Promise<void> {
    if (o.featureGates) {
      this.state.apiserverFeatureGates = o.featureGates;
      writeState(this.state);
    }
    await stopComponent(this.state, "kube-apiserver");
    appendEvent(this.dir, { kind: "lab", detail: { action: "apiserver-stopped" } });
    await startComponent(this.state, "kube-apiserver", binPaths(), this.state.timings);
    appendEvent(this.dir, { kind: "lab", detail: { action: "apiserver-started" } });
  }

  async down(): Promise<void> {
    await Lab.stopAll(this.state);
  }

  /** Stops every process the lab started, whatever state it is in (frozen ones included). */
  static async stopAll(s: LabState): Promise<void> {
    // First, so that no watchdog resets a machine being shut down.
    await stop(readRef(watchdogPidFile(s)), 2000);
    clearRef(watchdogPidFile(s));
    await Promise.all(
      s.nodes.map(async (n) => {
        await shutdownMachine(s, n.name);
        await stopBmc(s, n.name);
      }),
    );
    await stopScaleKwok(s.dir);
    await stop(readRef(join(paths(s.dir).pids, "forwarder.json")), 2000);
    await stopClusterDns(s);
    clearRef(join(paths(s.dir).pids, "forwarder.json"));
    for (const c of [...components].reverse()) await stopComponent(s, c);
    if (s.runtime === "real" && s.real) {
      for (const n of s.nodes) await removeWatchdog(realContext(s, n.name).dir);
      for (const n of s.nodes) removeNodeCgroup(nodeCgroup(s.real.slot, n.name));
      teardownNet(s.real.slot);
      releaseSlot(s.real.slot);
      // The kubelets changed machine-wide settings: the last real lab down puts them back.
      if (slotsInUse() === 0) restoreHostSettings();
    }
    appendEvent(s.dir, { kind: "lab", detail: { action: "down" } });
  }

  static async downDir(dir: string): Promise<boolean> {
    if (!existsSync(paths(dir).state)) return false;
    await Lab.stopAll(readState(dir));
    return true;
  }
}
