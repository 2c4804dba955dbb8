import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { assessNode, partitionSignal, readyCondition, readyTurnedUnknown, toDateTime } from "../../src/decide/node-health.ts";
import { LeaseObserver } from "../../src/kube/lease-observer.ts";
import { T0, at, lease, node } from "./decide-fixtures.ts";

const TIMEOUT = 40;
const same = (a: { toMillis(): number } | undefined, b: { toMillis(): number } | undefined, what = "time") =>
  assert.equal(a?.toMillis(), b?.toMillis(), what);

describe("toDateTime", () => {
  test("reads Dates and ISO strings, and nothing else", () => {
    same(toDateTime(T0.toJSDate()), T0);
    same(toDateTime("2026-01-01T00:00:00Z"), T0);
    assert.equal(toDateTime(undefined), undefined);
    assert.equal(toDateTime(null), undefined);
    assert.equal(toDateTime("not a time"), undefined);
    assert.equal(toDateTime(new Date(Number.NaN)), undefined);
  });
});

describe("readyTurnedUnknown", () => {
  test("only a change to Unknown (or a node added Unknown) counts", () => {
    const n = (ready: "True" | "False" | "Unknown" | null) => node("node-1", { ready, heartbeat: T0 });
    assert.equal(readyTurnedUnknown(n("Unknown"), n("True")), true);
    assert.equal(readyTurnedUnknown(n("Unknown"), n("False")), true);
    assert.equal(readyTurnedUnknown(n("Unknown"), n(null)), true);
    assert.equal(readyTurnedUnknown(n("Unknown"), undefined), true, "added");
    assert.equal(readyTurnedUnknown(n("Unknown"), n("Unknown")), false, "still Unknown");
    assert.equal(readyTurnedUnknown(n("True"), n("Unknown")), false, "back");
    assert.equal(readyTurnedUnknown(n("False"), n("True")), false);
    assert.equal(readyTurnedUnknown(n(null), n("True")), false);
  });
});

