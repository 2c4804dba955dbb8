import { describe, test } from "node:test";
import assert from "node:assert/strict";
import type { V1Lease, V1Node, V1PersistentVolumeClaim, V1Pod, V1PodDisruptionBudget } from "@kubernetes/client-node";
import type { DateTime } from "luxon";
import type { FencingPolicy, NodeFence, NodeFenceStatus } from "../../src/api/v1alpha1.ts";
import { decideFleet, podsByNode, type FleetDecision, type FleetInput, type Verdict } from "../../src/decide/fleet.ts";
import { GUARDED_LABEL } from "../../src/decide/guarded-pods.ts";
import { NODE_DOWN } from "../../src/decide/node-down.ts";
import { UNREACHABLE_TAINT } from "../../src/decide/forgiveness.ts";
import { T0, at, fence, fenceMap, lease, leases, node, pdb, pod, policy as basePolicy, pvcMap, stsPod } from "./decide-fixtures.ts";
import type { FencingPolicySpec } from "../../src/api/v1alpha1.ts";

// Partitioned nodes last heartbeat at T0; with a 40 s timeout (set here: the default was 40 until issue 31, now 30)
// they are partitioned from T0+40 and, with fenceAfterSeconds 60 (set here, for round numbers; the default is 10)
// and no tolerations, due for fencing at T0+100.
const policy = (name: string, spec: Partial<FencingPolicySpec> = {}) =>
  basePolicy(name, { ...spec, detection: { heartbeatTimeoutSeconds: 40, fenceAfterSeconds: 60, ...spec.detection } });
const ZONE = "topology.kubernetes.io/zone";

interface N {
  node: V1Node;
  lease: V1Lease;
}
/** A node that heartbeats: last beat 5 s before now. */
const up = (name: string, now: DateTime, labels: Record<string, string> = {}): N => ({
  node: node(name, { ready: "True", heartbeat: now.minus({ seconds: 5 }), labels }),
  lease: lease(name, now.minus({ seconds: 5 })),
});
/** A node silent since `since` (T0), Ready=Unknown as the node-lifecycle controller leaves it. */
const down = (name: string, labels: Record<string, string> = {}, since: DateTime = T0): N => ({
  node: node(name, { ready: "Unknown", heartbeat: since, labels }),
  lease: lease(name, since),
});

interface World {
  pods?: V1Pod[];
  policies?: FencingPolicy[];
  fences?: NodeFence[];
  pdbs?: V1PodDisruptionBudget[];
  pvcs?: Map<string, V1PersistentVolumeClaim>;
  watch?: number;
  /** The cluster-wide storm guard's limit (the operator's --cluster-max-unhealthy-nodes); none: its default. */
  cluster?: number | string;
  /** How long the operator has seen each Lease's renewTime (monotonic); none: the Lease never counts (see watching). */
  leaseSilentMs?: FleetInput["leaseSilentMs"];
}

/**
 * An operator that has watched every Lease since before its renewal, its clocks agreeing with the nodes': each
 * renewTime seen unchanged for now − renewTime.
 */
const watching =
  (now: DateTime): FleetInput["leaseSilentMs"] =>
  (_n, l) =>
    now.toMillis() - new Date(l.spec!.renewTime!).getTime();

function decide(now: DateTime, ns: N[], w: World = {}): FleetDecision {
  const d = decideFleet({
    now,
    nodes: ns.map((x) => x.node),
    leases: leases(...ns.map((x) => x.lease)),
    pods: podsByNode(w.pods ?? []),
    pvcs: w.pvcs ?? pvcMap(),
    pdbs: w.pdbs ?? [],
    policies: w.policies ?? [policy("default")],
    fences: fenceMap(...(w.fences ?? [])),
    watchStalenessSeconds: w.watch ?? 0,
    leaseSilentMs: w.leaseSilentMs,
    ...(w.cluster !== undefined ? { clusterMaxUnhealthyNodes: w.cluster } : {}),
  });
  // Every node gets exactly one verdict, and only "Fence" verdicts become intents.
  assert.deepEqual(d.decisions.map((x) => x.node).sort(), ns.map((x) => x.node.metadata?.name ?? "").sort(), "one decision per node");
  assert.deepEqual(
    d.create.map((c) => c.node).sort(),
    d.decisions
      .filter((x) => x.verdict === "Fence")
      .map((x) => x.node)
      .sort(),
    "create ⇔ Fence verdict",
  );
  return d;
}

const decisionOf = (d: FleetDecision, name: string) => {
  const x = d.decisions.find((y) => y.node === name);
  assert.ok(x, `no decision for ${name}`);
  return x;
};
const verdicts = (d: FleetDecision): Record<string, Verdict> => Object.fromEntries(d.decisions.map((x) => [x.node, x.verdict]));
const ms = (t: DateTime | undefined) => t?.toMillis();

/** node-1 and node-3 up, node-2 silent, a StatefulSet pod on every node plus a plain pod on node-2. */
function threeNodes(now: DateTime) {
  const ns = [up("node-1", now), down("node-2"), up("node-3", now)];
  const pods = [
    stsPod("db-0", { node: "node-1" }),
    stsPod("db-1", { node: "node-2" }),
    pod("web-x", { node: "node-2" }),
    stsPod("db-2", { node: "node-3" }),
  ];
  return { ns, pods };
}

