// The agent monitor's decisions (src/decide/agent-monitor.ts): which nodes' devices are due for a status query
// (spread over the interval, no thundering herd), which agents are not monitored, and how the answers fold into the
// FenceAgent's Reachable and Ready conditions, status.monitor and the aggregate Events' transitions.
import { test } from "node:test";
import assert from "node:assert/strict";
import type { FenceAgent } from "../../src/api/v1alpha1.ts";
import {
  DEFAULT_MONITOR_INTERVAL_SECONDS,
  FIRST_QUERY_WINDOW_SECONDS,
  MAX_LISTED_FAILURES,
  dueNodes,
  failingTransitions,
  foldMonitor,
  isDue,
  monitorIntervalMs,
  nextResult,
  offsetMs,
  readyVerdict,
  resultChanged,
  watchdogNodeResult,
  type NodeResult,
} from "../../src/decide/agent-monitor.ts";
import { parseNodeAgentRecord } from "../../src/decide/node-agent-record.ts";
import { agent, agentRecord } from "./decide-fixtures.ts";

const withInterval = (a: FenceAgent, intervalSeconds?: number): FenceAgent => ({
  ...a,
  metadata: { ...a.metadata, generation: 3 },
  spec: { ...a.spec, ...(intervalSeconds === undefined ? {} : { monitor: { intervalSeconds } }) },
});

test("interval: 300 s by default, 0 turns it off, and manual agents and storage fences are never queried", () => {
  assert.equal(monitorIntervalMs(agent("ipmi")), DEFAULT_MONITOR_INTERVAL_SECONDS * 1000);
  assert.equal(monitorIntervalMs(withInterval(agent("ipmi"), 30)), 30_000);
  assert.equal(monitorIntervalMs(withInterval(agent("ipmi"), 0)), undefined);
  assert.equal(monitorIntervalMs(withInterval(agent("ipmi"), 3)), 10_000, "below the minimum (an old object): the minimum");
  for (const type of ["ipmi", "redfish", "fenceAgent", "webhook", "aws", "gcp", "azure"] as const)
    assert.ok(monitorIntervalMs(agent("a", type)), `${type} answers a status query`);
  assert.equal(monitorIntervalMs(agent("admin", "manual")), undefined);
  assert.equal(monitorIntervalMs(agent("net", "csiAddonsNetworkFence")), undefined);
});

test("2,000 nodes at 300 s: each is due once per interval, and the queries spread evenly (no second holds more than a few)", () => {
  const intervalMs = 300_000;
  const nodes = Array.from({ length: 2000 }, (_, i) => `node-${i}`);
  const last = new Map<string, number>();
  const firstQuery = new Map<string, number>();
  const perSecond = new Map<number, number>();
  const since = 1_000_000;
  // A first query window, then two whole intervals, simulated second by second.
  for (let t = since; t < since + FIRST_QUERY_WINDOW_SECONDS * 1000 + 2 * intervalMs; t += 1000) {
    const due = dueNodes({
      agent: "ipmi",
      nodes,
      intervalMs,
      nowMs: t,
      sinceMs: since,
      lastStart: last,
      running: new Set(),
      busy: new Set(),
    });
    for (const n of due) {
      last.set(n, t);
      if (!firstQuery.has(n)) firstQuery.set(n, t);
    }
    perSecond.set(t, due.length);
  }
  const counts = [...perSecond.values()];
  const steady = counts.slice(FIRST_QUERY_WINDOW_SECONDS + 1);
  const total = steady.reduce((a, b) => a + b, 0);
  // Two intervals after the first window: every node twice (give or take its slot at the edges).
  assert.ok(total >= 2 * 2000 - 2000 && total <= 2 * 2000 + 10, `queries in two intervals: ${total}`);
  assert.ok(Math.max(...steady) <= 25, `at most ${Math.max(...steady)} in one second (mean ${(2000 / 300).toFixed(1)})`);
  // The first window: every node, within FIRST_QUERY_WINDOW_SECONDS of the start, spread over it too.
  assert.equal(firstQuery.size, 2000);
  assert.ok(Math.max(...firstQuery.values()) <= since + FIRST_QUERY_WINDOW_SECONDS * 1000, "every node queried within the first window");
  assert.ok(
    Math.max(...counts.slice(0, FIRST_QUERY_WINDOW_SECONDS)) <= 80,
    `at most ${Math.max(...counts)} in one second of the first window`,
  );
});

