// A real lab machine: a containerd, a kubelet and a kube-proxy (v1.34, Go-built) in the node's own network
// namespace, mount namespace and cgroup subtree. Its power is that subtree: off freezes every process of the node
// at once (kubelet, containerd, shims, pause, containers), records what was alive, kills them all and
// thaws; nothing is left mounted because every mount the node made lives in its own mount namespace,
// which dies with its last process. On boots it fresh with a new boot ID (bind-mounted over the
// machine's /proc/sys/kernel/random/boot_id inside that namespace, so the kubelet reports it) and a new, disarmed
// watchdog (lab/watchdog.ts: its directory bind-mounted read-only where the node agent's hostPath points).
import { appendFileSync, existsSync, mkdirSync, readFileSync, readdirSync, rmSync, rmdirSync, writeFileSync } from "node:fs";
import { execFile } from "node:child_process";
import { join } from "node:path";
import { promisify } from "node:util";
import { setTimeout as sleep } from "node:timers/promises";
import { containerdConfig, cniConfig, kubeletArgs, kubeletConfig, kubeProxyConfig, nodePaths, type RealNodeLayout } from "./config.ts";
import { nodeNetns } from "./net.ts";
import { clearRef, isAlive, readRef, startDetached, stop, writeRef, type ProcRef } from "../processes.ts";
import { importImages } from "../images.ts";
import { waitFor } from "../health.ts";
import { WATCHDOG_HOST_PATH, watchdogAtBoot, watchdogPaths } from "../watchdog.ts";

export const CGROUP_PARENT = "/stockade-lab";
const CGROUP_FS = "/sys/fs/cgroup";

export interface RealNodeContext extends RealNodeLayout {
  slot: number;
  zone: string;
  kubeconfig: string;
  caFile: string;
  nodeLeaseSeconds: number;
  kubelet: string;
  /** kube-proxy's binary and its kubeconfig (CN=system:kube-proxy); the Service VIPs of the node's pods. */
  kubeProxy: string;
  kubeProxyKubeconfig: string;
  /** Every pod subnet of the lab (kube-proxy's clusterCIDR). */
  clusterCidr: string;
  pauseImage: string;
  /** OCI image tars imported into the node's containerd on its first boot. */
  imageTars: string[];
  clusterDns?: string;
  providerID?: string;
  logDir: string;
}

export const nodeCgroup = (slot: number, node: string) => `${CGROUP_PARENT}/${slot}-${node}`;

/** The v1 hierarchies the node's processes join (every one mounted, so a kill in one reaches all). */
export function cgroupHierarchies(): string[] {
  return readdirSync(CGROUP_FS).filter((d) => d !== "unified" && existsSync(join(CGROUP_FS, d, "cgroup.procs")));
}

function ensureCgroup(path: string): void {
  for (const h of cgroupHierarchies()) {
    let cur = join(CGROUP_FS, h);
    for (const part of path.split("/").filter(Boolean)) {
      const parent = cur;
      cur = join(cur, part);
      if (!existsSync(cur)) mkdirSync(cur);
      if (h === "cpuset") {
        // A new cpuset is empty: a task cannot join until it inherits its parent's CPUs and memory nodes.
        for (const f of ["cpuset.cpus", "cpuset.mems"]) {
          if (readFileSync(join(cur, f), "utf8").trim() === "") writeFileSync(join(cur, f), readFileSync(join(parent, f), "utf8").trim());
        }
      }
    }
  }
}

/** Every pid in the node's subtree (the freezer hierarchy: runc puts every container there too). */
export function nodePids(cgroup: string): number[] {
  const out: number[] = [];
  const walk = (dir: string) => {
    if (!existsSync(dir)) return;
    for (const l of readFileSync(join(dir, "cgroup.procs"), "utf8").split("\n")) if (l) out.push(Number(l));
    for (const e of readdirSync(dir, { withFileTypes: true })) if (e.isDirectory()) walk(join(dir, e.name));
  };
  walk(join(CGROUP_FS, "freezer", cgroup));
  return out;
}

