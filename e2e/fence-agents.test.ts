// End-to-end through Debian's fence_ipmilan (3), and failures (4): an unreachable BMC fails the fence
// with nothing released; a wrong password on level 1 escalates to level 2, which succeeds.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { setTimeout as sleep } from "node:timers/promises";
import { Bed, NS, SECRETS_NS } from "../lab/bed.ts";
import { assertFailover } from "../lab/failover-timing.ts";
import type { NodeFence } from "../src/api/v1alpha1.ts";

describe("e2e: fence_ipmilan, failures and escalation", () => {
  let bed: Bed;
  before(async () => {
    bed = await Bed.up({ nodes: 3, name: "agents" });
    await bed.policy("default", { escalation: [{ agents: [{ name: "lab-fence-ipmilan" }] }], guards: { maxUnhealthyNodes: 1 } });
    await bed.startOperator();
    await bed.statefulSet("kv", 1);
  });
  after(async () => {
    await bed?.down();
  });

  const current = async () => {
    const p = (await bed.lab.core.listNamespacedPod({ namespace: NS, fieldSelector: "metadata.name=kv-0" })).items[0]!;
    return { uid: p.metadata!.uid!, node: p.spec!.nodeName! };
  };
  const escalation = (levels: string[][]) =>
    bed.kubectl(
      "patch",
      "fencingpolicy",
      "default",
      "--type=merge",
      "-p",
      JSON.stringify({ spec: { escalation: levels.map((l) => ({ agents: l.map((name) => ({ name })) })) } }),
    );

  test("3. partition fenced through the fenceAgent type with Debian's fence_ipmilan", async () => {
    const { uid, node } = await current();
    const t0 = Date.now();
    await bed.lab.partition(node);
    const replacement = await bed.waitForReplacement("kv-0", uid);
    const f = await bed.waitForFence(node, (x) => x.status?.phase === "Released", "Released");
    const off = f.status?.attempts?.filter((a) => a.operation === "off") ?? [];
    assert.deepEqual(
      off.map((a) => [a.agent, a.outcome]),
      [["lab-fence-ipmilan", "Succeeded"]],
    );
    assert.equal(bed.lab.machine(node).power, "off");
    assertFailover(bed.rec, { node, oldUid: uid, newUid: replacement.metadata!.uid!, since: t0 });
    await bed.unfence(node); // powers the machine back on through fence_ipmilan
    assert.equal(bed.lab.machine(node).power, "on");
    assert.deepEqual((await bed.invariant()).violations, []);
  });

  test("4a. BMC unreachable: the NodeFence fails with a clear reason and nothing is released", async () => {
    await escalation([["lab-ipmi"]]);
    const { uid, node } = await current();
    await bed.kubectl("delete", "nodefence", node, "--ignore-not-found");
    await bed.lab.setBmcReachable(node, false);
    await bed.lab.crash(node);
    const f = await bed.waitForFence(node, (x) => x.status?.phase === "Failed", "Failed", 120_000);
    const failed = f.status?.conditions?.find((c) => c.type === "Failed");
    assert.equal(failed?.reason, "FencingFailed");
    assert.match(failed?.message ?? "", /lab-ipmi: (TimedOut|Failed)/);
    assert.match(
      f.status?.attempts?.at(-1)?.message ?? "",
      /unreachable|no answer|timed out|deadline/i,
      JSON.stringify(f.status?.attempts),
    );
    assert.equal(f.status?.releases?.length ?? 0, 0, "nothing released");
    await sleep(3000);
    assert.equal((await current()).uid, uid, "the pod was not force-deleted");
    assert.equal(bed.lab.machine(node).power, "on");
    const ev = await bed.lab.core.listNamespacedEvent({
      namespace: "default",
      fieldSelector: `involvedObject.name=${node},reason=FenceFailed`,
    });
    assert.ok(ev.items.length >= 1, "a FenceFailed Event");
    assert.deepEqual((await bed.invariant()).violations, []);
  });

  test("4b. wrong password on level 1 escalates to level 2, which fences and releases", async () => {
    const { uid, node } = await current();
    await bed.lab.setBmcReachable(node, true);
    await bed.lab.core.createNamespacedSecret({
      namespace: SECRETS_NS,
      body: { metadata: { name: "bmc-wrong" }, stringData: { password: "not-the-password" } },
    });
    await bed.create("fenceagents", {
      metadata: { name: "lab-ipmi-wrong-password" },
      spec: {
        type: "ipmi",
        parameters: { username: "admin", cipher: "3" },
        nodeTemplates: {
          address: '{{ labels["node-restriction.kubernetes.io/bmc-host"] }}',
          port: '{{ labels["node-restriction.kubernetes.io/bmc-port"] }}',
        },
        credentialsSecretRef: { namespace: SECRETS_NS, name: "bmc-wrong" },
        timeoutSeconds: 10,
        retries: 2,
      },
    });
    await escalation([["lab-ipmi-wrong-password"], ["lab-ipmi"]]);
    // Retrying a failed fence is an administrator's decision: delete the Failed NodeFence; policy makes a new one.
    await bed.kubectl("delete", "nodefence", node);
    const f: NodeFence = await bed.waitForFence(node, (x) => x.status?.phase === "Released", "Released", 120_000);
    const off = (f.status?.attempts ?? []).filter((a) => a.operation === "off");
    assert.deepEqual(
      off.map((a) => [a.level, a.agent, a.outcome]),
      [
        [0, "lab-ipmi-wrong-password", "Failed"],
        [1, "lab-ipmi", "Succeeded"],
      ],
    );
    assert.match(off[0]?.message ?? "", /auth|password|HMAC/i);
    assert.ok(!JSON.stringify(f.status).includes("not-the-password"), "no credential in status");
    assert.equal(f.status?.evidence?.agents?.join(), "lab-ipmi");
    await bed.waitForReplacement("kv-0", uid);
    assert.deepEqual((await bed.invariant()).violations, []);
  });
});
