// The NodeFence controller's release step against a scripted API: a node's guarded pods are force-deleted side by
// side, each with leadership asserted right before its call, and recorded in one status write; when one call
// fails, those that succeeded are still recorded (a restart then finds them done) and the failure is reported.
import { test } from "node:test";
import assert from "node:assert/strict";
import type { V1Pod } from "@kubernetes/client-node";
import { ApiException } from "@kubernetes/client-node";
import pino from "pino";
import type { NodeFence, NodeFenceStatus } from "../../src/api/v1alpha1.ts";
import { NodeFenceController } from "../../src/controllers/node-fence.ts";
import { FINALIZER } from "../../src/decide/fence-machine.ts";
import type { Kube } from "../../src/kube/api.ts";
import type { Caches } from "../../src/kube/caches.ts";
import type { EventRecorder } from "../../src/runtime/events.ts";
import type { Leadership } from "../../src/runtime/leader.ts";
import { Metrics } from "../../src/metrics.ts";
import { T0, agent, at, lease, partitionedNode, policy, releasing, stsPod } from "./decide-fixtures.ts";

function releasingFence(): NodeFence {
  return {
    apiVersion: "stockade.io/v1alpha1",
    kind: "NodeFence",
    metadata: { name: "node-1", uid: "fence-uid", generation: 1, finalizers: [FINALIZER], resourceVersion: "1" },
    spec: { nodeName: "node-1", origin: "Automatic" },
    status: releasing(),
  };
}

/** The API as the controller sees it; `fail` names pods whose force delete answers 500. */
function world(pods: V1Pod[], fail: Set<string>, leading: () => boolean, metrics?: Metrics, initial = releasingFence()) {
  let fence = initial;
  const live = new Map(pods.map((p) => [p.metadata?.uid ?? "", p]));
  const calls: string[] = [];
  const statusWrites: NodeFenceStatus[] = [];
  let inFlight = 0;
  let maxInFlight = 0;
  const kube = {
    getNodeFence: async () => structuredClone(fence),
    readNode: async () => partitionedNode(),
    readLease: async () => lease("node-1", T0),
    forceDeletePod: async (p: V1Pod) => {
      calls.push(`delete ${p.metadata?.name}`);
      inFlight++;
      maxInFlight = Math.max(maxInFlight, inFlight);
      await new Promise((r) => setTimeout(r, 20));
      inFlight--;
      if (fail.has(p.metadata?.name ?? "")) throw new ApiException(500, "Internal Server Error", {}, {});
      live.delete(p.metadata?.uid ?? "");
      return "deleted" as const;
    },
    replaceStatus: async (_plural: string, obj: NodeFence) => {
      calls.push("status");
      statusWrites.push(structuredClone(obj.status ?? {}));
      fence = {
        ...structuredClone(obj),
        metadata: { ...obj.metadata, resourceVersion: String(Number(obj.metadata?.resourceVersion) + 1) },
      };
      return structuredClone(fence);
    },
  };
  const list = <T>(xs: () => T[]) => ({
    list: xs,
    get: (n: string) => xs().find((x) => (x as { metadata?: { name?: string } }).metadata?.name === n),
  });
  const caches = {
    policies: list(() => [policy("default")]),
    agents: list(() => [agent("ipmi")]),
    pods: list(() => [...live.values()]),
    pvcs: list(() => []),
    volumeAttachments: list(() => []),
    nodes: list(() => [partitionedNode()]),
  };
  const events = { record: async () => {} };
  const leadership = {
    epoch: 1,
    assertLeading: (what: string) => {
      calls.push(`assert ${what}`);
      if (!leading()) throw new Error(`not leading: ${what}`);
    },
  };
  const controller = new NodeFenceController({
    kube: kube as unknown as Kube,
    caches: caches as unknown as Caches,
    events: events as unknown as EventRecorder,
    log: pino({ level: "silent" }),
    clock: () => at(1000),
    leadership: leadership as unknown as Leadership,
    metrics,
  });
  return { controller, calls, statusWrites, fence: () => fence, maxInFlight: () => maxInFlight };
}

