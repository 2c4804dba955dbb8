// The fence's FenceRecord (decide/fence-history.ts), brought up to date from its status at HISTORY_STEPS and, once
// the NodeFence is deleted, before its finalizer goes. Only the leader writes history: a replica that lost the Lease
// could otherwise land an older record over the new leader's. Not leading stops the reconcile, as it stops every step.
import type { V1Node } from "@kubernetes/client-node";
import { DateTime } from "luxon";
import type { NodeFence } from "../../api/v1alpha1.ts";
import type { Step } from "../../decide/fence-machine.ts";
import { errorMessage } from "../../kube/api.ts";
import type { Leadership } from "../../runtime/leader.ts";
import type { NodeFenceDeps } from "./deps.ts";
import { announce, fenceEvents } from "./events.ts";

/**
 * Where the fence's FenceRecord is brought up to date from its status (decide/fence-history.ts): before an agent runs
 * (the first side effect of an episode: its record exists before anything is powered off), whenever the fence waits
 * (for an agent, a retry, a person) and once it is done — and, in finalize, before its finalizer goes. Not before the
 * steps in between, which follow each other at once: a record write on that path would delay the release.
 */
export const HISTORY_STEPS = new Set<Step["kind"]>(["runAgent", "wait", "done"]);
/**
 * How long a deleted NodeFence keeps its finalizer while its FenceRecord cannot be written: then it goes anyway (with
 * a Warning Event carrying the episode), since the next episode of the node waits for it to be gone.
 */
export const HISTORY_FINALIZE_GRACE_MS = 120_000;

export class HistoryRecorder {
  private readonly d: NodeFenceDeps;
  private readonly leadership: Leadership;
  /** NodeFences (by uid) whose record could not be written: one Warning Event each until it can. */
  private readonly failing = new Set<string>();

  constructor(d: NodeFenceDeps, leadership: Leadership) {
    this.d = d;
    this.leadership = leadership;
  }

  /**
   * Brings the fence's FenceRecord up to date. A record that cannot be written holds nothing back (a dead node's
   * workloads do not wait for history): a Warning Event says so once, and the next write point tries again — the
   * record is derived from status, so nothing is lost meanwhile, and finalize writes it before the finalizer goes.
   */
  async record(fence: NodeFence, node: V1Node | undefined): Promise<void> {
    if (!this.d.history) return;
    const uid = fence.metadata?.uid ?? "";
    this.leadership.assertLeading(`write the FenceRecord of NodeFence ${fence.metadata?.name}`);
    try {
      await this.d.history.sync(fence);
      this.failing.delete(uid);
    } catch (err) {
      const msg = `could not write the FenceRecord of this episode (${errorMessage(err)}); fencing goes on, and it is written again from the NodeFence's status at the next step`;
      this.d.log.warn({ nodeFence: fence.metadata?.name }, msg);
      if (!this.failing.has(uid))
        announce(this.d.inflight, fenceEvents(this.d.events, fence, "Warning", "FenceHistoryNotRecorded", msg, node));
      this.failing.add(uid);
    }
  }

  /** Writes the record of a deleted fence's episode, or, past HISTORY_FINALIZE_GRACE_MS of failures, says it in Events. */
  async final(fence: NodeFence, node: V1Node | undefined): Promise<void> {
    if (!this.d.history) return;
    const since = fence.metadata?.deletionTimestamp ? DateTime.fromJSDate(new Date(fence.metadata.deletionTimestamp)) : this.d.clock();
    const deleted = { time: since.toUTC().toISO({ suppressMilliseconds: true }) ?? this.d.clock().toUTC().toISO() ?? "" };
    this.leadership.assertLeading(`write the FenceRecord of NodeFence ${fence.metadata?.name}`);
    try {
      await this.d.history.sync(fence, deleted);
    } catch (err) {
      const waited = this.d.clock().diff(since).as("milliseconds");
      if (waited < HISTORY_FINALIZE_GRACE_MS)
        throw new Error(
          `NodeFence ${fence.metadata?.name} deleted: its FenceRecord could not be written (${errorMessage(err)}); tried again before its finalizer goes`,
          { cause: err },
        );
      const s = fence.status ?? {};
      const msg = `NodeFence ${fence.metadata?.name} deleted without its FenceRecord (${errorMessage(err)} for ${Math.round(waited / 1000)} s): phase ${s.phase}, started ${s.startTime ?? "-"}, evidence ${s.evidence?.method ?? "none"}, reason: ${fence.spec.reason ?? "-"}`;
      this.d.log.warn({ nodeFence: fence.metadata?.name }, msg);
      await Promise.all(fenceEvents(this.d.events, fence, "Warning", "FenceHistoryNotRecorded", msg, node));
    }
  }

  /** The fence is gone: its record is final, and nothing more is said about it. */
  forget(uid: string): void {
    this.d.history?.forget(uid);
    this.failing.delete(uid);
  }
}
