// decide/scope.ts: the force-delete guard and the claim gate act only on what a live FencingPolicy covers (issue 28
// item 1). Every branch of guardScope and gateScope, and the pod scope (namespaces, podSelector) they share with
// fencing (isGuarded).
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import type { V1PersistentVolumeClaim, V1Pod } from "@kubernetes/client-node";
import type { FencingPolicy, NodeFence } from "../../src/api/v1alpha1.ts";
import { GUARDED_LABEL, isGuarded } from "../../src/decide/guarded-pods.ts";
import { CLAIM_GUARD_ANNOTATION, claimGuard } from "../../src/decide/claim-lock.ts";
import {
  describeScope,
  fenceHoldNodes,
  gateClaims,
  gateScope,
  guardScope,
  guardedWhy,
  inPodScope,
  type GuardScopeInput,
} from "../../src/decide/scope.ts";
import { fence, node, pod, policy, pvc, stsPod } from "./decide-fixtures.ts";

const pilot = { matchLabels: { pool: "pilot" } };
const nodeA = node("node-a", { labels: { pool: "pilot" } });
const nodeB = node("node-b", { labels: { pool: "other" } });
const claims = new Map<string, V1PersistentVolumeClaim>([
  ["data", pvc("data", ["ReadWriteOnce"])],
  ["shared", pvc("shared", ["ReadWriteMany"])],
]);
const lookup = (n: string) => claims.get(n);
const live = policy("pilot", { nodeSelector: pilot });
const input = (o: Partial<GuardScopeInput> = {}): GuardScopeInput => ({
  pod: stsPod("db-0", { node: "node-a" }),
  node: nodeA,
  fence: undefined,
  policies: [live],
  pvc: lookup,
  ...o,
});
const covered = (i: GuardScopeInput) => guardScope(i).covered;
const why = (i: GuardScopeInput) => guardScope(i).why;

describe("pod scope: guardedPods.namespaces and podSelector", () => {
  test("none named: every pod; namespaces: only those; podSelector: only matching labels", () => {
    const p = pod("a", { ns: "shop", labels: { app: "db" } });
    assert.equal(inPodScope(p, undefined), true);
    assert.equal(inPodScope(p, { namespaces: [] }), true, "an empty list is every namespace");
    assert.equal(inPodScope(p, { namespaces: ["shop", "billing"] }), true);
    assert.equal(inPodScope(p, { namespaces: ["billing"] }), false);
    assert.equal(inPodScope(p, { podSelector: { matchLabels: { app: "db" } } }), true);
    assert.equal(inPodScope(p, { podSelector: { matchLabels: { app: "web" } } }), false);
    assert.equal(inPodScope(p, { namespaces: ["shop"], podSelector: { matchLabels: { app: "web" } } }), false, "both must hold");
  });

  test("isGuarded (fencing and release) honours the scope; the opt-in label does not widen it, the opt-out label wins", () => {
    const inShop = stsPod("db-0", { ns: "shop" });
    assert.equal(isGuarded(inShop, { namespaces: ["shop"] }, new Map()).guarded, true);
    assert.equal(isGuarded(inShop, { namespaces: ["billing"] }, new Map()).guarded, false);
    const optedIn = pod("web", { ns: "shop", labels: { [GUARDED_LABEL]: "true" } });
    assert.equal(
      isGuarded(optedIn, { namespaces: ["billing"] }, new Map()).guarded,
      false,
      "a tenant's label cannot widen the admin's scope",
    );
    assert.equal(isGuarded(optedIn, { namespaces: ["shop"] }, new Map()).guarded, true);
    const optedOut = stsPod("db-1", { ns: "shop", labels: { [GUARDED_LABEL]: "false" } });
    assert.match(isGuarded(optedOut, { namespaces: ["shop"] }, new Map()).why, /opted out/);
  });

  test("describeScope names what narrows it", () => {
    assert.equal(describeScope(undefined), "every namespace");
    assert.equal(describeScope({ namespaces: ["a", "b"] }), "namespaces a, b");
    assert.equal(describeScope({ namespaces: ["a"], podSelector: { matchLabels: { x: "y" } } }), "namespaces a and its podSelector");
    assert.equal(describeScope({ podSelector: {} }), "every namespace", "an empty selector narrows nothing");
  });

  test("guardedWhy: a claim opted in by annotation guards its pod; the opt-out label and the scope still win", () => {
    const rwx = pvc("shared", ["ReadWriteMany"]);
    rwx.metadata!.annotations = { [CLAIM_GUARD_ANNOTATION]: "true" };
    const pvcOf = (n: string) => (n === "shared" ? rwx : undefined);
    assert.equal(guardedWhy(pod("web", { claims: ["shared"] }), undefined, pvcOf), "uses guarded claim shared");
    assert.equal(guardedWhy(pod("web", { claims: ["shared"], labels: { [GUARDED_LABEL]: "false" } }), undefined, pvcOf), undefined);
    assert.equal(guardedWhy(pod("web", { claims: ["shared"] }), { namespaces: ["other"] }, pvcOf), undefined);
    assert.equal(guardedWhy(pod("web", { claims: ["shared"] }), undefined, lookup), undefined, "a plain RWX claim guards nothing");
    assert.equal(guardedWhy(pod("web"), undefined, lookup), undefined);
  });

  test(`${CLAIM_GUARD_ANNOTATION}=false no longer opts a claim out (the pod label is the one opt-out)`, () => {
    const rwo = pvc("data", ["ReadWriteOnce"]);
    rwo.metadata!.annotations = { [CLAIM_GUARD_ANNOTATION]: "false" };
    assert.equal(claimGuard(rwo, { readWriteOnceVolumes: true }).guarded, true);
  });
});

