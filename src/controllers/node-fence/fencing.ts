// The fence's own bookkeeping from request to confirmation: started, level by level (escalate), a round failed and
// retried, an attempt interrupted by a restart, confirmed fenced, and back to fencing when the node beats again.
import { DateTime } from "luxon";
import { CONFIRMED_OFF_ANNOTATION } from "../../decide/fence-machine.ts";
import { FENCED_CONDITION } from "./conditions.ts";
import type { StepHandler } from "./context.ts";
import { lastHeartbeat } from "./observe.ts";

export const start: StepHandler<"start"> = async (c, { fence, node, lease, step, log }) => {
  const nodeName = fence.spec.nodeName;
  const beat = lastHeartbeat(node, lease, c.d.clock());
  const next = await c.write(fence, (s) => {
    s.phase = "Pending";
    s.policy = step.policy;
    s.policySnapshot = step.snapshot;
    s.nodeSnapshot = step.node;
    s.bootID = step.bootID;
    s.round = 0;
    s.failures = 0;
    if (beat) s.lastHeartbeatTime = beat.toUTC().toISO() ?? undefined;
    s.startTime = c.now();
    const message = `fencing requested (${fence.spec.origin ?? "Manual"})`;
    return c.cond(s, { type: FENCED_CONDITION, status: "False", reason: "Pending", message }, fence);
  });
  log.info({ policy: step.policy, bootID: step.bootID, origin: fence.spec.origin }, `fencing ${nodeName}: pending`);
  const message = `fencing ${nodeName} under FencingPolicy ${step.policy}: ${fence.spec.reason ?? ""}`;
  c.announce(c.event(next, "Normal", "FencePending", message, node));
  return next;
};

export const begin: StepHandler<"begin"> = async (c, { fence }) =>
  await c.write(fence, (s) => {
    s.phase = "Fencing";
    s.currentLevel = 0;
    s.levelStartTime = c.now();
    return c.cond(s, { type: FENCED_CONDITION, status: "False", reason: "Fencing", message: "running escalation level 1" }, fence);
  });

export const interrupted: StepHandler<"interrupted"> = async (c, { fence, step }) =>
  await c.write(fence, (s) => {
    const a = s.attempts?.[step.index];
    if (a) {
      a.outcome = "Interrupted";
      a.endTime = c.now();
      a.message = "the operator stopped during this attempt; it is retried (agents are idempotent)";
    }
    return s;
  });

export const escalate: StepHandler<"escalate"> = async (c, { fence, node, step, log }) => {
  const next = await c.write(fence, (s) => {
    s.currentLevel = step.to;
    s.levelStartTime = c.now();
    return c.cond(s, { type: FENCED_CONDITION, status: "False", reason: "Escalating", message: step.message }, fence);
  });
  log.warn({ level: step.to + 1 }, step.message);
  c.announce(c.event(next, "Warning", "Escalating", step.message, node));
  return next;
};

export const roundFailed: StepHandler<"roundFailed"> = async (c, { fence, node, step, log }) => {
  const next = await c.write(fence, (s) => {
    s.phase = "Failed";
    s.failures = (s.failures ?? 0) + 1;
    s.nextRetryTime = step.retryAt.toUTC().toISO() ?? undefined;
    c.cond(s, { type: "Failed", status: "True", reason: step.reason, message: step.message }, fence);
    return c.cond(s, { type: FENCED_CONDITION, status: "False", reason: step.reason, message: "not fenced: nothing is released" }, fence);
  });
  log.error({ reason: step.reason }, `fencing ${fence.spec.nodeName} failed: ${step.message}`);
  c.d.metrics?.fences.inc({ outcome: "Failed", agent: "" });
  c.announce(c.event(next, "Warning", "FenceFailed", `${step.message}; nothing was released`, node));
  return next;
};

export const retry: StepHandler<"retry"> = async (c, { fence, node, step, log }) => {
  const next = await c.write(fence, (s) => {
    s.phase = "Fencing";
    s.round = (s.round ?? 0) + 1;
    s.currentLevel = 0;
    s.levelStartTime = c.now();
    if (step.snapshot) s.policySnapshot = step.snapshot;
    delete s.nextRetryTime;
    c.cond(s, { type: "Failed", status: "False", reason: "Retrying", message: step.message }, fence);
    return c.cond(s, { type: FENCED_CONDITION, status: "False", reason: "Fencing", message: step.message }, fence);
  });
  log.warn(step.message);
  c.announce(c.event(next, "Normal", "FenceRetry", step.message, node));
  return next;
};

export const confirmed: StepHandler<"confirmed"> = async (c, { fence, node, step, log }) => {
  const { evidence } = step;
  const next = await c.write(fence, (s) => {
    s.phase = "Fenced";
    s.fencedTime = c.now();
    s.evidence = { ...evidence, time: c.now() };
    return c.cond(s, { type: FENCED_CONDITION, status: "True", reason: evidence.method, message: evidence.detail }, fence);
  });
  log.warn({ evidence }, `node ${fence.spec.nodeName} confirmed fenced: ${evidence.detail}`);
  c.d.metrics?.fences.inc({ outcome: "Fenced", agent: evidence.agents.join(",") || evidence.method });
  const started = next.status?.startTime ? DateTime.fromISO(next.status.startTime) : undefined;
  if (started?.isValid) c.d.metrics?.fenceDuration.observe(c.d.clock().diff(started).as("seconds"));
  c.announce(c.event(next, "Warning", "Fenced", `confirmed fenced (${evidence.method}): ${evidence.detail}`, node));
  return next;
};

export const reenter: StepHandler<"reenter"> = async (c, { fence, node, step, log }) => {
  // The machine runs again: whatever confirmed it off no longer holds. A manual confirmation must be given anew.
  let current = fence;
  if (current.metadata?.annotations?.[CONFIRMED_OFF_ANNOTATION] !== undefined)
    current = await c.d.kube.patchNodeFenceMetadata(current, { annotations: { [CONFIRMED_OFF_ANNOTATION]: null } });
  const next = await c.write(current, (s) => {
    s.phase = "Fencing";
    s.round = (s.round ?? 0) + 1;
    s.currentLevel = 0;
    s.levelStartTime = c.now();
    delete s.evidence;
    delete s.fencedTime;
    c.cond(s, { type: "Released", status: "False", reason: "HeartbeatAfterFence", message: step.message }, current);
    return c.cond(s, { type: FENCED_CONDITION, status: "False", reason: "HeartbeatAfterFence", message: step.message }, current);
  });
  log.error(`node ${fence.spec.nodeName}: ${step.message}`);
  c.announce(c.event(next, "Warning", "HeartbeatAfterFence", `release stopped: ${step.message}`, node));
  return next;
};
