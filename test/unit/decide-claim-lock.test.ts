import { describe, test } from "node:test";
import { DateTime } from "luxon";
import assert from "node:assert/strict";
import type { V1ContainerStatus, V1Lease, V1Node, V1PersistentVolumeClaim, V1Pod } from "@kubernetes/client-node";
import type { NodeFence } from "../../src/api/v1alpha1.ts";
import {
  CLAIM_GATE,
  CLAIM_GUARD_ANNOTATION,
  LOCK_ANNOTATION,
  TOKENS_ANNOTATION,
  breakLock,
  claimGuard,
  claimNames,
  decideClaim,
  fencedSince,
  heartbeatsNow,
  parseLock,
  type ClaimLock,
} from "../../src/decide/claim-lock.ts";
import { heartbeatOf } from "../../src/decide/fence-machine.ts";
import { pod, pvc } from "./decide-fixtures.ts";

const NOW = "2026-01-01T00:10:00Z";
const FENCED = new Date("2026-01-01T00:05:00Z");
const BEFORE = new Date("2026-01-01T00:00:00Z");
const AFTER = new Date("2026-01-01T00:06:00Z");

function claim(lock?: ClaimLock | string, modes = ["ReadWriteOnce"]): V1PersistentVolumeClaim {
  const c = pvc("data", modes);
  c.metadata!.uid = "uid-pvc-data";
  if (lock !== undefined) c.metadata!.annotations = { [LOCK_ANNOTATION]: typeof lock === "string" ? lock : JSON.stringify(lock) };
  return c;
}

function gated(name: string, o: { claims?: string[]; created?: Date } = {}): V1Pod {
  const p = pod(name, { claims: o.claims ?? ["data"] });
  delete p.spec!.nodeName;
  p.spec!.schedulingGates = [{ name: CLAIM_GATE }];
  p.status = { phase: "Pending" };
  p.metadata!.creationTimestamp = o.created ?? AFTER;
  return p;
}

function running(name: string, node: string, created = BEFORE, extra: Partial<V1Pod["metadata"]> = {}): V1Pod {
  const p = pod(name, { claims: ["data"], node });
  p.metadata = { ...p.metadata, creationTimestamp: created, ...extra };
  return p;
}

const stopped = (name: string): V1ContainerStatus => ({
  name,
  image: "x",
  imageID: "",
  ready: false,
  restartCount: 0,
  state: { terminated: { exitCode: 0, finishedAt: BEFORE } },
});

const held = (p: V1Pod, token: number): ClaimLock => ({
  v: 1,
  token,
  holder: { pod: p.metadata!.name!, uid: p.metadata!.uid! },
  time: "2026-01-01T00:00:00Z",
});

describe("parseLock", () => {
  test("absent record: no lock", () => assert.deepEqual(parseLock(claim()), { ok: true, lock: undefined }));

  test("a record Stockade writes round-trips", () => {
    const lock: ClaimLock = { v: 1, token: 7, holder: { pod: "db-0", uid: "u" }, time: NOW };
    assert.deepEqual(parseLock(claim(lock)), { ok: true, lock });
    const broken: ClaimLock = { v: 1, token: 7, time: NOW, brokenBy: "NodeFence node-2" };
    assert.deepEqual(parseLock(claim(broken)), { ok: true, lock: broken });
  });

  for (const [what, raw] of [
    ["not JSON", "{"],
    ["an array", "[]"],
    ["a wrong version", '{"v":2,"token":1,"time":"2026-01-01T00:00:00Z"}'],
    ["a negative token", '{"v":1,"token":-1,"time":"2026-01-01T00:00:00Z"}'],
    ["a fractional token", '{"v":1,"token":1.5,"time":"2026-01-01T00:00:00Z"}'],
    ["a string token", '{"v":1,"token":"9","time":"2026-01-01T00:00:00Z"}'],
    ["a token beyond 2^53", '{"v":1,"token":9007199254740993,"time":"2026-01-01T00:00:00Z"}'],
    ["no time", '{"v":1,"token":1}'],
    ["a holder without uid", '{"v":1,"token":1,"holder":{"pod":"x"},"time":"2026-01-01T00:00:00Z"}'],
    ["a holder with token 0", '{"v":1,"token":0,"holder":{"pod":"x","uid":"u"},"time":"2026-01-01T00:00:00Z"}'],
    ["an unknown field", '{"v":1,"token":1,"time":"2026-01-01T00:00:00Z","owner":"me"}'],
  ] as const)
    test(`refuses ${what}`, () => {
      const r = parseLock(claim(raw));
      assert.equal(r.ok, false);
      assert.match((r as { message: string }).message, /not one Stockade writes.*repaired/);
    });
});

