// Node health from the two heartbeats a kubelet gives: the node Lease (renewed every few seconds) and
// the Ready condition (whose status the node-lifecycle controller turns Unknown when heartbeats stop).
// Partitioned needs silence (neither heartbeat for the timeout) and a second signal, whichever comes first:
// the node's own Lease expired, or the node controller's Ready=Unknown. With waitForNodeController only the latter
// counts. Ready=Unknown alone is what the controller says before the silence is long enough.
// The Lease's expiry is measured as the node controller measures it: on the operator's monotonic clock, from when it
// saw the Lease's current renewTime (leaseObservedSilentMs, kube/lease-observer.ts), never from renewTime's value,
// which the node's clock wrote (a node 40 s behind would look expired while renewing) and which an operator wall
// clock jumping forward would age. Without an observation the Lease does not count; renewTime + leaseDurationSeconds
// on the wall clock (leaseExpiresMs) is only shown.
import { isDeepStrictEqual } from "node:util";
import type { V1Lease, V1Node } from "@kubernetes/client-node";
import { DateTime } from "luxon";

export type HealthState = "Healthy" | "Suspect" | "Partitioned";

export const DEFAULT_HEARTBEAT_TIMEOUT_SECONDS = 30;

/** Which second signal made a silent node partitioned: its own Lease expired, or the node controller's Ready=Unknown. */
export type PartitionedBy = "Lease" | "NodeController";

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
  /**
   * Lagging or silent by the wall clock, yet this replica saw its Lease renewed within two renewals (monotonic clock,
   * since it could last see): the node is talking, whatever its renewTime's value says (a node whose clock runs
   * behind looks lagging by it). The storm guards do not count a node they heard. False wherever the wall clock agrees.
   */
  heard: boolean;
  /** When this node's state would change with no further events (a heartbeat going stale). */
  readonly nextCheck: DateTime | undefined;
  /** The same, in epoch milliseconds. */
  nextCheckMs: number | undefined;
  /** The heartbeat timeout applied: the policy's, raised to two renewals of the node's own Lease. */
  timeoutSeconds: number;
  /** For Partitioned nodes: NodeController when Ready was already Unknown, else Lease (observed silent for its duration). */
  partitionedBy: PartitionedBy | undefined;
  /**
   * renewTime + leaseDurationSeconds, epoch ms, on the node's clock as written; undefined without both. For display
   * only (reason, explain): whether the Lease expired is measured on the operator's monotonic clock (leaseObservedSilentMs).
   */
  leaseExpiresMs: number | undefined;
  /** The same, as a DateTime. */
  readonly leaseExpiry: DateTime | undefined;
  /** The Lease's leaseDurationSeconds, when it has a positive one. */
  leaseDurationSeconds: number | undefined;
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
 * routine status write. Labels, taints, annotations, a condition's status or reason, the boot ID, addresses, who owns
 * a condition's status (the cache keeps only that of managedFields, without times): any other change counts. Both
 * must be shaped alike (a listed object is a class with Dates, a watched one plain JSON): unlike shapes count as a
 * change, which only costs a pass.
 */
