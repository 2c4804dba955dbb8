// End-to-end through the aws agent on real lab nodes, against moto's EC2 endpoint (Debian trixie's python3-moto,
// IAM authentication on) with the lab's glue tying each instance to its machine's real power (lab/ec2-peer.ts).
// Each node registers with the providerID of its instance; the agent reads the instance from there.
// 1. crash → StopInstances (Force) → DescribeInstances says stopped → release → replacement Running; unfence starts it;
// 2. an EC2 API that never answers: TimedOut, the fence Failed, nothing released;
// 3. wrong credentials (refused by moto itself: AuthFailure) on level 1 → level 2 fences;
// 4. throttling (503 RequestLimitExceeded, injected by the glue) retried within the deadline;
// 5. a providerID of the wrong form and a missing instance: clear errors, nothing released.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { Bed, NS, SECRETS_NS } from "../lab/bed.ts";
import { Ec2Peer } from "../lab/ec2-peer.ts";
import { assertFailover, failoverSteps } from "../lab/failover-timing.ts";
import type { NodeFence } from "../src/api/v1alpha1.ts";

const NODES = ["node-1", "node-2", "node-3"];
const released = (f: NodeFence) => f.status?.phase === "Released";
const failedPhase = (f: NodeFence) => f.status?.phase === "Failed";