describe("claimGuard", () => {
  const on = { readWriteOnceVolumes: true };
  test("exclusive claims are guarded when a policy guards them", () => {
    assert.equal(claimGuard(claim(undefined, ["ReadWriteOnce"]), on).guarded, true);
    assert.equal(claimGuard(claim(undefined, ["ReadWriteOncePod"]), on).guarded, true);
    assert.equal(claimGuard(claim(undefined, ["ReadWriteOnce"]), { readWriteOnceVolumes: false }).guarded, false);
  });
  test("shared claims are not, unless opted in; the annotation's old opt-out (false) is no longer read", () => {
    assert.equal(claimGuard(claim(undefined, ["ReadWriteMany"]), on).guarded, false);
    const rwx = claim(undefined, ["ReadWriteMany"]);
    rwx.metadata!.annotations = { [CLAIM_GUARD_ANNOTATION]: "true" };
    assert.equal(claimGuard(rwx, { readWriteOnceVolumes: false }).guarded, true);
    const rwo = claim();
    rwo.metadata!.annotations = { [CLAIM_GUARD_ANNOTATION]: "false" };
    assert.equal(claimGuard(rwo, on).guarded, true);
  });
  test("a claim not seen yet is guarded", () => assert.equal(claimGuard(undefined, { readWriteOnceVolumes: false }).guarded, true));
});

test("claimNames: the PVC volumes, each once, sorted; ephemeral volumes are the pod's own", () => {
  const p = pod("x", { claims: ["b", "a", "b"], ephemeral: ["ReadWriteOnce"] });
  assert.deepEqual(claimNames(p), ["a", "b"]);
});