describe("assessNode", () => {
  test("current Lease and Ready=True: Healthy, look again when the heartbeat goes stale", () => {
    const h = assessNode(node("node-1", { ready: "True", heartbeat: T0 }), lease("node-1", at(10)), at(20), TIMEOUT);
    assert.equal(h.state, "Healthy");
    assert.equal(h.name, "node-1");
    assert.equal(h.ready, "True");
    assert.equal(h.bootID, "boot-node-1");
    same(h.lastHeartbeat, at(10), "lastHeartbeat is the newer of Lease and Ready");
    same(h.nextCheck, at(50));
    assert.equal(h.partitionedSince, undefined);
    assert.equal(h.silent, false);
  });

  test("the newest of the two heartbeats counts, whichever it is", () => {
    // The kubelet updates Ready.lastHeartbeatTime rarely; here it is newer than the Lease.
    const h = assessNode(node("node-1", { ready: "True", heartbeat: at(30) }), lease("node-1", T0), at(60), TIMEOUT);
    assert.equal(h.state, "Healthy");
    same(h.lastHeartbeat, at(30));
    same(h.nextCheck, at(70));
  });

  test("a fresh Lease alone keeps a node out of Partitioned, even with Ready=Unknown", () => {
    const h = assessNode(node("node-1", { ready: "Unknown", heartbeat: T0 }), lease("node-1", at(100)), at(120), TIMEOUT);
    assert.equal(h.state, "Suspect");
    assert.equal(h.silent, false, "the Lease is fresh");
    assert.equal(h.partitionedSince, undefined);
    same(h.nextCheck, at(140), "wakes up when the Lease goes stale");
  });

  test("both heartbeats stale and Ready=Unknown: Partitioned since lastHeartbeat + timeout", () => {
    const h = assessNode(node("node-1", { ready: "Unknown", heartbeat: T0 }), lease("node-1", at(5)), at(300), TIMEOUT);
    assert.equal(h.state, "Partitioned");
    assert.equal(h.silent, true);
    assert.equal(h.ready, "Unknown");
    same(h.lastHeartbeat, at(5));
    same(h.partitionedSince, at(45));
    assert.equal(h.nextCheck, undefined, "nothing changes by time alone any more");
  });

  test("the staleness boundary: Suspect one millisecond before, Partitioned at lastHeartbeat + timeout exactly", () => {
    const n = node("node-1", { ready: "Unknown" });
    const l = lease("node-1", T0);
    const before = assessNode(n, l, at(TIMEOUT).minus({ milliseconds: 1 }), TIMEOUT);
    assert.equal(before.state, "Suspect");
    same(before.nextCheck, at(TIMEOUT));
    const exactly = assessNode(n, l, at(TIMEOUT), TIMEOUT);
    assert.equal(exactly.state, "Partitioned");
    same(exactly.partitionedSince, at(TIMEOUT));
  });

  test("the timeout comes from the caller (the policy)", () => {
    const n = node("node-1", { ready: "Unknown" });
    const l = lease("node-1", T0);
    assert.equal(assessNode(n, l, at(100), 120).state, "Suspect");
    assert.equal(assessNode(n, l, at(100), 60).state, "Partitioned");
  });

  test("waitForNodeController: silent but still Ready=True: Suspect until the node-lifecycle controller flips Ready (an event wakes us)", () => {
    const h = assessNode(node("node-1", { ready: "True", heartbeat: T0 }), lease("node-1", T0), at(600), TIMEOUT, true);
    assert.equal(h.state, "Suspect");
    assert.equal(h.silent, true, "silent, so the storm guard counts it, though not partitioned yet");
    assert.equal(h.partitionedSince, undefined);
    assert.equal(h.nextCheck, undefined);
  });

  test("fresh heartbeats but Ready=False: Suspect, not Healthy", () => {
    const h = assessNode(node("node-1", { ready: "False" }), lease("node-1", at(10)), at(20), TIMEOUT);
    assert.equal(h.state, "Suspect");
    same(h.nextCheck, at(50));
  });

  // Current behaviour, pinned on purpose: docs/DESIGN say automatic fencing needs Ready=Unknown, but a node whose
  // last word was Ready=False (or no Ready condition) and that has been silent past the timeout is also Partitioned
  // (unlike Ready=True, which waits for the node-lifecycle controller). Raised as a design question in the report.
  test("waitForNodeController: silent with Ready=False or no Ready condition: Suspect (silent) until the node controller says Unknown", () => {
    const f = assessNode(node("node-1", { ready: "False", heartbeat: T0 }), lease("node-1", T0), at(100), TIMEOUT, true);
    assert.equal(f.state, "Suspect");
    assert.equal(f.silent, true);
    const m = assessNode(node("node-1", { ready: null }), lease("node-1", T0), at(100), TIMEOUT, true);
    assert.equal(m.ready, "Missing");
    assert.equal(m.state, "Suspect");
    assert.equal(m.silent, true);
  });

  test("a node that never reported is Suspect (being created), never Partitioned", () => {
    const noLease = assessNode(node("node-1", { ready: null }), undefined, at(10_000), TIMEOUT);
    assert.equal(noLease.state, "Suspect");
    assert.equal(noLease.lastHeartbeat, undefined);
    assert.equal(noLease.silent, false);
    assert.equal(noLease.nextCheck, undefined);
    const emptyLease = assessNode(node("node-1", { ready: "Unknown" }), lease("node-1", undefined), at(10_000), TIMEOUT);
    assert.equal(emptyLease.state, "Suspect");
  });

  test("no Lease: the Ready heartbeat alone decides", () => {
    assert.equal(assessNode(node("node-1", { ready: "True", heartbeat: at(90) }), undefined, at(100), TIMEOUT).state, "Healthy");
    const h = assessNode(node("node-1", { ready: "Unknown", heartbeat: T0 }), undefined, at(100), TIMEOUT);
    assert.equal(h.state, "Partitioned");
    same(h.partitionedSince, at(40));
  });

  test("Lease renewTime as an ISO string (as a raw watch event may carry it) is read too", () => {
    const l = lease("node-1", undefined);
    (l.spec as unknown as { renewTime: string }).renewTime = "2026-01-01T00:01:00.123456Z";
    const h = assessNode(node("node-1", { ready: "Unknown" }), l, at(70), TIMEOUT);
    assert.equal(h.state, "Suspect");
    assert.equal(h.lastHeartbeat?.toUTC().toISO(), "2026-01-01T00:01:00.123Z");
  });

  test("a heartbeat string changed in place on the same object is read again, never the one parsed before", () => {
    // Parsed strings are kept per holding object (a pass reads every node's heartbeats); a cache that changed an
    // object in place must still be read as it is now: an old renewal would make a live node look silent.
    const l = lease("node-1", undefined);
    const spec = l.spec as unknown as { renewTime: string };
    const n = node("node-1", { ready: "Unknown" });
    const ready = readyCondition(n) as unknown as { lastHeartbeatTime: string };
    ready.lastHeartbeatTime = "2026-01-01T00:00:00Z";
    spec.renewTime = "2026-01-01T00:00:10Z";
    assert.equal(assessNode(n, l, at(60), TIMEOUT).state, "Partitioned");
    spec.renewTime = "2026-01-01T00:00:50Z";
    const h = assessNode(n, l, at(60), TIMEOUT);
    assert.equal(h.state, "Suspect", "the new renewal counts");
    same(h.lastHeartbeat, at(50));
    spec.renewTime = "2026-01-01T00:00:10Z";
    ready.lastHeartbeatTime = "2026-01-01T00:00:55Z";
    same(assessNode(n, l, at(60), TIMEOUT).lastHeartbeat, at(55), "and the Ready condition's");
    ready.lastHeartbeatTime = "not a time";
    same(assessNode(n, l, at(60), TIMEOUT).lastHeartbeat, at(10), "an unreadable one is none");
  });

  test("missing bootID and name are empty strings, not undefined", () => {
    const n = node("node-1");
    delete n.status!.nodeInfo;
    delete n.metadata;
    const h = assessNode(n, undefined, T0, TIMEOUT);
    assert.equal(h.bootID, "");
    assert.equal(h.name, "");
  });

  test("readyCondition finds the Ready condition among others", () => {
    const n = node("node-1", { ready: "Unknown" });
    n.status!.conditions!.unshift({ type: "MemoryPressure", status: "False" });
    assert.equal(readyCondition(n)?.status, "Unknown");
    assert.equal(readyCondition(node("node-2", { ready: null })), undefined);
  });
});

