// A stall of the event loop longer than the threshold is reported once, with its length; ordinary timer jitter is not.
import { test } from "node:test";
import assert from "node:assert/strict";
import { setTimeout as sleep } from "node:timers/promises";
import { LoopStallWatch } from "../../src/runtime/loop-stall.ts";

const busy = (ms: number) => {
  const end = performance.now() + ms;
  while (performance.now() < end);
};

test("a loop held for 700 ms is reported once, as about 700 ms; a quiet loop is not", async () => {
  const stalls: number[] = [];
  const w = new LoopStallWatch({ intervalMs: 50, thresholdMs: 300, onStall: (ms) => stalls.push(ms) });
  w.start();
  try {
    await sleep(300);
    assert.deepEqual(stalls, [], "no stall while the loop is free");
    busy(700);
    await sleep(200);
    assert.equal(stalls.length, 1, `one stall reported: ${stalls.join(", ")}`);
    assert.ok(stalls[0]! >= 600 && stalls[0]! < 1_000, `its length, ~650 ms past due: ${stalls[0]}`);
    busy(200);
    await sleep(150);
    assert.equal(stalls.length, 1, "a hold under the threshold is not a stall");
  } finally {
    w.stop();
  }
});
