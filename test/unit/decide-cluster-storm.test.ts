// The cluster-wide storm guard (issue 41 item 2, docs/safety.md §6): a policy's own storm guard counts only the nodes
// it selects, so a one-node policy never trips it. Many nodes silent together anywhere in the cluster — selected by
// another policy or by none — hold every policy's fencing back, and when that storm ends a node still silent waits
// its whole wait again from the storm's end, as after a policy's own storm.
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import type { V1Lease, V1Node, V1Pod } from "@kubernetes/client-node";
import type { DateTime } from "luxon";
import type { FencingPolicy, FencingPolicySpec, NodeFence } from "../../src/api/v1alpha1.ts";
import { stormGuardCondition } from "../../src/controllers/node-health.ts";
import { decideFleet, podsByNode, type FleetDecision } from "../../src/decide/fleet.ts";
import { clusterStorm } from "../../src/decide/storm-guard.ts";
import { setCondition } from "../../src/kube/conditions.ts";
import type { Condition } from "../../src/kube/conditions.ts";
import { T0, at, fence, fenceMap, lease, leases, node, policy as basePolicy, pvcMap, stsPod } from "./decide-fixtures.ts";

// As in decide-fleet.test.ts: silent since T0, partitioned from T0+40, due for fencing at T0+100.
const policy = (name: string, spec: Partial<FencingPolicySpec> = {}) =>
  basePolicy(name, { ...spec, detection: { heartbeatTimeoutSeconds: 40, fenceAfterSeconds: 60, ...spec.detection } });
/** A policy selecting the nodes labelled role=<role>. */
const rolePolicy = (role: string, spec: Partial<FencingPolicySpec> = {}) =>
  policy(role, { nodeSelector: { matchLabels: { role } }, ...spec });

interface N {
  node: V1Node;
  lease: V1Lease;
}
const up = (name: string, now: DateTime, role?: string): N => ({
  node: node(name, { ready: "True", heartbeat: now.minus({ seconds: 5 }), labels: role ? { role } : {} }),
  lease: lease(name, now.minus({ seconds: 5 })),
});
const down = (name: string, role?: string): N => ({
  node: node(name, { ready: "Unknown", heartbeat: T0, labels: role ? { role } : {} }),
  lease: lease(name, T0),
});

