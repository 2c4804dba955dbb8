// Node health from the two heartbeats a kubelet gives: the node Lease (renewed every few seconds) and
// the Ready condition (whose status the node-lifecycle controller turns Unknown when heartbeats stop).
// Partitioned needs both: a stale Lease alone may be a broken lease controller; Ready=Unknown alone
// is what the controller says before its grace period is over.
import type { V1Node } from "@kubernetes/client-node";
import type { V1Lease } from "@kubernetes/client-node";
import { DateTime } from "luxon";

export type HealthState = "Healthy" | "Suspect" | "Partitioned";

export const DEFAULT_HEARTBEAT_TIMEOUT_SECONDS = 40;

export interface NodeHealth {
  name: string;
  state: HealthState;
  /** Status of the Ready condition: True, False, Unknown, or Missing. */
  ready: string;
  /** The newest heartbeat from either source; undefined when the node never reported. */
  lastHeartbeat: DateTime | undefined;
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
  nextCheck: DateTime | undefined;
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

export const toDateTime = (v: Date | string | undefined | null): DateTime | undefined => {
  if (v === undefined || v === null) return undefined;
  const d = typeof v === "string" ? DateTime.fromISO(v) : DateTime.fromJSDate(v);
  return d.isValid ? d : undefined;
};

const later = (a: DateTime | undefined, b: DateTime | undefined) => (!a ? b : !b ? a : a > b ? a : b);

export function readyCondition(node: V1Node) {
  return node.status?.conditions?.find((c) => c.type === "Ready");
}

export function assessNode(node: V1Node, lease: V1Lease | undefined, now: DateTime, heartbeatTimeoutSeconds: number): NodeHealth {
  const name = node.metadata?.name ?? "";
  const ready = readyCondition(node);
  const readyStatus = ready?.status ?? "Missing";
  const leaseBeat = toDateTime(lease?.spec?.renewTime);
  const lastHeartbeat = later(leaseBeat, toDateTime(ready?.lastHeartbeatTime));
  const bootID = node.status?.nodeInfo?.bootID ?? "";
  const timeoutSeconds = effectiveTimeoutSeconds(lease, heartbeatTimeoutSeconds);
  const lagSeconds = Math.min(timeoutSeconds, (lease?.spec?.leaseDurationSeconds ?? 0) / 2 || timeoutSeconds);
  const lagging = !!lastHeartbeat && now >= lastHeartbeat.plus({ seconds: lagSeconds });
  const base = { name, ready: readyStatus, lastHeartbeat, bootID, timeoutSeconds, lagging };
  if (!lastHeartbeat) {
    // A node that never reported is being created, not partitioned.
    return { ...base, silent: false, state: "Suspect", partitionedSince: undefined, nextCheck: undefined };
  }
  const staleAt = lastHeartbeat.plus({ seconds: timeoutSeconds });
  if (now < staleAt) {
    return {
      ...base,
      silent: false,
      state: readyStatus === "True" ? "Healthy" : "Suspect",
      partitionedSince: undefined,
      nextCheck: staleAt,
    };
  }
  if (readyStatus !== "Unknown") {
    // Silent but the node controller has not yet agreed (it turns Ready Unknown after its grace period and
    // wakes us with an event); automatic fencing needs both signals.
    return { ...base, silent: true, state: "Suspect", partitionedSince: undefined, nextCheck: undefined };
  }
  return { ...base, silent: true, state: "Partitioned", partitionedSince: staleAt, nextCheck: undefined };
}
