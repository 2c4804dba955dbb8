// The health controller with condition triggers and the quorum guard (issue 28 items 3 and 4): the NodeFence it
// creates names its trigger; the fresh read right before the create must still show the condition (or silence) and
// no control-plane role; the policy's status carries the held conditions and the QuorumGuard condition, with Events.
import { test } from "node:test";
import assert from "node:assert/strict";
import type { V1Node, V1Pod } from "@kubernetes/client-node";
import type { FencingPolicy, NodeFence } from "../../src/api/v1alpha1.ts";
import { MAX_UNTRUSTED_LISTED, NodeHealthController } from "../../src/controllers/node-health.ts";
import { podsByNode } from "../../src/decide/fleet.ts";
import { assessNode } from "../../src/decide/node-health.ts";
import { at, lease, node, policy, stamp, stsPod, T0, writtenBy } from "./decide-fixtures.ts";

const NPD = "node-problem-detector";
const KD = { type: "KernelDeadlock", status: "True" as const, forSeconds: 60, trustedWriters: [NPD] };
const CP = "node-role.kubernetes.io/control-plane";

/** node-1 heartbeating, KernelDeadlock set by `writer` (node-problem-detector unless named). */
function sick(o: { kd?: "True" | "False"; labels?: Record<string, string>; writer?: string } = {}): V1Node {
  const n = node("node-1", { heartbeat: at(99), labels: o.labels });
  n.status!.conditions!.push({ type: "KernelDeadlock", status: o.kd ?? "True", reason: "DockerHung", lastTransitionTime: T0.toJSDate() });
  return writtenBy(n, "KernelDeadlock", o.writer ?? NPD);
}

function setup(o: { cached?: V1Node; fresh?: V1Node; persisted?: boolean; trigger?: typeof KD | Omit<typeof KD, "trustedWriters"> } = {}) {
  const now = at(100);
  const p: FencingPolicy = policy("default", { triggers: { nodeConditions: [o.trigger ?? KD] } });
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

test("issue 41 item 4: the fresh read before the create shows the condition set by an untrusted writer: no create", async () => {
  const { created, pass } = setup({ fresh: sick({ writer: "calico-node" }) });
  await pass();
  assert.equal(created.length, 0);
});

test("issue 41 item 4: a condition set by an untrusted writer is never fenced; the policy and the Node say which writer", async () => {
  const { created, statuses, events, pass } = setup({ cached: sick({ writer: "calico-node" }) });
  await pass();
  assert.equal(created.length, 0);
  assert.deepEqual(statuses.at(-1)?.heldConditions, [], "its wait has not started");
  const u = statuses.at(-1)?.conditions?.find((c) => c.type === "UntrustedConditions");
  assert.equal(u?.status, "True");
  assert.equal(u?.reason, "UntrustedWriter");
  assert.match(u?.message ?? "", /KernelDeadlock=True on node node-1 ignored: set by calico-node, not in the trigger's trustedWriters/);
  const warned = events.filter((e) => e.reason === "UntrustedConditionWriter");
  assert.deepEqual(
    warned.map((e) => e.kind),
    ["FencingPolicy", "Node"],
  );
  assert.ok(warned.every((e) => /node-1/.test(e.message) && /calico-node/.test(e.message) && /KernelDeadlock/.test(e.message)));
});

test("issue 41 item 4: a trigger listing no trusted writer fences nothing; the policy says so, with an Event", async () => {
  const { type, status, forSeconds } = KD;
  const { created, statuses, events, pass } = setup({ trigger: { type, status, forSeconds } });
  await pass();
  assert.equal(created.length, 0);
  const u = statuses.at(-1)?.conditions?.find((c) => c.type === "UntrustedConditions");
  assert.equal(u?.status, "True");
  assert.equal(u?.reason, "NoTrustedWriters");
  assert.match(u?.message ?? "", /trigger KernelDeadlock=True ignored: it lists no trustedWriters/);
  assert.deepEqual(
    events.filter((e) => e.reason === "NoTrustedWriters").map((e) => e.kind),
    ["FencingPolicy"],
  );
});

test("all triggers trusted: UntrustedConditions is False", async () => {
  const { statuses, pass } = setup();
  await pass();
  assert.equal(statuses.at(-1)?.conditions?.find((c) => c.type === "UntrustedConditions")?.status, "False");
});

test("issue 41 item 4: an untrusted writer on many nodes: the condition names a bounded list, and Events only for it", async () => {
  const untrusted = Array.from({ length: MAX_UNTRUSTED_LISTED + 5 }, (_, k) => ({
    node: `node-${String(k).padStart(3, "0")}`,
    type: "KernelDeadlock",
    status: "True",
    writers: ["calico-node"],
    untrusted: ["calico-node"],
  }));
  const state = {
    holds: [],
    raisedTimeouts: [],
    partitioned: [],
    activeFences: 0,
    wouldFence: [],
    queued: [],
    held: [],
    controlPlane: [],
    untrusted,
    unlisted: [],
  };
  const { ctl, statuses, events } = setup();
  const update = (ctl as unknown as { updatePolicyStatus(p: FencingPolicy, s: unknown): Promise<void> }).updatePolicyStatus.bind(ctl);
  await update(policy("default", { triggers: { nodeConditions: [KD] } }), state);
  const u = statuses.at(-1)?.conditions?.find((c) => c.type === "UntrustedConditions");
  assert.match(u?.message ?? "", /and 5 more condition\(s\) set by untrusted writers$/);
  assert.equal(events.filter((e) => e.reason === "UntrustedConditionWriter").length, 2 * MAX_UNTRUSTED_LISTED);
});
