import { describe, test } from "node:test";
import assert from "node:assert/strict";
import type { V1Node } from "@kubernetes/client-node";
import type { DateTime } from "luxon";
import {
  heldForStatus,
  heldSeconds,
  MAX_HELD_CONDITIONS,
  persistedSightings,
  sight,
  sightingKey,
  stillHeld,
  triggerStates,
  type ConditionTrigger,
  type Sighting,
  type UntrustedCondition,
} from "../../src/decide/node-conditions.ts";
import { at, node, stamp, T0, writtenBy } from "./decide-fixtures.ts";

const NPD = "node-problem-detector";
const KD = { type: "KernelDeadlock", status: "True" as const, forSeconds: 60, trustedWriters: [NPD] };

/**
 * node-1 with KernelDeadlock at `status`, its lastTransitionTime as the node wrote it (its own clock), set by
 * node-problem-detector (as recorded in managedFields).
 */
function withCondition(status: string, transition: DateTime | string | undefined = T0, name = "node-1", writer = NPD): V1Node {
  const n = node(name, { heartbeat: at(0) });
  n.status!.conditions!.push({
    type: "KernelDeadlock",
    status,
    reason: "DockerHung",
    lastTransitionTime: (typeof transition === "string" ? transition : transition?.toJSDate()) as Date,
  });
  return writtenBy(n, "KernelDeadlock", writer);
}

