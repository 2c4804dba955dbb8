// The fleet decision with condition triggers (spec.triggers.nodeConditions) and the quorum guard
// (spec.allowControlPlane): issue 28 items 3 and 4.
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import type { V1Lease, V1Node, V1Pod } from "@kubernetes/client-node";
import type { DateTime } from "luxon";
import type { FencingPolicy, FencingPolicySpec, NodeFence } from "../../src/api/v1alpha1.ts";
import { decideFleet, podsByNode, type FleetDecision } from "../../src/decide/fleet.ts";
import { FleetMemo } from "../../src/decide/fleet-memo.ts";
import type { Sighting } from "../../src/decide/node-conditions.ts";
import { MIRROR_POD_ANNOTATION } from "../../src/decide/quorum.ts";
import {
  T0,
  at,
  fence,
  fenceMap,
  lease,
  leases,
  node,
  pod,
  policy as basePolicy,
  pvcMap,
  stamp,
  stsPod,
  writtenBy,
} from "./decide-fixtures.ts";

const NPD = "node-problem-detector";
const KD = { type: "KernelDeadlock", status: "True" as const, forSeconds: 60, trustedWriters: [NPD] };
// A 40 s heartbeat timeout (the default until issue 31) keeps the round numbers below.
const policy = (spec: Partial<FencingPolicySpec> = {}) =>
  basePolicy("default", { triggers: { nodeConditions: [KD] }, ...spec, detection: { heartbeatTimeoutSeconds: 40, ...spec.detection } });
const CP = { "node-role.kubernetes.io/control-plane": "" };

interface N {
  node: V1Node;
  lease: V1Lease;
}
/**
 * A node that heartbeats (5 s ago), Ready as given (set by its kubelet), with extra conditions set at T0 by its own
 * clock, by node-problem-detector unless another writer is named.
 */
function up(
  name: string,
  now: DateTime,
  o: { ready?: "True" | "False"; conditions?: [string, string, string?][]; labels?: Record<string, string> } = {},
): N {
  const n = writtenBy(node(name, { ready: o.ready ?? "True", heartbeat: now.minus({ seconds: 5 }), labels: o.labels }), "Ready", "kubelet");
  for (const [type, status, writer] of o.conditions ?? []) {
    n.status!.conditions!.push({ type, status, reason: "NPD", lastTransitionTime: T0.toJSDate() });
    writtenBy(n, type, writer ?? NPD);
  }
  return { node: n, lease: lease(name, now.minus({ seconds: 5 })) };
}
/** Silent since T0, Ready=Unknown: partitioned from T0+40. */
const down = (name: string, labels: Record<string, string> = {}): N => ({
  node: node(name, { ready: "Unknown", heartbeat: T0, labels }),
  lease: lease(name, T0),
});

interface World {
  pods?: V1Pod[];
  policies?: FencingPolicy[];
  fences?: NodeFence[];
  mono?: number;
  sightings?: Map<string, Sighting>;
}

function decide(now: DateTime, ns: N[], w: World = {}): FleetDecision {
  return decideFleet({
    now,
    nodes: ns.map((x) => x.node),
    leases: leases(...ns.map((x) => x.lease)),
    pods: podsByNode(w.pods ?? ns.map((x) => stsPod(`db-${x.node.metadata?.name}`, { node: x.node.metadata?.name }))),
    pvcs: pvcMap(),
    pdbs: [],
    policies: w.policies ?? [policy()],
    fences: fenceMap(...(w.fences ?? [])),
    watchStalenessSeconds: 0,
    mono: w.mono ?? now.diff(T0).as("milliseconds"),
    sightings: w.sightings,
  });
}
const of = (d: FleetDecision, name = "node-1") => d.decisions.find((x) => x.node === name)!;

