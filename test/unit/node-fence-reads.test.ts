// Which steps of a NodeFence read the Node and its Lease afresh: bookkeeping steps may reuse the read of the step
// before (a round trip each under load), every destructive call and every evidence record may not.
import { test } from "node:test";
import assert from "node:assert/strict";
import type { NodeFence } from "../../src/api/v1alpha1.ts";
import { attempt, fencing, stsPod } from "./decide-fixtures.ts";
import { releasingFence, world } from "./node-fence-world.ts";

const DESTRUCTIVE = /^(taint|delete |assert )/;
const WRITE = /^(status|metadata|taint|node condition|delete )/;

/** For each destructive call: a read came after the last write before it (a write of the same step excepted). */
function readBeforeEachDestructive(calls: string[]): void {
  let lastRead = -1;
  let lastWrite = -1;
  for (const [i, c] of calls.entries()) {
    if (c === "read node") lastRead = i;
    if (DESTRUCTIVE.test(c) && !c.startsWith("assert "))
      assert.ok(
        lastRead > lastWrite,
        `${c} (call ${i}) is decided on a read made after the last write (call ${lastWrite}): ${calls.join(", ")}`,
      );
    // The calls of one step (taint then its node condition; a batch of deletes) share its read.
    if (WRITE.test(c) && !DESTRUCTIVE.test(c) && c !== "node condition") lastWrite = i;
  }
}

const reads = (calls: string[]) => calls.filter((c) => c === "read node").length;
const fenced = (): NodeFence => {
  const f = releasingFence();
  f.status!.phase = "Fenced";
  return f;
};
const pods = () => [stsPod("db-0"), stsPod("db-1")];

test("from Fenced to Released: the taint and the deletes each follow a read of their own; released and done reuse it", async () => {
  const w = world(pods(), { initial: fenced() });
  await w.controller.reconcile("node-1");
  assert.equal(w.fence().status?.phase, "Released");
  readBeforeEachDestructive(w.calls);
  assert.deepEqual(
    w.calls.filter((c) => !c.startsWith("assert ") && c !== "read lease"),
    [
      "read node",
      "taint",
      "node condition",
      "status Releasing",
      "read node",
      "delete db-0",
      "delete db-1",
      "status Releasing",
      "status Released",
    ],
  );
});

test("with reuse off, every step reads: the same calls, two reads more", async () => {
  const w = world(pods(), { initial: fenced(), viewReuseMs: 0 });
  await w.controller.reconcile("node-1");
  assert.equal(w.fence().status?.phase, "Released");
  readBeforeEachDestructive(w.calls);
  assert.equal(reads(w.calls), 4, "markNode, release, released, done");
});

test("a read older than the reuse bound is not reused: a slow write makes the next step read again", async () => {
  const w = world(pods(), { initial: fenced(), writeMs: 30, viewReuseMs: 20 });
  await w.controller.reconcile("node-1");
  assert.equal(w.fence().status?.phase, "Released");
  assert.equal(reads(w.calls), 4);
});

test("a new NodeFence: start and begin reuse the finalizer's read; the power-off attempt is decided on a read of its own", async () => {
  const f = releasingFence();
  delete f.status;
  f.metadata!.finalizers = [];
  const w = world(pods(), { initial: f });
  await w.controller.reconcile("node-1");
  const until = w.calls.findIndex((c) => c.startsWith("assert power off"));
  assert.ok(until > 0, `the power-off attempt was started: ${w.calls.join(", ")}`);
  assert.deepEqual(
    w.calls.slice(0, until).filter((c) => c !== "read lease"),
    ["read node", "metadata", "status Pending", "status Fencing", "read node"],
  );
  assert.equal(w.fence().status?.attempts?.[0]?.outcome, "InProgress");
  // The attempt's write carries the wait's condition: the wait that follows writes nothing.
  assert.deepEqual(
    w.calls.slice(until).filter((c) => c.startsWith("status")),
    ["status Fencing"],
    "one write: the attempt and its AgentRunning condition",
  );
  assert.equal(w.fence().status?.conditions?.find((c) => c.type === "Fenced")?.reason, "AgentRunning");
  w.controller.operations.abort("fence-uid");
});

test("a power-off that ended: its outcome is recorded on the read that saw it end, the evidence on a read of its own", async () => {
  const f = releasingFence();
  f.status = fencing({ attempts: [attempt("ipmi", "InProgress")] });
  const w = world(pods(), { initial: f });
  let ended!: () => void;
  const done = new Promise<void>((r) => (ended = r));
  w.controller.enqueue = () => ended();
  w.controller.operations.start("fence-uid", "node-1", 0, async () => ({
    outcome: "Succeeded",
    message: "off, and a status query says off",
  }));
  await done;
  await w.controller.reconcile("node-1");
  assert.equal(w.fence().status?.phase, "Released");
  readBeforeEachDestructive(w.calls);
  const steps = w.calls.filter((c) => c === "read node" || c.startsWith("status") || c === "taint");
  assert.deepEqual(steps.slice(0, 5), ["read node", "status Fencing", "read node", "status Fenced", "read node"], "confirmed reads again");
  assert.equal(steps[5], "taint");
  assert.equal(w.fence().status?.evidence?.method, "PowerOffConfirmed");
});