describe("condition triggers: how long a node condition has held, on the operator's clocks", () => {
  test("not held: no sighting (another status, or no such condition)", () => {
    assert.equal(sight(withCondition("False"), KD, undefined, undefined, { now: at(0), mono: 0 }), undefined);
    assert.equal(sight(node("node-1"), KD, undefined, undefined, { now: at(0), mono: 0 }), undefined);
    assert.equal(stillHeld(withCondition("False"), KD), false);
    assert.equal(stillHeld(undefined, KD), false);
    assert.equal(stillHeld(withCondition("True"), KD), true);
  });

  test("first seen now: held 0 s, whatever lastTransitionTime the node wrote (an hour ago on its clock)", () => {
    const s = sight(withCondition("True", at(-3600)), KD, undefined, undefined, { now: at(100), mono: 5_000 })!;
    assert.equal(s.since, stamp(at(100)));
    assert.equal(heldSeconds(s, { now: at(100), mono: 5_000 }), 0);
    assert.equal(heldSeconds(s, { now: at(130), mono: 35_000 }), 30);
  });

  test("kept while the node's lastTransitionTime stays; a new one (it flipped between two looks) starts again", () => {
    const c0 = { now: at(0), mono: 0 };
    const s = sight(withCondition("True", T0), KD, undefined, undefined, c0)!;
    const same = sight(withCondition("True", T0), KD, s, undefined, { now: at(50), mono: 50_000 })!;
    assert.equal(same, s);
    assert.equal(heldSeconds(same, { now: at(50), mono: 50_000 }), 50);
    const flipped = sight(withCondition("True", at(40)), KD, s, undefined, { now: at(50), mono: 50_000 })!;
    assert.equal(flipped.since, stamp(at(50)));
    assert.equal(heldSeconds(flipped, { now: at(50), mono: 50_000 }), 0);
  });

  test("a clock jump forward while the operator runs does not shorten the wait (monotonic bound)", () => {
    const s = sight(withCondition("True"), KD, undefined, undefined, { now: at(0), mono: 1_000 })!;
    // 10 s later by the monotonic clock, but the wall clock jumped an hour ahead.
    const jumped = { now: at(3610), mono: 11_000 };
    assert.equal(sight(withCondition("True"), KD, s, undefined, jumped), s);
    assert.equal(heldSeconds(s, jumped), 10);
    const [st] = triggerStates(withCondition("True"), [KD], new Map([[sightingKey("node-1", KD.type), s]]), new Map(), jumped, new Map());
    assert.equal(st!.left, 50, "50 s still to wait, not due");
  });

  test("a clock jump back only lengthens it (wall bound), never below 0", () => {
    const s = sight(withCondition("True"), KD, undefined, undefined, { now: at(100), mono: 0 })!;
    assert.equal(heldSeconds(s, { now: at(110), mono: 70_000 }), 10);
    assert.equal(heldSeconds(s, { now: at(40), mono: 70_000 }), 0);
  });

  test("a successor resumes from the persisted record (same lastTransitionTime), monotonic from then on", () => {
    const persisted = heldForStatus([sight(withCondition("True"), KD, undefined, undefined, { now: at(0), mono: 0 })!])[0]!;
    const s = sight(withCondition("True"), KD, undefined, persisted, { now: at(45), mono: 999 })!;
    assert.equal(s.since, stamp(at(0)));
    assert.equal(heldSeconds(s, { now: at(45), mono: 999 }), 45);
    // Its wall clock jumps ahead afterwards: the monotonic clock still bounds it.
    assert.equal(heldSeconds(s, { now: at(9999), mono: 10_999 }), 55);
  });

  test("a persisted record is not resumed when the condition flipped since, or when it is in our clock's future", () => {
    const persisted = heldForStatus([sight(withCondition("True", T0), KD, undefined, undefined, { now: at(0), mono: 0 })!])[0]!;
    const flipped = sight(withCondition("True", at(30)), KD, undefined, persisted, { now: at(45), mono: 0 })!;
    assert.equal(flipped.since, stamp(at(45)));
    const future = sight(withCondition("True", T0), KD, undefined, { ...persisted, since: stamp(at(500)) }, { now: at(45), mono: 0 })!;
    assert.equal(future.since, stamp(at(45)));
    // Another status for the type in the policy now: not the same record.
    const other = sight(withCondition("True", T0), KD, undefined, { ...persisted, status: "Unknown" }, { now: at(45), mono: 0 })!;
    assert.equal(other.since, stamp(at(45)));
  });

  test("the CLI (no monotonic clock) reads the persisted record by the wall clock", () => {
    const persisted = { node: "node-1", type: "KernelDeadlock", status: "True", since: stamp(at(0)), lastTransitionTime: stamp(T0) };
    const [st] = triggerStates(
      withCondition("True"),
      [KD],
      new Map(),
      persistedSightings([persisted]),
      { now: at(20), mono: undefined },
      new Map(),
    );
    assert.equal(st!.held, 20);
    assert.equal(st!.left, 40);
  });

  test("triggerStates: every trigger held, nearest to due first, each recorded for the next pass", () => {
    const n = writtenBy(withCondition("True"), "Ready", "kubelet");
    n.status!.conditions![0] = { type: "Ready", status: "False", reason: "KubeletNotReady", lastTransitionTime: T0.toJSDate() };
    const ready = { type: "Ready", status: "False" as const, forSeconds: 300, trustedWriters: ["kubelet"] };
    const disk = { type: "ReadonlyFilesystem", status: "True" as const, forSeconds: 30, trustedWriters: [NPD] };
    const next = new Map<string, Sighting>();
    const states = triggerStates(n, [ready, KD, disk], new Map(), new Map(), { now: at(0), mono: 0 }, next);
    assert.deepEqual(
      states.map((s) => [s.trigger.type, s.left]),
      [
        ["KernelDeadlock", 60],
        ["Ready", 300],
      ],
    );
    assert.deepEqual([...next.keys()].sort(), [sightingKey("node-1", "KernelDeadlock"), sightingKey("node-1", "Ready")].sort());
  });

  test("heldForStatus: no monotonic reading, oldest first, bounded", () => {
    const many: Sighting[] = Array.from({ length: MAX_HELD_CONDITIONS + 5 }, (_, k) => ({
      node: `n-${k}`,
      type: "KernelDeadlock",
      status: "True",
      since: stamp(at(MAX_HELD_CONDITIONS + 5 - k)),
      sinceMono: k,
    }));
    const out = heldForStatus(many);
    assert.equal(out.length, MAX_HELD_CONDITIONS);
    assert.equal(out[0]!.node, `n-${MAX_HELD_CONDITIONS + 4}`);
    assert.ok(out.every((h) => !("sinceMono" in h)));
  });
});

