// The NodeFence controller: performs the state machine's next step (decide/fence-machine.ts), writes what
// happened to status (resourceVersion-guarded, stamped with the leader epoch), and asks again, until the
// machine says wait or done. Status is the only memory a restarted or newly elected operator needs.
//
// Each step is decided on the Node and its Lease read from the apiserver (never the cache) after the last write, so
// the destructive call that follows is made on a fresh view; bookkeeping steps (REUSABLE_VIEW) may use the read of
// the step before. Leadership is asserted right before each destructive call.
// Agent operations run in the background (agent-operations.ts): no worker waits on a BMC or a person.
import { isDeepStrictEqual } from "node:util";
import type { V1Lease, V1Node, V1Taint } from "@kubernetes/client-node";
import { DateTime } from "luxon";
import type { Logger } from "pino";
import { API_VERSION, type FenceAgent, type NodeFence, type NodeFenceStatus } from "../api/v1alpha1.ts";
import { resolveParameters, secretRefsFor } from "../agents/parameters.ts";
import { driverFor, loadRules, storageDriverFor } from "../agents/registry.ts";
import { runStorageFence } from "../agents/run-storage.ts";
import { networkFenceApi } from "../kube/network-fence.ts";
import { checkUniqueTarget } from "../agents/targets.ts";
import { fenceOff, redact, runOperation } from "../agents/run.ts";
import { AgentError } from "../agents/types.ts";
import {
  CONFIRMED_OFF_ANNOTATION,
  DEFAULT_HEARTBEAT_TIMEOUT_SECONDS,
  FENCED_TAINT,
  FINALIZER,
  ABANDON_STORAGE_FENCES_ANNOTATION,
  STORAGE_FENCE_HELD_CONDITION,
  abandonedStorageFences,
  claimLockMessage,
  storageFenceCondition,
  OUT_OF_SERVICE_TAINT,
  agentRunning,
  attemptFacts,
  powerOffRefused,
  nextStep,
  targetNode,
  type FenceObservation,
  type ReleaseItem,
  type Step,
} from "../decide/fence-machine.ts";
import { LOCK_ANNOTATION, breakLock, formatLock } from "../decide/claim-lock.ts";
import { boundStatus } from "../decide/status-bound.ts";
import { releaseCounts } from "../decide/fence-history.ts";
import { assessNode } from "../decide/node-health.ts";
import { errorMessage, isNotFound, type Kube } from "../kube/api.ts";
import type { Caches } from "../kube/caches.ts";
import { findCondition, setCondition, type Condition } from "../kube/conditions.ts";
import type { EventRecorder } from "../runtime/events.ts";
import type { InFlight } from "../runtime/in-flight.ts";
import { NotLeaderError, SOLE_LEADER, SoleLeadership, type Leadership } from "../runtime/leader.ts";
import type { Metrics } from "../metrics.ts";
import { AgentOperations, type OperationResult } from "./agent-operations.ts";
import type { FenceHistory } from "./fence-history.ts";

export const FENCED_CONDITION = "Fenced";
/** What a StorageFenced release says about the node's pods (status, Event). */
const PODS_STAY =
  "storage fenced only (the machine may still run): volumes released, pods NOT force-deleted and no out-of-service taint; the pods stay until the machine is confirmed off (a power agent, or the manual agent) or an administrator decides";

export interface NodeFenceDeps {
  kube: Kube;
  caches: Caches;
  events: EventRecorder;
  log: Logger;
  clock: () => DateTime;
  metrics?: Metrics;
  leadership?: Leadership;
  /** Background work shutdown waits for before the leader Lease is released (runtime/in-flight.ts). */
  inflight?: InFlight;
  /** How old a read a bookkeeping step may reuse (default VIEW_REUSE_MS; 0: every step reads). */
  viewReuseMs?: number;
  /** Writes each fence's FenceRecord (controllers/fence-history.ts); without it, no history is kept. */
  history?: FenceHistory;
}

type Status = NodeFenceStatus;
const MAX_STEPS = 100;
/**
 * Steps that write only the NodeFence's own bookkeeping, and waits, may be decided on the Node and Lease read for the
 * step before (if under VIEW_REUSE_MS old) instead of a read of their own: under load each read is a round trip of
 * a second or more, and a fence made ~20 in a row. Nothing they do is destructive, and the next other step reads again.
 */
const REUSABLE_VIEW = new Set<Step["kind"]>(["addFinalizer", "start", "begin", "released", "wait", "done"]);
const VIEW_REUSE_MS = 5_000;
/**
 * Where the fence's FenceRecord is brought up to date from its status (decide/fence-history.ts): before an agent runs
 * (the first side effect of an episode: its record exists before anything is powered off), whenever the fence waits
 * (for an agent, a retry, a person) and once it is done — and, in finalize, before its finalizer goes. Not before the
 * steps in between, which follow each other at once: a record write on that path would delay the release.
 */
const HISTORY_STEPS = new Set<Step["kind"]>(["runAgent", "wait", "done"]);
/**
 * How long a deleted NodeFence keeps its finalizer while its FenceRecord cannot be written: then it goes anyway (with
 * a Warning Event carrying the episode), since the next episode of the node waits for it to be gone.
 */
export const HISTORY_FINALIZE_GRACE_MS = 120_000;
/** Wait reasons that are someone's mistake to fix: a Warning Event when the wait begins. */
const WARNING_WAITS = new Set([
  "NodeNotFound",
  "PolicyNotFound",
  "PolicyDoesNotSelectNode",
  "NoPolicy",
  "ConfirmationRefused",
  "StorageFenceNotLifted",
  "ControlPlaneNode",
]);