async function setFreezer(cgroup: string, state: "FROZEN" | "THAWED"): Promise<void> {
  const f = join(CGROUP_FS, "freezer", cgroup, "freezer.state");
  if (!existsSync(f)) return;
  writeFileSync(f, state);
  const deadline = Date.now() + 10_000;
  while (readFileSync(f, "utf8").trim() !== state) {
    if (Date.now() > deadline) throw new Error(`cgroup ${cgroup} did not reach ${state}`);
    await sleep(2);
  }
}

export function frozen(cgroup: string): boolean {
  const f = join(CGROUP_FS, "freezer", cgroup, "freezer.state");
  return existsSync(f) && readFileSync(f, "utf8").trim() === "FROZEN";
}

export interface ProcessEntry {
  pid: number;
  cmdline: string;
  /** The pod this process belongs to (from its kubelet-made cgroup path), if any. */
  podUID?: string;
  containerID?: string;
}

export interface ProcessSnapshot {
  time: string;
  node: string;
  reason: string;
  bootID?: string;
  processes: ProcessEntry[];
}

export function describe(pid: number): ProcessEntry | undefined {
  try {
    const cmdline = readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0").filter(Boolean).join(" ");
    const cg = readFileSync(`/proc/${pid}/cgroup`, "utf8");
    const line = cg.split("\n").find((l) => /:freezer:/.test(l)) ?? "";
    const pod = /pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})/.exec(line);
    const cid = /\/([0-9a-f]{64})$/.exec(line);
    return {
      pid,
      cmdline,
      ...(pod ? { podUID: pod[1]!.replaceAll("_", "-") } : {}),
      ...(cid ? { containerID: cid[1] } : {}),
    };
  } catch {
    return undefined; // exited meanwhile
  }
}

/** What runs on the node right now (the evidence the process-table checker reads). */
export function snapshot(ctx: RealNodeContext, reason: string): ProcessSnapshot {
  const bootID = existsSync(nodePaths(ctx.dir).bootId) ? readFileSync(nodePaths(ctx.dir).bootId, "utf8").trim() : undefined;
  const processes = nodePids(ctx.cgroup)
    .map(describe)
    .filter((x): x is ProcessEntry => !!x);
  const snap: ProcessSnapshot = { time: new Date().toISOString(), node: ctx.name, reason, ...(bootID ? { bootID } : {}), processes };
  mkdirSync(ctx.dir, { recursive: true });
  appendFileSync(nodePaths(ctx.dir).snapshots, JSON.stringify(snap) + "\n");
  return snap;
}

export function readSnapshots(dir: string): ProcessSnapshot[] {
  const f = nodePaths(dir).snapshots;
  if (!existsSync(f)) return [];
  return readFileSync(f, "utf8")
    .split("\n")
    .filter(Boolean)
    .map((l) => JSON.parse(l) as ProcessSnapshot);
}

/** `sh` arguments that run `cmd` inside the node's cgroup (every hierarchy) and, when given, its namespaces. */
export function inNodeArgs(ctx: Pick<RealNodeContext, "cgroup" | "slot" | "name">, cmd: string[], ns?: { initPid: number }): string[] {
  const joins = cgroupHierarchies()
    .map((h) => `echo $$ > ${join(CGROUP_FS, h, ctx.cgroup, "cgroup.procs")}`)
    .join(" && ");
  const full = ns
    ? ["nsenter", `--target=${ns.initPid}`, "--mount", `--net=/var/run/netns/${nodeNetns(ctx.slot, ctx.name)}`, "--", ...cmd]
    : cmd;
  return ["-c", `${joins} && exec "$@"`, "node-start", ...full];
}

