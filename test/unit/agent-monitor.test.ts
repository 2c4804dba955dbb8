// The agent monitor (src/controllers/agent-monitor.ts) with a fake device: it only ever asks for the power status
// (never off or on), a bounded number at a time (one while a fence is under way, never the fenced node's device),
// records why a query failed with the credentials scrubbed, sees a rotated Secret, and the FenceAgent controller
// folds it into Ready/Reachable, status.monitor and one aggregate Event per change.
import { test } from "node:test";
import assert from "node:assert/strict";
import { setImmediate as tick } from "node:timers/promises";
import { DateTime } from "luxon";
import pino from "pino";
import type { V1Node } from "@kubernetes/client-node";
import type { FenceAgent, NodeFence } from "../../src/api/v1alpha1.ts";
import { AgentMonitor, MONITOR_CONCURRENCY, type AgentMonitorDeps } from "../../src/controllers/agent-monitor.ts";
import { FenceAgentController, type FenceAgentDeps } from "../../src/controllers/fence-agent.ts";
import type { MonitorFold } from "../../src/decide/agent-monitor.ts";
import { AgentError, type AgentContext, type AgentDriver } from "../../src/agents/types.ts";
import { parseNodeAgentRecord } from "../../src/decide/node-agent-record.ts";
import { agentRecord, fence, policy } from "./decide-fixtures.ts";

const GOOD = "right-password-1";

function world(n: number, o: { intervalSeconds?: number; hold?: boolean } = {}) {
  const names = Array.from({ length: n }, (_, i) => `node-${i + 1}`);
  const nodes: V1Node[] = names.map((name) => ({ metadata: { name, labels: {} } }));
  const agent: FenceAgent = {
    apiVersion: "stockade.io/v1alpha1",
    kind: "FenceAgent",
    metadata: { name: "ipmi", uid: "uid-ipmi", generation: 1 },
    spec: {
      type: "ipmi",
      parameters: { username: "admin" },
      credentialsSecretRef: { namespace: "stockade-system", name: "bmc" },
      nodes: Object.fromEntries(names.map((name, i) => [name, { parameters: { address: `10.0.0.${i + 1}` } }])),
      timeoutSeconds: 5,
      retries: 0,
      monitor: { intervalSeconds: o.intervalSeconds ?? 60 },
    },
  };
  const fences: NodeFence[] = [];
  const calls: { op: string; node: string }[] = [];
  let inFlight = 0;
  let maxInFlight = 0;
  const waiting: (() => void)[] = [];
  const hold = { on: o.hold ?? false };
  const answer = { power: "on" as "on" | "off" | "unknown" };
  const driver: AgentDriver = {
    type: "ipmi",
    validate: () => [],
    power: async (ctx: AgentContext, action) => {
      calls.push({ op: action, node: ctx.node });
      throw new Error("the monitor must never power anything");
    },
    status: async (ctx: AgentContext) => {
      calls.push({ op: "status", node: ctx.node });
      inFlight++;
      maxInFlight = Math.max(maxInFlight, inFlight);
      try {
        if (hold.on) await new Promise<void>((r) => waiting.push(r));
        if (ctx.parameters.password !== GOOD)
          throw new AgentError(
            "AuthFailed",
            `BMC ${ctx.parameters.address}:623 rejected the credentials of user "admin" (password ${ctx.parameters.password})`,
          );
        return answer.power;
      } finally {
        inFlight--;
      }
    },
  };
  const secret = { password: GOOD };
  let nowMs = 1_000_000;
  const changes: string[] = [];
  const deps: AgentMonitorDeps = {
    kube: { readSecret: async () => ({ ...secret }) },
    caches: {
      agents: { list: () => [agent], get: () => agent },
      policies: { list: () => [policy("default")] },
      nodes: { list: () => nodes },
      fences: { list: () => fences },
    } as unknown as AgentMonitorDeps["caches"],
    log: pino({ level: "silent" }),
    onChange: (a) => changes.push(a),
    now: () => nowMs,
    driverFor: () => driver,
  };
  const monitor = new AgentMonitor(deps);
  return {
    monitor,
    deps,
    agent,
    names,
    fences,
    calls,
    secret,
    changes,
    hold,
    answer,
    waiting,
    get maxInFlight() {
      return maxInFlight;
    },
    advance: (ms: number) => (nowMs += ms),
    release: () => waiting.splice(0).forEach((r) => r()),
  };
}

