// The periodic monitor of every node's fence device, like Pacemaker's monitor of its stonith devices: which nodes
// are due for a status query, and how the answers fold into the FenceAgent's status. Pure: the schedule is a
// function of (agent, node, times), the fold of the results the caller kept. The queries themselves (status only,
// never off or on) are made by controllers/agent-monitor.ts; a failing query fences nothing.
import type { FenceAgent, FenceAgentStatusMonitor, FenceAgentStatusMonitorFailures } from "../api/v1alpha1.ts";
import type { AgentErrorKind, PowerState } from "./agent-reports.ts";
import type { ParsedRecord } from "./node-agent-record.ts";

/** When spec.monitor.intervalSeconds is unset. */
export const DEFAULT_MONITOR_INTERVAL_SECONDS = 300;
/** The shortest interval the CRD accepts (0 turns monitoring off). */
export const MIN_MONITOR_INTERVAL_SECONDS = 10;
/**
 * A node never queried yet (the agent is new or changed, the node new, this replica just became leader) is queried
 * within this (or the interval, when shorter): a changed spec should not wait a whole interval to be tested.
 */
export const FIRST_QUERY_WINDOW_SECONDS = 60;
/** Failing nodes listed in status.monitor.failures (the counts cover all of them): a bounded status at 5,000 nodes. */
export const MAX_LISTED_FAILURES = 20;
/** Failing nodes named in a condition's message or an Event. */
const NAMED_IN_MESSAGE = 5;
/** A failure message kept in status, in characters. */
export const FAILURE_MESSAGE_LIMIT = 512;

/**
 * Why a node's status query failed: the runner's error kinds (Cancelled, the monitor stopped, is never recorded), and
 * for a watchdog agent why the node's own agent does not cover it (watchdogNodeResult).
 */
export type MonitorReason = Exclude<AgentErrorKind, "Cancelled"> | WatchdogCoverageReason;

/** Why a node is not covered by a watchdog FenceAgent. */
export type WatchdogCoverageReason = "NodeAgentMissing" | "WatchdogUnarmed" | "NodeAgentRecordInvalid" | "NodeAgentSilent";

/** The last status query of one node through one agent. */
export interface NodeResult {
  ok: boolean;
  /** Set when !ok. */
  reason?: MonitorReason;
  /** Redacted. */
  message: string;
  /** When the query ended (ms since the epoch). */
  atMs: number;
  /** When the node's current run of failures began (ms), while !ok. */
  failingSinceMs?: number;
  power?: PowerState;
}

/** Why an agent type is not monitored, or undefined when its devices answer a status query. */
export function notMonitoredWhy(type: string): string | undefined {
  if (type === "manual") return "a manual agent has no device to query: a person powers the machine off and confirms it";
  if (type === "csiAddonsNetworkFence") return "a storage fence has no power state to query: its NetworkFence is read only during a fence";
  return undefined;
}

/** The monitor's interval in ms, or undefined when the agent is not monitored (intervalSeconds 0, or a type without a status query). */
export function monitorIntervalMs(agent: FenceAgent): number | undefined {
  if (notMonitoredWhy(agent.spec.type)) return undefined;
  const s = agent.spec.monitor?.intervalSeconds ?? DEFAULT_MONITOR_INTERVAL_SECONDS;
  if (s <= 0) return undefined;
  return Math.max(s, MIN_MONITOR_INTERVAL_SECONDS) * 1000;
}

/** FNV-1a of a string: a stable spread of nodes over the interval (the same on every replica and after a restart). */
function hash(s: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < s.length; i++) {
    h ^= s.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  return h >>> 0;
}

/** Where in each period the node's query falls, in ms from the period's start: spread evenly over [0, periodMs). */
export function offsetMs(agent: string, node: string, periodMs: number): number {
  return hash(`${agent}/${node}`) % Math.max(1, Math.floor(periodMs));
}

