import { test } from "node:test";
import assert from "node:assert/strict";
import { WorkQueue, type QueueMetric } from "../../src/runtime/work-queue.ts";

/** A manual clock and timer wheel: nothing happens until advance(). */
function fakeTime() {
  let now = 0;
  let nextId = 0;
  const timers = new Map<number, { at: number; fn: () => void }>();
  return {
    now: () => now,
    setTimer: (fn: () => void, ms: number) => {
      timers.set(++nextId, { at: now + ms, fn });
      return nextId;
    },
    clearTimer: (id: unknown) => void timers.delete(id as number),
    pending: () => timers.size,
    /** Deadlines of pending timers relative to now. */
    delays: () => [...timers.values()].map((t) => t.at - now).sort((a, b) => a - b),
    advance(ms: number) {
      now += ms;
      for (const [id, t] of [...timers].sort((a, b) => a[1].at - b[1].at)) {
        if (t.at > now) continue;
        timers.delete(id);
        t.fn();
      }
    },
  };
}

/** get() that must resolve without waiting. */
async function getNow(q: WorkQueue): Promise<string | undefined> {
  const none = Symbol("none");
  const r = await Promise.race([q.get(), new Promise<typeof none>((resolve) => setImmediate(() => resolve(none)))]);
  assert.notEqual(r, none, "get() should not have blocked");
  return r as string | undefined;
}

async function assertBlocks(p: Promise<unknown>): Promise<void> {
  const none = Symbol("none");
  const r = await Promise.race([p, new Promise((resolve) => setImmediate(() => resolve(none)))]);
  assert.equal(r, none, "expected get() to block");
}

test("add deduplicates keys that are already waiting and keeps FIFO order", async () => {
  const q = new WorkQueue();
  q.add("a");
  q.add("b");
  q.add("a");
  assert.equal(q.len(), 2);
  assert.equal(await getNow(q), "a");
  assert.equal(await getNow(q), "b");
  assert.equal(q.len(), 0);
  q.shutDown();
});

test("a key added while processing is handed out again only after done", async () => {
  const q = new WorkQueue();
  q.add("a");
  assert.equal(await getNow(q), "a");
  q.add("a");
  q.add("a");
  assert.equal(q.len(), 0, "not queued while being processed");
  const next = q.get();
  await assertBlocks(next);
  q.done("a");
  assert.equal(await next, "a", "re-queued once on done");
  q.done("a");
  assert.equal(q.len(), 0, "the two adds coalesced into one");
  q.shutDown();
});

test("done without a new add does not re-queue; a waiting get receives a later add", async () => {
  const q = new WorkQueue();
  q.add("a");
  assert.equal(await getNow(q), "a");
  q.done("a");
  assert.equal(q.len(), 0);
  const next = q.get();
  q.add("b");
  assert.equal(await next, "b");
  q.shutDown();
});

test("addAfter keeps the earlier deadline", () => {
  const t = fakeTime();
  const q = new WorkQueue(t);
  q.addAfter("a", 100);
  q.addAfter("a", 500); // later: ignored
  assert.deepEqual(t.delays(), [100]);
  q.addAfter("a", 50); // earlier: replaces
  assert.deepEqual(t.delays(), [50]);
  t.advance(49);
  assert.equal(q.len(), 0);
  t.advance(1);
  assert.equal(q.len(), 1);
  assert.equal(t.pending(), 0);
  q.addAfter("b", 0); // no delay: immediate
  assert.equal(q.len(), 2);
  q.shutDown();
});

test("rate-limited retries back off exponentially per key up to the cap, and forget resets", () => {
  const t = fakeTime();
  const q = new WorkQueue({ ...t, baseDelayMs: 5, maxDelayMs: 100 });
  const delays: number[] = [];
  for (let i = 0; i < 7; i++) {
    q.addRateLimited("a");
    delays.push(t.delays()[0]!);
    t.advance(1000);
  }
  assert.deepEqual(delays, [5, 10, 20, 40, 80, 100, 100]);
  assert.equal(q.retries("a"), 7);
  assert.equal(q.retries("b"), 0);
  q.forget("a");
  assert.equal(q.retries("a"), 0);
  q.addRateLimited("a");
  assert.deepEqual(t.delays(), [5]);
  q.shutDown();
});

test("the overall token bucket limits a burst across keys", () => {
  const t = fakeTime();
  const q = new WorkQueue({ ...t, baseDelayMs: 1, qps: 10, burst: 3 });
  for (const k of ["a", "b", "c", "d", "e"]) q.addRateLimited(k);
  // The first three use the burst (per-key delay 1 ms), then one token per 100 ms.
  assert.deepEqual(t.delays(), [1, 1, 1, 100, 200]);
  t.advance(1000); // refills the bucket
  q.addRateLimited("f");
  assert.deepEqual(t.delays(), [1]);
  q.shutDown();
});

test("shutDown wakes waiting getters, drops delayed adds, and ignores later adds", async () => {
  const t = fakeTime();
  const q = new WorkQueue(t);
  const waiting = [q.get(), q.get()];
  q.addAfter("x", 100);
  q.shutDown();
  assert.deepEqual(await Promise.all(waiting), [undefined, undefined]);
  assert.equal(t.pending(), 0);
  q.add("y");
  q.addRateLimited("z");
  assert.equal(q.len(), 0);
  assert.equal(await q.get(), undefined);
  assert.equal(q.isShuttingDown, true);
});

test("stats and onMetric report depth, adds, queue latency and work duration", async () => {
  const t = fakeTime();
  const seen: [QueueMetric, number][] = [];
  const q = new WorkQueue({ ...t, onMetric: (m, v) => seen.push([m, v]) });
  q.add("a");
  q.add("a");
  q.add("b");
  assert.equal(q.stats().depth, 2);
  assert.equal(q.stats().adds, 3);
  t.advance(30);
  assert.equal(await getNow(q), "a");
  t.advance(70);
  q.done("a");
  q.addAfter("c", 1000);
  const s = q.stats();
  assert.deepEqual(
    {
      depth: s.depth,
      processing: s.processing,
      delayed: s.delayed,
      latency: [s.queueLatencyCount, s.queueLatencySumMs, s.queueLatencyMaxMs],
    },
    { depth: 1, processing: 0, delayed: 1, latency: [1, 30, 30] },
  );
  assert.deepEqual([s.workCount, s.workSumMs, s.workMaxMs], [1, 70, 70]);
  assert.deepEqual(
    seen.filter(([m]) => m !== "adds"),
    [
      ["depth", 1],
      ["depth", 2],
      ["depth", 1],
      ["queueLatencyMs", 30],
      ["workDurationMs", 70],
    ],
  );
  assert.equal(seen.filter(([m]) => m === "adds").length, 3);
  q.shutDown();
});

test("default timers are unref'd and fire", async () => {
  const keepAlive = setTimeout(() => {}, 10_000); // the queue's own timer would not keep the process up
  const q = new WorkQueue();
  q.addAfter("a", 5);
  assert.equal(await q.get(), "a");
  q.shutDown();
  clearTimeout(keepAlive);
});
