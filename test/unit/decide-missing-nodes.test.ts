// Issue 41 item 6: guarded pods bound to a Node that no longer exists are counted (the gauge
// stockade_guarded_pods_on_missing_nodes, the alert StockadeGuardedPodsOnMissingNode), so that a person learns of them.
import { test } from "node:test";
import assert from "node:assert/strict";
import type { V1Pod } from "@kubernetes/client-node";
import type { NodeFence } from "../../src/api/v1alpha1.ts";
import { guardedPodsOnMissingNodes, type MissingNodesInput } from "../../src/decide/missing-nodes.ts";
import { pod, policy, pvcMap, stsPod } from "./decide-fixtures.ts";

function input(pods: V1Pod[], o: Partial<MissingNodesInput> = {}): MissingNodesInput {
  return {
    podNodes: pods.map((p) => p.spec?.nodeName ?? ""),
    nodeExists: (n) => n === "live",
    podsOn: (n) => pods.filter((p) => p.spec?.nodeName === n),
    policies: [policy("default")],
    pvcs: pvcMap(),
    fence: () => undefined,
    remembered: () => false,
    ...o,
  };
}

test("guarded pods on a Node that is gone are counted by node; unguarded pods and live Nodes are not", () => {
  const pods = [
    stsPod("db-0", { node: "gone" }),
    stsPod("db-1", { node: "gone" }),
    pod("web", { node: "gone" }),
    stsPod("db-2", { node: "live" }),
    stsPod("db-3", { node: "gone-too" }),
  ];
  const fence = { status: { phase: "Fencing" } } as NodeFence;
  const out = guardedPodsOnMissingNodes(
    input(pods, { remembered: (n) => n === "gone", fence: (n) => (n === "gone-too" ? fence : undefined) }),
  );
  assert.deepEqual(out, [
    { node: "gone", pods: 2, remembered: true },
    { node: "gone-too", pods: 1, remembered: false, fencePhase: "Fencing" },
  ]);
});

test("only under a live policy that keeps the guard: a dry run, a guard turned off or no policy counts nothing", () => {
  const pods = [stsPod("db-0", { node: "gone" })];
  assert.deepEqual(guardedPodsOnMissingNodes(input(pods, { policies: [] })), []);
  assert.deepEqual(guardedPodsOnMissingNodes(input(pods, { policies: [policy("p", { dryRun: true })] })), []);
  assert.deepEqual(guardedPodsOnMissingNodes(input(pods, { policies: [policy("p", { forceDeleteGuard: false })] })), []);
  assert.equal(guardedPodsOnMissingNodes(input(pods)).length, 1);
});
