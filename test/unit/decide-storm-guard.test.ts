import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { evaluateGuards, unhealthyLimit, type GuardInput, type GuardNode } from "../../src/decide/storm-guard.ts";

const ZONE = "topology.kubernetes.io/zone";
const n = (name: string, unhealthy: boolean, zone?: string, labels: Record<string, string> = {}): GuardNode => ({
  name,
  unhealthy,
  labels: zone === undefined ? labels : { ...labels, [ZONE]: zone },
});
/** count nodes named prefix-1..count, the first `bad` of them unhealthy. */
const fleet = (count: number, bad: number, prefix = "node", zone?: string): GuardNode[] =>
  Array.from({ length: count }, (_, i) => n(`${prefix}-${i + 1}`, i < bad, zone));
const input = (o: Partial<GuardInput>): GuardInput => ({ guards: undefined, nodes: [], activeFences: 0, watchStalenessSeconds: 0, ...o });
const reasons = (v: { holds: { reason: string }[] }) => v.holds.map((h) => h.reason);

describe("unhealthyLimit", () => {
  test("a count is taken as is", () => {
    assert.equal(unhealthyLimit(3, 100), 3);
    assert.equal(unhealthyLimit(1, 2), 1);
  });

  test("a percentage of the selected nodes, rounded down", () => {
    assert.equal(unhealthyLimit("50%", 10), 5);
    assert.equal(unhealthyLimit("50%", 5), 2, "2.5 rounds down");
    assert.equal(unhealthyLimit("50%", 3), 1, "1.5 rounds down");
    assert.equal(unhealthyLimit("100%", 7), 7);
    assert.equal(unhealthyLimit("99%", 100), 99);
    assert.equal(unhealthyLimit("29%", 100), 29, "integer arithmetic: 0.29 * 100 would be 28.999…");
    assert.equal(unhealthyLimit("150%", 10), 15);
  });

  test("a percentage is at least 1, even 0% or a small fleet", () => {
    assert.equal(unhealthyLimit("33%", 3), 1, "0.99 → 0 → at least 1");
    assert.equal(unhealthyLimit("0%", 10), 1);
    assert.equal(unhealthyLimit("50%", 1), 1);
    assert.equal(unhealthyLimit("50%", 0), 1);
  });

  test("default is 50%", () => {
    assert.equal(unhealthyLimit(undefined, 10), 5);
    assert.equal(unhealthyLimit(undefined, 3), 1);
  });

  test("an int-or-string holding an integer string is a count; anything else falls back to 1", () => {
    assert.equal(unhealthyLimit("3", 100), 3);
    assert.equal(unhealthyLimit("two", 100), 1);
    assert.equal(unhealthyLimit("1.5", 100), 1);
    assert.equal(unhealthyLimit("5 %", 100), 1);
  });
});