describe("decideFleet: healthy fleet", () => {
  test("does nothing, and looks again when the first heartbeat would go stale", () => {
    const now = at(1000);
    const ns = [up("node-1", now), up("node-2", now), up("node-3", now)];
    const pods = ns.map((x, i) => stsPod(`db-${i}`, { node: x.node.metadata?.name }));
    const d = decide(now, ns, { pods });
    assert.deepEqual(verdicts(d), { "node-1": "Healthy", "node-2": "Healthy", "node-3": "Healthy" });
    assert.equal(decisionOf(d, "node-1").message, "heartbeats are current");
    assert.equal(decisionOf(d, "node-1").policy, "default");
    assert.deepEqual(d.create, []);
    assert.deepEqual(d.nodeDown, []);
    assert.equal(ms(d.nextCheck), ms(now.plus({ seconds: 35 })));
    assert.deepEqual(d.policies.get("default"), {
      holds: [],
      partitioned: [],
      raisedTimeouts: [],
      activeFences: 0,
      wouldFence: [],
      queued: [],
      held: [],
      controlPlane: [],
      untrusted: [],
      unlisted: [],
    });
  });

  test("no nodes, no policies: an empty decision", () => {
    const d = decide(T0, [], { policies: [] });
    assert.deepEqual(d.decisions, []);
    assert.equal(d.nextCheck, undefined);
    assert.equal(d.policies.size, 0);
  });
});

describe("decideFleet: a partitioned node with a guarded pod", () => {
  test("before the heartbeat timeout: not partitioned yet, no NodeDown, wake at the timeout", () => {
    const now = at(30);
    const { ns, pods } = threeNodes(now);
    const d = decide(now, ns, { pods });
    assert.equal(decisionOf(d, "node-2").verdict, "Healthy");
    assert.equal(decisionOf(d, "node-2").message, "not partitioned yet (Ready=Unknown)");
    assert.deepEqual(d.nodeDown, []);
    assert.equal(ms(d.nextCheck), ms(at(40)));
  });

  test("waits until partitionedSince + fenceAfterSeconds, then gets a FenceIntent", () => {
    const { ns, pods } = threeNodes(at(99));
    const waiting = decide(at(99), ns, { pods });
    const w = decisionOf(waiting, "node-2");
    assert.equal(w.verdict, "Waiting");
    assert.equal(w.message, "partitioned since 2026-01-01T00:00:40Z; guarded pods wait 60 s, until 2026-01-01T00:01:40Z");
    assert.equal(ms(w.health.partitionedSince), ms(at(40)));
    assert.deepEqual(waiting.create, []);
    assert.equal(ms(waiting.nextCheck), ms(at(100)), "wakes exactly when the wait is over");
    assert.deepEqual(waiting.policies.get("default")?.partitioned, ["node-2"]);

    const { ns: ns2 } = threeNodes(at(100));
    const due = decide(at(100), ns2, { pods });
    assert.deepEqual(verdicts(due), { "node-1": "Healthy", "node-2": "Fence", "node-3": "Healthy" });
    assert.equal(due.create.length, 1);
    const intent = due.create[0]!;
    assert.equal(intent.node, "node-2");
    assert.equal(intent.policy, "default");
    assert.equal(intent.lastHeartbeat, "2026-01-01T00:00:00Z");
    assert.equal(intent.replaces, undefined);
    assert.match(
      intent.reason,
      /no heartbeat since 2026-01-01T00:00:00Z \(Ready=Unknown\); partitioned because the node controller marked it Ready=Unknown; 1 guarded pod\(s\) waited 60 s/,
    );
    assert.equal(decisionOf(due, "node-2").message, intent.reason);
  });

  test("long after the wait it is still a Fence (no missed window)", () => {
    const { ns, pods } = threeNodes(at(5000));
    assert.equal(decisionOf(decide(at(5000), ns, { pods }), "node-2").verdict, "Fence");
  });

  test("the shortest unreachable toleration of the guarded pods sets the wait; non-guarded pods' tolerations do not count", () => {
    const tol = (s: number | undefined) => [{ key: UNREACHABLE_TAINT, operator: "Exists", effect: "NoExecute", tolerationSeconds: s }];
    const pods = [
      stsPod("db-1", { node: "node-2", tolerations: tol(600) }),
      stsPod("db-2", { node: "node-2", tolerations: tol(120) }),
      stsPod("db-3", { node: "node-2", tolerations: tol(undefined) }), // forever: does not hold the others back
      pod("web", { node: "node-2", tolerations: tol(5) }), // not guarded
    ];
    const ns = (now: DateTime) => [up("node-1", now), down("node-2"), up("node-3", now)];
    const w = decide(at(159), ns(at(159)), { pods });
    assert.equal(decisionOf(w, "node-2").verdict, "Waiting");
    assert.match(decisionOf(w, "node-2").message, /wait 120 s, until 2026-01-01T00:02:40Z/);
    assert.equal(ms(w.nextCheck), ms(at(160)));
    assert.equal(decisionOf(decide(at(160), ns(at(160)), { pods }), "node-2").verdict, "Fence");
    // honorPodTolerations: false → the policy's 60 s
    const strict = [policy("default", { detection: { honorPodTolerations: false } })];
    assert.equal(decisionOf(decide(at(100), ns(at(100)), { pods, policies: strict }), "node-2").verdict, "Fence");
  });

  test("the policy's detection timing is used: heartbeatTimeoutSeconds and fenceAfterSeconds", () => {
    const pods = [stsPod("db-1", { node: "node-2" })];
    const p = [policy("default", { detection: { heartbeatTimeoutSeconds: 100, fenceAfterSeconds: 0 } })];
    const ns = (now: DateTime) => [up("node-1", now), down("node-2"), up("node-3", now)];
    const early = decide(at(99), ns(at(99)), { pods, policies: p });
    assert.equal(decisionOf(early, "node-2").verdict, "Healthy", "not partitioned before 100 s of silence");
    assert.equal(ms(early.nextCheck), ms(at(100)));
    assert.equal(decisionOf(decide(at(100), ns(at(100)), { pods, policies: p }), "node-2").verdict, "Fence");
  });

  test("a pod opted in by label on an otherwise unguarded node is enough", () => {
    const pods = [pod("web", { node: "node-2", labels: { [GUARDED_LABEL]: "true" } })];
    const { ns } = threeNodes(at(100));
    assert.equal(decisionOf(decide(at(100), ns, { pods }), "node-2").verdict, "Fence");
  });

  test("a pod with an RWO claim is guarded through the claim cache; an unknown claim counts too", () => {
    const { ns } = threeNodes(at(100));
    const rwx = pvcMap({ metadata: { name: "shared", namespace: "default" }, spec: { accessModes: ["ReadWriteMany"] } });
    const onShared = [pod("web", { node: "node-2", claims: ["shared"] })];
    assert.equal(decisionOf(decide(at(100), ns, { pods: onShared, pvcs: rwx }), "node-2").verdict, "NothingToProtect");
    const onUnknown = [pod("web", { node: "node-2", claims: ["gone"] })];
    assert.equal(decisionOf(decide(at(100), ns, { pods: onUnknown, pvcs: rwx }), "node-2").verdict, "Fence");
  });
});

