// What the health controller retains while the storm guard holds a mass silence: bounded by the nodes, not by the
// pods on them. A hold over 3,700 of 5,000 nodes queued a NodeDown write for each of their 111,000 pods faster than
// a loaded apiserver took them, and the operator ran out of heap (docs/developer/scale.md). Here: 1,000 nodes × 60
// pods, 900 silent, the pod writes never answered; the live heap after a full collection, before the first pass and
// after five: 8.4 MiB with the per-pod queue of 235b6d1, 2.4–2.6 MiB with the per-node one (most of it the per-node
// state of any pass: memo, verdicts), measured on 2026-11-28.
import { test } from "node:test";
import assert from "node:assert/strict";
import { setFlagsFromString } from "node:v8";
import { runInNewContext } from "node:vm";
import type { V1Pod } from "@kubernetes/client-node";
import { NodeHealthController } from "../../src/controllers/node-health.ts";
import { podsByNode } from "../../src/decide/fleet.ts";
import { at, lease, node, policy, stsPod } from "./decide-fixtures.ts";

setFlagsFromString("--expose-gc");
const gc = runInNewContext("gc") as () => void;
const live = () => {
  gc();
  gc();
  return process.memoryUsage().heapUsed;
};

test("a storm-guard hold over 54,000 pods of 900 silent nodes retains less than 6 MiB (the per-pod queue: 8.4 MiB)", async () => {
  const now = at(100);
  const names = Array.from({ length: 1000 }, (_, i) => `node-${i}`);
  const ns = new Map(names.map((n, i) => [n, i < 900 ? node(n, { ready: "Unknown", heartbeat: at(0) }) : node(n, { heartbeat: now })]));
  const ls = new Map(names.map((n, i) => [n, lease(n, i < 900 ? at(0) : now, 40)]));
  const pods: V1Pod[] = [];
  for (const n of names) for (let k = 0; k < 60; k++) pods.push(stsPod(`${n}-db-${k}`, { node: n }));
  const inf = <T>(m: Map<string, T>) => ({ list: () => [...m.values()], get: (name: string) => m.get(name), on() {} });
  const caches = {
    nodes: inf(ns),
    leases: inf(ls),
    pvcsByKey: () => new Map(),
    podsByNode: podsByNode(pods),
    leaseSilentForMs: () => Infinity, // no Lease observation: only the node controller's Ready=Unknown counts
    goneNodes: () => [], // no pods bound to a Node that is gone
    leaseOf: (n: string) => ls.get(n),
    pdbs: inf(new Map()),
    policies: inf(new Map([["default", policy("default")]])),
    agents: inf(new Map([["ipmi", {}]])),
    fences: inf(new Map()),
    heartbeatStalenessSeconds: () => 0,
  };
  const kube = { setPodCondition: () => new Promise(() => {}), replaceStatus: () => new Promise(() => {}) };
  const silent = { info() {}, warn() {}, error() {}, debug() {} };
  const ctl = new NodeHealthController({ caches, kube, events: { record: async () => {} }, log: silent, clock: () => now } as never);
  const before = live();
  for (let k = 0; k < 5; k++) await ctl.reconcile();
  await new Promise((r) => setTimeout(r, 20));
  const retained = (live() - before) / 2 ** 20;
  assert.equal(ctl.decide().decisions.filter((d) => d.verdict === "Held").length, 900, "the storm guard holds the 900");
  assert.equal(ctl.nodeDownBacklog(), 54_000, "every pod of the 900 still to be written");
  assert.ok(retained < 6, `retained ${retained.toFixed(1)} MiB`);
});
