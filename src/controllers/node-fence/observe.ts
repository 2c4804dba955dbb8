// What each step is decided on. The Node and its Lease are read from the apiserver (never the cache) after the last
// write, so that the destructive call that follows is made on a fresh view; bookkeeping steps (REUSABLE_VIEW) may use
// the read of the step before. Everything else comes from the caches and the agent operations of this process.
import type { V1Lease, V1Node } from "@kubernetes/client-node";
import type { DateTime } from "luxon";
import type { NodeFence } from "../../api/v1alpha1.ts";
import { DEFAULT_HEARTBEAT_TIMEOUT_SECONDS, nextStep, type FenceObservation, type Step } from "../../decide/fence-machine.ts";
import { assessNode } from "../../decide/node-health.ts";
import { watchdogEvidence, type WatchdogEvidence } from "../../decide/watchdog-evidence.ts";
import type { Kube } from "../../kube/api.ts";
import type { AgentOperations } from "./agent-operations.ts";
import type { NodeFenceDeps } from "./deps.ts";

/**
 * Steps that write only the NodeFence's own bookkeeping, and waits, may be decided on the Node and Lease read for the
 * step before (if under VIEW_REUSE_MS old) instead of a read of their own: under load each read is a round trip of
 * a second or more, and a fence made ~20 in a row. Nothing they do is destructive, and the next other step reads again.
 */
export const REUSABLE_VIEW = new Set<Step["kind"]>(["addFinalizer", "start", "begin", "released", "wait", "done"]);
export const VIEW_REUSE_MS = 5_000;

/**
 * Whether a fence needs its node's agent record read fresh with the Node: its policy allows watchdog evidence, or its
 * evidence is WatchdogExpired (each release step compares the record with what the evidence recorded).
 */
export const needsAgentRecord = (fence: NodeFence): boolean =>
  !!fence.status?.policySnapshot?.allowWatchdogEvidence || fence.status?.evidence?.method === "WatchdogExpired";

/** The node's agent record from the apiserver (never the cache), when the fence needs it; else undefined. */
export function readFreshAgentRecord(kube: Kube, fence: NodeFence): Promise<V1Lease | undefined> {
  return needsAgentRecord(fence) ? kube.readAgentRecord(fence.spec.nodeName) : Promise.resolve(undefined);
}

/**
 * WatchdogExpired on this read, for a fence in phase Fencing whose policy allows it: one look of this process's
 * observer (its t0 is that observer's first look at the fence: a restarted operator starts again). Undefined until
 * the node agents' records are listed.
 */
function watchdogOf(
  d: NodeFenceDeps,
  fence: NodeFence,
  record: V1Lease | undefined,
  kubeletSilentMs: number | undefined,
): WatchdogEvidence | undefined {
  if (fence.status?.phase !== "Fencing" || !fence.status.policySnapshot?.allowWatchdogEvidence) return undefined;
  const input = d.caches.watchAgentRecords().look(fence.metadata?.uid ?? "", fence.spec.nodeName, record, kubeletSilentMs);
  return input ? watchdogEvidence(input) : undefined;
}

/** The Node and its Lease from the apiserver, never the cache: heartbeats, bootID and deletion are what the safety rules compare. */
export function readFresh(kube: Kube, fence: NodeFence): Promise<[V1Node | undefined, V1Lease | undefined]> {
  return Promise.all([kube.readNode(fence.spec.nodeName), kube.readLease(fence.spec.nodeName)]);
}

export function observe(
  d: NodeFenceDeps,
  operations: AgentOperations,
  fence: NodeFence,
  node: V1Node | undefined,
  lease: V1Lease | undefined,
  agentRecord?: V1Lease,
): FenceObservation {
  const c = d.caches;
  const name = fence.spec.nodeName;
  const leaseObservedSilentMs = lease ? c.leaseSilentForMs(name, lease) : undefined;
  const watchdog = watchdogOf(d, fence, agentRecord, leaseObservedSilentMs);
  return {
    now: d.clock(),
    fence,
    node,
    lease,
    // Measured on this process's monotonic clock from when it saw the fresh Lease's renewTime (a newer one than the cache: 0).
    leaseObservedSilentMs,
    policies: c.policies.list(),
    agents: new Map(c.agents.list().map((a) => [a.metadata?.name ?? "", a] as const)),
    pods: c.podsOn(name),
    pvcs: c.pvcsByKey(),
    volumeAttachments: c.volumeAttachments.list(),
    operations: operations.view(fence.metadata?.uid ?? ""),
    ...(agentRecord ? { agentRecord } : {}),
    ...(watchdog ? { watchdog } : {}),
    ...(!node && c.lastSeenNodes?.get(name) ? { lastSeenNode: c.lastSeenNodes.get(name) } : {}),
  };
}

/** The node's last heartbeat as a fence records it when it starts (the fingerprint a heartbeat after the fence is compared to). */
export function lastHeartbeat(node: V1Node | undefined, lease: V1Lease | undefined, now: DateTime): DateTime | undefined {
  return node ? assessNode(node, lease, now, DEFAULT_HEARTBEAT_TIMEOUT_SECONDS).lastHeartbeat : undefined;
}

/** A step, and the read it was decided on. */
export interface Decided {
  step: Step;
  node: V1Node | undefined;
  lease: V1Lease | undefined;
}

/** The reads one reconcile decides its steps on: the read the previous step was decided on, and when (monotonic). */
export class StepViews {
  private readonly d: NodeFenceDeps;
  private readonly operations: AgentOperations;
  private view: { node: V1Node | undefined; lease: V1Lease | undefined; agentRecord: V1Lease | undefined; at: number } | undefined;

  constructor(d: NodeFenceDeps, operations: AgentOperations) {
    this.d = d;
    this.operations = operations;
  }

  async next(fence: NodeFence): Promise<Decided> {
    const reused = this.view !== undefined && performance.now() - this.view.at < (this.d.viewReuseMs ?? VIEW_REUSE_MS);
    if (!reused) this.view = await this.read(fence);
    let view = this.view!;
    let step = nextStep(observe(this.d, this.operations, fence, view.node, view.lease, view.agentRecord));
    // Anything but bookkeeping is decided again on a read made after the last write: every destructive call,
    // and every step whose record is evidence (confirmed's heartbeat fingerprint, a manual confirmation).
    if (reused && !REUSABLE_VIEW.has(step.kind)) {
      view = this.view = await this.read(fence);
      step = nextStep(observe(this.d, this.operations, fence, view.node, view.lease, view.agentRecord));
    }
    return { step, node: view.node, lease: view.lease };
  }

  private async read(fence: NodeFence) {
    const timer = this.d.metrics?.fenceStep.startTimer({ step: "read" });
    const [[node, lease], agentRecord] = await Promise.all([readFresh(this.d.kube, fence), readFreshAgentRecord(this.d.kube, fence)]);
    timer?.();
    return { node, lease, agentRecord, at: performance.now() };
  }
}
