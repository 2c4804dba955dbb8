// End-to-end release through the out-of-service taint (8): Stockade fences, taints the node
// node.kubernetes.io/out-of-service, the pod GC controller force-deletes the terminating pods, and
// Stockade removes the taint once nothing is left terminating there.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { Bed } from "../lab/bed.ts";
import { failoverTimeline } from "../lab/failover-timing.ts";

describe("e2e: out-of-service taint release mode", () => {
  let bed: Bed;
  before(async () => {
    bed = await Bed.up({ nodes: 3, name: "oos" });
    await bed.policy("default", {
      release: { forceDeletePods: false, deleteVolumeAttachments: true, outOfServiceTaint: true },
      guards: { maxUnhealthyNodes: 1 },
    });
    await bed.startOperator();
  });
  after(async () => {
    await bed?.down();
  });

  test("8. the pod-GC controller clears the pods; the taint is removed afterwards", async () => {
    const [pod] = (await bed.statefulSet("oos", 1))!;
    const uid = pod!.metadata!.uid!;
    const node = pod!.spec!.nodeName!;
    const t0 = Date.now();
    await bed.lab.crash(node);
    const replacement = await bed.waitForReplacement("oos-0", uid, 180_000);
    const f = await bed.waitForFence(node, (x) => x.status?.phase === "Released", "Released", 120_000);
    const rel = f.status?.releases ?? [];
    assert.deepEqual(
      rel.filter((r) => r.kind === "Taint").map((r) => r.action),
      ["Added", "Removed"],
    );
    assert.equal(rel.filter((r) => r.kind === "Pod").length, 0, "Stockade itself deleted no pod");
    const n = await bed.lab.core.readNode({ name: node });
    assert.ok(!n.spec?.taints?.some((t) => t.key === "node.kubernetes.io/out-of-service"), "out-of-service taint removed");
    assert.ok(
      n.spec?.taints?.some((t) => t.key === "stockade.io/fenced"),
      "still fenced",
    );

    const { off, gone, running } = failoverTimeline(bed.rec, { node, oldUid: uid, newUid: replacement.metadata?.uid, since: t0 });
    const tainted = bed.when(
      (e) => e.source === "node" && e.name === node && e.taints.includes("node.kubernetes.io/out-of-service:NoExecute"),
    );
    const untainted = bed.when(
      (e) =>
        e.source === "node" &&
        e.name === node &&
        !!tainted &&
        e.t > tainted &&
        !e.taints.includes("node.kubernetes.io/out-of-service:NoExecute"),
    );
    assert.ok(off && tainted && gone && untainted && running, bed.rec.format(t0));
    assert.ok(
      off < tainted && tainted < gone && gone < untainted && gone <= running,
      `power off < taint < pod gone < untaint, replacement\n${bed.rec.format(t0)}`,
    );
    console.log(`failover (out-of-service mode): ${((running - t0) / 1000).toFixed(1)} s`);
    assert.deepEqual((await bed.invariant()).violations, []);
  });
});
