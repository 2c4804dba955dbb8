// The NodeFence controller with WatchdogExpired (docs/safety.md §8), against the scripted API: before each release
// step on WatchdogExpired evidence the node agent's record is read from the apiserver (never the cache) with the Node
// and its Lease, and a record written since the evidence releases nothing and fences again; a policy without the
// opt-in gets a condition and a Warning Event naming the field; a waiting watchdog level writes its arithmetic to
// status.watchdog.
import { test } from "node:test";
import assert from "node:assert/strict";
import type { V1Lease, V1Pod } from "@kubernetes/client-node";
import type { NodeFence } from "../../src/api/v1alpha1.ts";
import { FINALIZER, snapshotOf } from "../../src/decide/fence-machine.ts";
import { heartbeatOf } from "../../src/decide/heartbeat.ts";
import { recordPolicyProblems } from "../../src/decide/record-authority.ts";
import { agentRecordFingerprint } from "../../src/decide/watchdog-fence.ts";
import { WatchdogObserver } from "../../src/kube/watchdog-observer.ts";
import { T0, agent, agentRecord, at, fencing, lease, partitionedNode, policy, releasing, stamp, stsPod } from "./decide-fixtures.ts";
import { shippedRecordPolicy } from "./record-authority-fixtures.ts";
import { agentPod, world } from "./node-fence-world.ts";

const record = (resourceVersion: string): V1Lease =>
  agentRecord("node-1", {
    resourceVersion,
    holder: "stockade-node-agent-abcde",
    renewTime: new Date(T0.toMillis() + Number(resourceVersion)),
  });

const allowed = policy("default", { allowWatchdogEvidence: true, escalation: [{ agents: [{ name: "wd" }] }] });
const agents = [agent("wd", "watchdog"), agent("ipmi")];

function fenceWith(status: NodeFence["status"]): NodeFence {
  return {
    apiVersion: "stockade.io/v1alpha1",
    kind: "NodeFence",
    metadata: { name: "node-1", uid: "fence-uid", generation: 1, finalizers: [FINALIZER], resourceVersion: "1" },
    spec: { nodeName: "node-1", origin: "Manual" },
    status,
  };
}

/** Released on WatchdogExpired evidence taken on record version "41" and the world's kubelet Lease. */
const watchdogReleasing = () =>
  fenceWith({
    ...releasing(),
    policySnapshot: snapshotOf(allowed),
    attempts: [
      { level: 0, round: 0, agent: "wd", agentType: "watchdog", operation: "off", startTime: stamp(at(990)), outcome: "Succeeded" },
    ],
    evidence: {
      method: "WatchdogExpired",
      time: stamp(at(995)),
      agents: ["wd"],
      round: 0,
      detail: "the node's watchdog must have reset the machine",
      heartbeat: {
        ...heartbeatOf(partitionedNode(), lease("node-1", T0)),
        silent: true,
        ...agentRecordFingerprint(lease("node-1", T0), record("41")),
      },
    },
  });

test("WatchdogExpired: each release step reads the agent record fresh; unchanged, the pod is released after that read", async () => {
  const w = world([stsPod("db-0")], { initial: watchdogReleasing(), agents, policies: [allowed], agentRecord: () => record("41") });
  await w.controller.reconcile("node-1");
  const read = w.calls.indexOf("read agent record");
  assert.ok(read >= 0, "the record is read from the apiserver");
  assert.ok(read < w.calls.indexOf("delete db-0"), "before the force delete");
  assert.equal(w.fence().status?.phase, "Released");
});

test("WatchdogExpired: the agent record written since the evidence: nothing released, fencing again with the reason", async () => {
  const w = world([stsPod("db-0")], { initial: watchdogReleasing(), agents, policies: [allowed], agentRecord: () => record("42") });
  await w.controller.reconcile("node-1");
  assert.deepEqual(
    w.calls.filter((c) => c.startsWith("delete")),
    [],
  );
  const st = w.fence().status;
  assert.notEqual(st?.phase, "Released");
  assert.equal(st?.round, 1, "a new round");
  // The re-entry's condition (the new round's wait for the records replaces it later in the same reconcile).
  const reentered = w.statusWrites.flatMap((s) => s.conditions ?? []).find((c) => c.reason === "HeartbeatAfterFence");
  assert.match(reentered?.message ?? "", /node agent record resourceVersion 41 → 42/);
});

