// The NodeFence controller keeps fence history as part of its flow (issue 28 item 5): the episode's FenceRecord
// exists before its first agent runs, is written again before a deleted NodeFence's finalizer goes, and a record
// that cannot be written never holds a fence back (a Warning Event, once) — except for a short while at deletion.
// Also: every status write keeps levelNumber (the level counted from 1) in step with currentLevel.
import { test } from "node:test";
import assert from "node:assert/strict";
import { HISTORY_FINALIZE_GRACE_MS } from "../../src/controllers/node-fence.ts";
import { FINALIZER } from "../../src/decide/fence-machine.ts";
import { SNAPSHOT, agent, at, fencing, stamp, stsPod } from "./decide-fixtures.ts";
import { releasingFence, world } from "./node-fence-world.ts";

const pods = () => ["db-0", "db-1"].map((n) => stsPod(n));

test("the episode's record is created before its first agent runs, and shows the attempt once it waits for it", async () => {
  const f = releasingFence();
  f.status = fencing({ policySnapshot: { ...SNAPSHOT, escalation: [{ agents: ["admin"] }] }, startTime: stamp(at(990)) });
  const w = world([], { initial: f, agents: [agent("admin", "manual")], history: {} });
  await w.controller.reconcile("node-1");
  const created = w.calls.indexOf("history create");
  const agentRuns = w.calls.indexOf("assert power off of node-1");
  assert.ok(created >= 0 && agentRuns > created, `record created (${created}) before the agent runs (${agentRuns}): ${w.calls.join(", ")}`);
  assert.ok(w.calls.lastIndexOf("history replace") > agentRuns, "brought up to date while it waits for the administrator");
  const [rec] = [...w.records.values()];
  assert.equal(rec?.spec.nodeName, "node-1");
  assert.equal(rec?.status?.outcome, "InProgress");
  assert.deepEqual(rec?.status?.levels, [{ round: 1, level: 1, agents: [{ name: "admin", type: "manual", outcome: "InProgress" }] }]);
  assert.equal(w.fence().status?.levelNumber, 1, "levelNumber written with currentLevel 0");
});

test("a deleted NodeFence's record says Deleted, and is written before the finalizer goes", async () => {
  const f = releasingFence();
  f.status = { ...f.status, phase: "Released", releasedTime: stamp(at(998)), podsReleased: 2 };
  f.metadata.deletionTimestamp = new Date(at(995).toMillis());
  const w = world([], { initial: f, history: {} });
  await w.controller.reconcile("node-1");
  const written = Math.max(w.calls.lastIndexOf("history create"), w.calls.lastIndexOf("history replace"));
  const finalizer = w.calls.lastIndexOf("metadata");
  assert.ok(written >= 0 && finalizer > written, `record (${written}) before the finalizer goes (${finalizer}): ${w.calls.join(", ")}`);
  assert.ok(!(w.fence().metadata.finalizers ?? []).includes(FINALIZER));
  const [rec] = [...w.records.values()];
  assert.deepEqual(
    [rec?.status?.outcome, rec?.status?.endReason, rec?.status?.endTime, rec?.status?.podsReleased],
    ["Released", "Deleted", stamp(at(995)).replace(".000", ""), 2],
  );
});

test("deleted while the record cannot be written: the finalizer stays for a while; past the grace it goes, the episode in a Warning Event", async () => {
  const recent = releasingFence();
  recent.metadata.deletionTimestamp = new Date(at(995).toMillis());
  const w = world([], { initial: recent, history: { fail: () => true } });
  await assert.rejects(w.controller.reconcile("node-1"), /FenceRecord could not be written/);
  assert.ok((w.fence().metadata.finalizers ?? []).includes(FINALIZER), "finalizer kept: the record is tried again");

  const old = releasingFence();
  old.metadata.deletionTimestamp = new Date(
    at(1000)
      .minus({ milliseconds: HISTORY_FINALIZE_GRACE_MS + 1000 })
      .toMillis(),
  );
  const w2 = world([], { initial: old, history: { fail: () => true } });
  await w2.controller.reconcile("node-1");
  assert.ok(!(w2.fence().metadata.finalizers ?? []).includes(FINALIZER), "past the grace the NodeFence goes");
  const lost = w2.events.filter((e) => e.reason === "FenceHistoryNotRecorded");
  assert.ok(lost.length >= 1, "a Warning Event says so");
  assert.equal(lost[0]?.type, "Warning");
  assert.match(lost[0]?.message ?? "", /phase Releasing.*evidence PowerOffConfirmed/);
});

test("history failing never holds a fence back: the release goes on, one Warning Event however many tries", async () => {
  let fail = true;
  const w = world(pods(), { history: { fail: () => fail } });
  await w.controller.reconcile("node-1");
  assert.equal(w.fence().status?.phase, "Released");
  assert.deepEqual(w.calls.filter((c) => c.startsWith("delete")).sort(), ["delete db-0", "delete db-1"]);
  assert.equal(w.fence().status?.podsReleased, 2, "counted as released");
  await w.controller.reconcile("node-1");
  assert.equal(w.events.filter((e) => e.reason === "FenceHistoryNotRecorded" && e.kind === "NodeFence").length, 1, "said once");
  fail = false;
  await w.controller.reconcile("node-1");
  const [rec] = [...w.records.values()];
  assert.deepEqual([rec?.status?.outcome, rec?.status?.podsReleased], ["Released", 2], "written from status once it can be");
});

test("levelNumber follows currentLevel in every write; a status without currentLevel has none", async () => {
  const f = releasingFence();
  f.status = { ...f.status, currentLevel: 2, levelNumber: 7 };
  const w = world(pods(), { initial: f });
  await w.controller.reconcile("node-1");
  assert.ok(w.statusWrites.length > 0);
  for (const s of w.statusWrites) assert.equal(s.levelNumber, 3);
});

test("only the leader writes history: a replica that lost the Lease writes no record", async () => {
  // Released: the next step is done, where the record is brought up to date.
  const f = releasingFence();
  f.status = { ...f.status, phase: "Released", releasedTime: stamp(at(998)) };
  let leading = true;
  const w = world([], { initial: structuredClone(f), history: {}, leading: () => leading });
  await w.controller.reconcile("node-1");
  assert.equal(w.records.size, 1, "the leader writes it");
  leading = false;
  const w2 = world([], { initial: structuredClone(f), history: {}, leading: () => leading });
  await assert.rejects(w2.controller.reconcile("node-1"), /not leading: write the FenceRecord of NodeFence node-1/);
  assert.equal(w2.records.size, 0);
  assert.deepEqual(
    w2.calls.filter((c) => c.startsWith("history")),
    [],
  );
});
