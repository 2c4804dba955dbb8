// End-to-end on real nodes and a real kube-controller-manager (issue 31): a crashed node is partitioned by its own
// Lease's expiry, so it is fenced after its Lease expired and before the node controller marks it Ready=Unknown;
// with detection.waitForNodeController it is not powered off before Ready=Unknown. The node controller's grace
// (30 s) is set clearly longer than the nodes' Lease (8 s, renewed every 2 s), so the two instants are far apart.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { Bed } from "../lab/bed.ts";
import { assertFailover, failoverSteps } from "../lab/failover-timing.ts";
import { waitFor } from "../lab/health.ts";
import type { NodeFence } from "../src/api/v1alpha1.ts";

const GRACE_SECONDS = 30;
const LEASE_SECONDS = 8;
const released = (f: NodeFence) => f.status?.phase === "Released";

describe("e2e: a node's own expired Lease is the second signal (issue 31)", () => {
  let bed: Bed;
  before(async () => {
    bed = await Bed.up({
      nodes: 4,
      name: "lease-detection",
      nodeLeaseSeconds: LEASE_SECONDS,
      timings: { nodeMonitorGraceSeconds: GRACE_SECONDS },
    });
    await bed.policy("default", { guards: { maxUnhealthyNodes: 2, maxConcurrentFences: 2 } });
    await bed.startOperator();
  });
  after(async () => {
    const r = await bed?.invariant().catch(() => undefined);
    if (r)
      console.log(
        `invariant: ${r.identities} identities, ${r.replacements} replacements, ${r.fencedReplacements} after a node failure, ${r.violations.length} violations`,
      );
    await bed?.down();
  });

  /** The first instant after `since` at which the recorder saw the node with Ready=Unknown. */
  const readyUnknownAt = (node: string, since: number) =>
    bed.rec.first((e) => e.source === "node" && e.name === node && e.ready === "Unknown" && e.t >= since)?.t;

  /** Crashes the node of the StatefulSet's pod 0 and waits for the replacement, the fence and Ready=Unknown. */
  async function crashAndFence(sts: string) {
    const pods = await bed.statefulSet(sts, 2);
    const victim = pods.find((p) => p.metadata?.name === `${sts}-0`)!;
    const node = victim.spec!.nodeName!;
    const t0 = Date.now();
    await bed.lab.crash(node);
    const replacement = await bed.waitForReplacement(`${sts}-0`, victim.metadata!.uid!);
    const fence = await bed.waitForFence(node, released, "Released");
    await bed.lab.waitForNodeReadyStatus(node, "Unknown", 90_000);
    const order = assertFailover(
      bed.rec,
      // Only this crash's power-off: the first test may have fenced the same node.
      { node, oldUid: victim.metadata!.uid!, newUid: replacement.metadata!.uid!, name: `${sts}-0`, since: t0 },
      t0,
    );
    // The recorder's watch may deliver the update a moment after the read above saw it.
    const unknown = await waitFor(`the recorder sees ${node} Ready=Unknown`, async () => readyUnknownAt(node, t0), { timeoutMs: 10_000 });
    const s = (t: number) => ((t - t0) / 1000).toFixed(1);
    console.log(`${sts}: crash → ${failoverSteps(order, t0)}; Ready=Unknown ${s(unknown)} s`);
    return { node, t0, off: order.off, unknown, fence };
  }

  test("a crashed node is powered off after its Lease expired and before the node controller's Ready=Unknown", async () => {
    const r = await crashAndFence("lease");
    // The kubelet's last renewal was at most one renewal period (2 s) before the crash: the Lease expired no
    // earlier than 6 s after it, and the node controller waits its 30 s grace.
    assert.ok(
      r.off - r.t0 >= (LEASE_SECONDS - 2) * 1000,
      `powered off ${r.off - r.t0} ms after the crash: not before the Lease could expire`,
    );
    assert.ok(r.off < r.unknown, `powered off (${r.off - r.t0} ms) before Ready=Unknown (${r.unknown - r.t0} ms)\n${bed.rec.format(r.t0)}`);
    assert.equal(r.fence.spec.origin, "Automatic");
    assert.match(
      r.fence.spec.reason ?? "",
      new RegExp(
        `\\(Ready=True\\); partitioned because its Lease was not renewed for its leaseDurationSeconds ${LEASE_SECONDS}, as this operator observed \\(renewTime \\S+, on the node's clock\\)`,
      ),
    );
    assert.equal(r.fence.status?.policySnapshot?.waitForNodeController, false, "the snapshot carries the policy's switch");
    assert.deepEqual((await bed.invariant()).violations, []);
    await bed.unfence(r.node);
  });

  test("waitForNodeController: true: the crashed node is not powered off before Ready=Unknown", async () => {
    await bed.kubectl("patch", "fencingpolicy", "default", "--type=merge", "-p", '{"spec":{"detection":{"waitForNodeController":true}}}');
    const r = await crashAndFence("wait");
    assert.ok(r.off > r.unknown, `powered off (${r.off - r.t0} ms) after Ready=Unknown (${r.unknown - r.t0} ms)\n${bed.rec.format(r.t0)}`);
    assert.ok(
      r.off - r.t0 >= (GRACE_SECONDS - 2) * 1000,
      `powered off ${r.off - r.t0} ms after the crash: the node controller's grace first`,
    );
    assert.match(r.fence.spec.reason ?? "", /partitioned because the node controller marked it Ready=Unknown/);
    assert.equal(r.fence.status?.policySnapshot?.waitForNodeController, true);
    assert.deepEqual((await bed.invariant()).violations, []);
    await bed.unfence(r.node);
  });
});
