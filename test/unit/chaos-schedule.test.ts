import { test } from "node:test";
import assert from "node:assert/strict";
import {
  drawSchedule,
  FAULT_KINDS,
  NODE_LOSS,
  OUTAGE_KINDS,
  OUTAGES_FAULT_KINDS,
  prng,
  WATCHDOG_FAULT_KINDS,
} from "../../lab/chaos/schedule.ts";

const nodes = ["node-1", "node-2", "node-3", "node-4"];

test("a seed always draws the same schedule, another seed another one", () => {
  assert.deepEqual(drawSchedule(7, 3, { nodes }), drawSchedule(7, 3, { nodes }));
  const all = new Set(Array.from({ length: 20 }, (_, i) => JSON.stringify(drawSchedule(7, i, { nodes }).faults)));
  assert.ok(all.size > 15, `20 schedules of one seed differ (${all.size} distinct)`);
});

test("the prng is uniform enough to reach every fault kind", () => {
  const r = prng(1);
  const xs = Array.from({ length: 10_000 }, r);
  assert.ok(xs.every((x) => x >= 0 && x < 1));
  const mean = xs.reduce((a, b) => a + b) / xs.length;
  assert.ok(Math.abs(mean - 0.5) < 0.02, `mean ${mean}`);
  const seen = new Set<string>();
  for (let i = 0; i < 300; i++) for (const f of drawSchedule(42, i, { nodes }).faults) seen.add(f.kind);
  assert.deepEqual([...seen].sort(), [...FAULT_KINDS].sort());
});

test("at most one node is taken from the control plane per schedule; node faults name real nodes", () => {
  for (let i = 0; i < 500; i++) {
    const s = drawSchedule(99, i, { nodes, maxFaults: 4 });
    const lost = s.faults.filter((f) => NODE_LOSS.has(f.kind));
    assert.ok(lost.length <= 1, `schedule ${i}: ${JSON.stringify(s.faults)}`);
    for (const f of s.faults) {
      if (f.node) assert.ok(nodes.includes(f.node));
      if (f.peer) assert.ok(nodes.includes(f.peer) && f.peer !== f.node);
      if (f.kind === "short-partition") assert.ok(f.durationMs <= 4_000 && f.node !== lost[0]?.node);
    }
    assert.ok(
      s.faults.every((f, k) => k === 0 || s.faults[k - 1]!.at <= f.at),
      "sorted by start",
    );
  }
});

test("fewer than 3 nodes is refused", () => {
  assert.throws(() => drawSchedule(1, 0, { nodes: ["a", "b"] }), /at least 3 nodes/);
});

test("the normal mode draws exactly the schedules it drew before the watchdog mode existed (seeds 1, 2026, 99; 200 each)", async () => {
  const { createHash } = await import("node:crypto");
  const draw = (mode?: "normal") =>
    [1, 2026, 99].flatMap((seed) => Array.from({ length: 200 }, (_, i) => drawSchedule(seed, i, { nodes, ...(mode ? { mode } : {}) })));
  // sha256 of the JSON of these 600 schedules as drawn by lab/chaos/schedule.ts before the watchdog mode (commit 3623995).
  const before = "4ad8af72ceea8bce7cdb73a061439cd682819c94cd9d3ea62747abeb420a4104";
  assert.equal(createHash("sha256").update(JSON.stringify(draw())).digest("hex"), before);
  assert.deepEqual(draw("normal"), draw());
  for (const s of draw()) for (const f of s.faults) assert.ok(FAULT_KINDS.includes(f.kind), `normal mode drew ${f.kind}`);
});

test("the watchdog mode: its fault kinds only (no bmc-unreachable), every agent fault reached, one node loss and one control-plane outage at most", () => {
  const seen = new Set<string>();
  for (let i = 0; i < 500; i++) {
    const s = drawSchedule(7, i, { nodes, mode: "watchdog" });
    assert.deepEqual(s, drawSchedule(7, i, { nodes, mode: "watchdog" }), "reproducible");
    const losses = s.faults.filter((f) => NODE_LOSS.has(f.kind));
    assert.ok(losses.length <= 1, `schedule ${i}: ${JSON.stringify(s.faults)}`);
    assert.ok(s.faults.filter((f) => f.kind === "control-plane-down").length <= 1, `schedule ${i}: two control-plane outages`);
    for (const f of s.faults) {
      seen.add(f.kind);
      assert.ok(WATCHDOG_FAULT_KINDS.includes(f.kind), `schedule ${i} drew ${f.kind}`);
      if (f.kind === "control-plane-down") assert.ok(f.durationMs >= 20_000 && f.durationMs <= 60_000 && !f.node, JSON.stringify(f));
      if (f.kind === "kill-agent" || f.kind === "watchdog-disabled") assert.ok(f.node && nodes.includes(f.node));
      if (f.kind === "short-partition" || f.kind === "power-cycle") assert.notEqual(f.node, losses[0]?.node, "never the lost node");
    }
  }
  assert.deepEqual([...seen].sort(), [...WATCHDOG_FAULT_KINDS].sort());
  assert.ok(!WATCHDOG_FAULT_KINDS.includes("bmc-unreachable"));
});

test("the outages mode: one 20–60 s control-plane outage in every schedule, its kinds only, every kind reached, one node loss at most", () => {
  const seen = new Set<string>();
  for (let i = 0; i < 500; i++) {
    const s = drawSchedule(2026, i, { nodes, mode: "outages" });
    assert.deepEqual(s, drawSchedule(2026, i, { nodes, mode: "outages" }), "reproducible");
    const outages = s.faults.filter((f) => OUTAGE_KINDS.includes(f.kind));
    assert.equal(outages.length, 1, `schedule ${i}: ${JSON.stringify(s.faults)}`);
    assert.ok(outages[0]!.durationMs >= 20_000 && outages[0]!.durationMs <= 60_000 && !outages[0]!.node, JSON.stringify(outages[0]));
    assert.ok(s.faults.length <= 3);
    const losses = s.faults.filter((f) => NODE_LOSS.has(f.kind));
    assert.ok(losses.length <= 1, `schedule ${i}: ${JSON.stringify(s.faults)}`);
    for (const f of s.faults) {
      seen.add(f.kind);
      assert.ok(OUTAGES_FAULT_KINDS.includes(f.kind), `schedule ${i} drew ${f.kind}`);
      if (["short-partition", "power-cycle", "node-deleted"].includes(f.kind))
        assert.notEqual(f.node, losses[0]?.node, `schedule ${i}: ${f.kind} of the lost node`);
      if (f.kind === "node-deleted") assert.ok(f.node && nodes.includes(f.node) && f.durationMs >= 2_000 && f.durationMs <= 15_000);
    }
    assert.ok(
      s.faults.every((f, k) => k === 0 || s.faults[k - 1]!.at <= f.at),
      "sorted by start",
    );
  }
  assert.deepEqual([...seen].sort(), [...OUTAGES_FAULT_KINDS].sort());
  // The watchdog mode's own faults stay out of it.
  for (const k of ["kill-agent", "watchdog-disabled", "control-plane-down"] as const) assert.ok(!OUTAGES_FAULT_KINDS.includes(k));
});
