// decide/scope.ts: the force-delete guard and the claim gate act only on what a live FencingPolicy covers (issue 28
// item 1). Every branch of guardScope and gateScope, and the pod scope (namespaces, podSelector) they share with
// fencing (isGuarded).
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import type { V1PersistentVolumeClaim } from "@kubernetes/client-node";
import { GUARDED_LABEL, isGuarded } from "../../src/decide/guarded-pods.ts";
import { CLAIM_GUARD_ANNOTATION, claimGuard } from "../../src/decide/claim-lock.ts";
import { describeScope, gateScope, guardScope, guardedWhy, inPodScope, type GuardScopeInput } from "../../src/decide/scope.ts";
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