export class NodeFenceController {
  private readonly d: NodeFenceDeps;
  private readonly leadership: Leadership;
  /** NodeFences (by uid) whose record could not be written: one Warning Event each until it can. */
  private readonly historyFailing = new Set<string>();
  /** Background agent operations; their end re-enqueues the fence (set by the operator). */
  readonly operations: AgentOperations;
  enqueue: (name: string) => void = () => {};

  constructor(d: NodeFenceDeps) {
    this.d = d;
    this.leadership = d.leadership ?? SOLE_LEADER;
    // An operation that ends during shutdown has its outcome written at once (the queue no longer runs), so the
    // next leader finds it recorded rather than Interrupted; drain waits for that write too.
    this.operations = new AgentOperations(
      (name) => {
        if (this.d.inflight?.stopping) void this.d.inflight.track(this.recordFinished(name));
        else this.enqueue(name);
      },
      (work) => void this.d.inflight?.track(work),
    );
  }

  /** Writes the outcome of a finished agent operation, and nothing else (shutdown). */
  private async recordFinished(name: string): Promise<void> {
    try {
      const fence = await this.d.kube.getNodeFence(name);
      if (!fence) return;
      const [node, lease] = await this.readFresh(fence);
      const step = nextStep(this.observe(fence, node, lease));
      if (step.kind === "recordOutcome") await this.perform(fence, node, lease, step);
    } catch (err) {
      this.d.log.warn({ nodeFence: name, err: errorMessage(err) }, `could not record the outcome of ${name}'s agent operation on shutdown`);
    }
  }

  private now(): string {
    return this.d.clock().toUTC().toISO() ?? "";
  }

  observe(fence: NodeFence, node: V1Node | undefined, lease: V1Lease | undefined): FenceObservation {
    const c = this.d.caches;
    const name = fence.spec.nodeName;
    return {
      now: this.d.clock(),
      fence,
      node,
      lease,
      policies: c.policies.list(),
      agents: new Map(c.agents.list().map((a) => [a.metadata?.name ?? "", a] as const)),
      pods: c.podsOn(name),
      pvcs: c.pvcsByKey(),
      volumeAttachments: c.volumeAttachments.list(),
      operations: this.operations.view(fence.metadata?.uid ?? ""),
    };
  }

  async reconcile(name: string): Promise<{ requeueAfterMs?: number } | void> {
    let fence = await this.d.kube.getNodeFence(name);
    // The read the previous step was decided on, and when (monotonic): a bookkeeping step may reuse it.
    let view: { node: V1Node | undefined; lease: V1Lease | undefined; at: number } | undefined;
    const read = async (f: NodeFence) => {
      const timer = this.d.metrics?.fenceStep.startTimer({ step: "read" });
      const [node, lease] = await this.readFresh(f);
      timer?.();
      return { node, lease, at: performance.now() };
    };
    for (let i = 0; i < MAX_STEPS && fence; i++) {
      const reused = view !== undefined && performance.now() - view.at < (this.d.viewReuseMs ?? VIEW_REUSE_MS);
      if (!reused) view = await read(fence);
      let step = nextStep(this.observe(fence, view!.node, view!.lease));
      // Anything but bookkeeping is decided again on a read made after the last write: every destructive call,
      // and every step whose record is evidence (confirmed's heartbeat fingerprint, a manual confirmation).
      if (reused && !REUSABLE_VIEW.has(step.kind)) {
        view = await read(fence);
        step = nextStep(this.observe(fence, view.node, view.lease));
      }
      const { node, lease } = view!;
      if (HISTORY_STEPS.has(step.kind)) await this.recordHistory(fence, node);
      if (step.kind === "done") return;
      const timer = this.d.metrics?.fenceStep.startTimer({ step: step.kind });
      if (step.kind === "wait") {
        await this.waitFor(fence, node, step);
        timer?.();
        return { requeueAfterMs: step.requeueAfterMs };
      }
      fence = await this.perform(fence, node, lease, step);
      timer?.();
    }
    return { requeueAfterMs: 1_000 };
  }

  /**
   * Brings the fence's FenceRecord up to date. A record that cannot be written holds nothing back (a dead node's
   * workloads do not wait for history): a Warning Event says so once, and the next write point tries again — the
   * record is derived from status, so nothing is lost meanwhile, and finalize writes it before the finalizer goes.
   */
  private async recordHistory(fence: NodeFence, node: V1Node | undefined): Promise<void> {
    if (!this.d.history) return;
    const uid = fence.metadata?.uid ?? "";
    // Only the leader writes history: a replica that lost the Lease could otherwise land an older record over the new
    // leader's. Not leading stops this reconcile, as it stops every step.
    this.leadership.assertLeading(`write the FenceRecord of NodeFence ${fence.metadata?.name}`);
    try {
      await this.d.history.sync(fence);
      this.historyFailing.delete(uid);
    } catch (err) {
      const msg = `could not write the FenceRecord of this episode (${errorMessage(err)}); fencing goes on, and it is written again from the NodeFence's status at the next step`;
      this.d.log.warn({ nodeFence: fence.metadata?.name }, msg);
      if (!this.historyFailing.has(uid)) this.announce(this.event(fence, "Warning", "FenceHistoryNotRecorded", msg, node));
      this.historyFailing.add(uid);
    }
  }

