// Fault schedules for the chaos suite, drawn from a seed: the same seed always gives the same schedule,
// so a violation can be replayed with `npm run chaos -- --seed S --schedules 1 --first K`. Pure.
//
// A schedule is a handful of faults from the proposal's list, each starting at a random moment and
// lasting a random time, on random nodes. The constraints keep every schedule one that a correct
// Stockade must survive without a violation AND can recover from unaided: at most one node at a time
// is taken away from the control plane for long (so the storm guard's 50% never blocks the only fence
// that matters and the etcd workload keeps its quorum), and the operator always has a replica back in
// the end.

export type FaultKind =
  | "crash" // the machine hangs, power on
  | "partition" // node <-> control plane cut; the workload keeps running
  | "short-partition" // the same, healed before the fence is due: nothing may be fenced
  | "node-partition" // node <-> node cut; both still reach the control plane
  | "kill-kubelet" // the kubelet dies, the containers keep running
  | "etcd-partition" // kube-apiserver <-> etcd cut
  | "kill-controller-manager"
  | "kill-operator" // the leader replica is killed (SIGKILL); a standby takes over
  | "bmc-unreachable" // the node's BMC stops answering for a while, combined with a crash of that node
  | "power-cycle" // someone power-cycles a node through its BMC
  // The watchdog mode's own (a node agent on every node, a watchdog FenceAgent alone in the escalation):
  | "kill-agent" // the node agent's processes SIGKILLed (and again whenever they restart): the armed watchdog resets the node
  | "watchdog-disabled" // the node's watchdog gone (its agent restarted unarmed), then the node partitioned: never released on WatchdogExpired
  | "control-plane-down" // kube-apiserver stopped for 20–60 s: the agents keep each other fed, no node may be reset
  // The outages mode's own (issue 41): the control plane blind long enough that every kubelet misses renewals for more
  // than a Lease duration, and the leader replica exits at its renew deadline inside it; Node objects deleted.
  | "apiserver-down" // kube-apiserver stopped (SIGTERM, not restarted) for 20–60 s
  | "etcd-down" // kube-apiserver cut from etcd for 20–60 s
  | "node-deleted"; // the Node object deleted while its machine and kubelet run; the kubelet restarted if it does not re-create it

/** Which bed a schedule is for: the normal one (IPMI BMCs) or the watchdog one (node agents, watchdog-only policy). */
export type ChaosMode = "normal" | "watchdog" | "outages";

export const FAULT_KINDS: readonly FaultKind[] = [
  "crash",
  "partition",
  "short-partition",
  "node-partition",
  "kill-kubelet",
  "etcd-partition",
  "kill-controller-manager",
  "kill-operator",
  "bmc-unreachable",
  "power-cycle",
];

/**
 * The watchdog mode's faults: the normal ones that need no BMC agent (bmc-unreachable is left out: no fence goes
 * through a BMC; power-cycle stays, someone at the BMC does it) and the node agent's.
 */
export const WATCHDOG_FAULT_KINDS: readonly FaultKind[] = [
  ...FAULT_KINDS.filter((k) => k !== "bmc-unreachable"),
  "kill-agent",
  "watchdog-disabled",
  "control-plane-down",
];

/** The outages mode's control-plane outages: exactly one per schedule, 20–60 s. */
export const OUTAGE_KINDS: readonly FaultKind[] = ["apiserver-down", "etcd-down"];

/** The outages mode's faults: one outage per schedule, beside up to two of the normal ones or a deleted Node. */
export const OUTAGES_FAULT_KINDS: readonly FaultKind[] = [...OUTAGE_KINDS, ...FAULT_KINDS, "node-deleted"];

/** Faults that take a node away from the control plane (a fence is expected if it lasts). */
export const NODE_LOSS: ReadonlySet<FaultKind> = new Set([
  "crash",
  "partition",
  "kill-kubelet",
  "bmc-unreachable",
  "kill-agent",
  "watchdog-disabled",
]);

