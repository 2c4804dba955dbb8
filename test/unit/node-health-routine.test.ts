// The fleet decision's fast paths: a routine Lease renewal or Node status write of a healthy node skips the fleet
// decision, anything that could change a decision does not; nor does a NodeFence status write it does not read.
import { podsByNode } from "../../src/decide/fleet.ts";
import { test } from "node:test";
import assert from "node:assert/strict";
import type { V1Lease, V1Node } from "@kubernetes/client-node";
import type { DateTime } from "luxon";
import { NodeHealthController, fleetReadsChange } from "../../src/controllers/node-health.ts";
import { at, lease, node, policy, stsPod } from "./decide-fixtures.ts";

function world(observed: (node: string, l: V1Lease) => number = () => 0) {
  let now: DateTime = at(0);
  const nodes = new Map<string, V1Node>();
  const leases = new Map<string, V1Lease>();
  const inf = <T>(m: Map<string, T>) => ({ list: () => [...m.values()], get: (name: string) => m.get(name), on() {} });
  const caches = {
    nodes: inf(nodes),
    leases: inf(leases),
    pods: inf(new Map([["db-0", stsPod("db-0", { node: "node-1" })]])),
    pvcs: inf(new Map()),
    pvcsByKey: () => new Map(),
    get podsByNode() {
      return podsByNode(this.pods.list());
    },
    // By default this process saw no Lease go unrenewed for long: only Ready=Unknown makes a node partitioned.
    leaseSilentForMs: observed,
    goneNodes: () => [], // no pods bound to a Node that is gone
    leaseOf(n: string) {
      return this.leases.get(n);
    },
    pdbs: inf(new Map()),
    policies: inf(new Map([["default", policy("default")]])),
    fences: inf(new Map()),
    heartbeatStalenessSeconds: () => 0,
  };
  const silent = { info() {}, warn() {}, error() {}, debug() {} };
  const ctl = new NodeHealthController({
    caches: caches as never,
    kube: {} as never,
    events: { record: async () => {} } as never,
    log: silent as never,
    clock: () => now,
    leadership: { assertLeading() {} } as never,
  } as never);
  /** node-1 last renewed at `beat` (seconds after T0), Ready as given; 40 s Leases (two renewals: 20 s). */
  const set = (beat: number, ready: "True" | "False" | "Unknown" = "True", holder = "node-1") => {
    nodes.set("node-1", node("node-1", { ready, heartbeat: at(beat) }));
    const l = lease("node-1", at(beat), 40);
    l.spec!.holderIdentity = holder;
    leases.set("node-1", l);
    return l;
  };
  return { ctl, set, nodes, leases, tick: (s: number) => (now = at(s)) };
}

test("a renewal of a node the last decision found healthy, before it could lag, skips the fleet decision", async () => {
  const w = world();
  w.set(0);
  await w.ctl.reconcile();
  w.tick(10);
  assert.equal(w.ctl.isRoutineRenewal(w.set(10)), true);
  w.tick(19);
  assert.equal(w.ctl.isRoutineRenewal(w.set(19)), true, "still within two renewals of what the decision saw");
});

test("anything that may change a decision runs it: a renewal after a lag, a new holder or duration, a node not Ready or never decided", async () => {
  const w = world();
  assert.equal(w.ctl.isRoutineRenewal(w.set(0)), false, "no decision yet");
  await w.ctl.reconcile();
  w.tick(21);
  assert.equal(
    w.ctl.isRoutineRenewal(w.set(21)),
    false,
    "the node lagged (two renewals missed) before this one: the storm guard counted it",
  );
  w.tick(5);
  assert.equal(w.ctl.isRoutineRenewal(w.set(5, "True", "node-1-restarted")), false, "a new holder");
  const longer = w.set(5);
  longer.spec!.leaseDurationSeconds = 80;
  assert.equal(w.ctl.isRoutineRenewal(longer), false, "a new duration");
  w.tick(50);
  w.set(0, "Unknown");
  await w.ctl.reconcile(); // partitioned now
  w.tick(51);
  assert.equal(w.ctl.isRoutineRenewal(w.set(51, "Unknown")), false, "a node back from a partition");
});

test("a node the last decision found routine but the next did not (Ready=False) is not routine, even before it could lag", async () => {
  const w = world();
  w.set(0);
  await w.ctl.reconcile();
  w.tick(5);
  w.set(5, "False");
  await w.ctl.reconcile(); // Suspect now: its entry of the first pass must not count
  w.tick(6);
  assert.equal(w.ctl.isRoutineRenewal(w.set(6, "False")), false);
  const n = w.nodes.get("node-1")!;
  assert.equal(w.ctl.isRoutineNodeUpdate(n, structuredClone(n)), false);
});