describe("item 18: a heartbeat timeout below the node's own renewal is raised", () => {
  test("a 5 s timeout with the kubelet's default 40 s Lease (renewed every 10 s): 20 s, so a healthy node never looks silent", () => {
    // Renewed 9 s ago: between two renewals, as a healthy node is most of the time.
    const h = assessNode(node("node-1", { ready: "True", heartbeat: T0 }), lease("node-1", at(1)), at(10), 5);
    assert.equal(h.state, "Healthy");
    assert.equal(h.silent, false);
    assert.equal(h.timeoutSeconds, 20);
    same(h.nextCheck, at(21));
  });

  test("a longer timeout, or a node with a short Lease (the lab's 8 s), keeps the policy's", () => {
    assert.equal(assessNode(node("node-1"), lease("node-1", T0), at(1), 40).timeoutSeconds, 40);
    const short = lease("node-1", T0);
    short.spec!.leaseDurationSeconds = 8;
    assert.equal(assessNode(node("node-1"), short, at(1), 6).timeoutSeconds, 6);
  });

  test("silence past the raised timeout still counts", () => {
    const h = assessNode(node("node-1", { ready: "Unknown", heartbeat: T0 }), lease("node-1", T0), at(25), 5);
    assert.equal(h.state, "Partitioned");
    same(h.partitionedSince, at(20));
  });
});