export interface Fault {
  kind: FaultKind;
  /** ms after the schedule starts. */
  at: number;
  /** How long the fault lasts before it is undone (ms); node losses are undone by unfencing instead. */
  durationMs: number;
  node?: string;
  peer?: string;
}

export interface Schedule {
  seed: number;
  index: number;
  faults: Fault[];
  /** When every fault has started and the bounded ones are undone (ms). */
  lengthMs: number;
}

/** mulberry32: a small, well-known 32-bit PRNG; good enough to spread faults, and reproducible. */
export function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

export interface ScheduleOptions {
  nodes: string[];
  /** Most faults in one schedule (default 3). */
  maxFaults?: number;
  /** The window faults start in (ms, default 20 s). */
  windowMs?: number;
  /** A partition shorter than this must not lead to a fence (the policy's fence-after minus a margin). */
  shortPartitionMs?: number;
  /** "normal" (default) draws exactly what it always drew for a seed; "watchdog" draws from WATCHDOG_FAULT_KINDS;
   * "outages" one control-plane outage and up to two more faults (drawOutagesSchedule). */
  mode?: ChaosMode;
}

export function drawSchedule(seed: number, index: number, o: ScheduleOptions): Schedule {
  if (o.nodes.length < 3) throw new Error("a chaos schedule needs at least 3 nodes");
  if (o.mode === "outages") return drawOutagesSchedule(seed, index, o);
  const rnd = prng((seed * 1_000_003 + index) >>> 0);
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rnd() * xs.length)]!;
  const between = (lo: number, hi: number) => Math.round(lo + rnd() * (hi - lo));
  const window = o.windowMs ?? 20_000;
  const count = between(1, o.maxFaults ?? 3);
  const faults: Fault[] = [];
  const victim = pick(o.nodes); // the one node a schedule may take away from the control plane
  const others = o.nodes.filter((n) => n !== victim);
  let lost: string | undefined;
  for (let i = 0; i < count; i++) {
    let kind = pick(o.mode === "watchdog" ? WATCHDOG_FAULT_KINDS : FAULT_KINDS);
    // At most one node loss, and (watchdog mode) one control-plane outage, per schedule: two would overlap and blur.
    const again = (NODE_LOSS.has(kind) && lost) || (kind === "control-plane-down" && faults.some((f) => f.kind === kind));
    if (again) kind = pick(["node-partition", "kill-controller-manager", "kill-operator", "etcd-partition"] as const);
    const at = between(0, window);
    switch (kind) {
      case "crash":
      case "partition":
      case "kill-kubelet":
      case "kill-agent":
      case "bmc-unreachable": {
        lost = victim;
        faults.push({ kind, at, durationMs: 0, node: lost });
        break;
      }
      case "short-partition": {
        faults.push({ kind, at, durationMs: between(1_000, o.shortPartitionMs ?? 4_000), node: pick(others) });
        break;
      }
      case "node-partition": {
        const a = pick(o.nodes);
        const b = pick(o.nodes.filter((n) => n !== a));
        faults.push({ kind, at, durationMs: between(2_000, 20_000), node: a, peer: b });
        break;
      }
      case "power-cycle": {
        faults.push({ kind, at, durationMs: between(0, 5_000), node: pick(others) });
        break;
      }
      case "etcd-partition":
        faults.push({ kind, at, durationMs: between(1_000, 8_000) });
        break;
      case "kill-controller-manager":
        faults.push({ kind, at, durationMs: between(1_000, 15_000) });
        break;
      case "kill-operator":
        faults.push({ kind, at, durationMs: 0 });
        break;
      case "watchdog-disabled": {
        // The watchdog goes first (the agent restarted on the node says armed=false), then the node is cut off.
        // The runner disables it, restarts the node's agent, waits for its record to say armed=false, then cuts the node
        // off from the control plane (a partition of the same node, part of this fault).
        lost = victim;
        faults.push({ kind, at, durationMs: 0, node: lost });
        break;
      }
      case "control-plane-down":
        faults.push({ kind, at, durationMs: between(20_000, 60_000) });
        break;
    }
  }
  faults.sort((x, y) => x.at - y.at);
  const lengthMs = Math.max(0, ...faults.map((f) => f.at + f.durationMs));
  return { seed, index, faults, lengthMs };
}

