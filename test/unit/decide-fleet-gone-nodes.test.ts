// Issue 41 item 6: guarded pods bound to a Node that no longer exists. The fleet decision fences the machine of a Node
// this process saw deleted (its last-seen labels pick the policy), with the same guards as any node, its wait counted
// from the last sign of the machine; a Node it never saw is reported on the policy for a person (docs/safety.md §3).
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import type { V1Lease, V1Node, V1Pod } from "@kubernetes/client-node";
import type { DateTime } from "luxon";
import type { FencingPolicy, NodeFence } from "../../src/api/v1alpha1.ts";
import { decideFleet, podsByNode, type FleetDecision, type GoneNode } from "../../src/decide/fleet.ts";
import { at, fence, fenceMap, lease, leases, node, pdb, policy, pvcMap, stsPod } from "./decide-fixtures.ts";
import { UNREACHABLE_TAINT } from "../../src/decide/forgiveness.ts";
import { missingNodesCondition } from "../../src/controllers/node-health.ts";

const DB = { pool: "db" };
const dbPolicy = (spec: Parameters<typeof policy>[1] = {}) => policy("db", { nodeSelector: { matchLabels: DB }, ...spec });

/** The Node as last seen: in the db pool, with its cloud instance. */
const lastSeen = (name: string, labels: Record<string, string> = DB): V1Node => {
  const n = node(name, { ready: "True", heartbeat: at(0), labels });
  n.spec = { ...n.spec, providerID: `aws:///eu-west-1a/i-${name}` };
  return n;
};

/** A live node that heartbeats. */
const up = (name: string, now: DateTime, labels: Record<string, string> = DB) => ({
  node: node(name, { ready: "True", heartbeat: now.minus({ seconds: 5 }), labels }),
  lease: lease(name, now.minus({ seconds: 5 })),
});

/**
 * A remembered gone Node, no sign of its machine for `quietS` seconds, its Lease collected with it. With the default
 * policy (heartbeat timeout 30 s, lease duration 40 s, fenceAfterSeconds 10) it is silent after 40 s, due after 50 s.
 */
const goneFor = (name: string, quietS: number, o: Partial<GoneNode> = {}): GoneNode => ({
  name,
  lastSeen: lastSeen(name),
  quietMs: quietS * 1000,
  ...o,
});

interface World {
  live?: { node: V1Node; lease: V1Lease }[];
  gone: GoneNode[];
  pods?: V1Pod[];
  policies?: FencingPolicy[];
  fences?: NodeFence[];
  cluster?: number | string;
}

function decide(now: DateTime, w: World): FleetDecision {
  const live = w.live ?? [];
  return decideFleet({
    now,
    mono: 0,
    nodes: live.map((x) => x.node),
    leases: leases(...live.map((x) => x.lease)),
    leaseSilentMs: (_n, l) => now.toMillis() - new Date(l.spec!.renewTime!).getTime(),
    pods: podsByNode(w.pods ?? w.gone.map((g) => stsPod(`db-${g.name}`, { node: g.name }))),
    pvcs: pvcMap(),
    pdbs: [pdb("none", { app: "nothing" }, 1)],
    policies: w.policies ?? [dbPolicy()],
    fences: fenceMap(...(w.fences ?? [])),
    watchStalenessSeconds: 0,
    goneNodes: w.gone,
    ...(w.cluster !== undefined ? { clusterMaxUnhealthyNodes: w.cluster } : {}),
  });
}

const of = (d: FleetDecision, name: string) => {
  const x = d.decisions.find((y) => y.node === name);
  assert.ok(x, `no decision for ${name}`);
  return x;
};