  /** Writes the record of a deleted fence's episode, or, past HISTORY_FINALIZE_GRACE_MS of failures, says it in Events. */
  private async finalHistory(fence: NodeFence, node: V1Node | undefined): Promise<void> {
    if (!this.d.history) return;
    const since = fence.metadata?.deletionTimestamp ? DateTime.fromJSDate(new Date(fence.metadata.deletionTimestamp)) : this.d.clock();
    const deleted = { time: since.toUTC().toISO({ suppressMilliseconds: true }) ?? this.now() };
    this.leadership.assertLeading(`write the FenceRecord of NodeFence ${fence.metadata?.name}`);
    try {
      await this.d.history.sync(fence, deleted);
    } catch (err) {
      const waited = this.d.clock().diff(since).as("milliseconds");
      if (waited < HISTORY_FINALIZE_GRACE_MS)
        throw new Error(
          `NodeFence ${fence.metadata?.name} deleted: its FenceRecord could not be written (${errorMessage(err)}); tried again before its finalizer goes`,
          {
            cause: err,
          },
        );
      const s = fence.status ?? {};
      const msg = `NodeFence ${fence.metadata?.name} deleted without its FenceRecord (${errorMessage(err)} for ${Math.round(waited / 1000)} s): phase ${s.phase}, started ${s.startTime ?? "-"}, evidence ${s.evidence?.method ?? "none"}, reason: ${fence.spec.reason ?? "-"}`;
      this.d.log.warn({ nodeFence: fence.metadata?.name }, msg);
      await Promise.all(this.event(fence, "Warning", "FenceHistoryNotRecorded", msg, node));
    }
  }

  /**
   * Writes a new status computed from the current one, stamped with our leader epoch; returns the stored object.
   * A status written by a newer leader is never overwritten (the resourceVersion guards the rest).
   */
  private async write(fence: NodeFence, change: (s: Status) => Status): Promise<NodeFence> {
    const epoch = this.leadership.epoch;
    const elected = !(this.leadership instanceof SoleLeadership) && this.leadership !== SOLE_LEADER;
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
    const held = this.storageHeld(fence, status);
    // Without leader election there is no epoch to compare: the one recorded stays.
    if (elected) status.leaderEpoch = epoch;
    // A wait asked again (the same condition, reason and message) changes nothing: no round trip for it.
    if (isDeepStrictEqual(status, fence.status)) return fence;
    const next = await this.d.kube.replaceStatus("nodefences", { ...fence, status });
    held.announce(next);
    return next;
  }

  /**
   * Sets the StorageFenceHeld condition on a status about to be written (every storage fence that may be up is said
   * so until it is lifted), and returns how to announce a change of it once written: an Event when one is held, all
   * are lifted, or they were abandoned (a Warning).
   */
  private storageHeld(fence: NodeFence, status: Status): { announce: (written: NodeFence) => void } {
    const agents = new Map(this.d.caches.agents.list().map((a) => [a.metadata?.name ?? "", a] as const));
    const c = storageFenceCondition({ fence: { ...fence, status }, agents });
    const before = findCondition(fence.status?.conditions as Condition[] | undefined, STORAGE_FENCE_HELD_CONDITION);
    if (!c) return { announce: () => {} };
    this.cond(status, { type: STORAGE_FENCE_HELD_CONDITION, ...c }, fence);
    if (before?.status === c.status && before.reason === c.reason) return { announce: () => {} };
    const reason = c.status === "False" ? "StorageFenceLifted" : c.reason === "Abandoned" ? "StorageFenceAbandoned" : "StorageFenceHeld";
    // Up is what a storage fence is for (Normal); abandoned, it stays up with nobody to lift it (Warning).
    const type = c.reason === "Abandoned" ? "Warning" : "Normal";
    return { announce: (written) => this.announce(this.event(written, type, reason, c.message)) };
  }

  private cond(s: Status, c: Omit<Condition, "lastTransitionTime" | "observedGeneration">, fence: NodeFence): Status {
    s.conditions = setCondition(
      s.conditions as Condition[] | undefined,
      { ...c, observedGeneration: fence.metadata?.generation },
      this.now(),
    );
    return s;
  }

  private async waitFor(fence: NodeFence, node: V1Node | undefined, step: Extract<Step, { kind: "wait" }>): Promise<void> {
    // Released, the fence still holds: an agent run after the release (action reboot's power-on, the lift of a storage
    // fence a later power-off made unneeded) must not turn the Fenced condition False. Its attempt is in status.
    if (fence.status?.phase === "Released" && step.reason === agentRunning("").reason) return;
    const type = fence.status?.phase === "Releasing" || fence.status?.phase === "Fenced" ? "Released" : FENCED_CONDITION;
    const before = findCondition(fence.status?.conditions as Condition[] | undefined, type);
    // While unfencing, the Fenced condition's reason says why (UnfenceRequested, Rebooted) and decides whether the
    // machine is powered back on: a wait for an agent (lifting a storage fence, one power-on of several) must not
    // overwrite it, or the next step would skip the power-on.
    const reason = fence.status?.phase === "Unfencing" && before?.reason ? before.reason : step.reason;
    await this.write(fence, (s) => this.cond(s, { type, status: "False", reason, message: step.message }, fence));
    if (before?.reason !== step.reason && WARNING_WAITS.has(step.reason)) {
      this.d.log.warn({ nodeFence: fence.metadata?.name, reason: step.reason }, step.message);
      this.announce(this.event(fence, "Warning", step.reason, step.message, node));
    }
  }

  /**
   * Events are best-effort (the recorder never throws) and the fence's next step must not wait for them: each was a
   * round trip per step. Shutdown waits for them (inflight) so that they are not lost with the process.
   */
  private announce(events: Promise<void>[]): void {
    void this.d.inflight?.track(Promise.all(events));
  }

