// An end-to-end bed: the lab, Stockade's CRDs, FenceAgents for every node's simulated BMC (native
// IPMI and Debian's fence_ipmilan), the operator, and a recorder of everything that happened.
//
// Two operator modes:
// - "host" (the default): replicas are child processes started by startOperator (so a test can kill them);
//   the bed applies the CRDs, the admission policy and, with `webhooks`, the webhooks pointed at loopback.
// - "in-cluster": the operator installed as a user installs it (lab/operator-install.ts: image imported into
//   every node, `kubectl apply -k` an overlay of manifests/), real nodes only, webhooks through their Service.
//   Helpers: operatorPods(), leaderPod() / leaderNode() (from the Lease holder `<pod>_<suffix>`),
//   podLogs() (the replicas' on-disk container logs, readable even from a dead node), webhookRefusal(),
//   and `installed` (the install's figures and kubectl's warnings). startOperator is for host mode only.
import { execFile, spawn, type ChildProcess } from "node:child_process";
import { createWriteStream, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { once } from "node:events";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { AppsV1Api, CustomObjectsApi, loadAllYaml, type V1Pod, type V1PodSpec, type V1Toleration } from "@kubernetes/client-node";
import { Lab } from "./lab.ts";
import { KUBERNETES_NODE_LEASE_SECONDS, kubernetesTimings, type Timings } from "./control-plane.ts";
import { Recorder } from "./recorder.ts";
import { waitFor } from "./health.ts";
import { repoRoot } from "./bins.ts";
import { createPki, writeKubeconfig } from "./pki.ts";
import { paths, type Runtime } from "./state.ts";
import { realNodeImages } from "./images.ts";
import {
  SAN_STORAGE_CLASS,
  checkLedger,
  checkProcessTables,
  deployLedger,
  instanceStarts,
  ledgerManifests,
  readLedgers,
  sanDir,
} from "./ledger.ts";
import { readSnapshots } from "./real/node.ts";
import { GROUP, VERSION, type FenceAgent, type FencingPolicy, type FencingPolicySpec, type NodeFence } from "../src/api/v1alpha1.ts";
import { checkInvariant } from "./invariant.ts";
import { execInCgroup, type MemoryCgroup } from "./memory-cgroup.ts";
import { OPERATOR_NODE_FLAGS } from "../src/runtime/node-flags.ts";
import { TOKEN_ANNOTATION } from "../src/decide/claim-lock.ts";
import {
  OPERATOR_NS,
  installOperator,
  leaderPod,
  operatorPods,
  webhookRefusal,
  type Installed,
  type OperatorImage,
} from "./operator-install.ts";
import { nodePaths } from "./real/config.ts";

const run = promisify(execFile);
export const NS = "default";
export const SECRETS_NS = "stockade-system";

/** The csi-addons NetworkFence resource, for CustomObjectsApi calls. */
export const NETWORK_FENCES = { group: "csiaddons.openshift.io", version: "v1alpha1", plural: "networkfences" };

export type OperatorMode = "host" | "in-cluster";

/** pino's JSON lines out of a log, other lines skipped. */
function parseLogLines(text: string): { time: number; msg: string; [k: string]: unknown }[] {
  return text
    .split("\n")
    .filter((l) => l.startsWith("{"))
    .map((l) => JSON.parse(l) as { time: number; msg: string });
}

export class Bed {
  readonly lab: Lab;
  readonly rec: Recorder;
  readonly custom: CustomObjectsApi;
  readonly apps: AppsV1Api;
  operator: ChildProcess | undefined;
  readonly operators: ChildProcess[] = [];
  private readonly opLogs = new Map<ChildProcess, string>();
  private opRuns = 0;
  /** Where every replica serves the admission webhooks (SO_REUSEPORT: the kernel spreads connections over the live ones), when on. */
  webhookPort: number | undefined;
  /** Where the operator runs: child processes of the test ("host") or pods installed from manifests/ ("in-cluster"). */
  readonly mode: OperatorMode;
  /** In-cluster: what installOperator reported (step times, kubectl's `Warning:` lines). */
  installed: Installed | undefined;

  private constructor(lab: Lab, rec: Recorder, mode: OperatorMode) {
    this.lab = lab;
    this.rec = rec;
    this.mode = mode;
    this.custom = lab.kc.makeApiClient(CustomObjectsApi);
    this.apps = lab.kc.makeApiClient(AppsV1Api);
  }

  static async up(o: {
    nodes: number;
    zones?: string[];
    name: string;
    dir?: string;
    log?: (msg: string) => void;
    /** The nodes' Lease duration (the lab's default is 8 s: renewed every 2 s). */
    nodeLeaseSeconds?: number;
    /** Real nodes (the default: containers really run, a partitioned one keeps writing) or kwok. */
    runtime?: Runtime;
    /** Install the claim-lock and force-delete webhooks (manifests/08-webhooks.yaml), served by the operator replicas. */
    webhooks?: boolean;
    /** Control-plane settings other than the lab's defaults (lab/control-plane.ts). */
    timings?: Partial<Timings>;
    /** Kubernetes' default timings instead of the lab's fast ones: node-monitor grace 50 s (checked every 5 s),
     * Leases of 40 s renewed every 10 s, 300 s default tolerations. */
    kubernetesTimings?: boolean;
    /** The providerID each node registers with (Lab.up's option of that name). */
    providerID?: (node: { name: string; index: number; zone: string }) => string | undefined;
    /** "host" (default): startOperator runs replicas as child processes. "in-cluster": installed from manifests/
     * (real nodes; the bundle's webhooks are always on). */
    operator?: OperatorMode;
    /** In-cluster: the operator image (default: $STOCKADE_OPERATOR_IMAGE, a `docker save` tar, else built from the
     * Dockerfile by lab/operator-image.ts, cached by its inputs). */
    operatorImage?: OperatorImage;
  }): Promise<Bed> {
    const dir = o.dir ?? mkdtempSync(join(tmpdir(), `stockade-e2e-${o.name}-`));
    const runtime = o.runtime ?? "real";
    const mode = o.operator ?? "host";
    if (mode === "in-cluster" && runtime !== "real") throw new Error("Bed: the in-cluster operator needs real nodes (runtime: real)");
    const images = runtime === "real" ? await realNodeImages(o.log) : undefined;
    const lab = await Lab.up({
      dir,
      nodes: o.nodes,
      zones: o.zones,
      log: o.log,
      nodeLeaseSeconds: o.kubernetesTimings ? KUBERNETES_NODE_LEASE_SECONDS : o.nodeLeaseSeconds,
      runtime,
      images,
      timings: o.kubernetesTimings ? { ...kubernetesTimings, ...o.timings } : o.timings,
      providerID: o.providerID,
    });
    try {
      return await Bed.setUp(lab, o.webhooks ?? false, mode === "in-cluster" ? { image: o.operatorImage } : undefined, o.log);
    } catch (err) {
      await lab.down();
      throw err;
    }
  }

  private static async setUp(
    lab: Lab,
    webhooks: boolean,
    inCluster: { image?: OperatorImage } | undefined,
    log?: (m: string) => void,
  ): Promise<Bed> {
    const bed = new Bed(lab, await new Recorder(lab).start(), inCluster ? "in-cluster" : "host");
    try {
      // The image is built (or taken from $STOCKADE_OPERATOR_IMAGE) by installOperator unless given.
      if (inCluster) bed.installed = await installOperator(lab, { image: inCluster.image, log });
      else if (webhooks) await bed.installWebhooks();
      return await bed.install();
    } catch (err) {
      bed.rec.stop(); // its watches would keep the test process alive
      throw err;
    }
  }

  /**
   * The bundle's webhook configurations, pointed at a loopback port instead of the in-cluster Service (the
   * operator runs on the host); the operator writes their caBundle. Pods created before an operator serves them
   * are refused, as in a cluster (failurePolicy Fail).
   */
  async installWebhooks(): Promise<void> {
    const probe = createServer();
    await new Promise<void>((r) => probe.listen(0, "127.0.0.1", () => r()));
    this.webhookPort = (probe.address() as { port: number }).port;
    await new Promise<void>((r) => probe.close(() => r()));
    const docs = loadAllYaml(readFileSync(join(repoRoot, "manifests/08-webhooks.yaml"), "utf8")) as {
      webhooks: { clientConfig: { service?: { path?: string }; url?: string } }[];
    }[];
    for (const d of docs)
      for (const w of d.webhooks) w.clientConfig = { url: `https://127.0.0.1:${this.webhookPort}${w.clientConfig.service?.path ?? ""}` };
    const file = join(this.lab.dir, "webhooks.json");
    writeFileSync(file, JSON.stringify({ apiVersion: "v1", kind: "List", items: docs }));
    await this.kubectl("apply", "-f", file);
  }

  private async install(): Promise<Bed> {
    const lab = this.lab;
    if (this.mode === "host") {
      await this.kubectl("apply", "-f", join(repoRoot, "crds"));
      // Who may write a NodeFence's status or confirm a manual fence: every bed runs with the bundle's policy.
      await this.kubectl("apply", "-f", join(repoRoot, "manifests/06-admission-policy.yaml"));
      await this.kubectl("create", "namespace", SECRETS_NS);
    } // in-cluster: the bundle made all three
    await lab.waitForCrds();
    await lab.waitForDefaultServiceAccount(NS);
    for (const n of lab.nodes()) {
      const ep = lab.bmcEndpoint(n);
      await lab.core.createNamespacedSecret({
        namespace: SECRETS_NS,
        body: { metadata: { name: `bmc-${n}` }, stringData: { password: readFileSync(ep.passwordFile, "utf8").trim() } },
      });
    }
    const perNode = Object.fromEntries(lab.nodes().map((n) => [n, { credentialsSecretRef: { namespace: SECRETS_NS, name: `bmc-${n}` } }]));
    // The BMC addresses come only from administrator-owned sources: the node map here, the lab's
    // node-restriction.kubernetes.io/ labels for lab-fence-ipmilan (a kubelet may not set those).
    const withAddress = Object.fromEntries(
      lab.nodes().map((n) => {
        const ep = lab.bmcEndpoint(n);
        return [n, { ...perNode[n], parameters: { address: ep.address, port: String(ep.port) } }];
      }),
    );
    await this.create("fenceagents", {
      metadata: { name: "lab-ipmi" },
      spec: {
        type: "ipmi",
        parameters: { username: "admin", cipher: "3" },
        nodes: withAddress,
        timeoutSeconds: 20,
        retries: 1,
      },
    });
    // The default image has no ClusterLabs agents (they come in its -fence-agents variant): in-cluster, native IPMI only.
    if (this.mode === "in-cluster") return this;
    await this.create("fenceagents", {
      metadata: { name: "lab-fence-ipmilan" },
      spec: {
        type: "fenceAgent",
        agent: "fence_ipmilan",
        parameters: { username: "admin", lanplus: "1", cipher: "3" },
        nodeTemplates: {
          ip: '{{ labels["node-restriction.kubernetes.io/bmc-host"] }}',
          ipport: '{{ labels["node-restriction.kubernetes.io/bmc-port"] }}',
        },
        nodes: perNode,
        timeoutSeconds: 30,
        retries: 1,
      },
    });
    return this;
  }

  /** Installs the csi-addons NetworkFence CRD (test/fixtures) and waits until the apiserver serves it. */
  async installNetworkFenceCrd(): Promise<void> {
    await this.kubectl("apply", "-f", join(repoRoot, "test/fixtures/csiaddons.openshift.io_networkfences.yaml"));
    await waitFor(
      "the NetworkFence CRD served",
      async () =>
        (await this.custom.listClusterCustomObject(NETWORK_FENCES).then(
          () => true,
          () => false,
        )) || undefined,
      { timeoutMs: 30_000 },
    );
  }

  async kubectl(...args: string[]): Promise<string> {
    return (await run("kubectl", args, { env: this.lab.env })).stdout;
  }

  async create(plural: string, body: object): Promise<unknown> {
    const kind = { fenceagents: "FenceAgent", fencingpolicies: "FencingPolicy", nodefences: "NodeFence" }[plural];
    return await this.custom.createClusterCustomObject({
      group: GROUP,
      version: VERSION,
      plural,
      body: { apiVersion: `${GROUP}/${VERSION}`, kind, ...body },
    });
  }

  async policy(name: string, spec: Partial<FencingPolicySpec>): Promise<void> {
    await this.create("fencingpolicies", {
      metadata: { name },
      spec: {
        detection: { heartbeatTimeoutSeconds: 6, fenceAfterSeconds: 4, honorPodTolerations: false },
        escalation: [{ agents: [{ name: "lab-ipmi" }] }],
        guards: { maxUnhealthyNodes: "50%", maxConcurrentFences: 2 },
        ...spec,
      },
    });
  }

  async getFence(name: string): Promise<NodeFence | undefined> {
    try {
      return (await this.custom.getClusterCustomObject({ group: GROUP, version: VERSION, plural: "nodefences", name })) as NodeFence;
    } catch {
      return undefined;
    }
  }

  async getPolicy(name: string): Promise<FencingPolicy> {
    return (await this.custom.getClusterCustomObject({ group: GROUP, version: VERSION, plural: "fencingpolicies", name })) as FencingPolicy;
  }

  async agent(name: string): Promise<FenceAgent> {
    return (await this.custom.getClusterCustomObject({ group: GROUP, version: VERSION, plural: "fenceagents", name })) as FenceAgent;
  }

  async waitForFence(name: string, pred: (f: NodeFence) => boolean, what: string, timeoutMs = 90_000): Promise<NodeFence> {
    return await waitFor(
      `NodeFence ${name} ${what}`,
      async () => {
        const f = await this.getFence(name);
        return f && pred(f) ? f : undefined;
      },
      { timeoutMs, intervalMs: 250 },
    );
  }

  /** Asks for the node to be unfenced and waits until it is Unfenced and Ready again. */
  async unfence(node: string): Promise<void> {
    await this.lab.reconnect(node); // real nodes: the cut cable is mended before the machine is powered back on
    await this.kubectl("patch", "nodefence", node, "--type=merge", "-p", '{"spec":{"unfence":true}}');
    await this.waitForFence(node, (f) => f.status?.phase === "Unfenced", "Unfenced");
    await this.lab.waitForNodeReadyStatus(node, "True", 60_000);
  }

  /**
   * Starts an operator replica (a child process, logs in the lab directory); resolves once it runs its
   * controllers, or, with leader election, once its caches are synced (a follower never runs them).
   */
  async startOperator(
    o: {
      leaderElect?: boolean;
      kubeconfig?: string;
      extraArgs?: string[];
      env?: NodeJS.ProcessEnv;
      /** How long to wait for it to be ready (default 30 s; the scale bench's cache sync is what it measures). */
      readyTimeoutMs?: number;
      /** Runs it in this memory cgroup from its first instruction (lab/memory-cgroup.ts), as a container would. */
      cgroup?: MemoryCgroup;
    } = {},
  ): Promise<ChildProcess> {
    const log = join(this.lab.dir, "logs", `operator-${++this.opRuns}.log`);
    const out = createWriteStream(log);
    // In the cgroup before Node.js starts: it sizes its heap from the limit it finds then.
    const [cmd, pre] = o.cgroup ? execInCgroup(o.cgroup, process.execPath, []) : [process.execPath, []];
    const child = spawn(
      cmd,
      [
        ...pre,
        ...OPERATOR_NODE_FLAGS,
        join(repoRoot, "src/main.ts"),
        "--health-bind-address",
        "127.0.0.1:0",
        "--metrics-bind-address",
        "127.0.0.1:0",
        "--log-level",
        "debug",
        "--leader-elect",
        String(o.leaderElect ?? false),
        "--leader-election-namespace",
        SECRETS_NS,
        // Replicas on one machine share a hostname: each run gets its own leader-election identity.
        "--instance-id",
        `e2e-operator-${this.opRuns}`,
        ...(this.webhookPort
          ? ["--webhook-bind-address", `127.0.0.1:${this.webhookPort}`, "--webhook-hosts", "127.0.0.1"]
          : ["--webhook-bind-address", "0"]),
        ...(o.extraArgs ?? []),
      ],
      {
        // With the webhooks on, the operator is a user of its own, so that the force-delete guard tells its
        // releases from a person's (kubectl here runs as the lab's admin).
        env: {
          ...this.lab.env,
          ...o.env,
          KUBECONFIG: o.kubeconfig ?? (this.webhookPort ? this.operatorKubeconfig("stockade-operator") : this.lab.kubeconfig),
        },
        stdio: ["ignore", "pipe", "pipe"],
      },
    );
    this.operator = child;
    this.operators.push(child);
    this.opLogs.set(child, log);
    const marker = o.leaderElect ? "caches synced" : "controllers running";
    // Only the output until ready is looked at: kept whole and searched at every chunk for the whole run, it made the
    // test process copy megabytes per log line at 5,000 nodes, on the CPU the lab and the operator share.
    let text = "";
    const onData = (b: Buffer) => {
      text += b.toString();
      if (text.includes(marker)) readyNow?.();
      text = text.slice(-(marker.length + 3000)); // a marker split between two chunks is still found
    };
    let readyNow: (() => void) | undefined;
    const ready = new Promise<void>((resolve, reject) => {
      readyNow = resolve;
      child.once("exit", (code) => reject(new Error(`operator exited with ${code} before it was ready:\n${text.slice(-3000)}`)));
    });
    child.stdout!.on("data", onData);
    child.stderr!.on("data", onData);
    child.stdout!.pipe(out);
    child.stderr!.pipe(out);
    try {
      await Promise.race([
        ready,
        new Promise((_, rej) => {
          const ms = o.readyTimeoutMs ?? 30_000;
          setTimeout(() => rej(new Error(`operator not ready in ${ms / 1000} s:\n${text.slice(-3000)}`)), ms).unref();
        }),
      ]);
    } finally {
      child.stdout!.off("data", onData);
      child.stderr!.off("data", onData);
    }
    return child;
  }

  /**
   * A kubeconfig for an operator replica with a client certificate of its own (user `user`, group
   * system:masters), so the apiserver's audit log tells replicas apart; `server` may be a TcpProxy.
   */
  operatorKubeconfig(user: string, server = this.lab.state.apiserverUrl): string {
    const pki = createPki(paths(this.lab.dir).pki, [{ name: user, cn: user, groups: ["system:masters"] }]);
    const file = join(this.lab.dir, `${user}.kubeconfig`);
    writeKubeconfig(file, { server, caCert: pki.caCert, ...pki.client(user), user });
    return file;
  }

  /** One replica's log lines (pino JSON), parsed. */
  operatorLog(c: ChildProcess): { time: number; msg: string; [k: string]: unknown }[] {
    const file = this.opLogs.get(c);
    if (!file) return [];
    return parseLogLines(readFileSync(file, "utf8"));
  }

  /** Whether the claim-lock and force-delete webhooks are installed. */
  get webhooksOn(): boolean {
    return this.mode === "in-cluster" || this.webhookPort !== undefined;
  }

  /** In-cluster: the operator's pods, oldest first. */
  async operatorPods(): Promise<V1Pod[]> {
    return await operatorPods(this.lab);
  }

  /** In-cluster: the pod whose identity holds the Lease (undefined while none does). */
  async leaderPod(): Promise<V1Pod | undefined> {
    return await leaderPod(this.lab);
  }

  /** In-cluster: the leader's node. */
  async leaderNode(): Promise<string> {
    const p = await waitFor("a leader", () => this.leaderPod(), { timeoutMs: 60_000 });
    return p.spec!.nodeName!;
  }

  /** In-cluster: undefined when the webhooks answer through their Service, else kubectl's error (lab/operator-install.ts). */
  async webhookRefusal(): Promise<string | undefined> {
    return await webhookRefusal(this.lab);
  }

  /**
   * In-cluster: the replicas' container logs as the kubelets wrote them (every node, every pod and restart of
   * stockade-system; `pod` narrows to one pod name), from disk: a powered-off or partitioned node's stay readable.
   */
  podLogs(pod?: string): string {
    let s = "";
    for (const n of this.lab.nodes()) {
      const root = nodePaths(this.lab.machineDir(n)).podLogs;
      if (!existsSync(root)) continue;
      for (const d of readdirSync(root)
        .filter((x) => x.startsWith(`${OPERATOR_NS}_${pod ? `${pod}_` : ""}`))
        .sort())
        for (const c of readdirSync(join(root, d)).sort())
          for (const f of readdirSync(join(root, d, c)).sort()) s += readFileSync(join(root, d, c, f), "utf8");
    }
    return s;
  }

  /** In-cluster: one pod's pino lines, parsed (the CRI log prefix `<time> <stream> <F|P> ` stripped). */
  podLog(pod: string): { time: number; msg: string; [k: string]: unknown }[] {
    return parseLogLines(
      this.podLogs(pod)
        .split("\n")
        .map((l) => l.replace(/^\S+ (stdout|stderr) [FP] /, ""))
        .join("\n"),
    );
  }

  operatorLogs(): string {
    let s = "";
    for (let i = 1; i <= this.opRuns; i++) s += readFileSync(join(this.lab.dir, "logs", `operator-${i}.log`), "utf8");
    return s;
  }

  /** Stops one replica (default: the last started). */
  async killOperator(signal: NodeJS.Signals = "SIGKILL", c: ChildProcess | undefined = this.operator): Promise<void> {
    if (c === this.operator) this.operator = undefined;
    if (!c || c.exitCode !== null || c.signalCode !== null) return;
    const exited = once(c, "exit");
    c.kill(signal);
    await exited;
  }

  /** A pre-bound SAN volume `pv-<name>` and its claim `name` (no storage-side lock, like an iSCSI LUN). */
  async sanClaim(name: string, accessModes = ["ReadWriteOnce"], namespace = NS): Promise<void> {
    const path = join(sanDir(this.lab.dir), `pv-${name}`);
    mkdirSync(path, { recursive: true });
    await this.lab.core.createPersistentVolume({
      body: {
        metadata: { name: `pv-${name}` },
        spec: {
          capacity: { storage: "1Mi" },
          accessModes,
          persistentVolumeReclaimPolicy: "Retain",
          storageClassName: SAN_STORAGE_CLASS,
          hostPath: { path, type: "DirectoryOrCreate" },
          claimRef: { apiVersion: "v1", kind: "PersistentVolumeClaim", namespace, name },
        },
      },
    });
    await this.lab.core.createNamespacedPersistentVolumeClaim({
      namespace,
      body: { metadata: { name }, spec: { accessModes, storageClassName: SAN_STORAGE_CLASS, resources: { requests: { storage: "1Mi" } } } },
    });
  }

  /**
   * A ledger writer's pod spec (real nodes) on the given claims (the first one holds the ledger), recording its token.
   * Its identity is the first claim, not the pod: the ledger checker then sees every writer of one claim as instances
   * of one identity (no interleaving, no overlap, tokens rising).
   */
  ledgerWriterSpec(claims: string[], namespace = NS): V1PodSpec {
    const t = ledgerManifests({
      namespace,
      replicas: 1,
      image: this.lab.state.real!.images.ledger!,
      san: sanDir(this.lab.dir),
      tokenAnnotation: TOKEN_ANNOTATION,
      onePerNode: false,
    }).statefulSet.spec!.template.spec!;
    const c = t.containers[0]!;
    const env = (c.env ?? []).map((e) => (e.name === "IDENTITY" ? { name: "IDENTITY", value: claims[0] } : e));
    return {
      ...t,
      containers: [{ ...c, env }],
      volumes: [
        ...(t.volumes ?? []),
        ...claims.map((claim, i) => ({ name: i === 0 ? "data" : `extra-${i}`, persistentVolumeClaim: { claimName: claim } })),
      ],
    };
  }

  /**
   * A StatefulSet, one pod per node. On real nodes it is the single-writer ledger (lab/ledger.ts): each pod
   * appends to a ReadWriteOnce volume on the lab's SAN, with no storage-side locking, and invariant() reads
   * the files. On kwok nodes, pause pods (nothing runs).
   */
  async statefulSet(
    name: string,
    replicas: number,
    extra: { nodeSelector?: Record<string, string>; priorityClassName?: string; tolerations?: V1Toleration[] } = {},
  ): Promise<V1Pod[]> {
    const real = this.lab.state.real;
    if (real) {
      await deployLedger(this.lab.kc, {
        name,
        namespace: NS,
        replicas,
        image: real.images.ledger!,
        san: sanDir(this.lab.dir),
        // With the claim lock on, every record carries the writer's fencing token (the checker wants them rising).
        ...(this.webhooksOn ? { tokenAnnotation: TOKEN_ANNOTATION } : {}),
        ...extra,
      });
    } else
      await this.apps.createNamespacedStatefulSet({
        namespace: NS,
        body: {
          metadata: { name },
          spec: {
            serviceName: name,
            replicas,
            selector: { matchLabels: { app: name } },
            template: {
              metadata: { labels: { app: name } },
              spec: {
                nodeSelector: extra.nodeSelector,
                priorityClassName: extra.priorityClassName,
                tolerations: extra.tolerations,
                affinity: {
                  podAntiAffinity: {
                    requiredDuringSchedulingIgnoredDuringExecution: [
                      { labelSelector: { matchLabels: { app: name } }, topologyKey: "kubernetes.io/hostname" },
                    ],
                  },
                },
                terminationGracePeriodSeconds: 5,
                // Real nodes run the lab's own pause image (imported, never pulled); kwok runs nothing.
                containers: [
                  { name: "app", image: this.lab.state.real?.pauseImage ?? "registry.k8s.io/pause:3.10", imagePullPolicy: "Never" },
                ],
              },
            },
          },
        },
      });
    return await waitFor(
      `${replicas} Running ${name} pods`,
      async () => {
        const ps = await this.pods(name);
        return ps.length === replicas && ps.every((p) => p.status?.phase === "Running") ? ps : undefined;
      },
      { timeoutMs: 90_000 },
    );
  }

  async pods(app: string): Promise<V1Pod[]> {
    return (await this.lab.core.listNamespacedPod({ namespace: NS, labelSelector: `app=${app}` })).items;
  }

  /** Waits until a pod with this name runs again under a new uid; returns it. */
  async waitForReplacement(name: string, oldUid: string, timeoutMs = 120_000): Promise<V1Pod> {
    const pod = await waitFor(
      `a replacement of ${name} Running`,
      async () => {
        const p = (await this.lab.core.listNamespacedPod({ namespace: NS, fieldSelector: `metadata.name=${name}` })).items[0];
        return p && p.metadata?.uid !== oldUid && p.status?.phase === "Running" ? p : undefined;
      },
      { timeoutMs, intervalMs: 200 },
    );
    // Callers then read the order of events from the recorder, whose watch may be a moment behind the API
    // (seen under CI load on real nodes): wait until it has seen what the API said.
    await waitFor(
      `the recorder to see ${name} ${pod.metadata?.uid} Running`,
      async () => this.when((e) => e.source === "pod" && e.uid === pod.metadata?.uid && e.phase === "Running"),
      { timeoutMs: 30_000, intervalMs: 100 },
    );
    return pod;
  }

  /** Checks the safety invariant over everything recorded, counting every pod a NodeFence force-deleted. */
  async invariant() {
    const fences = (await this.custom.listClusterCustomObject({ group: GROUP, version: VERSION, plural: "nodefences" })) as {
      items: NodeFence[];
    };
    const uids = fences.items.flatMap((f) => (f.status?.releases ?? []).filter((r) => r.kind === "Pod").map((r) => r.uid ?? ""));
    const report = checkInvariant(this.rec.timeline(), new Set(uids));
    if (!this.lab.state.real) return report;
    // Real nodes: what the workload itself wrote, and what ran on each node when its power went.
    const ledger = checkLedger(readLedgers(sanDir(this.lab.dir)));
    const snapshots = this.lab.nodes().flatMap((n) =>
      readSnapshots(this.lab.machineDir(n)).map((x) => ({
        time: Date.parse(x.time),
        node: x.node,
        event: x.reason,
        processes: x.processes,
      })),
    );
    // Storage fences the lab's csi-addons test double reported (issue 11): the last report per node before t decides.
    const storageFences = this.rec
      .timeline()
      .filter((e) => e.source === "lab" && e.kind === "storage-fence")
      .map((e) => ({ t: e.t, node: e.source === "lab" ? e.node : "", fenced: e.source === "lab" && e.detail.state === "Fenced" }));
    const storageFenced = (node: string, t: number) => storageFences.filter((f) => f.node === node && f.t <= t).at(-1)?.fenced ?? false;
    const processes = checkProcessTables(snapshots, instanceStarts(ledger), storageFenced);
    return {
      ...report,
      ledger: { identities: ledger.identities, records: ledger.records, handovers: ledger.handovers.length, problems: ledger.problems },
      violations: [
        ...report.violations,
        ...ledger.violations.map((v) => `ledger: ${v}`),
        ...processes.violations.map((v) => `processes: ${v}`),
      ],
    };
  }

  /** When the timeline first shows this: ms since epoch. */
  when(pred: Parameters<Recorder["first"]>[0]): number | undefined {
    return this.rec.first(pred)?.t;
  }

  /** BMC passwords (every node's, plus any given) that appear in the operator's logs. */
  leakedSecrets(extra: string[] = []): string[] {
    const logs = (this.opRuns ? this.operatorLogs() : "") + (this.mode === "in-cluster" ? this.podLogs() : "");
    const secrets = [...this.lab.nodes().map((n) => readFileSync(this.lab.bmcEndpoint(n).passwordFile, "utf8").trim()), ...extra];
    return secrets.filter((s) => s && logs.includes(s));
  }

  /** Stops everything; fails if an operator logged a BMC password (every e2e run is checked). */
  async down(): Promise<void> {
    for (const c of this.operators) await this.killOperator("SIGTERM", c).catch(() => undefined);
    this.rec.stop();
    const leaked = this.leakedSecrets().length;
    await this.lab.down();
    if (leaked) throw new Error(`${leaked} BMC password(s) appear in the operator's logs in ${this.lab.dir}/logs`);
  }
}
