// End-to-end on the lab through the webhook agent: the reference power service (lab/webhook-power-service.ts,
// HTTPS with its own CA, the key from a Secret) powers the real lab machines. Crash → off through the webhook →
// status off → release → replacement Running; a wrong key → the next escalation level (IPMI) fences; a service
// that hangs or answers garbage fails the level, nothing is released, and once it is fixed the next round fences.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { join } from "node:path";
import { promisify } from "node:util";
import { Bed, NS } from "../lab/bed.ts";
import { repoRoot } from "../lab/bins.ts";
import { assertFailover, failoverSteps } from "../lab/failover-timing.ts";
import { installLabWebhook, type WebhookPowerService } from "../lab/webhook-power-service.ts";
import type { NodeFence } from "../src/api/v1alpha1.ts";

const run = promisify(execFile);
const KEY = "e2e-webhook-key-0123456789abcdef0123";
const released = (f: NodeFence) => f.status?.phase === "Released";

describe("e2e: fencing through the webhook agent", () => {
  let bed: Bed;
  let service: WebhookPowerService;
  before(async () => {
    bed = await Bed.up({ nodes: 4, name: "webhook" });
    service = await installLabWebhook(bed, KEY);
    await bed.policy("default", {
      escalation: [{ agents: [{ name: "lab-webhook" }] }, { agents: [{ name: "lab-ipmi" }] }],
      guards: { maxUnhealthyNodes: 2, maxConcurrentFences: 2 },
    });
    await bed.startOperator();
  });
  after(async () => {
    const r = await bed?.invariant().catch(() => undefined);
    if (r)
      console.log(
        `invariant: ${r.identities} identities, ${r.replacements} replacements, ${r.fencedReplacements} after a node failure, ${r.violations.length} violations`,
      );
    await service?.close();
    await bed?.down();
  });

  async function unfence(node: string) {
    await bed.unfence(node);
    const n = await bed.lab.core.readNode({ name: node });
    assert.ok(!(n.spec?.taints ?? []).some((t) => t.key === "stockade.io/fenced"), "fenced taint removed");
  }

  /** The pod of this StatefulSet replica now, and its node. */
  async function current(name: string) {
    const p = (await bed.lab.core.listNamespacedPod({ namespace: NS, fieldSelector: `metadata.name=${name}` })).items[0];
    assert.ok(p?.spec?.nodeName && p.metadata?.uid, `${name} is scheduled`);
    return { uid: p.metadata.uid, node: p.spec.nodeName };
  }

  test("kubectl stockade check queries every node's power through the webhook: status only", async () => {
    const seen = service.requests.length;
    const { stdout } = await run(process.execPath, [join(repoRoot, "bin/kubectl-stockade"), "check"], {
      env: bed.lab.env,
      cwd: repoRoot,
      timeout: 120_000,
    });
    for (const n of bed.lab.nodes()) assert.match(stdout, new RegExp(`lab-webhook\\s+${n}\\s+OK power=on`), stdout);
    const actions = new Set(service.requests.slice(seen).map((r) => r.action));
    assert.deepEqual([...actions], ["status"], "never off or on");
  });

  const offAttempts = (f: NodeFence) => (f.status?.attempts ?? []).filter((a) => a.operation === "off");

  test("crash: powered off through the webhook, confirmed by its signed status, released, replacement Running", async () => {
    await bed.statefulSet("db", 2);
    const { uid, node } = await current("db-0");
    const seen = service.requests.length;
    const t0 = Date.now();
    await bed.lab.crash(node);
    const replacement = await bed.waitForReplacement("db-0", uid);
    const failover = (Date.now() - t0) / 1000;
    const f = await bed.waitForFence(node, released, "Released");
    assert.equal(f.status?.evidence?.method, "PowerOffConfirmed");
    assert.deepEqual(f.status?.evidence?.agents, ["lab-webhook"]);
    assert.deepEqual(
      offAttempts(f).map((a) => [a.agent, a.outcome]),
      [["lab-webhook", "Succeeded"]],
    );
    assert.equal(bed.lab.machine(node).power, "off");
    const log = service.requests.slice(seen).filter((r) => r.machine === node);
    assert.ok(
      log.some((r) => r.action === "off" && r.status === 202),
      JSON.stringify(log),
    );
    assert.ok(
      log.some((r) => r.action === "status" && r.note === "power off"),
      "the service said off",
    );
    const order = assertFailover(bed.rec, { node, oldUid: uid, newUid: replacement.metadata!.uid!, since: t0, offSource: "webhook" });
    console.log(`failover: ${failover.toFixed(1)} s (heartbeat lost → ${failoverSteps(order, t0)})`);
    assert.deepEqual((await bed.invariant()).violations, []);
    await unfence(node);
    assert.ok(
      service.requests.some((r) => r.machine === node && r.action === "on" && r.status === 202),
      "unfence powered the machine on through the webhook",
    );
  });

  test("wrong key: the service refuses (401), the level fails at once (AuthFailed), IPMI fences", async () => {
    const { uid, node } = await current("db-1");
    service.keys = ["the-service-was-given-another-key-000000"];
    try {
      const t0 = Date.now();
      await bed.lab.crash(node);
      const replacement = await bed.waitForReplacement("db-1", uid);
      const f = await bed.waitForFence(node, released, "Released");
      const attempts = offAttempts(f);
      assert.deepEqual(
        attempts.map((a) => [a.agent, a.outcome]),
        [
          ["lab-webhook", "Failed"],
          ["lab-ipmi", "Succeeded"],
        ],
      );
      assert.match(attempts[0]!.message ?? "", /1 try \(AuthFailed\).*\(401\)/);
      assert.ok(!JSON.stringify(f.status).includes(KEY), "no key in the status");
      assert.deepEqual(f.status?.evidence?.agents, ["lab-ipmi"]);
      assertFailover(bed.rec, { node, oldUid: uid, newUid: replacement.metadata!.uid!, since: t0, offSource: "bmc" });
      assert.deepEqual((await bed.invariant()).violations, []);
    } finally {
      service.keys = [KEY];
    }
    await unfence(node);
  });

  /**
   * A service fault with the BMC unreachable too (so no level can fence): the round fails, nothing is released;
   * then the fault is fixed and the next round (30 s later) fences through the webhook.
   */
  async function faultThenRecovery(fault: "hang" | "garbage", replica: string, expect: RegExp, outcome: string) {
    const { uid, node } = await current(replica);
    service.fault = fault;
    await bed.lab.setBmcReachable(node, false);
    try {
      const t0 = Date.now();
      await bed.lab.crash(node);
      const failed = await bed.waitForFence(node, (f) => f.status?.phase === "Failed", "Failed", 120_000);
      const attempts = offAttempts(failed);
      assert.deepEqual(
        attempts[0] && [attempts[0].agent, attempts[0].outcome],
        ["lab-webhook", outcome],
        JSON.stringify(attempts, null, 1),
      );
      assert.match(attempts[0]!.message ?? "", expect);
      assert.equal(bed.lab.machine(node).power, "on", "nothing powered off");
      assert.equal((await current(replica)).uid, uid, "nothing released");
      assert.deepEqual(failed.status?.releases ?? [], []);
      assert.equal(failed.status?.evidence, undefined);
      assert.ok(!bed.when((e) => e.source === "lab" && e.kind === "power" && e.node === node && e.t >= t0));
    } finally {
      service.fault = "none";
      await bed.lab.setBmcReachable(node, true);
    }
    const replacement = await bed.waitForReplacement(replica, uid, 150_000);
    const f = await bed.waitForFence(node, released, "Released", 150_000);
    assert.ok((f.status?.round ?? 0) >= 1, "released by a later round");
    assert.deepEqual(f.status?.evidence?.agents, ["lab-webhook"]);
    assert.deepEqual((await bed.invariant()).violations, []);
    assert.notEqual(replacement.spec?.nodeName, node);
    await unfence(node);
  }

  test("a hanging service: the request is abandoned at the deadline (TimedOut), nothing released; fixed, the next round fences", async () => {
    await faultThenRecovery("hang", "db-0", /timed out after 10 s/, "TimedOut");
  });

  test("a service answering garbage: BadOutput, nothing released; fixed, the next round fences", async () => {
    await faultThenRecovery("garbage", "db-1", /\(BadOutput\).*not JSON/, "Failed");
  });

  test("no key reaches the operator's logs", () => {
    assert.deepEqual(bed.leakedSecrets([KEY]), []);
    assert.ok(!bed.operatorLogs().includes(KEY));
  });
});