function decide(
  now: DateTime,
  ns: N[],
  w: { pods: V1Pod[]; policies: FencingPolicy[]; fences?: NodeFence[]; cluster?: number | string },
): FleetDecision {
  const d = decideFleet({
    now,
    nodes: ns.map((x) => x.node),
    leases: leases(...ns.map((x) => x.lease)),
    pods: podsByNode(w.pods),
    pvcs: pvcMap(),
    pdbs: [],
    policies: w.policies,
    fences: fenceMap(...(w.fences ?? [])),
    watchStalenessSeconds: 0,
    ...(w.cluster !== undefined ? { clusterMaxUnhealthyNodes: w.cluster } : {}),
  });
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
const reasons = (d: FleetDecision, p: string) => d.policies.get(p)?.holds.map((h) => h.reason);

/** The policies as the health controller leaves them after a pass: each one's StormGuard condition written. */
function afterPass(policies: FencingPolicy[], d: FleetDecision, now: DateTime): FencingPolicy[] {
  return policies.map((p) => {
    const s = d.policies.get(p.metadata?.name ?? "");
    assert.ok(s);
    const conditions = setCondition(p.status?.conditions as Condition[] | undefined, stormGuardCondition(s, 1), now.toISO()!);
    return { ...p, status: { ...p.status, conditions } } as FencingPolicy;
  });
}

/**
 * Ten nodes: db-1 alone in policy "db" (a dedicated database node); web-1..web-3 in policy "web"; other-1..other-6 in
 * no policy. Silent (since T0): db-1, and, with `storm`, web-1 and other-1..other-4: six of ten.
 */
function cluster(now: DateTime, storm: boolean) {
  const ns = [
    down("db-1", "db"),
    storm ? down("web-1", "web") : up("web-1", now, "web"),
    up("web-2", now, "web"),
    up("web-3", now, "web"),
    ...[1, 2, 3, 4, 5, 6].map((k) => (storm && k <= 4 ? down(`other-${k}`) : up(`other-${k}`, now))),
  ];
  const pods = [stsPod("db-0", { node: "db-1" }), stsPod("web-0", { node: "web-1" }), stsPod("x-0", { node: "other-1" })];
  return { ns, pods, policies: [rolePolicy("db"), rolePolicy("web")] };
}

describe("decideFleet: the cluster-wide storm guard", () => {
  test("a one-node policy's silent node is Held while many other nodes (of another policy, of none) are silent too; Fence when they are healthy", () => {
    const now = at(100);
    const calm = cluster(now, false);
    const alone = decide(now, calm.ns, calm);
    assert.equal(decisionOf(alone, "db-1").verdict, "Fence", decisionOf(alone, "db-1").message);

    const storm = cluster(now, true);
    const d = decide(now, storm.ns, storm);
    assert.equal(decisionOf(d, "db-1").verdict, "Held", decisionOf(d, "db-1").message);
    assert.match(
      decisionOf(d, "db-1").message,
      /^6 of the cluster's 10 nodes are silent \(db-1, other-1, other-2, other-3, other-4, web-1\), more than the operator's --cluster-max-unhealthy-nodes 50% = 5/,
    );
    // web-1 is one of its policy's three nodes (its own guard lets one go): the cluster's storm holds it too.
    assert.equal(decisionOf(d, "web-1").verdict, "Held");
    assert.deepEqual(d.create, []);
    // Reported on every policy (its StormGuard condition and Event), the ones without a node due included.
    assert.deepEqual(reasons(d, "db"), ["ClusterStorm"]);
    assert.deepEqual(reasons(d, "web"), ["ClusterStorm"]);
    assert.equal(stormGuardCondition(d.policies.get("db")!, 1).reason, "ClusterStorm");
  });

  test("a NodeFence made by a person is not held: the node's decision is HasFence, as under a policy's own storm", () => {
    const now = at(100);
    const storm = cluster(now, true);
    const manual = fence("other-1", { phase: "Pending" }, { origin: "Manual" });
    const d = decide(now, storm.ns, { ...storm, fences: [manual] });
    assert.equal(decisionOf(d, "db-1").verdict, "Held");
    assert.equal(decisionOf(d, "other-1").verdict, "HasFence");
  });

  test("a 3-node cluster: one dead node is fenced, two are a storm (held, whatever policies select them); 2 nodes: one is fenced", () => {
    const now = at(100);
    const policies = [rolePolicy("db"), rolePolicy("app")];
    const pods = [stsPod("db-0", { node: "db-1" }), stsPod("app-0", { node: "app-1" })];
    // One of three silent: 1 ≤ 50% of 3 (= 1, at least 1).
    const one = decide(now, [down("db-1", "db"), up("app-1", now, "app"), up("node-3", now)], { pods, policies });
    assert.equal(decisionOf(one, "db-1").verdict, "Fence", decisionOf(one, "db-1").message);
    assert.deepEqual(reasons(one, "db"), []);
    // Two of three, each alone in its policy (or in none): neither policy's own guard sees more than one.
    const two = decide(now, [down("db-1", "db"), up("app-1", now, "app"), down("node-3")], { pods, policies });
    assert.equal(decisionOf(two, "db-1").verdict, "Held");
    assert.match(decisionOf(two, "db-1").message, /^2 of the cluster's 3 nodes are silent \(db-1, node-3\)/);
    const both = decide(now, [down("db-1", "db"), down("app-1", "app"), up("node-3", now)], { pods, policies });
    assert.deepEqual([decisionOf(both, "db-1").verdict, decisionOf(both, "app-1").verdict], ["Held", "Held"]);
    assert.deepEqual(both.create, []);
    // The operator's limit, raised: the same two are fenced.
    const raised = decide(now, [down("db-1", "db"), down("app-1", "app"), up("node-3", now)], {
      pods,
      policies,
      cluster: "100%",
    });
    assert.deepEqual(raised.create.map((c) => c.node).sort(), ["app-1", "db-1"]);
    // Two nodes, one silent: fenced.
    const pair = decide(now, [down("db-1", "db"), up("node-2", now)], { pods, policies });
    assert.equal(decisionOf(pair, "db-1").verdict, "Fence");
  });

  test("nodes cut at one moment go silent up to a renewal apart: on the first pass, those that missed two renewals count cluster-wide", () => {
    // The lab's e2e timings: 8 s Leases renewed every 2 s, heartbeatTimeoutSeconds 6, fenceAfterSeconds 2. Four of
    // five nodes cut at once: db-1 (alone in its policy) had renewed last at T0 and is due at 8 s; the other three
    // (one alone in another policy, two in none) renewed at 3 s: at 8 s they are not silent yet, but lag.
    const detection = { heartbeatTimeoutSeconds: 6, fenceAfterSeconds: 2, honorPodTolerations: false };
    const policies = [
      basePolicy("db", { nodeSelector: { matchLabels: { role: "db" } }, detection }),
      basePolicy("app", { nodeSelector: { matchLabels: { role: "app" } }, detection }),
    ];
    const pods = [stsPod("db-0", { node: "db-1" }), stsPod("app-0", { node: "app-1" })];
    const lagging = (name: string, role?: string): N => ({
      node: node(name, { ready: "True", heartbeat: at(3), labels: role ? { role } : {} }),
      lease: lease(name, at(3), 8),
    });
    const ns: N[] = [
      { node: node("db-1", { ready: "Unknown", heartbeat: T0, labels: { role: "db" } }), lease: lease("db-1", T0, 8) },
      lagging("app-1", "app"),
      lagging("node-3"),
      lagging("node-4"),
      { node: node("node-5", { ready: "True", heartbeat: at(7) }), lease: lease("node-5", at(7), 8) },
    ];
    const d = decide(at(8), ns, { pods, policies });
    // Only db-1 is silent (1 of 5): counted on silence alone, db-1 would be fenced before the others count.
    assert.deepEqual(
      d.decisions.filter((x) => x.health.silent).map((x) => x.node),
      ["db-1"],
    );
    assert.equal(decisionOf(d, "db-1").verdict, "Held", decisionOf(d, "db-1").message);
    assert.match(decisionOf(d, "db-1").message, /^4 of the cluster's 5 nodes are silent \(app-1, db-1, node-3, node-4\)/);
    assert.deepEqual(d.create, []);
  });

  test("when the cluster's storm ends, a node still silent waits its whole wait again, from the storm's end", () => {
    const storm = cluster(at(100), true);
    let policies = storm.policies;
    // 100 s: db-1 is due (partitioned at 40 s, + 60 s), but six of ten nodes are silent.
    const held = decide(at(100), storm.ns, { ...storm, policies });
    assert.equal(decisionOf(held, "db-1").verdict, "Held");
    policies = afterPass(policies, held, at(100));
    // 130 s: the others heartbeat again; db-1 is still silent. The storm lifts now: it is not fenced at once.
    const calm = (t: DateTime) => cluster(t, false);
    const lifting = decide(at(130), calm(at(130)).ns, { ...calm(at(130)), policies });
    assert.equal(decisionOf(lifting, "db-1").verdict, "Waiting", decisionOf(lifting, "db-1").message);
    assert.match(decisionOf(lifting, "db-1").message, /storm guard lifts now/);
    assert.deepEqual(lifting.create, []);
    policies = afterPass(policies, lifting, at(130));
    const cond = policies[0]!.status?.conditions?.find((c) => c.type === "StormGuard");
    assert.deepEqual([cond?.status, cond?.lastTransitionTime], ["False", at(130).toISO()]);
    // Its 60 s wait counts from 130 s: waiting at 189 s, fenced at 190 s.
    const waiting = decide(at(189), calm(at(189)).ns, { ...calm(at(189)), policies });
    assert.equal(decisionOf(waiting, "db-1").verdict, "Waiting");
    assert.match(decisionOf(waiting, "db-1").message, /through a storm that ended at/);
    const due = decide(at(190), calm(at(190)).ns, { ...calm(at(190)), policies });
    assert.equal(decisionOf(due, "db-1").verdict, "Fence", decisionOf(due, "db-1").message);
  });
});

describe("clusterStorm", () => {
  const h = (name: string, o: { silent?: boolean; lagging?: boolean; ready?: string; heard?: boolean } = {}) => ({
    name,
    silent: o.silent ?? false,
    lagging: o.lagging ?? false,
    ready: o.ready ?? "True",
    heard: o.heard ?? false,
  });
  test("counts silent, lagging and Ready=Unknown nodes; not nodes that say Ready=False themselves", () => {
    const nodes = [h("a", { silent: true }), h("b", { lagging: true }), h("c", { ready: "Unknown" }), h("d", { ready: "False" }), h("e")];
    assert.match(clusterStorm(nodes, 2)?.message ?? "", /^3 of the cluster's 5 nodes are silent \(a, b, c\), more than .* 2 = 2/);
    assert.equal(clusterStorm(nodes, 3), undefined);
    assert.equal(clusterStorm(nodes, "60%"), undefined);
    assert.equal(clusterStorm(nodes, undefined)?.reason, "ClusterStorm", "50% of 5 = 2");
  });
  test("explained silence is not counted (fresh review): nodes confirmed fenced, and nodes their cloud shut down", () => {
    const now = at(100);
    const db = rolePolicy("db");
    const pods = [stsPod("db-0", { node: "db-1" })];
    // 4 nodes: db-1 newly silent, two others long fenced by Stockade, one up.
    const ns = [down("db-1", "db"), down("f-1"), down("f-2"), up("u-1", now)];
    const fenced = [fence("f-1", { phase: "Released" }), fence("f-2", { phase: "Fenced" })];
    const d = decide(now, ns, { pods, policies: [db], fences: fenced });
    assert.equal(decisionOf(d, "db-1").verdict, "Fence", decisionOf(d, "db-1").message);
    // The same two silent nodes, but with no fence: three of four silent, a storm.
    assert.equal(decisionOf(decide(now, ns, { pods, policies: [db] }), "db-1").verdict, "Held");
    // A stopped pool: its nodes carry the cloud's shutdown taint.
    const stopped = ns.map((x) =>
      x.node.metadata?.name?.startsWith("f-")
        ? { ...x, node: { ...x.node, spec: { taints: [{ key: "node.cloudprovider.kubernetes.io/shutdown", effect: "NoSchedule" }] } } }
        : x,
    );
    assert.equal(decisionOf(decide(now, stopped, { pods, policies: [db] }), "db-1").verdict, "Fence");
  });

  test("a node this replica heard renew lately is not counted, however old its renewTime (a clock behind)", () => {
    const nodes = [h("a", { silent: true }), h("skew", { silent: true, lagging: true, heard: true }), h("c")];
    assert.equal(clusterStorm(nodes, undefined), undefined, "1 of 3, not 2");
    assert.ok(clusterStorm([h("a", { silent: true }), h("skew", { silent: true, lagging: true }), h("c")], undefined));
  });

  test("at least one node may be silent, however small the cluster", () => {
    assert.equal(clusterStorm([h("a", { silent: true })], undefined), undefined);
    assert.equal(clusterStorm([h("a", { silent: true }), h("b")], "10%"), undefined);
    assert.ok(clusterStorm([h("a", { silent: true }), h("b", { silent: true })], undefined));
  });
});
