// The NodeFence controller lives in node-fence/ (controller.ts: the reconcile loop; steps.ts: what each step does;
// destructive.ts: every destructive call and its checks). This file keeps the names others import.
export { NodeFenceController } from "./node-fence/controller.ts";
export { FENCED_CONDITION } from "./node-fence/conditions.ts";
export type { NodeFenceDeps } from "./node-fence/deps.ts";
export { HISTORY_FINALIZE_GRACE_MS } from "./node-fence/history.ts";