describe("decideFleet: NodeDown", () => {
  test("every pod of a partitioned node gets NodeDown naming the node and since when; pods elsewhere do not", () => {
    const { ns, pods } = threeNodes(at(50));
    const d = decide(at(50), ns, { pods });
    assert.deepEqual(d.nodeDown.map((c) => c.name).sort(), ["db-1", "web-x"], "guarded or not");
    for (const c of d.nodeDown) {
      assert.equal(c.namespace, "default");
      assert.equal(c.uid, `uid-default-${c.name}`);
      assert.equal(c.condition?.status, "True");
      assert.equal(c.condition?.reason, "NodePartitioned");
      assert.match(c.condition?.message ?? "", /node-2/);
      assert.match(c.condition?.message ?? "", /since 2026-01-01T00:00:00Z/);
      assert.match(c.condition?.message ?? "", /Ready=Unknown/);
    }
  });

  test("nodeDownFirstOnly lists only each node's first change, with the same condition", () => {
    const { ns, pods } = threeNodes(at(50));
    const all = decide(at(50), ns, { pods });
    const first = decideFleet({
      now: at(50),
      nodes: ns.map((x) => x.node),
      leases: leases(...ns.map((x) => x.lease)),
      pods: podsByNode(pods),
      pvcs: pvcMap(),
      pdbs: [],
      policies: [policy("default")],
      fences: fenceMap(),
      watchStalenessSeconds: 0,
      nodeDownFirstOnly: true,
    });
    assert.equal(all.nodeDown.length, 2, "both pods of node-2");
    assert.deepEqual(first.nodeDown, [all.nodeDown[0]], "one change for node-2: the first");
    assert.deepEqual(first.decisions, all.decisions, "nothing else differs");
  });

  test("also without a policy or anything to protect", () => {
    const { ns } = threeNodes(at(50));
    const d = decide(at(50), ns, { pods: [pod("web", { node: "node-2" })], policies: [] });
    assert.equal(decisionOf(d, "node-2").verdict, "NoPolicy");
    assert.deepEqual(
      d.nodeDown.map((c) => c.name),
      ["web"],
    );
  });

  test("a pod that already carries the same condition is left alone", () => {
    const { ns, pods } = threeNodes(at(50));
    const first = decide(at(50), ns, { pods });
    const marked = pods.map((p) => {
      const c = first.nodeDown.find((x) => x.name === p.metadata?.name)?.condition;
      return c ? { ...p, status: { ...p.status, conditions: [{ type: NODE_DOWN, ...c }] } } : p;
    });
    assert.deepEqual(decide(at(60), threeNodes(at(60)).ns, { pods: marked }).nodeDown, []);
  });

  test("a healthy node's pass reads only its pods that carry NodeDown, never all of them", () => {
    const { ns, pods } = threeNodes(at(50));
    const stale = {
      ...pod("old", { node: "node-1" }),
      status: { conditions: [{ type: NODE_DOWN, status: "True", reason: "NodePartitioned" }] },
    };
    const all = podsByNode([...pods, stale as V1Pod]);
    const read: string[] = [];
    const d = decideFleet({
      now: at(50),
      nodes: ns.map((x) => x.node),
      leases: leases(...ns.map((x) => x.lease)),
      pods: { on: (n) => (read.push(n), all.on(n)), markedOn: (n) => all.markedOn(n) },
      pvcs: pvcMap(),
      pdbs: [],
      policies: [policy("default")],
      fences: fenceMap(),
      watchStalenessSeconds: 0,
    });
    assert.deepEqual([...new Set(read)], ["node-2"], "all pods read of the partitioned node only");
    assert.deepEqual(
      d.nodeDown.filter((c) => c.condition === null).map((c) => c.name),
      ["old"],
      "the healthy node's stale NodeDown is still removed",
    );
  });

  test("is removed when the node is healthy again (and not fenced)", () => {
    const now = at(500);
    const nd = { type: NODE_DOWN, status: "True", reason: "NodePartitioned", message: "node node-2 has sent no heartbeat since …" };
    const pods = [stsPod("db-1", { node: "node-2", conditions: [nd] }), pod("web", { node: "node-2" })];
    const d = decide(now, [up("node-1", now), up("node-2", now), up("node-3", now)], { pods });
    assert.deepEqual(d.nodeDown, [{ node: "node-2", namespace: "default", name: "db-1", uid: "uid-default-db-1", condition: null }]);
  });

  test("is removed from a node that is merely Suspect again (fresh Lease)", () => {
    const now = at(500);
    const nd = { type: NODE_DOWN, status: "True", reason: "NodePartitioned", message: "x" };
    const back = { node: node("node-2", { ready: "Unknown", heartbeat: T0 }), lease: lease("node-2", at(498)) };
    const d = decide(now, [up("node-1", now), back, up("node-3", now)], { pods: [stsPod("db-1", { node: "node-2", conditions: [nd] })] });
    assert.equal(decisionOf(d, "node-2").verdict, "Healthy");
    assert.equal(d.nodeDown[0]?.condition, null);
  });

  test("stays while the node's NodeFence holds it, even when the node is healthy again", () => {
    const now = at(500);
    const pods = [stsPod("db-1", { node: "node-2" })];
    const d = decide(now, [up("node-1", now), up("node-2", now), up("node-3", now)], {
      pods,
      fences: [fence("node-2", { phase: "Released", policy: "default" })],
    });
    assert.equal(d.nodeDown[0]?.condition?.reason, "NodeFenced");
    assert.match(d.nodeDown[0]?.condition?.message ?? "", /node-2 is fenced/);
  });
});

