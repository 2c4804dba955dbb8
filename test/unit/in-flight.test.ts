import { test } from "node:test";
import assert from "node:assert/strict";
import { InFlight } from "../../src/runtime/in-flight.ts";

const deferred = () => {
  let resolve!: () => void;
  let reject!: (e: Error) => void;
  const promise = new Promise<void>((res, rej) => ((resolve = res), (reject = rej)));
  return { promise, resolve, reject };
};

test("drain waits for every tracked piece of work, including work tracked while draining, and survives failures", async () => {
  const f = new InFlight();
  const a = deferred();
  const b = deferred();
  const c = deferred();
  assert.equal(f.track(a.promise), a.promise, "track returns the work itself");
  void f.track(b.promise).catch(() => undefined);
  assert.equal(f.size, 2);
  assert.equal(f.stopping, false);
  let drained = false;
  const d = f.drain().then(() => (drained = true));
  assert.equal(f.stopping, true);
  a.resolve();
  b.reject(new Error("agent failed"));
  void f.track(c.promise);
  await new Promise((r) => setImmediate(r));
  assert.equal(drained, false, "c is still running");
  c.resolve();
  await d;
  assert.equal(f.size, 0);
});