describe("condition triggers in the fleet decision", () => {
  test("a heartbeating node whose KernelDeadlock=True held 60 s is fenced then, not before; the intent names the trigger", () => {
    const d0 = decide(at(0), [up("node-1", at(0), { conditions: [["KernelDeadlock", "True"]] })]);
    assert.equal(of(d0).verdict, "Waiting");
    assert.match(of(d0).message, /condition KernelDeadlock=True held since .*fenced after 60 s, at 2026-01-01T00:01:00Z \(60 s left\)/);
    const d30 = decide(at(30), [up("node-1", at(30), { conditions: [["KernelDeadlock", "True"]] })], { sightings: d0.sightings });
    assert.equal(d30.nextCheck?.toMillis(), at(60).toMillis(), "wakes when it falls due (its heartbeat goes stale only at 65)");
    assert.deepEqual(d0.policies.get("default")?.held, [
      { node: "node-1", type: "KernelDeadlock", status: "True", since: stamp(at(0)), lastTransitionTime: stamp(T0) },
    ]);
    const d59 = decide(at(59), [up("node-1", at(59), { conditions: [["KernelDeadlock", "True"]] })], { sightings: d0.sightings });
    assert.equal(of(d59).verdict, "Waiting");
    assert.equal(d59.create.length, 0);
    const d60 = decide(at(60), [up("node-1", at(60), { conditions: [["KernelDeadlock", "True"]] })], { sightings: d59.sightings });
    assert.equal(of(d60).verdict, "Fence");
    assert.equal(d60.create.length, 1);
    assert.deepEqual(d60.create[0]!.trigger, KD);
    assert.match(d60.create[0]!.reason, /condition KernelDeadlock=True held for 60 s .*at least forSeconds 60; 1 guarded pod/);
  });

  test("a wall clock jumped an hour ahead does not make it due: 10 s on the monotonic clock is 10 s", () => {
    const d0 = decide(at(0), [up("node-1", at(0), { conditions: [["KernelDeadlock", "True"]] })], { mono: 0 });
    const later = at(3600);
    const d = decide(later, [up("node-1", later, { conditions: [["KernelDeadlock", "True"]] })], { mono: 10_000, sightings: d0.sightings });
    assert.equal(of(d).verdict, "Waiting");
    assert.match(of(d).message, /\(50 s left\)/);
    assert.equal(d.create.length, 0);
  });

  test("a restarted operator resumes from the policy's status (heldConditions), not from zero", () => {
    const d0 = decide(at(0), [up("node-1", at(0), { conditions: [["KernelDeadlock", "True"]] })]);
    const p = policy();
    p.status = { heldConditions: d0.policies.get("default")!.held };
    const d = decide(at(60), [up("node-1", at(60), { conditions: [["KernelDeadlock", "True"]] })], {
      policies: [p],
      mono: 5,
      sightings: new Map(),
    });
    assert.equal(of(d).verdict, "Fence");
  });

  test("a condition that cleared is forgotten: held again, the wait starts again", () => {
    const d0 = decide(at(0), [up("node-1", at(0), { conditions: [["KernelDeadlock", "True"]] })]);
    const d1 = decide(at(30), [up("node-1", at(30), { conditions: [["KernelDeadlock", "False"]] })], { sightings: d0.sightings });
    assert.equal(of(d1).verdict, "Healthy");
    assert.equal(d1.sightings.size, 0);
    assert.deepEqual(d1.policies.get("default")?.held, []);
    const d2 = decide(at(70), [up("node-1", at(70), { conditions: [["KernelDeadlock", "True"]] })], { sightings: d1.sightings });
    assert.equal(of(d2).verdict, "Waiting");
  });

  test("Ready=False (the kubelet says NotReady, heartbeating) for 300 s", () => {
    const p = policy({ triggers: { nodeConditions: [{ type: "Ready", status: "False", forSeconds: 300, trustedWriters: ["kubelet"] }] } });
    const d0 = decide(at(0), [up("node-1", at(0), { ready: "False" })], { policies: [p] });
    assert.equal(of(d0).verdict, "Waiting");
    const d = decide(at(300), [up("node-1", at(300), { ready: "False" })], { policies: [p], sightings: d0.sightings });
    assert.equal(of(d).verdict, "Fence");
    assert.deepEqual(d.create[0]!.trigger, { type: "Ready", status: "False", forSeconds: 300, trustedWriters: ["kubelet"] });
  });

  test("no guarded pod: nothing to protect, whatever the condition", () => {
    const ns = [up("node-1", at(100), { conditions: [["KernelDeadlock", "True"]] })];
    const d = decide(at(100), ns, { pods: [pod("web", { node: "node-1" })] });
    assert.equal(of(d).verdict, "NothingToProtect");
  });

  test("a policy without triggers ignores conditions; a node that is not selected has no policy to wait for", () => {
    const ns = [up("node-1", at(100), { conditions: [["KernelDeadlock", "True"]] })];
    assert.equal(of(decide(at(100), ns, { policies: [basePolicy("default")] })).verdict, "Healthy");
    assert.equal(of(decide(at(100), ns, { policies: [] })).verdict, "Healthy");
  });

  test("the storm guard counts nodes holding a trigger condition as unhealthy", () => {
    const cond: [string, string][] = [["KernelDeadlock", "True"]];
    const ns = [up("node-1", at(0), { conditions: cond }), up("node-2", at(0), { conditions: cond }), up("node-3", at(0))];
    const p = policy({ guards: { maxUnhealthyNodes: 1 } });
    const d0 = decide(at(0), ns, { policies: [p] });
    const later = [up("node-1", at(60), { conditions: cond }), up("node-2", at(60), { conditions: cond }), up("node-3", at(60))];
    const d = decide(at(60), later, { policies: [p], sightings: d0.sightings });
    assert.equal(of(d).verdict, "Held");
    assert.match(of(d).message, /2 of 3 nodes are unhealthy \(node-1, node-2\)/);
    assert.equal(d.create.length, 0);
  });

  test("dry run and paused report the condition trigger and fence nothing", () => {
    const run = (spec: Partial<FencingPolicySpec>) => {
      const p = policy(spec);
      const d0 = decide(at(0), [up("node-1", at(0), { conditions: [["KernelDeadlock", "True"]] })], { policies: [p] });
      return decide(at(60), [up("node-1", at(60), { conditions: [["KernelDeadlock", "True"]] })], {
        policies: [p],
        sightings: d0.sightings,
      });
    };
    const dry = run({ dryRun: true });
    assert.equal(of(dry).verdict, "DryRun");
    assert.match(of(dry).message, /would fence: condition KernelDeadlock=True held for 60 s/);
    assert.equal(dry.create.length, 0);
    assert.equal(of(run({ paused: true })).verdict, "Paused");
  });

  test("partitioned and holding a condition: whichever falls due first decides", () => {
    // Silent since T0: partitioned from 40, due at 50 (fenceAfterSeconds 10). The condition, seen first at 45, is due at 105.
    const n = down("node-1");
    n.node.status!.conditions!.push({ type: "KernelDeadlock", status: "True", reason: "x", lastTransitionTime: T0.toJSDate() });
    const d0 = decide(at(45), [n]);
    assert.equal(of(d0).verdict, "Waiting");
    assert.match(of(d0).message, /^partitioned since/);
    const d = decide(at(50), [n], { sightings: d0.sightings });
    assert.equal(of(d).verdict, "Fence");
    assert.equal(d.create[0]!.trigger, undefined, "fenced for its silence");
  });

  test("a node being fenced keeps no sighting (the wait starts afresh after the episode)", () => {
    const ns = [up("node-1", at(0), { conditions: [["KernelDeadlock", "True"]] })];
    const d = decide(at(0), ns, { fences: [fence("node-1", { phase: "Fencing" })] });
    assert.equal(of(d).verdict, "HasFence");
    assert.equal(d.sightings.size, 0);
  });
});

