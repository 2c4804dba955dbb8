// Ending a fence early or undoing it: cancelled (the node recovered before it was fenced) or unfencing started. Both
// withdraw the fence's running agent operations first; the marks come off in marks.ts.
import type { Status, StepContext, StepHandler } from "./context.ts";
import { FENCED_CONDITION } from "./conditions.ts";
import { unmark } from "./marks.ts";

export const cancel: StepHandler<"cancel"> = async (c, { fence, node, step, log }) => {
  c.operations.abort(fence.metadata?.uid ?? "");
  if (node) await unmark(c, fence, node);
  const next = await c.write(fence, (s) => {
    cancelAttempts(c, s, step.message);
    s.phase = "Unfenced";
    s.unfencedTime = c.now();
    return c.cond(s, { type: FENCED_CONDITION, status: "False", reason: "NodeRecovered", message: step.message }, fence);
  });
  log.info(`fencing of ${fence.spec.nodeName} cancelled: ${step.message}`);
  c.d.metrics?.fences.inc({ outcome: "Cancelled", agent: "" });
  c.announce(c.event(next, "Normal", "FenceCancelled", step.message, node));
  return next;
};

export const startUnfence: StepHandler<"startUnfence"> = async (c, { fence, node, step }) => {
  c.operations.abort(fence.metadata?.uid ?? "");
  const next = await c.write(fence, (s) => {
    cancelAttempts(c, s, "unfence requested");
    s.phase = "Unfencing";
    return c.cond(s, { type: FENCED_CONDITION, status: "False", reason: step.reason, message: "unfencing" }, fence);
  });
  c.announce(c.event(next, "Normal", "Unfencing", `unfencing ${fence.spec.nodeName} (${step.reason})`, node));
  return next;
};

/** Attempts still InProgress end Cancelled (their operations were withdrawn). */
function cancelAttempts(c: StepContext, s: Status, why: string): void {
  for (const a of s.attempts ?? [])
    if (a.outcome === "InProgress") Object.assign(a, { outcome: "Cancelled", endTime: c.now(), message: `cancelled: ${why}` });
}
