// What a fence puts on its node — the fenced taint and the node's Fenced condition (and, at release, the
// out-of-service taint) — and takes off again when it is unfenced or deleted.
import type { V1Node } from "@kubernetes/client-node";
import type { NodeFence } from "../../api/v1alpha1.ts";
import { FENCED_TAINT, OUT_OF_SERVICE_TAINT } from "../../decide/fence-machine.ts";
import { FENCED_CONDITION } from "./conditions.ts";
import type { StepContext, StepHandler } from "./context.ts";
import { markFenced, removeFenceTaints } from "./destructive.ts";

/** Confirmed fenced: the node is tainted and the fence goes on to release. */
export const markNode: StepHandler<"markNode"> = async (c, { fence, node }) => {
  if (node) await markFenced(c, fence, node);
  return await c.write(fence, (s) => {
    s.phase = "Releasing";
    const storageOnly = s.evidence?.method === "StorageFenced";
    return c.cond(
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
};

export const unmarkNode: StepHandler<"unmarkNode"> = async (c, { fence, node, step, log }) => {
  const nodeName = fence.spec.nodeName;
  if (node) await unmark(c, fence, node);
  const next = await c.write(fence, (s) => {
    s.phase = "Unfenced";
    s.unfencedTime = c.now();
    return c.cond(
      s,
      { type: FENCED_CONDITION, status: "False", reason: step.reason, message: "unfenced: taint and node condition removed" },
      fence,
    );
  });
  log.info({ reason: step.reason }, `node ${nodeName} unfenced`);
  c.announce(c.event(next, "Normal", "Unfenced", `node ${nodeName} unfenced (${step.reason})`, node));
  return next;
};

/** Removes the taints and the node condition this fence put on the node. */
export async function unmark(c: StepContext, fence: NodeFence, node: V1Node): Promise<void> {
  const ours = new Set([
    FENCED_TAINT,
    ...(fence.status?.releases?.some((r) => r.kind === "Taint" && r.action === "Added") ? [OUT_OF_SERVICE_TAINT] : []),
  ]);
  await removeFenceTaints(c, fence, node, ours);
  if (node.status?.conditions?.some((x) => x.type === FENCED_CONDITION))
    await c.d.kube.setNodeCondition(fence.spec.nodeName, FENCED_CONDITION, null);
}