describe("decideFleet: nodes that are not fenced", () => {
  const ns = () => threeNodes(at(1000)).ns;

  test("no guarded pods: NothingToProtect (plain and opted-out pods)", () => {
    const pods = [pod("web", { node: "node-2" }), stsPod("db-1", { node: "node-2", labels: { [GUARDED_LABEL]: "false" } })];
    const d = decide(at(1000), ns(), { pods });
    assert.equal(decisionOf(d, "node-2").verdict, "NothingToProtect");
    assert.deepEqual(d.create, []);
  });

  test("a Failed or Succeeded guarded pod on a partitioned node still needs the fence (the pod GC controller writes Failed itself)", () => {
    for (const phase of ["Failed", "Succeeded"]) {
      const d = decide(at(1000), ns(), { pods: [stsPod("db-3", { node: "node-2", phase })] });
      assert.notEqual(decisionOf(d, "node-2").verdict, "NothingToProtect", phase);
      assert.deepEqual(
        d.create.map((c) => c.node),
        ["node-2"],
        phase,
      );
    }
  });

  test("no pods at all: NothingToProtect", () => {
    assert.equal(decisionOf(decide(at(1000), ns()), "node-2").verdict, "NothingToProtect");
  });

  test("guarded pods switched off by the policy: NothingToProtect", () => {
    const policies = [policy("default", { guardedPods: { statefulSets: false, readWriteOnceVolumes: false } })];
    const d = decide(at(1000), ns(), { pods: [stsPod("db-1", { node: "node-2", claims: ["data"] })], policies });
    assert.equal(decisionOf(d, "node-2").verdict, "NothingToProtect");
  });

  test("no policy selects the node: NoPolicy", () => {
    const policies = [policy("dbs", { nodeSelector: { matchLabels: { role: "db" } } })];
    const d = decide(at(1000), ns(), { pods: [stsPod("db-1", { node: "node-2" })], policies });
    const x = decisionOf(d, "node-2");
    assert.equal(x.verdict, "NoPolicy");
    assert.equal(x.policy, undefined);
    assert.deepEqual(d.create, []);
    assert.deepEqual(d.policies.get("dbs")?.partitioned, [], "the policy does not see the node");
  });

  test("every guarded pod tolerates unreachable forever: Tolerated", () => {
    const forever = [{ key: UNREACHABLE_TAINT, operator: "Exists", effect: "NoExecute" }];
    const pods = [
      stsPod("db-1", { node: "node-2", tolerations: forever }),
      stsPod("db-2", { node: "node-2", tolerations: [{ operator: "Exists" }] }),
    ];
    const d = decide(at(100_000), threeNodes(at(100_000)).ns, { pods });
    assert.equal(decisionOf(d, "node-2").verdict, "Tolerated");
    assert.deepEqual(d.create, []);
    assert.equal(d.nodeDown.length, 2, "they still get NodeDown");
  });
});

