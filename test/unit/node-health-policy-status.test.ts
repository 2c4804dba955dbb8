// FencingPolicy status is written in the background: a pass creates its due NodeFences and returns without waiting
// for the status write, and back-to-back writes start from what the last one returned while the cache has not seen
// it (writing from the cache's older version was a 409 on every pass of a burst).
import { podsByNode } from "../../src/decide/fleet.ts";
import { test } from "node:test";
import assert from "node:assert/strict";
import type { FencingPolicy, NodeFence } from "../../src/api/v1alpha1.ts";
import { NodeHealthController } from "../../src/controllers/node-health.ts";
import { assessNode } from "../../src/decide/node-health.ts";
import { at, fence, lease, node, policy, stsPod } from "./decide-fixtures.ts";

function setup() {
  const now = at(100);
  const n1 = node("node-1", { ready: "Unknown", heartbeat: at(0) });
  const l1 = lease("node-1", at(0), 40);
  const pol = { ...policy("default"), metadata: { name: "default", generation: 1, resourceVersion: "1" } } as FencingPolicy;
  const policies = new Map([["default", pol]]);
  const fences = new Map<string, NodeFence>();
  const inf = <T>(m: Map<string, T>) => ({ list: () => [...m.values()], get: (name: string) => m.get(name), on() {} });
  const caches = {
    nodes: inf(new Map([["node-1", n1]])),
    leases: inf(new Map([["node-1", l1]])),
    pods: inf(new Map([["db-0", stsPod("db-0", { node: "node-1" })]])),
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
    policies: inf(policies),
    agents: inf(new Map([["ipmi", {}]])),
    fences: inf(fences),
    heartbeatStalenessSeconds: () => 0,
  };
  const w = { order: [] as string[], written: [] as FencingPolicy[], open: () => {}, rv: 1 };
  const gate = new Promise<void>((r) => (w.open = r));
  const kube = {
    freshHealth: async () => ({ node: n1, health: assessNode(n1, l1, now, 40) }),
    createNodeFence: async (body: NodeFence) => {
      w.order.push(`fence ${body.metadata?.name}`);
      return body;
    },
    setPodCondition: async () => undefined,
    replaceStatus: async (_plural: string, p: FencingPolicy) => {
      w.order.push("policy status");
      await gate;
      // The apiserver's optimistic concurrency: a write from a version that is not the latest is refused.
      if (p.metadata?.resourceVersion !== String(w.rv))
        throw new Error(`409 Conflict: from ${p.metadata?.resourceVersion}, latest ${w.rv}`);
      w.written.push(p);
      return { ...p, metadata: { ...p.metadata, resourceVersion: String(++w.rv) } };
    },
  };
  const warnings: string[] = [];
  const log = { info() {}, warn: (_o: unknown, m: string) => m.startsWith("writing") && warnings.push(m), error() {}, debug() {} };
  const ctl = new NodeHealthController({
    caches: caches as never,
    kube: kube as never,
    events: { record: async () => {} } as never,
    log: log as never,
    clock: () => now,
  });
  return { ctl, w, fences, policies, warnings };
}

test("a pass creates its due NodeFence and returns while the policy's status write is still under way", async () => {
  const { ctl, w } = setup();
  await ctl.reconcile();
  await ctl.fenceCreatesSettled();
  assert.deepEqual(
    w.order.sort(),
    ["fence node-1", "policy status"],
    "the fence created, and the status write, which the pass did not wait for",
  );
  assert.equal(w.written.length, 0, "the status write is still blocked");
  w.open();
  await ctl.policyStatusSettled();
  assert.equal(w.written.length, 1);
  assert.deepEqual(w.written[0]!.status?.partitionedNodes, ["node-1"]);
});

test("back-to-back status writes start from the last write's result while the cache still shows the version it replaced", async () => {
  const { ctl, w, fences, policies, warnings } = setup();
  w.open();
  await ctl.reconcile();
  await ctl.policyStatusSettled();
  assert.equal(w.written.length, 1);
  // The fence now exists (its status changes activeFences); the cache's policy is still resourceVersion 1.
  fences.set("node-1", fence("node-1", { phase: "Fencing", policy: "default" }, { policy: "default" }));
  await ctl.reconcile();
  await ctl.policyStatusSettled();
  assert.deepEqual(warnings, [], "no 409");
  assert.equal(w.written.length, 2);
  assert.equal(w.written[1]!.metadata?.resourceVersion, "2", "written from what the first write returned");
  assert.equal(w.written[1]!.status?.activeFences, 1);

  // Someone else writes the policy (a spec change, resourceVersion 4): the cache's version is used again.
  w.rv = 4;
  policies.set("default", { ...policies.get("default")!, metadata: { name: "default", generation: 2, resourceVersion: "4" } });
  await ctl.reconcile();
  await ctl.policyStatusSettled();
  assert.deepEqual(warnings, []);
  assert.equal(w.written.length, 3);
  assert.equal(w.written[2]!.metadata?.resourceVersion, "4");
  assert.equal(w.written[2]!.status?.observedGeneration, 2);
});
