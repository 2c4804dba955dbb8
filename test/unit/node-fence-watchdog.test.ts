// The NodeFence controller with WatchdogExpired (docs/safety.md §8), against the scripted API: before each release
// step on WatchdogExpired evidence the node agent's record is read from the apiserver (never the cache) with the Node
// and its Lease, and a record written since the evidence releases nothing and fences again; a policy without the
// opt-in gets a condition and a Warning Event naming the field; a waiting watchdog level writes its arithmetic to
// status.watchdog.
import { test } from "node:test";
import assert from "node:assert/strict";
import type { V1Lease } from "@kubernetes/client-node";
import type { NodeFence } from "../../src/api/v1alpha1.ts";
import { FINALIZER, snapshotOf } from "../../src/decide/fence-machine.ts";
import { heartbeatOf } from "../../src/decide/heartbeat.ts";
import { agentRecordFingerprint } from "../../src/decide/watchdog-fence.ts";
import { WatchdogObserver } from "../../src/kube/watchdog-observer.ts";
import { T0, agent, agentRecord, at, fencing, lease, partitionedNode, policy, releasing, stamp, stsPod } from "./decide-fixtures.ts";
import { world } from "./node-fence-world.ts";

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