describe("decideFleet: policy switches and guards", () => {
  test("paused: verdict Paused, saying what it would do; no create", () => {
    const { ns, pods } = threeNodes(at(100));
    const d = decide(at(100), ns, { pods, policies: [policy("default", { paused: true })] });
    assert.equal(decisionOf(d, "node-2").verdict, "Paused");
    assert.match(decisionOf(d, "node-2").message, /^FencingPolicy default is paused; would fence: no heartbeat since/);
    assert.deepEqual(d.create, []);
  });

  test("dryRun: verdict DryRun, listed in wouldFence; no create", () => {
    const { ns, pods } = threeNodes(at(100));
    const d = decide(at(100), ns, { pods, policies: [policy("default", { dryRun: true })] });
    assert.equal(decisionOf(d, "node-2").verdict, "DryRun");
    assert.match(decisionOf(d, "node-2").message, /^dry run: would fence: /);
    assert.deepEqual(d.policies.get("default")?.wouldFence, ["node-2"]);
    assert.deepEqual(d.create, []);
  });

  test("paused wins over dryRun and over holds", () => {
    const now = at(100);
    const d = decide(now, [down("node-1"), down("node-2"), up("node-3", now)], {
      pods: [stsPod("db-1", { node: "node-1" }), stsPod("db-2", { node: "node-2" })],
      policies: [policy("default", { paused: true, dryRun: true })],
    });
    assert.deepEqual(verdicts(d), { "node-1": "Paused", "node-2": "Paused", "node-3": "Healthy" });
    assert.deepEqual(
      d.policies.get("default")?.holds.map((h) => h.reason),
      ["TooManyUnhealthyNodes", "ClusterStorm"],
      "the holds are still reported (the policy selects every node: the cluster-wide guard holds too)",
    );
  });

  test("too many unhealthy nodes: every candidate Held with TooManyUnhealthyNodes; no create", () => {
    const now = at(100);
    const ns = [down("node-1"), down("node-2"), down("node-3"), up("node-4", now)];
    const pods = ["node-1", "node-2", "node-3"].map((n, i) => stsPod(`db-${i}`, { node: n }));
    const d = decide(now, ns, { pods });
    assert.deepEqual(verdicts(d), { "node-1": "Held", "node-2": "Held", "node-3": "Held", "node-4": "Healthy" });
    assert.match(decisionOf(d, "node-1").message, /3 of 4 nodes are unhealthy/);
    assert.deepEqual(d.create, []);
    const st = d.policies.get("default");
    // The policy selects every node: the cluster-wide guard holds too, reported after the policy's own.
    assert.deepEqual(
      st?.holds.map((h) => h.reason),
      ["TooManyUnhealthyNodes", "ClusterStorm"],
    );
    assert.deepEqual(st?.partitioned, ["node-1", "node-2", "node-3"]);
  });

  const withStorm = (status: "True" | "False", since: DateTime): FencingPolicy => ({
    ...policy("default"),
    status: {
      conditions: [
        {
          type: "StormGuard",
          status,
          reason: status === "True" ? "TooManyUnhealthyNodes" : "NoHold",
          message: "",
          lastTransitionTime: since.toISO()!,
        },
      ],
    },
  });

  test("a storm just lifted (status still says it holds): a node still silent waits, it is not fenced at once", () => {
    const now = at(100);
    const ns = [down("node-1"), up("node-2", now), up("node-3", now), up("node-4", now)];
    const pods = [stsPod("db-1", { node: "node-1" })];
    assert.equal(decisionOf(decide(now, ns, { pods }), "node-1").verdict, "Fence", "without a storm it would be fenced");
    const d = decide(now, ns, { pods, policies: [withStorm("True", at(20))] });
    assert.equal(decisionOf(d, "node-1").verdict, "Waiting");
    assert.match(decisionOf(d, "node-1").message, /storm guard lifts now/);
    assert.deepEqual(d.create, []);
  });

  test("after a storm, the wait of a node still silent counts from the storm's end, then it is fenced", () => {
    const ns = [down("node-1"), up("node-2", at(100)), up("node-3", at(100)), up("node-4", at(100))];
    const pods = [stsPod("db-1", { node: "node-1" })];
    const ended = withStorm("False", at(95));
    const waiting = decide(at(100), ns, { pods, policies: [ended] });
    assert.equal(decisionOf(waiting, "node-1").verdict, "Waiting");
    assert.match(decisionOf(waiting, "node-1").message, /through a storm that ended at/);
    // fenceAfterSeconds 60 (the default), counted from the storm's end at 95 s: due at 155 s, not at 60 s.
    const world = (t: DateTime) => [down("node-1"), up("node-2", t), up("node-3", t), up("node-4", t)];
    assert.equal(decisionOf(decide(at(154), world(at(154)), { pods, policies: [ended] }), "node-1").verdict, "Waiting");
    assert.equal(decisionOf(decide(at(155), world(at(155)), { pods, policies: [ended] }), "node-1").verdict, "Fence");
  });

  test("a storm that ended before the node went silent changes nothing", () => {
    const now = at(100);
    const ns = [down("node-1"), up("node-2", now), up("node-3", now), up("node-4", now)];
    const d = decide(now, ns, { pods: [stsPod("db-1", { node: "node-1" })], policies: [withStorm("False", T0.minus({ seconds: 30 }))] });
    assert.equal(decisionOf(d, "node-1").verdict, "Fence");
  });

  test("not-Ready nodes that still heartbeat count as unhealthy for the storm guard", () => {
    const now = at(100);
    const notReady = (name: string) => ({ node: node(name, { ready: "False", heartbeat: now }), lease: lease(name, now) });
    const ns = [down("node-1"), notReady("node-2"), notReady("node-3"), up("node-4", now)];
    const d = decide(now, ns, { pods: [stsPod("db-1", { node: "node-1" })] });
    assert.equal(decisionOf(d, "node-1").verdict, "Held");
    assert.deepEqual(d.policies.get("default")?.partitioned, ["node-1"]);
  });

  test("waitForNodeController: silent nodes still Ready=True (the node controller has not agreed yet) count as unhealthy for the storm guard", () => {
    const now = at(100);
    const silentReady = (name: string) => ({ node: node(name, { ready: "True", heartbeat: T0 }), lease: lease(name, T0) });
    const ns = [down("node-1"), silentReady("node-2"), silentReady("node-3"), up("node-4", now)];
    const policies = [policy("default", { detection: { waitForNodeController: true } })];
    const d = decide(now, ns, { pods: [stsPod("db-1", { node: "node-1" })], policies });
    assert.equal(decisionOf(d, "node-2").verdict, "Healthy", "not partitioned itself");
    assert.equal(decisionOf(d, "node-1").verdict, "Held");
    assert.match(decisionOf(d, "node-1").message, /3 of 4 nodes are unhealthy \(node-1, node-2, node-3\)/);
  });

  test("silent nodes whose Leases expired are partitioned by them, and the storm guard holds them all (Ready still True)", () => {
    const now = at(100);
    const silentReady = (name: string) => ({ node: node(name, { ready: "True", heartbeat: T0 }), lease: lease(name, T0) });
    const ns = [down("node-1"), silentReady("node-2"), silentReady("node-3"), up("node-4", now)];
    const pods = ["node-1", "node-2", "node-3"].map((n, i) => stsPod(`db-${i}`, { node: n }));
    const d = decide(now, ns, { pods, leaseSilentMs: watching(now) });
    assert.equal(decisionOf(d, "node-2").health.state, "Partitioned");
    assert.equal(decisionOf(d, "node-2").health.partitionedBy, "Lease");
    assert.equal(decisionOf(d, "node-1").health.partitionedBy, "NodeController");
    for (const n of ["node-1", "node-2", "node-3"]) assert.equal(decisionOf(d, n).verdict, "Held", n);
    assert.match(decisionOf(d, "node-2").message, /3 of 4 nodes are unhealthy \(node-1, node-2, node-3\)/);
    assert.deepEqual(d.create, []);
  });

  test("a count limit: maxUnhealthyNodes 3 lets three silent nodes of four be fenced (the cluster-wide limit raised too)", () => {
    const now = at(100);
    const ns = [down("node-1"), down("node-2"), down("node-3"), up("node-4", now)];
    const pods = ["node-1", "node-2", "node-3"].map((n, i) => stsPod(`db-${i}`, { node: n }));
    const policies = [policy("default", { guards: { maxUnhealthyNodes: 3, maxConcurrentFences: 3 } })];
    // These are also three of the cluster's four nodes: more than the cluster-wide default (50% = 2) holds them.
    assert.deepEqual(decide(now, ns, { pods, policies }).create, []);
    const d = decide(now, ns, { pods, policies, cluster: 3 });
    assert.deepEqual(d.create.map((c) => c.node).sort(), ["node-1", "node-2", "node-3"]);
  });

  test("stale watches: Held with WatchesStale", () => {
    const { ns, pods } = threeNodes(at(100));
    const d = decide(at(100), ns, { pods, watch: 61 });
    assert.equal(decisionOf(d, "node-2").verdict, "Held");
    assert.match(decisionOf(d, "node-2").message, /watches have been silent/);
    assert.deepEqual(d.create, []);
  });

  test("a silent zone is held, and does not hold back a dead node in another zone", () => {
    const now = at(100);
    const ns = [
      down("a-1", { [ZONE]: "a" }),
      down("a-2", { [ZONE]: "a" }),
      down("b-1", { [ZONE]: "b" }),
      up("b-2", now, { [ZONE]: "b" }),
      up("b-3", now, { [ZONE]: "b" }),
      up("b-4", now, { [ZONE]: "b" }),
    ];
    const pods = ["a-1", "a-2", "b-1"].map((n) => stsPod(`db-${n}`, { node: n }));
    const policies = [policy("default", { guards: { maxConcurrentFences: 3 } })];
    const d = decide(now, ns, { pods, policies });
    assert.equal(decisionOf(d, "a-1").verdict, "Held");
    assert.equal(decisionOf(d, "a-2").verdict, "Held");
    assert.match(decisionOf(d, "a-1").message, /every node of topology\.kubernetes\.io\/zone=a \(2\) is unhealthy/);
    assert.equal(decisionOf(d, "b-1").verdict, "Fence", `b-1 is alone in zone b: ${decisionOf(d, "b-1").message}`);
    assert.deepEqual(
      d.create.map((c) => c.node),
      ["b-1"],
    );
    assert.deepEqual(
      d.policies.get("default")?.holds.map((h) => h.reason),
      ["ZonePartitioned"],
      "the zone hold is reported once",
    );
  });
});

