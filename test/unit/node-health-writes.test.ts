// The fleet decision's writes: a fence that is due is created before the NodeDown conditions of the same pass
// are written, and those are written a few at a time in the background, so that many nodes failing at once
// (thousands of pod conditions) never hold a fence back, not even one that falls due while they are written.
import { test } from "node:test";
import assert from "node:assert/strict";
import type { V1Pod } from "@kubernetes/client-node";
import { NodeHealthController } from "../../src/controllers/node-health.ts";
import { assessNode } from "../../src/decide/node-health.ts";
import { at, lease, node, policy, stsPod } from "./decide-fixtures.ts";

function setup() {
  const now = at(100);
  const n1 = node("node-1", { ready: "Unknown", heartbeat: at(0) });
  const l1 = lease("node-1", at(0), 40);
  const fences = new Map<string, { metadata: { name: string }; spec: { nodeName: string }; status: { phase: string } }>();
  const pods = new Map<string, V1Pod>(Array.from({ length: 40 }, (_, i) => [`db-${i}`, stsPod(`db-${i}`, { node: "node-1" })]));
  const inf = <T>(m: Map<string, T>) => ({ list: () => [...m.values()], get: (name: string) => m.get(name), on() {} });
  const caches = {
    nodes: inf(new Map([["node-1", n1]])),
    leases: inf(new Map([["node-1", l1]])),
    pods: inf(pods),
    pvcs: inf(new Map()),
    pvcsByKey: () => new Map(),
    pdbs: inf(new Map()),
    policies: inf(new Map([["default", policy("default")]])),
    agents: inf(new Map([["ipmi", {}]])),
    fences: inf(fences),
    heartbeatStalenessSeconds: () => 0,
  };
  const w = { order: [] as string[], inFlight: 0, peak: 0, open: () => {} };
  let gate = new Promise<void>((r) => (w.open = r));
  const kube = {
    freshHealth: async () => ({ node: n1, health: assessNode(n1, l1, now, 40) }),
    createNodeFence: async (body: { metadata: { name: string } }) => {
      w.order.push(`fence ${body.metadata.name}`);
      return body;
    },
    setPodCondition: async (_ns: string, name: string) => {
      w.order.push(`NodeDown ${name}`);
      w.peak = Math.max(w.peak, ++w.inFlight);
      await gate;
      w.inFlight--;
    },
    updateFencingPolicyStatus: async () => undefined,
    patchFencingPolicyStatus: async () => undefined,
  };
  const silent = { info() {}, warn() {}, error() {}, debug() {} };
  const ctl = new NodeHealthController({
    caches: caches as never,
    kube: kube as never,
    events: { record: async () => {} } as never,
    log: silent as never,
    clock: () => now,
    leadership: { assertLeading() {} } as never,
  } as never);
  const reopen = () => (gate = new Promise<void>((r) => (w.open = r)));
  return { ctl, w, reopen, fences };
}

test("a due fence is created before the pass's NodeDown writes, which run 8 at a time and do not hold the pass", async () => {
  const { ctl, w } = setup();
  await ctl.reconcile(); // returns while every NodeDown write is still blocked
  assert.equal(w.order[0], "fence node-1", `first write: ${w.order[0]}`);
  assert.equal(w.inFlight, 8, "NodeDown writes a few at a time");
  assert.equal(ctl.nodeDownBacklog(), 40);
  w.open();
  await ctl.nodeDownSettled();
  assert.equal(w.order.filter((o) => o.startsWith("NodeDown")).length, 40);
  assert.equal(w.peak, 8);
  assert.equal(ctl.nodeDownBacklog(), 0);
});

test("a pass while NodeDown writes are under way, or right after them (the cache not updated yet), writes none twice", async () => {
  const { ctl, w, reopen } = setup();
  await ctl.reconcile();
  await ctl.reconcile(); // the same 40 changes: 8 under way, 32 queued
  await ctl.reconcile();
  w.open();
  await ctl.nodeDownSettled();
  assert.equal(w.order.filter((o) => o.startsWith("NodeDown")).length, 40, "each pod written once");
  reopen();
  w.open();
  await ctl.reconcile(); // the cache still shows no NodeDown: the writes just made are not repeated
  await ctl.nodeDownSettled();
  assert.equal(w.order.filter((o) => o.startsWith("NodeDown")).length, 40, "no write repeated");
});

test("while a NodeFence is under way, NodeDown writes yield to it: 2 at a time, 8 again once it is released", async () => {
  const { ctl, w, fences } = setup();
  const fence = { metadata: { name: "node-9" }, spec: { nodeName: "node-9" }, status: { phase: "Fencing" } };
  fences.set("node-9", fence);
  await ctl.reconcile();
  await new Promise((r) => setTimeout(r, 50));
  assert.equal(w.inFlight, 2, "2 in flight while node-9 is fenced");
  fence.status.phase = "Released";
  await new Promise((r) => setTimeout(r, 400)); // the held-back slots look again
  assert.equal(w.inFlight, 8, "back to 8 once no fence is under way");
  w.open();
  await ctl.nodeDownSettled();
  assert.equal(w.order.filter((o) => o.startsWith("NodeDown")).length, 40, "every write made");
});