test("isDue: a node is due once its slot has begun since its last query; never twice in one slot", () => {
  const intervalMs = 60_000;
  const phase = offsetMs("ipmi", "node-1", intervalMs);
  const slotStart = 10 * intervalMs + phase;
  const base = { agent: "ipmi", node: "node-1", intervalMs, sinceMs: 0 };
  assert.equal(isDue({ ...base, nowMs: slotStart - 1, lastStartMs: slotStart - intervalMs }), false, "the slot has not begun");
  assert.equal(isDue({ ...base, nowMs: slotStart, lastStartMs: slotStart - intervalMs }), true);
  assert.equal(isDue({ ...base, nowMs: slotStart + 30_000, lastStartMs: slotStart + 1 }), false, "already queried in this slot");
  assert.equal(isDue({ ...base, nowMs: slotStart + 5 * intervalMs, lastStartMs: slotStart }), true, "late: due, once");
  // Never queried: within the first window of its spec.
  const first = offsetMs("ipmi", "node-1", intervalMs);
  assert.equal(isDue({ ...base, sinceMs: 5000, nowMs: 5000 + first - 1, lastStartMs: undefined }), false);
  assert.equal(isDue({ ...base, sinceMs: 5000, nowMs: 5000 + first, lastStartMs: undefined }), true);
});

test("dueNodes: leaves out the nodes being queried and those whose fence is under way; longest waiting first", () => {
  const o = {
    agent: "ipmi",
    nodes: ["a", "b", "c", "d"],
    intervalMs: 10_000,
    nowMs: 1_000_000,
    sinceMs: 0,
    lastStart: new Map([
      ["a", 900_000],
      ["b", 950_000],
      ["c", 800_000],
      ["d", 700_000],
    ]),
    running: new Set(["d"]),
    busy: new Set(["b"]),
  };
  assert.deepEqual(dueNodes(o), ["c", "a"]);
});

const ok = (atMs: number): NodeResult => ({ ok: true, message: "status query of n: power is on", atMs, power: "on" });
const bad = (
  atMs: number,
  reason: NodeResult["reason"] = "AuthFailed",
  message = "BMC 10.0.0.1:623 rejected the credentials",
): NodeResult => nextResult(undefined, { ok: false, reason, message, atMs });

test("nextResult keeps when a node's failures began; resultChanged ignores a mere new time", () => {
  const first = nextResult(undefined, { ok: false, reason: "Unreachable", message: "no answer", atMs: 1000 });
  assert.equal(first.failingSinceMs, 1000);
  const again = nextResult(first, { ok: false, reason: "Unreachable", message: "no answer", atMs: 5000 });
  assert.equal(again.failingSinceMs, 1000);
  assert.equal(resultChanged(first, again), false);
  const other = nextResult(again, { ok: false, reason: "AuthFailed", message: "rejected", atMs: 9000 });
  assert.equal(other.failingSinceMs, 1000, "still failing since the first failure");
  assert.equal(resultChanged(again, other), true);
  const healed = nextResult(other, { ok: true, message: "on", atMs: 12000 });
  assert.equal(healed.failingSinceMs, undefined);
  assert.equal(resultChanged(other, healed), true);
  assert.equal(resultChanged(undefined, healed), true);
  assert.equal(resultChanged(healed, nextResult(healed, ok(20000))), false);
});

test("fold: all answered → Reachable True; Ready True with the configuration's reason", () => {
  const a = withInterval(agent("ipmi"), 60);
  const f = foldMonitor({
    agent: a,
    nodes: ["node-1", "node-2"],
    results: new Map([
      ["node-1", ok(1000)],
      ["node-2", ok(2000)],
    ]),
  });
  assert.deepEqual([f.reachable.status, f.reachable.reason], ["True", "Reachable"]);
  assert.deepEqual(f.summary, {
    intervalSeconds: 60,
    observedGeneration: 3,
    nodes: 2,
    reachable: 2,
    failing: 0,
    pending: 0,
    lastQueryTime: new Date(2000).toISOString(),
    failures: [],
  });
  const ready = readyVerdict({ ok: true, reason: "Valid", message: "parameters resolve for 2 node(s)" }, f.reachable);
  assert.equal(ready.status, "True");
  assert.equal(ready.reason, "Valid");
  assert.match(ready.message, /parameters resolve for 2 node\(s\); 2 node\(s\) answered a status query \(every 60 s\)/);
});

