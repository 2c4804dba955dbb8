// A wait (for an agent, a retry, a person): said in the fence's condition, and, when it is someone's mistake to fix,
// in a Warning Event when it begins.
import type { V1Node } from "@kubernetes/client-node";
import type { NodeFence } from "../../api/v1alpha1.ts";
import { agentRunning, type Step } from "../../decide/fence-machine.ts";
import { sameWatchdogStatus } from "../../decide/watchdog-fence.ts";
import { findCondition, type Condition } from "../../kube/conditions.ts";
import { FENCED_CONDITION } from "./conditions.ts";
import type { StepContext } from "./context.ts";

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

export async function waitFor(
  c: StepContext,
  fence: NodeFence,
  node: V1Node | undefined,
  step: Extract<Step, { kind: "wait" }>,
): Promise<void> {
  // Released, the fence still holds: an agent run after the release (action reboot's power-on, the lift of a storage
  // fence a later power-off made unneeded) must not turn the Fenced condition False. Its attempt is in status.
  if (fence.status?.phase === "Released" && step.reason === agentRunning("").reason) return;
  const type = fence.status?.phase === "Releasing" || fence.status?.phase === "Fenced" ? "Released" : FENCED_CONDITION;
  const before = findCondition(fence.status?.conditions as Condition[] | undefined, type);
  // While unfencing, the Fenced condition's reason says why (UnfenceRequested, Rebooted) and decides whether the
  // machine is powered back on: a wait for an agent (lifting a storage fence, one power-on of several) must not
  // overwrite it, or the next step would skip the power-on.
  const reason = fence.status?.phase === "Unfencing" && before?.reason ? before.reason : step.reason;
  await c.write(fence, (s) => {
    // A level of watchdog agents waiting: the arithmetic, every number, for a person to check.
    // Rewritten only when more than the time passed changed (a write per look would requeue the fence at once, in a loop).
    if (step.watchdog && !sameWatchdogStatus(s.watchdog, step.watchdog)) s.watchdog = step.watchdog;
    return c.cond(s, { type, status: "False", reason, message: step.message }, fence);
  });
  if (before?.reason !== step.reason && WARNING_WAITS.has(step.reason)) {
    c.d.log.warn({ nodeFence: fence.metadata?.name, reason: step.reason }, step.message);
    c.announce(c.event(fence, "Warning", step.reason, step.message, node));
  }
}