export interface DueInput {
  agent: string;
  node: string;
  intervalMs: number;
  nowMs: number;
  /** When its last query started, undefined when never queried since `sinceMs`. */
  lastStartMs: number | undefined;
  /** When the monitor began watching this agent's current spec (its state was reset). */
  sinceMs: number;
}

/**
 * Whether the node's status query is due. Each node has its own slot in the period (offsetMs): it is due once a slot
 * has begun since its last query, so N nodes make N/interval queries per second, evenly, whatever their number and
 * however late some ran. A node never queried is due at its offset in the first-query window after `sinceMs`.
 */
export function isDue(i: DueInput): boolean {
  if (i.lastStartMs === undefined) {
    const window = Math.min(i.intervalMs, FIRST_QUERY_WINDOW_SECONDS * 1000);
    return i.nowMs >= i.sinceMs + offsetMs(i.agent, i.node, window);
  }
  const phase = offsetMs(i.agent, i.node, i.intervalMs);
  const slot = (t: number) => Math.floor((t - phase) / i.intervalMs);
  return slot(i.nowMs) > slot(i.lastStartMs);
}

/**
 * The nodes of one agent whose query is due, longest waiting first. `busy`: nodes not to query now (a fence or an
 * unfence of theirs is under way: fences come first, and their own operations say how the device answers).
 */
export function dueNodes(o: {
  agent: string;
  nodes: readonly string[];
  intervalMs: number;
  nowMs: number;
  sinceMs: number;
  lastStart: ReadonlyMap<string, number>;
  running: ReadonlySet<string>;
  busy: ReadonlySet<string>;
}): string[] {
  return o.nodes
    .filter((n) => !o.running.has(n) && !o.busy.has(n))
    .filter((n) =>
      isDue({ agent: o.agent, node: n, intervalMs: o.intervalMs, nowMs: o.nowMs, lastStartMs: o.lastStart.get(n), sinceMs: o.sinceMs }),
    )
    .sort((a, b) => (o.lastStart.get(a) ?? o.sinceMs) - (o.lastStart.get(b) ?? o.sinceMs) || a.localeCompare(b));
}

/** What the operator's cache holds about one node's agent record: the record parsed, and how long it has been seen unchanged. */
export interface RecordSighting {
  parsed: ParsedRecord;
  /** Monotonic ms the record has been seen unchanged by this process (from its first list when not renewed since). */
  silentMs: number;
}

/**
 * A watchdog agent's "status query" of one node: a look at the node's agent record in the operator's cache (no network,
 * no Secret, never an action). undefined while the cache has not listed (the node stays pending, not failed). Status
 * only: the fence machine reads the record fresh and decides by itself (decide/watchdog-evidence.ts).
 */
export function watchdogNodeResult(
  node: string,
  cache: { synced: boolean; sighting: RecordSighting | undefined },
  atMs: number,
): Omit<NodeResult, "failingSinceMs"> | undefined {
  if (!cache.synced) return undefined;
  const fail = (reason: WatchdogCoverageReason, message: string) => ({ ok: false, reason, message, atMs });
  const s = cache.sighting;
  if (!s)
    return fail(
      "NodeAgentMissing",
      `no node agent record for node ${node}: install manifests/node-agent/ or run the node agent on that node; until then its fence falls to the next escalation level`,
    );
  if (!s.parsed.ok)
    return fail(
      "NodeAgentRecordInvalid",
      `node ${node}'s agent record is unusable: ${s.parsed.problem}; check the node agent's version and logs`,
    );
  const r = s.parsed.record;
  if (r.node !== node) return fail("NodeAgentRecordInvalid", `the agent record read for node ${node} speaks for node ${r.node}`);
  if (!r.armed)
    return fail(
      "WatchdogUnarmed",
      `node ${node}'s agent runs with its watchdog unarmed: check its watchdog device (path, driver, permissions) and the agent's logs; WatchdogExpired never holds for it`,
    );
  const silentS = Math.floor(s.silentMs / 1000);
  if (s.silentMs > r.deadlineSeconds * 1000)
    return fail(
      "NodeAgentSilent",
      `node ${node}'s agent record has not been renewed for ${silentS} s, longer than its deadline D=${r.deadlineSeconds} s: the agent is not running or cannot reach the API`,
    );
  return {
    ok: true,
    message: `node ${node}'s agent holds its watchdog armed (T=${r.watchdogTimeoutSeconds} s, D=${r.deadlineSeconds} s), record renewed ${silentS} s ago`,
    atMs,
  };
}

