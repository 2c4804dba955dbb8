import { test } from "node:test";
import assert from "node:assert/strict";
import { setTimeout as sleep } from "node:timers/promises";
import { pino } from "pino";
import type { KubernetesObject } from "@kubernetes/client-node";
import { Controller, changedBeyondStatus, enqueueFrom, type Log } from "../../src/runtime/controller.ts";
import { WorkQueue } from "../../src/runtime/work-queue.ts";

type Entry = { level: string; obj: Record<string, unknown>; msg: string };

function memoryLog(): Log & { entries: Entry[] } {
  const entries: Entry[] = [];
  const at = (level: string) => (obj: object, msg: string) => void entries.push({ level, obj: obj as Record<string, unknown>, msg });
  return { entries, info: at("info"), warn: at("warn"), error: at("error"), debug: at("debug") };
}

/** A queue whose timers keep the process alive, so tests can await delayed adds. */
const queue = (o: ConstructorParameters<typeof WorkQueue>[0] = {}) => new WorkQueue({ setTimer: (fn, ms) => setTimeout(fn, ms), ...o });

async function until(cond: () => boolean, what: string, timeoutMs = 5000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(2);
  }
}

test("a pino Logger is a Log", () => {
  const log: Log = pino({ level: "silent" });
  log.info({ a: 1 }, "fits");
});

test("a failing reconcile is logged and retried with backoff until it succeeds", async () => {
  const log = memoryLog();
  const q = queue({ baseDelayMs: 10 });
  const calls: number[] = [];
  const c = new Controller({
    name: "test",
    queue: q,
    log,
    reconcile: async () => {
      calls.push(Date.now());
      if (calls.length <= 3) throw new Error(`boom ${calls.length}`);
    },
  });
  c.start();
  q.add("ns/a");
  await until(() => calls.length === 4, "the fourth reconcile");
  await c.stop();
  assert.equal(q.retries("ns/a"), 0, "success forgets the failures");
  const errors = log.entries.filter((e) => e.level === "error");
  assert.equal(errors.length, 3);
  assert.deepEqual(
    errors.map((e) => [e.obj.controller, e.obj.key, e.obj.retries]),
    [
      ["test", "ns/a", 0],
      ["test", "ns/a", 1],
      ["test", "ns/a", 2],
    ],
  );
  assert.match(errors[2]!.msg, /test.*ns\/a.*boom 3/);
  // Backoff 10, 20, 40 ms: each gap at least the delay (timers never fire early).
  const gaps = calls.slice(1).map((t, i) => t - calls[i]!);
  gaps.forEach((gap, i) => assert.ok(gap >= 10 * 2 ** i - 1, `gap ${i} was ${gap} ms`));
});

test("requeueAfterMs runs the key again after the delay", async () => {
  const q = queue();
  const calls: number[] = [];
  const c = new Controller({
    name: "test",
    queue: q,
    log: memoryLog(),
    reconcile: async () => {
      calls.push(Date.now());
      return calls.length === 1 ? { requeueAfterMs: 30 } : undefined;
    },
  });
  c.start();
  q.add("a");
  await until(() => calls.length === 2, "the requeued reconcile");
  await sleep(50);
  await c.stop();
  assert.equal(calls.length, 2, "no further requeue after a plain success");
  assert.ok(calls[1]! - calls[0]! >= 29, `requeued after ${calls[1]! - calls[0]!} ms`);
});

test("restMs: the worker rests after each reconcile, and the keys added meanwhile are taken as one", async () => {
  for (const rest of [0, 80]) {
    const q = queue();
    const starts: number[] = [];
    const c = new Controller({
      name: "test",
      queue: q,
      log: memoryLog(),
      restMs: () => rest,
      reconcile: async () => {
        starts.push(performance.now());
        // Something the reconcile caused wants it again at once, twice (as a fleet pass's own writes do).
        if (starts.length < 4) queueMicrotask(() => (q.add("fleet"), q.add("fleet")));
      },
    });
    c.start();
    q.add("fleet");
    await until(() => starts.length === 4, "four reconciles");
    await sleep(rest + 30);
    await c.stop();
    assert.equal(starts.length, 4, "each pair of adds ran one reconcile");
    const gaps = starts.slice(1).map((t, i) => t - starts[i]!);
    if (rest) assert.ok(Math.min(...gaps) >= rest - 1, `reconciles ${gaps.map((g) => g.toFixed(0)).join(", ")} ms apart`);
    else assert.ok(Math.max(...gaps) < 40, `without a rest, back to back (${gaps.map((g) => g.toFixed(0)).join(", ")} ms)`);
  }
});

