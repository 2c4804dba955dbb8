// Two replicas with leader election: only the leader acts; the leader killed in the middle of a fence
// is replaced by the other replica, which resumes from the NodeFence's status and releases once.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { CoordinationV1Api } from "@kubernetes/client-node";
import { Bed, NS, SECRETS_NS } from "../lab/bed.ts";
import { assertFailover } from "../lab/failover-timing.ts";
import { waitFor } from "../lab/health.ts";

describe("e2e: leader election", () => {
  let bed: Bed;
  before(async () => {
    bed = await Bed.up({ nodes: 4, name: "leader" });
    await bed.policy("default", { guards: { maxUnhealthyNodes: 2 } });
  });
  after(async () => {
    await bed?.down();
  });

  const holder = async () =>
    (await bed.lab.kc.makeApiClient(CoordinationV1Api).readNamespacedLease({ name: "stockade-operator", namespace: SECRETS_NS })).spec
      ?.holderIdentity;

  test("the leader is killed in the middle of a fence; the other replica finishes it without releasing twice", async () => {
    const replicas = [await bed.startOperator({ leaderElect: true }), await bed.startOperator({ leaderElect: true })];
    const first = await waitFor("a leader", async () => (await holder()) || undefined, { timeoutMs: 30_000 });
    const leaderIndex = Number(/e2e-operator-(\d+)/.exec(first)![1]) - 1;
    const leader = replicas[leaderIndex]!;
    const follower = replicas[1 - leaderIndex]!;

    const pods = await bed.statefulSet("db", 2);
    const victim = pods.find((p) => p.metadata?.name === "db-0")!;
    const node = victim.spec!.nodeName!;
    const uid = victim.metadata!.uid!;
    const t0 = Date.now();
    await bed.lab.setBmcReachable(node, false); // the attempt hangs: the kill lands in the middle of it
    await bed.lab.crash(node);
    await bed.waitForFence(node, (f) => (f.status?.attempts ?? []).some((a) => a.outcome === "InProgress"), "has an attempt in progress");
    await bed.killOperator("SIGKILL", leader);
    await bed.lab.setBmcReachable(node, true);
    assert.equal(bed.lab.machine(node).power, "on", "nothing powered off yet");

    const replacement = await bed.waitForReplacement("db-0", uid, 120_000);
    const f = await bed.waitForFence(node, (x) => x.status?.phase === "Released", "Released");
    const second = await holder();
    assert.notEqual(second, first, "the other replica holds the Lease");
    assert.equal(follower.exitCode, null, "the new leader is running");
    const off = (f.status?.attempts ?? []).filter((a) => a.operation === "off").map((a) => a.outcome);
    assert.deepEqual(off, ["Interrupted", "Succeeded"]);
    assert.deepEqual(
      (f.status?.releases ?? []).filter((r) => r.kind === "Pod").map((r) => r.uid),
      [uid],
      "released exactly once",
    );
    const ev = await bed.lab.core.listNamespacedEvent({ namespace: NS, fieldSelector: `involvedObject.uid=${uid},reason=ForceDeleted` });
    assert.equal(ev.items.length, 1);
    assert.equal(ev.items[0]?.count ?? 1, 1);
    const { gone } = assertFailover(bed.rec, { node, oldUid: uid, newUid: replacement.metadata!.uid!, since: t0 });
    assert.deepEqual((await bed.invariant()).violations, []);
    console.log(`leader failover: old leader killed → fence resumed and released in ${((gone - t0) / 1000).toFixed(1)} s after the crash`);
  });
});
