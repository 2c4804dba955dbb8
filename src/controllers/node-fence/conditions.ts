// The NodeFence's conditions: every one written with the fence's generation and the time it changed.
import type { NodeFence } from "../../api/v1alpha1.ts";
import { setCondition, type Condition } from "../../kube/conditions.ts";
import type { FenceCondition, Status } from "./context.ts";

export const FENCED_CONDITION = "Fenced";

export function setFenceCondition(s: Status, c: FenceCondition, fence: NodeFence, now: string): Status {
  s.conditions = setCondition(s.conditions as Condition[] | undefined, { ...c, observedGeneration: fence.metadata?.generation }, now);
  return s;
}
