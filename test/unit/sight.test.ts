// Silence needs a seeing observer (docs/safety.md §4): a node's Lease silence counts only over time in which this
// replica could see — after a gap of a heartbeat watch, of the apiserver's answers, or a change of leader, it counts
// again from the end of the gap (issue 41 item 1).
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import type { V1Lease, V1Node, V1Pod } from "@kubernetes/client-node";
import { DateTime } from "luxon";
import { LeaseObserver } from "../../src/kube/lease-observer.ts";
import { Sight, type SightEvent } from "../../src/kube/sight.ts";
import { WatchdogObserver } from "../../src/kube/watchdog-observer.ts";
import { assessNode } from "../../src/decide/node-health.ts";
import { NODE_DOWN, nodeDownChange } from "../../src/decide/node-down.ts";

const RENEW = "2026-12-02T10:00:00.000000Z";
const lease = (name: string, renewTime: string): V1Lease => ({
  metadata: { name, namespace: "kube-node-lease" },
  spec: { renewTime: renewTime as never, leaseDurationSeconds: 40, holderIdentity: name },
});

function world(maxQuietMs = 10_000) {
  const clock = { ms: 1_000 };
  const events: SightEvent[] = [];
  const sight = new Sight({ mono: () => clock.ms, maxQuietMs, onChange: (e) => events.push(e) });
  const o = new LeaseObserver(() => clock.ms, sight);
  o.synced();
  o.observe(lease("db", RENEW));
  return { clock, sight, o, events };
}