/**
 * The outages mode (issue 41 item 7): every schedule has one control-plane outage of 20–60 s (kube-apiserver stopped, or
 * cut from etcd), longer than a node Lease (8 s in the lab) and than the operator leader's renew deadline (10 s), so every
 * kubelet misses renewals and the leader exits inside it; beside it up to `maxFaults - 1` faults (default 2) of the
 * normal mode or a Node deleted while its machine runs, starting in the same window, so they overlap the outage or
 * follow it. The constraints of the normal mode hold: at most one node lost per schedule, and the node lost is never the
 * one a short partition, a power cycle or a Node deletion hits. A separate draw, so the other modes' seeds are untouched.
 */
function drawOutagesSchedule(seed: number, index: number, o: ScheduleOptions): Schedule {
  const rnd = prng((seed * 1_000_003 + index) >>> 0);
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rnd() * xs.length)]!;
  const between = (lo: number, hi: number) => Math.round(lo + rnd() * (hi - lo));
  const window = o.windowMs ?? 20_000;
  const victim = pick(o.nodes);
  const others = o.nodes.filter((n) => n !== victim);
  const faults: Fault[] = [{ kind: pick(OUTAGE_KINDS), at: between(0, window), durationMs: between(20_000, 60_000) }];
  const count = between(0, (o.maxFaults ?? 3) - 1);
  const rest = [...FAULT_KINDS, "node-deleted"] as const;
  let lost = false;
  for (let i = 0; i < count; i++) {
    let kind: FaultKind = pick(rest);
    if (NODE_LOSS.has(kind) && lost) kind = pick(["node-partition", "kill-operator", "node-deleted"] as const);
    const at = between(0, window);
    switch (kind) {
      case "crash":
      case "partition":
      case "kill-kubelet":
      case "bmc-unreachable":
        lost = true;
        faults.push({ kind, at, durationMs: 0, node: victim });
        break;
      case "short-partition":
        faults.push({ kind, at, durationMs: between(1_000, o.shortPartitionMs ?? 4_000), node: pick(others) });
        break;
      case "node-partition": {
        const a = pick(o.nodes);
        faults.push({ kind, at, durationMs: between(2_000, 20_000), node: a, peer: pick(o.nodes.filter((n) => n !== a)) });
        break;
      }
      case "power-cycle":
        faults.push({ kind, at, durationMs: between(0, 5_000), node: pick(others) });
        break;
      case "etcd-partition":
        faults.push({ kind, at, durationMs: between(1_000, 8_000) });
        break;
      case "kill-controller-manager":
        faults.push({ kind, at, durationMs: between(1_000, 15_000) });
        break;
      case "kill-operator":
        faults.push({ kind, at, durationMs: 0 });
        break;
      case "node-deleted":
        // durationMs: how long the runner waits for the kubelet to re-create its Node before it restarts the kubelet
        // (well under pod GC's 40 s quarantine of pods bound to a missing Node).
        faults.push({ kind, at, durationMs: between(2_000, 15_000), node: pick(others) });
        break;
    }
  }
  faults.sort((x, y) => x.at - y.at);
  const lengthMs = Math.max(0, ...faults.map((f) => f.at + f.durationMs));
  return { seed, index, faults, lengthMs };
}

export function describeFault(f: Fault): string {
  const where = f.peer ? `${f.node}<->${f.peer}` : (f.node ?? "cluster");
  const span = f.durationMs ? ` for ${(f.durationMs / 1000).toFixed(1)} s` : "";
  return `+${(f.at / 1000).toFixed(1)} s ${f.kind} ${where}${span}`;
}
