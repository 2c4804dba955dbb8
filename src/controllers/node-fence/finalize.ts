// A deleted NodeFence: nothing more runs for it, the marks it put on the node come off with it, and its FenceRecord is
// written before its finalizer goes.
import { ABANDON_STORAGE_FENCES_ANNOTATION, FINALIZER, abandonedStorageFences } from "../../decide/fence-machine.ts";
import { isNotFound } from "../../kube/api.ts";
import type { StepHandler } from "./context.ts";
import { unmark } from "./marks.ts";

export const addFinalizer: StepHandler<"addFinalizer"> = async (c, { fence }) =>
  await c.d.kube.patchNodeFenceMetadata(fence, { finalizers: [...(fence.metadata?.finalizers ?? []), FINALIZER] });

export const finalize: StepHandler<"finalize"> = async (c, { fence, node, log }) => {
  const name = fence.metadata?.name ?? "";
  const uid = fence.metadata?.uid ?? "";
  // Deleted: nothing more runs for it, and the marks it put on the node come off with it. Its storage fences
  // were lifted before this step (fence-machine), unless an administrator abandoned them: said where it lasts.
  c.operations.abort(uid);
  if (node) await unmark(c, fence, node);
  const agents = new Map(c.d.caches.agents.list().map((a) => [a.metadata?.name ?? "", a] as const));
  const left = abandonedStorageFences({ fence, agents });
  if (left.length) {
    const msg = `NodeFence ${name} deleted with its storage fence(s) abandoned (annotation ${ABANDON_STORAGE_FENCES_ANNOTATION}): ${left.join(", ")} not lifted; their NetworkFences stay in place until removed by hand (docs/safety.md §3)`;
    log.warn({ abandoned: left }, msg);
    // Written before the finalizer goes: the Node's Event outlives the NodeFence's.
    await Promise.all(c.event(fence, "Warning", "StorageFenceAbandoned", msg, node));
  }
  log.info(`NodeFence ${name} deleted: taints and node condition removed`);
  // What is left of the episode once the NodeFence is gone: written before the finalizer goes.
  await c.history.final(fence, node);
  try {
    await c.d.kube.patchNodeFenceMetadata(fence, { finalizers: (fence.metadata?.finalizers ?? []).filter((f) => f !== FINALIZER) });
  } catch (err) {
    if (!isNotFound(err)) throw err;
  }
  c.history.forget(uid);
  return undefined;
};
