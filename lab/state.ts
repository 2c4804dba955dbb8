// The lab's on-disk state: everything a later `lab` command (or a BMC's power hook) needs to find the
// processes and ports of a running lab. Static facts live in state.json; the facts that change while
// the lab runs (power, the kubelet's pid, the boot ID) live in small per-node files, each written by
// whoever changes it, under a per-node lock.
import { mkdirSync, readFileSync, writeFileSync, appendFileSync, rmdirSync, statSync, renameSync } from "node:fs";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";

export interface NodeSpec {
  name: string;
  index: number;
  zone: string;
  cidr: string;
  bmc: { address: string; port: number; username: string; passwordFile: string };
  /** Real nodes: the node's address on the lab network (its InternalIP). */
  ip?: string;
  /** The Node's spec.providerID (cloud agents find the instance from it), when the lab was asked for one. */
  providerID?: string;
}

export type Runtime = "kwok" | "real";

/** What a real-node lab needs to boot its machines again (see lab/real/). */
export interface RealLabState {
  slot: number;
  /** The host's address on the lab network: nodes reach the apiserver (a forwarder) and DNS here. */
  hostIp: string;
  forwardPort: number;
  /** The host's management address on the lab network: BMCs and power/cloud peers (a partition leaves it). */
  managementIp: string;
  kubelet: string;
  kubeProxy: string;
  pauseImage: string;
  imageTars: string[];
  /** Image name (pause, busybox, etcd, ledger, ...) -> reference pods use, with imagePullPolicy: Never. */
  images: Record<string, string>;
  clusterDns?: string;
}

/** The control plane's timings (lab/control-plane.ts starts its components with them). */
export interface Timings {
  /** kube-controller-manager --node-monitor-grace-period, seconds. */
  nodeMonitorGraceSeconds: number;
  /** kube-apiserver --default-{not-ready,unreachable}-toleration-seconds. */
  defaultTolerationSeconds: number;
  /** kube-controller-manager --node-monitor-period, seconds (labs before it was a setting ran 1 s). */
  nodeMonitorPeriodSeconds?: number;
  /** kube-controller-manager force-detaches a silent node's volumes after 6 minutes (Kubernetes' default;
   * off in the lab, as docs/volumes.md asks: --disable-force-detach-on-timeout). On only to show what it does. */
  forceDetachOnTimeout?: boolean;
}

export interface LabState {
  version: 1;
  dir: string;
  createdAt: string;
  apiserverUrl: string;
  ports: { etcd: number; etcdPeer: number; etcdProxy: number; apiserver: number; controllerManager: number; scheduler: number };
  binDir: string;
  kwok: string;
  kwokStages: string;
  /** The Node.js binary the power hooks run on (the project's Node 24). */
  nodeBin: string;
  nodeLeaseSeconds: number;
  /** Control-plane timings the lab was started with (reused when a component restarts). */
  timings: Timings;
  /** kube-apiserver --feature-gates, e.g. ["WatchList=false"] to serve as Kubernetes 1.33 does. */
  apiserverFeatureGates?: string[];
  nodes: NodeSpec[];
  /** Simulated kubelets (kwok, the default) or real ones. */
  runtime?: Runtime;
  real?: RealLabState;
}

