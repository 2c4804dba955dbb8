// The fence agents against real peers: OpenIPMI ipmi_sim BMCs whose power control really powers the
// simulated machines, driven by ipmitool directly and by Debian's fence_ipmilan.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { Lab } from "../../lab/lab.ts";
import { driverFor } from "../../src/agents/registry.ts";
import { fenceOff, runOperation, type RunContext, type RunOptions } from "../../src/agents/run.ts";
import { CONFIRMED_OFF_ANNOTATION } from "../../src/agents/manual.ts";

const opts: RunOptions = { timeoutMs: 20_000, retries: 1, backoffMs: 500 };
const log = (m: string) => console.log(`# ${m}`);

async function timed<T>(label: string, f: () => Promise<T>): Promise<T> {
  const t0 = Date.now();
  const r = await f();
  log(`${label}: ${Date.now() - t0} ms ${JSON.stringify(r)}`);
  return r;
}

/** Processes whose command line mentions the BMC's port: a killed agent must leave none behind. */
function processesFor(port: number): string[] {
  const ps = execFileSync("ps", ["-eo", "pid=,args="], { encoding: "utf8" });
  return ps.split("\n").filter((l) => /fence_ipmilan|ipmitool/.test(l) && l.includes(String(port)) && !l.includes("ps -eo"));
}

