// Item 5 of issue 8: a power command is preceded, every try, retries included, by the caller's last word (leadership,
// the node still partitioned); and a withdrawn run stops at once. The driver here is a scripted AgentDriver (an
// in-process interface, not a protocol peer); the real agents are exercised against ipmi_sim in test/lab and test/e2e.
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { AgentError, type AgentContext, type AgentDriver, type PowerState } from "../../src/agents/types.ts";
import { fenceOff, runOperation, type RunOptions } from "../../src/agents/run.ts";

const ctx = { node: "node-1", parameters: { address: "10.0.0.1", username: "admin", password: "pw" }, annotations: {} };
const fast: RunOptions = { timeoutMs: 2000, retries: 3, backoffMs: 10, pollMs: 10 };

class ScriptedDriver implements AgentDriver {
  readonly type = "ipmi" as const;
  calls: string[] = [];
  private readonly power_: (n: number) => Promise<void>;
  private readonly status_: () => PowerState;
  constructor(power: (n: number) => Promise<void>, status: () => PowerState = () => "off") {
    this.power_ = power;
    this.status_ = status;
  }
  validate() {
    return [];
  }
  power(_c: AgentContext, action: "off" | "on") {
    this.calls.push(action);
    return this.power_(this.calls.filter((c) => c !== "status").length);
  }
  async status() {
    this.calls.push("status");
    return this.status_();
  }
}

describe("beforeTry: checked right before every power command", () => {
  test("called before each try, retries included, and never before a status query", async () => {
    const seen: string[] = [];
    const d = new ScriptedDriver(async (n) => {
      if (n < 3) throw new AgentError("Unreachable", "no answer");
    });
    const r = await fenceOff(d, ctx, { ...fast, beforeTry: async (op) => void seen.push(`check ${op} before try ${d.calls.length + 1}`) });
    assert.equal(r.outcome, "Succeeded");
    assert.deepEqual(d.calls, ["off", "off", "off", "status"]);
    assert.deepEqual(seen, ["check off before try 1", "check off before try 2", "check off before try 3"]);
  });

  test("the node heartbeats again between two tries: no further power-off, the run ends Cancelled", async () => {
    let healthy = false;
    const d = new ScriptedDriver(async () => {
      healthy = true; // the first try times out at the BMC; meanwhile the node comes back
      throw new AgentError("Unreachable", "no answer");
    });
    const r = await fenceOff(d, ctx, {
      ...fast,
      beforeTry: async () => {
        if (healthy) throw new AgentError("Cancelled", "the node heartbeats again");
      },
    });
    assert.equal(r.outcome, "Cancelled");
    assert.match(r.message, /the node heartbeats again/);
    assert.deepEqual(d.calls, ["off"], "exactly one power-off was sent: none after the node came back");
  });

  test("a check that hangs is bounded by the run's deadline (TimedOut), and no command is sent", async () => {
    const d = new ScriptedDriver(async () => {});
    const r = await runOperation(d, ctx, "off", { ...fast, timeoutMs: 100, beforeTry: () => new Promise(() => {}) });
    assert.equal(r.outcome, "TimedOut");
    assert.deepEqual(d.calls, []);
  });
});

describe("signal: a withdrawn run", () => {
  test("ends Cancelled at once, even while the driver hangs", async () => {
    const ac = new AbortController();
    const d = new ScriptedDriver(() => new Promise(() => {}));
    const started = Date.now();
    const run = runOperation(d, ctx, "off", { ...fast, timeoutMs: 60_000, signal: ac.signal });
    setTimeout(() => ac.abort(), 20);
    const r = await run;
    assert.equal(r.outcome, "Cancelled");
    assert.ok(Date.now() - started < 5_000);
  });

  test("an already withdrawn run sends nothing", async () => {
    const ac = new AbortController();
    ac.abort();
    const d = new ScriptedDriver(async () => {});
    const r = await runOperation(d, ctx, "off", { ...fast, signal: ac.signal });
    assert.equal(r.outcome, "Cancelled");
    assert.deepEqual(d.calls, []);
  });
});
