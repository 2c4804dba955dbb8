// Releasing a confirmed fence: the node's guarded pods force-deleted, its VolumeAttachments deleted, the claim locks
// its pods held broken, the out-of-service taint added — each call in destructive.ts — recorded in status, and then
// the fence marked Released. On StorageFenced evidence, only volumes: the machine may still run.
import type { V1Node } from "@kubernetes/client-node";
import type { NodeFence } from "../../api/v1alpha1.ts";
import { OUT_OF_SERVICE_TAINT, claimLockMessage, type ReleaseItem } from "../../decide/fence-machine.ts";
import { releaseCounts } from "../../decide/fence-history.ts";
import { DateTime } from "luxon";
import type { Release, StepContext, StepHandler } from "./context.ts";
import { assertReleaseEvidence, breakClaimLock, deleteVolumeAttachment, forceDeletePod, setOutOfServiceTaint } from "./destructive.ts";

/** What a StorageFenced release says about the node's pods (status, Event). */
const PODS_STAY =
  "storage fenced only (the machine may still run): volumes released, pods NOT force-deleted and no out-of-service taint; the pods stay until the machine is confirmed off (a power agent, or the manual agent) or an administrator decides";

/**
 * Releases a batch of items side by side (each its own call, with leadership asserted right before it), then records
 * every one that was released in one status write — also when another failed, whose error is thrown after it.
 */
export const release: StepHandler<"release"> = async (c, { fence, node, step }) => {
  const nodeName = fence.spec.nodeName;
  assertReleaseEvidence(fence, step.items);
  const evidence = fence.status?.evidence?.method ?? "";
  const outcomes = await Promise.allSettled(step.items.map((item) => releaseOne(c, fence, node, item, evidence)));
  const recs = outcomes.flatMap((o) => (o.status === "fulfilled" ? [o.value] : []));
  const failed = outcomes.find((o): o is PromiseRejectedResult => o.status === "rejected");
  if (!recs.length) throw failed?.reason;
  const next = await c.write(fence, (s) => {
    // Counted as they happen: the list is bounded (decide/status-bound.ts), the history's counts are not.
    const before = releaseCounts(s);
    s.releases = [...(s.releases ?? []), ...recs];
    s.podsReleased = before.pods + recs.filter((r) => r.kind === "Pod" && r.action === "ForceDeleted").length;
    s.volumesReleased =
      before.volumes +
      recs.filter((r) => (r.kind === "VolumeAttachment" && r.action === "Deleted") || (r.kind === "ClaimLock" && r.action === "Broken"))
        .length;
    return s;
  });
  for (const rec of recs) {
    const what = `${rec.kind} ${rec.namespace ? `${rec.namespace}/` : ""}${rec.name}: ${rec.action}`;
    c.d.log.info({ nodeFence: nodeName, release: rec }, `released ${what}`);
    c.d.metrics?.releases.inc({ kind: rec.kind, action: rec.action });
    c.announce(c.event(next, "Normal", "Release", what, rec.kind === "Taint" ? node : undefined));
  }
  if (failed) throw failed.reason;
  return next;
};

/** One release call; returns its record for status. */
async function releaseOne(
  c: StepContext,
  fence: NodeFence,
  node: V1Node | undefined,
  item: ReleaseItem,
  evidence: string,
): Promise<Release> {
  const nodeName = fence.spec.nodeName;
  if (item.kind === "Pod") return await releasePod(c, item, nodeName, evidence);
  if (item.kind === "ClaimLock") {
    const action = await breakClaimLock(c, item, `NodeFence ${nodeName}`, () => c.now());
    const [ns, claim, uid] = [item.pvc.metadata?.namespace ?? "", item.pvc.metadata?.name ?? "", item.pvc.metadata?.uid];
    return { kind: "ClaimLock", namespace: ns, name: claim, uid, action, time: c.now(), message: claimLockMessage(item.pod, item.token) };
  }
  if (item.kind === "VolumeAttachment") {
    const result = await deleteVolumeAttachment(c, item);
    return {
      kind: "VolumeAttachment",
      name: item.name,
      uid: item.uid,
      action: result === "deleted" ? "Deleted" : "AlreadyGone",
      time: c.now(),
    };
  }
  await setOutOfServiceTaint(c, fence, node, item.action);
  return { kind: "Taint", name: OUT_OF_SERVICE_TAINT, action: item.action, time: c.now() };
}

async function releasePod(
  c: StepContext,
  item: Extract<ReleaseItem, { kind: "Pod" }>,
  nodeName: string,
  evidence: string,
): Promise<Release> {
  const p = item.pod;
  const result = await forceDeletePod(c, p);
  const rec: Release = {
    kind: "Pod",
    namespace: p.metadata?.namespace,
    name: p.metadata?.name ?? "",
    uid: p.metadata?.uid,
    action: result === "deleted" ? "ForceDeleted" : "AlreadyGone",
    time: c.now(),
    message: `priority ${p.spec?.priority ?? 0}`,
  };
  if (result === "deleted") {
    // The one Event about a destructive call is written before the step is recorded (the batch's pods in
    // parallel, so it costs one round trip a step): an operator killed right after still leaves it.
    await c.d.events.record(
      { apiVersion: "v1", kind: "Pod", name: rec.name, namespace: rec.namespace, uid: rec.uid },
      "Warning",
      "ForceDeleted",
      `node ${nodeName} is confirmed fenced (${evidence}); force-deleted so that a replacement can start`,
    );
  }
  return rec;
}

/** Every item released: the fence holds, Released. */
export const released: StepHandler<"released"> = async (c, { fence, node, log }) => {
  const nodeName = fence.spec.nodeName;
  const storageOnly = fence.status?.evidence?.method === "StorageFenced";
  const next = await c.write(fence, (s) => {
    s.phase = "Released";
    s.releasedTime = c.now();
    const n = (s.releases ?? []).length + (s.releasesDropped ?? 0);
    return c.cond(
      s,
      storageOnly
        ? { type: "Released", status: "True", reason: "VolumesReleased", message: `${n} volume release(s) recorded; ${PODS_STAY}` }
        : { type: "Released", status: "True", reason: "Released", message: `${n} release(s) recorded` },
      fence,
    );
  });
  if (storageOnly) c.announce(c.event(next, "Warning", "PodsNotReleased", `node ${nodeName}: ${PODS_STAY}`, node));
  const count = (next.status?.releases?.length ?? 0) + (next.status?.releasesDropped ?? 0);
  log.info({ releases: count }, `node ${nodeName}: released`);
  const beat = next.status?.lastHeartbeatTime ? DateTime.fromISO(next.status.lastHeartbeatTime) : undefined;
  if (beat?.isValid) c.d.metrics?.failoverDuration.observe(c.d.clock().diff(beat).as("seconds"));
  c.announce(c.event(next, "Normal", "Released", `released ${count} item(s) of ${nodeName}`, node));
  return next;
};