describe("guardScope: the force-delete guard", () => {
  test("no FencingPolicy at all (and no NodeFence): nothing is covered", () => {
    const s = guardScope(input({ policies: [] }));
    assert.equal(s.covered, false);
    assert.match(s.why, /no FencingPolicy selects node node-a/);
  });

  test("a live policy selecting the pod's node covers its guarded pods, and names itself (fence suggested)", () => {
    const s = guardScope(input());
    assert.deepEqual(s, {
      covered: true,
      guarded: "owned by a StatefulSet",
      why: "FencingPolicy pilot selects node node-a",
      policy: "pilot",
    });
  });

  test("a pod on a node the policy does not select is not covered", () => {
    assert.equal(covered(input({ pod: stsPod("db-0", { node: "node-b" }), node: nodeB })), false);
    assert.match(why(input({ pod: stsPod("db-0", { node: "node-b" }), node: nodeB })), /no FencingPolicy selects node node-b/);
  });

  test("a dry-run policy guards nothing", () => {
    const s = guardScope(input({ policies: [policy("pilot", { nodeSelector: pilot, dryRun: true })] }));
    assert.equal(s.covered, false);
    assert.match(s.why, /FencingPolicy pilot, which selects node node-a, is a dry run/);
  });

  test("a paused policy still guards (it only starts no new fence)", () => {
    assert.equal(covered(input({ policies: [policy("pilot", { nodeSelector: pilot, paused: true })] })), true);
  });

  test("forceDeleteGuard: false turns the guard off for the policy's nodes", () => {
    const s = guardScope(input({ policies: [policy("pilot", { nodeSelector: pilot, forceDeleteGuard: false })] }));
    assert.equal(s.covered, false);
    assert.match(s.why, /forceDeleteGuard: false/);
  });

  test("the node's governing policy decides (first by name, as for fencing): a dry run first by name guards nothing", () => {
    const dry = policy("a-dry", { nodeSelector: pilot, dryRun: true });
    const wide = policy("b-live", { nodeSelector: {} });
    assert.equal(covered(input({ policies: [wide, dry] })), false, "node-a is governed by the dry run a-dry");
    assert.equal(covered(input({ pod: stsPod("db-0", { node: "node-b" }), node: nodeB, policies: [wide, dry] })), true);
  });

  test("a pod outside the policy's namespaces or podSelector is not covered, and the reason says so", () => {
    const scoped = policy("pilot", { nodeSelector: pilot, guardedPods: { namespaces: ["shop"] } });
    assert.equal(covered(input({ policies: [scoped] })), false);
    assert.match(why(input({ policies: [scoped] })), /outside FencingPolicy pilot's scope \(namespaces shop\)/);
    assert.equal(covered(input({ pod: stsPod("db-0", { node: "node-a", ns: "shop" }), policies: [scoped] })), true);
  });

  test("a pod the policy does not guard (switches off, opted out) is not covered", () => {
    const noSts = policy("pilot", { nodeSelector: pilot, guardedPods: { statefulSets: false, readWriteOnceVolumes: false } });
    assert.match(why(input({ policies: [noSts] })), /not guarded by FencingPolicy pilot/);
    const out = input({ pod: stsPod("db-0", { node: "node-a", labels: { [GUARDED_LABEL]: "false" } }) });
    assert.equal(covered(out), false);
    assert.match(why(out), /not guarded by FencingPolicy pilot/);
  });

  test("a pod on a ReadWriteOnce claim is covered like a StatefulSet's", () => {
    const s = guardScope(input({ pod: pod("app", { node: "node-a", claims: ["data"] }) }));
    assert.equal(s.covered && s.guarded, "uses ReadWriteOnce claim data");
    assert.equal(covered(input({ pod: pod("app", { node: "node-a", claims: ["shared"] }) })), false);
  });

  test("caches not synced: fail closed, every guarded pod covered (as before scoping), no policy named", () => {
    const s = guardScope(input({ policies: undefined, node: nodeB, pod: stsPod("db-0", { node: "node-b" }) }));
    assert.equal(s.covered, true);
    assert.equal(s.covered && s.policy, undefined);
    assert.match(s.why, /not loaded yet/);
    assert.equal(covered(input({ policies: undefined, pod: pod("web", { node: "node-a" }) })), false, "not guarded at all");
  });

  test("a NodeFence under way covers the node's guarded pods whatever the policies say now (deleted, dry run)", () => {
    for (const phase of ["Pending", "Fencing", "Fenced", "Releasing", "Released", "Failed"] as const) {
      const f = fence("node-a", {
        phase,
        policySnapshot: { escalation: [], guardedPods: { statefulSets: true, readWriteOnceVolumes: true } },
      });
      const s = guardScope(input({ fence: f, policies: [] }));
      assert.equal(s.covered, true, phase);
      assert.equal(s.covered && s.fencePhase, phase);
      assert.equal(s.covered && s.policy, undefined, "no fence suggested: one is under way");
    }
    const started = fence("node-a");
    started.status = { policySnapshot: { escalation: [], guardedPods: {} } };
    const s = guardScope(input({ fence: started, policies: [] }));
    assert.equal(s.covered && s.fencePhase, "Pending", "started (a snapshot taken), no phase written yet");
    assert.equal(covered(input({ fence: fence("node-a"), policies: [] })), false, "not started: waiting for a policy, it fences nothing");
    assert.equal(covered(input({ fence: fence("node-a", { phase: "Pending" }), policies: [] })), false, "Pending without a snapshot");
  });

  test("a NodeFence under way guards with its snapshot's pod scope", () => {
    const f = fence("node-a", {
      phase: "Fencing",
      policySnapshot: { escalation: [], guardedPods: { statefulSets: true, namespaces: ["shop"] } },
    });
    assert.equal(covered(input({ fence: f, policies: [] })), false, "default namespace: outside the snapshot's scope");
    assert.equal(covered(input({ fence: f, policies: [], pod: stsPod("db-0", { node: "node-a", ns: "shop" }) })), true);
  });

  test("an Unfenced NodeFence covers nothing by itself", () => {
    const f = fence("node-a", { phase: "Unfenced", policySnapshot: { escalation: [], guardedPods: {} } });
    assert.equal(covered(input({ fence: f, policies: [] })), false);
    assert.equal(covered(input({ fence: f })), true, "the live policy still does");
  });

  test("the pod's Node is gone: covered when a live guard's pod scope covers the pod (its labels are gone with it)", () => {
    const s = guardScope(input({ node: undefined }));
    assert.equal(s.covered, true);
    assert.equal(s.covered && s.policy, undefined, "no fence suggested: a fence of a deleted Node waits NodeNotFound");
    assert.match(s.why, /Node node-a is gone/);
    assert.equal(covered(input({ node: undefined, policies: [] })), false);
    assert.equal(covered(input({ node: undefined, policies: [policy("pilot", { dryRun: true })] })), false, "a dry run: nothing");
    assert.equal(covered(input({ node: undefined, policies: [policy("pilot", { forceDeleteGuard: false })] })), false);
    assert.equal(covered(input({ node: undefined, policies: [policy("p", { guardedPods: { namespaces: ["shop"] } })] })), false);
  });
});

describe("gateScope: the claim gate (no node yet: namespaces and podSelector)", () => {
  const p = pod("app", { ns: "shop", claims: ["data"], labels: { app: "db" } });
  test("no FencingPolicy: nothing gated", () => {
    assert.deepEqual(gateScope(p, []), { covered: false, why: "no FencingPolicy" });
  });
  test("only dry runs: nothing gated", () => {
    assert.deepEqual(gateScope(p, [policy("a", { dryRun: true })]), { covered: false, why: "every FencingPolicy is a dry run" });
  });
  test("claimLock: false on every live policy: nothing gated", () => {
    const s = gateScope(p, [policy("a", { claimLock: false }), policy("b", { dryRun: true })]);
    assert.equal(s.covered, false);
    assert.match(s.why, /claimLock: false/);
  });
  test("a live policy whose scope has the pod gates it; RWO claims guarded as the in-scope policies say", () => {
    const s = gateScope(p, [policy("a", { guardedPods: { namespaces: ["shop"] } })]);
    assert.deepEqual(s, { covered: true, why: "in the scope of FencingPolicy a", claims: { readWriteOnceVolumes: true } });
    const noRwo = gateScope(p, [policy("a", { guardedPods: { namespaces: ["shop"], readWriteOnceVolumes: false } })]);
    assert.deepEqual(noRwo.covered && noRwo.claims, { readWriteOnceVolumes: false });
    const otherNs = gateScope(p, [
      policy("a", { guardedPods: { namespaces: ["shop"], readWriteOnceVolumes: false } }),
      policy("b", { guardedPods: { namespaces: ["billing"] } }),
    ]);
    assert.deepEqual(otherNs.covered && otherNs.claims, { readWriteOnceVolumes: false }, "only the policies whose scope has the pod");
  });
  test("outside every live policy's namespaces or podSelector: not gated", () => {
    assert.equal(gateScope(p, [policy("a", { guardedPods: { namespaces: ["billing"] } })]).covered, false);
    assert.equal(gateScope(p, [policy("a", { guardedPods: { podSelector: { matchLabels: { app: "web" } } } })]).covered, false);
    assert.equal(gateScope(p, [policy("a", { guardedPods: { podSelector: { matchLabels: { app: "db" } } } })]).covered, true);
  });
  test("the pod opted out by label: not gated", () => {
    const out = pod("app", { claims: ["data"], labels: { [GUARDED_LABEL]: "false" } });
    assert.match(gateScope(out, [policy("a")]).why, /opted out/);
  });
  test("caches not synced: gated (lifted later if not in scope)", () => {
    assert.deepEqual(gateScope(p, undefined), {
      covered: true,
      why: "the FencingPolicies are not loaded yet",
      claims: { readWriteOnceVolumes: true },
    });
  });
});

// Issue 41 item 3: the administrator stops a pilot (deletes the policy, turns it to a dry run, narrows its namespaces)
// while a NodeFence is under way; the Deployment's replacement must not start on the RWO claim while the old
// instance, on the node being fenced, may still write.
describe("gateClaims: a claim used on a node whose NodeFence has not ended stays gated, whatever the policies say", () => {
  const holder = pod("app-old", { ns: "shop", claims: ["data"], node: "node-a" });
  const waiter = () => {
    const p = pod("app-new", { ns: "shop", claims: ["data", "shared"] });
    delete p.spec!.nodeName;
    return p;
  };
  const shopClaims = new Map([
    ["data", pvc("data", ["ReadWriteOnce"], "shop")],
    ["shared", pvc("shared", ["ReadWriteMany"], "shop")],
  ]);
  const fencing = fence("node-a", { phase: "Fencing", policySnapshot: { escalation: [], guardedPods: {} } });
  const gate = (o: { policies?: FencingPolicy[]; fence?: NodeFence; pods?: V1Pod[]; pod?: V1Pod } = {}) => {
    const base = { pod: o.pod ?? waiter(), pvc: (n: string) => shopClaims.get(n), policies: o.policies ?? [], pods: o.pods ?? [holder] };
    const nodes = fenceHoldNodes(base);
    return { nodes, ...gateClaims({ ...base, fence: (n) => (nodes.includes(n) && n === "node-a" ? (o.fence ?? fencing) : undefined) }) };
  };
  const stopped: [string, FencingPolicy[]][] = [
    ["policy deleted", []],
    ["dry run", [policy("pilot", { dryRun: true })]],
    ["claimLock: false", [policy("pilot", { claimLock: false })]],
    ["namespaces narrowed", [policy("pilot", { guardedPods: { namespaces: ["billing"] } })]],
    ["podSelector narrowed", [policy("pilot", { guardedPods: { podSelector: { matchLabels: { app: "web" } } } })]],
    ["readWriteOnceVolumes: false", [policy("pilot", { guardedPods: { readWriteOnceVolumes: false } })]],
  ];

  test("the holder's node's NodeFence is Fencing: the claim stays guarded (policy deleted, dry run, switched off, narrowed)", () => {
    for (const [what, policies] of stopped) {
      const g = gate({ policies });
      assert.deepEqual(g.nodes, ["node-a"], `${what}: the holder's node's fence is read`);
      assert.deepEqual(
        g.guarded.map((x) => x.claim),
        ["data"],
        `${what}: the RWO claim stays guarded (the RWX one does not)`,
      );
      assert.deepEqual(g.held, [{ claim: "data", user: "app-old", node: "node-a", phase: "Fencing" }], what);
      assert.match(g.guarded[0]!.why, /pod app-old uses it on node node-a, whose NodeFence is Fencing/);
      assert.match(g.guarded[0]!.why, /whatever the FencingPolicies say now/);
    }
  });

  test("every phase before the fence ends holds (no phase yet, no snapshot yet, Released, Failed, Unfencing); Unfenced does not", () => {
    for (const phase of ["Pending", "Fencing", "Fenced", "Releasing", "Released", "Failed", "Unfencing"] as const) {
      const g = gate({ fence: fence("node-a", { phase, policySnapshot: { escalation: [], guardedPods: {} } }) });
      assert.deepEqual(
        g.held.map((h) => h.phase),
        [phase],
        phase,
      );
    }
    assert.deepEqual(gate({ fence: fence("node-a") }).held[0]?.phase, "Pending", "created, no status yet: a request to fence");
    assert.deepEqual(gate({ fence: fence("node-a", { phase: "Pending" }) }).held[0]?.phase, "Pending", "no snapshot yet");
    const ended = gate({ fence: fence("node-a", { phase: "Unfenced", policySnapshot: { escalation: [], guardedPods: {} } }) });
    assert.deepEqual(ended.held, [], "Unfenced: the usual outcome");
    assert.deepEqual(ended.guarded, [], "no policy: nothing guarded, the gate comes off without a grant");
  });

  test("the fence ends for the claim once the holder is released: Released with the holder gone is the usual outcome", () => {
    const released = fence("node-a", { phase: "Released", policySnapshot: { escalation: [], guardedPods: {} } });
    const g = gate({ fence: released, pods: [] });
    assert.deepEqual(g.nodes, [], "no user of the claim on any node: no fence to read");
    assert.deepEqual(g.held, []);
    assert.deepEqual(g.guarded, []);
  });

  test("no fence on the holder's node, or a holder elsewhere: the policies decide, as before", () => {
    assert.deepEqual(gate({ pods: [pod("app-old", { ns: "shop", claims: ["data"], node: "node-b" })] }).held, [], "node-b has no fence");
    assert.deepEqual(
      gate({ pods: [pod("app-old", { ns: "other", claims: ["data"], node: "node-a" })] }).held,
      [],
      "another namespace's claim",
    );
    const unbound = pod("app-gated", { ns: "shop", claims: ["data"] });
    delete unbound.spec!.nodeName;
    assert.deepEqual(gate({ pods: [unbound] }).held, [], "a pod bound nowhere runs nothing");
  });

  test("the waiting pod opted out by label: never held (the one opt-out)", () => {
    const out = waiter();
    out.metadata!.labels = { [GUARDED_LABEL]: "false" };
    const g = gate({ pod: out });
    assert.deepEqual([g.nodes, g.held, g.guarded], [[], [], []]);
  });

  test("a live policy that guards the claim: guarded by the policy, no hold (the grant decides as always); a paused one too", () => {
    for (const policies of [[policy("pilot")], [policy("pilot", { paused: true })]]) {
      const g = gate({ policies });
      assert.deepEqual(g.nodes, [], "no extra read: the claim lock's own reads cover the holder's node");
      assert.deepEqual(g.held, []);
      assert.deepEqual(
        g.guarded.map((x) => x.claim),
        ["data"],
      );
      assert.equal(g.scope.covered, true);
    }
  });

  test("a claim opted in by annotation is held whatever its access mode; a plain RWX one never", () => {
    const rwx = pvc("shared", ["ReadWriteMany"], "shop");
    rwx.metadata!.annotations = { [CLAIM_GUARD_ANNOTATION]: "true" };
    const user = pod("app-old", { ns: "shop", claims: ["shared"], node: "node-a" });
    const p = waiter();
    const base = { pod: p, pvc: (n: string) => (n === "shared" ? rwx : shopClaims.get(n)), policies: [], pods: [user] };
    assert.deepEqual(
      gateClaims({ ...base, fence: () => fencing }).held.map((h) => h.claim),
      ["shared"],
    );
    const plain = { ...base, pvc: (n: string) => shopClaims.get(n) };
    assert.deepEqual(fenceHoldNodes(plain), []);
    assert.deepEqual(gateClaims({ ...plain, fence: () => fencing }).held, []);
  });
});