  private event(fence: NodeFence, type: "Normal" | "Warning", reason: string, message: string, node?: V1Node): Promise<void>[] {
    const out = [
      this.d.events.record(
        { apiVersion: API_VERSION, kind: "NodeFence", name: fence.metadata?.name ?? "", uid: fence.metadata?.uid },
        type,
        reason,
        message,
      ),
    ];
    if (node)
      out.push(
        this.d.events.record(
          { apiVersion: "v1", kind: "Node", name: node.metadata?.name ?? "", uid: node.metadata?.uid },
          type,
          reason,
          message,
        ),
      );
    return out;
  }

  private async perform(
    fence: NodeFence,
    node: V1Node | undefined,
    lease: V1Lease | undefined,
    step: Exclude<Step, { kind: "done" | "wait" }>,
  ): Promise<NodeFence | undefined> {
    const nodeName = fence.spec.nodeName;
    const name = fence.metadata?.name ?? "";
    const uid = fence.metadata?.uid ?? "";
    const flog = this.d.log.child({ nodeFence: name, step: step.kind });
    switch (step.kind) {
      case "addFinalizer":
        return await this.d.kube.patchNodeFenceMetadata(fence, { finalizers: [...(fence.metadata?.finalizers ?? []), FINALIZER] });
      case "finalize": {
        // Deleted: nothing more runs for it, and the marks it put on the node come off with it. Its storage fences
        // were lifted before this step (fence-machine), unless an administrator abandoned them: said where it lasts.
        this.operations.abort(uid);
        if (node) await this.unmark(fence, node);
        const agents = new Map(this.d.caches.agents.list().map((a) => [a.metadata?.name ?? "", a] as const));
        const left = abandonedStorageFences({ fence, agents });
        if (left.length) {
          const msg = `NodeFence ${name} deleted with its storage fence(s) abandoned (annotation ${ABANDON_STORAGE_FENCES_ANNOTATION}): ${left.join(", ")} not lifted; their NetworkFences stay in place until removed by hand (docs/safety.md §3)`;
          flog.warn({ abandoned: left }, msg);
          // Written before the finalizer goes: the Node's Event outlives the NodeFence's.
          await Promise.all(this.event(fence, "Warning", "StorageFenceAbandoned", msg, node));
        }
        flog.info(`NodeFence ${name} deleted: taints and node condition removed`);
        // What is left of the episode once the NodeFence is gone: written before the finalizer goes.
        await this.finalHistory(fence, node);
        try {
          await this.d.kube.patchNodeFenceMetadata(fence, {
            finalizers: (fence.metadata?.finalizers ?? []).filter((f) => f !== FINALIZER),
          });
        } catch (err) {
          if (!isNotFound(err)) throw err;
        }
        this.d.history?.forget(uid);
        this.historyFailing.delete(uid);
        return undefined;
      }
      case "start": {
        const beat = node ? assessNode(node, lease, this.d.clock(), DEFAULT_HEARTBEAT_TIMEOUT_SECONDS).lastHeartbeat : undefined;
        const next = await this.write(fence, (s) => {
          s.phase = "Pending";
          s.policy = step.policy;
          s.policySnapshot = step.snapshot;
          s.nodeSnapshot = step.node;
          s.bootID = step.bootID;
          s.round = 0;
          s.failures = 0;
          if (beat) s.lastHeartbeatTime = beat.toUTC().toISO() ?? undefined;
          s.startTime = this.now();
          return this.cond(
            s,
            { type: FENCED_CONDITION, status: "False", reason: "Pending", message: `fencing requested (${fence.spec.origin ?? "Manual"})` },
            fence,
          );
        });
        flog.info({ policy: step.policy, bootID: step.bootID, origin: fence.spec.origin }, `fencing ${nodeName}: pending`);
        this.announce(
          this.event(
            next,
            "Normal",
            "FencePending",
            `fencing ${nodeName} under FencingPolicy ${step.policy}: ${fence.spec.reason ?? ""}`,
            node,
          ),
        );
        return next;
      }
      case "begin":
        return await this.write(fence, (s) => {
          s.phase = "Fencing";
          s.currentLevel = 0;
          s.levelStartTime = this.now();
          return this.cond(s, { type: FENCED_CONDITION, status: "False", reason: "Fencing", message: "running escalation level 1" }, fence);
        });
      case "cancel": {
        this.operations.abort(uid);
        if (node) await this.unmark(fence, node);
        const next = await this.write(fence, (s) => {
          this.cancelAttempts(s, step.message);
          s.phase = "Unfenced";
          s.unfencedTime = this.now();
          return this.cond(s, { type: FENCED_CONDITION, status: "False", reason: "NodeRecovered", message: step.message }, fence);
        });
        flog.info(`fencing of ${nodeName} cancelled: ${step.message}`);
        this.d.metrics?.fences.inc({ outcome: "Cancelled", agent: "" });
        this.announce(this.event(next, "Normal", "FenceCancelled", step.message, node));
        return next;
      }
      case "interrupted":
        return await this.write(fence, (s) => {
          const a = s.attempts?.[step.index];
          if (a) {
            a.outcome = "Interrupted";
            a.endTime = this.now();
            a.message = "the operator stopped during this attempt; it is retried (agents are idempotent)";
          }
          return s;
        });
      case "runAgent":
        return await this.runAgent(fence, node, step);
      case "recordOutcome": {
        const a = fence.status?.attempts?.[step.index];
        const next = await this.write(fence, (s) => {
          const x = s.attempts?.[step.index];
          if (x) Object.assign(x, { outcome: step.outcome, endTime: this.now(), message: step.message.slice(0, 2048) });
          return s;
        });
        this.operations.forget(uid, step.index);
        const type = a?.agentType ?? this.d.caches.agents.get(a?.agent ?? "")?.spec.type;
        this.d.metrics?.attempts.inc({
          agent: a?.agent ?? "",
          type: type ?? "",
          operation: a?.operation ?? "",
          outcome: step.outcome,
        });
        const ok = step.outcome === "Succeeded";
        const msg = `level ${(a?.level ?? 0) + 1}, ${a?.agent} (${type ?? "?"}) ${a?.operation}: ${step.outcome}: ${step.message}`;
        (ok ? flog.info.bind(flog) : flog.warn.bind(flog))({ outcome: step.outcome }, `agent ${msg}`);
        this.announce(this.event(next, ok ? "Normal" : "Warning", ok ? "AgentSucceeded" : "AgentFailed", msg, node));
        return next;
      }
      case "escalate": {
        const next = await this.write(fence, (s) => {
          s.currentLevel = step.to;
          s.levelStartTime = this.now();
          return this.cond(s, { type: FENCED_CONDITION, status: "False", reason: "Escalating", message: step.message }, fence);
        });
        flog.warn({ level: step.to + 1 }, step.message);
        this.announce(this.event(next, "Warning", "Escalating", step.message, node));
        return next;
      }
      case "roundFailed": {
        const next = await this.write(fence, (s) => {
          s.phase = "Failed";
          s.failures = (s.failures ?? 0) + 1;
          s.nextRetryTime = step.retryAt.toUTC().toISO() ?? undefined;
          this.cond(s, { type: "Failed", status: "True", reason: step.reason, message: step.message }, fence);
          return this.cond(
            s,
            { type: FENCED_CONDITION, status: "False", reason: step.reason, message: "not fenced: nothing is released" },
            fence,
          );
        });
        flog.error({ reason: step.reason }, `fencing ${nodeName} failed: ${step.message}`);
        this.d.metrics?.fences.inc({ outcome: "Failed", agent: "" });
        this.announce(this.event(next, "Warning", "FenceFailed", `${step.message}; nothing was released`, node));
        return next;
      }
      case "retry": {
        const next = await this.write(fence, (s) => {
          s.phase = "Fencing";
          s.round = (s.round ?? 0) + 1;
          s.currentLevel = 0;
          s.levelStartTime = this.now();
          if (step.snapshot) s.policySnapshot = step.snapshot;
          delete s.nextRetryTime;
          this.cond(s, { type: "Failed", status: "False", reason: "Retrying", message: step.message }, fence);
          return this.cond(s, { type: FENCED_CONDITION, status: "False", reason: "Fencing", message: step.message }, fence);
        });
        flog.warn(step.message);
        this.announce(this.event(next, "Normal", "FenceRetry", step.message, node));
        return next;
      }
      case "confirmed": {
        const next = await this.write(fence, (s) => {
          s.phase = "Fenced";
          s.fencedTime = this.now();
          s.evidence = { ...step.evidence, time: this.now() };
          return this.cond(
            s,
            { type: FENCED_CONDITION, status: "True", reason: step.evidence.method, message: step.evidence.detail },
            fence,
          );
        });
        flog.warn({ evidence: step.evidence }, `node ${nodeName} confirmed fenced: ${step.evidence.detail}`);
        this.d.metrics?.fences.inc({ outcome: "Fenced", agent: step.evidence.agents.join(",") || step.evidence.method });
        const started = next.status?.startTime ? DateTime.fromISO(next.status.startTime) : undefined;
        if (started?.isValid) this.d.metrics?.fenceDuration.observe(this.d.clock().diff(started).as("seconds"));
        this.announce(this.event(next, "Warning", "Fenced", `confirmed fenced (${step.evidence.method}): ${step.evidence.detail}`, node));
        return next;
      }
      case "reenter": {
        // The machine runs again: whatever confirmed it off no longer holds. A manual confirmation must be given anew.
        let current = fence;
        if (current.metadata?.annotations?.[CONFIRMED_OFF_ANNOTATION] !== undefined)
          current = await this.d.kube.patchNodeFenceMetadata(current, { annotations: { [CONFIRMED_OFF_ANNOTATION]: null } });
        const next = await this.write(current, (s) => {
          s.phase = "Fencing";
          s.round = (s.round ?? 0) + 1;
          s.currentLevel = 0;
          s.levelStartTime = this.now();
          delete s.evidence;
          delete s.fencedTime;
          this.cond(s, { type: "Released", status: "False", reason: "HeartbeatAfterFence", message: step.message }, current);
          return this.cond(s, { type: FENCED_CONDITION, status: "False", reason: "HeartbeatAfterFence", message: step.message }, current);
        });
        flog.error(`node ${nodeName}: ${step.message}`);
        this.announce(this.event(next, "Warning", "HeartbeatAfterFence", `release stopped: ${step.message}`, node));
        return next;
      }
      case "markNode": {
        if (node) {
          this.leadership.assertLeading(`taint node ${nodeName}`);
          await this.addTaint(node, { key: FENCED_TAINT, effect: "NoExecute", value: "true" });
          await this.d.kube.setNodeCondition(nodeName, FENCED_CONDITION, {
            type: FENCED_CONDITION,
            status: "True",
            reason: "FencedByStockade",
            message: `fenced by Stockade (NodeFence ${name}); it stays tainted until unfenced`,
            lastTransitionTime: new Date(),
            lastHeartbeatTime: new Date(),
          });
        }
        return await this.write(fence, (s) => {
          s.phase = "Releasing";
          const storageOnly = s.evidence?.method === "StorageFenced";
          return this.cond(
            s,
            {
              type: "Released",
              status: "False",
              reason: "Releasing",
              message: storageOnly
                ? "storage fenced only: releasing the volumes of the fenced StorageClasses, never the pods"
                : "releasing the node's guarded pods and volumes",
            },
            fence,
          );
        });
      }
      case "release":
        return await this.release(fence, node, step.items);
      case "released": {
        const storageOnly = fence.status?.evidence?.method === "StorageFenced";
        const next = await this.write(fence, (s) => {
          s.phase = "Released";
          s.releasedTime = this.now();
          const n = (s.releases ?? []).length + (s.releasesDropped ?? 0);
          return this.cond(
            s,
            storageOnly
              ? { type: "Released", status: "True", reason: "VolumesReleased", message: `${n} volume release(s) recorded; ${PODS_STAY}` }
              : { type: "Released", status: "True", reason: "Released", message: `${n} release(s) recorded` },
            fence,
          );
        });
        if (storageOnly) this.announce(this.event(next, "Warning", "PodsNotReleased", `node ${nodeName}: ${PODS_STAY}`, node));
        const count = (next.status?.releases?.length ?? 0) + (next.status?.releasesDropped ?? 0);
        flog.info({ releases: count }, `node ${nodeName}: released`);
        const beat = next.status?.lastHeartbeatTime ? DateTime.fromISO(next.status.lastHeartbeatTime) : undefined;
        if (beat?.isValid) this.d.metrics?.failoverDuration.observe(this.d.clock().diff(beat).as("seconds"));
        this.announce(this.event(next, "Normal", "Released", `released ${count} item(s) of ${nodeName}`, node));
        return next;
      }
      case "startUnfence": {
        this.operations.abort(uid);
        const next = await this.write(fence, (s) => {
          this.cancelAttempts(s, "unfence requested");
          s.phase = "Unfencing";
          return this.cond(s, { type: FENCED_CONDITION, status: "False", reason: step.reason, message: "unfencing" }, fence);
        });
        this.announce(this.event(next, "Normal", "Unfencing", `unfencing ${nodeName} (${step.reason})`, node));
        return next;
      }
      case "unmarkNode": {
        if (node) await this.unmark(fence, node);
        const next = await this.write(fence, (s) => {
          s.phase = "Unfenced";
          s.unfencedTime = this.now();
          return this.cond(
            s,
            { type: FENCED_CONDITION, status: "False", reason: step.reason, message: "unfenced: taint and node condition removed" },
            fence,
          );
        });
        flog.info({ reason: step.reason }, `node ${nodeName} unfenced`);
        this.announce(this.event(next, "Normal", "Unfenced", `node ${nodeName} unfenced (${step.reason})`, node));
        return next;
      }
    }
  }

