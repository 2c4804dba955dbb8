// Issue 41 item 6, the health controller: a NodeFence decided for a Node that is gone is created only when a fresh
// read right before the create still finds the Node absent and its Lease not renewed; it names the deletion in its
// reason. A gone Node this process never saw sets the policy's MissingNodes condition with a Warning Event.
import { test } from "node:test";
import assert from "node:assert/strict";
import type { V1Lease, V1Node } from "@kubernetes/client-node";
import type { FencingPolicy, NodeFence } from "../../src/api/v1alpha1.ts";
import { NodeHealthController } from "../../src/controllers/node-health.ts";
import { podsByNode, type GoneNode } from "../../src/decide/fleet.ts";
import { at, lease, node, policy, stsPod } from "./decide-fixtures.ts";

function setup(o: { remembered?: boolean; fresh?: { node?: V1Node; lease?: V1Lease; leaseSilentMs?: number } } = {}) {
  const now = at(1000);
  const seen = node("gone-1", { ready: "True", heartbeat: at(0) });
  seen.spec = { ...seen.spec, providerID: "aws:///eu-west-1a/i-0abc" };
  const remembered = o.remembered ?? true;
  const gone: GoneNode = remembered ? { name: "gone-1", lastSeen: seen, quietMs: 60_000 } : { name: "gone-1" };
  const pol = { ...policy("default"), metadata: { name: "default", generation: 1, resourceVersion: "1" } } as FencingPolicy;
  const inf = <T>(m: Map<string, T>) => ({ list: () => [...m.values()], get: (name: string) => m.get(name), on() {} });
  const caches = {
    nodes: inf(new Map<string, V1Node>()),
    leases: inf(new Map<string, V1Lease>()),
    pods: inf(new Map([["db-0", stsPod("db-0", { node: "gone-1" })]])),
    pvcs: inf(new Map()),
    pvcsByKey: () => new Map(),
    get podsByNode() {
      return podsByNode(this.pods.list());
    },
    leaseSilentForMs: () => Infinity,
    goneNodes: () => [gone],
    lastSeenNodes: { get: (n: string) => (remembered && n === "gone-1" ? seen : undefined) },
    leaseOf: () => undefined,
    pdbs: inf(new Map()),
    policies: inf(new Map([["default", pol]])),
    agents: inf(new Map([["ipmi", {}]])),
    fences: inf(new Map<string, NodeFence>()),
    heartbeatStalenessSeconds: () => 0,
  };
  const w = { created: [] as NodeFence[], statuses: [] as FencingPolicy[], events: [] as { reason: string; message: string }[] };
  const kube = {
    freshHealth: async () => ({ node: o.fresh?.node, health: undefined, lease: o.fresh?.lease, leaseSilentMs: o.fresh?.leaseSilentMs }),
    createNodeFence: async (body: NodeFence) => {
      w.created.push(body);
      return { ...body, metadata: { ...body.metadata, uid: "uid-fence" } };
    },
    setPodCondition: async () => undefined,
    replaceStatus: async (_plural: string, p: FencingPolicy) => {
      w.statuses.push(p);
      return p;
    },
  };
  const silent = { info() {}, warn() {}, error() {}, debug() {} };
  const ctl = new NodeHealthController({
    caches: caches as never,
    kube: kube as never,
    events: {
      record: async (_ref: unknown, _type: string, reason: string, message: string) => void w.events.push({ reason, message }),
    } as never,
    log: silent as never,
    clock: () => now,
  });
  const pass = async () => {
    await ctl.reconcile();
    await ctl.fenceCreatesSettled();
    await ctl.policyStatusSettled();
  };
  return { ctl, w, pass };
}

test("a remembered gone Node, still absent on the fresh read and with no Lease: its NodeFence is created, its reason says why", async () => {
  const { w, pass } = setup();
  await pass();
  assert.equal(w.created.length, 1);
  const f = w.created[0]!;
  assert.equal(f.spec.nodeName, "gone-1");
  assert.equal(f.spec.origin, "Automatic");
  assert.equal(f.spec.policy, "default");
  assert.match(f.spec.reason ?? "", /Node gone-1 was deleted while its machine may still run/);
  assert.match(f.spec.reason ?? "", /providerID aws:\/\/\/eu-west-1a\/i-0abc/);
  assert.ok(w.events.some((e) => e.reason === "FenceRequested"));
});

test("a fresh read that finds the Node registered again: no NodeFence", async () => {
  const { w, pass } = setup({ fresh: { node: node("gone-1", { ready: "True", heartbeat: at(999) }) } });
  await pass();
  assert.deepEqual(w.created, []);
});

test("a fresh read that finds its Lease renewed (a live kubelet): no NodeFence", async () => {
  const { w, pass } = setup({ fresh: { lease: lease("gone-1", at(998)), leaseSilentMs: 2_000 } });
  await pass();
  assert.deepEqual(w.created, []);
});

test("a fresh read that finds its Lease expired (seen unchanged for its duration): the NodeFence is created", async () => {
  const { w, pass } = setup({ fresh: { lease: lease("gone-1", at(900)), leaseSilentMs: 100_000 } });
  await pass();
  assert.equal(w.created.length, 1);
});

test("a gone Node never seen: no NodeFence; MissingNodes on the policy with the command, and a Warning Event", async () => {
  const { w, pass } = setup({ remembered: false });
  await pass();
  assert.deepEqual(w.created, []);
  const c = w.statuses.at(-1)?.status?.conditions?.find((x) => x.type === "MissingNodes");
  assert.equal(c?.status, "True");
  assert.equal(c?.reason, "NodeNotRemembered");
  assert.match(c?.message ?? "", /Node gone-1 \(1 guarded pod\(s\), never seen by this operator\)/);
  assert.match(c?.message ?? "", /\| kubectl create -f -/);
  assert.ok(w.events.some((e) => e.reason === "GuardedPodsOnMissingNode" && e.message === c?.message));
});
