import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { AgentError, type AgentContext, type AgentDriver, type PowerState } from "../../src/agents/types.ts";
import { fenceOff, redact, runOperation, type AttemptReport, type RunOptions } from "../../src/agents/run.ts";
import { CONFIRMED_OFF_ANNOTATION, manualDriver } from "../../src/agents/manual.ts";

const PASSWORD = "hunter2-very-secret";
const ctx = { node: "node-1", parameters: { address: "10.0.0.1", username: "admin", password: PASSWORD }, annotations: {} };
const fast: RunOptions = { timeoutMs: 2000, retries: 2, backoffMs: 10, pollMs: 10 };

type Step<T> = T | AgentError | "hang";

/** A driver that answers from scripts (the last step repeats) and records what it was asked. */
class FakeDriver implements AgentDriver {
  readonly type = "ipmi" as const;
  calls: string[] = [];
  problems: string[] = [];
  powerSteps: Step<void>[];
  statusSteps: Step<PowerState>[];
  constructor(o: { power?: Step<void>[]; status?: Step<PowerState>[] }) {
    this.powerSteps = o.power ?? [undefined];
    this.statusSteps = o.status ?? ["on"];
  }
  validate() {
    return this.problems;
  }
  private next<T>(steps: Step<T>[], signal: AbortSignal): Promise<T> {
    const s = steps.length > 1 ? steps.shift()! : steps[0]!;
    if (s === "hang") return new Promise(() => {}); // ignores the signal: the runner must still give up
    if (s instanceof AgentError) return Promise.reject(s);
    signal.throwIfAborted();
    return Promise.resolve(s as T);
  }
  power(c: AgentContext, action: "off" | "on") {
    this.calls.push(action);
    return this.next(this.powerSteps, c.signal);
  }
  status(c: AgentContext) {
    this.calls.push("status");
    return this.next(this.statusSteps, c.signal);
  }
}

describe("runOperation", () => {
  test("retries transient errors with backoff and reports every attempt", async () => {
    const d = new FakeDriver({ status: [new AgentError("Unreachable", "no answer"), new AgentError("BadOutput", "garbage"), "off"] });
    const attempts: AttemptReport[] = [];
    const r = await runOperation(d, ctx, "status", { ...fast, onAttempt: (a) => attempts.push(a) });
    assert.deepEqual({ outcome: r.outcome, power: r.power, tries: r.tries }, { outcome: "Succeeded", power: "off", tries: 3 });
    assert.deepEqual(
      attempts.map((a) => [a.attempt, a.ok, a.kind]),
      [
        [1, false, "Unreachable"],
        [2, false, "BadOutput"],
        [3, true, undefined],
      ],
    );
  });

  test("backoff is exponential from backoffMs", async () => {
    const d = new FakeDriver({ power: [new AgentError("Failed", "x"), new AgentError("Failed", "x"), undefined] });
    const t0 = Date.now();
    const r = await runOperation(d, ctx, "off", { ...fast, backoffMs: 100 });
    assert.equal(r.outcome, "Succeeded");
    const took = Date.now() - t0;
    assert.ok(took >= 300 && took < 1500, `100 + 200 ms of backoff, took ${took} ms`);
  });

  test("gives up after retries with the last error in the message", async () => {
    const d = new FakeDriver({ power: [new AgentError("Unreachable", "BMC did not answer")] });
    const r = await runOperation(d, ctx, "on", fast);
    assert.equal(r.outcome, "Failed");
    assert.equal(r.tries, 3);
    assert.match(r.message, /power on of node-1 failed after 3 tries \(Unreachable\): BMC did not answer/);
  });

  for (const kind of ["AuthFailed", "Config"] as const) {
    test(`does not retry ${kind}: it will not fix itself`, async () => {
      const d = new FakeDriver({ status: [new AgentError(kind, "nope"), "on"] });
      const r = await runOperation(d, ctx, "status", fast);
      assert.equal(r.outcome, "Failed");
      assert.equal(r.tries, 1);
      assert.deepEqual(d.calls, ["status"]);
      assert.match(r.message, new RegExp(`\\(${kind}\\): nope`));
    });
  }

  test("an overall deadline across tries: a hung driver is TimedOut, even one that ignores the signal", async () => {
    const d = new FakeDriver({ power: [new AgentError("Unreachable", "first try lost"), "hang"] });
    const t0 = Date.now();
    const r = await runOperation(d, ctx, "off", { ...fast, timeoutMs: 300 });
    const took = Date.now() - t0;
    assert.equal(r.outcome, "TimedOut");
    assert.ok(took >= 290 && took < 1000, `took ${took} ms`);
    assert.equal(r.tries, 2);
    assert.match(r.message, /power off of node-1 timed out after 0\.3 s \(2 tries\); last error \(Unreachable\): first try lost/);
  });

  test("the deadline also cuts a long backoff short", async () => {
    const d = new FakeDriver({ status: [new AgentError("Unreachable", "x")] });
    const t0 = Date.now();
    const r = await runOperation(d, ctx, "status", { ...fast, timeoutMs: 200, backoffMs: 10_000 });
    assert.equal(r.outcome, "TimedOut");
    assert.ok(Date.now() - t0 < 1000);
  });

  test("the signal the driver sees is aborted at the deadline", async () => {
    let seen: AbortSignal | undefined;
    const d: AgentDriver = {
      type: "ipmi",
      validate: () => [],
      power: async () => {},
      status: (c) => {
        seen = c.signal;
        return new Promise((_, reject) => c.signal.addEventListener("abort", () => reject(new AgentError("TimedOut", "killed"))));
      },
    };
    const r = await runOperation(d, ctx, "status", { ...fast, timeoutMs: 100 });
    assert.equal(r.outcome, "TimedOut");
    assert.equal(seen?.aborted, true);
  });

  test("invalid parameters fail before any try, with the driver's messages", async () => {
    const d = new FakeDriver({});
    d.problems = ["parameter address is missing"];
    const r = await runOperation(d, ctx, "status", fast);
    assert.deepEqual([r.outcome, r.tries, d.calls.length], ["Failed", 0, 0]);
    assert.match(r.message, /misconfigured: parameter address is missing/);
  });

  test("a non-AgentError from a driver is a Failed attempt, not a crash", async () => {
    const d = new FakeDriver({});
    d.status = async () => {
      throw new Error("boom");
    };
    const r = await runOperation(d, ctx, "status", { ...fast, retries: 0 });
    assert.equal(r.outcome, "Failed");
    assert.match(r.message, /\(Failed\): boom/);
  });
});

