// The order of the fleet decision's writes: a fence that is due is created before the NodeDown conditions of the
// same pass are written, and those are written a few at a time, not one after another, so that many nodes failing
// at once (thousands of pod conditions) never hold a fence back.
import { test } from "node:test";
import assert from "node:assert/strict";
import type { V1Pod } from "@kubernetes/client-node";
import { NodeHealthController } from "../../src/controllers/node-health.ts";
import { assessNode } from "../../src/decide/node-health.ts";
import { at, lease, node, policy, stsPod } from "./decide-fixtures.ts";

test("a due fence is created before the pass's NodeDown writes, which run 8 at a time", async () => {
  const now = at(100);
  const n1 = node("node-1", { ready: "Unknown", heartbeat: at(0) });
  const l1 = lease("node-1", at(0), 40);
  const pods = new Map<string, V1Pod>(Array.from({ length: 40 }, (_, i) => [`db-${i}`, stsPod(`db-${i}`, { node: "node-1" })]));
  const inf = <T>(m: Map<string, T>) => ({ list: () => [...m.values()], get: (name: string) => m.get(name), on() {} });
  const caches = {
    nodes: inf(new Map([["node-1", n1]])),
    leases: inf(new Map([["node-1", l1]])),
    pods: inf(pods),
    pvcs: inf(new Map()),
    pdbs: inf(new Map()),
    policies: inf(new Map([["default", policy("default")]])),
    agents: inf(new Map([["ipmi", {}]])),
    fences: inf(new Map()),
    heartbeatStalenessSeconds: () => 0,
  };
  const order: string[] = [];
  let inFlight = 0;
  let peak = 0;
  let open!: () => void;
  const gate = new Promise<void>((r) => (open = r));
  const kube = {
    freshHealth: async () => ({ node: n1, health: assessNode(n1, l1, now, 40) }),
    createNodeFence: async (body: { metadata: { name: string } }) => {
      order.push(`fence ${body.metadata.name}`);
      return body;
    },
    setPodCondition: async (_ns: string, name: string) => {
      order.push(`NodeDown ${name}`);
      peak = Math.max(peak, ++inFlight);
      await gate;
      inFlight--;
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
  const pass = ctl.reconcile();
  await new Promise((r) => setImmediate(r));
  assert.equal(order[0], "fence node-1", `first write: ${order[0]}`);
  assert.equal(inFlight, 8, "NodeDown writes a few at a time");
  open();
  await pass;
  assert.equal(order.filter((o) => o.startsWith("NodeDown")).length, 40);
  assert.equal(peak, 8);
});