describe("condition triggers trust only the writers a trigger lists (issue 41 item 4)", () => {
  /** KernelDeadlock=True on node-1, seen at 0 and again at `t`, with the conditions given each time. */
  const twice = (t: number, conditions: [string, string, string?][], w: World = {}) => {
    const d0 = decide(at(0), [up("node-1", at(0), { conditions })], w);
    return decide(at(t), [up("node-1", at(t), { conditions })], { ...w, sightings: d0.sightings });
  };

  test("set by an untrusted writer (a CNI agent's token) and held 10 min: never fenced, the policy names node, condition and writer", () => {
    const d = twice(600, [["KernelDeadlock", "True", "calico-node"]]);
    assert.equal(of(d).verdict, "Healthy");
    assert.equal(d.create.length, 0);
    assert.equal(d.sightings.size, 0);
    const s = d.policies.get("default")!;
    assert.deepEqual(s.held, []);
    assert.deepEqual(s.untrusted, [
      { node: "node-1", type: "KernelDeadlock", status: "True", writers: ["calico-node"], untrusted: ["calico-node"] },
    ]);
  });

  test("set by the listed writer: fenced after forSeconds, as before; nothing reported", () => {
    const d = twice(60, [["KernelDeadlock", "True"]]);
    assert.equal(of(d).verdict, "Fence");
    assert.deepEqual(d.create[0]!.trigger, KD);
    assert.deepEqual(d.policies.get("default")!.untrusted, []);
  });

  test("co-owned by the listed writer and another: not fenced", () => {
    const coOwned = (t: number): N => {
      const n = up("node-1", at(t), { conditions: [["KernelDeadlock", "True", "attacker"]] });
      writtenBy(n.node, "KernelDeadlock", "attacker", { operation: "Apply", subresource: "" });
      writtenBy(n.node, "KernelDeadlock", NPD, { operation: "Apply", subresource: "" });
      return n;
    };
    const d0 = decide(at(0), [coOwned(0)]);
    const d = decide(at(60), [coOwned(60)], { sightings: d0.sightings });
    assert.equal(d.create.length, 0);
    assert.deepEqual(d.policies.get("default")!.untrusted[0]!.untrusted, ["attacker"]);
  });

  test("a trigger that lists no writer fences nothing; the policy says which trigger", () => {
    const bare = { type: "KernelDeadlock", status: "True" as const, forSeconds: 60 };
    const d = twice(600, [["KernelDeadlock", "True"]], { policies: [policy({ triggers: { nodeConditions: [bare] } })] });
    assert.equal(d.create.length, 0);
    assert.equal(of(d).verdict, "Healthy");
    assert.deepEqual(d.policies.get("default")!.unlisted, ["KernelDeadlock=True"]);
  });

  test("untrusted conditions do not count towards the storm guard (they are not triggers)", () => {
    const bad: [string, string, string?][] = [["KernelDeadlock", "True", "calico-node"]];
    const good: [string, string, string?][] = [["KernelDeadlock", "True"]];
    const p = policy({ guards: { maxUnhealthyNodes: 1 } });
    const at0 = [up("node-1", at(0), { conditions: good }), up("node-2", at(0), { conditions: bad }), up("node-3", at(0))];
    const d0 = decide(at(0), at0, { policies: [p] });
    const at60 = [up("node-1", at(60), { conditions: good }), up("node-2", at(60), { conditions: bad }), up("node-3", at(60))];
    const d = decide(at(60), at60, { policies: [p], sightings: d0.sightings });
    assert.equal(of(d).verdict, "Fence");
    assert.deepEqual(
      d.policies.get("default")!.untrusted.map((u) => u.node),
      ["node-2"],
    );
  });

  test("with the memo, a node showing an untrusted condition is reported on every pass", () => {
    const memo = new FleetMemo();
    const ns = [up("node-1", at(0), { conditions: [["KernelDeadlock", "True", "calico-node"]] })];
    const input = (t: number) => ({
      now: at(t),
      nodes: ns.map((x) => x.node),
      leases: leases(...ns.map((x) => x.lease)),
      pods: podsByNode(ns.map((x) => stsPod(`db-${x.node.metadata?.name}`, { node: x.node.metadata?.name }))),
      pvcs: pvcMap(),
      pdbs: [],
      policies: [policy()],
      fences: fenceMap(),
      watchStalenessSeconds: 0,
      mono: t * 1000,
      memo,
    });
    decideFleet(input(0));
    assert.equal(decideFleet(input(1)).policies.get("default")!.untrusted.length, 1);
  });
});

