// Node health from the two heartbeats a kubelet gives: the node Lease (renewed every few seconds) and
// the Ready condition (whose status the node-lifecycle controller turns Unknown when heartbeats stop).
// Partitioned needs both: a stale Lease alone may be a broken lease controller; Ready=Unknown alone
// is what the controller says before its grace period is over.
import { isDeepStrictEqual } from "node:util";
import type { V1Lease, V1Node } from "@kubernetes/client-node";
import { DateTime } from "luxon";

export type HealthState = "Healthy" | "Suspect" | "Partitioned";

export const DEFAULT_HEARTBEAT_TIMEOUT_SECONDS = 40;

export interface NodeHealth {
  name: string;
  state: HealthState;
  /** Status of the Ready condition: True, False, Unknown, or Missing. */
  ready: string;
  /** The newest heartbeat from either source; undefined when the node never reported. */
  readonly lastHeartbeat: DateTime | undefined;
  /** The same, in epoch milliseconds. */
  lastHeartbeatMs: number | undefined;
  /** When silence became a partition (lastHeartbeat + timeout), for Partitioned nodes. */
  partitionedSince: DateTime | undefined;
  bootID: string;
  /** No heartbeat for the timeout, whatever Ready says: the storm guard counts these before the node controller agrees. */
  silent: boolean;
  /**
   * Missed two renewals of its own Lease (leaseDurationSeconds / 2), or silent: the storm guard counts these too.
   * Nodes cut off at the same moment renewed last up to one renewal period apart, so they go silent that far
   * apart; counted only once silent, the first could be fenced before the others count (a 10 s spread against
   * the default 10 s fenceAfterSeconds). Counting a node that missed two renewals only ever holds fences back.
   */
  lagging: boolean;
  /** When this node's state would change with no further events (a heartbeat going stale). */
  readonly nextCheck: DateTime | undefined;
  /** The same, in epoch milliseconds. */
  nextCheckMs: number | undefined;
  /** The heartbeat timeout applied: the policy's, raised to two renewals of the node's own Lease. */
  timeoutSeconds: number;
}

/**
 * A kubelet renews its Lease every leaseDurationSeconds / 4 (10 s of its default 40 s). A timeout shorter than two
 * renewals would make a healthy node look silent between two of them: it is raised to that, per node.
 */
export function effectiveTimeoutSeconds(lease: V1Lease | undefined, heartbeatTimeoutSeconds: number): number {
  const duration = lease?.spec?.leaseDurationSeconds ?? 0;
  return Math.max(heartbeatTimeoutSeconds, duration / 2);
}

/** How long without a heartbeat makes a node lagging: two renewals of its Lease, or the timeout if sooner. */
export function lagSecondsOf(lease: V1Lease | undefined, timeoutSeconds: number): number {
  return Math.min(timeoutSeconds, (lease?.spec?.leaseDurationSeconds ?? 0) / 2 || timeoutSeconds);
}

export const toDateTime = (v: Date | string | undefined | null): DateTime | undefined => {
  if (v === undefined || v === null) return undefined;
  const d = typeof v === "string" ? DateTime.fromISO(v) : DateTime.fromJSDate(v);
  return d.isValid ? d : undefined;
};

/**
 * Whether a Node update changed anything but its conditions' heartbeat times (and resourceVersion): the kubelet's
 * routine status write. Labels, taints, annotations, a condition's status or reason, the boot ID, addresses: any
 * other change counts. Both must be shaped alike (a listed object is a class with Dates, a watched one plain JSON):
 * unlike shapes count as a change, which only costs a pass.
 */
export function nodeChangedBeyondHeartbeat(n: V1Node, old: V1Node): boolean {
  const strip = (x: V1Node) => ({
    ...x,
    metadata: { ...x.metadata, resourceVersion: undefined, managedFields: undefined },
    status: x.status && { ...x.status, conditions: x.status.conditions?.map((c) => ({ ...c, lastHeartbeatTime: undefined })) },
  });
  return !isDeepStrictEqual(strip(n), strip(old));
}

export function readyCondition(node: V1Node) {
  return node.status?.conditions?.find((c) => c.type === "Ready");
}

/** Whether this Node update (or add: no `old`) turned its Ready condition Unknown: what makes a partitioned node's fence due. */
export function readyTurnedUnknown(n: V1Node, old: V1Node | undefined): boolean {
  return readyCondition(n)?.status === "Unknown" && (!old || readyCondition(old)?.status !== "Unknown");
}

/** Epoch milliseconds of a timestamp as the API client gives it (a Date from a list, a string from a watch). */
function millisOf(v: Date | string | undefined | null): number | undefined {
  if (v === undefined || v === null) return undefined;
  const ms = typeof v === "string" ? Date.parse(v) : v.getTime();
  return Number.isNaN(ms) ? undefined : ms;
}