test("a healthy node's routine status write (heartbeat times only) skips the fleet decision; any other change runs it", async () => {
  const w = world();
  w.set(0);
  const before = structuredClone(w.nodes.get("node-1")!);
  const beat = (s: number, change: (n: V1Node) => void = () => {}) => {
    const n = structuredClone(before);
    n.metadata!.resourceVersion = String(100 + s);
    n.status!.conditions![0]!.lastHeartbeatTime = at(s).toJSDate();
    change(n);
    return n;
  };
  assert.equal(w.ctl.isRoutineNodeUpdate(beat(10), before), false, "no decision yet");
  await w.ctl.reconcile();
  w.tick(10);
  assert.equal(w.ctl.isRoutineNodeUpdate(beat(10), before), true);
  assert.equal(w.ctl.isRoutineNodeUpdate(beat(10)), false, "a new node (no old object)");
  const changes: [string, (n: V1Node) => void][] = [
    ["Ready turned Unknown", (n) => (n.status!.conditions![0]!.status = "Unknown")],
    ["another reason", (n) => (n.status!.conditions![0]!.reason = "KubeletNotReady")],
    ["a new condition", (n) => n.status!.conditions!.push({ type: "DiskPressure", status: "True" })],
    ["a taint", (n) => (n.spec!.taints = [{ key: "node.kubernetes.io/unreachable", effect: "NoExecute" }])],
    ["a label (policies select by them)", (n) => (n.metadata!.labels = { "topology.kubernetes.io/zone": "b" })],
    ["an annotation", (n) => (n.metadata!.annotations = { "stockade.io/x": "y" })],
    ["a new boot ID", (n) => (n.status!.nodeInfo!.bootID = "boot-2")],
    ["being deleted", (n) => (n.metadata!.deletionTimestamp = at(10).toJSDate())],
  ];
  for (const [what, change] of changes) assert.equal(w.ctl.isRoutineNodeUpdate(beat(10, change), before), false, what);
  w.tick(21);
  assert.equal(w.ctl.isRoutineNodeUpdate(beat(21), before), false, "after the node could have lagged");
});

test("a NodeFence event runs the fleet decision only when it is new, gone, or changes what the decision reads", () => {
  const f = (rv: string, status: Record<string, unknown>, extra: Record<string, unknown> = {}) =>
    ({ metadata: { name: "node-1", resourceVersion: rv, ...extra }, spec: { nodeName: "node-1" }, status }) as never;
  const fencing = f("1", { phase: "Fencing", policy: "default", conditions: [{ type: "Fenced", reason: "Fencing" }] });
  assert.equal(fleetReadsChange(fencing), true, "added or deleted");
  assert.equal(
    fleetReadsChange(f("2", { phase: "Fencing", policy: "default", conditions: [{ type: "Fenced", reason: "AgentRunning" }] }), fencing),
    false,
    "a condition or an attempt written: the decision reads neither",
  );
  assert.equal(fleetReadsChange(f("2", { phase: "Fenced", policy: "default" }), fencing), true, "a new phase");
  assert.equal(fleetReadsChange(f("2", { phase: "Fencing", policy: "other" }), fencing), true, "another policy");
  assert.equal(
    fleetReadsChange(f("2", { phase: "Fencing", policy: "default" }, { deletionTimestamp: "2026-11-26T00:00:00Z" }), fencing),
    true,
    "being deleted",
  );
});

test("what the log last said of each node is forgotten once the node is deleted (the map grew with every node ever seen)", async () => {
  const w = world();
  w.set(0);
  const remembered = () => [...(w.ctl as unknown as { lastVerdict: Map<string, unknown> }).lastVerdict.keys()].sort();
  for (let i = 2; i <= 50; i++) {
    w.nodes.set(`node-${i}`, node(`node-${i}`, { ready: "True", heartbeat: at(0) }));
    w.leases.set(`node-${i}`, lease(`node-${i}`, at(0), 40));
  }
  await w.ctl.reconcile();
  assert.equal(remembered().length, 50);
  for (let i = 2; i <= 50; i++) {
    w.nodes.delete(`node-${i}`);
    w.leases.delete(`node-${i}`);
  }
  w.tick(1);
  await w.ctl.reconcile();
  assert.deepEqual(remembered(), ["node-1"]);
});

test("issue 31: the fleet pass measures a silent node's Lease by what the caches observed, not by renewTime's value", () => {
  const asked: string[] = [];
  const justRenewed = world((n) => (asked.push(n), 0));
  justRenewed.set(0);
  justRenewed.tick(45);
  const h = justRenewed.ctl.decide().decisions.find((d) => d.node === "node-1")!.health;
  assert.deepEqual(asked, ["node-1"], "the caches' observer is asked for the node's Lease");
  assert.equal(h.silent, true, "its renewTime is 45 s old on the wall clock");
  assert.equal(h.state, "Suspect", "but the operator has just seen it renewed: not partitioned");
  const unrenewed = world(() => 40_000);
  unrenewed.set(0);
  unrenewed.tick(45);
  const g = unrenewed.ctl.decide().decisions.find((d) => d.node === "node-1")!.health;
  assert.equal(g.state, "Partitioned");
  assert.equal(g.partitionedBy, "Lease", "seen unrenewed for its 40 s");
});