test("restMs: a rest ends at the reconcile's own requeueAfterMs, at hurry(), and at stop()", async () => {
  const q = queue();
  const starts: number[] = [];
  const c = new Controller({
    name: "test",
    queue: q,
    log: memoryLog(),
    restMs: () => 60_000,
    reconcile: async () => {
      starts.push(performance.now());
      // The first names a deadline in 40 ms; the others nothing, so that a full rest follows them.
      return starts.length === 1 ? { requeueAfterMs: 40 } : undefined;
    },
  });
  c.start();
  q.add("fleet");
  await until(() => starts.length === 2, "the requeue after 40 ms, not after the minute's rest", 2_000);
  await sleep(100);
  assert.equal(starts.length, 2, "resting");
  q.add("fleet");
  await sleep(100);
  assert.equal(starts.length, 2, "a key added during the rest waits for it");
  const t = performance.now();
  c.hurry();
  await until(() => starts.length === 3, "hurry() ends the rest", 1_000);
  assert.ok(starts[2]! - t < 100, `reconciled ${(starts[2]! - t).toFixed(0)} ms after hurry()`);
  const t2 = performance.now();
  await c.stop();
  assert.ok(performance.now() - t2 < 1_000, "stop() does not wait out a rest");
});

test("several workers never reconcile the same key concurrently", async () => {
  const q = queue();
  const inFlight = new Set<string>();
  const perKey = new Map<string, number>();
  const overlaps: string[] = [];
  let concurrent = 0;
  let maxConcurrent = 0;
  const c = new Controller({
    name: "stress",
    workers: 4,
    queue: q,
    log: memoryLog(),
    reconcile: async (key) => {
      // Not an assert: the controller would catch it as a reconcile error.
      if (inFlight.has(key)) overlaps.push(key);
      inFlight.add(key);
      maxConcurrent = Math.max(maxConcurrent, ++concurrent);
      await sleep(Math.random() * 2);
      perKey.set(key, (perKey.get(key) ?? 0) + 1);
      concurrent--;
      inFlight.delete(key);
    },
  });
  c.start();
  const keys = Array.from({ length: 8 }, (_, i) => `k${i}`);
  for (let round = 0; round < 200; round++) {
    for (let i = 0; i < 5; i++) q.add(keys[Math.floor(Math.random() * keys.length)]!);
    await new Promise((resolve) => setImmediate(resolve));
  }
  await until(() => q.len() === 0 && q.stats().processing === 0, "the queue to drain");
  await c.stop();
  assert.deepEqual(overlaps, [], "keys reconciled twice at once");
  assert.ok(maxConcurrent > 1, "the workers did run in parallel");
  assert.equal(inFlight.size, 0);
  assert.ok([...perKey.values()].reduce((a, b) => a + b) < 1000, "adds of waiting keys coalesced");
});

test("stop waits for the reconciles in flight and then hands out no more keys", async () => {
  const q = queue();
  let release!: () => void;
  const blocked = new Promise<void>((resolve) => (release = resolve));
  const started: string[] = [];
  let finished = false;
  const c = new Controller({
    name: "test",
    workers: 2,
    queue: q,
    log: memoryLog(),
    reconcile: async (key) => {
      started.push(key);
      await blocked;
      finished = true;
    },
  });
  c.start();
  q.add("a");
  await until(() => started.length === 1, "the reconcile to start");
  let stopped = false;
  const stopping = c.stop().then(() => (stopped = true));
  q.add("b");
  await sleep(20);
  assert.equal(stopped, false, "stop returned while a reconcile was in flight");
  release();
  await stopping;
  assert.equal(finished, true);
  assert.deepEqual(started, ["a"]);
});