  /** Attempts still InProgress end Cancelled (their operations were withdrawn). */
  private cancelAttempts(s: Status, why: string): void {
    for (const a of s.attempts ?? [])
      if (a.outcome === "InProgress") Object.assign(a, { outcome: "Cancelled", endTime: this.now(), message: `cancelled: ${why}` });
  }

  /** Removes the taints and the node condition this fence put on the node. */
  private async unmark(fence: NodeFence, node: V1Node): Promise<void> {
    const nodeName = fence.spec.nodeName;
    const ours = new Set([
      FENCED_TAINT,
      ...(fence.status?.releases?.some((r) => r.kind === "Taint" && r.action === "Added") ? [OUT_OF_SERVICE_TAINT] : []),
    ]);
    const taints = node.spec?.taints ?? [];
    if (taints.some((t) => ours.has(t.key))) {
      this.leadership.assertLeading(`remove taints from node ${nodeName}`);
      await this.d.kube.setTaints(
        node,
        taints.filter((t) => !ours.has(t.key)),
      );
    }
    if (node.status?.conditions?.some((c) => c.type === FENCED_CONDITION))
      await this.d.kube.setNodeCondition(nodeName, FENCED_CONDITION, null);
  }

  /** The Node and its Lease from the apiserver, never the cache: heartbeats, bootID and deletion are what the safety rules compare. */
  private readFresh(fence: NodeFence): Promise<[V1Node | undefined, V1Lease | undefined]> {
    return Promise.all([this.d.kube.readNode(fence.spec.nodeName), this.d.kube.readLease(fence.spec.nodeName)]);
  }

