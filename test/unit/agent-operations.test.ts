import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { AgentOperations } from "../../src/controllers/node-fence/agent-operations.ts";
import { InFlight } from "../../src/runtime/in-flight.ts";

const tick = () => new Promise((r) => setImmediate(r));

describe("AgentOperations (item 15: agents run outside the workers)", () => {
  test("an operation runs in the background; its end is reported and re-enqueues the fence by name", async () => {
    const done: string[] = [];
    const inflight = new InFlight();
    const ops = new AgentOperations(
      (name) => done.push(name),
      (p) => void inflight.track(p),
    );
    let finish!: () => void;
    ops.start("uid-1", "node-1", 0, () => new Promise((r) => (finish = () => r({ outcome: "Succeeded", message: "off" }))));
    assert.deepEqual([...ops.view("uid-1")], [[0, { state: "running" }]]);
    assert.equal(inflight.size, 1);
    finish();
    await tick();
    assert.deepEqual(done, ["node-1"]);
    assert.deepEqual(ops.view("uid-1").get(0), { state: "done", outcome: "Succeeded", message: "off" });
    ops.forget("uid-1", 0);
    assert.equal(ops.view("uid-1").size, 0);
  });

  test("keyed by the NodeFence's uid: a NodeFence re-created under the same name never sees its predecessor's outcome", async () => {
    const ops = new AgentOperations(() => {});
    ops.start("uid-old", "node-1", 0, async () => ({ outcome: "Succeeded", message: "off" }));
    await tick();
    assert.equal(ops.view("uid-new").get(0), undefined);
  });

  test("starting the same attempt twice runs it once", async () => {
    const ops = new AgentOperations(() => {});
    let runs = 0;
    const work = async () => {
      runs++;
      return { outcome: "Succeeded" as const, message: "" };
    };
    ops.start("u", "n", 0, work);
    ops.start("u", "n", 0, work);
    await tick();
    assert.equal(runs, 1);
  });

  test("abort withdraws the operation at once (its signal fires) and forgets it; drain waits for what still runs", async () => {
    const inflight = new InFlight();
    const ops = new AgentOperations(
      () => {},
      (p) => void inflight.track(p),
    );
    let aborted = false;
    ops.start(
      "u",
      "n",
      0,
      (signal) =>
        new Promise((resolve) =>
          signal.addEventListener("abort", () => {
            aborted = true;
            resolve({ outcome: "Cancelled", message: "withdrawn" });
          }),
        ),
    );
    ops.abort("u");
    assert.equal(ops.view("u").size, 0);
    await inflight.drain();
    assert.ok(aborted);
    assert.equal(inflight.size, 0);
  });

  test("a throwing operation ends Failed with its message", async () => {
    const inflight = new InFlight();
    const ops = new AgentOperations(
      () => {},
      (p) => void inflight.track(p),
    );
    ops.start("u", "n", 3, async () => {
      throw new Error("boom");
    });
    await inflight.drain();
    assert.deepEqual(ops.view("u").get(3), { state: "done", outcome: "Failed", message: "boom" });
  });

  test("settled: resolves once every withdrawn operation of that NodeFence has ended (a lift waits for a withdrawn fence's write)", async () => {
    const ops = new AgentOperations(() => {});
    let finish!: () => void;
    const landed = new Promise<void>((r) => (finish = r));
    let ended = false;
    ops.start("u", "n", 0, async () => {
      await landed; // the write already sent, ending after the abort
      ended = true;
      return { outcome: "Cancelled", message: "withdrawn" };
    });
    ops.start("other", "m", 0, () => new Promise(() => {})); // another fence's: never waited for
    ops.abort("u");
    let settled = false;
    const s = ops.settled("u").then(() => (settled = true));
    await tick();
    assert.equal(settled, false, "not while the withdrawn operation still runs");
    finish();
    await s;
    assert.ok(ended && settled);
    await ops.settled("none");
  });
});