describe("fenceOff", () => {
  test("succeeds only once a status query says off", async () => {
    const d = new FakeDriver({ power: [undefined], status: ["on", "unknown", "off"] });
    const r = await fenceOff(d, ctx, fast);
    assert.equal(r.outcome, "Succeeded");
    assert.equal(r.power, "off");
    assert.deepEqual(d.calls, ["off", "status", "status", "status"]);
    assert.equal(r.message, "power off of node-1 confirmed by status query");
  });

  test("queryFirst: a machine already off is confirmed without any power command; one on gets the command, after the caller's last word", async () => {
    const off = new FakeDriver({ status: ["off"] });
    let asked = 0;
    const r = await fenceOff(off, ctx, { ...fast, queryFirst: true, beforeTry: async () => void asked++ });
    assert.equal(r.outcome, "Succeeded");
    assert.deepEqual(off.calls, ["status"]);
    assert.equal(asked, 0, "no power command, so no beforeTry");
    assert.match(r.message, /found off by status query before any power command/);
    // Running: the command is tried, and the caller may refuse it (a gone Node's automatic fence does).
    const on = new FakeDriver({ status: ["on"] });
    const refused = await fenceOff(on, ctx, {
      ...fast,
      queryFirst: true,
      beforeTry: () => Promise.reject(new AgentError("Cancelled", "its Node was deleted")),
    });
    assert.equal(refused.outcome, "Cancelled");
    assert.deepEqual(on.calls, ["status"], "refused before the command: nothing powered off");
  });

  test("a successful off command that status never confirms times out with the last observation", async () => {
    const d = new FakeDriver({ power: [undefined], status: ["on"] });
    const r = await fenceOff(d, ctx, { ...fast, timeoutMs: 200 });
    assert.equal(r.outcome, "TimedOut");
    assert.match(r.message, /power off of node-1 not confirmed within 0\.2 s .*last status query said on/);
    assert.ok(d.calls.filter((c) => c === "status").length > 3, "status is polled");
  });

  test("transient status errors keep polling; the last one is reported", async () => {
    const d = new FakeDriver({ status: [new AgentError("Unreachable", "lost"), "off"] });
    assert.equal((await fenceOff(d, ctx, fast)).outcome, "Succeeded");
    const d2 = new FakeDriver({ status: [new AgentError("BadOutput", "weird answer")] });
    const r = await fenceOff(d2, ctx, { ...fast, timeoutMs: 150 });
    assert.equal(r.outcome, "TimedOut");
    assert.match(r.message, /last status query failed \(BadOutput\): weird answer/);
  });

  test("a failing off command is retried, then Failed without polling status", async () => {
    const d = new FakeDriver({ power: [new AgentError("Failed", "refused")] });
    const r = await fenceOff(d, ctx, fast);
    assert.equal(r.outcome, "Failed");
    assert.deepEqual(d.calls, ["off", "off", "off"]);
  });

  test("AuthFailed during polling stops at once", async () => {
    const d = new FakeDriver({ status: [new AgentError("AuthFailed", "bad password")] });
    const r = await fenceOff(d, ctx, fast);
    assert.equal(r.outcome, "Failed");
    assert.equal(d.calls.length, 2);
  });

  test("manual: no power command, waits for the administrator's annotation on the NodeFence", async () => {
    const waiting = await fenceOff(manualDriver, ctx, { ...fast, timeoutMs: 150 });
    assert.equal(waiting.outcome, "TimedOut");
    assert.match(waiting.message, /manual fencing of node-1 not confirmed within 0\.15 s/);
    assert.match(waiting.message, new RegExp(`annotate the NodeFence ${CONFIRMED_OFF_ANNOTATION}=node-1`));
    const wrongNode = await fenceOff(
      manualDriver,
      { ...ctx, annotations: { [CONFIRMED_OFF_ANNOTATION]: "node-2" } },
      { ...fast, timeoutMs: 100 },
    );
    assert.equal(wrongNode.outcome, "TimedOut", "a confirmation for another node does not count");
    const done = await fenceOff(manualDriver, { ...ctx, annotations: { [CONFIRMED_OFF_ANNOTATION]: "node-1" } }, fast);
    assert.deepEqual([done.outcome, done.power, done.tries], ["Succeeded", "off", 1]);
  });
});