const pods = () => ["db-0", "db-1", "db-2"].map((n, i) => stsPod(n, { priority: i }));

test("a node's guarded pods are force-deleted side by side, leadership asserted before each, and recorded in one status write", async () => {
  const metrics = new Metrics();
  const w = world(pods(), new Set(), () => true, metrics);
  await w.controller.reconcile("node-1");
  const text = await metrics.registry.metrics();
  for (const step of ["read", "release", "released"])
    assert.match(text, new RegExp(`stockade_fence_step_duration_seconds_count\\{step="${step}"\\} [1-9]`), `step ${step} timed`);
  const deletes = w.calls.filter((c) => c.startsWith("delete"));
  assert.deepEqual(deletes, ["delete db-2", "delete db-1", "delete db-0"], "highest priority first");
  assert.equal(w.maxInFlight(), 3, "side by side");
  for (const p of ["db-0", "db-1", "db-2"])
    assert.ok(w.calls.indexOf(`assert force-delete pod default/${p}`) < w.calls.indexOf(`delete ${p}`), `leadership before ${p}`);
  const withPods = w.statusWrites.filter((s) => (s.releases ?? []).some((r) => r.kind === "Pod"));
  assert.equal(withPods[0]?.releases?.length, 3, "the three in the first write that records any");
  assert.equal(w.fence().status?.phase, "Released");
});

test("one force delete fails: the others are recorded all the same, the failure is thrown, and a retry releases only that one", async () => {
  const fail = new Set(["db-1"]);
  const w = world(pods(), fail, () => true);
  await assert.rejects(w.controller.reconcile("node-1"), /Internal Server Error|500/);
  const recorded = (w.fence().status?.releases ?? []).map((r) => r.name).sort();
  assert.deepEqual(recorded, ["db-0", "db-2"], "the deletes that happened are in status");
  fail.clear();
  await w.controller.reconcile("node-1");
  assert.deepEqual(
    w.calls.filter((c) => c.startsWith("delete")),
    ["delete db-2", "delete db-1", "delete db-0", "delete db-1"],
    "the retry deletes only the one left",
  );
  assert.deepEqual((w.fence().status?.releases ?? []).map((r) => r.name).sort(), ["db-0", "db-1", "db-2"]);
  assert.equal(w.fence().status?.phase, "Released");
});

test("leadership lost: no force delete is sent, nothing is recorded", async () => {
  const w = world(pods(), new Set(), () => false);
  await assert.rejects(w.controller.reconcile("node-1"), /not leading/);
  assert.deepEqual(
    w.calls.filter((c) => c.startsWith("delete")),
    [],
  );
  assert.equal((w.fence().status?.releases ?? []).length, 0);
});

test("a wait asked again writes nothing: the same condition is not PUT a second time", async () => {
  // Confirmed while the node still heartbeat: nothing is released before a renewal period of silence (a wait).
  const f = releasingFence();
  f.status!.evidence!.heartbeat = { ...f.status!.evidence!.heartbeat!, silent: false };
  const w = world(pods(), new Set(), () => true, undefined, f);
  assert.ok(((await w.controller.reconcile("node-1")) as { requeueAfterMs?: number })?.requeueAfterMs, "it waits");
  assert.equal(w.statusWrites.length, 1, "the wait's condition written once");
  assert.equal(w.fence().status?.conditions?.find((c) => c.type === "Released")?.reason, "WaitingForSilence");
  await w.controller.reconcile("node-1");
  assert.equal(w.statusWrites.length, 1, "asked again, nothing changed: no second write");
  assert.deepEqual(
    w.calls.filter((c) => c.startsWith("delete")),
    [],
    "and nothing released",
  );
});
