// WatchdogExpired in the fence machine (decide/fence-machine.ts, decide/watchdog-fence.ts; docs/safety.md §8). The
// evidence each observation carries is computed as the controller computes it: kube/watchdog-observer.ts over node agent
// records shaped as the agent writes them, on a fake monotonic clock, then decide/watchdog-evidence.ts. Shown: a level
// of watchdog agents is used only under the policy's opt-in (else the level fails naming the field, never evidence);
// it confirms only when the arithmetic holds; a kubelet Lease or agent record renewed after t0, or a record not armed,
// gives no evidence; the status shows the arithmetic; and a fresh read of either that differs from what the evidence
// recorded, before a release step, releases nothing and fences again.
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import type { V1Lease } from "@kubernetes/client-node";
import type { NodeFence, NodeFenceStatus, NodeFenceStatusAttempts } from "../../src/api/v1alpha1.ts";
import { driverFor } from "../../src/agents/registry.ts";
import { FINALIZER, nextStep, snapshotOf, type FenceObservation, type Step } from "../../src/decide/fence-machine.ts";
import { watchdogEvidence, type WatchdogEvidence } from "../../src/decide/watchdog-evidence.ts";
import { agentRecordFingerprint, sameWatchdogStatus } from "../../src/decide/watchdog-fence.ts";
import { heartbeatOf } from "../../src/decide/heartbeat.ts";
import { fencedSince } from "../../src/decide/claim-lock.ts";
import { WatchdogObserver } from "../../src/kube/watchdog-observer.ts";
import { T0, agent, agentRecord, agentMap, at, fencing, lease, partitionedNode, policy, pvcMap, stamp, stsPod } from "./decide-fixtures.ts";

const OTHERS = ["node-2", "node-3", "node-4"];
let rv = 500;

function record(node: string, armed = "true"): V1Lease {
  rv++;
  return agentRecord(node, { armed, resourceVersion: String(rv), renewTime: new Date(T0.toMillis() + rv) });
}

const allowed = policy("default", { allowWatchdogEvidence: true, escalation: [{ agents: [{ name: "wd" }] }] });
const notAllowed = policy("default", { escalation: [{ agents: [{ name: "wd" }] }, { agents: [{ name: "ipmi" }] }] });
const agents = agentMap(agent("wd", "watchdog"), agent("ipmi"));
const kubeletLease = () => ({ ...lease("node-1", T0), metadata: { name: "node-1", namespace: "kube-node-lease", resourceVersion: "77" } });
const wdAttempt = (outcome: "InProgress" | "Succeeded"): NodeFenceStatusAttempts => ({
  level: 0,
  round: 0,
  agent: "wd",
  agentType: "watchdog",
  operation: "off",
  startTime: stamp(at(990)),
  outcome,
  message: "",
});

function fenceOf(status: NodeFenceStatus): NodeFence {
  return {
    apiVersion: "stockade.io/v1alpha1",
    kind: "NodeFence",
    metadata: { name: "node-1", uid: "uid-fence-1", generation: 1, finalizers: [FINALIZER] },
    spec: { nodeName: "node-1", origin: "Manual" },
    status,
  };
}

function obs(status: NodeFenceStatus, o: Partial<FenceObservation> = {}): FenceObservation {
  return {
    now: at(1000),
    fence: fenceOf(status),
    node: partitionedNode(),
    lease: kubeletLease(),
    policies: [allowed],
    agents,
    pods: [],
    pvcs: pvcMap(),
    volumeAttachments: [],
    operations: new Map(),
    ...o,
  };
}

/**
 * The operator's observer over four agents (node-1 fenced, three others renewing every 5 s), after the records' first
 * list, its first look at the fence (t0) at once; `look(ms)` advances the fake clock and computes the evidence as observe.ts does, with the kubelet Lease silent
 * since the list unless told otherwise.
 */