/**
 * The last string parsed for the object that holds a heartbeat (a Lease's spec, a Ready condition). Every pass reads
 * every node's two heartbeats (10,000 Date.parse a pass at 5,000 nodes) and each changes once a renewal. Only reused
 * for the very string parsed: an object changed in place is parsed again, never read stale.
 */
const parsedBeats = new WeakMap<object, { v: string; ms: number | undefined }>();

function beatMillis(holder: object | undefined, v: Date | string | undefined | null): number | undefined {
  if (holder === undefined || typeof v !== "string") return millisOf(v);
  const seen = parsedBeats.get(holder);
  if (seen !== undefined && seen.v === v) return seen.ms;
  const ms = millisOf(v);
  parsedBeats.set(holder, { v, ms });
  return ms;
}

// Runs for every node on every fleet decision: plain epoch milliseconds, and a DateTime only when one is read (a
// luxon DateTime computes its calendar fields when made: two per node were most of assessNode's time, 5x).
export function assessNode(node: V1Node, lease: V1Lease | undefined, now: DateTime, heartbeatTimeoutSeconds: number): NodeHealth {
  const name = node.metadata?.name ?? "";
  const ready = readyCondition(node);
  const readyStatus = ready?.status ?? "Missing";
  const leaseBeat = beatMillis(lease?.spec, lease?.spec?.renewTime);
  const readyBeat = beatMillis(ready, ready?.lastHeartbeatTime);
  const lastMs = leaseBeat === undefined ? readyBeat : readyBeat === undefined ? leaseBeat : Math.max(leaseBeat, readyBeat);
  const bootID = node.status?.nodeInfo?.bootID ?? "";
  const timeoutSeconds = effectiveTimeoutSeconds(lease, heartbeatTimeoutSeconds);
  const lagSeconds = lagSecondsOf(lease, timeoutSeconds);
  const nowMs = now.toMillis();
  const lagging = lastMs !== undefined && nowMs >= lastMs + lagSeconds * 1000;
  const health = (state: HealthState, silent: boolean, partitionedSince: DateTime | undefined, nextCheckMs: number | undefined) =>
    new LazyHealth(name, state, readyStatus, lastMs, partitionedSince, bootID, silent, lagging, nextCheckMs, timeoutSeconds) as NodeHealth;
  if (lastMs === undefined) {
    // A node that never reported is being created, not partitioned.
    return health("Suspect", false, undefined, undefined);
  }
  const staleAtMs = lastMs + timeoutSeconds * 1000;
  if (nowMs < staleAtMs) return health(readyStatus === "True" ? "Healthy" : "Suspect", false, undefined, staleAtMs);
  if (readyStatus !== "Unknown") {
    // Silent but the node controller has not yet agreed (it turns Ready Unknown after its grace period and
    // wakes us with an event); automatic fencing needs both signals.
    return health("Suspect", true, undefined, undefined);
  }
  return health("Partitioned", true, DateTime.fromMillis(staleAtMs, { zone: "utc" }), undefined);
}

const utc = (ms: number | undefined) => (ms === undefined ? undefined : DateTime.fromMillis(ms, { zone: "utc" }));

/**
 * A NodeHealth whose lastHeartbeat and nextCheck are DateTimes made on first read. Fields set one by one, not copied
 * from an object: one is made per node per pass (5,000 a pass), and the copy was a tenth of the pass.
 */
class LazyHealth implements NodeHealth {
  readonly name: string;
  readonly state: HealthState;
  readonly ready: string;
  readonly lastHeartbeatMs: number | undefined;
  readonly partitionedSince: DateTime | undefined;
  readonly bootID: string;
  readonly silent: boolean;
  readonly lagging: boolean;
  readonly nextCheckMs: number | undefined;
  readonly timeoutSeconds: number;
  #beat: DateTime | undefined | null = null;
  #next: DateTime | undefined | null = null;
  constructor(
    name: string,
    state: HealthState,
    ready: string,
    lastHeartbeatMs: number | undefined,
    partitionedSince: DateTime | undefined,
    bootID: string,
    silent: boolean,
    lagging: boolean,
    nextCheckMs: number | undefined,
    timeoutSeconds: number,
  ) {
    this.name = name;
    this.state = state;
    this.ready = ready;
    this.lastHeartbeatMs = lastHeartbeatMs;
    this.partitionedSince = partitionedSince;
    this.bootID = bootID;
    this.silent = silent;
    this.lagging = lagging;
    this.nextCheckMs = nextCheckMs;
    this.timeoutSeconds = timeoutSeconds;
  }
  get lastHeartbeat(): DateTime | undefined {
    return this.#beat === null ? (this.#beat = utc(this.lastHeartbeatMs)) : this.#beat;
  }
  get nextCheck(): DateTime | undefined {
    return this.#next === null ? (this.#next = utc(this.nextCheckMs)) : this.#next;
  }
}