test("enqueueFrom queues the keys of added, updated and deleted objects", async () => {
  const handlers = new Map<string, (obj: KubernetesObject) => void>();
  const informer = { on: (verb: "add" | "update" | "delete", fn: (obj: KubernetesObject) => void) => void handlers.set(verb, fn) };
  const q = queue();
  enqueueFrom(informer, q, (o) => {
    const name = o.metadata?.name;
    if (name === "skip") return undefined;
    if (name === "fan") return ["x", "y"];
    return `${o.metadata?.namespace}/${name}`;
  });
  assert.deepEqual([...handlers.keys()].sort(), ["add", "delete", "update"]);
  handlers.get("add")!({ metadata: { name: "p", namespace: "ns" } });
  handlers.get("update")!({ metadata: { name: "skip" } });
  handlers.get("delete")!({ metadata: { name: "fan" } });
  const got = [await q.get(), await q.get(), await q.get()];
  assert.deepEqual(got, ["ns/p", "x", "y"]);
  assert.equal(q.len(), 0);
  q.shutDown();
});

test("enqueueFrom hands an update's previous object to keyFn; changedBeyondStatus ignores a status-only write", async () => {
  type Obj = KubernetesObject & { spec?: unknown; status?: unknown };
  const handlers = new Map<string, (obj: Obj, old?: Obj) => void>();
  const informer = { on: (verb: "add" | "update" | "delete", fn: (obj: Obj, old?: Obj) => void) => void handlers.set(verb, fn) };
  const q = queue();
  enqueueFrom(informer, q, (o, old) => (changedBeyondStatus(o, old) ? (o.metadata?.name ?? "") : undefined));
  const v1: Obj = { metadata: { name: "p", resourceVersion: "1", generation: 1 }, spec: { paused: false }, status: { activeFences: 0 } };
  const statusOnly: Obj = { ...v1, metadata: { ...v1.metadata, resourceVersion: "2" }, status: { activeFences: 3 } };
  const spec: Obj = { ...statusOnly, metadata: { ...v1.metadata, resourceVersion: "3", generation: 2 }, spec: { paused: true } };
  const label: Obj = { ...spec, metadata: { ...spec.metadata, resourceVersion: "4", labels: { a: "b" } } };
  handlers.get("update")!(statusOnly, v1);
  assert.equal(q.len(), 0, "a status-only write queues nothing");
  handlers.get("update")!(spec, statusOnly);
  assert.equal(await q.get(), "p", "a spec change is queued");
  q.done("p");
  handlers.get("update")!(label, spec);
  assert.equal(await q.get(), "p", "a metadata change is queued");
  q.done("p");
  handlers.get("add")!(v1);
  assert.equal(await q.get(), "p", "an add (no previous object) is queued");
  q.done("p");
  handlers.get("delete")!(v1);
  assert.equal(await q.get(), "p", "a delete is queued");
  q.shutDown();
});

test("hurry() during a reconcile skips the rest that follows it, once", async () => {
  const q = queue();
  const starts: number[] = [];
  let release: () => void = () => undefined;
  const c = new Controller({
    name: "test",
    queue: q,
    log: memoryLog(),
    restMs: () => 60_000,
    reconcile: async () => {
      starts.push(performance.now());
      if (starts.length === 1) await new Promise<void>((r) => (release = r));
    },
  });
  c.start();
  q.add("fleet");
  await until(() => starts.length === 1, "the first reconcile", 1_000);
  // An event during the reconcile: its key, and a hurry while nothing rests.
  q.add("fleet");
  c.hurry();
  release();
  await until(() => starts.length === 2, "the key added during the reconcile, without the minute's rest", 1_000);
  // Consumed: the next key waits for the rest again.
  q.add("fleet");
  await sleep(150);
  assert.equal(starts.length, 2, "the rest after the second reconcile is not skipped");
  await c.stop();
});