function operator() {
  let t = 0;
  const o = new WatchdogObserver(
    () => t,
    () => new Date(T0.toMillis() + t).toISOString(),
  );
  const own = { rec: record("node-1") };
  for (const n of ["node-1", ...OTHERS]) o.observe(n === "node-1" ? own.rec : record(n));
  o.synced();
  for (const n of OTHERS) o.observe(record(n));
  const look = (ms: number, kubeletSilentMs?: number): WatchdogEvidence => {
    for (let left = ms; left > 0; left -= 5_000) {
      t += Math.min(5_000, left);
      for (const n of OTHERS) o.observe(record(n));
    }
    // The record's authority in force (the shell reads it: controllers/node-fence/observe.ts readRecordAuthority).
    return watchdogEvidence(o.look("uid-fence-1", "node-1", own.rec, kubeletSilentMs ?? t, { policy: [] })!);
  };
  look(0); // the first look at the fence: t0
  return { look, own };
}

const inProgress = fencing({ policySnapshot: snapshotOf(allowed), attempts: [wdAttempt("InProgress")] });
const kindOf = (s: Step) => s.kind;

describe("WatchdogExpired: the policy's opt-in", () => {
  test("without spec.allowWatchdogEvidence a watchdog level is not used: it fails, naming the field, and the next level runs", () => {
    const step = nextStep(obs(fencing({ policySnapshot: snapshotOf(notAllowed) }), { policies: [notAllowed] }));
    assert.equal(step.kind, "escalate");
    assert.match(
      step.kind === "escalate" ? step.message : "",
      /FencingPolicy default does not allow WatchdogExpired evidence: set spec\.allowWatchdogEvidence: true/,
    );
  });

  test("a snapshot without the field (an older version's) is not an opt-in; a single watchdog level fails the round", () => {
    const only = policy("default", { escalation: [{ agents: [{ name: "wd" }] }] });
    const snap = snapshotOf(only);
    assert.equal(snap.allowWatchdogEvidence, false);
    delete snap.allowWatchdogEvidence;
    const step = nextStep(obs(fencing({ policySnapshot: snap }), { policies: [only] }));
    assert.equal(step.kind, "roundFailed");
  });

  test("an attempt in progress whose snapshot no longer allows it fails, even with the arithmetic holding", () => {
    const { look } = operator();
    const w = look(70_000);
    assert.equal(w.holds, true);
    const status = fencing({ policySnapshot: snapshotOf(notAllowed), attempts: [wdAttempt("InProgress")] });
    const step = nextStep(obs(status, { watchdog: w, agentRecord: record("node-1") }));
    assert.equal(step.kind, "recordOutcome");
    assert.equal(step.kind === "recordOutcome" && step.outcome, "Failed");
  });

  test("the opt-in withdrawn from the policy (or the policy deleted) mid-fence counts at once: no success, no confirmation", () => {
    const { look } = operator();
    const w = look(70_000);
    const withdrawn = policy("default", { escalation: [{ agents: [{ name: "wd" }] }] });
    for (const policies of [[withdrawn], []]) {
      const running = nextStep(obs(inProgress, { watchdog: w, agentRecord: record("node-1"), policies }));
      assert.equal(running.kind === "recordOutcome" && running.outcome, "Failed");
      const done = fencing({ policySnapshot: snapshotOf(allowed), attempts: [wdAttempt("Succeeded")] });
      const confirm = nextStep(obs(done, { watchdog: w, agentRecord: record("node-1"), policies }));
      assert.equal(confirm.kind, "roundFailed");
      assert.match(confirm.kind === "roundFailed" ? confirm.message : "", /set spec\.allowWatchdogEvidence: true/);
    }
  });

  test("with the opt-in the watchdog agent's attempt starts (no operation: the machine counts)", () => {
    const step = nextStep(obs(fencing({ policySnapshot: snapshotOf(allowed) })));
    assert.equal(step.kind, "runAgent");
    assert.equal(step.kind === "runAgent" && step.agent.spec.type, "watchdog");
  });
});