test("fold: a node whose BMC refused the password → Reachable and Ready False, reason AuthFailed, the node listed", () => {
  const a = withInterval(agent("ipmi"), 60);
  const f = foldMonitor({
    agent: a,
    nodes: ["node-1", "node-2"],
    results: new Map([
      ["node-1", ok(1000)],
      ["node-2", bad(2000)],
    ]),
  });
  assert.deepEqual([f.reachable.status, f.reachable.reason], ["False", "AuthFailed"]);
  assert.match(
    f.reachable.message,
    /^1 of 2 node\(s\) could not be fenced through this agent now: .*node-2 \(AuthFailed: BMC 10\.0\.0\.1:623 rejected/,
  );
  assert.match(f.reachable.message, /Nothing is fenced because of it/);
  assert.deepEqual(f.failing, ["node-2"]);
  assert.equal(f.summary?.failing, 1);
  assert.equal(f.summary?.reachable, 1);
  assert.deepEqual(f.summary?.failures, [
    {
      node: "node-2",
      reason: "AuthFailed",
      message: "BMC 10.0.0.1:623 rejected the credentials",
      since: new Date(2000).toISOString(),
      lastQueryTime: new Date(2000).toISOString(),
    },
  ]);
  const ready = readyVerdict({ ok: true, reason: "Valid", message: "ok" }, f.reachable);
  assert.deepEqual([ready.status, ready.reason], ["False", "AuthFailed"]);
  // A configuration problem is said first.
  const config = readyVerdict({ ok: false, reason: "SecretNotFound", message: "Secret s/bmc does not exist" }, f.reachable);
  assert.deepEqual([config.status, config.reason], ["False", "SecretNotFound"]);
});

test("fold: failures of several kinds → reason NodesFailing; the list is bounded, longest failing first; counts cover all", () => {
  const a = withInterval(agent("ipmi"), 60);
  const nodes = Array.from({ length: 100 }, (_, i) => `node-${String(i).padStart(3, "0")}`);
  const results = new Map(nodes.map((n, i) => [n, i < 60 ? bad(10_000 - i, i % 2 ? "Unreachable" : "AuthFailed") : ok(20_000)] as const));
  const f = foldMonitor({ agent: a, nodes, results });
  assert.equal(f.reachable.reason, "NodesFailing");
  assert.equal(f.summary?.failing, 60);
  assert.equal(f.summary?.reachable, 40);
  assert.equal(f.failing.length, 60);
  assert.equal(f.summary?.failures.length, MAX_LISTED_FAILURES);
  assert.equal(f.summary?.failures[0]?.node, "node-059", "failing since the earliest first");
  assert.match(f.reachable.message, /and 55 more/);
  assert.ok(f.reachable.message.length < 2000, `a bounded message (${f.reachable.message.length})`);
});

test("fold: nodes not queried yet are pending (Unknown before any answer); only the agent's nodes count", () => {
  const a = withInterval(agent("ipmi"), 60);
  const none = foldMonitor({ agent: a, nodes: ["node-1", "node-2"], results: new Map() });
  assert.deepEqual([none.reachable.status, none.reachable.reason], ["Unknown", "Pending"]);
  assert.equal(none.summary?.pending, 2);
  assert.equal(none.summary?.lastQueryTime, undefined);
  assert.equal(
    readyVerdict({ ok: true, reason: "Valid", message: "ok" }, none.reachable).status,
    "True",
    "Ready stays the configuration's",
  );
  const some = foldMonitor({
    agent: a,
    nodes: ["node-1", "node-2"],
    results: new Map([
      ["node-1", ok(1)],
      ["gone", bad(2)],
    ]),
  });
  assert.deepEqual([some.reachable.status, some.summary?.pending, some.summary?.failing], ["True", 1, 0]);
  assert.match(some.reachable.message, /1 not queried yet/);
});

test("fold: manual, storage fences and a disabled monitor are reported as not monitored, never as failing", () => {
  for (const [a, reason] of [
    [agent("admin", "manual"), "NotMonitored"],
    [agent("net", "csiAddonsNetworkFence"), "NotMonitored"],
    [withInterval(agent("ipmi"), 0), "MonitorDisabled"],
  ] as const) {
    const f = foldMonitor({ agent: a, nodes: ["node-1"], results: new Map([["node-1", bad(1)]]) });
    assert.deepEqual([f.reachable.status, f.reachable.reason, f.summary, f.failing], ["Unknown", reason, undefined, []], a.spec.type);
    assert.equal(readyVerdict({ ok: true, reason: "Valid", message: "ok" }, f.reachable).status, "True");
  }
});

test("transitions: the newly failing and the recovered, each once; a node that left the agent did not recover", () => {
  assert.deepEqual(failingTransitions(new Set(), ["a", "b"], ["a", "b", "c"]), { lost: ["a", "b"], recovered: [] });
  assert.deepEqual(failingTransitions(new Set(["a", "b"]), ["a", "b"], ["a", "b", "c"]), { lost: [], recovered: [] });
  assert.deepEqual(failingTransitions(new Set(["a", "b"]), ["b", "c"], ["a", "b", "c"]), { lost: ["c"], recovered: ["a"] });
  assert.deepEqual(failingTransitions(new Set(["a"]), [], ["b"]), { lost: [], recovered: [] });
});

test("watchdog coverage: a node's record in the cache: armed → ok (T, D said); missing, unarmed, unparseable, another node's, silent past D → failing; not listed yet → no result", () => {
  const seen = (node: string, o: Parameters<typeof agentRecord>[1] = {}, silentMs = 1_000) => ({
    synced: true,
    sighting: { parsed: parseNodeAgentRecord(agentRecord(node, o)), silentMs },
  });
  assert.equal(watchdogNodeResult("n1", { synced: false, sighting: undefined }, 5), undefined, "unknown, not failed");
  const ok = watchdogNodeResult("n1", seen("n1", { T: "20", D: "30" }), 5)!;
  assert.deepEqual([ok.ok, ok.atMs], [true, 5]);
  assert.match(ok.message, /T=20 s, D=30 s/);
  const missing = watchdogNodeResult("n1", { synced: true, sighting: undefined }, 5)!;
  assert.deepEqual([missing.ok, missing.reason], [false, "NodeAgentMissing"]);
  assert.match(missing.message, /no node agent record for node n1: install manifests\/node-agent\//);
  assert.deepEqual(
    [
      watchdogNodeResult("n1", seen("n1", { armed: "false" }), 5)!.reason,
      watchdogNodeResult("n1", seen("n1", { armed: "maybe" }), 5)!.reason,
    ],
    ["WatchdogUnarmed", "NodeAgentRecordInvalid"],
  );
  assert.equal(watchdogNodeResult("n1", seen("n2"), 5)!.reason, "NodeAgentRecordInvalid", "another node's record");
  assert.equal(watchdogNodeResult("n1", seen("n1", { D: "30" }, 30_000), 5)!.ok, true, "silent for exactly D: still covered");
  const silent = watchdogNodeResult("n1", seen("n1", { D: "30" }, 31_000), 5)!;
  assert.deepEqual([silent.ok, silent.reason], [false, "NodeAgentSilent"]);
  assert.match(silent.message, /31 s, longer than its deadline D=30 s/);
});

test("watchdog coverage folds like a device's: not Ready for exactly the nodes without an armed agent, which it names", () => {
  const a = agent("wd", "watchdog");
  assert.equal(monitorIntervalMs(a), DEFAULT_MONITOR_INTERVAL_SECONDS * 1000, "monitored, at the common default");
  const results = new Map<string, NodeResult>([
    ["n1", { ok: true, message: "armed", atMs: 10 }],
    [
      "n2",
      { ok: false, reason: "WatchdogUnarmed", message: "node n2's agent runs with its watchdog unarmed", atMs: 10, failingSinceMs: 10 },
    ],
    ["n3", { ok: false, reason: "NodeAgentMissing", message: "no node agent record for node n3", atMs: 10, failingSinceMs: 10 }],
  ]);
  const f = foldMonitor({ agent: a, nodes: ["n1", "n2", "n3"], results });
  assert.deepEqual(f.failing, ["n2", "n3"]);
  assert.deepEqual([f.reachable.status, f.reachable.reason], ["False", "NodesFailing"]);
  assert.match(f.reachable.message, /2 of 3 node\(s\) .*node agent does not cover them: .*n2 \(WatchdogUnarmed.*n3 \(NodeAgentMissing/);
  assert.match(f.reachable.message, /fall to the next escalation level/);
  const all = foldMonitor({ agent: a, nodes: ["n1"], results });
  assert.deepEqual([all.reachable.status, all.reachable.reason], ["True", "Reachable"]);
  assert.match(all.reachable.message, /1 node\(s\) have an armed node agent/);
});