describe("Sight: a node's silence counts only while this replica could see", () => {
  test("the issue's outage: etcd down 45 s, the Lease unchanged since before it; silence counts from the apiserver's next answer", () => {
    const { clock, sight, o } = world();
    sight.answered(true);
    clock.ms += 10_000; // renewed nothing since: 10 s of silence, seen
    assert.equal(o.silentForMs("db", RENEW), 10_000);
    sight.answered(false, "etcdserver: request timed out"); // the elector's renewal fails: etcd is down
    clock.ms += 45_000;
    assert.equal(o.silentForMs("db", RENEW), 0, "nothing is silent while this replica cannot see");
    sight.answered(true); // etcd back
    clock.ms += 5_000; // the kubelet has not re-renewed yet
    assert.equal(o.silentForMs("db", RENEW), 5_000, "counted from the end of the gap, not 60 s");
    // Before the fix, 60 s: past the Lease's 40 s, a healthy node partitioned.
  });

  test("a watch of the heartbeats down: nothing silent while lost, counted again from when it is regained", () => {
    const { clock, sight, o } = world();
    clock.ms += 30_000;
    sight.lost("/leases", "watch failed");
    assert.equal(sight.seeing, false);
    clock.ms += 20_000;
    assert.equal(o.silentForMs("db", RENEW), 0);
    sight.lost("/nodes", "watch failed");
    sight.regained("/leases", "listed");
    assert.equal(o.silentForMs("db", RENEW), 0, "one source still blind: still nothing");
    clock.ms += 3_000;
    sight.regained("/nodes", "listed");
    clock.ms += 2_000;
    assert.equal(o.silentForMs("db", RENEW), 2_000);
  });

  test("answers of the apiserver further apart than maxQuietMs are a gap; closer ones are not", () => {
    const { clock, sight, o } = world(10_000);
    sight.answered(true);
    clock.ms += 9_000;
    sight.answered(true);
    assert.equal(o.silentForMs("db", RENEW), 9_000, "9 s between answers: no gap");
    clock.ms += 12_000; // one request hung 12 s, then answered
    sight.answered(true);
    assert.equal(o.silentForMs("db", RENEW), 0, "12 s without an answer: silence counts again from the answer");
  });

  test("a request hanging past maxQuietMs is blindness while it hangs, not only once it answers (second review)", () => {
    const { clock, sight, o } = world(10_000);
    sight.answered(true);
    clock.ms += 9_000;
    assert.equal(o.silentForMs("db", RENEW), 9_000);
    clock.ms += 2_000; // 11 s without an answer: the request to etcd hangs
    assert.equal(o.silentForMs("db", RENEW), 0);
    clock.ms += 30_000;
    assert.equal(o.silentForMs("db", RENEW), 0);
    sight.answered(true);
    clock.ms += 1_000;
    assert.equal(o.silentForMs("db", RENEW), 1_000);
  });

  test("a new leader counts nothing from before it led", () => {
    const { clock, sight, o } = world();
    clock.ms += 39_000;
    assert.equal(o.silentForMs("db", RENEW), 39_000);
    sight.restart("became the leader");
    clock.ms += 1_000;
    assert.equal(o.silentForMs("db", RENEW), 1_000);
  });

  test("a renewal seen after the gap counts from when it was seen, as before", () => {
    const { clock, sight, o } = world();
    sight.lost("apiserver", "x");
    clock.ms += 5_000;
    sight.regained("apiserver", "y");
    clock.ms += 3_000;
    o.observe(lease("db", "2026-12-02T10:00:50.000000Z"));
    clock.ms += 4_000;
    assert.equal(o.silentForMs("db", "2026-12-02T10:00:50.000000Z"), 4_000);
  });

  test("before the first sync nothing counts, and a gap then does not invent a start", () => {
    const clock = { ms: 0 };
    const sight = new Sight({ mono: () => clock.ms });
    sight.lost("apiserver", "x");
    sight.regained("apiserver", "y");
    assert.equal(sight.seeingSince(), undefined);
    clock.ms = 500;
    sight.synced();
    assert.equal(sight.seeingSince(), 500);
  });

  test("the node health: a Ready=True node whose Lease is 60 s old by the wall clock but seen silent 5 s is not partitioned", () => {
    const { clock, sight, o } = world();
    sight.answered(false, "down");
    clock.ms += 45_000;
    sight.answered(true);
    clock.ms += 5_000;
    const now = DateTime.fromISO("2026-12-02T10:01:00Z");
    const node: V1Node = {
      metadata: { name: "db" },
      status: { conditions: [{ type: "Ready", status: "True", lastHeartbeatTime: new Date("2026-12-02T10:00:00Z") } as never] },
    };
    const h = assessNode(node, lease("db", RENEW), now, 30, false, o.silentForMs("db", RENEW));
    assert.equal(h.state, "Suspect");
    assert.equal(h.silent, true);
    assert.ok(h.nextCheckMs !== undefined && h.nextCheckMs - now.toMillis() === 35_000, "due again when 40 s were seen");
  });

  test("the node health: Ready=Unknown counts only once the operator itself has seen the Lease silent for the timeout", () => {
    const now = DateTime.fromISO("2026-12-02T10:01:00Z");
    const node: V1Node = {
      metadata: { name: "db" },
      status: { conditions: [{ type: "Ready", status: "Unknown", lastHeartbeatTime: new Date("2026-12-02T10:00:00Z") } as never] },
    };
    const early = assessNode(node, lease("db", RENEW), now, 30, false, 5_000);
    assert.equal(early.state, "Suspect", "seen silent 5 s of 30: the node controller's view of an outage is not this replica's");
    assert.equal(early.nextCheckMs, now.toMillis() + 25_000);
    assert.equal(assessNode(node, lease("db", RENEW), now, 30, false, 30_000).state, "Partitioned");
    assert.equal(assessNode(node, lease("db", RENEW), now, 30, false, 30_000).partitionedBy, "NodeController");
    // Where nothing observes the Lease (the CLI), the node controller's word stands.
    assert.equal(assessNode(node, lease("db", RENEW), now, 30).state, "Partitioned");
  });

  test("watchdog evidence: no window while blind, and a window opened before a gap starts again after it", () => {
    const clock = { ms: 1_000 };
    const sight = new Sight({ mono: () => clock.ms });
    sight.synced();
    const w = new WatchdogObserver(
      () => clock.ms,
      () => new Date(clock.ms).toISOString(),
      sight,
    );
    w.synced();
    const record: V1Lease = {
      metadata: { name: "db", namespace: "stockade-node-agent", resourceVersion: "1" },
      spec: { renewTime: RENEW as never, holderIdentity: "agent" },
    };
    const first = w.look("uid-1", "db", record, 0);
    assert.equal(first?.t0Ms, 1_000);
    clock.ms += 20_000;
    sight.lost("apiserver", "etcd down");
    assert.equal(w.look("uid-1", "db", record, 20_000), undefined, "no evidence while this replica cannot see");
    clock.ms += 30_000;
    sight.regained("apiserver", "back");
    clock.ms += 1_000;
    const after = w.look("uid-1", "db", record, 1_000);
    assert.equal(after?.t0Ms, 52_000, "t0 starts again after the gap");
    assert.equal(after?.recordSilentMs, 1_000, "the record's silence counts from the end of the gap");
  });
});

describe("NodeDown through a recount (fresh review of issue 41 item 1)", () => {
  const pod = (setAt: string): V1Pod => ({
    metadata: { name: "db-0", namespace: "app", uid: "u" },
    spec: { nodeName: "db", containers: [] },
    status: {
      conditions: [{ type: NODE_DOWN, status: "True", reason: "NodePartitioned", message: "m", lastTransitionTime: setAt as never }],
    },
  });
  const beat = Date.parse("2026-12-02T10:00:00Z");
  test("a pod keeps NodeDown while its node is silent and has not heartbeat since it was set, though not partitioned again yet", () => {
    const recount = { state: "Suspect" as const, silent: true, lastHeartbeatMs: beat };
    assert.equal(nodeDownChange(pod("2026-12-02T10:00:45Z"), null, recount), undefined);
  });
  test("it loses it once the node heartbeats (not silent), or heartbeat after it was set", () => {
    assert.equal(
      nodeDownChange(pod("2026-12-02T10:00:45Z"), null, { state: "Healthy", silent: false, lastHeartbeatMs: beat })?.condition,
      null,
    );
    const later = { state: "Suspect" as const, silent: true, lastHeartbeatMs: Date.parse("2026-12-02T10:01:00Z") };
    assert.equal(nodeDownChange(pod("2026-12-02T10:00:45Z"), null, later)?.condition, null);
  });
});