describe("WatchdogExpired: the arithmetic decides", () => {
  test("before the records are listed: a wait, never an outcome", () => {
    const step = nextStep(obs(inProgress));
    assert.equal(step.kind, "wait");
    assert.equal(step.kind === "wait" && step.reason, "WaitingForWatchdog");
  });

  test("at 67.999 s a wait showing every number in status; at 68 s the attempt succeeds", () => {
    const { look } = operator();
    const early = nextStep(obs(inProgress, { watchdog: look(67_999) }));
    assert.equal(early.kind, "wait");
    if (early.kind !== "wait") return;
    assert.equal(early.reason, "WaitingForWatchdog");
    assert.match(
      early.message,
      /^waiting for the watchdog: \(30 \+ 30\)·\(1 \+ 0\.05\) \+ 5 = 68 s of silence counted from 2026-01-01T00:00:00\.000Z, about 2026-01-01T00:01:08\.000Z/,
    );
    assert.deepEqual(
      { ...early.watchdog, time: undefined, firstSeen: undefined, windowStart: undefined },
      {
        holds: false,
        reason: early.message,
        watchdogTimeoutSeconds: 30,
        deadlineSeconds: 30,
        clockRateDrift: "0.05",
        marginSeconds: 5,
        requiredSeconds: "68",
        observedSeconds: "67.999",
        firstSeen: undefined,
        windowStart: undefined,
        silentAgents: 0,
        agents: 3,
        windowRestarts: 0,
        time: undefined,
      },
    );
    // A second later the wait says the same (no status write, no requeue loop); only observedSeconds and time moved.
    const { look: look2 } = operator();
    const a = nextStep(obs(inProgress, { watchdog: look2(30_000) }));
    const b = nextStep(obs(inProgress, { now: at(1001), watchdog: look2(1_000) }));
    assert.ok(a.kind === "wait" && b.kind === "wait");
    assert.equal(a.message, b.message);
    assert.equal(sameWatchdogStatus(a.watchdog, b.watchdog), true);
    assert.notEqual(a.watchdog?.observedSeconds, b.watchdog?.observedSeconds);
    const late = nextStep(obs(inProgress, { watchdog: look(1) }));
    assert.equal(late.kind, "recordOutcome");
    if (late.kind !== "recordOutcome") return;
    assert.equal(late.outcome, "Succeeded");
    assert.equal(late.watchdog?.holds, true);
    assert.match(late.message, /observed 68 s ≥ \(D 30 \+ T 30\)·\(1 \+ 0\.05\) \+ 5 = 68 s/);
  });

  test("the kubelet Lease renewed after t0: no evidence, however long the wait", () => {
    const { look } = operator();
    look(0);
    const step = nextStep(obs(inProgress, { watchdog: look(300_000, 100_000) }));
    assert.equal(step.kind, "wait");
    assert.match(step.kind === "wait" ? step.message : "", /kubelet Lease was renewed/);
  });

  test("the agent record renewed after t0: no evidence", () => {
    const { look, own } = operator();
    look(10_000);
    own.rec = record("node-1");
    const step = nextStep(obs(inProgress, { watchdog: look(300_000) }));
    assert.equal(step.kind, "wait");
    assert.match(step.kind === "wait" ? step.message : "", /node agent record was renewed/);
  });

  test("a record that says not armed: the attempt fails (the next level applies), never evidence", () => {
    const { look, own } = operator();
    own.rec = record("node-1", "false");
    const step = nextStep(obs(inProgress, { watchdog: look(300_000) }));
    assert.equal(step.kind, "recordOutcome");
    if (step.kind !== "recordOutcome") return;
    assert.equal(step.outcome, "Failed");
    assert.match(step.message, /not armed/);
  });

  test("confirmed only if it still holds on the confirmation's read; the evidence records both fingerprints", () => {
    const { look } = operator();
    const status = fencing({ policySnapshot: snapshotOf(allowed), attempts: [wdAttempt("Succeeded")] });
    const rec = record("node-1");
    const ok = nextStep(obs(status, { watchdog: look(70_000), agentRecord: rec }));
    assert.equal(ok.kind, "confirmed");
    if (ok.kind !== "confirmed") return;
    assert.equal(ok.evidence.method, "WatchdogExpired");
    assert.equal(ok.evidence.heartbeat.agentRecordResourceVersion, rec.metadata?.resourceVersion);
    assert.equal(ok.evidence.heartbeat.leaseResourceVersion, "77");
    const renewed = operator();
    renewed.look(0);
    const gone = nextStep(obs(status, { watchdog: renewed.look(70_000, 1_000), agentRecord: rec }));
    assert.deepEqual(kindOf(gone), "roundFailed");
    assert.match(gone.kind === "roundFailed" ? gone.message : "", /WatchdogExpired no longer holds/);
  });

  test("a level mixing a power agent with a watchdog agent proves what the power-off proves", () => {
    const mixed = policy("default", { allowWatchdogEvidence: true, escalation: [{ agents: [{ name: "ipmi" }, { name: "wd" }] }] });
    const status = fencing({
      policySnapshot: snapshotOf(mixed),
      attempts: [{ ...wdAttempt("Succeeded"), agent: "ipmi", agentType: "ipmi" }, wdAttempt("Succeeded")],
    });
    const step = nextStep(obs(status, { policies: [mixed] }));
    assert.equal(step.kind === "confirmed" && step.evidence.method, "PowerOffConfirmed");
  });
});