describe("decideClaim", () => {
  const observe = (
    pvcObj: V1PersistentVolumeClaim,
    requester: V1Pod,
    others: V1Pod[],
    fenced: [string, Date][] = [],
    heartbeating: string[] = [],
  ) =>
    decideClaim({
      requester,
      pvc: pvcObj,
      pods: [requester, ...others],
      fencedNodes: new Map(fenced),
      heartbeatingNodes: new Set(heartbeating),
      now: NOW,
    });

  test("a claim nobody used: token 1", () => {
    const d = observe(claim(), gated("db-0"), []);
    assert.equal(d.kind, "grant");
    assert.equal((d as { token: number }).token, 1);
    assert.deepEqual((d as { record: ClaimLock }).record.holder, { pod: "db-0", uid: "uid-default-db-0" });
  });

  test("a running holder keeps the claim; its successor waits and is told who holds it", () => {
    const old = running("db-0-old", "node-1", BEFORE, { uid: "old" });
    const d = observe(claim(held(old, 4)), gated("db-0"), [old]);
    assert.equal(d.kind, "wait");
    assert.match((d as { message: string }).message, /db-0-old holds it \(token 4\) on node node-1/);
  });

  test("a terminating holder still holds it until its kubelet confirms (the pod object goes away)", () => {
    const old = running("old", "node-1", BEFORE, { uid: "old", deletionTimestamp: BEFORE });
    assert.equal(observe(claim(held(old, 4)), gated("db-0"), [old]).kind, "wait");
    assert.deepEqual(
      {
        kind: observe(claim(held(old, 4)), gated("db-0"), []).kind,
        token: (observe(claim(held(old, 4)), gated("db-0"), []) as { token: number }).token,
      },
      { kind: "grant", token: 5 },
    );
  });

  test("a holder whose pod finished has no instance left — as its kubelet reports it, on a node that heartbeats", () => {
    const old = running("old", "node-1", BEFORE, { uid: "old" });
    old.status = { phase: "Succeeded", containerStatuses: [stopped("c")] };
    assert.equal(observe(claim(held(old, 4)), gated("db-0"), [old], [], ["node-1"]).kind, "grant");
  });

  test("a Failed phase on a silent node proves nothing (the pod GC controller writes it before its force delete): only a fence does", () => {
    // What pkg/controller/podgc leaves on a pod of a node tainted out-of-service: phase Failed, the kubelet's last
    // report (running) untouched.
    const old = running("old", "node-1", BEFORE, { uid: "old" });
    old.status = { phase: "Failed", containerStatuses: [{ ...stopped("c"), state: { running: { startedAt: BEFORE } } }] };
    const d = observe(claim(held(old, 4)), gated("db-0"), [old]);
    assert.equal(d.kind, "wait");
    assert.match((d as { message: string }).message, /phase Failed proves nothing while node node-1 does not heartbeat/);
    assert.equal(observe(claim(held(old, 4)), gated("db-0"), [old], [], ["node-1"]).kind, "wait", "a container reported running");
    // Without the record too (a user the lock never saw).
    assert.equal(observe(claim(), gated("db-0"), [old]).kind, "wait");
    // The kubelet's own report of every container stopped, also on a silent node: still no proof without a heartbeat.
    old.status = { phase: "Failed", containerStatuses: [stopped("c")] };
    assert.equal(observe(claim(held(old, 4)), gated("db-0"), [old]).kind, "wait");
    assert.equal(observe(claim(held(old, 4)), gated("db-0"), [old], [], ["node-1"]).kind, "grant");
    assert.equal(observe(claim(held(old, 4)), gated("db-0"), [old], [["node-1", FENCED]]).kind, "grant", "fenced");
  });

  test("a holder on a node confirmed fenced is dead; one created after the fence is not", () => {
    const old = running("old", "node-1", BEFORE, { uid: "old" });
    const d = observe(claim(held(old, 4)), gated("db-0"), [old], [["node-1", FENCED]]);
    assert.equal(d.kind, "grant");
    assert.equal((d as { token: number }).token, 5);
    const late = running("late", "node-1", AFTER, { uid: "late" });
    assert.equal(observe(claim(held(late, 4)), gated("db-0"), [late], [["node-1", FENCED]]).kind, "wait");
    // A fence of another node proves nothing about this one.
    assert.equal(observe(claim(held(old, 4)), gated("db-0"), [old], [["node-2", FENCED]]).kind, "wait");
  });

  test("a pod using the claim without any record (started before Stockade) counts as a holder", () => {
    const legacy = running("legacy", "node-3", BEFORE, { uid: "legacy" });
    const d = observe(claim(), gated("db-0"), [legacy]);
    assert.equal(d.kind, "wait");
    assert.match((d as { message: string }).message, /legacy uses it on node node-3/);
  });

  test("an unscheduled pod created without the gate may be scheduled any moment: it counts", () => {
    const loose = gated("loose");
    loose.spec!.schedulingGates = [];
    const d = observe(claim(), gated("db-0"), [loose]);
    assert.equal(d.kind, "wait");
    assert.match((d as { message: string }).message, /loose uses it and may be scheduled at any moment \(it was created without/);
  });

  test("a pod granted after the claim was read (its gate lifted, its token written) waits the requester, named as granted", () => {
    // The claim as read (a cache behind the fresh pod list) shows no holder; the pod's own token says it was granted.
    const winner = gated("winner");
    winner.spec!.schedulingGates = [];
    winner.metadata!.annotations = { [TOKENS_ANNOTATION]: JSON.stringify({ data: 1 }) };
    const d = observe(claim(), gated("db-0"), [winner]);
    assert.equal(d.kind, "wait");
    assert.match((d as { message: string }).message, /winner was granted it \(token 1\) and may be scheduled at any moment/);
  });

  test("other gated waiters do not count, but a gated pod already granted does", () => {
    const waiter = gated("waiter", { created: BEFORE });
    assert.equal(observe(claim(), gated("db-0"), [waiter]).kind, "grant");
    assert.equal(observe(claim(held(waiter, 2)), gated("db-0"), [waiter]).kind, "wait");
  });

  test("the requester already holding it (a crash between grant and un-gating) resumes with the same token", () => {
    const me = gated("db-0");
    assert.deepEqual(observe(claim(held(me, 9)), me, []), { kind: "held", token: 9 });
  });

  test("a lock broken by a fence: the next token is one above the broken holder's", () => {
    const d = observe(claim({ v: 1, token: 6, time: NOW, brokenBy: "NodeFence node-1" }), gated("db-0"), []);
    assert.equal((d as { token: number }).token, 7);
  });

  test("a record removed by hand does not restart below a token a live pod carries", () => {
    const old = running("old", "node-1", BEFORE, { uid: "old", annotations: { [TOKENS_ANNOTATION]: '{"data":12}' } });
    old.status = { phase: "Failed" };
    const d = observe(claim(), gated("db-0"), [old], [], ["node-1"]);
    assert.equal((d as { token: number }).token, 13);
  });

  test("a tenant's forged huge token (pod annotations are tenant-writable) is ignored and reported, never wedges the claim", () => {
    const forged = (name: string, token: number, phase = "Failed") => {
      const p = running(name, "node-1", BEFORE, { uid: name, annotations: { [TOKENS_ANNOTATION]: JSON.stringify({ data: token }) } });
      p.status = { phase };
      return p;
    };
    // The forged pods finished on a node that heartbeats (its kubelet stands by the phase): not live users.
    const LIVE = ["node-1"];
    // 2^53 - 1: continuing from it would need a token beyond 2^53, and the claim was refused until that pod was deleted.
    const huge = observe(claim(), gated("db-0"), [forged("evil", Number.MAX_SAFE_INTEGER)], [], LIVE);
    assert.equal(huge.kind, "grant");
    assert.equal((huge as { token: number }).token, 1);
    assert.deepEqual((huge as { ignored?: string[] }).ignored, [`evil (${Number.MAX_SAFE_INTEGER})`]);
    // With a record, the sequence follows the record; the forged token is still named.
    const withRecord = observe(claim({ v: 1, token: 6, time: NOW }), gated("db-0"), [forged("evil", 2 ** 40)], [], LIVE);
    assert.deepEqual([(withRecord as { token: number }).token, (withRecord as { ignored?: string[] }).ignored], [7, [`evil (${2 ** 40})`]]);
    // A token no higher than the bound still continues the sequence (a record removed by hand), as one in range does.
    const bound = observe(claim(), gated("db-0"), [forged("a", 2 ** 32), forged("b", 2 ** 32 + 1)], [], LIVE);
    assert.deepEqual([(bound as { token: number }).token, (bound as { ignored?: string[] }).ignored], [2 ** 32 + 1, ["b (4294967297)"]]);
    // A record already past the bound (nothing forged): tokens up to the record's are the record's own business.
    const past = observe(claim({ v: 1, token: 2 ** 33, time: NOW }), gated("db-0"), [forged("old", 2 ** 33)], [], LIVE);
    assert.deepEqual([(past as { token: number }).token, (past as { ignored?: string[] }).ignored], [2 ** 33 + 1, undefined]);
  });

  test("a wait names the uids of the claim's live users", () => {
    const old = running("db-0-old", "node-1", BEFORE, { uid: "old" });
    const d = observe(claim(held(old, 4)), gated("db-0"), [old, gated("other")]);
    assert.deepEqual((d as { live: string[] }).live, ["old"]);
  });

  test("a nonsense record is never trusted: no grant", () => {
    const d = observe(claim('{"v":1,"token":"lots"}'), gated("db-0"), []);
    assert.equal(d.kind, "invalid");
  });

  test("a claim being deleted is not granted", () => {
    const c = claim();
    c.metadata!.deletionTimestamp = BEFORE;
    assert.equal(observe(c, gated("db-0"), []).kind, "wait");
  });

  test("pods that use other claims do not matter", () => {
    const other = pod("other", { claims: ["logs"], node: "node-1" });
    assert.equal(observe(claim(), gated("db-0"), [other]).kind, "grant");
  });
});

describe("breakLock", () => {
  test("breaks only the named holder's lock and keeps the token", () => {
    const p = running("old", "node-1", BEFORE, { uid: "old" });
    assert.deepEqual(breakLock(claim(held(p, 3)), "old", "NodeFence node-1", NOW), {
      v: 1,
      token: 3,
      time: NOW,
      brokenBy: "NodeFence node-1",
    });
    assert.equal(breakLock(claim(held(p, 3)), "someone-else", "NodeFence node-1", NOW), undefined);
    assert.equal(breakLock(claim("garbage"), "old", "NodeFence node-1", NOW), undefined);
  });
});

describe("fencedSince", () => {
  const nodeObj = (bootID: string, ready: string) =>
    ({
      metadata: { name: "node-1", uid: "uid-node-1" },
      status: { nodeInfo: { bootID }, conditions: [{ type: "Ready", status: ready, lastHeartbeatTime: BEFORE }] },
    }) as V1Node;
  const leaseObj = (renew = BEFORE) =>
    ({ metadata: { name: "node-1", namespace: "kube-node-lease" }, spec: { renewTime: renew, leaseDurationSeconds: 40 } }) as V1Lease;
  const silentAt = (n: V1Node | undefined, l: V1Lease | undefined) => ({ ...heartbeatOf(n, l), silent: true });
  const fence = (phase: string, extra: Record<string, unknown> = {}, heartbeat = silentAt(nodeObj("boot-1", "Unknown"), leaseObj())) =>
    ({
      metadata: { name: "node-1" },
      spec: { nodeName: "node-1" },
      status: {
        phase,
        fencedTime: "2026-01-01T00:05:00Z",
        bootID: "boot-1",
        evidence: { method: "PowerOffConfirmed", round: 0, heartbeat },
        ...extra,
      },
    }) as unknown as NodeFence;

  test("a confirmed fence of a machine still off proves its instances dead, since its confirmation", () => {
    for (const phase of ["Fenced", "Releasing", "Released"])
      assert.deepEqual(fencedSince(fence(phase), nodeObj("boot-1", "Unknown"), leaseObj()), FENCED);
    // Evidence taken after the Node was deleted (a fence under way fences again through its snapshot): it holds
    // while nothing re-creates the Node or its Lease.
    assert.deepEqual(fencedSince(fence("Released", {}, silentAt(undefined, undefined)), undefined, undefined), FENCED);
  });
  test("no proof: no evidence, a fence not confirmed or undone, a machine that booted again or heartbeats", () => {
    const n = nodeObj("boot-1", "Unknown");
    assert.equal(fencedSince(fence("Released", { evidence: undefined }), n, leaseObj()), undefined);
    for (const phase of ["Pending", "Fencing", "Failed", "Unfencing", "Unfenced"])
      assert.equal(fencedSince(fence(phase), n, leaseObj()), undefined, phase);
    assert.equal(fencedSince(fence("Released"), nodeObj("boot-2", "Unknown"), leaseObj()), undefined, "booted again");
    assert.equal(fencedSince(fence("Released"), nodeObj("boot-1", "True"), leaseObj()), undefined, "Ready again");
    assert.equal(fencedSince(undefined, n, leaseObj()), undefined);
  });
  test("the fresh Node and Lease must match the evidence's fingerprint exactly: one renewal since, and it proves nothing", () => {
    const n = nodeObj("boot-1", "Unknown");
    assert.equal(fencedSince(fence("Released"), n, leaseObj(AFTER)), undefined, "the Lease renewed after the confirmation");
    assert.equal(fencedSince(fence("Released"), n, undefined), undefined, "the Lease gone");
    assert.equal(fencedSince(fence("Released"), undefined, leaseObj()), undefined, "a deleted Node proves nothing");
    const recreated = nodeObj("boot-1", "Unknown");
    recreated.metadata!.uid = "uid-new";
    assert.equal(fencedSince(fence("Released"), recreated, leaseObj()), undefined, "a re-created Node");
    assert.equal(fencedSince(fence("Released", { round: 1 }), n, leaseObj()), undefined, "evidence of an earlier round");
  });
});

describe("heartbeatsNow (whether a Failed/Succeeded phase there is the kubelet's word)", () => {
  const at = (iso: string) => DateTime.fromISO(iso, { zone: "utc" });
  const n = (ready: string) => ({ metadata: { name: "node-1" }, status: { conditions: [{ type: "Ready", status: ready }] } }) as V1Node;
  const l = (renew: Date) => ({ metadata: { name: "node-1" }, spec: { renewTime: renew, leaseDurationSeconds: 40 } }) as V1Lease;
  test("Ready=True and a Lease renewed within the timeout, both read fresh", () => {
    // The default heartbeat timeout, 30 s since issue 31 (40 before).
    assert.equal(heartbeatsNow(n("True"), l(BEFORE), at("2026-01-01T00:00:29Z")), true);
    assert.equal(heartbeatsNow(n("True"), l(BEFORE), at("2026-01-01T00:00:30Z")), false, "the Lease is stale");
    assert.equal(heartbeatsNow(n("True"), l(BEFORE), at("2026-01-01T00:00:39Z"), 40), true, "a policy's timeout");
    assert.equal(heartbeatsNow(n("True"), l(BEFORE), at("2026-01-01T00:00:40Z"), 40), false);
    assert.equal(heartbeatsNow(n("Unknown"), l(BEFORE), at("2026-01-01T00:00:01Z")), false, "the node controller saw it go silent");
    assert.equal(heartbeatsNow(n("True"), undefined, at("2026-01-01T00:00:01Z")), false, "no Lease");
    assert.equal(heartbeatsNow(undefined, l(BEFORE), at("2026-01-01T00:00:01Z")), false, "no Node");
  });
});
