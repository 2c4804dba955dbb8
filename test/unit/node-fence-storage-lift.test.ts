// The NodeFence controller and the storage fences it may hold (issue 26 item 4), against a scripted API: the
// StorageFenceHeld condition is written with the status, and a deleted NodeFence whose storage fences an
// administrator abandoned loses its finalizer with a Warning Event naming the NetworkFence left in place.
import { test } from "node:test";
import assert from "node:assert/strict";
import type { NodeFence } from "../../src/api/v1alpha1.ts";
import { ABANDON_STORAGE_FENCES_ANNOTATION, FINALIZER, STORAGE_FENCE_HELD_CONDITION } from "../../src/decide/fence-machine.ts";
import { agent, attempt, evidenceNow, releasing, stamp, T0 } from "./decide-fixtures.ts";
import { releasingFence, world } from "./node-fence-world.ts";

const netfence = () => {
  const a = agent("netfence", "csiAddonsNetworkFence");
  a.spec.parameters = { networkFenceClassName: "ceph", storageClasses: "san" };
  return a;
};

/** A NodeFence Released on StorageFenced evidence, being deleted. */
function deleted(annotations?: Record<string, string>): NodeFence {
  const f = releasingFence();
  f.metadata = { ...f.metadata, deletionTimestamp: stamp(T0) as unknown as Date, finalizers: [FINALIZER], annotations };
  f.status = {
    ...releasing({
      attempts: [attempt("netfence", "Succeeded")],
      evidence: evidenceNow({ method: "StorageFenced", agents: ["netfence"], storageClasses: ["san"] }),
    }),
    phase: "Released",
  };
  return f;
}

test("deleted with its storage fence held: it goes Unfencing (Deleted) to lift it, the StorageFenceHeld condition naming its NetworkFence; the finalizer stays", async () => {
  const w = world([], { agents: [netfence()], initial: deleted() });
  await w.controller.reconcile("node-1");
  const f = w.fence();
  assert.equal(f.status?.phase, "Unfencing");
  assert.ok(f.metadata?.finalizers?.includes(FINALIZER), "the finalizer stays until the fence is lifted");
  const c = f.status?.conditions?.find((x) => x.type === STORAGE_FENCE_HELD_CONDITION);
  assert.equal(c?.status, "True");
  assert.match(c?.message ?? "", /netfence \(NetworkFence stockade-netfence-node-1-[0-9a-f]{10}\)/);
  assert.ok(
    f.status?.attempts?.some((a) => a.agent === "netfence" && a.operation === "on"),
    "the lift was started",
  );
  assert.ok(w.events.some((e) => e.reason === "StorageFenceHeld"));
  w.controller.operations.abort(f.metadata?.uid ?? "");
});

test("deleted with its storage fences abandoned by annotation: the finalizer goes, a Warning Event says the NetworkFence stays", async () => {
  const w = world([], { agents: [netfence()], initial: deleted({ [ABANDON_STORAGE_FENCES_ANNOTATION]: "node-1" }) });
  await w.controller.reconcile("node-1");
  assert.deepEqual(w.fence().metadata?.finalizers, []);
  assert.ok(!w.fence().status?.attempts?.some((a) => a.operation === "on"), "nothing lifted");
  const ev = w.events.filter((e) => e.reason === "StorageFenceAbandoned");
  assert.ok(ev.length >= 1 && ev.every((e) => e.type === "Warning"), JSON.stringify(w.events));
  assert.match(ev[0]!.message, /netfence not lifted; their NetworkFences stay in place/);
});
