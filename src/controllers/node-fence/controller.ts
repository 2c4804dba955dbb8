// The NodeFence controller: performs the state machine's next step (decide/fence-machine.ts), writes what
// happened to status (resourceVersion-guarded, stamped with the leader epoch), and asks again, until the
// machine says wait or done. Status is the only memory a restarted or newly elected operator needs.
//
// Each step is decided on the Node and its Lease read from the apiserver (never the cache) after the last write, so
// the destructive call that follows is made on a fresh view; bookkeeping steps (REUSABLE_VIEW) may use the read of
// the step before (observe.ts). Leadership is asserted right before each destructive call (destructive.ts).
// Agent operations run in the background (agent-operations.ts): no worker waits on a BMC or a person.
import type { V1Lease, V1Node } from "@kubernetes/client-node";
import type { NodeFence } from "../../api/v1alpha1.ts";
import { nextStep, type FenceObservation } from "../../decide/fence-machine.ts";
import { errorMessage } from "../../kube/api.ts";
import { SOLE_LEADER } from "../../runtime/leader.ts";
import { AgentOperations } from "./agent-operations.ts";
import { setFenceCondition } from "./conditions.ts";
import type { Performed, StepContext } from "./context.ts";
import type { NodeFenceDeps } from "./deps.ts";
import { announce, fenceEvents } from "./events.ts";
import { HISTORY_STEPS, HistoryRecorder } from "./history.ts";
import { StepViews, observe, readFresh, readFreshAgentRecord, readRecordAuthority } from "./observe.ts";
import { writeStatus } from "./status.ts";
import { perform } from "./steps.ts";
import { waitFor } from "./wait.ts";

const MAX_STEPS = 100;

export class NodeFenceController {
  private readonly d: NodeFenceDeps;
  private readonly ctx: StepContext;
  /** Background agent operations; their end re-enqueues the fence (set by the operator). */
  readonly operations: AgentOperations;
  enqueue: (name: string) => void = () => {};

  constructor(d: NodeFenceDeps) {
    this.d = d;
    const leadership = d.leadership ?? SOLE_LEADER;
    // An operation that ends during shutdown has its outcome written at once (the queue no longer runs), so the
    // next leader finds it recorded rather than Interrupted; drain waits for that write too.
    this.operations = new AgentOperations(
      (name) => {
        if (this.d.inflight?.stopping) void this.d.inflight.track(this.recordFinished(name));
        else this.enqueue(name);
      },
      (work) => void this.d.inflight?.track(work),
    );
    const now = () => d.clock().toUTC().toISO() ?? "";
    const ctx: StepContext = {
      d,
      leadership,
      operations: this.operations,
      history: new HistoryRecorder(d, leadership),
      now,
      write: (fence, change) => writeStatus(ctx, fence, change),
      cond: (s, c, fence) => setFenceCondition(s, c, fence, now()),
      event: (fence, type, reason, message, node) => fenceEvents(d.events, fence, type, reason, message, node),
      announce: (events) => announce(d.inflight, events),
    };
    this.ctx = ctx;
  }

  /** Writes the outcome of a finished agent operation, and nothing else (shutdown). */
  private async recordFinished(name: string): Promise<void> {
    try {
      const fence = await this.d.kube.getNodeFence(name);
      if (!fence) return;
      const [[node, lease], [agentRecord, authority]] = await Promise.all([
        readFresh(this.d.kube, fence),
        readFreshAgentRecord(this.d.kube, fence).then(async (r) => [r, await readRecordAuthority(this.d, fence, r)] as const),
      ]);
      const step = nextStep(observe(this.d, this.operations, fence, node, lease, agentRecord, authority));
      if (step.kind === "recordOutcome") await this.perform(fence, node, lease, step);
    } catch (err) {
      this.d.log.warn({ nodeFence: name, err: errorMessage(err) }, `could not record the outcome of ${name}'s agent operation on shutdown`);
    }
  }

  observe(fence: NodeFence, node: V1Node | undefined, lease: V1Lease | undefined): FenceObservation {
    return observe(this.d, this.operations, fence, node, lease);
  }

  async reconcile(name: string): Promise<{ requeueAfterMs?: number } | void> {
    let fence = await this.d.kube.getNodeFence(name);
    const views = new StepViews(this.d, this.operations);
    for (let i = 0; i < MAX_STEPS && fence; i++) {
      const { step, node, lease } = await views.next(fence);
      if (HISTORY_STEPS.has(step.kind)) await this.ctx.history.record(fence, node);
      if (step.kind === "done") return;
      const timer = this.d.metrics?.fenceStep.startTimer({ step: step.kind });
      if (step.kind === "wait") {
        await waitFor(this.ctx, fence, node, step);
        timer?.();
        return { requeueAfterMs: step.requeueAfterMs };
      }
      fence = await this.perform(fence, node, lease, step);
      timer?.();
    }
    return { requeueAfterMs: 1_000 };
  }

  private perform(fence: NodeFence, node: V1Node | undefined, lease: V1Lease | undefined, step: Performed): Promise<NodeFence | undefined> {
    const log = this.d.log.child({ nodeFence: fence.metadata?.name ?? "", step: step.kind });
    return perform(this.ctx, { fence, node, lease, step, log });
  }
}
