// End-to-end on the lab through the native IPMI agent: crash (1), partition (2), operator killed in the
// middle of fencing (6), an administrator's NodeFence on a healthy node (7), and unfence in between.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { StorageV1Api } from "@kubernetes/client-node";
import { Bed, NS } from "../lab/bed.ts";
import { assertFailover, failoverSteps } from "../lab/failover-timing.ts";
import type { NodeFence } from "../src/api/v1alpha1.ts";

const released = (f: NodeFence) => f.status?.phase === "Released";

describe("e2e: fencing through IPMI", () => {
  let bed: Bed;
  before(async () => {
    bed = await Bed.up({ nodes: 4, name: "ipmi" });
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

  /** Unfences through the API and waits until the node is back and clean. */
  async function unfence(node: string) {
    await bed.unfence(node);
    const n = await bed.lab.core.readNode({ name: node });
    assert.ok(!(n.spec?.taints ?? []).some((t) => t.key === "stockade.io/fenced"), "fenced taint removed");
    assert.ok(!(n.status?.conditions ?? []).some((c) => c.type === "Fenced"), "Fenced condition removed");
  }

  test("1. crash: the pod's node is fenced through IPMI, released, and the pod runs again elsewhere", async () => {
    const pods = await bed.statefulSet("db", 2);
    const victim = pods.find((p) => p.metadata?.name === "db-0")!;
    const node = victim.spec!.nodeName!;
    const storage = bed.lab.kc.makeApiClient(StorageV1Api);
    await storage.createVolumeAttachment({
      body: {
        metadata: { name: `va-db-0-${node}` },
        spec: { attacher: "lab.csi.stockade.io", nodeName: node, source: { persistentVolumeName: "pv-db-0" } },
      },
    });
    const t0 = Date.now();
    await bed.lab.crash(node);
    const replacement = await bed.waitForReplacement("db-0", victim.metadata!.uid!);
    const failover = (Date.now() - t0) / 1000;
    const f = await bed.waitForFence(node, released, "Released");
    assert.equal(f.spec.origin, "Automatic");
    assert.equal(f.status?.evidence?.method, "PowerOffConfirmed");
    assert.equal(bed.lab.machine(node).power, "off");
    assert.notEqual(replacement.spec?.nodeName, node);
    const rel = f.status?.releases ?? [];
    assert.deepEqual(
      rel.filter((r) => r.kind === "Pod").map((r) => [r.name, r.uid, r.action]),
      [["db-0", victim.metadata!.uid, "ForceDeleted"]],
    );
    assert.ok(rel.some((r) => r.kind === "VolumeAttachment" && r.name === `va-db-0-${node}`));
    await assert.rejects(storage.readVolumeAttachment({ name: `va-db-0-${node}` }));
    const n = await bed.lab.core.readNode({ name: node });
    assert.ok(
      n.spec?.taints?.some((t) => t.key === "stockade.io/fenced" && t.effect === "NoExecute"),
      "fenced taint",
    );
    assert.equal(n.status?.conditions?.find((c) => c.type === "Fenced")?.status, "True");

    // The first test: any power-off of the node is this crash's.
    const order = assertFailover(bed.rec, { node, oldUid: victim.metadata!.uid!, newUid: replacement.metadata!.uid!, name: "db-0" }, t0);
    // Heartbeat lost = the crash: the kubelet stopped renewing at that moment.
    console.log(`failover: ${failover.toFixed(1)} s (heartbeat lost → ${failoverSteps(order, t0)})`);
    const ev = await bed.lab.core.listNamespacedEvent({ namespace: NS, fieldSelector: `involvedObject.name=db-0,reason=ForceDeleted` });
    assert.equal(ev.items.length, 1, "one ForceDeleted Event on the pod");
    assert.deepEqual((await bed.invariant()).violations, []);
    await unfence(node);
  });

  /** The pod of this StatefulSet replica now, and its node. */
  async function current(name: string) {
    const p = (await bed.lab.core.listNamespacedPod({ namespace: NS, fieldSelector: `metadata.name=${name}` })).items[0];
    assert.ok(p?.spec?.nodeName && p.metadata?.uid, `${name} is scheduled`);
    return { uid: p.metadata.uid, node: p.spec.nodeName };
  }

  test("2. partition: a cut-off node (its workload still running) is powered off before anything is released", async () => {
    const { uid, node } = await current("db-1");
    const t0 = Date.now();
    await bed.lab.partition(node);
    // kwok: the kubelet is frozen; real: the cable is cut and the kubelet and its containers keep running.
    assert.equal(bed.lab.machine(node).kubelet, bed.lab.runtime === "real" ? "running" : "frozen");
    const replacement = await bed.waitForReplacement("db-1", uid);
    const f = await bed.waitForFence(node, released, "Released");
    assert.equal(f.status?.evidence?.method, "PowerOffConfirmed");
    assert.equal(bed.lab.machine(node).power, "off", "the partitioned machine was really powered off");
    assertFailover(bed.rec, { node, oldUid: uid, newUid: replacement.metadata!.uid!, since: t0 });
    assert.deepEqual((await bed.invariant()).violations, []);
    await unfence(node);
  });

  test("6. operator killed in the middle of fencing: the next one resumes, confirms and releases once", async () => {
    const { uid, node } = await current("db-0");
    const t0 = Date.now();
    await bed.lab.setBmcReachable(node, false); // the first attempt hangs, so the kill lands in the middle of it
    await bed.lab.partition(node);
    await bed.waitForFence(node, (f) => (f.status?.attempts ?? []).some((a) => a.outcome === "InProgress"), "has an attempt in progress");
    await bed.killOperator("SIGKILL");
    await bed.lab.setBmcReachable(node, true);
    assert.equal(bed.lab.machine(node).power, "on", "nothing powered off yet");
    assert.equal((await current("db-0")).uid, uid, "nothing released yet");
    await bed.startOperator();
    const replacement = await bed.waitForReplacement("db-0", uid);
    const f = await bed.waitForFence(node, released, "Released");
    const outcomes = (f.status?.attempts ?? []).filter((a) => a.operation === "off").map((a) => a.outcome);
    assert.deepEqual(outcomes, ["Interrupted", "Succeeded"], JSON.stringify(f.status?.attempts, null, 1));
    assertFailover(bed.rec, { node, oldUid: uid, newUid: replacement.metadata!.uid!, since: t0 });
    // Kill and restart once more after the release: nothing is released twice.
    await bed.killOperator("SIGKILL");
    await bed.startOperator();
    await new Promise((r) => setTimeout(r, 3000));
    const again = await bed.getFence(node);
    assert.deepEqual(again?.status?.releases, f.status?.releases, "releases unchanged by a restart");
    const pods = again!.status!.releases!.filter((r) => r.kind === "Pod");
    assert.deepEqual(
      pods.map((r) => r.uid),
      [uid],
      "the pod was released exactly once",
    );
    const ev = await bed.lab.core.listNamespacedEvent({ namespace: NS, fieldSelector: `involvedObject.uid=${uid},reason=ForceDeleted` });
    assert.equal(ev.items.length, 1);
    assert.equal(ev.items[0]?.count ?? 1, 1, "one ForceDeleted Event, count 1");
    assert.deepEqual((await bed.invariant()).violations, []);
    await unfence(node);
  });

  test("7. an administrator's NodeFence fences a healthy node", async () => {
    const { uid, node } = await current("db-1");
    const t0 = Date.now();
    // A finished NodeFence of an earlier episode is history; a new request replaces it.
    await bed.kubectl("delete", "nodefence", node, "--ignore-not-found");
    await bed.create("nodefences", { metadata: { name: node }, spec: { nodeName: node, reason: "suspect disk controller" } });
    const f = await bed.waitForFence(node, released, "Released");
    assert.equal(f.spec.origin, "Manual");
    assert.equal(f.status?.evidence?.method, "PowerOffConfirmed");
    assert.equal(bed.lab.machine(node).power, "off");
    const replacement = await bed.waitForReplacement("db-1", uid);
    assertFailover(bed.rec, { node, oldUid: uid, newUid: replacement.metadata!.uid!, since: t0 });
    assert.deepEqual((await bed.invariant()).violations, []);
    await unfence(node);
  });

  test("manual agent: the fence waits for the administrator's confirmation, accepts it only once the node is partitioned, then releases", async () => {
    const { uid, node } = await current("db-0");
    await bed.create("fenceagents", { metadata: { name: "by-hand" }, spec: { type: "manual", timeoutSeconds: 120 } });
    // A named policy must select the node (item 10): this one selects only nodes labelled for it.
    await bed.create("fencingpolicies", {
      metadata: { name: "manual" },
      spec: {
        nodeSelector: { matchLabels: { "stockade.io/manual": "yes" } },
        detection: { heartbeatTimeoutSeconds: 6 },
        escalation: [{ agents: [{ name: "by-hand" }] }],
      },
    });
    await bed.kubectl("delete", "nodefence", node, "--ignore-not-found");
    await bed.create("nodefences", {
      metadata: { name: node },
      spec: { nodeName: node, policy: "manual", reason: "replacing its motherboard" },
    });
    const refused = await bed.waitForFence(
      node,
      (f) => f.status?.conditions?.some((c) => c.reason === "PolicyDoesNotSelectNode") ?? false,
      "refusing a policy that does not select the node",
    );
    assert.equal(refused.status?.phase, undefined, "never started");
    await bed.kubectl("delete", "nodefence", node);
    await bed.kubectl("label", "node", node, "stockade.io/manual=yes");
    await bed.create("nodefences", {
      metadata: { name: node },
      spec: { nodeName: node, policy: "manual", reason: "replacing its motherboard" },
    });
    await bed.waitForFence(node, (f) => (f.status?.attempts ?? []).some((a) => a.outcome === "InProgress"), "waiting for confirmation");
    // Confirmed while the machine still runs and heartbeats: refused (item 3).
    await bed.kubectl("annotate", "nodefence", node, `stockade.io/confirmed-off=${node}`);
    await bed.waitForFence(
      node,
      (f) => f.status?.conditions?.some((c) => c.reason === "ConfirmationRefused") ?? false,
      "refusing the confirmation",
    );
    await new Promise((r) => setTimeout(r, 2000));
    assert.equal((await current("db-0")).uid, uid, "nothing released while the node heartbeats");
    await bed.lab.bmc(node, "off"); // the administrator really powers it off: it goes silent, then partitioned
    const f = await bed.waitForFence(node, released, "Released");
    assert.equal(f.status?.evidence?.method, "ManualConfirmation");
    assert.equal(f.status?.evidence?.heartbeat?.silent, true);
    await bed.waitForReplacement("db-0", uid);
    assert.deepEqual((await bed.invariant()).violations, []);
    await bed.lab.bmc(node, "on");
    await unfence(node);
  });

  test("no credential reaches the operator's logs", () => {
    assert.deepEqual(bed.leakedSecrets(["not-the-password"]), []);
    assert.match(bed.operatorLogs(), /decision for node-\d: Fence/, "decisions are logged");
  });
});
