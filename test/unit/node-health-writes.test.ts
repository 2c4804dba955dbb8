// The fleet decision's writes: a fence that is due is created before the NodeDown conditions of the same pass
// are written, and those are written a few at a time in the background, so that many nodes failing at once
// (thousands of pod conditions) never hold a fence back, not even one that falls due while they are written. Nor
// do the creates hold the pass; while under way, and until the cache shows them, they count as fences.
import { podsByNode } from "../../src/decide/fleet.ts";
import { test } from "node:test";
import assert from "node:assert/strict";
import type { V1Pod } from "@kubernetes/client-node";
import { NodeHealthController } from "../../src/controllers/node-health.ts";
import { assessNode } from "../../src/decide/node-health.ts";
import { at, lease, node, policy, stsPod } from "./decide-fixtures.ts";

type CachedFence = { metadata: { name: string; uid?: string }; spec: { nodeName: string; policy?: string }; status: { phase: string } };

/** node-1 (40 guarded pods) and, with `nodes: 2`, node-2 (one) and three healthy nodes; node-N are silent long enough to be fenced. */
function setup(o: { nodes?: number; holdCreates?: boolean; leading?: () => boolean } = {}) {
  const now = at(100);
  const names = Array.from({ length: o.nodes ?? 1 }, (_, i) => `node-${i + 1}`);
  const ns = new Map(names.map((n) => [n, node(n, { ready: "Unknown", heartbeat: at(0) })]));
  const ls = new Map(names.map((n) => [n, lease(n, at(0), 40)]));
  // Healthy nodes, so that two silent ones are not a storm (maxUnhealthyNodes 50%).
  for (const n of names.length > 1 ? ["ok-1", "ok-2", "ok-3"] : []) {
    ns.set(n, node(n, { heartbeat: now }));
    ls.set(n, lease(n, now, 40));
  }
  const fences = new Map<string, CachedFence>();
  const pods = new Map<string, V1Pod>(Array.from({ length: 40 }, (_, i) => [`db-${i}`, stsPod(`db-${i}`, { node: "node-1" })]));
  if (names.includes("node-2")) pods.set("web-0", stsPod("web-0", { node: "node-2" }));
  const inf = <T>(m: Map<string, T>) => ({ list: () => [...m.values()], get: (name: string) => m.get(name), on() {} });
  const caches = {
    nodes: inf(ns),
    leases: inf(ls),
    pods: inf(pods),
    pvcs: inf(new Map()),
    pvcsByKey: () => new Map(),
    get podsByNode() {
      return podsByNode(this.pods.list());
    },
    // This process saw no Lease go unrenewed for long: only Ready=Unknown makes a node partitioned.
    leaseSilentForMs: () => Infinity, // no Lease observation: only the node controller's Ready=Unknown counts
    goneNodes: () => [], // no pods bound to a Node that is gone
    leaseOf(n: string) {
      return this.leases.get(n);
    },
    pdbs: inf(new Map()),
    policies: inf(new Map([["default", policy("default")]])),
    agents: inf(new Map([["ipmi", {}]])),
    fences: inf(fences),
    heartbeatStalenessSeconds: () => 0,
  };
  const w = { order: [] as string[], inFlight: 0, peak: 0, open: () => {}, creates: 0, release: () => {} };
  const fresh = { healthy: false };
  let gate = new Promise<void>((r) => (w.open = r));
  const created = new Promise<void>((r) => (w.release = r));
  /** What the apiserver holds; the cache sees a fence only when the test says so (its watch event). */
  const server = new Map<string, CachedFence>();
  const kube = {
    // What the apiserver says right before a create: as the cache, unless a test makes every node heartbeat again.
    freshHealth: async (name: string) => {
      const n = fresh.healthy ? node(name, { heartbeat: now }) : ns.get(name)!;
      return { node: n, health: assessNode(n, fresh.healthy ? lease(name, now, 40) : ls.get(name), now, 40) };
    },
    createNodeFence: async (body: { metadata: { name: string }; spec: { nodeName: string; policy?: string } }) => {
      w.order.push(`fence ${body.metadata.name}`);
      w.creates++;
      if (o.holdCreates) await created;
      const f = {
        ...body,
        metadata: { ...body.metadata, uid: `uid-${body.metadata.name}` },
        spec: body.spec,
        status: { phase: "Pending" },
      };
      server.set(f.metadata.name, f);
      return f;
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
    leadership: {
      assertLeading(action: string) {
        if (o.leading && !o.leading()) throw new Error(`not leading: refusing to ${action}`);
      },
    } as never,
  } as never);
  const reopen = () => (gate = new Promise<void>((r) => (w.open = r)));
  /** The watch event of a created fence reaches the cache. */
  const echo = (name: string) => fences.set(name, server.get(name)!);
  const verdict = (name: string) => ctl.decide().decisions.find((d) => d.node === name)?.verdict;
  return { ctl, w, reopen, fences, echo, verdict, fresh, ns, ls, now };
}