// Issue 31: the node's own Lease as the second signal (detection.waitForNodeController false, the default).
describe("assessNode: an expired Lease is the second signal", () => {
  const T = 30; // the new default heartbeatTimeoutSeconds
  const ready = (r: "True" | "False" | "Unknown" | null) => node("node-1", { ready: r, heartbeat: T0 });

  test("Lease seen unrenewed for its duration + Ready=True: Partitioned by the Lease, partitionedSince = last heartbeat + timeout", () => {
    const h = assessNode(ready("True"), lease("node-1", T0, 40), at(40), T, false, 40_000);
    assert.equal(h.state, "Partitioned");
    assert.equal(h.partitionedBy, "Lease");
    assert.equal(h.silent, true);
    same(h.partitionedSince, at(30), "partitionedSince stays last heartbeat + effective timeout");
    same(h.leaseExpiry, at(40), "the Lease's expiry instant");
    assert.equal(h.leaseExpiresMs, at(40).toMillis());
    assert.equal(h.leaseDurationSeconds, 40);
    // Ready=False and no Ready condition: the same (only Ready=Unknown is the node controller's word).
    assert.equal(assessNode(ready("False"), lease("node-1", T0, 40), at(40), T, false, 40_000).partitionedBy, "Lease");
    assert.equal(assessNode(ready(null), lease("node-1", T0, 40), at(40), T, false, 40_000).partitionedBy, "Lease");
  });

  test("without an observation (the CLI) the Lease never counts, however old its renewTime: only Ready=Unknown", () => {
    const h = assessNode(ready("True"), lease("node-1", T0, 40), at(600), T);
    assert.equal(h.state, "Suspect");
    assert.equal(h.silent, true);
    assert.equal(h.partitionedBy, undefined);
    assert.equal(h.nextCheck, undefined, "nothing to wake for: the node controller's Ready=Unknown comes as an event");
    same(h.leaseExpiry, at(40), "the wall-clock estimate is still shown");
    assert.equal(assessNode(ready("Unknown"), lease("node-1", T0, 40), at(600), T).partitionedBy, "NodeController");
  });

  test("observed silence one millisecond short of the duration: not partitioned, however old renewTime looks", () => {
    const h = assessNode(ready("True"), lease("node-1", T0, 40), at(600), T, false, 39_999);
    assert.equal(h.state, "Suspect");
    same(h.nextCheck, at(600.001), "wakes when the observed silence reaches the duration");
  });

  test("the same with waitForNodeController: Suspect (silent), no wake-up at the Lease's expiry", () => {
    const h = assessNode(ready("True"), lease("node-1", T0, 40), at(600), T, true, 600_000);
    assert.equal(h.state, "Suspect");
    assert.equal(h.silent, true);
    assert.equal(h.partitionedBy, undefined);
    assert.equal(h.partitionedSince, undefined);
    assert.equal(h.nextCheck, undefined, "the node controller's Ready=Unknown wakes us with an event");
    same(h.leaseExpiry, at(40), "still reported");
  });

  test("silent but the Lease not yet overdue: Suspect, look again when it expires", () => {
    const h = assessNode(ready("True"), lease("node-1", T0, 40), at(39.999), T, false, 39_999);
    assert.equal(h.state, "Suspect");
    assert.equal(h.silent, true);
    assert.equal(h.partitionedSince, undefined);
    same(h.nextCheck, at(40), "wakes at the Lease's expiry");
    // A Lease longer than the timeout: silent long before it expires.
    const long = assessNode(ready("True"), lease("node-1", T0, 100), at(99), 60, false, 99_000);
    assert.equal(long.state, "Suspect");
    same(long.nextCheck, at(100));
    assert.equal(assessNode(ready("True"), lease("node-1", T0, 100), at(100), 60, false, 100_000).state, "Partitioned");
  });

  test("no Lease, or no leaseDurationSeconds, or no renewTime: Suspect until Ready=Unknown", () => {
    const noLease = assessNode(ready("True"), undefined, at(600), T);
    assert.equal(noLease.state, "Suspect");
    assert.equal(noLease.silent, true);
    assert.equal(noLease.leaseExpiry, undefined);
    assert.equal(noLease.nextCheck, undefined);
    const l = lease("node-1", T0, 40);
    delete l.spec!.leaseDurationSeconds;
    const noDuration = assessNode(ready("True"), l, at(600), T);
    assert.equal(noDuration.state, "Suspect");
    assert.equal(noDuration.leaseExpiry, undefined);
    const zero = assessNode(ready("True"), lease("node-1", T0, 0), at(600), T);
    assert.equal(zero.state, "Suspect", "leaseDurationSeconds 0 gives no expiry");
    const noRenew = assessNode(ready("True"), lease("node-1", undefined, 40), at(600), T);
    assert.equal(noRenew.state, "Suspect", "silent from Ready's heartbeat only; a Lease never renewed gives no expiry");
    assert.equal(noRenew.silent, true);
    // And each is Partitioned by the node controller once it says Unknown.
    for (const h of [
      assessNode(ready("Unknown"), undefined, at(600), T),
      assessNode(ready("Unknown"), l, at(600), T),
      assessNode(ready("Unknown"), lease("node-1", undefined, 40), at(600), T),
    ]) {
      assert.equal(h.state, "Partitioned");
      assert.equal(h.partitionedBy, "NodeController");
    }
  });

  test("renewTime in the future by the operator's clock: not silent until renewTime + timeout; the Lease as observed", () => {
    // The kubelet's clock is ahead, or ours jumped back: never silent earlier.
    const n = node("node-1", { ready: "True", heartbeat: at(-100) });
    const h = assessNode(n, lease("node-1", at(20), 40), at(0), T, false, 60_000);
    assert.equal(h.state, "Healthy");
    assert.equal(h.silent, false);
    same(h.leaseExpiry, at(60));
    // Silent at 50 s; the Lease expired once the operator saw it unchanged for 40 s, whatever its value says.
    const later = assessNode(n, lease("node-1", at(20), 40), at(55), T, false, 35_000);
    assert.equal(later.state, "Suspect", "silent, seen unrenewed for 35 s");
    same(later.nextCheck, at(60));
    assert.equal(assessNode(n, lease("node-1", at(20), 40), at(60), T, false, 40_000).state, "Partitioned");
  });

  test("a wall clock jumping back makes a node not silent; the Lease's observed silence is on the monotonic clock", () => {
    const l = lease("node-1", T0, 40);
    assert.equal(assessNode(ready("True"), l, at(45), T, false, 45_000).state, "Partitioned");
    const back = assessNode(ready("True"), l, at(35), T, false, 45_000);
    assert.equal(back.state, "Partitioned", "still silent (35 s ≥ 30 s), and the Lease seen unrenewed for 45 s");
    const further = assessNode(ready("True"), l, at(5), T, false, 45_000);
    assert.equal(further.state, "Healthy");
    assert.equal(further.silent, false);
  });

  test("issue 31: the operator's wall clock jumped 5 minutes ahead, the Lease just seen renewed: not partitioned", () => {
    // renewTime T0 was seen a moment ago (observed 0); the operator's wall clock now says T0 + 300 s.
    const h = assessNode(ready("True"), lease("node-1", T0, 40), at(300), T, false, 0);
    assert.equal(h.silent, true, "the wall clock makes it look silent");
    assert.equal(h.state, "Suspect", "but the Lease has not been seen unrenewed for its duration");
    assert.equal(h.partitionedBy, undefined);
    same(h.nextCheck, at(340), "looked at again when it could have expired");
  });

  test("issue 31: a node whose clock is 120 s behind, renewing every 10 s, is never partitioned by its Lease", () => {
    // Its renewTimes (and Ready heartbeats) are 120 s old when written; the operator sees each one change.
    let mono = 0;
    const observer = new LeaseObserver(() => mono);
    observer.synced();
    let l = lease("node-1", at(-120), 40);
    let n = node("node-1", { ready: "True", heartbeat: at(-120) });
    for (let s = 0; s <= 300; s += 1) {
      mono = s * 1000;
      if (s % 10 === 0) {
        l = lease("node-1", at(s - 120), 40);
        n = node("node-1", { ready: "True", heartbeat: at(s - 120) });
        observer.observe(l);
      }
      const h = assessNode(n, l, at(s), T, false, observer.silentForMs("node-1", l.spec!.renewTime));
      assert.equal(h.silent, true, "its renewTimes look 120 s old");
      assert.notEqual(h.state, "Partitioned", `at ${s} s`);
    }
    // It stops renewing at 300 s: partitioned by its Lease 40 s after the operator last saw a renewal.
    mono = 339_999;
    assert.equal(assessNode(n, l, at(339.999), T, false, observer.silentForMs("node-1", l.spec!.renewTime)).state, "Suspect");
    mono = 340_000;
    const gone = assessNode(n, l, at(340), T, false, observer.silentForMs("node-1", l.spec!.renewTime));
    assert.equal(gone.state, "Partitioned");
    assert.equal(gone.partitionedBy, "Lease");
  });

  test("Ready=Unknown first (before the Lease expires): partitioned by the NodeController; also once both hold", () => {
    // A Lease longer than the node controller's grace: Ready=Unknown comes first.
    const h = assessNode(ready("Unknown"), lease("node-1", T0, 100), at(50), T, false, 50_000);
    assert.equal(h.state, "Partitioned");
    assert.equal(h.partitionedBy, "NodeController");
    same(h.partitionedSince, at(50), "raised to half the Lease: 50 s");
    const both = assessNode(ready("Unknown"), lease("node-1", T0, 40), at(60), T, false, 60_000);
    assert.equal(both.partitionedBy, "NodeController", "Ready already Unknown");
    assert.equal(assessNode(ready("Unknown"), lease("node-1", T0, 40), at(60), T, true).partitionedBy, "NodeController");
  });

  test("a fresh Lease or a fresh Ready heartbeat keeps an expired-looking node out of Partitioned", () => {
    // The Ready heartbeat is newer than the Lease's renewal: not silent, whatever the Lease says.
    const h = assessNode(node("node-1", { ready: "True", heartbeat: at(30) }), lease("node-1", T0, 40), at(45), T, false, 45_000);
    assert.equal(h.state, "Healthy");
    assert.equal(h.silent, false);
  });

  test("partitionSignal says which signal, with the Lease's renewTime", () => {
    const byLease = assessNode(ready("True"), lease("node-1", T0, 40), at(41), T, false, 41_000);
    assert.equal(
      partitionSignal(byLease),
      "its Lease was not renewed for its leaseDurationSeconds 40, as this operator observed (renewTime 2026-01-01T00:00:00.000Z, on the node's clock)",
    );
    const byNc = assessNode(ready("Unknown"), lease("node-1", T0, 40), at(41), T);
    assert.equal(partitionSignal(byNc), "the node controller marked it Ready=Unknown");
  });
});