describe("evaluateGuards", () => {
  test("nothing wrong: no holds, nothing blocked, one slot by default", () => {
    const v = evaluateGuards(input({ nodes: fleet(4, 1) }));
    assert.deepEqual(v.holds, []);
    assert.equal(v.blocked.size, 0);
    assert.equal(v.slots, 1);
  });

  test("slots = maxConcurrentFences - active fences, never negative", () => {
    const nodes = fleet(10, 1);
    assert.equal(evaluateGuards(input({ nodes, guards: { maxConcurrentFences: 3 } })).slots, 3);
    assert.equal(evaluateGuards(input({ nodes, guards: { maxConcurrentFences: 3 }, activeFences: 2 })).slots, 1);
    assert.equal(evaluateGuards(input({ nodes, guards: { maxConcurrentFences: 3 }, activeFences: 3 })).slots, 0);
    assert.equal(evaluateGuards(input({ nodes, guards: { maxConcurrentFences: 1 }, activeFences: 5 })).slots, 0);
    assert.equal(evaluateGuards(input({ nodes, activeFences: 1 })).slots, 0, "default maxConcurrentFences is 1");
  });

  describe("maxUnhealthyNodes", () => {
    test("count: up to the limit is fine, one more holds", () => {
      const g = { maxUnhealthyNodes: 2, maxConcurrentFences: 5 };
      assert.deepEqual(reasons(evaluateGuards(input({ guards: g, nodes: fleet(10, 2) }))), []);
      const v = evaluateGuards(input({ guards: g, nodes: fleet(10, 3) }));
      assert.deepEqual(reasons(v), ["TooManyUnhealthyNodes"]);
      assert.equal(v.slots, 0, "a hold leaves no slot");
    });

    test("percentage with rounding: 50% of 5 allows 2, holds at 3", () => {
      assert.deepEqual(reasons(evaluateGuards(input({ guards: { maxUnhealthyNodes: "50%" }, nodes: fleet(5, 2) }))), []);
      assert.deepEqual(reasons(evaluateGuards(input({ guards: { maxUnhealthyNodes: "50%" }, nodes: fleet(5, 3) }))), [
        "TooManyUnhealthyNodes",
      ]);
    });

    test("default 50% of 3 nodes allows only 1", () => {
      assert.deepEqual(reasons(evaluateGuards(input({ nodes: fleet(3, 1) }))), []);
      assert.deepEqual(reasons(evaluateGuards(input({ nodes: fleet(3, 2) }))), ["TooManyUnhealthyNodes"]);
    });

    test("the message names the unhealthy nodes (sorted), the setting and the computed limit", () => {
      const nodes = [n("node-c", true), n("node-a", true), n("node-b", false), n("node-d", false), n("node-e", true)];
      const v = evaluateGuards(input({ guards: { maxUnhealthyNodes: "50%" }, nodes }));
      const msg = v.holds[0]?.message ?? "";
      assert.match(msg, /^3 of 5 nodes are unhealthy \(node-a, node-c, node-e\)/);
      assert.match(msg, /maxUnhealthyNodes 50% = 2/);
      assert.match(evaluateGuards(input({ nodes: fleet(2, 2) })).holds[0]?.message ?? "", /maxUnhealthyNodes 50% = 1/);
    });

    test("at thousands of unhealthy nodes the message names the first ten and counts the rest", () => {
      // Every held node's decision carries this message, and it is kept and logged per node: naming all 4,000 made it
      // 57 KB, in the 5,000-node run whose operator ran out of heap (docs/developer/scale.md).
      const msg = evaluateGuards(input({ nodes: fleet(5000, 4000) })).holds[0]?.message ?? "";
      assert.match(
        msg,
        /^4000 of 5000 nodes are unhealthy \(([^,()]+, ){9}[^,()]+ and 3990 more\), more than maxUnhealthyNodes 50% = 2500/,
      );
      assert.ok(msg.length < 500, `${msg.length} characters`);
    });
  });

  describe("watch staleness", () => {
    test("over the limit holds (default 60 s); at the limit does not", () => {
      assert.deepEqual(reasons(evaluateGuards(input({ nodes: fleet(3, 1), watchStalenessSeconds: 60 }))), []);
      const v = evaluateGuards(input({ nodes: fleet(3, 1), watchStalenessSeconds: 60.5 }));
      assert.deepEqual(reasons(v), ["WatchesStale"]);
      assert.equal(v.slots, 0);
      assert.match(v.holds[0]?.message ?? "", /silent for 61 s \(limit 60 s\)/);
    });

    test("maxWatchStalenessSeconds is honoured", () => {
      const g = { maxWatchStalenessSeconds: 10 };
      assert.deepEqual(reasons(evaluateGuards(input({ guards: g, nodes: fleet(3, 0), watchStalenessSeconds: 11 }))), ["WatchesStale"]);
      assert.deepEqual(reasons(evaluateGuards(input({ guards: { maxWatchStalenessSeconds: 600 }, watchStalenessSeconds: 300 }))), []);
    });

    test("both holds are reported together", () => {
      assert.deepEqual(reasons(evaluateGuards(input({ nodes: fleet(2, 2), watchStalenessSeconds: 1000 }))), [
        "WatchesStale",
        "TooManyUnhealthyNodes",
      ]);
    });
  });

  describe("zone guard", () => {
    const guards = { maxUnhealthyNodes: 100, maxConcurrentFences: 3 };

    test("a whole zone unhealthy blocks its nodes (and only those), without holding the policy", () => {
      const nodes = [...fleet(2, 2, "a", "zone-a"), ...fleet(3, 1, "b", "zone-b")];
      const v = evaluateGuards(input({ guards, nodes }));
      assert.deepEqual(v.holds, []);
      assert.equal(v.slots, 3, "the zone guard does not take slots");
      assert.deepEqual([...v.blocked.keys()].sort(), ["a-1", "a-2"]);
      const hold = v.blocked.get("a-1");
      assert.equal(hold?.reason, "ZonePartitioned");
      assert.match(hold?.message ?? "", /every node of topology\.kubernetes\.io\/zone=zone-a \(2\) is unhealthy/);
      assert.equal(v.blocked.get("b-1"), undefined, "a zone with a healthy node is not blocked");
    });

    test("zones smaller than minZoneSize (default 2) are not guarded", () => {
      const nodes = [...fleet(1, 1, "a", "zone-a"), ...fleet(3, 0, "b", "zone-b")];
      assert.equal(evaluateGuards(input({ guards, nodes })).blocked.size, 0);
      assert.deepEqual([...evaluateGuards(input({ guards: { ...guards, minZoneSize: 1 }, nodes })).blocked.keys()], ["a-1"]);
      const three = [...fleet(2, 2, "a", "zone-a"), ...fleet(3, 0, "b", "zone-b")];
      assert.equal(evaluateGuards(input({ guards: { ...guards, minZoneSize: 3 }, nodes: three })).blocked.size, 0);
      assert.equal(
        evaluateGuards(input({ guards: { ...guards, minZoneSize: 2 }, nodes: three })).blocked.size,
        2,
        "size == minZoneSize is guarded",
      );
    });

    test("nodes without the zone label belong to no zone", () => {
      const nodes = [n("x-1", true), n("x-2", true), n("y-1", false)];
      assert.equal(evaluateGuards(input({ guards, nodes })).blocked.size, 0);
    });

    test("an empty label value is a zone of its own", () => {
      const nodes = [n("x-1", true, ""), n("x-2", true, ""), n("y-1", false, "b")];
      assert.equal(evaluateGuards(input({ guards, nodes })).blocked.size, 2);
    });

    test("zoneTopologyKey selects the label; empty disables the guard", () => {
      const nodes = [
        n("r-1", true, undefined, { rack: "r1" }),
        n("r-2", true, undefined, { rack: "r1" }),
        n("s-1", false, undefined, { rack: "r2" }),
      ];
      assert.equal(evaluateGuards(input({ guards, nodes })).blocked.size, 0, "default key is the zone label");
      const v = evaluateGuards(input({ guards: { ...guards, zoneTopologyKey: "rack" }, nodes }));
      assert.deepEqual([...v.blocked.keys()].sort(), ["r-1", "r-2"]);
      assert.match(v.blocked.get("r-1")?.message ?? "", /rack=r1/);
      const zoned = [...fleet(2, 2, "a", "zone-a"), ...fleet(2, 0, "b", "zone-b")];
      assert.equal(evaluateGuards(input({ guards: { ...guards, zoneTopologyKey: "" }, nodes: zoned })).blocked.size, 0);
    });

    test("several partitioned zones are each blocked with their own message", () => {
      const nodes = [...fleet(2, 2, "a", "zone-a"), ...fleet(2, 2, "b", "zone-b"), ...fleet(4, 0, "c", "zone-c")];
      const v = evaluateGuards(input({ guards, nodes }));
      assert.equal(v.blocked.size, 4);
      assert.match(v.blocked.get("a-2")?.message ?? "", /zone-a/);
      assert.match(v.blocked.get("b-1")?.message ?? "", /zone-b/);
    });
  });
});
