import { describe, test } from "node:test";
import assert from "node:assert/strict";
import type { V1Lease } from "@kubernetes/client-node";
import { LeaseObserver } from "../../src/kube/lease-observer.ts";

const lease = (name: string, renewTime: string | Date | undefined): V1Lease => ({
  metadata: { name, namespace: "kube-node-lease" },
  spec: { renewTime: renewTime as never, leaseDurationSeconds: 40 },
});

/** An observer on a monotonic clock the test moves (ms). */
function world() {
  const clock = { ms: 1_000 };
  return { clock, o: new LeaseObserver(() => clock.ms) };
}

describe("LeaseObserver: a Lease's silence on the operator's monotonic clock, from when it saw the renewal", () => {
  test("a renewTime seen after the sync counts from when it was seen; a new value resets it", () => {
    const { clock, o } = world();
    o.synced();
    o.observe(lease("n1", "2020-01-01T00:00:00.000000Z"));
    clock.ms += 25_000;
    assert.equal(o.silentForMs("n1", "2020-01-01T00:00:00.000000Z"), 25_000, "the renewTime's value (years old) does not matter");
    o.observe(lease("n1", "2020-01-01T00:00:10.000000Z"));
    assert.equal(o.silentForMs("n1", "2020-01-01T00:00:10.000000Z"), 0, "a new renewal: 0");
    clock.ms += 7_000;
    assert.equal(o.silentForMs("n1", "2020-01-01T00:00:10.000000Z"), 7_000);
    // The same value again (a relist, another field of the Lease changed): nothing resets.
    o.observe(lease("n1", "2020-01-01T00:00:10.000000Z"));
    assert.equal(o.silentForMs("n1", "2020-01-01T00:00:10.000000Z"), 7_000);
  });

  test("a list's Date and a watch's string of one instant are the same value", () => {
    const { clock, o } = world();
    o.synced();
    o.observe(lease("n1", new Date("2026-01-01T00:00:00Z")));
    clock.ms += 5_000;
    assert.equal(o.silentForMs("n1", "2026-01-01T00:00:00.000000Z"), 5_000);
  });

  test("a fresh read newer than the cache is recorded as seen now: 0, and counts from there", () => {
    const { clock, o } = world();
    o.synced();
    o.observe(lease("n1", "2026-01-01T00:00:00Z"));
    clock.ms += 60_000;
    assert.equal(o.silentForMs("n1", "2026-01-01T00:00:10Z"), 0, "the fresh read's renewTime differs from the cache's");
    clock.ms += 3_000;
    assert.equal(o.silentForMs("n1", "2026-01-01T00:00:10Z"), 3_000);
    // The cache's watch event for that renewal, arriving late, changes nothing.
    o.observe(lease("n1", "2026-01-01T00:00:10Z"));
    assert.equal(o.silentForMs("n1", "2026-01-01T00:00:10Z"), 3_000);
  });

  test("values seen before the cache's first sync count from the sync; before it, nothing is silent", () => {
    const { clock, o } = world();
    o.observe(lease("n1", "2026-01-01T00:00:00Z"));
    clock.ms += 100_000;
    assert.equal(o.silentForMs("n1", "2026-01-01T00:00:00Z"), 0, "not synced yet");
    o.synced();
    assert.equal(o.silentForMs("n1", "2026-01-01T00:00:00Z"), 0, "seen 100 s ago, but only synced now");
    clock.ms += 39_999;
    assert.equal(o.silentForMs("n1", "2026-01-01T00:00:00Z"), 39_999, "a restarted operator waits a whole duration");
    o.synced(); // a later call (a relist) does not move the sync
    clock.ms += 1;
    assert.equal(o.silentForMs("n1", "2026-01-01T00:00:00Z"), 40_000);
  });

  test("an unknown node, or a deleted Lease, counts as seen now", () => {
    const { clock, o } = world();
    o.synced();
    clock.ms += 500_000;
    assert.equal(o.silentForMs("ghost", "2026-01-01T00:00:00Z"), 0, "never seen: recorded now");
    clock.ms += 2_000;
    assert.equal(o.silentForMs("ghost", "2026-01-01T00:00:00Z"), 2_000);
    o.observe(lease("n1", "2026-01-01T00:00:00Z"));
    clock.ms += 50_000;
    o.forget(lease("n1", "2026-01-01T00:00:00Z"));
    assert.equal(o.silentForMs("n1", "2026-01-01T00:00:00Z"), 0, "deleted and read again: a new observation");
  });
});