/** The result of a finished query, carrying the start of the node's current run of failures over from `previous`. */
export function nextResult(previous: NodeResult | undefined, r: Omit<NodeResult, "failingSinceMs">): NodeResult {
  if (r.ok) return { ...r };
  const since = previous && !previous.ok ? (previous.failingSinceMs ?? previous.atMs) : r.atMs;
  return { ...r, failingSinceMs: since };
}

/** Whether a new result changes what the status says (the node's verdict or reason), not merely its time. */
export function resultChanged(a: NodeResult | undefined, b: NodeResult): boolean {
  return !a || a.ok !== b.ok || a.reason !== b.reason || (!b.ok && a.message !== b.message);
}

/** One failing node of status.monitor: the generated type, its reason narrowed to what the monitor writes. */
export type MonitorFailure = FenceAgentStatusMonitorFailures & { reason: MonitorReason };

/** status.monitor of a FenceAgent, as the monitor writes it (failures always present, at most MAX_LISTED_FAILURES). */
export type MonitorSummary = FenceAgentStatusMonitor & { failures: MonitorFailure[] };

export interface ConditionVerdict {
  status: "True" | "False" | "Unknown";
  reason: string;
  message: string;
}

export interface MonitorFold {
  /** The Reachable condition. */
  reachable: ConditionVerdict;
  /** status.monitor; undefined when the agent is not monitored. */
  summary: MonitorSummary | undefined;
  /** Every failing node, sorted (the summary lists only some). */
  failing: string[];
}

const iso = (ms: number) => new Date(ms).toISOString();

/** "node-3 (AuthFailed: …); node-5 (Unreachable: …) and 4 more" */
export function nameFailures(failures: readonly { node: string; reason?: string; message?: string }[], withMessages = true): string {
  const shown = failures
    .slice(0, NAMED_IN_MESSAGE)
    .map((f) => (withMessages && f.reason ? `${f.node} (${f.reason}: ${f.message ?? ""})` : f.node));
  const more = failures.length > NAMED_IN_MESSAGE ? ` and ${failures.length - NAMED_IN_MESSAGE} more` : "";
  return (withMessages ? shown.join("; ") : shown.join(", ")) + more;
}

/**
 * Folds the results kept for an agent into its Reachable condition and status.monitor. Only the nodes its policies
 * give it now count (`nodes`); a node without a result is pending.
 */