test("a due fence is created before the pass's NodeDown writes, which do not hold the pass and yield while it is under way", async () => {
  const { ctl, w, fences, echo } = setup();
  await ctl.reconcile(); // returns while every NodeDown write is still blocked
  await ctl.fenceCreatesSettled();
  await new Promise((r) => setTimeout(r, 50));
  assert.equal(w.order[0], "fence node-1", `first write: ${w.order[0]}`);
  assert.equal(w.inFlight, 2, "2 NodeDown writes at a time while the fence just created is under way (not in the cache yet)");
  assert.equal(ctl.nodeDownBacklog(), 40);
  echo("node-1");
  fences.get("node-1")!.status.phase = "Released";
  await new Promise((r) => setTimeout(r, 400)); // the held-back slots look again
  assert.equal(w.inFlight, 8, "8 at a time once it is released");
  w.open();
  await ctl.nodeDownSettled();
  assert.equal(w.order.filter((o) => o.startsWith("NodeDown")).length, 40);
  assert.equal(w.peak, 8);
  assert.equal(ctl.nodeDownBacklog(), 0);
});

test("a pass does not wait for its NodeFence creates, and counts them as fences until the cache shows them: no second create, no slot given away", async () => {
  const { ctl, w, fences, echo, verdict } = setup({ nodes: 2, holdCreates: true });
  w.open();
  await ctl.reconcile(); // maxConcurrentFences 1: one of the two is created, the other queued
  await new Promise((r) => setImmediate(r));
  assert.equal(w.creates, 1, "the create is under way when the pass returns");
  const first = w.order.find((o) => o.startsWith("fence "))!.slice("fence ".length);
  const other = first === "node-1" ? "node-2" : "node-1";
  await ctl.reconcile(); // the create still hangs
  await new Promise((r) => setImmediate(r));
  assert.equal(w.creates, 1, "not created twice while under way");
  assert.equal(verdict(first), "HasFence");
  assert.equal(verdict(other), "Queued", "its slot is not given to the other node while the create is under way");
  w.release();
  await ctl.fenceCreatesSettled();
  await ctl.reconcile(); // created, but its watch event has not reached the cache
  assert.equal(w.creates, 1, "not created again before the cache shows it");
  assert.equal(verdict(other), "Queued", "nor its slot given away");
  echo(first);
  await ctl.reconcile(); // the cache's own fence now (Pending): still the one slot
  assert.equal(w.creates, 1);
  assert.equal(verdict(first), "HasFence");
  assert.equal(verdict(other), "Queued");
  fences.get(first)!.status.phase = "Released";
  await ctl.reconcile();
  await ctl.fenceCreatesSettled();
  assert.equal(w.creates, 2, "the slot is free once the first is released");
  assert.equal(w.order.filter((o) => o.startsWith("fence ")).at(-1), `fence ${other}`);
  await ctl.nodeDownSettled();
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
  const { ctl, w, fences, echo } = setup();
  const fence = { metadata: { name: "node-9" }, spec: { nodeName: "node-9" }, status: { phase: "Fencing" } };
  fences.set("node-9", fence);
  await ctl.reconcile();
  await ctl.fenceCreatesSettled();
  echo("node-1");
  fences.get("node-1")!.status.phase = "Released";
  await new Promise((r) => setTimeout(r, 50));
  assert.equal(w.inFlight, 2, "2 in flight while node-9 is fenced");
  fence.status.phase = "Released";
  await new Promise((r) => setTimeout(r, 400)); // the held-back slots look again
  assert.equal(w.inFlight, 8, "back to 8 once no fence is under way");
  w.open();
  await ctl.nodeDownSettled();
  assert.equal(w.order.filter((o) => o.startsWith("NodeDown")).length, 40, "every write made");
});

test("a NodeFence create that starts after this replica stopped leading is not made", async () => {
  let leading = true;
  const { ctl, w } = setup({ leading: () => leading });
  w.open();
  const pass = ctl.reconcile();
  leading = false; // lost between the decision and the create (which waits for two fresh reads first)
  await pass;
  await ctl.fenceCreatesSettled();
  assert.equal(w.creates, 0);
  await ctl.nodeDownSettled();
});

test("a NodeFence create whose fresh read finds the node healthy is not made, and the next pass decides again", async () => {
  const { ctl, w, fresh, verdict } = setup();
  fresh.healthy = true; // the cache still shows it silent; the apiserver says it is back
  w.open();
  await ctl.reconcile();
  await ctl.fenceCreatesSettled();
  assert.equal(w.creates, 0, "no create on the cache's word alone");
  assert.equal(verdict("node-1"), "Fence", "not held as a fence: the next pass decides again from the cache");
  await ctl.nodeDownSettled();
});