test("a watchdog level under a policy without allowWatchdogEvidence: a condition and a Warning Event naming the field, no evidence", async () => {
  const without = policy("default", { escalation: [{ agents: [{ name: "wd" }] }, { agents: [{ name: "ipmi" }] }] });
  const w = world([], { initial: fenceWith(fencing({ policySnapshot: snapshotOf(without) })), agents, policies: [without] });
  await w.controller.reconcile("node-1");
  const st = w.fence().status;
  assert.equal(st?.evidence, undefined);
  assert.ok(!(st?.attempts ?? []).some((a) => a.agent === "wd"), "the watchdog agent is never run");
  // Written with the escalation (the next level's run replaces it later in the same reconcile).
  const conds = w.statusWrites.flatMap((s) => s.conditions ?? []).filter((c) => c.type === "Fenced" && c.reason === "Escalating");
  assert.match(conds[0]?.message ?? "", /set spec\.allowWatchdogEvidence: true/);
  assert.ok(
    w.events.some((e) => e.type === "Warning" && /spec\.allowWatchdogEvidence/.test(e.message)),
    JSON.stringify(w.events),
  );
});

test("a waiting watchdog level writes the arithmetic to status.watchdog", async () => {
  let t = 0;
  const observer = new WatchdogObserver(
    () => t,
    () => new Date(T0.toMillis() + t).toISOString(),
  );
  observer.observe(record("41"));
  observer.synced();
  const status = fencing({
    policySnapshot: snapshotOf(allowed),
    attempts: [
      { level: 0, round: 0, agent: "wd", agentType: "watchdog", operation: "off", startTime: stamp(at(990)), outcome: "InProgress" },
    ],
  });
  const w = world([], {
    initial: fenceWith(status),
    agents,
    policies: [allowed],
    agentRecord: () => record("41"),
    agentPods: () => [agentPod("stockade-node-agent-abcde", "node-1")],
    watchdogObserver: observer,
  });
  t = 5_000;
  const r = await w.controller.reconcile("node-1");
  const wd = w.fence().status?.watchdog;
  assert.equal(wd?.holds, false);
  assert.equal(wd?.requiredSeconds, "68");
  assert.equal(wd?.deadlineSeconds, 30);
  assert.equal(wd?.watchdogTimeoutSeconds, 30);
  assert.equal(wd?.firstSeen, new Date(T0.toMillis() + 5_000).toISOString());
  assert.ok(r && r.requeueAfterMs! <= 5_000);
});

// Issue 41 item 5: a node agent record is evidence only while the admission policy that limits each agent to its own
// node's record is in force, and only when its holder is the node agent's pod on that node (both read fresh).
function refusalWorld(o: { recordPolicy?: () => string[]; agentPods?: () => V1Pod[]; holder?: string } = {}) {
  let t = 0;
  const observer = new WatchdogObserver(
    () => t,
    () => new Date(T0.toMillis() + t).toISOString(),
  );
  const rec = { ...record("41"), spec: { ...record("41").spec, holderIdentity: o.holder ?? "stockade-node-agent-abcde" } };
  observer.observe(rec);
  observer.synced();
  const status = fencing({
    policySnapshot: snapshotOf(allowed),
    attempts: [
      { level: 0, round: 0, agent: "wd", agentType: "watchdog", operation: "off", startTime: stamp(at(990)), outcome: "InProgress" },
    ],
  });
  const w = world([stsPod("db-0")], {
    initial: fenceWith(status),
    agents,
    policies: [allowed],
    agentRecord: () => rec,
    agentPods: o.agentPods ?? (() => [agentPod("stockade-node-agent-abcde", "node-1")]),
    recordPolicy: o.recordPolicy,
    watchdogObserver: observer,
    // The kubelet Lease silent since long before the fence: only the record's authority decides.
    leaseSilentForMs: () => t + 600_000,
  });
  return { w, advance: (ms: number) => (t += ms) };
}

/** The fence's first look (t0), then a look 70 s later, when (30 + 30)·1.05 + 5 = 68 s of silence has passed. */
async function lookAfter70s(r: ReturnType<typeof refusalWorld>) {
  await r.w.controller.reconcile("node-1");
  r.advance(70_000);
  await r.w.controller.reconcile("node-1");
  return r.w.fence().status?.attempts?.[0];
}

