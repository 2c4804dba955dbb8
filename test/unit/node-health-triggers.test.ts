// The health controller with condition triggers and the quorum guard (issue 28 items 3 and 4): the NodeFence it
// creates names its trigger; the fresh read right before the create must still show the condition (or silence) and
// no control-plane role; the policy's status carries the held conditions and the QuorumGuard condition, with Events.
import { test } from "node:test";
import assert from "node:assert/strict";
import type { V1Node, V1Pod } from "@kubernetes/client-node";
import type { FencingPolicy, NodeFence } from "../../src/api/v1alpha1.ts";
import { NodeHealthController } from "../../src/controllers/node-health.ts";
import { podsByNode } from "../../src/decide/fleet.ts";
import { assessNode } from "../../src/decide/node-health.ts";
import { at, lease, node, policy, stamp, stsPod, T0 } from "./decide-fixtures.ts";

const KD = { type: "KernelDeadlock", status: "True" as const, forSeconds: 60 };
const CP = "node-role.kubernetes.io/control-plane";

function sick(o: { kd?: "True" | "False"; labels?: Record<string, string> } = {}): V1Node {
  const n = node("node-1", { heartbeat: at(99), labels: o.labels });
  n.status!.conditions!.push({ type: "KernelDeadlock", status: o.kd ?? "True", reason: "DockerHung", lastTransitionTime: T0.toJSDate() });
  return n;
}

function setup(o: { cached?: V1Node; fresh?: V1Node; persisted?: boolean } = {}) {
  const now = at(100);
  const p: FencingPolicy = policy("default", { triggers: { nodeConditions: [KD] } });
  // Held since T0 as recorded by an earlier leader: due now (100 s ≥ 60 s).
  if (o.persisted ?? true)
    p.status = {
      heldConditions: [{ node: "node-1", type: "KernelDeadlock", status: "True", since: stamp(at(0)), lastTransitionTime: stamp(T0) }],
    };
  const nodes = new Map([["node-1", o.cached ?? sick()]]);
  const pods = new Map<string, V1Pod>([["db-0", stsPod("db-0", { node: "node-1" })]]);
  const inf = <T>(m: Map<string, T>) => ({ list: () => [...m.values()], get: (name: string) => m.get(name), on() {} });
  const caches = {
    nodes: inf(nodes),
    leases: inf(new Map([["node-1", lease("node-1", at(99), 40)]])),
    pods: inf(pods),
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
    policies: inf(new Map([["default", p]])),
    agents: inf(new Map([["ipmi", {}]])),
    fences: inf(new Map<string, NodeFence>()),
    heartbeatStalenessSeconds: () => 0,
  };
  const created: NodeFence[] = [];
  const statuses: FencingPolicy["status"][] = [];
  const events: { kind: string; reason: string; message: string }[] = [];
  const kube = {
    freshHealth: async (name: string) => {
      const n = o.fresh ?? nodes.get(name)!;
      return { node: n, health: assessNode(n, lease(name, at(99), 40), now, 40) };
    },
    createNodeFence: async (body: NodeFence) => {
      created.push(body);
      return { ...body, metadata: { ...body.metadata, uid: "uid-f" } };
    },
    setPodCondition: async () => undefined,
    replaceStatus: async (_plural: string, obj: FencingPolicy) => {
      statuses.push(obj.status);
      return { ...obj, metadata: { ...obj.metadata, resourceVersion: "2" } };
    },
  };
  const silent = { info() {}, warn() {}, error() {}, debug() {} };
  const ctl = new NodeHealthController({
    caches: caches as never,
    kube: kube as never,
    events: {
      record: async (ref: { kind: string }, _t: string, reason: string, message: string) =>
        void events.push({ kind: ref.kind, reason, message }),
    } as never,
    log: silent as never,
    clock: () => now,
  } as never);
  const pass = async () => {
    await ctl.reconcile();
    await ctl.fenceCreatesSettled();
    await ctl.policyStatusSettled();
  };
  return { ctl, created, statuses, events, pass };
}

test("a due condition trigger creates an Automatic NodeFence that names it; the policy's status keeps the held condition", async () => {
  const { created, statuses, pass } = setup();
  await pass();
  assert.equal(created.length, 1);
  assert.deepEqual(created[0]!.spec.trigger, { nodeCondition: KD });
  assert.equal(created[0]!.spec.origin, "Automatic");
  assert.match(created[0]!.spec.reason ?? "", /condition KernelDeadlock=True held for 100 s/);
  assert.deepEqual(statuses.at(-1)?.heldConditions, [
    { node: "node-1", type: "KernelDeadlock", status: "True", since: stamp(at(0)), lastTransitionTime: stamp(T0) },
  ]);
});

test("no create when the fresh read shows the condition gone on a node that heartbeats", async () => {
  const { created, pass } = setup({ fresh: sick({ kd: "False" }) });
  await pass();
  assert.equal(created.length, 0);
});

test("not due yet without the earlier leader's record: this process saw it first just now", async () => {
  const { created, ctl, pass } = setup({ persisted: false });
  await pass();
  assert.equal(created.length, 0);
  assert.equal(ctl.decide().decisions[0]?.verdict, "Waiting");
});

test("a control-plane node is not fenced: QuorumGuard on the policy, Warning Events on the policy and the Node", async () => {
  const { created, statuses, events, pass } = setup({ cached: sick({ labels: { [CP]: "" } }) });
  await pass();
  assert.equal(created.length, 0);
  const q = statuses.at(-1)?.conditions?.find((c) => c.type === "QuorumGuard");
  assert.equal(q?.status, "True");
  assert.equal(q?.reason, "ControlPlaneNode");
  assert.match(q?.message ?? "", /node-1 is not fenced: it is a control-plane node/);
  assert.deepEqual(
    events.filter((e) => e.reason === "ControlPlaneNode").map((e) => e.kind),
    ["FencingPolicy", "Node"],
  );
});

test("labelled control-plane since the cache saw it: the fresh read before the create refuses it", async () => {
  const { created, pass } = setup({ fresh: sick({ labels: { [CP]: "" } }) });
  await pass();
  assert.equal(created.length, 0);
});
