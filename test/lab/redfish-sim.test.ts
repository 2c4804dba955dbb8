// The lab's Redfish simulator (a test double of our own, lab/redfish-sim.ts) speaks real Redfish: three
// independent clients from Debian — fence_redfish (fence-agents), redfishtool and python3-sushy — each power a
// real lab node off (every process of the node gone) and on again through it. Then Stockade's redfish driver
// against the same simulator: session auth with the lab CA, the 202 task monitor, a task ending in Exception,
// wrong credentials, a hanging BMC and an impostor's certificate.
import { after, before, beforeEach, describe, test } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Lab } from "../../lab/lab.ts";
import { realNodeImages } from "../../lab/images.ts";
import { nodePids } from "../../lab/real/node.ts";
import { RedfishSimulator } from "../../lab/redfish-sim.ts";
import { redfishDriver } from "../../src/agents/redfish.ts";
import { fenceOff, runOperation } from "../../src/agents/run.ts";
import type { AgentError } from "../../src/agents/types.ts";

/** Runs a client with `input` on stdin (credentials never in argv); resolves with its exit code and output. */
function client(cmd: string, args: string[], input: string, timeoutMs = 60_000): Promise<{ code: number; out: string }> {
  // requests lets REQUESTS_CA_BUNDLE / CURL_CA_BUNDLE override the CA a client asks for (sushy's verify=): not here.
  const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => k !== "REQUESTS_CA_BUNDLE" && k !== "CURL_CA_BUNDLE"));
  return new Promise((resolve) => {
    const c = execFile(cmd, args, { timeout: timeoutMs, env }, (err, stdout, stderr) =>
      resolve({ code: err ? (typeof err.code === "number" ? err.code : 1) : 0, out: `${stdout}\n${stderr}` }),
    );
    c.stdin?.end(input);
  });
}

const SUSHY = `
import json, sys, time, sushy
c = json.load(sys.stdin)
s = sushy.Sushy(c["url"] + "/redfish/v1", username=c["user"], password=c["password"], verify=c["ca"])
system = s.get_system("/redfish/v1/Systems/1")
allowed = system.get_allowed_reset_system_values()
want = sushy.ResetType.FORCE_OFF if c["action"] == "off" else sushy.ResetType.ON
assert want in allowed, allowed
system.reset_system(want)
until = time.time() + 60
while time.time() < until:
    system.refresh()
    if system.power_state == (sushy.PowerState.OFF if c["action"] == "off" else sushy.PowerState.ON):
        print("power_state", system.power_state.value)
        sys.exit(0)
    time.sleep(0.3)
sys.exit("power state never became " + c["action"])
`;

