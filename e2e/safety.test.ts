// The safety holes of issue 8 that need real timing, each reproduced on the lab and shown closed: a reboot during a
// hung attempt, a healthy node back during retries, a failed fence retried, a manual wait holding no worker, a
// deleted NodeFence taking its marks with it, and a machine powered back on after its fence was confirmed.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { setTimeout as sleep } from "node:timers/promises";
import { AdmissionregistrationV1Api, type V1Toleration } from "@kubernetes/client-node";
import { Bed, NS } from "../lab/bed.ts";
import { waitFor } from "../lab/health.ts";
import type { NodeFence } from "../src/api/v1alpha1.ts";

/** Pods that wait an hour for their node (no eviction by the taint manager): the kubelet of a new boot restarts them. */
const STAY: V1Toleration[] = ["node.kubernetes.io/unreachable", "node.kubernetes.io/not-ready"].map((key) => ({
  key,
  operator: "Exists",
  effect: "NoExecute",
  tolerationSeconds: 3600,
}));

const reasonOf = (f: NodeFence, type = "Fenced") => f.status?.conditions?.find((c) => c.type === type)?.reason;

describe("e2e: safety of releases and power-offs (issue 8)", () => {
  let bed: Bed;
  before(async () => {
    bed = await Bed.up({ nodes: 4, name: "safety" });
    await bed.policy("default", { guards: { maxUnhealthyNodes: 2, maxConcurrentFences: 2 } });
    // One worker for every NodeFence: a wait that held it would starve every other fence (item 15).
    await bed.startOperator({ extraArgs: ["--fence-workers", "1"] });
  });
  after(async () => {
    await bed?.down();
  });

  /** A one-replica StatefulSet; returns its pod's uid and node (the pod is named `<name>-0`). */
  const single = async (name: string, tolerations?: V1Toleration[], nodeSelector?: Record<string, string>) => {
    const [p] = await bed.statefulSet(name, 1, { tolerations, nodeSelector });
    return { uid: p!.metadata!.uid!, node: p!.spec!.nodeName! };
  };
  const podUid = async (sts: string) =>
    (await bed.lab.core.listNamespacedPod({ namespace: NS, fieldSelector: `metadata.name=${sts}-0` })).items[0]?.metadata?.uid;
  const powerOffsSince = (node: string, t: number) =>
    bed.rec.timeline().filter((e) => e.source === "lab" && e.kind === "power" && e.node === node && e.detail.power === "off" && e.t >= t);
  const forceDeleted = async (uid: string) =>
    (await bed.lab.core.listNamespacedEvent({ namespace: NS, fieldSelector: `involvedObject.uid=${uid},reason=ForceDeleted` })).items
      .length;

  test("item 1: the node reboots while its fence attempt hangs; its kubelet runs the pod again: nothing is released, the fence is cancelled", async () => {
    const { uid, node } = await single("reboot", STAY);
    const t0 = Date.now();
    await bed.lab.setBmcReachable(node, false); // the power-off hangs
    await bed.lab.crash(node);
    await bed.waitForFence(node, (f) => (f.status?.attempts ?? []).some((a) => a.outcome === "InProgress"), "has an attempt in progress");
    const bootBefore = (await bed.lab.node(node)).status?.nodeInfo?.bootID;
    await bed.lab.heal(node); // a crashed machine reboots: a new bootID, its kubelet back
    const f = await bed.waitForFence(node, (x) => x.status?.phase === "Unfenced", "cancelled");
    // The kubelet renews its Lease (which cancels the fence) before it posts the new boot's nodeInfo.
    const rebooted = await bed.lab.waitForNodeReady(node, { timeoutMs: 30_000 });
    assert.notEqual(rebooted.status?.nodeInfo?.bootID, bootBefore, "the node really rebooted");
    assert.equal(reasonOf(f), "NodeRecovered");
    assert.equal(f.status?.evidence, undefined, "a new bootID is not evidence");
    assert.equal(f.status?.attempts?.at(-1)?.outcome, "Cancelled");
    assert.equal(f.status?.releases?.length ?? 0, 0, "nothing released");
    await bed.lab.setBmcReachable(node, true);
    await sleep(3000); // a late retry of the power-off would land now
    assert.equal(await podUid("reboot"), uid, "the pod running in the new boot was never force-deleted");
    assert.equal(await forceDeleted(uid), 0);
    assert.deepEqual(powerOffsSince(node, t0), [], "the rebooted, healthy machine was never powered off");
    assert.equal(bed.lab.machine(node).power, "on");
    assert.deepEqual((await bed.invariant()).violations, []);
  });

  test("item 15: a manual fence waiting for its confirmation holds no worker: another node's fence and an unfence go through", async () => {
    const nodes = bed.lab.nodes();
    const { uid, node: crashed } = await single("busy");
    const waiting = nodes.find((n) => n !== crashed)!;
    await bed.create("fenceagents", { metadata: { name: "by-hand" }, spec: { type: "manual", timeoutSeconds: 600 } });
    await bed.create("fencingpolicies", {
      metadata: { name: "manual" },
      spec: { nodeSelector: { matchLabels: { "stockade.io/manual": "yes" } }, escalation: [{ agents: [{ name: "by-hand" }] }] },
    });
    await bed.kubectl("label", "node", waiting, "stockade.io/manual=yes");
    await bed.kubectl("delete", "nodefence", waiting, "--ignore-not-found");
    await bed.create("nodefences", {
      metadata: { name: waiting },
      spec: { nodeName: waiting, policy: "manual", reason: "awaiting a person" },
    });
    await bed.waitForFence(waiting, (f) => (f.status?.attempts ?? []).some((a) => a.outcome === "InProgress"), "waiting for a person");
    const t0 = Date.now();
    await bed.kubectl("delete", "nodefence", crashed, "--ignore-not-found");
    await bed.lab.crash(crashed);
    const f = await bed.waitForFence(crashed, (x) => x.status?.phase === "Released", "Released", 60_000);
    assert.deepEqual(
      f.status?.releases?.filter((r) => r.kind === "Pod").map((r) => r.uid),
      [uid],
    );
    console.log(`with one worker and a manual fence waiting: crash → released in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
    assert.equal((await bed.getFence(waiting))?.status?.phase, "Fencing", "the manual fence still waits");
    await bed.kubectl("patch", "nodefence", waiting, "--type=merge", "-p", '{"spec":{"unfence":true}}');
    const w = await bed.waitForFence(waiting, (x) => x.status?.phase === "Unfenced", "Unfenced", 20_000);
    assert.equal(w.status?.attempts?.at(-1)?.outcome, "Cancelled");
    await bed.unfence(crashed);
  });

  test("item 12: a fence that failed (BMC unreachable) is retried while the node stays partitioned, and succeeds once the BMC answers", async () => {
    const { uid, node } = await single("retry");
    await bed.kubectl("delete", "nodefence", node, "--ignore-not-found");
    await bed.lab.setBmcReachable(node, false);
    await bed.lab.crash(node);
    const failed = await bed.waitForFence(node, (x) => x.status?.phase === "Failed", "Failed", 90_000);
    assert.match(failed.status?.conditions?.find((c) => c.type === "Failed")?.message ?? "", /retrying from level 1 at/);
    assert.ok(failed.status?.nextRetryTime, "a retry is scheduled");
    assert.equal(failed.status?.releases?.length ?? 0, 0);
    assert.equal(await podUid("retry"), uid, "nothing released while Failed");
    await bed.lab.setBmcReachable(node, true);
    const f = await bed.waitForFence(node, (x) => x.status?.phase === "Released", "Released after the retry", 120_000);
    assert.equal(f.status?.round, 1);
    assert.equal(f.status?.evidence?.round, 1);
    assert.deepEqual(
      (f.status?.attempts ?? []).map((a) => [a.round, a.outcome]),
      [
        [0, failed.status?.attempts?.[0]?.outcome],
        [1, "Succeeded"],
      ],
    );
    await bed.waitForReplacement("retry-0", uid);
    assert.deepEqual((await bed.invariant()).violations, []);
  });

  test("item 20: deleting a NodeFence removes the fenced taint and the Fenced node condition it added", async () => {
    const phases = await Promise.all(bed.lab.nodes().map(async (n) => [n, (await bed.getFence(n))?.status?.phase] as const));
    const fenced = phases.find(([, phase]) => phase === "Released")?.[0];
    assert.ok(fenced, "the previous test left a Released fence");
    const before = await bed.lab.node(fenced);
    assert.ok(before.spec?.taints?.some((t) => t.key === "stockade.io/fenced"));
    await bed.kubectl("delete", "nodefence", fenced, "--wait=true");
    const after = await bed.lab.node(fenced);
    assert.ok(!after.spec?.taints?.some((t) => t.key === "stockade.io/fenced"), JSON.stringify(after.spec?.taints));
    assert.ok(!after.status?.conditions?.some((c) => c.type === "Fenced"));
    await bed.lab.bmc(fenced, "on");
    await bed.lab.waitForNodeReadyStatus(fenced, "True", 60_000);
  });

  test("item 16: a pod whose NodeDown condition cannot be written does not stop another node's fence", async () => {
    // The apiserver refuses every status write of pods labelled refuse-status (a real ValidatingAdmissionPolicy).
    const admission = bed.lab.kc.makeApiClient(AdmissionregistrationV1Api);
    await admission.createValidatingAdmissionPolicy({
      body: {
        metadata: { name: "refuse-pod-status" },
        spec: {
          failurePolicy: "Fail",
          matchConstraints: {
            resourceRules: [{ apiGroups: [""], apiVersions: ["v1"], operations: ["UPDATE"], resources: ["pods/status"] }],
          },
          validations: [
            {
              expression: "!has(object.metadata.labels) || !('refuse-status' in object.metadata.labels)",
              message: "status writes refused for this test",
            },
          ],
        },
      },
    });
    await admission.createValidatingAdmissionPolicyBinding({
      body: { metadata: { name: "refuse-pod-status" }, spec: { policyName: "refuse-pod-status", validationActions: ["Deny"] } },
    });
    const stubborn = await single("stubborn");
    await bed.kubectl("label", "pod", "stubborn-0", "refuse-status=yes");
    const other = bed.lab.nodes().find((n) => n !== stubborn.node)!;
    const victim = await single("victim", undefined, { "kubernetes.io/hostname": other });
    await bed.kubectl("delete", "nodefence", stubborn.node, victim.node, "--ignore-not-found");
    // The first node goes silent: its pod's NodeDown write is refused, and goes on being refused…
    await bed.lab.partition(stubborn.node);
    await waitFor(
      "the NodeDown write of stubborn-0 refused",
      async () => /writing pod default\/stubborn-0 failed/.test(bed.operatorLogs()) || undefined,
      {
        timeoutMs: 60_000,
      },
    );
    // …and only then does the second node die: every later pass of the fleet decision meets the refusal first.
    await bed.lab.crash(victim.node);
    const f = await bed.waitForFence(victim.node, (x) => x.status?.phase === "Released", "Released", 60_000);
    assert.ok(
      f.status?.releases?.some((r) => r.kind === "Pod" && r.uid === victim.uid),
      JSON.stringify(f.status?.releases),
    );
    await admission.deleteValidatingAdmissionPolicyBinding({ name: "refuse-pod-status" });
    await admission.deleteValidatingAdmissionPolicy({ name: "refuse-pod-status" });
  });

  test("item 7: an agent that resolves two nodes to one BMC is never run for either: no machine is powered off", async () => {
    const [a, b] = bed.lab.nodes().filter((n) => bed.lab.machine(n).power === "on");
    const ep = bed.lab.bmcEndpoint(a!);
    const to = (n: string) => ({
      parameters: { address: ep.address, port: String(ep.port) }, // b's entry names a's BMC: a copy-paste slip
      credentialsSecretRef: { namespace: "stockade-system", name: `bmc-${n}` },
    });
    await bed.kubectl("label", "node", b!, "stockade.io/dup=yes");
    await bed.create("fenceagents", {
      metadata: { name: "dup-ipmi" },
      spec: { type: "ipmi", parameters: { username: "admin", cipher: "3" }, nodes: { [a!]: to(a!), [b!]: to(b!) }, timeoutSeconds: 10 },
    });
    await bed.create("fencingpolicies", {
      metadata: { name: "dup" },
      spec: { nodeSelector: { matchLabels: { "stockade.io/dup": "yes" } }, escalation: [{ agents: [{ name: "dup-ipmi" }] }] },
    });
    await bed.kubectl("delete", "nodefence", b!, "--ignore-not-found");
    const t0 = Date.now();
    await bed.create("nodefences", { metadata: { name: b! }, spec: { nodeName: b!, policy: "dup", reason: "suspect" } });
    const f = await bed.waitForFence(b!, (x) => x.status?.phase === "Failed", "Failed");
    assert.match(f.status?.attempts?.[0]?.message ?? "", new RegExp(`resolves node ${b} and ${a} to the same machine`));
    assert.deepEqual(powerOffsSince(a!, t0), [], "a's machine was not powered off in b's name");
    assert.deepEqual(powerOffsSince(b!, t0), []);
    await waitFor(
      "FenceAgent dup-ipmi Ready=False DuplicateTarget",
      async () =>
        (await bed.agent("dup-ipmi")).status?.conditions?.find((c) => c.type === "Ready")?.reason === "DuplicateTarget" || undefined,
      { timeoutMs: 30_000 },
    );
    await bed.kubectl("delete", "nodefence", b!);
  });

  test("no credential reaches the operator's logs", () => {
    assert.deepEqual(bed.leakedSecrets(), []);
  });
});

describe("e2e: a node that comes back (items 4 and 5)", () => {
  let bed: Bed;
  before(async () => {
    // A 30 s node Lease (renewed every 7.5 s): a node fenced while it heartbeat must then stay silent 11 s before
    // anything is released, a window wide enough to power it back on in; and a kwok node frozen for less than its
    // Lease resumes heartbeating (one frozen longer stops renewing for good, a lab artifact a real kubelet lacks).
    bed = await Bed.up({ nodes: 2, name: "safety-back", nodeLeaseSeconds: 30 });
    await bed.policy("default", {
      detection: { heartbeatTimeoutSeconds: 6, fenceAfterSeconds: 0, honorPodTolerations: false },
      guards: { maxUnhealthyNodes: 1 },
    });
    await bed.startOperator();
  });
  after(async () => {
    await bed?.down();
  });

  test("item 5: a partitioned node comes back while the power-off is being retried: no further try, the healthy node stays on", async () => {
    const [p] = await bed.statefulSet("flaky", 1, { tolerations: STAY });
    const uid = p!.metadata!.uid!;
    const node = p!.spec!.nodeName!;
    const t0 = Date.now();
    await bed.lab.setBmcReachable(node, false);
    await bed.lab.partition(node); // frozen kubelet: same boot, the workload presumed alive
    await bed.waitForFence(node, (f) => (f.status?.attempts ?? []).some((a) => a.outcome === "InProgress"), "has an attempt in progress");
    const healed = Date.now();
    await bed.lab.heal(node); // the partition ends: it heartbeats again…
    // …the try in flight fails against the silent BMC (ipmitool gives up after 2 × 2 s), and then the BMC answers
    // again: a retry that does not look at the node first would now power the healthy machine off. (A try already
    // in flight when the BMC comes back could still land: a command sent cannot be recalled, docs/safety.md §4.)
    // A real kubelet reconnects seconds after its cable is mended (TCP backs off), and its Ready condition may
    // still be the one from before the cut: the node has come back once its Lease shows a renewal made after the
    // heal. A try that began just before the operator saw that renewal has given up (~4 s) 6 s later.
    await bed.lab.waitForLeaseRenewedAfter(node, healed, 60_000);
    await sleep(6000);
    await bed.lab.setBmcReachable(node, true);
    // Cancelled (Unfenced, NodeRecovered). A renewal stamped during the cut and delivered late can make the node look
    // silent once more right after the cancel: the fleet then deletes the Unfenced fence to replace it, and creates
    // none if the node heartbeats by then. Either way nothing may be powered off.
    const f = await waitFor(
      "NodeFence cancelled, or gone",
      async () => {
        const x = await bed.getFence(node);
        return !x ? "gone" : x.status?.phase === "Unfenced" ? x : undefined;
      },
      { timeoutMs: 90_000 },
    );
    if (f !== "gone") assert.equal(reasonOf(f), "NodeRecovered");
    await sleep(5000);
    const offs = bed.rec
      .timeline()
      .filter((e) => e.source === "lab" && e.kind === "power" && e.node === node && e.detail.power === "off" && e.t >= t0);
    assert.deepEqual(offs, [], "no power-off after the node came back");
    assert.equal(bed.lab.machine(node).power, "on");
    const pods = await bed.pods("flaky");
    assert.deepEqual(
      pods.map((x) => x.metadata?.uid),
      [uid],
    );
    const last = await bed.getFence(node);
    assert.ok(!last || last.status?.phase === "Unfenced", `the fence is cancelled or gone, not ${last?.status?.phase}`);
  });

  test("item 4: a machine powered back on after its fence was confirmed: the release stops, fencing starts over (a new round), and the pod is released only after a second power-off", async () => {
    const [p] = await bed.statefulSet("ledger", 1, { tolerations: STAY });
    const uid = p!.metadata!.uid!;
    const node = p!.spec!.nodeName!;
    const t0 = Date.now();
    // An administrator fences the healthy node; it is powered off and confirmed while its heartbeat is fresh.
    await bed.kubectl("delete", "nodefence", node, "--ignore-not-found");
    await bed.create("nodefences", { metadata: { name: node }, spec: { nodeName: node, reason: "suspect" } });
    const fenced = await bed.waitForFence(node, (f) => !!f.status?.evidence, "confirmed", 60_000);
    assert.equal(fenced.status?.evidence?.heartbeat?.silent, false);
    await bed.lab.bmc(node, "on"); // someone powers it back on before anything was released
    const f = await bed.waitForFence(node, (x) => x.status?.phase === "Released", "Released after a second power-off", 120_000);
    assert.equal(f.status?.round, 1, "fencing started over");
    assert.equal(f.status?.evidence?.round, 1);
    const ev = await bed.lab.core.listNamespacedEvent({
      namespace: "default",
      fieldSelector: `involvedObject.name=${node},reason=HeartbeatAfterFence`,
    });
    assert.ok(ev.items.length >= 1, "a HeartbeatAfterFence Event");
    const power = bed.rec
      .timeline()
      .filter((e) => e.source === "lab" && e.kind === "power" && e.node === node && e.t >= t0)
      .map((e) => (e.source === "lab" ? `${String(e.detail.power)}@${e.t}` : ""));
    assert.deepEqual(
      power.map((x) => x.split("@")[0]),
      ["off", "on", "off"],
      "powered off, back on, off again",
    );
    const secondOff = Number(power[2]!.split("@")[1]);
    const gone = bed.when((e) => e.source === "pod" && e.type === "delete" && e.uid === uid);
    assert.ok(gone && gone > secondOff, `released after the second power-off: ${bed.rec.format(t0)}`);
    await bed.waitForReplacement("ledger-0", uid);
    assert.deepEqual((await bed.invariant()).violations, []);
  });
});