describe("fence agents against simulated BMCs", { timeout: 120_000 }, () => {
  let lab: Lab;
  let ipmiCtx: RunContext;
  let fenceCtx: RunContext;
  let passwords: string[];

  before(async () => {
    lab = await Lab.up({ dir: mkdtempSync(join(tmpdir(), "stockade-agents-")), nodes: 2 });
    const b1 = lab.bmcEndpoint("node-1");
    const b2 = lab.bmcEndpoint("node-2");
    const pw1 = readFileSync(b1.passwordFile, "utf8").trim();
    const pw2 = readFileSync(b2.passwordFile, "utf8").trim();
    passwords = [pw1, pw2];
    ipmiCtx = {
      node: "node-1",
      parameters: { address: b1.address, port: String(b1.port), username: b1.username, password: pw1 },
      annotations: {},
    };
    fenceCtx = {
      node: "node-2",
      parameters: { ip: b2.address, ipport: String(b2.port), username: b2.username, password: pw2, lanplus: "1", cipher: "3" },
      annotations: {},
    };
  });
  after(async () => {
    await lab?.setBmcReachable("node-1", true).catch(() => {});
    await lab?.down();
  });

  const noPassword = (m: string) => {
    for (const pw of passwords) assert.ok(!m.includes(pw), `a password leaked into: ${m}`);
  };

  test("ipmi: status on → fence off (confirmed, the machine is really off) → status off → on", async () => {
    const ipmi = driverFor("ipmi");
    const s1 = await timed("ipmi status", () => runOperation(ipmi, ipmiCtx, "status", opts));
    assert.deepEqual([s1.outcome, s1.power], ["Succeeded", "on"]);
    const off = await timed("ipmi fenceOff", () => fenceOff(ipmi, ipmiCtx, opts));
    assert.equal(off.outcome, "Succeeded", off.message);
    assert.equal(off.message, "power off of node-1 confirmed by status query");
    assert.equal(lab.machine("node-1").power, "off");
    const s2 = await runOperation(ipmi, ipmiCtx, "status", opts);
    assert.deepEqual([s2.outcome, s2.power], ["Succeeded", "off"]);
    const on = await timed("ipmi on", () => runOperation(ipmi, ipmiCtx, "on", opts));
    assert.equal(on.outcome, "Succeeded", on.message);
    assert.equal((await runOperation(ipmi, ipmiCtx, "status", opts)).power, "on");
    assert.equal(lab.machine("node-1").power, "on");
  });

  test("fenceAgent fence_ipmilan: status on → fence off → status off → on", async () => {
    const fa = driverFor("fenceAgent", "fence_ipmilan");
    assert.deepEqual(fa.validate(fenceCtx.parameters), []);
    const s1 = await timed("fence_ipmilan status", () => runOperation(fa, fenceCtx, "status", opts));
    assert.deepEqual([s1.outcome, s1.power], ["Succeeded", "on"], s1.message);
    const off = await timed("fence_ipmilan fenceOff", () => fenceOff(fa, fenceCtx, opts));
    assert.equal(off.outcome, "Succeeded", off.message);
    assert.equal(lab.machine("node-2").power, "off");
    assert.equal((await runOperation(fa, fenceCtx, "status", opts)).power, "off");
    const on = await timed("fence_ipmilan on", () => runOperation(fa, fenceCtx, "on", opts));
    assert.equal(on.outcome, "Succeeded", on.message);
    assert.equal(lab.machine("node-2").power, "on");
  });

  test("a wrong password: AuthFailed from ipmi at once, a clear failure from fence_ipmilan, no password in either", async () => {
    const wrong = "Wr0ng-Passw0rd";
    const ipmi = await timed("ipmi wrong password", () =>
      runOperation(driverFor("ipmi"), { ...ipmiCtx, parameters: { ...ipmiCtx.parameters, password: wrong } }, "status", opts),
    );
    assert.equal(ipmi.outcome, "Failed");
    assert.equal(ipmi.tries, 1, "credentials will not fix themselves: no retry");
    assert.match(
      ipmi.message,
      /\(AuthFailed\): BMC 127\.0\.0\.1:\d+ rejected the credentials of user "admin": check username and password/,
    );
    const fa = await timed("fence_ipmilan wrong password", () =>
      runOperation(
        driverFor("fenceAgent", "fence_ipmilan"),
        { ...fenceCtx, parameters: { ...fenceCtx.parameters, password: wrong } },
        "status",
        {
          ...opts,
          retries: 0,
        },
      ),
    );
    assert.equal(fa.outcome, "Failed");
    assert.match(fa.message, /fence_ipmilan status exited with 1 .*Unable to obtain correct plug status/);
    for (const m of [ipmi.message, fa.message]) {
      noPassword(m);
      assert.ok(!m.includes(wrong), m);
    }
  });

  test("a frozen BMC: ipmi says Unreachable within seconds; a hung fence_ipmilan is killed at the deadline", async () => {
    const port = lab.bmcEndpoint("node-1").port;
    await lab.setBmcReachable("node-1", false);
    try {
      const ipmi = driverFor("ipmi");
      const t0 = Date.now();
      const once = await timed("ipmi frozen BMC, no retry", () => runOperation(ipmi, ipmiCtx, "status", { ...opts, retries: 0 }));
      assert.equal(once.outcome, "Failed");
      assert.match(once.message, /\(Unreachable\): BMC 127\.0\.0\.1:\d+ did not answer/);
      assert.ok(Date.now() - t0 < 8000, "ipmitool's own retransmits give up within a few seconds");
      const deadline = await timed("ipmi frozen BMC, fenceOff with a 6 s deadline", () =>
        fenceOff(ipmi, ipmiCtx, { timeoutMs: 6000, retries: 5, backoffMs: 500 }),
      );
      assert.equal(deadline.outcome, "TimedOut");
      assert.match(deadline.message, /timed out after 6 s .*Unreachable/);

      const fa = driverFor("fenceAgent", "fence_ipmilan");
      const frozenCtx = {
        ...fenceCtx,
        node: "node-1",
        parameters: { ...fenceCtx.parameters, ipport: String(port), password: passwords[0]! },
      };
      const t1 = Date.now();
      const r = await timed("fence_ipmilan frozen BMC, 3 s deadline", () =>
        runOperation(fa, frozenCtx, "status", { timeoutMs: 3000, retries: 2, backoffMs: 500 }),
      );
      assert.equal(r.outcome, "TimedOut");
      assert.ok(Date.now() - t1 < 4000);
      noPassword(r.message);
      await sleep(200);
      assert.deepEqual(processesFor(port), [], "the agent and its ipmitool were killed");
    } finally {
      await lab.setBmcReachable("node-1", true);
    }
    assert.equal((await runOperation(driverFor("ipmi"), ipmiCtx, "status", opts)).power, "on", "the BMC answers again");
  });

  test("manual: status is unknown until the NodeFence carries the confirmation for this node", async () => {
    const manual = driverFor("manual");
    const ctx = { node: "node-1", parameters: {}, annotations: {} };
    assert.equal((await runOperation(manual, ctx, "status", opts)).power, "unknown");
    const confirmed = { ...ctx, annotations: { [CONFIRMED_OFF_ANNOTATION]: "node-1" } };
    assert.equal((await runOperation(manual, confirmed, "status", opts)).power, "off");
    const r = await fenceOff(manual, confirmed, opts);
    assert.deepEqual(
      [r.outcome, r.message],
      ["Succeeded", `node-1 confirmed off by the administrator (annotation ${CONFIRMED_OFF_ANNOTATION})`],
    );
  });
});