describe("decideFleet: concurrency and priority", () => {
  const now = at(100);
  const four = () => [down("node-a"), down("node-b"), up("node-c", now), up("node-d", now)];

  test("maxConcurrentFences 1 with two candidates: the node hosting the higher-priority pod is fenced, the other Queued", () => {
    const pods = [
      stsPod("low-0", { node: "node-a", priority: 100 }),
      stsPod("low-1", { node: "node-a", priority: 100 }),
      stsPod("high-0", { node: "node-b", priority: 1000 }),
      stsPod("ignored", { node: "node-a", priority: 5000, labels: { [GUARDED_LABEL]: "false" } }), // not guarded: does not count
    ];
    const d = decide(now, four(), { pods });
    assert.deepEqual(
      d.create.map((c) => c.node),
      ["node-b"],
    );
    const a = decisionOf(d, "node-a");
    assert.equal(a.verdict, "Queued");
    assert.equal(a.message, "waiting for a fence slot (maxConcurrentFences 1, 0 in flight)");
    assert.deepEqual(d.policies.get("default")?.queued, ["node-a"]);
  });

  test("maxConcurrentFences 2: both are fenced", () => {
    const pods = [stsPod("a", { node: "node-a" }), stsPod("b", { node: "node-b" })];
    const d = decide(now, four(), { pods, policies: [policy("default", { guards: { maxConcurrentFences: 2 } })] });
    assert.deepEqual(d.create.map((c) => c.node).sort(), ["node-a", "node-b"]);
  });

  test("equal priority: the node whose pods are at their disruption limit goes first", () => {
    const pods = [stsPod("a", { node: "node-a", labels: { app: "a" } }), stsPod("b", { node: "node-b", labels: { app: "b" } })];
    const pdbs = [pdb("a", { app: "a" }, 1), pdb("b", { app: "b" }, 0), pdb("b-elsewhere", { app: "b" }, 0, "other-ns")];
    assert.deepEqual(
      decide(now, four(), { pods, pdbs }).create.map((c) => c.node),
      ["node-b"],
    );
    // Without budgets the tie falls to the name.
    assert.deepEqual(
      decide(now, four(), { pods }).create.map((c) => c.node),
      ["node-a"],
    );
  });

  test("equal priority and budgets: the node partitioned longest goes first", () => {
    const later = at(200);
    const ns = [down("node-a", {}, at(30)), down("node-b", {}, T0), up("node-c", later), up("node-d", later)];
    const pods = [stsPod("a", { node: "node-a" }), stsPod("b", { node: "node-b" })];
    assert.deepEqual(
      decide(later, ns, { pods }).create.map((c) => c.node),
      ["node-b"],
    );
  });

  test("fences in flight take the slots: Queued, and counted in the policy state", () => {
    for (const phase of [undefined, "Pending", "Fencing"] as const) {
      const inFlight = fence("node-z", phase ? { phase, policy: "default" } : undefined, { policy: "default" });
      const ns = [...four(), down("node-z"), up("node-e", now)];
      const d = decide(now, ns, { pods: [stsPod("b", { node: "node-b" })], fences: [inFlight] });
      assert.equal(decisionOf(d, "node-b").verdict, "Queued", `with a ${phase ?? "new"} fence`);
      assert.match(decisionOf(d, "node-b").message, /1 in flight/);
      assert.equal(d.policies.get("default")?.activeFences, 1);
    }
  });

  test("fences past Fencing, or of another policy, do not take slots", () => {
    const ns = [...four(), down("node-z"), up("node-e", now)];
    for (const f of [
      fence("node-z", { phase: "Releasing", policy: "default" }),
      fence("node-z", { phase: "Failed", policy: "default" }),
      fence("node-z", { phase: "Fencing", policy: "other" }),
    ]) {
      const d = decide(now, ns, { pods: [stsPod("b", { node: "node-b" })], fences: [f] });
      assert.equal(decisionOf(d, "node-b").verdict, "Fence", `${f.status?.phase} of ${f.status?.policy}`);
      assert.equal(d.policies.get("default")?.activeFences, 0);
    }
  });
});