/** Starts `cmd` inside the node's cgroup (every hierarchy) and, when given, its namespaces. */
function startInNode(ctx: RealNodeContext, cmd: string[], logName: string, ns?: { initPid: number }): ProcRef {
  return startDetached({ cmd: "sh", args: inNodeArgs(ctx, cmd, ns), logFile: join(ctx.logDir, `${logName}-${ctx.name}.log`) });
}

/** waitFor with a synchronous condition checked every 20 ms (these are local /proc and cgroup reads). */
const execFileAsync = promisify(execFile);

const waitUntil = (what: string, ok: () => boolean, timeoutMs: number): Promise<unknown> =>
  waitFor(what, () => ok() || undefined, { timeoutMs, intervalMs: 20 });

function procComm(pid: number): string | undefined {
  try {
    return readFileSync(`/proc/${pid}/comm`, "utf8").trim();
  } catch {
    return undefined;
  }
}

/** Boots the node: its own mount namespace (boot ID, private containerd and CNI paths), containerd, images, kubelet. */
export async function bootNode(ctx: RealNodeContext, bootID: string): Promise<void> {
  const p = nodePaths(ctx.dir);
  ensureCgroup(`${ctx.cgroup}/pods`);
  // A power cycle loses what lived in memory (containerd's state, shim sockets, CNI caches); disks stay.
  for (const d of [p.containerdState, p.runContainerd, p.varLibCni]) rmSync(d, { recursive: true, force: true });
  for (const d of [p.containerdRoot, p.containerdState, p.runcRoot, p.containerdOpt, p.runContainerd, p.varLibCni, p.cniConf, p.cniIpam])
    mkdirSync(d, { recursive: true });
  for (const d of [p.kubeletRoot, p.kubeletCerts, p.podLogs]) mkdirSync(d, { recursive: true });
  writeFileSync(p.bootId, bootID);
  writeFileSync(p.resolvConf, ctx.clusterDns ? `nameserver ${ctx.clusterDns}\n` : "");
  writeFileSync(p.containerdConfig, containerdConfig(ctx, ctx.pauseImage));
  writeFileSync(join(p.cniConf, "10-stockade-lab.conflist"), cniConfig(ctx));
  writeFileSync(
    p.kubeletConfig,
    kubeletConfig(ctx, {
      caFile: ctx.caFile,
      nodeLeaseSeconds: ctx.nodeLeaseSeconds,
      clusterDns: ctx.clusterDns,
      providerID: ctx.providerID,
    }),
  );
  writeFileSync(p.kubeProxyConfig, kubeProxyConfig(ctx, { kubeconfig: ctx.kubeProxyKubeconfig, clusterCidr: ctx.clusterCidr }));
  for (const d of ["/run/containerd", "/var/lib/cni", WATCHDOG_HOST_PATH]) mkdirSync(d, { recursive: true });
  // The node's watchdog (lab/watchdog.ts): a new, disarmed device for every boot, before anything of the node runs.
  await watchdogAtBoot(ctx.dir);

  // The machine's "PID 1": holds the node's mount namespace for as long as the node is powered.
  const script = [
    `mount --bind ${p.bootId} /proc/sys/kernel/random/boot_id`,
    `mount --bind ${p.runContainerd} /run/containerd`,
    `mount --bind ${p.varLibCni} /var/lib/cni`,
    // The node's own watchdog where its agent's hostPath points, read-only: a pod can write to the device, not replace it.
    `mount --bind ${watchdogPaths(ctx.dir).dir} ${WATCHDOG_HOST_PATH}`,
    `mount -o remount,bind,ro ${WATCHDOG_HOST_PATH}`,
    "exec sleep infinity",
  ].join(" && ");
  const init = startInNode(ctx, ["unshare", "--mount", "--propagation", "slave", "--", "sh", "-c", script], "node-init");
  writeRef(p.init, init);
  await waitUntil(`node ${ctx.name}'s init`, () => procComm(init.pid) === "sleep" || !isAlive(init), 10_000);
  if (!isAlive(init))
    throw new Error(`node ${ctx.name} failed to boot its namespace; see ${join(ctx.logDir, `node-init-${ctx.name}.log`)}`);

  const containerd = startInNode(ctx, ["containerd", `--config=${p.containerdConfig}`, "--log-level=warn"], "containerd", {
    initPid: init.pid,
  });
  writeRef(p.containerd, containerd);
  await waitUntil(`node ${ctx.name}'s containerd socket`, () => existsSync(p.containerdSocket) || !isAlive(containerd), 30_000);
  if (!isAlive(containerd)) throw new Error(`containerd of node ${ctx.name} exited; see ${join(ctx.logDir, `containerd-${ctx.name}.log`)}`);
  // The socket file appears when containerd binds it, a moment before it serves (seen in CI under load: the
  // first import's dial refused). Wait until it answers.
  await waitFor(
    `node ${ctx.name}'s containerd to answer`,
    async () => {
      if (!isAlive(containerd)) return true;
      return await execFileAsync("ctr", ["--address", p.containerdSocket, "version"], { timeout: 5_000 }).then(
        () => true,
        () => undefined,
      );
    },
    { timeoutMs: 30_000, intervalMs: 100 },
  );
  if (!isAlive(containerd)) throw new Error(`containerd of node ${ctx.name} exited; see ${join(ctx.logDir, `containerd-${ctx.name}.log`)}`);
  await importImages(
    "ctr",
    p.containerdSocket,
    ctx.imageTars.filter((t) => !imported(ctx).includes(t)),
  );
  writeFileSync(join(ctx.dir, "images-imported"), JSON.stringify(ctx.imageTars));

  writeRef(p.kubelet, startKubelet(ctx, init.pid));
  writeRef(p.kubeProxy, startSupervised(ctx, init.pid, "kube-proxy", [ctx.kubeProxy, `--config=${p.kubeProxyConfig}`, "--v=1"]));
}