describe("decideFleet: a Node that is gone, remembered as last seen", () => {
  const now = at(1000);

  test("its machine is fenced once silent and the guarded pods' wait is over, as last seen", () => {
    const d = decide(now, { live: [up("node-1", now)], gone: [goneFor("gone-1", 50)] });
    assert.equal(of(d, "gone-1").verdict, "Fence");
    assert.equal(of(d, "gone-1").policy, "db");
    assert.equal(d.create.length, 1);
    const c = d.create[0]!;
    assert.equal(c.node, "gone-1");
    assert.equal(c.policy, "db");
    assert.equal(c.gone, true, "the fresh read before the create must find the Node still absent");
    assert.match(c.reason, /Node gone-1 was deleted while its machine may still run/);
    assert.match(c.reason, /providerID aws:\/\/\/eu-west-1a\/i-gone-1/);
    assert.match(c.reason, /1 guarded pod\(s\) waited 10 s/);
    assert.deepEqual(d.policies.get("db")?.partitioned, ["gone-1"]);
  });

  test("before that it waits: silent a lease duration after the last sign, then the pods' fenceAfterSeconds", () => {
    let d = decide(now, { gone: [goneFor("gone-1", 39)] });
    assert.equal(of(d, "gone-1").verdict, "Waiting");
    assert.match(of(d, "gone-1").message, /silent at .* \(40 s\)/);
    assert.equal(d.nextCheck?.toMillis(), now.plus({ seconds: 1 }).toMillis(), "looks again when it turns silent");
    d = decide(now, { gone: [goneFor("gone-1", 45)] });
    assert.equal(of(d, "gone-1").verdict, "Waiting");
    assert.match(of(d, "gone-1").message, /guarded pods wait 10 s/);
    assert.equal(d.nextCheck?.toMillis(), now.plus({ seconds: 5 }).toMillis(), "looks again when the wait ends");
    assert.deepEqual(d.create, []);
  });

  test("never while its Lease is still renewed (a live kubelet), however long ago the Node was deleted", () => {
    const l = lease("gone-1", now.minus({ seconds: 3 }));
    const d = decide(now, { gone: [goneFor("gone-1", 3, { lease: l, leaseSilentMs: 3_000 })] });
    assert.equal(of(d, "gone-1").verdict, "Waiting");
    assert.match(of(d, "gone-1").message, /its Lease is still renewed/);
    assert.deepEqual(d.create, []);
    // A Lease present but not yet observed counts as renewed.
    const e = decide(now, { gone: [goneFor("gone-1", 600, { lease: l })] });
    assert.equal(of(e, "gone-1").verdict, "Waiting");
    // Seen unchanged for its whole duration and past the wait: the Lease no longer says anything.
    const f = decide(now, { gone: [goneFor("gone-1", 50, { lease: l, leaseSilentMs: 50_000 })] });
    assert.equal(of(f, "gone-1").verdict, "Fence");
  });

  test("nothing is counted while this replica cannot see (no measure of the quiet)", () => {
    const d = decide(now, { gone: [goneFor("gone-1", 0, { quietMs: undefined })] });
    assert.equal(of(d, "gone-1").verdict, "Waiting");
    assert.match(of(d, "gone-1").message, /cannot count its silence/);
    assert.deepEqual(d.create, []);
  });

  test("dry run: DryRun and would fence, no create; paused: Paused", () => {
    let d = decide(now, { gone: [goneFor("gone-1", 50)], policies: [dbPolicy({ dryRun: true })] });
    assert.equal(of(d, "gone-1").verdict, "DryRun");
    assert.deepEqual(d.policies.get("db")?.wouldFence, ["gone-1"]);
    assert.deepEqual(d.create, []);
    d = decide(now, { gone: [goneFor("gone-1", 50)], policies: [dbPolicy({ paused: true })] });
    assert.equal(of(d, "gone-1").verdict, "Paused");
    assert.deepEqual(d.create, []);
  });

  test("a policy whose nodeSelector does not select its last-seen labels does not fence it", () => {
    const d = decide(now, { gone: [goneFor("gone-1", 50, { lastSeen: lastSeen("gone-1", { pool: "web" }) })] });
    assert.equal(of(d, "gone-1").verdict, "NoPolicy");
    assert.deepEqual(d.create, []);
    // Its guarded pod is still under the policy's pod scope (the force-delete guard refuses its deletion): the policy
    // says so, with the command, rather than leaving it stuck unseen (second review of issue 41).
    const missing = d.policies.get("db")?.missing ?? [];
    assert.deepEqual(
      missing.map((m) => [m.node, m.remembered]),
      [["gone-1", true]],
    );
    assert.match(missing[0]!.command, /"origin":"Manual","policy":"db"/);
  });

  test("the policy's storm guard counts it unhealthy", () => {
    // Two live nodes heartbeat, two gone: 2 of 4 unhealthy is more than maxUnhealthyNodes 1.
    const d = decide(now, {
      live: [up("node-1", now), up("node-2", now)],
      gone: [goneFor("gone-1", 50), goneFor("gone-2", 50)],
      policies: [dbPolicy({ guards: { maxUnhealthyNodes: 1, maxConcurrentFences: 5 } })],
    });
    assert.equal(of(d, "gone-1").verdict, "Held");
    assert.equal(of(d, "gone-2").verdict, "Held");
    assert.equal(d.policies.get("db")?.holds[0]?.reason, "TooManyUnhealthyNodes");
    assert.match(d.policies.get("db")!.holds[0]!.message, /2 of 4 nodes are unhealthy \(gone-1, gone-2\)/);
    assert.deepEqual(d.create, []);
  });

  test("the cluster-wide storm guard counts it silent: one-node policies hold", () => {
    const one = (n: string) => policy(`p-${n}`, { nodeSelector: { matchLabels: { name: n } } });
    const d = decide(now, {
      live: [up("node-1", now, { name: "node-1" })],
      gone: [
        goneFor("gone-1", 50, { lastSeen: lastSeen("gone-1", { name: "gone-1" }) }),
        goneFor("gone-2", 50, { lastSeen: lastSeen("gone-2", { name: "gone-2" }) }),
      ],
      policies: [one("node-1"), one("gone-1"), one("gone-2")],
    });
    assert.equal(of(d, "gone-1").verdict, "Held");
    assert.equal(of(d, "gone-2").verdict, "Held");
    assert.equal(d.policies.get("p-gone-1")?.holds[0]?.reason, "ClusterStorm");
    assert.match(d.policies.get("p-gone-1")!.holds[0]!.message, /2 of the cluster's 3 nodes are silent/);
    assert.deepEqual(d.create, []);
  });

  test("maxConcurrentFences: queued behind a fence in flight", () => {
    const d = decide(now, {
      live: [up("node-1", now), up("node-2", now), up("node-3", now)],
      gone: [goneFor("gone-1", 50)],
      fences: [fence("node-9", { phase: "Fencing", policy: "db" }, { policy: "db" })],
    });
    assert.equal(of(d, "gone-1").verdict, "Queued");
    assert.deepEqual(d.create, []);
  });

  test("the quorum guard reads its last-seen labels", () => {
    const cp = lastSeen("gone-1", { ...DB, "node-role.kubernetes.io/control-plane": "" });
    const d = decide(now, { live: [up("node-1", now)], gone: [goneFor("gone-1", 50, { lastSeen: cp })] });
    assert.equal(of(d, "gone-1").verdict, "ControlPlane");
    assert.deepEqual(d.create, []);
  });

  test("a NodeFence under way: HasFence, no second one", () => {
    const d = decide(now, { gone: [goneFor("gone-1", 500)], fences: [fence("gone-1", { phase: "Fencing", policy: "db" })] });
    assert.equal(of(d, "gone-1").verdict, "HasFence");
    assert.deepEqual(d.create, []);
  });

  test("a forgiving pod's toleration is honoured from when the node turned silent", () => {
    const p = stsPod("db-gone-1", {
      node: "gone-1",
      tolerations: [{ key: UNREACHABLE_TAINT, operator: "Exists", effect: "NoExecute", tolerationSeconds: 120 }],
    });
    const d = decide(now, { gone: [goneFor("gone-1", 100)], pods: [p] });
    assert.equal(of(d, "gone-1").verdict, "Waiting");
    assert.match(of(d, "gone-1").message, /guarded pods wait 120 s/);
    assert.equal(of(decide(now, { gone: [goneFor("gone-1", 160)], pods: [p] }), "gone-1").verdict, "Fence");
  });
});

describe("decideFleet: a Node that is gone and that this process never saw", () => {
  const now = at(1000);

  test("no fence is created; the policies that guard its pods report it with the command that fences it", () => {
    const d = decide(now, {
      live: [up("node-1", now)],
      gone: [{ name: "gone-1" }],
      policies: [dbPolicy(), policy("dry", { dryRun: true })],
    });
    assert.equal(of(d, "gone-1").verdict, "NotRemembered");
    assert.match(of(d, "gone-1").message, /never saw it/);
    assert.deepEqual(d.create, []);
    const m = d.policies.get("db")?.missing;
    assert.equal(m?.length, 1);
    assert.equal(m![0]!.node, "gone-1");
    assert.equal(m![0]!.pods, 1);
    assert.equal(
      m![0]!.command,
      `echo '{"apiVersion":"stockade.io/v1alpha1","kind":"NodeFence","metadata":{"name":"gone-1"},"spec":{"nodeName":"gone-1","origin":"Manual","policy":"db","reason":"Node gone-1 is gone; guarded pods wait on it"}}' | kubectl create -f -`,
    );
    assert.equal(d.policies.get("dry")?.missing, undefined, "a dry-run policy guards nothing");
    const c = missingNodesCondition(d.policies.get("db")!, 1);
    assert.equal(c.status, "True");
    assert.equal(c.reason, "NodeNotRemembered");
    assert.ok(c.message.includes(m![0]!.command));
    assert.equal(missingNodesCondition(d.policies.get("dry")!, 1).status, "False");
  });

  test("it counts for the cluster-wide storm guard once quiet for its silence time; one never seen does not count", () => {
    const d = decide(now, {
      live: [up("node-1", now)],
      gone: [goneFor("gone-1", 50), goneFor("gone-2", 50)],
    });
    assert.equal(of(d, "gone-2").verdict, "Held");
    assert.equal(d.policies.get("db")?.holds.at(-1)?.reason, "ClusterStorm");
    // Never seen (nothing says how long it has been quiet), or just deleted: not a storm (second review of issue 41).
    for (const other of [{ name: "gone-1" }, goneFor("gone-1", 5)]) {
      const calm = decide(now, { live: [up("node-1", now)], gone: [other, goneFor("gone-2", 50)] });
      assert.notEqual(calm.policies.get("db")?.holds.at(-1)?.reason, "ClusterStorm");
    }
  });
});