describe("decideFleet: existing NodeFences", () => {
  const now = at(1000);
  const { ns, pods } = threeNodes(now);

  test("a NodeFence in any holding phase: HasFence, no new fence", () => {
    const phases: (NodeFenceStatus["phase"] | undefined)[] = [
      undefined,
      "Pending",
      "Fencing",
      "Fenced",
      "Releasing",
      "Released",
      "Failed",
      "Unfencing",
    ];
    for (const phase of phases) {
      const d = decide(now, ns, { pods, fences: [fence("node-2", phase ? { phase, policy: "default" } : undefined)] });
      const x = decisionOf(d, "node-2");
      assert.equal(x.verdict, "HasFence", String(phase));
      assert.equal(x.message, `NodeFence node-2 is ${phase ?? "new"}`);
      assert.deepEqual(d.create, []);
    }
  });

  test("an Unfenced NodeFence of an earlier episode is replaced", () => {
    const old = fence("node-2", { phase: "Unfenced", policy: "default" });
    const d = decide(now, ns, { pods, fences: [old] });
    assert.equal(decisionOf(d, "node-2").verdict, "Fence");
    assert.equal(d.create[0]?.replaces, old);
  });

  test("an Unfenced NodeFence does not keep NodeDown on a healthy node", () => {
    const nd = { type: NODE_DOWN, status: "True", reason: "NodeFenced", message: "node node-2 is fenced" };
    const d = decide(now, [up("node-1", now), up("node-2", now)], {
      pods: [stsPod("db-1", { node: "node-2", conditions: [nd] })],
      fences: [fence("node-2", { phase: "Unfenced" })],
    });
    assert.equal(d.nodeDown[0]?.condition, null);
  });
});

describe("decideFleet: nextCheck", () => {
  test("is the earliest time a verdict would change: a wait ending before any heartbeat goes stale", () => {
    const now = at(80);
    const { ns, pods } = threeNodes(now); // up nodes go stale at now+35 = T0+115; node-2 is due at T0+100
    assert.equal(ms(decide(now, ns, { pods }).nextCheck), ms(at(100)));
  });

  test("is the earliest time a verdict would change: a heartbeat going stale before a wait ends", () => {
    const now = at(80);
    const early = { node: node("node-1", { ready: "True", heartbeat: at(45) }), lease: lease("node-1", at(45)) }; // stale at T0+85
    const pods = [stsPod("db-1", { node: "node-2" })];
    assert.equal(ms(decide(now, [early, down("node-2"), up("node-3", now)], { pods }).nextCheck), ms(at(85)));
  });

  test("takes the earliest wait among several waiting nodes", () => {
    const now = at(80);
    const tol = (s: number) => [{ key: UNREACHABLE_TAINT, operator: "Exists", effect: "NoExecute", tolerationSeconds: s }];
    const pods = [stsPod("a", { node: "node-a", tolerations: tol(300) }), stsPod("b", { node: "node-b", tolerations: tol(45) })];
    const ns = [down("node-a"), down("node-b"), up("node-c", now), up("node-d", now)];
    assert.equal(ms(decide(now, ns, { pods }).nextCheck), ms(at(85)));
  });

  test("nothing changes by time alone: undefined", () => {
    const d = decide(at(1000), [down("node-1"), down("node-2")], {
      pods: [stsPod("a", { node: "node-1" })],
      fences: [fence("node-2", { phase: "Fencing", policy: "default" })],
    });
    assert.equal(decisionOf(d, "node-1").verdict, "Held");
    assert.equal(d.nextCheck, undefined);
  });
});

describe("decideFleet: several policies", () => {
  test("a node is decided by the first matching policy by name, with that policy's timing", () => {
    const now = at(70);
    const ns = [down("db-1", { role: "db" }), up("db-2", now, { role: "db" }), up("db-3", now, { role: "db" }), up("web-1", now)];
    const policies = [
      policy("z-catch-all", { detection: { fenceAfterSeconds: 600 } }),
      policy("a-dbs", { nodeSelector: { matchLabels: { role: "db" } }, detection: { heartbeatTimeoutSeconds: 20, fenceAfterSeconds: 30 } }),
    ];
    const d = decide(now, ns, { pods: [stsPod("db-1", { node: "db-1" })], policies });
    assert.deepEqual(
      d.create.map((c) => [c.node, c.policy]),
      [["db-1", "a-dbs"]],
      "partitioned at T0+20, due at T0+50",
    );
    assert.equal(decisionOf(d, "web-1").policy, "z-catch-all");
    assert.deepEqual(d.policies.get("a-dbs")?.partitioned, ["db-1"]);
    assert.deepEqual(d.policies.get("z-catch-all")?.partitioned, ["db-1"], "the catch-all selects it too");
  });
});