/** Lets the queries started by a tick end (fake devices answer at once; held ones are released). */
async function settle(m: AgentMonitor, release: () => void = () => {}): Promise<void> {
  for (let i = 0; i < 500 && m.inFlight > 0; i++) {
    release();
    await tick();
  }
  assert.equal(m.inFlight, 0, "every query ended");
}

/** Ticks through one whole first-query window, a second at a time, letting each tick's queries end. */
async function runFor(w: ReturnType<typeof world>, seconds: number): Promise<void> {
  for (let s = 0; s < seconds; s++) {
    w.monitor.tick();
    await settle(w.monitor);
    w.advance(1000);
  }
}

test("every node is queried for its status within the first minute, never powered, and the fold says Reachable", async () => {
  const w = world(5);
  await runFor(w, 61);
  assert.deepEqual([...new Set(w.calls.map((c) => c.op))], ["status"], "status queries only");
  assert.deepEqual([...new Set(w.calls.map((c) => c.node))].sort(), w.names);
  const f = w.monitor.fold(w.agent, w.names);
  assert.deepEqual([f.reachable.status, f.summary?.reachable, f.summary?.failing, f.summary?.pending], ["True", 5, 0, 0]);
  assert.deepEqual(w.changes.length > 0, true, "the controller was told");
});

test("a wrong password: the node fails with AuthFailed, the password scrubbed; a fixed Secret recovers it at its next slot", async () => {
  const w = world(3);
  w.secret.password = "wrong-password-7";
  await runFor(w, 61);
  let f = w.monitor.fold(w.agent, w.names);
  assert.deepEqual([f.reachable.status, f.reachable.reason, f.summary?.failing], ["False", "AuthFailed", 3]);
  for (const x of f.summary?.failures ?? []) {
    assert.equal(x.reason, "AuthFailed");
    assert.ok(!x.message.includes("wrong-password-7"), `a password leaked: ${x.message}`);
    assert.match(x.message, /^BMC 10\.0\.0\.\d:623 rejected the credentials/, "the device's own words");
  }
  assert.ok(!f.reachable.message.includes("wrong-password-7"));
  w.secret.password = GOOD;
  w.changes.length = 0;
  // The interval (60 s): every node's slot comes round once after the Secret read before the change expired (5 s).
  await runFor(w, 66);
  f = w.monitor.fold(w.agent, w.names);
  assert.deepEqual([f.reachable.status, f.summary?.reachable, f.summary?.failing], ["True", 3, 0]);
  assert.ok(w.changes.length >= 1);
  assert.deepEqual([...new Set(w.calls.map((c) => c.op))], ["status"]);
});

test("bounded: at most MONITOR_CONCURRENCY queries at once over 40 due nodes; one while a fence is under way, never its node", async () => {
  const w = world(40, { hold: true });
  w.monitor.fold(w.agent, w.names); // the monitor begins watching the agent now…
  w.advance(60_000); // …and a minute later every node is due
  w.monitor.tick();
  await tick();
  assert.equal(w.monitor.inFlight, MONITOR_CONCURRENCY);
  w.monitor.tick(); // full: nothing more
  await tick();
  assert.equal(w.maxInFlight, MONITOR_CONCURRENCY);
  await settle(w.monitor, w.release);
  // A fence of node-40 begins: one query at a time, and none of node-40.
  w.fences.push(fence("node-40", { phase: "Fencing" }));
  for (let i = 0; i < 40; i++) {
    w.monitor.tick();
    await tick();
    assert.ok(w.monitor.inFlight <= 1, `${w.monitor.inFlight} queries during a fence`);
    await settle(w.monitor, w.release);
  }
  assert.ok(!w.calls.some((c) => c.node === "node-40"), "the fenced node's device is left to its fence");
  assert.equal(new Set(w.calls.map((c) => c.node)).size, 39);
});

test("a replica that no longer leads starts no query", async () => {
  const w = world(3);
  let leading = false;
  const m = new AgentMonitor({ ...w.deps, leading: () => leading });
  m.fold(w.agent, w.names);
  w.advance(120_000);
  m.tick();
  await settle(m);
  assert.deepEqual(w.calls, []);
  leading = true;
  m.tick();
  await settle(m);
  assert.equal(w.calls.length, 3);
});

test("stop cancels the queries under way: they record nothing", async () => {
  const w = world(2, { hold: true });
  w.monitor.fold(w.agent, w.names);
  w.advance(60_000);
  w.monitor.tick();
  await tick();
  assert.equal(w.monitor.inFlight, 2);
  await w.monitor.stop();
  assert.equal(w.monitor.inFlight, 0);
  const f = w.monitor.fold(w.agent, w.names);
  assert.equal(f.summary?.pending, 2);
  w.release();
});

