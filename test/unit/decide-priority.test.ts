import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { orderCandidates, orderPodsForRelease, podPriority, type Candidate } from "../../src/decide/priority.ts";
import { pod } from "./decide-fixtures.ts";

const c = (node: string, priority = 0, atDisruptionLimit = 0, waitedSeconds = 0): Candidate => ({
  node,
  priority,
  atDisruptionLimit,
  waitedSeconds,
});
const names = (cs: readonly { node: string }[]) => cs.map((x) => x.node);
const podNames = (ps: readonly { metadata?: { namespace?: string; name?: string } }[]) =>
  ps.map((p) => `${p.metadata?.namespace}/${p.metadata?.name}`);

describe("podPriority", () => {
  test("spec.priority, 0 when unset", () => {
    assert.equal(podPriority(pod("a", { priority: 1000 })), 1000);
    assert.equal(podPriority(pod("a", { priority: -5 })), -5);
    assert.equal(podPriority(pod("a")), 0);
  });
});

describe("orderCandidates", () => {
  test("highest priority first", () => {
    assert.deepEqual(names(orderCandidates([c("a", 10), c("b", 2_000_000_000), c("c", -1)])), ["b", "a", "c"]);
  });

  test("equal priority: more guarded pods at their disruption limit first", () => {
    assert.deepEqual(names(orderCandidates([c("a", 5, 0), c("b", 5, 2), c("c", 5, 1)])), ["b", "c", "a"]);
  });

  test("priority beats disruption limit", () => {
    assert.deepEqual(names(orderCandidates([c("a", 5, 3), c("b", 6, 0)])), ["b", "a"]);
  });

  test("then the longest-waiting node first", () => {
    assert.deepEqual(names(orderCandidates([c("a", 0, 0, 10), c("b", 0, 0, 300), c("c", 0, 0, 10.5)])), ["b", "c", "a"]);
  });

  test("then by node name, so the order is total and stable", () => {
    assert.deepEqual(names(orderCandidates([c("node-3"), c("node-1"), c("node-2")])), ["node-1", "node-2", "node-3"]);
  });

  test("does not mutate its input and keeps extra fields", () => {
    const input = [
      { ...c("b"), extra: 1 },
      { ...c("a"), extra: 2 },
    ];
    const out = orderCandidates(input);
    assert.deepEqual(names(input), ["b", "a"]);
    assert.equal(out[0]?.extra, 2);
  });
});

describe("orderPodsForRelease", () => {
  test("highest priority first, then by namespace/name", () => {
    const ps = [
      pod("web-0", { ns: "b", priority: 10 }),
      pod("db-1", { ns: "a", priority: 1000 }),
      pod("db-0", { ns: "a", priority: 1000 }),
      pod("cache-0", { ns: "a" }),
      pod("cache-0", { ns: "0", priority: 10 }),
    ];
    assert.deepEqual(podNames(orderPodsForRelease(ps)), ["a/db-0", "a/db-1", "0/cache-0", "b/web-0", "a/cache-0"]);
  });

  test("does not mutate its input", () => {
    const ps = [pod("b"), pod("a", { priority: 5 })];
    orderPodsForRelease(ps);
    assert.deepEqual(podNames(ps), ["default/b", "default/a"]);
  });
});