export const paths = (dir: string) => ({
  state: join(dir, "state.json"),
  kubeconfig: join(dir, "kubeconfig"),
  kubeconfigs: join(dir, "kubeconfigs"),
  pki: join(dir, "pki"),
  logs: join(dir, "logs"),
  pids: join(dir, "pids"),
  etcdData: join(dir, "etcd"),
  events: join(dir, "events.jsonl"),
  audit: join(dir, "logs", "audit.log"),
  node: (name: string) => {
    const d = join(dir, "nodes", name);
    return {
      dir: d,
      power: join(d, "power"),
      kubelet: join(d, "kwok.pid.json"),
      bootKick: join(d, "boot-kick.pid.json"),
      bootId: join(d, "boot-id"),
      kwokConfig: join(d, "kwok.yaml"),
      kwokLog: join(dir, "logs", `kwok-${name}.log`),
      kubeconfig: join(dir, "kubeconfigs", `kwok-${name}.kubeconfig`),
      lock: join(d, "lock"),
      bmcDir: join(d, "bmc"),
      bmcPid: join(d, "ipmi_sim.pid.json"),
      bmcLog: join(dir, "logs", `bmc-${name}.log`),
      /** Present from a BMC's "power on" until the machine's power change is done: its status says on meanwhile. */
      bmcOnRequested: join(d, "bmc", "power-on-requested"),
      bmcHookLog: join(dir, "logs", `bmc-hook-${name}.log`),
      /** Every chassis request the BMC's hook ran (`<s>.<ns> get|set <args>`); lab/bmc-log.ts reads it with the BMC's log. */
      bmcChassisLog: join(dir, "logs", `bmc-chassis-${name}.log`),
      /** ipmi_sim's console: a FIFO it holds open (read and write), so its stdin never ends and its debug log has a console. */
      bmcConsole: join(d, "bmc", "console"),
      faults: join(d, "faults.json"),
    };
  },
});

export function readState(dir: string): LabState {
  let text: string;
  try {
    text = readFileSync(paths(dir).state, "utf8");
  } catch {
    throw new Error(`no lab at ${dir} (start one with: npm run lab -- up)`);
  }
  return JSON.parse(text) as LabState;
}

export function writeState(s: LabState): void {
  const p = paths(s.dir).state;
  writeFileSync(`${p}.tmp`, JSON.stringify(s, null, 2));
  renameSync(`${p}.tmp`, p);
}

export function nodeSpec(s: LabState, name: string): NodeSpec {
  const n = s.nodes.find((x) => x.name === name);
  if (!n) throw new Error(`no node "${name}" in the lab (nodes: ${s.nodes.map((x) => x.name).join(", ")})`);
  return n;
}

/** One line of the lab's own event log: power changes, boots, faults. The recorder merges it with watches. */
export interface LabEvent {
  time: string;
  /** storage-fence: a storage side (lab/test-doubles/csi-addons-network-fence.ts) reported the node's storage Fenced or Unfenced.
   * watchdog: a real node's lab watchdog armed, disarmed, closed while armed, or reset its machine (lab/watchdog.ts). */
  kind: "power" | "boot" | "crash" | "partition" | "heal" | "bmc" | "lab" | "kubelet" | "fault" | "storage-fence" | "watchdog";
  node?: string;
  detail: Record<string, unknown>;
}

export function appendEvent(dir: string, e: Omit<LabEvent, "time">): LabEvent {
  const ev: LabEvent = { time: new Date().toISOString(), ...e };
  appendFileSync(paths(dir).events, JSON.stringify(ev) + "\n"); // O_APPEND: whole lines from concurrent writers
  return ev;
}

export function readEvents(dir: string): LabEvent[] {
  let text: string;
  try {
    text = readFileSync(paths(dir).events, "utf8");
  } catch {
    return [];
  }
  return text
    .split("\n")
    .filter(Boolean)
    .map((l) => JSON.parse(l) as LabEvent);
}

/** A per-node mutual exclusion between the lab CLI, tests and the BMC hook (mkdir is atomic). */
export async function withNodeLock<T>(lockDir: string, fn: () => Promise<T> | T): Promise<T> {
  const deadline = Date.now() + 30_000;
  for (;;) {
    try {
      mkdirSync(lockDir);
      break;
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== "EEXIST") throw e;
      try {
        if (Date.now() - statSync(lockDir).mtimeMs > 30_000) rmdirSync(lockDir); // holder died
      } catch {
        /* raced with its release */
      }
      if (Date.now() > deadline) throw new Error(`timed out waiting for lock ${lockDir}`, { cause: e });
      await sleep(20);
    }
  }
  try {
    return await fn();
  } finally {
    rmdirSync(lockDir);
  }
}

export function readText(file: string): string | undefined {
  try {
    return readFileSync(file, "utf8").trim();
  } catch {
    return undefined;
  }
}