test("WatchdogExpired, the good case: the record policy in force and the holder the agent's pod on node-1: the attempt succeeds", async () => {
  const r = refusalWorld();
  const a = await lookAfter70s(r);
  assert.equal(a?.outcome, "Succeeded", a?.message);
  assert.ok(r.w.calls.includes("read record policy"));
  assert.ok(r.w.calls.includes("read agent pod stockade-node-agent-abcde"));
});

test("WatchdogExpired is refused while the record policy is not installed: the attempt fails saying what is missing and how to fix it, a Warning Event says it, nothing is released", async () => {
  const r = refusalWorld({ recordPolicy: () => recordPolicyProblems(undefined, undefined) });
  const a = await lookAfter70s(r);
  assert.equal(a?.outcome, "Failed");
  assert.match(a?.message ?? "", /WatchdogExpired is refused while the admission policy stockade-node-agent-record is not in force/);
  assert.match(a?.message ?? "", /kubectl apply -f manifests\/node-agent\/03-admission-policy\.yaml/);
  const ev = r.w.events.find((e) => e.reason === "AgentFailed");
  assert.equal(ev?.type, "Warning");
  assert.match(ev?.message ?? "", /ValidatingAdmissionPolicy stockade-node-agent-record is not installed/);
  // The level failed on it: the NodeFence's Failed condition says why, and the round is retried (fixed, it is taken).
  const failed = (r.w.fence().status?.conditions ?? []).find((c) => c.type === "Failed");
  assert.match(
    failed?.message ?? "",
    /admission policy stockade-node-agent-record is not in force.*kubectl apply -f manifests\/node-agent/,
  );
  assert.equal(r.w.fence().status?.evidence, undefined);
  assert.ok(!r.w.calls.some((c) => c.startsWith("delete ")));
});

test("WatchdogExpired is refused while the binding does not Deny, and when the policy cannot be read (cannot tell is not in force)", async () => {
  const warnOnly = (): string[] => {
    const { policy: p, binding } = shippedRecordPolicy();
    binding.spec!.validationActions = ["Warn"];
    return recordPolicyProblems(p, binding);
  };
  for (const problems of [
    warnOnly,
    () => ["cannot check that ValidatingAdmissionPolicy stockade-node-agent-record is installed: timeout"],
  ]) {
    const r = refusalWorld({ recordPolicy: problems });
    const a = await lookAfter70s(r);
    assert.equal(a?.outcome, "Failed");
    assert.match(a?.message ?? "", /is refused while the admission policy stockade-node-agent-record is not in force/);
  }
});

test("a record whose holder is not the node agent's pod on that node is not evidence", async () => {
  const cases: [string, () => V1Pod[], RegExp][] = [
    ["another node's agent pod", () => [agentPod("stockade-node-agent-abcde", "node-2")], /runs on node node-2, not on node-1/],
    [
      "a pod of another DaemonSet",
      () => [agentPod("stockade-node-agent-abcde", "node-1", { kind: "DaemonSet", name: "cni-agent" })],
      /not a pod of the DaemonSet stockade-node-agent \(its controller: DaemonSet cni-agent\)/,
    ],
    [
      "a bare pod",
      () => [{ ...agentPod("stockade-node-agent-abcde", "node-1"), metadata: { name: "stockade-node-agent-abcde" } }],
      /its controller: none/,
    ],
    ["a pod name that does not exist", () => [], /no such pod exists in namespace stockade-node-agent/],
  ];
  for (const [what, pods, why] of cases) {
    const r = refusalWorld({ agentPods: pods });
    const a = await lookAfter70s(r);
    assert.equal(a?.outcome, "Failed", what);
    assert.match(a?.message ?? "", /WatchdogExpired is refused: node node-1's agent record/, what);
    assert.match(a?.message ?? "", why, what);
    assert.equal(r.w.fence().status?.evidence, undefined, what);
  }
  // A holder that is not a pod name at all is not looked up.
  const r = refusalWorld({ holder: "Not A Pod/../x" });
  const a = await lookAfter70s(r);
  assert.equal(a?.outcome, "Failed");
  assert.ok(!r.w.calls.some((c) => c.startsWith("read agent pod")));
});
