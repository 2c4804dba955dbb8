// What each step is decided on. The Node and its Lease are read from the apiserver (never the cache) after the last
// write, so that the destructive call that follows is made on a fresh view; bookkeeping steps (REUSABLE_VIEW) may use
// the read of the step before. Everything else comes from the caches and the agent operations of this process.
import type { V1Lease, V1Node } from "@kubernetes/client-node";
import type { DateTime } from "luxon";
import type { NodeFence } from "../../api/v1alpha1.ts";
import { DEFAULT_HEARTBEAT_TIMEOUT_SECONDS, nextStep, type FenceObservation, type Step } from "../../decide/fence-machine.ts";
import { assessNode } from "../../decide/node-health.ts";
import { holderProblem, isPodName, RECORD_POLICY, type RecordAuthority } from "../../decide/record-authority.ts";
import { watchdogEvidence, type WatchdogEvidence } from "../../decide/watchdog-evidence.ts";
import { errorMessage, type Kube } from "../../kube/api.ts";
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

/** Whether this read may take WatchdogExpired: a fence in phase Fencing whose policy allows it. */
const watchdogLooks = (fence: NodeFence): boolean =>
  fence.status?.phase === "Fencing" && !!fence.status.policySnapshot?.allowWatchdogEvidence;

/**
 * The authority of the node's agent record as read now (decide/record-authority.ts), for a read that may take
 * WatchdogExpired: the records' admission policy (read now, never an older answer: it is what the evidence rests on)
 * and the pod the record names as holder, read fresh. A read that fails is "cannot tell": not in force.
 */
export async function readRecordAuthority(
  d: NodeFenceDeps,
  fence: NodeFence,
  record: V1Lease | undefined,
): Promise<RecordAuthority | undefined> {
  if (!watchdogLooks(fence) || !record) return undefined;
  const node = fence.spec.nodeName;
  const policy = d.recordPolicy
    ? d.recordPolicy.problems(0)
    : Promise.resolve([`this operator does not check the admission policy ${RECORD_POLICY}`]);
  const holder = record.spec?.holderIdentity ?? "";
  const pod = isPodName(holder)
    ? d.kube.readAgentPod(holder).then(
        (p) => holderProblem(node, holder, p),
        (err: unknown) => `cannot read the pod ${holder} that node ${node}'s agent record names as holder: ${errorMessage(err)}`,
      )
    : Promise.resolve(holderProblem(node, holder, undefined));
  const [problems, holderWhy] = await Promise.all([policy, pod]);
  return { policy: problems, ...(holderWhy !== undefined ? { holder: holderWhy } : {}) };
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
  authority: RecordAuthority | undefined,
): WatchdogEvidence | undefined {
  if (!watchdogLooks(fence)) return undefined;
  const input = d.caches.watchAgentRecords().look(fence.metadata?.uid ?? "", fence.spec.nodeName, record, kubeletSilentMs, authority);
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
  authority?: RecordAuthority,
): FenceObservation {
  const c = d.caches;
  const name = fence.spec.nodeName;
  const leaseObservedSilentMs = lease ? c.leaseSilentForMs(name, lease) : undefined;
  const watchdog = watchdogOf(d, fence, agentRecord, leaseObservedSilentMs, authority);
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
  private view:
    | {
        node: V1Node | undefined;
        lease: V1Lease | undefined;
        agentRecord: V1Lease | undefined;
        authority: RecordAuthority | undefined;
        at: number;
      }
    | undefined;

  constructor(d: NodeFenceDeps, operations: AgentOperations) {
    this.d = d;
    this.operations = operations;
  }

  async next(fence: NodeFence): Promise<Decided> {
    const reused = this.view !== undefined && performance.now() - this.view.at < (this.d.viewReuseMs ?? VIEW_REUSE_MS);
    if (!reused) this.view = await this.read(fence);
    let view = this.view!;
    let step = nextStep(observe(this.d, this.operations, fence, view.node, view.lease, view.agentRecord, view.authority));
    // Anything but bookkeeping is decided again on a read made after the last write: every destructive call,
    // and every step whose record is evidence (confirmed's heartbeat fingerprint, a manual confirmation).
    if (reused && !REUSABLE_VIEW.has(step.kind)) {
      view = this.view = await this.read(fence);
      step = nextStep(observe(this.d, this.operations, fence, view.node, view.lease, view.agentRecord, view.authority));
    }
    return { step, node: view.node, lease: view.lease };
  }

  private async read(fence: NodeFence) {
    const timer = this.d.metrics?.fenceStep.startTimer({ step: "read" });
    // The record's authority is read after the record (its holder is the record's): a record is evidence only with it.
    const [[node, lease], [agentRecord, authority]] = await Promise.all([
      readFresh(this.d.kube, fence),
      readFreshAgentRecord(this.d.kube, fence).then(async (r) => [r, await readRecordAuthority(this.d, fence, r)] as const),
    ]);
    timer?.();
    return { node, lease, agentRecord, authority, at: performance.now() };
  }
}