export function nodeChangedBeyondHeartbeat(n: V1Node, old: V1Node): boolean {
  const strip = (x: V1Node) => ({
    ...x,
    metadata: { ...x.metadata, resourceVersion: undefined },
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

/** The Lease's positive leaseDurationSeconds, or undefined (no Lease, none set, or nonsense): then it gives no expiry. */
function leaseDurationOf(lease: V1Lease | undefined): number | undefined {
  const d = lease?.spec?.leaseDurationSeconds;
  return typeof d === "number" && Number.isFinite(d) && d > 0 ? d : undefined;
}

// Runs for every node on every fleet decision: plain epoch milliseconds, and a DateTime only when one is read (a
// luxon DateTime computes its calendar fields when made: two per node were most of assessNode's time, 5x).
// waitForNodeController: only Ready=Unknown counts as the second signal (the policy's detection.waitForNodeController).
// leaseObservedSilentMs: how long this process has seen the Lease's current renewTime unchanged (monotonic ms, only
// over time it could see); the Lease is expired once that reaches leaseDurationSeconds, and a Ready=Unknown node is
// partitioned only once it reaches the heartbeat timeout. Without it (the CLI) the Lease never counts.
export function assessNode(
  node: V1Node,
  lease: V1Lease | undefined,
  now: DateTime,
  heartbeatTimeoutSeconds: number,
  waitForNodeController = false,
  leaseObservedSilentMs?: number,
): NodeHealth {
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
  const leaseDuration = leaseDurationOf(lease);
  const heardLeftMs =
    leaseObservedSilentMs !== undefined && Number.isFinite(leaseObservedSilentMs) ? lagSeconds * 1000 - leaseObservedSilentMs : 0;
  // Only where the wall clock says otherwise (lagging or silent by renewTime's value): elsewhere it changes nothing.
  const heard = heardLeftMs > 0 && lastMs !== undefined && nowMs >= lastMs + lagSeconds * 1000;
  // Both read from the Lease object; a renewTime ahead of our clock expires that much later (never earlier).
  const leaseExpiresMs = leaseDuration !== undefined && leaseBeat !== undefined ? leaseBeat + leaseDuration * 1000 : undefined;
  const health = (
    state: HealthState,
    silent: boolean,
    partitionedSince: DateTime | undefined,
    nextCheckMs: number | undefined,
    by?: PartitionedBy,
  ) =>
    new LazyHealth(
      name,
      state,
      readyStatus,
      lastMs,
      partitionedSince,
      bootID,
      silent,
      lagging,
      heard,
      nextCheckMs,
      timeoutSeconds,
      by,
      leaseExpiresMs,
      leaseDuration,
    ) as NodeHealth;
  if (lastMs === undefined) {
    // A node that never reported is being created, not partitioned.
    return health("Suspect", false, undefined, undefined);
  }
  const staleAtMs = lastMs + timeoutSeconds * 1000;
  if (nowMs < staleAtMs) return health(readyStatus === "True" ? "Healthy" : "Suspect", false, undefined, staleAtMs);
  const since = () => DateTime.fromMillis(staleAtMs, { zone: "utc" });
  const observed = leaseObservedSilentMs;
  const seen = observed !== undefined && Number.isFinite(observed);
  if (readyStatus === "Unknown") {
    // Silence counts only over time this replica could see (kube/sight.ts): after an outage every renewTime is old by
    // the wall clock, and the node controller's Ready=Unknown may be its own view of the same outage. Where the
    // operator watches the Lease, it must itself have seen it unchanged for the timeout.
    const leftMs = seen ? timeoutSeconds * 1000 - Math.max(0, observed) : 0;
    if (leftMs > 0) return health("Suspect", true, undefined, nowMs + leftMs);
    return health("Partitioned", true, since(), undefined, "NodeController");
  }
  // Silent, and the node controller has not yet agreed (it turns Ready Unknown after its grace period and wakes us
  // with an event). The node's own Lease says how long it may stay silent: once this process has seen its renewTime
  // unchanged for leaseDurationSeconds, that is the second signal.
  const byLease = !waitForNodeController && leaseExpiresMs !== undefined && seen;
  if (!byLease) return health("Suspect", true, undefined, undefined);
  const leftMs = leaseDuration! * 1000 - Math.max(0, observed);
  if (leftMs <= 0) return health("Partitioned", true, since(), undefined, "Lease");
  return health("Suspect", true, undefined, nowMs + leftMs);
}

/** Which second signal made a partitioned node so, in words (for the NodeFence's reason and `explain`). */
export function partitionSignal(h: Pick<NodeHealth, "partitionedBy" | "leaseExpiresMs" | "leaseDurationSeconds">): string {
  if (h.partitionedBy === "Lease" && h.leaseExpiresMs !== undefined && h.leaseDurationSeconds !== undefined) {
    const renewed = utc(h.leaseExpiresMs - h.leaseDurationSeconds * 1000)?.toISO();
    return `its Lease was not renewed for its leaseDurationSeconds ${h.leaseDurationSeconds}, as this operator observed (renewTime ${renewed}, on the node's clock)`;
  }
  if (h.partitionedBy === "NodeController") return "the node controller marked it Ready=Unknown";
  return "it is not partitioned";
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
  readonly heard: boolean;
  readonly nextCheckMs: number | undefined;
  readonly timeoutSeconds: number;
  readonly partitionedBy: PartitionedBy | undefined;
  readonly leaseExpiresMs: number | undefined;
  readonly leaseDurationSeconds: number | undefined;
  #expiry: DateTime | undefined | null = null;
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
    heard: boolean,
    nextCheckMs: number | undefined,
    timeoutSeconds: number,
    partitionedBy: PartitionedBy | undefined,
    leaseExpiresMs: number | undefined,
    leaseDurationSeconds: number | undefined,
  ) {
    this.name = name;
    this.state = state;
    this.ready = ready;
    this.lastHeartbeatMs = lastHeartbeatMs;
    this.partitionedSince = partitionedSince;
    this.bootID = bootID;
    this.silent = silent;
    this.lagging = lagging;
    this.heard = heard;
    this.nextCheckMs = nextCheckMs;
    this.timeoutSeconds = timeoutSeconds;
    this.partitionedBy = partitionedBy;
    this.leaseExpiresMs = leaseExpiresMs;
    this.leaseDurationSeconds = leaseDurationSeconds;
  }
  get leaseExpiry(): DateTime | undefined {
    return this.#expiry === null ? (this.#expiry = utc(this.leaseExpiresMs)) : this.#expiry;
  }
  get lastHeartbeat(): DateTime | undefined {
    return this.#beat === null ? (this.#beat = utc(this.lastHeartbeatMs)) : this.#beat;
  }
  get nextCheck(): DateTime | undefined {
    return this.#next === null ? (this.#next = utc(this.nextCheckMs)) : this.#next;
  }
}