  /** Writes the attempt InProgress, then runs the agent in the background; its end re-enqueues the fence. */
  private async runAgent(fence: NodeFence, node: V1Node | undefined, step: Extract<Step, { kind: "runAgent" }>): Promise<NodeFence> {
    const { agent, level, operation: op, timeoutMs } = step;
    const nodeName = fence.spec.nodeName;
    const name = fence.metadata?.name ?? "";
    const agentName = agent.metadata?.name ?? "";
    const index = fence.status?.attempts?.length ?? 0;
    // Leadership before writing: a stale leader must not even start an attempt; nor a replica shutting down.
    this.leadership.assertLeading(`power ${op} of ${nodeName}`);
    if (this.d.inflight?.stopping) throw new NotLeaderError(`shutting down: not starting power ${op} of ${nodeName}`);
    const current = await this.write(fence, (s) => {
      s.attempts = [
        ...(s.attempts ?? []),
        // What the agent is now, recorded with the attempt: evidence is derived from it, not from the FenceAgent at the confirmation.
        {
          level,
          round: s.round ?? 0,
          agent: agentName,
          ...attemptFacts(agent),
          operation: op,
          startTime: this.now(),
          outcome: "InProgress",
          message: "",
        },
      ];
      // The condition the wait for this operation writes (fence-machine operationStep), in the same write: one round
      // trip less. Not while unfencing, whose condition reason decides the power-on (waitFor).
      if (s.phase === "Fencing" && agent.spec.type !== "manual")
        this.cond(s, { type: FENCED_CONDITION, status: "False", ...agentRunning(`${agentName} ${op}`) }, fence);
      return s;
    });
    this.d.log.info(
      { nodeFence: name, agent: agentName, level: level + 1, operation: op },
      `running ${agent.spec.type} agent ${agentName} (${op}) for ${nodeName}`,
    );
    if (agent.spec.type === "manual" && op === "off") return current; // the state machine watches for the confirmation
    const target = targetNode(current, node);
    const operation = async (signal: AbortSignal): Promise<Omit<OperationResult, "state">> => {
      let secretValues: string[] = [];
      try {
        const storage = storageDriverFor(agent.spec.type);
        // A storage lift finds its fence by agent and node and undoes it as it was made: it needs no parameters, so
        // an agent misconfigured since (or from the start: its fence may still have gone out) can still lift it.
        const lifting = !!storage && op === "on";
        // A lift of an aborted fence of ours runs after that fence's write has landed or failed, never before it.
        if (lifting) await this.operations.settled(current.metadata?.uid ?? "");
        const rules = await loadRules(agent.spec);
        // No node chooses its own executioner: an agent that would reach the machine of another node too is not run.
        const unique = lifting
          ? { ok: true as const }
          : checkUniqueTarget(agentName, agent.spec, target, this.d.caches.nodes.list(), rules);
        if (!unique.ok) throw new AgentError("Config", unique.message);
        const secrets = await this.readSecrets(agent, nodeName);
        secretValues = [...secrets.values()].flatMap((m) => Object.values(m));
        const resolved = resolveParameters(agent.spec, target, secrets, rules);
        if ("errors" in resolved && !lifting) throw new AgentError("Config", `FenceAgent ${agentName}: ${resolved.errors.join("; ")}`);
        const ctx = { node: nodeName, parameters: "errors" in resolved ? {} : resolved.parameters, annotations: {} };
        const beforeTry = async (o: "off" | "on") => {
          try {
            this.leadership.assertLeading(`power ${o} of ${nodeName}`);
          } catch (err) {
            throw new AgentError("Cancelled", (err as Error).message);
          }
          if (o !== "off") return;
          // Re-read right before each power command: never a control-plane or etcd node its policy does not allow; and
          // automatic fencing needs sustained silence (or its trigger condition still held).
          const [n, l] = await this.readFresh(current);
          const why = powerOffRefused({
            fence: current,
            node: n,
            lease: l,
            now: this.d.clock(),
            policies: this.d.caches.policies.list(),
            pods: this.d.caches.podsOn(nodeName),
          });
          if (why) throw new AgentError("Cancelled", why);
        };
        const opts = {
          timeoutMs,
          retries: agent.spec.retries ?? 2,
          backoffMs: (agent.spec.retryBackoffSeconds ?? 1) * 1000,
          beforeTry,
          signal,
        };
        let r;
        if (storage) {
          // A storage fence gets the NetworkFence API and the Node's kubelet-reported addresses (used only if its parameters say so).
          const addresses = (target.status?.addresses ?? []).map((a) => ({ type: a.type, address: a.address }));
          r = await runStorageFence(storage, { ...ctx, agent: agentName, kube: networkFenceApi(this.d.kube), addresses }, op, opts);
        } else {
          const driver = driverFor(agent.spec.type, agent.spec.agent);
          r = op === "off" ? await fenceOff(driver, ctx, opts) : await runOperation(driver, ctx, op, opts);
        }
        return { outcome: r.outcome, message: redact(r.message, secretValues) };
      } catch (err) {
        const message = redact(err instanceof Error ? err.message : String(err), secretValues);
        return { outcome: err instanceof AgentError && err.kind === "Cancelled" ? "Cancelled" : "Failed", message };
      }
    };
    this.operations.start(current.metadata?.uid ?? "", name, index, async (signal) => {
      const timer = this.d.metrics?.fenceStep.startTimer({ step: "agent" });
      try {
        return await operation(signal);
      } finally {
        timer?.();
      }
    });
    return current;
  }

