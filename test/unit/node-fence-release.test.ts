// The NodeFence controller's release step against a scripted API: a node's guarded pods are force-deleted side by
// side, each with leadership asserted right before its call, and recorded in one status write; when one call
// fails, those that succeeded are still recorded (a restart then finds them done) and the failure is reported.
import { test } from "node:test";
import assert from "node:assert/strict";
import { Metrics } from "../../src/metrics.ts";
import { STATUS_BOUND } from "../../src/decide/status-bound.ts";
import { stsPod } from "./decide-fixtures.ts";
import { releasingFence, world } from "./node-fence-world.ts";

const pods = () => ["db-0", "db-1", "db-2"].map((n, i) => stsPod(n, { priority: i }));

test("a node's guarded pods are force-deleted side by side, leadership asserted before each, and recorded in one status write", async () => {
  const metrics = new Metrics();
  const w = world(pods(), { metrics });
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
  const w = world(pods(), { fail });
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
  const w = world(pods(), { leading: () => false });
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
  const w = world(pods(), { initial: f });
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

test("every status write applies the bound on the lists (issue 26 item 5): a fence that released many VolumeAttachments keeps its pods' records", async () => {
  const f = releasingFence();
  f.status!.releases = Array.from({ length: 70 }, (_, i) => ({
    kind: "VolumeAttachment" as const,
    name: `va-${i}`,
    uid: `uid-va-${i}`,
    action: "Deleted",
    time: "2026-01-01T00:00:00Z",
  }));
  const w = world(pods(), { initial: f });
  await w.controller.reconcile("node-1");
  const st = w.fence().status!;
  assert.equal(st.phase, "Released");
  assert.ok((st.releases?.length ?? 0) <= STATUS_BOUND.limit, `${st.releases?.length} releases kept`);
  assert.deepEqual(
    (st.releases ?? []).filter((r) => r.kind === "Pod").map((r) => r.name),
    ["db-2", "db-1", "db-0"],
  );
  assert.equal((st.releases?.length ?? 0) + (st.releasesDropped ?? 0), 73);
  assert.match(st.conditions?.find((c) => c.type === "Released")?.message ?? "", /^73 release\(s\) recorded/);
  assert.ok(
    w.statusWrites.every((s) => (s.releases?.length ?? 0) <= STATUS_BOUND.limit),
    "no write over the bound",
  );
});

test("Released: an agent run after the release (action reboot's power-on) leaves the Fenced condition True", async () => {
  const f = releasingFence();
  f.status = {
    ...f.status,
    phase: "Released",
    policySnapshot: { ...f.status!.policySnapshot!, action: "reboot" },
    attempts: [
      ...(f.status!.attempts ?? []),
      { ...f.status!.attempts![0]!, operation: "on", outcome: "InProgress", startTime: "2026-01-01T00:20:00Z" },
    ],
    conditions: [
      { type: "Fenced", status: "True", reason: "PowerOffConfirmed", message: "off", lastTransitionTime: "2026-01-01T00:16:35Z" },
      {
        type: "Released",
        status: "True",
        reason: "Released",
        message: "0 release(s) recorded",
        lastTransitionTime: "2026-01-01T00:16:40Z",
      },
    ],
  };
  const w = world([], { initial: f });
  w.controller.operations.start("fence-uid", "node-1", 1, () => new Promise(() => {}));
  const r = await w.controller.reconcile("node-1");
  assert.equal(r?.requeueAfterMs, 30_000, "waits for the power-on");
  const fenced = w.fence().status?.conditions?.find((c) => c.type === "Fenced");
  assert.deepEqual([fenced?.status, fenced?.reason], ["True", "PowerOffConfirmed"]);
  w.controller.operations.abort("fence-uid");
});