describe("condition triggers: only a condition set by the trigger's trusted writers counts (issue 41 item 4)", () => {
  const c0 = { now: at(0), mono: 0 };
  const states = (n: V1Node, triggers: ConditionTrigger[] = [KD], prev = new Map<string, Sighting>(), clocks = c0) => {
    const untrusted: UntrustedCondition[] = [];
    const next = new Map<string, Sighting>();
    const held = triggerStates(n, triggers, prev, new Map(), clocks, next, untrusted);
    return { held, untrusted, next };
  };

  test("set by a writer the trigger does not list (a CNI agent's token): not held, not still held, reported", () => {
    const n = withCondition("True", T0, "node-1", "calico-node");
    const r = states(n);
    assert.deepEqual(r.held, []);
    assert.equal(r.next.size, 0, "no sighting: its wait has not started");
    assert.deepEqual(r.untrusted, [
      { node: "node-1", type: "KernelDeadlock", status: "True", writers: ["calico-node"], untrusted: ["calico-node"] },
    ]);
    assert.equal(stillHeld(n, KD), false, "a fresh read of it does not let a fence go on");
  });

  test("set by the listed writer: held as before", () => {
    const r = states(withCondition("True"));
    assert.equal(r.held.length, 1);
    assert.deepEqual(r.untrusted, []);
    assert.equal(stillHeld(withCondition("True"), KD), true);
  });

  test("co-owned by the trusted writer and another (both applied the value): not trusted, the other named", () => {
    const n = withCondition("True", T0, "node-1", "attacker");
    n.metadata!.managedFields = [];
    writtenBy(n, "KernelDeadlock", "attacker", { operation: "Apply" });
    writtenBy(n, "KernelDeadlock", NPD, { operation: "Apply" });
    const r = states(n);
    assert.deepEqual(r.held, []);
    assert.deepEqual(r.untrusted[0]!.writers, ["attacker", NPD]);
    assert.deepEqual(r.untrusted[0]!.untrusted, ["attacker"]);
    assert.equal(stillHeld(n, KD), false);
  });

  test("the trusted writer's other fields (its heartbeat) do not make another's status trusted", () => {
    // The attacker set the status; node-problem-detector only renews lastHeartbeatTime, which leaves the status
    // with the attacker (an Update owns what it changed).
    const n = withCondition("True", T0, "node-1", "attacker");
    n.metadata!.managedFields!.push({
      manager: NPD,
      operation: "Update",
      subresource: "status",
      apiVersion: "v1",
      fieldsType: "FieldsV1",
      fieldsV1: { "f:status": { "f:conditions": { 'k:{"type":"KernelDeadlock"}': { "f:lastHeartbeatTime": {} } } } },
    });
    assert.equal(stillHeld(n, KD), false);
    assert.deepEqual(states(n).untrusted[0]!.writers, ["attacker"]);
  });

  test("no writer recorded (managedFields stripped): not trusted", () => {
    const n = withCondition("True");
    n.metadata!.managedFields = undefined;
    const r = states(n);
    assert.deepEqual(r.held, []);
    assert.deepEqual(r.untrusted[0]!.writers, []);
    assert.equal(stillHeld(n, KD), false);
  });

  test("an entry whose fields cannot be read (not FieldsV1) may own the status: not trusted", () => {
    const n = withCondition("True");
    n.metadata!.managedFields!.push({ manager: "future", operation: "Update", fieldsType: "FieldsV2" });
    assert.equal(stillHeld(n, KD), false);
    assert.deepEqual(states(n).untrusted[0]!.untrusted, ["future"]);
  });

  test("a trigger that lists no writer trusts nothing, not even the kubelet (reported by the policy, not per node)", () => {
    const n = writtenBy(withCondition("True"), "KernelDeadlock", "kubelet");
    const bare = { type: "KernelDeadlock", status: "True" as const, forSeconds: 60 };
    const r = states(n, [bare]);
    assert.deepEqual(r.held, []);
    assert.deepEqual(r.untrusted, []);
    assert.equal(stillHeld(n, bare), false);
    assert.equal(stillHeld(n, { ...bare, trustedWriters: [] }), false);
  });

  test("taken over by an untrusted writer, the wait is dropped; set by the trusted one again, it starts again", () => {
    const first = states(withCondition("True"));
    assert.equal(first.held.length, 1);
    // 50 s later another writer took the status (flipping it in between, so the same value and transition time).
    const taken = states(withCondition("True", T0, "node-1", "attacker"), [KD], first.next, { now: at(50), mono: 50_000 });
    assert.deepEqual(taken.held, []);
    const back = states(withCondition("True"), [KD], taken.next, { now: at(55), mono: 55_000 });
    assert.equal(back.held[0]!.held, 0, "not 55 s: the time under another writer does not count");
  });
});