  private async readSecrets(agent: FenceAgent, nodeName: string): Promise<Map<string, Record<string, string>>> {
    const agentName = agent.metadata?.name ?? "";
    const secrets = new Map<string, Record<string, string>>();
    for (const r of secretRefsFor(agent.spec, nodeName)) {
      try {
        secrets.set(`${r.namespace}/${r.name}`, await this.d.kube.readSecret(r.namespace, r.name));
      } catch (err) {
        throw new AgentError(
          "Config",
          isNotFound(err)
            ? `Secret ${r.namespace}/${r.name} named by FenceAgent ${agentName} does not exist: create it with the agent's credentials (e.g. key "password")`
            : `cannot read Secret ${r.namespace}/${r.name}: ${errorMessage(err)}`,
          { cause: err },
        );
      }
    }
    return secrets;
  }

  private async addTaint(node: V1Node, taint: V1Taint): Promise<void> {
    const taints = node.spec?.taints ?? [];
    if (taints.some((t) => t.key === taint.key && t.effect === taint.effect)) return;
    await this.d.kube.setTaints(node, [...taints, { ...taint, timeAdded: new Date() }]);
  }

  /**
   * Releases a batch of items side by side (each its own call, with leadership asserted right before it), then records
   * every one that was released in one status write — also when another failed, whose error is thrown after it.
   */
  private async release(fence: NodeFence, node: V1Node | undefined, items: ReleaseItem[]): Promise<NodeFence> {
    const nodeName = fence.spec.nodeName;
    const evidence = fence.status?.evidence?.method ?? "";
    // The invariant, checked where it matters: nothing is released from a fence without evidence.
    if (!evidence || !fence.status?.evidence?.heartbeat || fence.status?.phase !== "Releasing")
      throw new Error(`refusing to release from NodeFence ${nodeName} in phase ${fence.status?.phase} without confirmation evidence`);
    // Storage fenced, the machine perhaps running: its pods and the out-of-service taint are never released on that.
    for (const item of items)
      if (evidence === "StorageFenced" && (item.kind === "Pod" || item.kind === "Taint"))
        throw new Error(`refusing to release ${item.kind} of NodeFence ${nodeName} on StorageFenced evidence: volumes only`);
    const outcomes = await Promise.allSettled(items.map((item) => this.releaseOne(fence, node, item, evidence)));
    const recs = outcomes.flatMap((o) => (o.status === "fulfilled" ? [o.value] : []));
    const failed = outcomes.find((o): o is PromiseRejectedResult => o.status === "rejected");
    if (!recs.length) throw failed?.reason;
    const next = await this.write(fence, (s) => {
      // Counted as they happen: the list is bounded (decide/status-bound.ts), the history's counts are not.
      const before = releaseCounts(s);
      s.releases = [...(s.releases ?? []), ...recs];
      s.podsReleased = before.pods + recs.filter((r) => r.kind === "Pod" && r.action === "ForceDeleted").length;
      s.volumesReleased =
        before.volumes +
        recs.filter((r) => (r.kind === "VolumeAttachment" && r.action === "Deleted") || (r.kind === "ClaimLock" && r.action === "Broken"))
          .length;
      return s;
    });
    for (const rec of recs) {
      const what = `${rec.kind} ${rec.namespace ? `${rec.namespace}/` : ""}${rec.name}: ${rec.action}`;
      this.d.log.info({ nodeFence: nodeName, release: rec }, `released ${what}`);
      this.d.metrics?.releases.inc({ kind: rec.kind, action: rec.action });
      this.announce(this.event(next, "Normal", "Release", what, rec.kind === "Taint" ? node : undefined));
    }
    if (failed) throw failed.reason;
    return next;
  }