describe("redact", () => {
  test("replaces the values of credential-looking keys, longest first", () => {
    const p = { password: "abc", api_token: "abcdef", ssh_key: "k3y", secret: "", username: "admin", passwd: "x" };
    assert.equal(redact("pw abcdef abc k3y admin", p), "pw *** *** *** admin");
    assert.equal(redact("xylophone", p), "***ylophone", "even a one-character password");
    assert.equal(redact("nothing here", {}), "nothing here");
  });

  test("a list of Secret values is scrubbed whole, with and without a final newline", () => {
    assert.equal(redact("user admin pw s3cret", ["admin", "s3cret\n"]), "user *** pw ***");
  });

  test("every message that leaves the runner is redacted", async () => {
    const leak = (m: string) => new AgentError("Unreachable", `could not log in with ${PASSWORD} at ${m}`);
    const attempts: AttemptReport[] = [];
    const d = new FakeDriver({ power: [leak("off")], status: [leak("status")] });
    const results = [
      await runOperation(d, ctx, "off", { ...fast, onAttempt: (a) => attempts.push(a) }),
      await runOperation(d, ctx, "status", { ...fast, timeoutMs: 50, backoffMs: 1000 }),
      await fenceOff(new FakeDriver({ status: [leak("poll")] }), ctx, { ...fast, timeoutMs: 100 }),
    ];
    const hung = new FakeDriver({ power: [leak("first"), "hang"] });
    results.push(await runOperation(hung, ctx, "off", { ...fast, timeoutMs: 100 }));
    const bad = new FakeDriver({});
    bad.problems = [`password ${PASSWORD} is too short`];
    results.push(await runOperation(bad, ctx, "off", fast));
    for (const text of [...results.map((r) => r.message), ...attempts.map((a) => a.message)]) {
      assert.ok(!text.includes(PASSWORD), `leaked: ${text}`);
      assert.match(text, /\*\*\*/);
    }
  });
});