/**
 * The kubelet under a supervisor, as systemd's Restart=always runs it on a real machine: a kubelet that
 * exits (e.g. because containerd's CRI is not serving yet at boot) starts again a second later. The
 * kill-kubelet fault kills the supervisor with it (one process group).
 */
function startKubelet(ctx: RealNodeContext, initPid: number): ProcRef {
  return startSupervised(ctx, initPid, "kubelet", [ctx.kubelet, ...kubeletArgs(ctx, { kubeconfig: ctx.kubeconfig, zone: ctx.zone })]);
}

/** `cmd` in the node, started again a second after it exits (kube-proxy too: a DaemonSet pod would be restarted). */
function startSupervised(ctx: RealNodeContext, initPid: number, name: string, cmd: string[]): ProcRef {
  return startInNode(ctx, ["sh", "-c", 'while :; do "$@"; sleep 1; done', `${name}-supervisor`, ...cmd], name, { initPid });
}

/** Images already on the node's disk (they survive power cycles, as a real node's would). */
function imported(ctx: RealNodeContext): string[] {
  const marker = join(ctx.dir, "images-imported");
  return existsSync(marker) ? (JSON.parse(readFileSync(marker, "utf8")) as string[]) : [];
}

/** Power off: freeze everything, record it, kill it, thaw; resolves when no process of the node is left. */
export async function powerOffNode(ctx: RealNodeContext, reason: string): Promise<ProcessSnapshot> {
  await setFreezer(ctx.cgroup, "FROZEN");
  const snap = snapshot(ctx, `${reason}: before kill`);
  for (let round = 0; round < 50; round++) {
    const pids = nodePids(ctx.cgroup);
    if (pids.length === 0) break;
    for (const pid of pids) {
      try {
        process.kill(pid, "SIGKILL");
      } catch {
        /* already gone */
      }
    }
    await setFreezer(ctx.cgroup, "THAWED"); // a frozen task dies only once thawed
    await sleep(20);
  }
  await setFreezer(ctx.cgroup, "THAWED");
  await waitUntil(`every process of node ${ctx.name} to exit`, () => nodePids(ctx.cgroup).length === 0, 10_000);
  snapshot(ctx, `${reason}: after kill`); // the evidence that nothing of the node outlived the power-off
  const p = nodePaths(ctx.dir);
  for (const f of [p.init, p.containerd, p.kubelet, p.kubeProxy]) clearRef(f);
  removePodCgroups(ctx.cgroup);
  return snap;
}