describe("decideFleet: the shipped defaults on Kubernetes' own timings", () => {
  // Kubelets renew their 40 s Lease every 10 s; the node controller says Ready=Unknown 50 s after the last one;
  // every pod without an unreachable toleration of its own got the injected 300 s one.
  const injected = [{ key: UNREACHABLE_TAINT, operator: "Exists", effect: "NoExecute", tolerationSeconds: 300 }];
  const pods = [stsPod("db-1", { node: "node-2", tolerations: injected })];
  const waiting = [basePolicy("default", { detection: { waitForNodeController: true } })];
  const defaults = [basePolicy("default")];
  /** node-2's last renewal at T0; Ready stays True until the node controller's 50 s grace has passed. */
  const world = (now: DateTime) => [
    up("node-1", now),
    {
      node: node("node-2", { ready: now >= at(50) ? "Unknown" : "True", heartbeat: T0 }),
      lease: lease("node-2", T0),
    },
    up("node-3", now),
  ];
  const verdictAt = (s: number, policies = defaults) =>
    decisionOf(decide(at(s), world(at(s)), { pods, policies, leaseSilentMs: watching(at(s)) }), "node-2").verdict;

  test("a node that missed one, two or three renewals is never fenced", () => {
    for (const s of [15, 25, 35, 39.999]) assert.notEqual(verdictAt(s), "Fence", `at T0+${s}`);
  });

  test("a dead node is fenced 40 s after its last renewal (its Lease expired; 30 s timeout + 10 s), before the node controller's Ready=Unknown", () => {
    assert.equal(verdictAt(40), "Fence");
    const d = decide(at(40), world(at(40)), { pods, policies: defaults, leaseSilentMs: watching(at(40)) });
    const x = decisionOf(d, "node-2");
    assert.equal(x.health.ready, "True", "the node controller has not said Unknown yet");
    assert.equal(x.health.partitionedBy, "Lease");
    assert.equal(ms(x.health.partitionedSince), ms(at(30)));
    assert.match(x.message, /waited 10 s/);
    assert.equal(
      d.create[0]?.reason,
      "no heartbeat since 2026-01-01T00:00:00Z (Ready=True); partitioned because its Lease was not renewed for its leaseDurationSeconds 40, as this operator observed (renewTime 2026-01-01T00:00:00.000Z, on the node's clock); 1 guarded pod(s) waited 10 s",
    );
  });

  test("waitForNodeController: a node that missed one, two or four renewals is never fenced; fenced 50 s after its last renewal, once Ready=Unknown", () => {
    for (const s of [15, 25, 40, 45, 49]) assert.notEqual(verdictAt(s, waiting), "Fence", `at T0+${s}`);
    assert.equal(verdictAt(50, waiting), "Fence");
    const d = decide(at(50), world(at(50)), { pods, policies: waiting, leaseSilentMs: watching(at(50)) });
    assert.equal(decisionOf(d, "node-2").health.partitionedBy, "NodeController");
    assert.match(d.create[0]?.reason ?? "", /partitioned because the node controller marked it Ready=Unknown/);
  });

  test("a toleration the pod's author wrote still sets the wait", () => {
    const authored = [stsPod("db-1", { node: "node-2", tolerations: [{ ...injected[0]!, tolerationSeconds: 120 }] })];
    assert.equal(decisionOf(decide(at(100), world(at(100)), { pods: authored, policies: defaults }), "node-2").verdict, "Waiting");
    assert.equal(decisionOf(decide(at(160), world(at(160)), { pods: authored, policies: defaults }), "node-2").verdict, "Fence");
  });
});

describe("decideFleet: nodes cut off together go silent up to a renewal apart", () => {
  test("the storm guard counts a node that missed two renewals, so the first silent node is not fenced before the others count", () => {
    // The lab's e2e timings: 8 s Leases renewed every 2 s, heartbeatTimeoutSeconds 6, fenceAfterSeconds 2. Three of
    // four nodes cut at once; node-1 had renewed 3 s before the others (and still showed Ready=Unknown from earlier).
    const p = [basePolicy("default", { detection: { heartbeatTimeoutSeconds: 6, fenceAfterSeconds: 2, honorPodTolerations: false } })];
    const pods = ["node-1", "node-2", "node-3", "node-4"].map((n, i) => stsPod(`db-${i}`, { node: n }));
    const at8 = at(8);
    const ns: N[] = [
      { node: node("node-1", { ready: "Unknown", heartbeat: T0 }), lease: lease("node-1", T0, 8) },
      { node: node("node-2", { ready: "True", heartbeat: at(3) }), lease: lease("node-2", at(3), 8) },
      { node: node("node-3", { ready: "True", heartbeat: at(3) }), lease: lease("node-3", at(3), 8) },
      { node: node("node-4", { ready: "True", heartbeat: at(7) }), lease: lease("node-4", at(7), 8) },
    ];
    const d = decide(at8, ns, { pods, policies: p });
    // node-1 is due (partitioned at 6 s, + 2 s); node-2 and node-3 are 5 s without a heartbeat: not silent (6 s) yet,
    // but they missed two renewals.
    assert.notEqual(decisionOf(d, "node-1").verdict, "Fence", decisionOf(d, "node-1").message);
    assert.deepEqual(d.create, []);
    assert.ok(
      d.policies.get("default")?.holds.some((h) => /3 of 4 nodes are unhealthy/.test(h.message)),
      JSON.stringify(d.policies.get("default")?.holds),
    );
  });
});