describe("e2e: fencing EC2 instances through the aws agent", () => {
  let bed: Bed;
  let peer: Ec2Peer;
  let ids: Map<string, string>;
  const wrongSecret = "wrong-secret-access-key-000000000000000000";

  before(async () => {
    const dir = mkdtempSync(join(tmpdir(), "stockade-e2e-aws-"));
    peer = await Ec2Peer.start(join(dir, "ec2"));
    ids = await peer.runInstances(NODES); // instance ids first: the nodes register with them
    bed = await Bed.up({ nodes: NODES.length, name: "aws", dir, providerID: (n) => Ec2Peer.providerID(ids.get(n.name)!) });
    peer.glue.attach(bed.lab.state, ids);
    const secret = (name: string, data: Record<string, string>) =>
      bed.lab.core.createNamespacedSecret({ namespace: SECRETS_NS, body: { metadata: { name }, stringData: data } });
    await secret("aws-fencer", { ...peer.fencer });
    await secret("aws-wrong", { accessKeyId: peer.fencer.accessKeyId, secretAccessKey: wrongSecret });
    const agent = (name: string, extra: object = {}) =>
      bed.create("fenceagents", {
        metadata: { name },
        spec: {
          type: "aws",
          parameters: { endpoint: peer.url },
          credentialsSecretRef: { namespace: SECRETS_NS, name: "aws-fencer" },
          timeoutSeconds: 20,
          retries: 2,
          ...extra,
        },
      });
    await agent("ec2");
    await agent("ec2-short", { timeoutSeconds: 5, retries: 0 });
    await agent("ec2-wrong", { credentialsSecretRef: { namespace: SECRETS_NS, name: "aws-wrong" } });
    await bed.policy("default", { escalation: [{ agents: [{ name: "ec2" }] }], guards: { maxUnhealthyNodes: 1 } });
    await bed.startOperator();
    await bed.statefulSet("kv", 1);
  });
  after(async () => {
    const r = await bed?.invariant().catch(() => undefined);
    if (r) console.log(`invariant: ${r.identities} identities, ${r.replacements} replacements, ${r.violations.length} violations`);
    await bed?.down();
    await peer?.stop();
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

  test("1. crash: StopInstances (Force), confirmed stopped, released, replacement Running; unfence starts the instance", async () => {
    const { uid, node } = await current();
    const id = ids.get(node)!;
    assert.equal((await bed.lab.node(node)).spec?.providerID, `aws:///us-east-1a/${id}`);
    const t0 = Date.now();
    await bed.lab.crash(node);
    const replacement = await bed.waitForReplacement("kv-0", uid);
    const failover = (Date.now() - t0) / 1000;
    const f = await bed.waitForFence(node, released, "Released");
    assert.equal(f.status?.evidence?.method, "PowerOffConfirmed");
    assert.deepEqual(
      (f.status?.attempts ?? []).filter((a) => a.operation === "off").map((a) => [a.agent, a.outcome]),
      [["ec2", "Succeeded"]],
    );
    assert.equal(bed.lab.machine(node).power, "off", "the real machine is off");
    assert.equal(await peer.state(id), "stopped");
    const stops = peer.glue.calls.filter((c) => c.action === "StopInstances" && c.status === 200);
    assert.deepEqual(
      stops.map((c) => c.instanceIds),
      [[id]],
      "one StopInstances, for this node's instance only",
    );
    const order = assertFailover(bed.rec, { node, oldUid: uid, newUid: replacement.metadata!.uid!, since: t0 });
    console.log(`failover (aws): ${failover.toFixed(1)} s (crash → ${failoverSteps(order, t0)})`);
    assert.deepEqual((await bed.invariant()).violations, []);
    await bed.unfence(node); // StartInstances through the agent
    assert.equal(bed.lab.machine(node).power, "on");
    assert.equal(await peer.state(id), "running");
  });

  test("2. an EC2 API that never answers: the attempt times out, the fence fails, nothing is released", async () => {
    await escalation([["ec2-short"]]);
    const { uid, node } = await current();
    await bed.kubectl("delete", "nodefence", node, "--ignore-not-found");
    peer.glue.hang = true;
    await bed.lab.crash(node);
    const f = await bed.waitForFence(node, failedPhase, "Failed", 120_000);
    const off = (f.status?.attempts ?? []).filter((a) => a.operation === "off");
    assert.deepEqual(
      off.map((a) => [a.agent, a.outcome]),
      [["ec2-short", "TimedOut"]],
    );
    assert.match(off[0]?.message ?? "", /timed out after 5 s/);
    assert.equal(f.status?.releases?.length ?? 0, 0, "nothing released");
    await sleep(2000);
    assert.equal((await current()).uid, uid, "the pod was not force-deleted");
    assert.equal(bed.lab.machine(node).power, "on", "the crashed machine was not powered off");
    assert.ok(
      peer.glue.calls.some((c) => c.by === "hung" && c.action === "StopInstances"),
      "the StopInstances reached the hung API",
    );
    peer.glue.hang = false;
    assert.equal(await peer.state(ids.get(node)!), "running", "no late StopInstances landed");
  });

  test("3. wrong credentials on level 1 (moto: AuthFailure) escalate to level 2, which fences and releases", async () => {
    const { uid, node } = await current(); // still crashed, its pod still there
    await escalation([["ec2-wrong"], ["ec2"]]);
    await bed.kubectl("delete", "nodefence", node); // retrying a failed fence is an administrator's decision
    const f = await bed.waitForFence(node, released, "Released", 120_000);
    const off = (f.status?.attempts ?? []).filter((a) => a.operation === "off");
    assert.deepEqual(
      off.map((a) => [a.level, a.agent, a.outcome]),
      [
        [0, "ec2-wrong", "Failed"],
        [1, "ec2", "Succeeded"],
      ],
    );
    assert.match(off[0]?.message ?? "", /\(AuthFailed\): .*refused StopInstances \(Force\).*AuthFailure/);
    assert.ok(!JSON.stringify(f.status).includes(wrongSecret), "no credential in status");
    assert.equal(f.status?.evidence?.agents?.join(), "ec2");
    assert.equal(bed.lab.machine(node).power, "off");
    await bed.waitForReplacement("kv-0", uid);
    assert.deepEqual((await bed.invariant()).violations, []);
    await bed.unfence(node);
  });

  test("4. throttling (503 RequestLimitExceeded): retried within the deadline, then fenced", async () => {
    await escalation([["ec2"]]);
    const { uid, node } = await current();
    await bed.kubectl("delete", "nodefence", node, "--ignore-not-found");
    const before = peer.glue.calls.length;
    peer.glue.throttle = 4; // the SDK's 3 attempts of the first try, then one more: the runner's retry gets through
    await bed.create("nodefences", { metadata: { name: node }, spec: { nodeName: node, reason: "EC2 reports degraded hardware" } });
    const f = await bed.waitForFence(node, released, "Released");
    const calls = peer.glue.calls.slice(before);
    assert.equal(calls.filter((c) => c.by === "throttled").length, 4, JSON.stringify(calls));
    assert.ok(calls.some((c) => c.action === "StopInstances" && c.status === 200));
    const off = (f.status?.attempts ?? []).filter((a) => a.operation === "off");
    assert.deepEqual(
      off.map((a) => a.outcome),
      ["Succeeded"],
    );
    assert.equal(bed.lab.machine(node).power, "off");
    await bed.waitForReplacement("kv-0", uid);
    assert.deepEqual((await bed.invariant()).violations, []);
    await bed.unfence(node);
  });

  test("5. a providerID of the wrong form and a missing instance: clear errors, nothing released", async () => {
    const { uid, node } = await current();
    const other = NODES.find((n) => n !== node)!;
    const pinned = (providerID: string) => ({ parameters: { providerID } });
    await bed.create("fenceagents", {
      metadata: { name: "ec2-bad-form" },
      spec: {
        type: "aws",
        parameters: { endpoint: peer.url },
        nodes: { [node]: pinned("kwok://" + node), [other]: pinned("aws:///us-east-1a/i-00000001") },
      },
    });
    await bed.create("fenceagents", {
      metadata: { name: "ec2-missing" },
      spec: {
        type: "aws",
        parameters: { endpoint: peer.url },
        credentialsSecretRef: { namespace: SECRETS_NS, name: "aws-fencer" },
        nodes: { [node]: pinned("aws:///us-east-1a/i-0000000000000dead") },
        timeoutSeconds: 10,
      },
    });
    await escalation([["ec2-bad-form"], ["ec2-missing"]]);
    await bed.kubectl("delete", "nodefence", node, "--ignore-not-found");
    await bed.create("nodefences", { metadata: { name: node }, spec: { nodeName: node, reason: "bad input" } });
    const f = await bed.waitForFence(node, failedPhase, "Failed", 120_000);
    const off = (f.status?.attempts ?? []).filter((a) => a.operation === "off");
    assert.deepEqual(
      off.map((a) => [a.agent, a.outcome]),
      [
        ["ec2-bad-form", "Failed"],
        ["ec2-missing", "Failed"],
      ],
    );
    assert.match(
      off[0]?.message ?? "",
      /parameter providerID "kwok:\/\/node-\d" is not an EC2 instance's \(aws:\/\/\/<availability-zone>\/i-/,
    );
    assert.match(
      off[1]?.message ?? "",
      /\(Config\): EC2 instance i-0000000000000dead in us-east-1 .*does not exist \(InvalidInstanceID\.NotFound\).*not evidence/,
    );
    assert.equal(f.status?.releases?.length ?? 0, 0, "nothing released");
    assert.equal((await current()).uid, uid);
    assert.equal(bed.lab.machine(node).power, "on");
    // The FenceAgent says so before any fence needs it.
    const ready = (await bed.agent("ec2-bad-form")).status?.conditions?.find((c) => c.type === "Ready");
    assert.equal(ready?.status, "False");
    assert.match(ready?.message ?? "", /not an EC2 instance's/);
    await bed.kubectl("delete", "nodefence", node);
    assert.deepEqual((await bed.invariant()).violations, []);
  });
});