/** A hung machine: every process of the node stops where it is (nothing runs, nothing writes). */
export async function freezeNode(ctx: RealNodeContext): Promise<ProcessSnapshot> {
  await setFreezer(ctx.cgroup, "FROZEN");
  return snapshot(ctx, "crash");
}

/** The hung-kubelet case: the kubelet dies, its containers and containerd keep running. */
export async function killKubelet(ctx: RealNodeContext): Promise<void> {
  const p = nodePaths(ctx.dir);
  await stop(readRef(p.kubelet), 0);
  clearRef(p.kubelet);
}

/** Starts the kubelet again in the same boot (after killKubelet). */
export function restartKubelet(ctx: RealNodeContext): void {
  const p = nodePaths(ctx.dir);
  const init = readRef(p.init);
  if (!init || !isAlive(init)) throw new Error(`node ${ctx.name} is not running (no init process); power it on through its BMC`);
  if (isAlive(readRef(p.kubelet))) return;
  writeRef(p.kubelet, startKubelet(ctx, init.pid));
}

export function kubeletState(ctx: RealNodeContext): "running" | "frozen" | "stopped" {
  const ref = readRef(nodePaths(ctx.dir).kubelet);
  if (!isAlive(ref)) return "stopped";
  return frozen(ctx.cgroup) ? "frozen" : "running";
}

export function kubeletPid(ctx: RealNodeContext): number | undefined {
  const ref = readRef(nodePaths(ctx.dir).kubelet);
  return isAlive(ref) ? ref!.pid : undefined;
}

function rmCgroupTree(dir: string): void {
  if (!existsSync(dir)) return;
  for (const e of readdirSync(dir, { withFileTypes: true })) if (e.isDirectory()) rmCgroupTree(join(dir, e.name));
  try {
    rmdirSync(dir);
  } catch {
    /* still holds a task: left for the next power-off or down */
  }
}

/** The kubelet's pod cgroups of a dead boot (the next kubelet makes its own). */
function removePodCgroups(cgroup: string): void {
  for (const h of cgroupHierarchies()) {
    const pods = join(CGROUP_FS, h, cgroup, "pods");
    if (existsSync(pods)) for (const e of readdirSync(pods, { withFileTypes: true })) if (e.isDirectory()) rmCgroupTree(join(pods, e.name));
  }
}

/** On lab down: the node's whole cgroup subtree goes (after powerOffNode). */
export function removeNodeCgroup(cgroup: string): void {
  for (const h of cgroupHierarchies()) rmCgroupTree(join(CGROUP_FS, h, cgroup));
}

/** Kills whatever a lab that died without `down` left running in a slot's node cgroups, and removes them. */
export async function killSlotNodes(slot: number): Promise<void> {
  const root = join(CGROUP_FS, "freezer", CGROUP_PARENT);
  if (!existsSync(root)) return;
  for (const d of readdirSync(root).filter((x) => x.startsWith(`${slot}-`))) {
    const cgroup = `${CGROUP_PARENT}/${d}`;
    await setFreezer(cgroup, "FROZEN");
    for (const pid of nodePids(cgroup)) {
      try {
        process.kill(pid, "SIGKILL");
      } catch {
        /* gone */
      }
    }
    await setFreezer(cgroup, "THAWED");
    await waitUntil(`the stale node ${d} to die`, () => nodePids(cgroup).length === 0, 10_000);
    removeNodeCgroup(cgroup);
  }
}
