// The deleted Nodes this process remembers, and when it last had a sign of each machine (issue 41 item 6).
import { test } from "node:test";
import assert from "node:assert/strict";
import { LastSeenNodes } from "../../src/kube/last-seen-nodes.ts";
import { at, node } from "./decide-fixtures.ts";

test("the last sign of a gone Node's machine is its deletion, or its Lease's deletion after it; a Node back is forgotten", () => {
  let t = 1_000;
  const s = new LastSeenNodes(10, () => t);
  const n = node("gone-1", { heartbeat: at(0) });
  s.leaseDeleted("gone-1"); // not remembered yet: nothing
  assert.equal(s.lastSignAt("gone-1"), undefined);
  s.deleted(n);
  assert.equal(s.get("gone-1"), n);
  assert.equal(s.lastSignAt("gone-1"), 1_000);
  t = 31_000;
  s.leaseDeleted("gone-1"); // collected with its Node through its ownerReference, or deleted later
  assert.equal(s.lastSignAt("gone-1"), 31_000);
  s.present(n);
  assert.equal(s.get("gone-1"), undefined);
  assert.equal(s.lastSignAt("gone-1"), undefined);
});

test("the oldest deletion is forgotten first", () => {
  const s = new LastSeenNodes(2, () => 0);
  for (const name of ["a", "b", "c"]) s.deleted(node(name));
  assert.deepEqual(s.names(), ["b", "c"]);
});