export function foldMonitor(o: { agent: FenceAgent; nodes: readonly string[]; results: ReadonlyMap<string, NodeResult> }): MonitorFold {
  const { agent } = o;
  const why = notMonitoredWhy(agent.spec.type);
  if (why) return { reachable: { status: "Unknown", reason: "NotMonitored", message: why }, summary: undefined, failing: [] };
  const intervalMs = monitorIntervalMs(agent);
  if (intervalMs === undefined)
    return {
      reachable: {
        status: "Unknown",
        reason: "MonitorDisabled",
        message: "spec.monitor.intervalSeconds is 0: no node's device is queried before it must be fenced",
      },
      summary: undefined,
      failing: [],
    };
  const intervalSeconds = intervalMs / 1000;
  const results = o.nodes.map((n) => [n, o.results.get(n)] as const);
  const done = results.filter((r): r is readonly [string, NodeResult] => r[1] !== undefined);
  const failingResults = done
    .filter(([, r]) => !r.ok)
    .sort(([a, x], [b, y]) => (x.failingSinceMs ?? x.atMs) - (y.failingSinceMs ?? y.atMs) || a.localeCompare(b));
  const reachable = done.length - failingResults.length;
  const pending = o.nodes.length - done.length;
  const last = Math.max(...done.map(([, r]) => r.atMs));
  const failures: MonitorFailure[] = failingResults.slice(0, MAX_LISTED_FAILURES).map(([node, r]) => ({
    node,
    reason: r.reason ?? "Failed",
    message: r.message.slice(0, FAILURE_MESSAGE_LIMIT),
    since: iso(r.failingSinceMs ?? r.atMs),
    lastQueryTime: iso(r.atMs),
  }));
  const summary: MonitorSummary = {
    intervalSeconds,
    observedGeneration: agent.metadata?.generation,
    nodes: o.nodes.length,
    reachable,
    failing: failingResults.length,
    pending,
    ...(done.length ? { lastQueryTime: iso(last) } : {}),
    failures,
  };
  const failing = failingResults.map(([n]) => n).sort();
  const watchdog = agent.spec.type === "watchdog";
  let verdict: ConditionVerdict;
  if (!o.nodes.length) verdict = { status: "Unknown", reason: "Unused", message: "no FencingPolicy names this agent for any node" };
  else if (failingResults.length) {
    const reasons = new Set(failingResults.map(([, r]) => r.reason ?? "Failed"));
    verdict = {
      status: "False",
      reason: reasons.size === 1 ? [...reasons][0]! : "NodesFailing",
      message:
        `${failingResults.length} of ${o.nodes.length} node(s) could not be fenced through this agent now: ` +
        (watchdog ? "their node agent does not cover them: " : "their status query failed: ") +
        nameFailures(failingResults.map(([node, r]) => ({ node, reason: r.reason, message: r.message.slice(0, 240) }))) +
        (watchdog
          ? ". Their fences fall to the next escalation level; nothing is fenced because of it"
          : ". Nothing is fenced because of it; fix the device, its network path or the credentials before these nodes fail"),
    };
  } else if (!done.length)
    verdict = {
      status: "Unknown",
      reason: "Pending",
      message: `no node queried yet: each of the ${o.nodes.length} node(s) is queried within ${Math.min(intervalSeconds, FIRST_QUERY_WINDOW_SECONDS)} s, then every ${intervalSeconds} s`,
    };
  else
    verdict = {
      status: "True",
      reason: "Reachable",
      message:
        (watchdog
          ? `${reachable} node(s) have an armed node agent (their records are looked at every ${intervalSeconds} s)`
          : `${reachable} node(s) answered a status query (every ${intervalSeconds} s)`) + (pending ? `; ${pending} not queried yet` : ""),
    };
  return { reachable: verdict, summary, failing };
}

export interface ConfigVerdict {
  ok: boolean;
  reason: string;
  message: string;
}

/**
 * The Ready condition: configured (the parameter check), and, where the monitor has answers, reachable and
 * authenticated. A configuration problem comes first; then a failing node; a monitor without answers yet (or an
 * agent it cannot query) leaves Ready to the configuration.
 */
export function readyVerdict(config: ConfigVerdict, reachable: ConditionVerdict | undefined): ConditionVerdict {
  if (!config.ok) return { status: "False", reason: config.reason, message: config.message };
  if (reachable?.status === "False") return { status: "False", reason: reachable.reason, message: reachable.message };
  const extra = reachable?.status === "True" ? `; ${reachable.message}` : "";
  return { status: "True", reason: config.reason, message: config.message + extra };
}

/**
 * The nodes that became failing and those that recovered since the monitor last said so (`reported`), for one
 * aggregate Event of each kind rather than one per node.
 */
export function failingTransitions(
  reported: ReadonlySet<string>,
  failing: readonly string[],
  nodes: readonly string[],
): { lost: string[]; recovered: string[] } {
  const now = new Set(failing);
  const served = new Set(nodes);
  return {
    lost: failing.filter((n) => !reported.has(n)),
    // A node no longer served by the agent (or deleted) did not recover: it just left.
    recovered: [...reported].filter((n) => !now.has(n) && served.has(n)).sort(),
  };
}