  /** One release call; returns its record for status. */
  private async releaseOne(
    fence: NodeFence,
    node: V1Node | undefined,
    item: ReleaseItem,
    evidence: string,
  ): Promise<NonNullable<Status["releases"]>[number]> {
    const { kube, events } = this.d;
    const nodeName = fence.spec.nodeName;
    let rec: NonNullable<Status["releases"]>[number];
    if (item.kind === "Pod") {
      const p = item.pod;
      this.leadership.assertLeading(`force-delete pod ${p.metadata?.namespace}/${p.metadata?.name}`);
      const result = await kube.forceDeletePod(p);
      rec = {
        kind: "Pod",
        namespace: p.metadata?.namespace,
        name: p.metadata?.name ?? "",
        uid: p.metadata?.uid,
        action: result === "deleted" ? "ForceDeleted" : "AlreadyGone",
        time: this.now(),
        message: `priority ${p.spec?.priority ?? 0}`,
      };
      if (result === "deleted") {
        // The one Event about a destructive call is written before the step is recorded (the batch's pods in
        // parallel, so it costs one round trip a step): an operator killed right after still leaves it.
        await events.record(
          { apiVersion: "v1", kind: "Pod", name: rec.name, namespace: rec.namespace, uid: rec.uid },
          "Warning",
          "ForceDeleted",
          `node ${nodeName} is confirmed fenced (${evidence}); force-deleted so that a replacement can start`,
        );
      }
    } else if (item.kind === "ClaimLock") {
      const ns = item.pvc.metadata?.namespace ?? "";
      const claim = item.pvc.metadata?.name ?? "";
      let action = "AlreadyReleased";
      try {
        const fresh = await kube.core.readNamespacedPersistentVolumeClaim({ name: claim, namespace: ns });
        const broken = breakLock(fresh, item.pod.metadata?.uid ?? "", `NodeFence ${nodeName}`, this.now());
        if (broken) {
          this.leadership.assertLeading(`break the claim lock of ${ns}/${claim}`);
          // Compare-and-swap on the resourceVersion just read: a grant in between makes this fail and retry.
          await kube.casAnnotateClaim(fresh, { [LOCK_ANNOTATION]: formatLock(broken) });
          action = "Broken";
        }
      } catch (err) {
        if (!isNotFound(err)) throw err;
      }
      rec = {
        kind: "ClaimLock",
        namespace: ns,
        name: claim,
        uid: item.pvc.metadata?.uid,
        action,
        time: this.now(),
        message: claimLockMessage(item.pod, item.token),
      };
    } else if (item.kind === "VolumeAttachment") {
      this.leadership.assertLeading(`delete VolumeAttachment ${item.name}`);
      const result = await kube.deleteVolumeAttachment(item.name, item.uid);
      rec = {
        kind: "VolumeAttachment",
        name: item.name,
        uid: item.uid,
        action: result === "deleted" ? "Deleted" : "AlreadyGone",
        time: this.now(),
      };
    } else {
      if (node) {
        this.leadership.assertLeading(`${item.action === "Added" ? "add" : "remove"} the out-of-service taint on ${nodeName}`);
        if (item.action === "Added") await this.addTaint(node, { key: OUT_OF_SERVICE_TAINT, value: "nodeshutdown", effect: "NoExecute" });
        else {
          const taints = node.spec?.taints ?? [];
          if (taints.some((t) => t.key === OUT_OF_SERVICE_TAINT))
            await kube.setTaints(
              node,
              taints.filter((t) => t.key !== OUT_OF_SERVICE_TAINT),
            );
        }
      }
      rec = { kind: "Taint", name: OUT_OF_SERVICE_TAINT, action: item.action, time: this.now() };
    }
    return rec;
  }
}