describe("the lab's Redfish simulator against independent clients", () => {
  let lab: Lab;
  let sim: RedfishSimulator;
  let dir: string;
  const node = "node-1";
  let cgroup: string;

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), "stockade-redfish-sim-"));
    lab = await Lab.up({ dir, nodes: 1, runtime: "real", images: await realNodeImages() });
    sim = await RedfishSimulator.start(lab.state, node);
    cgroup = `/stockade-lab/${lab.state.real!.slot}-${node}`;
    writeFileSync(join(dir, "redfish-ca.crt"), sim.caBundle);
  });
  after(async () => {
    await sim?.stop();
    await lab?.down();
  });

  /** Off: the machine is off and no process of the node is left. On: the node boots anew and is Ready. */
  async function assertPower(power: "on" | "off", bootBefore?: string) {
    await sim.settled();
    const m = lab.machine(node);
    assert.equal(m.power, power);
    if (power === "off") assert.deepEqual(nodePids(cgroup), [], "no process of the node is left");
    else {
      assert.ok(nodePids(cgroup).length > 0, "the node's processes run again");
      const n = await lab.waitForNodeReady(node, { timeoutMs: 120_000 });
      assert.notEqual(n.status?.nodeInfo?.bootID, bootBefore, "a new boot");
    }
  }

  test("fence_redfish (fence-agents, Basic auth, polls PowerState) powers the node off and on", async () => {
    const opts = (action: string) =>
      [
        `action=${action}`,
        "ip=127.0.0.1",
        `ipport=${sim.port}`,
        `username=${sim.username}`,
        `password=${sim.password}`,
        "ssl_insecure=1",
        "power_timeout=40",
      ].join("\n") + "\n";
    const status = await client("/usr/sbin/fence_redfish", [], opts("status"));
    assert.equal(status.code, 0, status.out);
    assert.match(status.out, /Status: ON/);
    const boot = lab.machine(node).bootID;
    const off = await client("/usr/sbin/fence_redfish", [], opts("off"));
    assert.equal(off.code, 0, off.out);
    await assertPower("off");
    assert.ok(sim.requests.some((r) => r.resetType === "ForceOff" && r.auth === "basic" && r.status === 204));
    const on = await client("/usr/sbin/fence_redfish", [], opts("on"));
    assert.equal(on.code, 0, on.out);
    await assertPower("on", boot);
  });

  test("redfishtool (Basic auth, checks ResetType against the AllowableValues) powers the node off and on", async () => {
    const cfg = join(dir, "redfishtool.json");
    writeFileSync(cfg, JSON.stringify({ user: sim.username, password: sim.password }), { mode: 0o600 });
    const rt = (...args: string[]) =>
      client("redfishtool", ["-r", `127.0.0.1:${sim.port}`, "-S", "Always", "-c", cfg, "Systems", "-1", ...args], "");
    const get = await rt("get", "-P", "PowerState");
    assert.equal(get.code, 0, get.out);
    assert.match(get.out, /"PowerState": "On"/);
    const boot = lab.machine(node).bootID;
    const off = await rt("reset", "ForceOff");
    assert.equal(off.code, 0, off.out);
    await assertPower("off");
    assert.match((await rt("get", "-P", "PowerState")).out, /"PowerState": "Off"/);
    const bad = await rt("reset", "Bogus");
    assert.notEqual(bad.code, 0, "an unknown ResetType is refused");
    const on = await rt("reset", "On");
    assert.equal(on.code, 0, on.out);
    await assertPower("on", boot);
  });

  test("python3-sushy (session auth, verifies the certificate with the lab CA) powers the node off and on", async () => {
    const input = (action: string) =>
      JSON.stringify({
        url: `https://127.0.0.1:${sim.port}`,
        user: sim.username,
        password: sim.password,
        ca: join(dir, "redfish-ca.crt"),
        action,
      });
    const sessionsBefore = sim.requests.filter((r) => r.method === "POST" && r.path === "/redfish/v1/SessionService/Sessions").length;
    const boot = lab.machine(node).bootID;
    const off = await client("/usr/bin/python3", ["-c", SUSHY], input("off"));
    assert.equal(off.code, 0, off.out);
    assert.match(off.out, /power_state Off/);
    await assertPower("off");
    const on = await client("/usr/bin/python3", ["-c", SUSHY], input("on"));
    assert.equal(on.code, 0, on.out);
    await assertPower("on", boot);
    const sessions = sim.requests.filter((r) => r.method === "POST" && r.path === "/redfish/v1/SessionService/Sessions").length;
    assert.ok(sessions > sessionsBefore, "sushy logged in with a session");
    assert.ok(sim.requests.some((r) => r.resetType === "ForceOff" && r.auth === "session"));
  });

  test("an impostor's certificate: sushy, which verifies, refuses it", async () => {
    sim.useCertificate("impostor");
    try {
      const input = JSON.stringify({
        url: `https://127.0.0.1:${sim.port}`,
        user: sim.username,
        password: sim.password,
        ca: join(dir, "redfish-ca.crt"),
        action: "off",
      });
      const r = await client("/usr/bin/python3", ["-c", SUSHY], input);
      assert.notEqual(r.code, 0);
      assert.match(r.out, /CERTIFICATE_VERIFY_FAILED|certificate verify failed/i);
      assert.equal(lab.machine(node).power, "on");
    } finally {
      sim.useCertificate("lab");
    }
  });

  describe("Stockade's redfish driver against the simulator", () => {
    const params = () => ({
      address: "127.0.0.1",
      port: String(sim.port),
      username: sim.username,
      password: sim.password,
      caBundle: sim.caBundle,
    });
    const ctx = (p: Record<string, string> = params(), signal = new AbortController().signal) => ({
      node,
      parameters: p,
      annotations: {},
      signal,
    });
    const opts = { timeoutMs: 60_000, retries: 2, backoffMs: 200, pollMs: 300 };

    /** Each test starts from a machine that is on (a failed one must not leave the next one a machine that is off). */
    beforeEach(async () => {
      sim.mode = "normal";
      sim.useCertificate("lab");
      await sim.settled();
      if (lab.machine(node).power === "off") await lab.bmc(node, "on");
      await lab.waitForNodeReady(node, { timeoutMs: 120_000 });
    });

    test("status, off confirmed by PowerState, on; sessions deleted afterwards", async () => {
      const since = sim.requests.length;
      assert.equal(await redfishDriver.status(ctx()), "on");
      const boot = lab.machine(node).bootID;
      const r = await fenceOff(redfishDriver, { node, parameters: params(), annotations: {} }, opts);
      assert.equal(r.outcome, "Succeeded", r.message);
      await assertPower("off");
      const on = await runOperation(redfishDriver, { node, parameters: params(), annotations: {} }, "on", opts);
      assert.equal(on.outcome, "Succeeded", on.message);
      await assertPower("on", boot);
      const mine = sim.requests.slice(since);
      const logins = mine.filter((r) => r.method === "POST" && r.path.endsWith("/Sessions") && r.status === 201).length;
      const logouts = mine.filter((r) => r.method === "DELETE" && r.status === 204).length;
      assert.ok(logins >= 3 && logouts === logins, `every session deleted: ${logins} logins, ${logouts} logouts`);
      assert.ok(sim.requests.some((r) => r.resetType === "ForceOff" && r.auth === "session"));
    });

    test("202 with a task monitor: followed until the task completes; Basic auth", async () => {
      sim.mode = "task";
      try {
        const boot = lab.machine(node).bootID;
        await redfishDriver.power(ctx({ ...params(), authMethod: "basic" }), "off");
        // The task completed only once the machine was off: the driver returned after that.
        assert.equal(lab.machine(node).power, "off");
        assert.ok(sim.requests.filter((r) => r.path.startsWith("/redfish/v1/TaskService/TaskMonitors/") && r.status === 202).length >= 1);
        assert.equal(await redfishDriver.status(ctx()), "off");
        await redfishDriver.power(ctx(), "on");
        await assertPower("on", boot);
      } finally {
        sim.mode = "normal";
      }
    });

    test("a task ending in Exception is a failure, and nothing was powered off", async () => {
      sim.mode = "task-exception";
      try {
        await assert.rejects(
          redfishDriver.power(ctx(), "off"),
          (e: AgentError) => e.kind === "Failed" && /ended Exception/.test(e.message),
        );
        assert.equal(lab.machine(node).power, "on");
      } finally {
        sim.mode = "normal";
      }
    });

    test("wrong credentials are AuthFailed, never retried; the password is in no message", async () => {
      sim.mode = "wrong-password";
      try {
        const r = await fenceOff(redfishDriver, { node, parameters: params(), annotations: {} }, opts);
        assert.equal(r.outcome, "Failed");
        assert.equal(r.tries, 1, "AuthFailed is permanent");
        assert.match(r.message, /AuthFailed.*rejected the credentials of user "fence" \(HTTP 401\)/);
        assert.ok(!r.message.includes(sim.password));
        assert.equal(lab.machine(node).power, "on");
      } finally {
        sim.mode = "normal";
      }
    });

    test("a hanging BMC: the deadline cuts the call off and it is a failure", async () => {
      sim.mode = "hang";
      try {
        const t0 = Date.now();
        const r = await fenceOff(redfishDriver, { node, parameters: params(), annotations: {} }, { ...opts, timeoutMs: 3000 });
        assert.equal(r.outcome, "TimedOut", r.message);
        assert.ok(Date.now() - t0 < 5000, "ended at the deadline");
        assert.equal(lab.machine(node).power, "on");
      } finally {
        sim.mode = "normal";
      }
    });

    test("an impostor's certificate is refused before anything is sent; insecureSkipVerify would accept it", async () => {
      sim.useCertificate("impostor");
      try {
        const before = sim.requests.length;
        await assert.rejects(
          redfishDriver.power(ctx(), "off"),
          (e: AgentError) => e.kind === "Config" && /certificate that does not verify against the caBundle/.test(e.message),
        );
        await assert.rejects(
          redfishDriver.status(ctx({ ...params(), caBundle: "" })),
          (e: AgentError) => e.kind === "Config" && /trusted root CAs/.test(e.message),
        );
        assert.equal(sim.requests.length, before, "not one request reached the impostor");
        assert.equal(lab.machine(node).power, "on");
        const insecure: Record<string, string> = { ...params(), insecureSkipVerify: "true" };
        delete insecure.caBundle;
        assert.equal(await redfishDriver.status(ctx(insecure)), "on");
      } finally {
        sim.useCertificate("lab");
      }
    });
  });
});
