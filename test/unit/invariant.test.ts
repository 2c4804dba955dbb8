// The timeline invariant (lab/invariant.ts) on hand-made timelines: what it must catch, and a false alarm
// the chaos suite met (a fault of a node after an old instance had already left it).
import { test } from "node:test";
import assert from "node:assert/strict";
import { checkInvariant } from "../../lab/invariant.ts";
import type { TimelineEntry } from "../../lab/recorder.ts";

const pod = (t: number, uid: string, node: string, type: "add" | "update" | "delete", phase = "Running"): TimelineEntry => ({
  t,
  source: "pod",
  type,
  namespace: "default",
  name: "db-0",
  uid,
  node,
  phase,
  deleting: type === "delete",
  labels: {},
});
const lab = (
  t: number,
  kind: "partition" | "power" | "crash" | "storage-fence",
  node: string,
  detail: Record<string, unknown> = {},
): TimelineEntry => ({
  t,
  source: "lab",
  kind,
  node,
  detail,
});

test("a replacement Running while the old instance's node is partitioned and still powered is a violation", () => {
  const r = checkInvariant([
    pod(0, "old", "node-1", "add"),
    lab(10, "partition", "node-1"),
    pod(20, "old", "node-1", "delete"),
    pod(21, "new", "node-2", "add"),
    pod(22, "new", "node-2", "update"),
  ]);
  assert.equal(r.violations.length, 1, r.violations.join("\n"));
  assert.match(r.violations[0]!, /never powered off/);
});

test("the same, with the node powered off before the replacement ran: no violation", () => {
  const r = checkInvariant([
    pod(0, "old", "node-1", "add"),
    lab(10, "partition", "node-1"),
    lab(15, "power", "node-1", { power: "off" }),
    pod(20, "old", "node-1", "delete"),
    pod(21, "new", "node-2", "add"),
    pod(22, "new", "node-2", "update"),
  ]);
  assert.deepEqual(r.violations, []);
  assert.equal(r.fencedReplacements, 1);
});

test("a fault of the node after the old instance was gone from it does not count against a later replacement", () => {
  // old ran on node-4 and was deleted (its kubelet confirmed it) at 20; mid ran elsewhere; node-4 was partitioned
  // at 40, long after old had left it; mid's replacement runs at 50.
  const r = checkInvariant(
    [
      pod(0, "old", "node-4", "add"),
      pod(20, "old", "node-4", "delete"),
      pod(21, "mid", "node-2", "add"),
      pod(22, "mid", "node-2", "update"),
      lab(30, "power", "node-2", { power: "off" }),
      lab(40, "partition", "node-4"),
      pod(45, "mid", "node-2", "delete"),
      pod(46, "new", "node-3", "add"),
      pod(50, "new", "node-3", "update"),
    ],
    new Set(["mid"]),
  );
  assert.deepEqual(r.violations, []);
});

const claimPod = (t: number, name: string, uid: string, node: string, type: "add" | "update" | "delete", token: number): TimelineEntry => ({
  ...(pod(t, uid, node, type) as Extract<TimelineEntry, { source: "pod" }>),
  name,
  claims: ["data"],
  tokens: { data: token },
});

test("claims are identities: a Deployment's new pod (another name) Running on the claim while the old one's node is partitioned is a violation", () => {
  const r = checkInvariant([
    claimPod(0, "web-a", "old", "node-1", "add", 1),
    lab(10, "partition", "node-1"),
    claimPod(20, "web-a", "old", "node-1", "delete", 1),
    claimPod(21, "web-b", "new", "node-2", "add", 2),
    claimPod(22, "web-b", "new", "node-2", "update", 2),
  ]);
  assert.equal(r.violations.length, 1, r.violations.join("\n"));
  assert.match(r.violations[0]!, /^claim default\/data: replacement new/);
  // Powered off before the new pod ran: safe.
  const ok = checkInvariant([
    claimPod(0, "web-a", "old", "node-1", "add", 1),
    lab(10, "partition", "node-1"),
    lab(15, "power", "node-1", { power: "off" }),
    claimPod(20, "web-a", "old", "node-1", "delete", 1),
    claimPod(21, "web-b", "new", "node-2", "update", 2),
  ]);
  assert.deepEqual(ok.violations, []);
});

test("claims: tokens must rise in the order the holders ran; pods without a token (a shared claim) are not the claim's instances", () => {
  const r = checkInvariant([
    claimPod(0, "web-a", "a", "node-1", "update", 3),
    claimPod(5, "web-a", "a", "node-1", "delete", 3),
    claimPod(10, "web-b", "b", "node-2", "update", 3),
  ]);
  assert.equal(r.violations.length, 1, r.violations.join("\n"));
  assert.match(r.violations[0]!, /token 3 after pod a had run with token 3: tokens must rise/);
  const shared = checkInvariant([
    { ...(pod(0, "a", "node-1", "update") as Extract<TimelineEntry, { source: "pod" }>), name: "x", claims: ["logs"] },
    lab(1, "partition", "node-1"),
    { ...(pod(5, "b", "node-2", "update") as Extract<TimelineEntry, { source: "pod" }>), name: "y", claims: ["logs"] },
  ]);
  assert.deepEqual(shared.violations, []);
});

test("a storage fence (issue 11) makes a claim's replacement safe, never a pod identity's; an Unfenced report does not count", () => {
  const claimTimeline = (state: string) => [
    claimPod(0, "web-a", "old", "node-1", "add", 1),
    lab(10, "crash", "node-1"),
    lab(15, "storage-fence", "node-1", { state }),
    claimPod(21, "web-b", "new", "node-2", "update", 2),
  ];
  assert.deepEqual(checkInvariant(claimTimeline("Fenced")).violations, []);
  assert.equal(checkInvariant(claimTimeline("Unfenced")).violations.length, 1);
  // The same pod identity (a StatefulSet's db-0) is not made safe by a storage fence: its old instance may still run.
  const r = checkInvariant([
    pod(0, "old", "node-1", "add"),
    lab(10, "crash", "node-1"),
    lab(15, "storage-fence", "node-1", { state: "Fenced" }),
    pod(21, "new", "node-2", "update"),
  ]);
  assert.equal(r.violations.length, 1, r.violations.join("\n"));
});