describe("quorum guard in the fleet decision", () => {
  test("a control-plane node due for fencing (its condition, or its silence) is refused, and the policy says why", () => {
    const c0 = decide(at(0), [up("cp-1", at(0), { conditions: [["KernelDeadlock", "True"]], labels: CP })]);
    const d = decide(at(60), [up("cp-1", at(60), { conditions: [["KernelDeadlock", "True"]], labels: CP })], { sightings: c0.sightings });
    assert.equal(of(d, "cp-1").verdict, "ControlPlane");
    assert.match(
      of(d, "cp-1").message,
      /cp-1 is not fenced: it is a control-plane node .*quorum.*; would fence: condition KernelDeadlock=True/,
    );
    assert.equal(d.create.length, 0);
    assert.deepEqual(
      d.policies.get("default")?.controlPlane.map((x) => x.node),
      ["cp-1"],
    );
    const silent = decide(at(100), [down("cp-1", { "node-role.kubernetes.io/master": "" })]);
    assert.equal(of(silent, "cp-1").verdict, "ControlPlane");
    assert.equal(silent.create.length, 0);
  });

  test("a node running an etcd member (mirror pod in kube-system) is refused too", () => {
    const etcd = pod("etcd-node-1", { node: "node-1", ns: "kube-system", labels: { component: "etcd" } });
    etcd.metadata!.annotations = { [MIRROR_POD_ANNOTATION]: "x" };
    const d = decide(at(100), [down("node-1")], { pods: [etcd, stsPod("db-0", { node: "node-1" })] });
    assert.equal(of(d).verdict, "ControlPlane");
    assert.match(of(d).message, /runs a member of the cluster's etcd \(static pod kube-system\/etcd-node-1\)/);
  });

  test("spec.allowControlPlane: fenced like any other; dry run still refuses one that is not allowed", () => {
    const d = decide(at(100), [down("cp-1", CP)], { policies: [policy({ allowControlPlane: true })] });
    assert.equal(of(d, "cp-1").verdict, "Fence");
    const dry = decide(at(100), [down("cp-1", CP)], { policies: [policy({ dryRun: true })] });
    assert.equal(of(dry, "cp-1").verdict, "ControlPlane");
  });
});