describe("WatchdogExpired: the fresh reads before each release step", () => {
  const rec = record("node-1");
  const releasing = (): NodeFenceStatus => ({
    ...fencing({ policySnapshot: snapshotOf(allowed) }),
    phase: "Releasing",
    fencedTime: stamp(at(995)),
    attempts: [wdAttempt("Succeeded")],
    evidence: {
      method: "WatchdogExpired",
      time: stamp(at(995)),
      agents: ["wd"],
      detail: "the node's watchdog must have reset the machine",
      round: 0,
      heartbeat: { ...heartbeatOf(partitionedNode(), kubeletLease()), silent: true, ...agentRecordFingerprint(kubeletLease(), rec) },
    },
  });
  const pods = [stsPod("web-0", { node: "node-1" })];

  test("unchanged: the release goes on (what PowerOffConfirmed releases: pods)", () => {
    const step = nextStep(obs(releasing(), { agentRecord: structuredClone(rec), pods }));
    assert.equal(step.kind, "release");
    assert.equal(step.kind === "release" && step.items[0]?.kind, "Pod");
  });

  test("the agent record written since: nothing released, fencing again", () => {
    const step = nextStep(obs(releasing(), { agentRecord: { ...rec, metadata: { ...rec.metadata, resourceVersion: "999999" } }, pods }));
    assert.equal(step.kind, "reenter");
    assert.match(step.kind === "reenter" ? step.message : "", /node agent record resourceVersion/);
  });

  test("the agent record gone (or not read): nothing released", () => {
    assert.equal(nextStep(obs(releasing(), { pods })).kind, "reenter");
  });

  test("the kubelet Lease written since (same renewTime, new resourceVersion): nothing released", () => {
    const l = kubeletLease();
    l.metadata.resourceVersion = "78";
    const step = nextStep(obs(releasing(), { agentRecord: structuredClone(rec), lease: l, pods }));
    assert.equal(step.kind, "reenter");
    assert.match(step.kind === "reenter" ? step.message : "", /kubelet Lease resourceVersion 77 → 78/);
  });
});

describe("WatchdogExpired and the claim lock / force-delete guard (fencedSince)", () => {
  const rec = record("node-1");
  const fence = (): NodeFence => {
    const f = fenceOf({
      ...fencing({ policySnapshot: snapshotOf(allowed) }),
      phase: "Releasing",
      fencedTime: stamp(at(995)),
      evidence: {
        method: "WatchdogExpired",
        time: stamp(at(995)),
        agents: ["wd"],
        round: 0,
        heartbeat: { ...heartbeatOf(partitionedNode(), kubeletLease()), silent: true, ...agentRecordFingerprint(kubeletLease(), rec) },
      },
    });
    return f;
  };

  test("counts the node fenced only with the agent record read fresh and unchanged", () => {
    assert.equal(fencedSince(fence(), partitionedNode(), kubeletLease()), undefined, "not read: not fenced");
    assert.ok(fencedSince(fence(), partitionedNode(), kubeletLease(), undefined, { read: structuredClone(rec) }));
    const written = { ...rec, metadata: { ...rec.metadata, resourceVersion: "999999" } };
    assert.equal(fencedSince(fence(), partitionedNode(), kubeletLease(), undefined, { read: written }), undefined);
    assert.equal(fencedSince(fence(), partitionedNode(), kubeletLease(), undefined, { read: undefined }), undefined, "gone");
  });
});

describe("agents/watchdog.ts", () => {
  test("no actuator, and its status never says off", async () => {
    const d = driverFor("watchdog");
    const ctx = { node: "node-1", parameters: {}, annotations: {}, signal: new AbortController().signal };
    await d.power(ctx, "off");
    assert.equal(await d.status(ctx), "unknown");
  });
});