test("the FenceAgent controller: Ready and Reachable False with AuthFailed, status.monitor, one MonitorFailed Event, then MonitorRecovered", async () => {
  const w = world(3);
  w.secret.password = "wrong-password-7";
  await runFor(w, 61);
  let stored: FenceAgent = w.agent;
  const events: { type: string; reason: string; message: string }[] = [];
  const deps = {
    kube: {
      readSecret: async () => ({ ...w.secret }),
      replaceStatus: async (_: string, a: FenceAgent) => (stored = a),
    },
    caches: {
      agents: { get: () => stored },
      nodes: { list: () => w.names.map((name) => ({ metadata: { name, labels: {} } })) },
      policies: { list: () => [policy("default")] },
    },
    events: { record: async (_: unknown, type: string, reason: string, message: string) => void events.push({ type, reason, message }) },
    log: pino({ level: "silent" }),
    clock: () => DateTime.fromISO("2026-11-27T00:00:00Z"),
    monitor: w.monitor,
  } as unknown as FenceAgentDeps;
  const c = new FenceAgentController(deps);
  await c.reconcile("ipmi");
  const cond = (t: string) => stored.status?.conditions?.find((x) => x.type === t);
  assert.deepEqual([cond("Ready")?.status, cond("Ready")?.reason], ["False", "AuthFailed"]);
  assert.deepEqual([cond("Reachable")?.status, cond("Reachable")?.reason], ["False", "AuthFailed"]);
  assert.equal(stored.status?.monitor?.failing, 3);
  assert.equal(stored.status?.monitor?.failures?.length, 3);
  assert.ok(!JSON.stringify(stored.status).includes("wrong-password-7"), "no password in the status");
  assert.deepEqual(
    events.map((e) => [e.type, e.reason]),
    [["Warning", "MonitorFailed"]],
  );
  assert.match(events[0]!.message, /^3 node\(s\) can no longer be fenced through FenceAgent ipmi: .*node-1 \(AuthFailed/);
  assert.ok(!events[0]!.message.includes("wrong-password-7"));
  // Again, nothing new: no Event.
  await c.reconcile("ipmi");
  assert.equal(events.length, 1);
  w.secret.password = "right-password-1";
  await runFor(w, 66);
  await c.reconcile("ipmi");
  assert.deepEqual([cond("Ready")?.status, cond("Reachable")?.status, stored.status?.monitor?.reachable], ["True", "True", 3]);
  assert.deepEqual(
    events.map((e) => [e.type, e.reason]),
    [
      ["Warning", "MonitorFailed"],
      ["Normal", "MonitorRecovered"],
    ],
  );
  assert.match(events[1]!.message, /^3 node\(s\) answer status queries through FenceAgent ipmi again: node-1, node-2, node-3$/);
});

test("a device that answers but says neither on nor off is failing (BadOutput): a fence through it could not be confirmed", async () => {
  const w = world(1);
  w.answer.power = "unknown";
  await runFor(w, 61);
  const f = w.monitor.fold(w.agent, w.names);
  assert.deepEqual([f.reachable.status, f.reachable.reason], ["False", "BadOutput"]);
  assert.match(f.summary?.failures[0]?.message ?? "", /not with a power state \(unknown\)/);
  w.answer.power = "off"; // a machine that is off still has a device that answers
  await runFor(w, 66);
  assert.equal(w.monitor.fold(w.agent, w.names).reachable.status, "True");
});

test("the FenceAgent controller writes status.monitor when it changes, but a mere newer lastQueryTime at most once a minute", async () => {
  const a: FenceAgent = {
    apiVersion: "stockade.io/v1alpha1",
    kind: "FenceAgent",
    metadata: { name: "admin", generation: 1 },
    spec: { type: "manual" },
  };
  let stored = a;
  let writes = 0;
  let fold: MonitorFold = {
    reachable: { status: "True", reason: "Reachable", message: "1 node(s) answered a status query (every 60 s)" },
    summary: {
      intervalSeconds: 60,
      observedGeneration: 1,
      nodes: 1,
      reachable: 1,
      failing: 0,
      pending: 0,
      lastQueryTime: "2026-11-27T00:00:00.000Z",
      failures: [],
    },
    failing: [],
  };
  const deps = {
    kube: { readSecret: async () => ({}), replaceStatus: async (_: string, x: FenceAgent) => (writes++, (stored = x)) },
    caches: {
      agents: { get: () => stored },
      nodes: { list: () => [{ metadata: { name: "node-1", labels: {} } }] },
      policies: { list: () => [policy("default", { escalation: [{ agents: [{ name: "admin" }] }] })] },
    },
    events: { record: async () => {} },
    log: pino({ level: "silent" }),
    clock: () => DateTime.fromISO("2026-11-27T00:00:00Z"),
    monitor: { fold: () => fold, transitions: () => ({ lost: [], recovered: [] }) },
  } as unknown as FenceAgentDeps;
  const c = new FenceAgentController(deps);
  await c.reconcile("admin");
  assert.equal(writes, 1);
  assert.equal(stored.status?.monitor?.lastQueryTime, "2026-11-27T00:00:00.000Z");
  fold = { ...fold, summary: { ...fold.summary!, lastQueryTime: "2026-11-27T00:00:59.000Z" } };
  await c.reconcile("admin");
  assert.equal(writes, 1, "59 s later, nothing else changed: no write");
  fold = { ...fold, summary: { ...fold.summary!, lastQueryTime: "2026-11-27T00:01:00.000Z" } };
  await c.reconcile("admin");
  assert.equal(writes, 2, "a minute later: written");
  fold = { ...fold, summary: { ...fold.summary!, pending: 1, nodes: 2, lastQueryTime: "2026-11-27T00:01:01.000Z" } };
  await c.reconcile("admin");
  assert.equal(writes, 3, "a count changed: written at once");
  assert.equal(stored.status?.monitor?.pending, 1);
});

test("a watchdog agent: not Ready for exactly the nodes without an armed agent record; unknown until the cache lists; a disarm shows within one interval", async () => {
  const w = world(3);
  const wd: FenceAgent = {
    ...w.agent,
    metadata: { name: "wd", uid: "uid-wd", generation: 1 },
    spec: { type: "watchdog", monitor: { intervalSeconds: 60 } },
  };
  const records = new Map([
    ["node-1", agentRecord("node-1")],
    ["node-2", agentRecord("node-2", { armed: "false" })],
  ]);
  const cache = {
    hasSynced: false,
    sighting: (n: string) => (records.has(n) ? { parsed: parseNodeAgentRecord(records.get(n)!), silentMs: 1_000 } : undefined),
  };
  let started = 0;
  const m = new AgentMonitor({
    ...w.deps,
    caches: {
      ...w.deps.caches,
      agents: { list: () => [wd], get: () => wd },
      policies: { list: () => [policy("default", { escalation: [{ agents: [{ name: "wd" }] }] })] },
    } as unknown as AgentMonitorDeps["caches"],
    agentRecords: () => (started++, cache),
  });
  const run = async (seconds: number) => {
    for (let s = 0; s < seconds; s++) {
      m.tick();
      await settle(m);
      w.advance(1000);
    }
  };
  await run(61);
  assert.ok(started > 0, "the record cache is asked for once a watchdog agent is monitored");
  let f = m.fold(wd, w.names);
  assert.deepEqual(
    [f.reachable.status, f.reachable.reason, f.summary?.pending],
    ["Unknown", "Pending", 3],
    "not listed yet: unknown, not failed",
  );
  cache.hasSynced = true;
  await run(2); // not an interval later: a node left unknown is due again at once
  f = m.fold(wd, w.names);
  assert.deepEqual(f.failing, ["node-2", "node-3"]);
  assert.deepEqual([f.reachable.status, f.summary?.reachable, f.summary?.failing], ["False", 1, 2]);
  assert.deepEqual(
    f.summary?.failures.map((x) => [x.node, x.reason]),
    [
      ["node-2", "WatchdogUnarmed"],
      ["node-3", "NodeAgentMissing"],
    ],
  );
  assert.deepEqual(w.calls, [], "no device, no Secret driver: never a power call");
  records.set("node-2", agentRecord("node-2"));
  records.set("node-3", agentRecord("node-3"));
  await run(61);
  f = m.fold(wd, w.names);
  assert.deepEqual([f.reachable.status, f.summary?.reachable], ["True", 3]);
  records.set("node-1", agentRecord("node-1", { armed: "false" }));
  await run(61);
  f = m.fold(wd, w.names);
  assert.deepEqual(
    [f.reachable.status, f.reachable.reason, f.failing],
    ["False", "WatchdogUnarmed", ["node-1"]],
    "within one interval (60 s)",
  );
});