test("queued NodeDown writes are held one entry per node, not per pod: a storm-guard hold over many pods keeps a bounded queue", async () => {
  // Three of four nodes silent (maxUnhealthyNodes 50%: the storm guard holds), 30 pods each, no write ever answered.
  const now = at(100);
  const names = ["node-1", "node-2", "node-3"];
  const ns = new Map(names.map((n) => [n, node(n, { ready: "Unknown", heartbeat: at(0) })]));
  const ls = new Map(names.map((n) => [n, lease(n, at(0), 40)]));
  ns.set("ok-1", node("ok-1", { heartbeat: now }));
  ls.set("ok-1", lease("ok-1", now, 40));
  const pods = names.flatMap((n) => Array.from({ length: 30 }, (_, i) => stsPod(`${n}-db-${i}`, { node: n })));
  const inf = <T>(m: Map<string, T>) => ({ list: () => [...m.values()], get: (name: string) => m.get(name), on() {} });
  const byNode = podsByNode(pods);
  const caches = {
    nodes: inf(ns),
    leases: inf(ls),
    pvcsByKey: () => new Map(),
    podsByNode: byNode,
    leaseSilentForMs: () => Infinity, // no Lease observation: only the node controller's Ready=Unknown counts
    goneNodes: () => [], // no pods bound to a Node that is gone
    leaseOf: (n: string) => ls.get(n),
    pdbs: inf(new Map()),
    policies: inf(new Map([["default", policy("default")]])),
    agents: inf(new Map([["ipmi", {}]])),
    fences: inf(new Map()),
    heartbeatStalenessSeconds: () => 0,
  };
  let writes = 0;
  const kube = { setPodCondition: () => (writes++, new Promise(() => {})), replaceStatus: () => new Promise(() => {}) };
  const silent = { info() {}, warn() {}, error() {}, debug() {} };
  const ctl = new NodeHealthController({ caches, kube, events: { record: async () => {} }, log: silent, clock: () => now } as never);
  for (let k = 0; k < 3; k++) await ctl.reconcile();
  await new Promise((r) => setTimeout(r, 20));
  const d = ctl.decide();
  assert.equal(d.decisions.filter((x) => x.verdict === "Held").length, 3, "the storm guard holds the three");
  assert.deepEqual(
    d.nodeDown.map((c) => c.node),
    names,
    "a pass lists one change per node, not 90",
  );
  assert.equal(writes, 8, "8 writes under way (none answered)");
  assert.equal(ctl.nodeDownBacklog(), 90, "every pod of the three nodes still to be written");
  const held = ctl.nodeDownHeld();
  assert.equal(held.nodes, 2, "the two nodes not reached yet: one entry each");
  assert.ok(held.pods <= 8 + 30, `pods held: the 8 under way and one node's list (${held.pods})`);
});

test("a node that heartbeats again before its queued NodeDown writes are made gets none (the latest pass wins)", async () => {
  const { ctl, w, ns, ls, now } = setup({ nodes: 2 });
  await ctl.reconcile(); // node-1's 40 pods first (2 at a time while its fence is created), node-2's web-0 queued
  await ctl.fenceCreatesSettled();
  await new Promise((r) => setTimeout(r, 20));
  assert.ok(!w.order.includes("NodeDown web-0"), "not reached yet");
  ns.set("node-2", node("node-2", { heartbeat: now }));
  ls.set("node-2", lease("node-2", now, 40));
  await ctl.reconcile(); // node-2 is healthy: nothing to change on its pods
  w.open();
  await ctl.nodeDownSettled();
  assert.equal(w.order.filter((o) => o.startsWith("NodeDown db-")).length, 40, "node-1's pods all written");
  assert.ok(!w.order.includes("NodeDown web-0"), "no NodeDown written on the pod of a node heartbeating again");
});

test("nodes a pass queues while a drain's last write hangs are written 8 at a time, not behind that write", async () => {
  // Five nodes, three silent (the storm guard holds: no fence is created, so 8 write slots): a has one pod, b and c none.
  const now = at(100);
  const silentNode = (n: string) => node(n, { ready: "Unknown", heartbeat: at(0) });
  const ns = new Map(["a", "b", "c"].map((n) => [n, silentNode(n)]));
  const ls = new Map(["a", "b", "c"].map((n) => [n, lease(n, at(0), 40)]));
  for (const n of ["d", "e"]) {
    ns.set(n, node(n, { heartbeat: now }));
    ls.set(n, lease(n, now, 40));
  }
  const pods = [stsPod("a-0", { node: "a" }), ...Array.from({ length: 20 }, (_, i) => stsPod(`d-${i}`, { node: "d" }))];
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
  let inFlight = 0;
  const kube = { setPodCondition: () => (inFlight++, new Promise(() => {})), replaceStatus: () => new Promise(() => {}) };
  const silent = { info() {}, warn() {}, error() {}, debug() {} };
  const ctl = new NodeHealthController({ caches, kube, events: { record: async () => {} }, log: silent, clock: () => now } as never);
  await ctl.reconcile();
  await new Promise((r) => setTimeout(r, 20));
  assert.equal(inFlight, 1, "a-0's write hangs");
  ns.set("d", silentNode("d")); // d goes silent too, with 20 pods
  ls.set("d", lease("d", at(0), 40));
  await ctl.reconcile();
  await new Promise((r) => setTimeout(r, 400)); // the idle slots look again
  assert.equal(ctl.decide().decisions.find((x) => x.node === "d")?.verdict, "Held");
  assert.equal(inFlight, 8, "a-0's and 7 of d's");
});
