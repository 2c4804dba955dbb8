// The bound on a NodeFence's status lists (issue 26 item 5): the first and the last entries are kept with every one a
// decision still reads, the others counted. The machine's decisions on pruned lists are checked against unpruned ones
// by random walks in test/unit/decide-fence-machine.test.ts.
import { test } from "node:test";
import assert from "node:assert/strict";
import type { NodeFenceStatus, NodeFenceStatusReleases } from "../../src/api/v1alpha1.ts";
import { storageFencesHeld } from "../../src/decide/fence-machine.ts";
import { STATUS_BOUND, boundStatus } from "../../src/decide/status-bound.ts";
import { agentMap, at, attempt, fencing, stamp } from "./decide-fixtures.ts";

const { limit, keepFirst, keepLast } = STATUS_BOUND;
const failedRound = (round: number) => attempt("ipmi", "Failed", 0, "off", stamp(at(round)), round);
const va = (i: number): NodeFenceStatusReleases => ({
  kind: "VolumeAttachment",
  name: `va-${i}`,
  uid: `uid-va-${i}`,
  action: "Deleted",
  time: stamp(at(i)),
});

test("within the bound: the same object, nothing counted", () => {
  const st: NodeFenceStatus = fencing({ attempts: Array.from({ length: limit }, (_, i) => failedRound(i)), releases: [va(1)] });
  assert.equal(boundStatus(st), st);
});

test("attempts past the bound: the first and the last kept, the others counted (added to those dropped before)", () => {
  const attempts = Array.from({ length: 80 }, (_, i) => failedRound(i));
  const st = boundStatus(fencing({ round: 79, attempts, attemptsDropped: 7 }));
  assert.equal(st.attempts?.length, keepFirst + keepLast);
  assert.deepEqual(st.attempts?.slice(0, keepFirst), attempts.slice(0, keepFirst));
  assert.deepEqual(st.attempts?.slice(keepFirst), attempts.slice(-keepLast));
  assert.equal(st.attemptsDropped, 7 + 80 - keepFirst - keepLast);
});

test("what decisions read is kept however old: a storage fence put up long ago stays held; the current round's attempts stay", () => {
  const attempts = [
    ...Array.from({ length: 20 }, (_, i) => failedRound(i)),
    attempt("netfence", "Succeeded", 1, "off", stamp(at(20)), 20),
    ...Array.from({ length: 60 }, (_, i) => failedRound(21 + i)),
  ];
  const before = fencing({ round: 81, attempts });
  const after = boundStatus(before);
  assert.ok((after.attempts?.length ?? 0) <= limit + 1);
  const agents = agentMap();
  assert.deepEqual(storageFencesHeld({ fence: { spec: { nodeName: "node-1" }, status: after } as never, agents }), ["netfence"]);
  assert.deepEqual(storageFencesHeld({ fence: { spec: { nodeName: "node-1" }, status: before } as never, agents }), ["netfence"]);
  assert.ok(after.attempts?.includes(attempts[20]!));
});

test("no attempt is dropped while one is InProgress (its running operation knows it by index); releases still are", () => {
  const attempts = [...Array.from({ length: 80 }, (_, i) => failedRound(i)), attempt("ipmi", "InProgress", 0, "off", stamp(at(80)), 80)];
  const releases = Array.from({ length: 80 }, (_, i) => va(i));
  const st = boundStatus(fencing({ round: 80, attempts, releases }));
  assert.equal(st.attempts, attempts);
  assert.equal(st.attemptsDropped, undefined);
  assert.equal(st.releases?.length, keepFirst + keepLast);
  assert.equal(st.releasesDropped, 80 - keepFirst - keepLast);
});

test("releases past the bound: every Pod and Taint record is kept (never a pod force-deleted twice, the taint removed once)", () => {
  const pod = (i: number): NodeFenceStatusReleases => ({
    kind: "Pod",
    namespace: "default",
    name: `db-${i}`,
    uid: `uid-db-${i}`,
    action: "ForceDeleted",
    time: stamp(at(i)),
  });
  const taint: NodeFenceStatusReleases = { kind: "Taint", name: "node.kubernetes.io/out-of-service", action: "Added", time: stamp(at(0)) };
  const releases = [
    ...Array.from({ length: 20 }, (_, i) => va(i)),
    taint,
    ...Array.from({ length: 30 }, (_, i) => pod(i)),
    ...Array.from({ length: 100 }, (_, i) => va(100 + i)),
  ];
  const st = boundStatus(fencing({ releases }));
  const kinds = (k: string) => (st.releases ?? []).filter((r) => r.kind === k).length;
  assert.equal(kinds("Pod"), 30);
  assert.equal(kinds("Taint"), 1);
  assert.equal(st.releases?.length, keepFirst + 1 + 30 + keepLast);
  assert.equal((st.releases?.length ?? 0) + (st.releasesDropped ?? 0), releases.length);
  // Order is kept.
  assert.deepEqual(
    st.releases,
    releases.filter((r) => st.releases?.includes(r)),
  );
});
