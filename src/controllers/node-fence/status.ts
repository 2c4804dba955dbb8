// The NodeFence's status write: computed from the current status, bounded, stamped with our leader epoch, and never
// over a status a newer leader wrote (the resourceVersion guards the rest). Status is the only memory a restarted or
// newly elected operator needs.
import { isDeepStrictEqual } from "node:util";
import type { NodeFence } from "../../api/v1alpha1.ts";
import { STORAGE_FENCE_HELD_CONDITION, storageFenceCondition } from "../../decide/fence-machine.ts";
import { boundStatus } from "../../decide/status-bound.ts";
import { findCondition, type Condition } from "../../kube/conditions.ts";
import { NotLeaderError, SOLE_LEADER, SoleLeadership } from "../../runtime/leader.ts";
import type { Status, StepContext } from "./context.ts";

type Writer = Pick<StepContext, "d" | "leadership" | "cond" | "event" | "announce">;

/** Writes a new status computed from the current one, stamped with our leader epoch; returns the stored object. */
export async function writeStatus(c: Writer, fence: NodeFence, change: (s: Status) => Status): Promise<NodeFence> {
  const epoch = c.leadership.epoch;
  const elected = !(c.leadership instanceof SoleLeadership) && c.leadership !== SOLE_LEADER;
  if (elected && (fence.status?.leaderEpoch ?? 0) > epoch)
    throw new NotLeaderError(
      `NodeFence ${fence.metadata?.name} was last written by leader epoch ${fence.status?.leaderEpoch}, newer than ours (${epoch}): another replica leads`,
    );
  // Within the bound on its lists (decide/status-bound.ts), however long the fence lives.
  const status = boundStatus(change(structuredClone(fence.status ?? {})));
  status.observedGeneration = fence.metadata?.generation;
  // The level as people count it, for the Level column: kept in step with currentLevel in every write.
  if (status.currentLevel !== undefined) status.levelNumber = status.currentLevel + 1;
  else delete status.levelNumber;
  const held = storageHeld(c, fence, status);
  // Without leader election there is no epoch to compare: the one recorded stays.
  if (elected) status.leaderEpoch = epoch;
  // A wait asked again (the same condition, reason and message) changes nothing: no round trip for it.
  if (isDeepStrictEqual(status, fence.status)) return fence;
  const next = await c.d.kube.replaceStatus("nodefences", { ...fence, status });
  held.announce(next);
  return next;
}

/**
 * Sets the StorageFenceHeld condition on a status about to be written (every storage fence that may be up is said
 * so until it is lifted), and returns how to announce a change of it once written: an Event when one is held, all
 * are lifted, or they were abandoned (a Warning).
 */
function storageHeld(c: Writer, fence: NodeFence, status: Status): { announce: (written: NodeFence) => void } {
  const agents = new Map(c.d.caches.agents.list().map((a) => [a.metadata?.name ?? "", a] as const));
  const held = storageFenceCondition({ fence: { ...fence, status }, agents });
  const before = findCondition(fence.status?.conditions as Condition[] | undefined, STORAGE_FENCE_HELD_CONDITION);
  if (!held) return { announce: () => {} };
  c.cond(status, { type: STORAGE_FENCE_HELD_CONDITION, ...held }, fence);
  if (before?.status === held.status && before.reason === held.reason) return { announce: () => {} };
  const reason =
    held.status === "False" ? "StorageFenceLifted" : held.reason === "Abandoned" ? "StorageFenceAbandoned" : "StorageFenceHeld";
  // Up is what a storage fence is for (Normal); abandoned, it stays up with nobody to lift it (Warning).
  const type = held.reason === "Abandoned" ? "Warning" : "Normal";
  return { announce: (written) => c.announce(c.event(written, type, reason, held.message)) };
}
