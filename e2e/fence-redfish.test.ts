// End-to-end on real lab nodes through the native Redfish agent, each node's BMC the lab's Redfish simulator
// (lab/redfish-sim.ts, a test double whose Reset is the machine's real power): crash → ForceOff confirmed by
// PowerState → release → replacement Running; a BMC answering 202 with a task monitor; a hanging BMC (the
// deadline passes: failure, nothing released); an impostor's certificate (refused, nothing powered off); wrong
// credentials (the next escalation level, IPMI, fences). One bed for all.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { setTimeout as sleep } from "node:timers/promises";
import { Bed, NS, SECRETS_NS } from "../lab/bed.ts";
import { assertFailover, failoverSteps } from "../lab/failover-timing.ts";
import { RedfishSimulator } from "../lab/redfish-sim.ts";
import type { NodeFence } from "../src/api/v1alpha1.ts";

const released = (f: NodeFence) => f.status?.phase === "Released";

describe("e2e: fencing through Redfish", () => {
  let bed: Bed;
  const sims = new Map<string, RedfishSimulator>();
  const sim = (node: string) => sims.get(node)!;

  before(async () => {
    bed = await Bed.up({ nodes: 3, name: "redfish" });
    const nodes: Record<string, object> = {};
    for (const n of bed.lab.nodes()) {
      const s = await RedfishSimulator.start(bed.lab.state, n);
      sims.set(n, s);
      await bed.lab.core.createNamespacedSecret({
        namespace: SECRETS_NS,
        body: { metadata: { name: `redfish-${n}` }, stringData: { password: s.password, caBundle: s.caBundle } },
      });
      nodes[n] = {
        parameters: { address: s.address, port: String(s.port) },
        credentialsSecretRef: { namespace: SECRETS_NS, name: `redfish-${n}` },
      };
    }
    await bed.create("fenceagents", {
      metadata: { name: "lab-redfish" },
      spec: { type: "redfish", parameters: { username: "fence" }, nodes, timeoutSeconds: 15, retries: 1 },
    });
    await bed.policy("default", { escalation: [{ agents: [{ name: "lab-redfish" }] }], guards: { maxUnhealthyNodes: 1 } });
    await bed.startOperator();
  });
  after(async () => {
    const r = await bed?.invariant().catch(() => undefined);
    if (r)
      console.log(
        `invariant: ${r.identities} identities, ${r.replacements} replacements, ${r.fencedReplacements} after a node failure, ${r.violations.length} violations`,
      );
    for (const s of sims.values()) await s.stop();
    await bed?.down();
  });

  const escalation = (levels: string[][]) =>
    bed.kubectl(
      "patch",
      "fencingpolicy",
      "default",
      "--type=merge",
      "-p",
      JSON.stringify({ spec: { escalation: levels.map((l) => ({ agents: l.map((name) => ({ name })) })) } }),
    );

  /** The pod of this StatefulSet replica now, and its node. */
  async function current(name: string) {
    const p = (await bed.lab.core.listNamespacedPod({ namespace: NS, fieldSelector: `metadata.name=${name}` })).items[0];
    assert.ok(p?.spec?.nodeName && p.metadata?.uid, `${name} is scheduled`);
    return { uid: p.metadata.uid, node: p.spec.nodeName };
  }

  test("crash: the node is powered off through Redfish (ForceOff, confirmed by PowerState), released, and the pod runs elsewhere", async () => {
    const [victim] = await bed.statefulSet("db", 1);
    const uid = victim!.metadata!.uid!;
    const node = victim!.spec!.nodeName!;
    const since = sim(node).requests.length;
    const t0 = Date.now();
    await bed.lab.crash(node);
    const replacement = await bed.waitForReplacement("db-0", uid);
    const failover = (Date.now() - t0) / 1000;
    const f = await bed.waitForFence(node, released, "Released");
    assert.equal(f.spec.origin, "Automatic");
    assert.equal(f.status?.evidence?.method, "PowerOffConfirmed");
    assert.equal(f.status?.evidence?.agents?.join(), "lab-redfish");
    assert.equal(bed.lab.machine(node).power, "off");
    assert.notEqual(replacement.spec?.nodeName, node);
    const seen = sim(node).requests.slice(since);
    assert.ok(
      seen.some((r) => r.resetType === "ForceOff" && r.auth === "session" && r.status === 204),
      "ForceOff with a session",
    );
    const order = assertFailover(bed.rec, { node, oldUid: uid, newUid: replacement.metadata!.uid!, since: t0 });
    console.log(`failover (redfish): ${failover.toFixed(1)} s (heartbeat lost → ${failoverSteps(order, t0)})`);
    assert.deepEqual((await bed.invariant()).violations, []);
    await bed.unfence(node); // powers the machine back on through Redfish
    assert.equal(bed.lab.machine(node).power, "on");
    assert.ok(
      sim(node)
        .requests.slice(since)
        .some((r) => r.resetType === "On"),
    );
  });

  test("a BMC answering 202 with a task monitor: followed to completion, then confirmed and released", async () => {
    const { uid, node } = await current("db-0");
    sim(node).mode = "task";
    const since = sim(node).requests.length;
    const t0 = Date.now();
    await bed.lab.crash(node);
    const replacement = await bed.waitForReplacement("db-0", uid);
    const f = await bed.waitForFence(node, released, "Released");
    assert.equal(f.status?.evidence?.method, "PowerOffConfirmed");
    const seen = sim(node).requests.slice(since);
    assert.ok(
      seen.some((r) => r.resetType === "ForceOff" && r.status === 202),
      "ForceOff answered 202",
    );
    assert.ok(
      seen.some((r) => r.path.startsWith("/redfish/v1/TaskService/TaskMonitors/") && r.status === 202),
      "the task monitor was polled while running",
    );
    assertFailover(bed.rec, { node, oldUid: uid, newUid: replacement.metadata!.uid!, since: t0 });
    assert.deepEqual((await bed.invariant()).violations, []);
    sim(node).mode = "normal";
    await bed.unfence(node);
  });

  // The next three share one crashed node: its fences fail (nothing released) until the last one escalates.
  let stuck: { uid: string; node: string };

  test("a hanging BMC: the deadline passes, the fence fails, nothing is released", async () => {
    stuck = await current("db-0");
    const { uid, node } = stuck;
    sim(node).mode = "hang";
    await bed.lab.crash(node);
    const f = await bed.waitForFence(node, (x) => x.status?.phase === "Failed", "Failed", 120_000);
    assert.equal(f.status?.conditions?.find((c) => c.type === "Failed")?.reason, "FencingFailed");
    const attempt = f.status?.attempts?.filter((a) => a.operation === "off").at(-1);
    assert.match(attempt?.outcome ?? "", /^(TimedOut|Failed)$/, JSON.stringify(f.status?.attempts));
    assert.match(attempt?.message ?? "", /timed out|did not answer|deadline/i);
    assert.equal(f.status?.releases?.length ?? 0, 0, "nothing released");
    assert.ok(
      sim(node).requests.some((r) => r.status === "hung"),
      "the BMC was reached and never answered",
    );
    await sleep(2000);
    assert.equal((await current("db-0")).uid, uid, "the pod was not force-deleted");
    assert.equal(bed.lab.machine(node).power, "on");
    assert.deepEqual((await bed.invariant()).violations, []);
  });

  test("an impostor's certificate on the BMC's address: refused before anything is sent, nothing powered off", async () => {
    const { uid, node } = stuck;
    sim(node).mode = "normal";
    sim(node).useCertificate("impostor");
    const before = sim(node).requests.length;
    await bed.kubectl("delete", "nodefence", node);
    const f = await bed.waitForFence(node, (x) => x.status?.phase === "Failed", "Failed", 120_000);
    const attempt = f.status?.attempts?.filter((a) => a.operation === "off").at(-1);
    assert.equal(attempt?.outcome, "Failed");
    assert.match(attempt?.message ?? "", /Config.*certificate that does not verify against the caBundle/);
    assert.match(attempt?.message ?? "", /after 1 try/, "a certificate mismatch is not retried");
    assert.equal(sim(node).requests.length, before, "not one request reached the impostor");
    assert.equal(f.status?.releases?.length ?? 0, 0, "nothing released");
    assert.equal(bed.lab.machine(node).power, "on");
    assert.equal((await current("db-0")).uid, uid);
  });

  test("wrong credentials: AuthFailed on level 1, the IPMI level 2 fences and releases", async () => {
    const { uid, node } = stuck;
    sim(node).useCertificate("lab");
    sim(node).mode = "wrong-password";
    await escalation([["lab-redfish"], ["lab-ipmi"]]);
    await bed.kubectl("delete", "nodefence", node);
    const f = await bed.waitForFence(node, released, "Released", 120_000);
    const off = (f.status?.attempts ?? []).filter((a) => a.operation === "off");
    assert.deepEqual(
      off.map((a) => [a.level, a.agent, a.outcome]),
      [
        [0, "lab-redfish", "Failed"],
        [1, "lab-ipmi", "Succeeded"],
      ],
    );
    assert.match(off[0]?.message ?? "", /AuthFailed.*rejected the credentials of user "fence" \(HTTP 401\)/);
    assert.match(off[0]?.message ?? "", /after 1 try/, "AuthFailed is not retried");
    assert.ok(!JSON.stringify(f.status).includes(sim(node).password), "no credential in status");
    assert.equal(f.status?.evidence?.agents?.join(), "lab-ipmi");
    assert.equal(bed.lab.machine(node).power, "off");
    await bed.waitForReplacement("db-0", uid);
    assert.deepEqual((await bed.invariant()).violations, []);
    sim(node).mode = "normal";
    await escalation([["lab-redfish"]]);
    await bed.unfence(node);
  });

  test("no Redfish password reaches the operator's logs", () => {
    assert.deepEqual(bed.leakedSecrets([...sims.values()].map((s) => s.password)), []);
  });
});
