// A NodeFence's status lists have a bound. Attempts and releases are appended for as long as a fence lives: a fence
// failing for days (a retry every 10 min, an attempt per agent each) or a release step that finds new
// VolumeAttachments (the attach/detach controller re-creates those of pods that still run) would grow the object
// toward etcd's size limit, after which every status write fails — the fence could then record nothing, not even
// an unfence. Past LIMIT entries the first KEEP_FIRST (how it began) and the last KEEP_LAST (what it does now) are
// kept, with every entry a decision still reads (below), and the others are counted in attemptsDropped /
// releasesDropped. Pure; applied by the NodeFence controller to every status it writes.
import type { NodeFenceStatus, NodeFenceStatusAttempts, NodeFenceStatusReleases } from "../api/v1alpha1.ts";

export interface StatusBound {
  /** A list longer than this is pruned. */
  limit: number;
  keepFirst: number;
  keepLast: number;
}

export const STATUS_BOUND: StatusBound = { limit: 50, keepFirst: 10, keepLast: 40 };

/**
 * The attempts the state machine (decide/fence-machine.ts) still reads, whatever their age:
 * - the current round's last of each (level, agent, operation): what the level has proven so far (fencingStep);
 * - each agent's last attempt of each operation: whether a power-on or a storage unfence was tried since the fence
 *   (powerOnStep, liftStorageStep: the last "on" is after the last "off" exactly when one was tried since);
 * - each agent's last success of each operation, per recorded type: whether a storage fence is held
 *   (storageFencesHeld, the last success of a storage agent) and since when (liftStorageStep's last "off");
 * - each agent's first "on" (not Interrupted) since its last "off": how long a storage lift has been failing, which
 *   spaces its retries (liftStorageStep).
 * The order of what is kept is the order it had, so "the last" of any of these reads the same after pruning.
 */
function neededAttempts(attempts: readonly NodeFenceStatusAttempts[], round: number): Set<number> {
  const last = new Map<string, number>();
  /** Per agent, the first "on" not Interrupted since its last "off". */
  const firstOn = new Map<string, number>();
  attempts.forEach((a, i) => {
    if ((a.round ?? 0) === round) last.set(JSON.stringify(["round", a.level, a.agent, a.operation]), i);
    last.set(JSON.stringify(["last", a.agent, a.operation]), i);
    if (a.outcome === "Succeeded") last.set(JSON.stringify(["succeeded", a.agent, a.agentType ?? "", a.operation]), i);
    if (a.operation === "off") firstOn.delete(a.agent);
    else if (a.operation === "on" && a.outcome !== "Interrupted" && !firstOn.has(a.agent)) firstOn.set(a.agent, i);
  });
  return new Set([...last.values(), ...firstOn.values()]);
}

/**
 * Releases a decision still reads: every Pod record (a pod is never force-deleted twice: podsToRelease) and every Taint
 * record (the out-of-service taint added is removed, and only once: releaseStep, the controller's unmark). The others
 * need no record to stay idempotent: a broken claim lock no longer names the pod (claimLocksToBreak skips it), a
 * deleted VolumeAttachment is gone (a stale cache's copy is deleted by uid precondition: AlreadyGone).
 */
const neededRelease = (r: NodeFenceStatusReleases) => r.kind === "Pod" || r.kind === "Taint";

/** Indices to keep of a list of n: the first, the last, and those needed. */
function keep(n: number, needed: (i: number) => boolean, b: StatusBound): number[] {
  const out: number[] = [];
  for (let i = 0; i < n; i++) if (i < b.keepFirst || i >= n - b.keepLast || needed(i)) out.push(i);
  return out;
}

/** The status with its attempts and releases within the bound (a new object when something was dropped). */
export function boundStatus(status: NodeFenceStatus, b: StatusBound = STATUS_BOUND): NodeFenceStatus {
  let out = status;
  const attempts = status.attempts ?? [];
  // Attempts are known by their index to the operations running for them (controllers/node-fence/agent-operations.ts): none is
  // dropped while one runs, so that no index moves under it. The write that records its end prunes.
  if (attempts.length > b.limit && !attempts.some((a) => a.outcome === "InProgress")) {
    const needed = neededAttempts(attempts, status.round ?? 0);
    const kept = keep(attempts.length, (i) => needed.has(i), b);
    if (kept.length < attempts.length)
      out = {
        ...out,
        attempts: kept.map((i) => attempts[i]!),
        attemptsDropped: (status.attemptsDropped ?? 0) + attempts.length - kept.length,
      };
  }
  const releases = status.releases ?? [];
  if (releases.length > b.limit) {
    const kept = keep(releases.length, (i) => neededRelease(releases[i]!), b);
    if (kept.length < releases.length)
      out = {
        ...out,
        releases: kept.map((i) => releases[i]!),
        releasesDropped: (status.releasesDropped ?? 0) + releases.length - kept.length,
      };
  }
  return out;
}
