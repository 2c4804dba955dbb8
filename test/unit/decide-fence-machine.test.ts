import { describe, test } from "node:test";
import assert from "node:assert/strict";
import type { V1Lease, V1Node, V1PersistentVolumeClaim, V1Pod, V1VolumeAttachment } from "@kubernetes/client-node";
import type { DateTime } from "luxon";
import type {
  FenceAgent,
  FencingPolicy,
  NodeFence,
  NodeFenceSpec,
  NodeFenceStatus,
  NodeFenceStatusAttempts,
  NodeFenceStatusEvidence,
} from "../../src/api/v1alpha1.ts";
import {
  ABANDON_STORAGE_FENCES_ANNOTATION,
  CONFIRMED_OFF_ANNOTATION,
  FENCED_TAINT,
  FINALIZER,
  MAX_RELEASE_BATCH,
  OUT_OF_SERVICE_TAINT,
  attemptFacts,
  claimLockMessage,
  hasTaint,
  heartbeatChanges,
  heartbeatOf,
  nextStep,
  noLongerDue,
  powerOffRefused,
  RETRY_MAX_SECONDS,
  retryDelaySeconds,
  snapshotOf,
  storageFenceCondition,
  storageFencesHeld,
  storageFencesToLift,
  targetNode,
  type FenceObservation,
  type Operation,
  type Step,
} from "../../src/decide/fence-machine.ts";
import { isGuarded } from "../../src/decide/guarded-pods.ts";
import { STATUS_BOUND, boundStatus, type StatusBound } from "../../src/decide/status-bound.ts";
import { LOCK_ANNOTATION, breakLock, fencedSince, formatLock, parseLock } from "../../src/decide/claim-lock.ts";
import { prng } from "../../lab/chaos/schedule.ts";
import {
  SNAPSHOT,
  T0,
  agent,
  agentMap,
  at,
  attempt,
  evidenceNow,
  fencing,
  lease,
  legacyAttempt,
  node,
  partitionedNode,
  pod,
  policy,
  pvc,
  pvcMap,
  releasing,
  stamp,
  stsPod,
  volumeAttachment,
  writtenBy,
} from "./decide-fixtures.ts";

type Outcome = NodeFenceStatusAttempts["outcome"];
type Kind = Step["kind"];

/**
 * The world one NodeFence lives in, and a stand-in for the NodeFence controller: apply() writes to status what the
 * controller writes for each step (src/controllers/node-fence/) and changes the world as its API calls and its
 * background agent operations would, so walking nextStep → apply → nextStep drives the machine as the operator does.
 */
interface Sim {
  now: DateTime;
  fence: NodeFence;
  node: V1Node | undefined;
  lease: V1Lease | undefined;
  /** How long the operator has seen the Lease's renewTime (monotonic ms); none: the Lease never counts as expired. */
  leaseObservedSilentMs?: number;
  /** Every pod in the cluster; the observation gets those bound to the fenced node, as the controller does. */
  pods: V1Pod[];
  pvcs: Map<string, V1PersistentVolumeClaim>;
  vas: V1VolumeAttachment[];
  policies: FencingPolicy[];
  agents: Map<string, FenceAgent>;
  /** Background operations of this "process", by attempt index. */
  ops: Map<number, Operation>;
  /** Outcome of the next agent operation; "crash" loses it (the operator restarted), "hang" leaves it running. */
  agentResult: (agent: string, op: "off" | "on", level: number) => Outcome | "crash" | "hang";
  /** The bound the controller applies to every status it writes (decide/status-bound.ts); none when unset. */
  bound?: StatusBound;
  /** The Node as the operator last saw it before it was deleted (kube/last-seen-nodes.ts). */
  lastSeen?: V1Node;
}

/** A csiAddonsNetworkFence agent whose fence covers the "san" StorageClass. */
function storageAgent(name: string): FenceAgent {
  const a = agent(name, "csiAddonsNetworkFence");
  a.spec.parameters = { networkFenceClassName: "ceph", storageClasses: "san" };
  return a;
}

function fenceOf(status?: NodeFenceStatus, spec: Partial<NodeFenceSpec> = {}, finalizers = [FINALIZER]): NodeFence {
  return {
    apiVersion: "stockade.io/v1alpha1",
    kind: "NodeFence",
    metadata: { name: "node-1", generation: 1, finalizers },
    spec: { nodeName: "node-1", origin: "Automatic", ...spec },
    status,
  };
}

function sim(o: Partial<Sim> = {}): Sim {
  return {
    now: at(1000),
    fence: fenceOf(),
    node: partitionedNode(),
    lease: lease("node-1", T0),
    pods: [],
    pvcs: pvcMap(),
    vas: [],
    policies: [policy("default")],
    agents: agentMap(agent("ipmi"), agent("pdu"), agent("pdu-b"), agent("admin", "manual"), storageAgent("netfence")),
    ops: new Map(),
    agentResult: () => "Succeeded",
    ...o,
  };
}

function observe(s: Sim): FenceObservation {
  const name = s.fence.spec.nodeName;
  return {
    now: s.now,
    fence: structuredClone(s.fence),
    node: s.node ? structuredClone(s.node) : undefined,
    lease: s.lease ? structuredClone(s.lease) : undefined,
    leaseObservedSilentMs: s.leaseObservedSilentMs,
    policies: s.policies,
    agents: s.agents,
    pods: s.pods.filter((p) => p.spec?.nodeName === name),
    pvcs: s.pvcs,
    volumeAttachments: s.vas,
    operations: new Map(s.ops),
    ...(s.lastSeen ? { lastSeenNode: structuredClone(s.lastSeen) } : {}),
  };
}

function setCondition(st: NodeFenceStatus, type: string, reason: string, status: "True" | "False" = "False") {
  st.conditions = [
    ...(st.conditions ?? []).filter((c) => c.type !== type),
    { type, status, reason, message: reason, lastTransitionTime: stamp(T0) },
  ];
}

/** The node heartbeats: its kubelet renews the Lease (and, if it says so, posts Ready). */
function heartbeat(s: Sim, ready = false): void {
  s.lease = lease("node-1", s.now);
  if (ready && s.node)
    s.node.status!.conditions = [{ type: "Ready", status: "True", reason: "KubeletReady", lastHeartbeatTime: s.now.toJSDate() }];
}

function unmark(s: Sim): void {
  if (s.node)
    s.node.spec = {
      ...s.node.spec,
      taints: (s.node.spec?.taints ?? []).filter((t) => t.key !== FENCED_TAINT && t.key !== OUT_OF_SERVICE_TAINT),
    };
}

function apply(s: Sim, step: Step): void {
  const st: NodeFenceStatus = (s.fence.status ??= {});
  const now = stamp(s.now);
  switch (step.kind) {
    case "addFinalizer":
      s.fence.metadata!.finalizers = [...(s.fence.metadata!.finalizers ?? []), FINALIZER];
      break;
    case "finalize":
      unmark(s);
      s.fence.metadata!.finalizers = [];
      s.ops.clear();
      break;
    case "start":
      Object.assign(st, {
        phase: "Pending",
        policy: step.policy,
        policySnapshot: step.snapshot,
        nodeSnapshot: step.node,
        bootID: step.bootID,
        startTime: now,
        round: 0,
        failures: 0,
      });
      break;
    case "begin":
      Object.assign(st, { phase: "Fencing", currentLevel: 0, levelStartTime: now });
      break;
    case "cancel":
      s.ops.clear();
      unmark(s);
      for (const a of st.attempts ?? []) if (a.outcome === "InProgress") a.outcome = "Cancelled";
      Object.assign(st, { phase: "Unfenced", unfencedTime: now });
      setCondition(st, "Fenced", "NodeRecovered");
      break;
    case "interrupted": {
      const a = st.attempts?.[step.index];
      assert.ok(a, `interrupted points at attempt ${step.index}, which does not exist`);
      Object.assign(a, { outcome: "Interrupted", endTime: now });
      break;
    }
    case "escalate":
      Object.assign(st, { currentLevel: step.to, levelStartTime: now });
      break;
    case "runAgent": {
      const name = step.agent.metadata?.name ?? "";
      const index = st.attempts?.length ?? 0;
      const a: NodeFenceStatusAttempts = {
        level: step.level,
        round: st.round ?? 0,
        agent: name,
        ...attemptFacts(step.agent),
        operation: step.operation,
        startTime: now,
        outcome: "InProgress",
      };
      st.attempts = [...(st.attempts ?? []), a];
      if (step.agent.spec.type === "manual" && step.operation === "off") break; // no operation: the machine watches
      const r = s.agentResult(name, step.operation, step.level);
      if (r === "hang") s.ops.set(index, { state: "running" });
      else if (r !== "crash")
        s.ops.set(index, {
          state: "done",
          outcome: r as Exclude<Outcome, "InProgress">,
          message: r === "Succeeded" ? "ok" : "agent said no",
        });
      break;
    }
    case "recordOutcome": {
      const a = st.attempts?.[step.index];
      assert.ok(a && a.outcome === "InProgress", `recordOutcome for attempt ${step.index}, which is not InProgress`);
      Object.assign(a, { outcome: step.outcome, endTime: now, message: step.message });
      s.ops.delete(step.index);
      break;
    }
    case "roundFailed":
      Object.assign(st, { phase: "Failed", failures: (st.failures ?? 0) + 1, nextRetryTime: stamp(step.retryAt) });
      setCondition(st, "Fenced", step.reason);
      break;
    case "retry":
      Object.assign(st, { phase: "Fencing", round: (st.round ?? 0) + 1, currentLevel: 0, levelStartTime: now });
      if (step.snapshot) st.policySnapshot = step.snapshot;
      delete st.nextRetryTime;
      break;
    case "confirmed":
      Object.assign(st, { phase: "Fenced", fencedTime: now, evidence: { ...step.evidence, time: now } });
      setCondition(st, "Fenced", step.evidence.method, "True");
      break;
    case "reenter":
      if (s.fence.metadata?.annotations) delete s.fence.metadata.annotations[CONFIRMED_OFF_ANNOTATION];
      Object.assign(st, { phase: "Fencing", round: (st.round ?? 0) + 1, currentLevel: 0, levelStartTime: now });
      delete st.evidence;
      delete st.fencedTime;
      setCondition(st, "Fenced", "HeartbeatAfterFence");
      break;
    case "markNode":
      if (s.node) s.node.spec = { ...s.node.spec, taints: [...(s.node.spec?.taints ?? []), { key: FENCED_TAINT, effect: "NoExecute" }] };
      st.phase = "Releasing";
      break;
    case "release": {
      for (const item of step.items) {
        const rec = { time: now } as NonNullable<NodeFenceStatus["releases"]>[number];
        if (item.kind === "Pod") {
          s.pods = s.pods.filter((p) => p.metadata?.uid !== item.pod.metadata?.uid);
          Object.assign(rec, {
            kind: "Pod",
            namespace: item.pod.metadata?.namespace,
            name: item.pod.metadata?.name,
            uid: item.pod.metadata?.uid,
            action: "ForceDeleted",
          });
        } else if (item.kind === "VolumeAttachment") {
          s.vas = s.vas.filter((v) => v.metadata?.uid !== item.uid);
          Object.assign(rec, { kind: "VolumeAttachment", name: item.name, uid: item.uid, action: "Deleted" });
        } else if (item.kind === "ClaimLock") {
          const key = `${item.pvc.metadata?.namespace}/${item.pvc.metadata?.name}`;
          const broken = breakLock(item.pvc, item.pod.metadata?.uid ?? "", "NodeFence node-1", now);
          if (broken)
            s.pvcs.set(key, { ...item.pvc, metadata: { ...item.pvc.metadata, annotations: { [LOCK_ANNOTATION]: formatLock(broken) } } });
          Object.assign(rec, {
            kind: "ClaimLock",
            namespace: item.pvc.metadata?.namespace,
            name: item.pvc.metadata?.name,
            uid: item.pvc.metadata?.uid,
            action: "Broken",
            message: claimLockMessage(item.pod, item.token),
          });
        } else {
          if (s.node) {
            const others = (s.node.spec?.taints ?? []).filter((t) => t.key !== OUT_OF_SERVICE_TAINT);
            s.node.spec = {
              ...s.node.spec,
              taints: item.action === "Added" ? [...others, { key: OUT_OF_SERVICE_TAINT, effect: "NoExecute" }] : others,
            };
          }
          Object.assign(rec, { kind: "Taint", name: OUT_OF_SERVICE_TAINT, action: item.action });
        }
        st.releases = [...(st.releases ?? []), rec];
      }
      break;
    }
    case "released":
      Object.assign(st, { phase: "Released", releasedTime: now });
      break;
    case "startUnfence":
      s.ops.clear();
      for (const a of st.attempts ?? []) if (a.outcome === "InProgress") a.outcome = "Cancelled";
      st.phase = "Unfencing";
      setCondition(st, "Fenced", step.reason);
      break;
    case "unmarkNode":
      unmark(s);
      Object.assign(st, { phase: "Unfenced", unfencedTime: now });
      setCondition(st, "Fenced", step.reason);
      break;
    case "wait":
    case "done":
      break;
  }
  if (s.bound && s.fence.status) s.fence.status = boundStatus(s.fence.status, s.bound);
  s.now = s.now.plus({ seconds: 1 });
}

/** Runs the machine until it says wait or done (or `max` steps); returns every step. */
function walk(s: Sim, max = 80): Step[] {
  const steps: Step[] = [];
  for (let i = 0; i < max; i++) {
    const step = nextStep(observe(s));
    steps.push(step);
    apply(s, step);
    if (step.kind === "wait" || step.kind === "done") return steps;
  }
  assert.fail(`no wait or done after ${max} steps: ${describeSteps(steps).join(" → ")}`);
}

function describeStep(x: Step): string {
  switch (x.kind) {
    case "runAgent":
      return `runAgent ${x.operation} L${x.level} ${x.agent.metadata?.name}`;
    case "release":
      // One step, its items side by side: "release Pod a + Pod b".
      return `release ${x.items
        .map((i) =>
          i.kind === "Pod"
            ? `Pod ${i.pod.metadata?.name}`
            : i.kind === "VolumeAttachment"
              ? `VA ${i.name}`
              : i.kind === "ClaimLock"
                ? `ClaimLock ${i.pvc.metadata?.name}`
                : `Taint ${i.action}`,
        )
        .join(" + ")}`;
    case "confirmed":
      return `confirmed ${x.evidence.method}`;
    case "roundFailed":
    case "wait":
      return `${x.kind} ${x.reason}`;
    case "escalate":
      return `escalate ${x.to}`;
    case "interrupted":
      return `interrupted ${x.index}`;
    case "recordOutcome":
      return `record ${x.outcome}`;
    case "startUnfence":
    case "unmarkNode":
      return `${x.kind} ${x.reason}`;
    default:
      return x.kind;
  }
}
const describeSteps = (steps: Step[]) => steps.map(describeStep);

/** nextStep for a fence with the given status in an otherwise default world. */
function stepFor(status: NodeFenceStatus | undefined, o: Partial<Sim> & { spec?: Partial<NodeFenceSpec> } = {}): Step {
  const s = sim({ ...o, fence: fenceOf(status, o.spec) });
  return nextStep(observe(s));
}

const snapOf = (p: FencingPolicy) => snapshotOf(p);

describe("nextStep: claim locks (issue 10)", () => {
  const locked = (name: string, holder: V1Pod, token: number) => {
    const c = pvc(name, ["ReadWriteOnce"]);
    c.metadata!.uid = `uid-pvc-${name}`;
    c.metadata!.annotations = {
      [LOCK_ANNOTATION]: formatLock({ v: 1, token, holder: { pod: holder.metadata!.name!, uid: holder.metadata!.uid! }, time: stamp(T0) }),
    };
    return c;
  };

  test("the locks held by the fenced node's pods are broken (token kept), once each, before the pods go; another node's stay", () => {
    const db0 = stsPod("db-0", { claims: ["data-db-0"] });
    const app = pod("app", { claims: ["app-data"] });
    const far = stsPod("db-9", { node: "node-2", claims: ["data-db-9"] });
    const s = sim({
      fence: fenceOf(undefined, {}, []),
      pvcs: pvcMap(locked("data-db-0", db0, 4), locked("app-data", app, 11), locked("data-db-9", far, 2)),
      pods: [db0, app, far],
    });
    const steps = describeSteps(walk(s));
    const released = steps.filter((x) => x.startsWith("release "));
    assert.deepEqual(released, ["release ClaimLock data-db-0 + ClaimLock app-data", "release Pod app + Pod db-0"]);
    assert.equal(steps.at(-1), "done");
    const broken = parseLock(s.pvcs.get("default/data-db-0")!);
    assert.deepEqual(broken.ok && broken.lock, { v: 1, token: 4, time: broken.ok ? broken.lock?.time : "", brokenBy: "NodeFence node-1" });
    const kept = parseLock(s.pvcs.get("default/data-db-9")!);
    assert.equal(kept.ok && kept.lock?.holder?.pod, "db-9");
    const recs = (s.fence.status?.releases ?? []).filter((r) => r.kind === "ClaimLock");
    assert.deepEqual(
      recs.map((r) => [r.name, r.action, r.message]),
      [
        ["data-db-0", "Broken", "token 4 held by pod db-0"],
        ["app-data", "Broken", "token 11 held by pod app"],
      ],
    );
  });

  test("a lock the pod no longer holds is left alone", () => {
    const db0 = stsPod("db-0", { claims: ["data-db-0"] });
    const other = stsPod("db-0-new", { node: "node-2", uid: "other" });
    const s = sim({ fence: fenceOf(undefined, {}, []), pvcs: pvcMap(locked("data-db-0", other, 5)), pods: [db0] });
    assert.ok(!describeSteps(walk(s)).some((x) => x.includes("ClaimLock")));
  });
});

describe("nextStep: the whole way, by feeding back status", () => {
  test("'' → finalizer → Pending → Fencing → agent → Fenced → Releasing (taint, pods by priority, VolumeAttachments, pod GC wait, untaint) → Released", () => {
    const s = sim({
      fence: fenceOf(undefined, {}, []),
      policies: [policy("default", { release: { forceDeletePods: true, deleteVolumeAttachments: true, outOfServiceTaint: true } })],
      pvcs: pvcMap(pvc("cache-data", ["ReadWriteOnce"]), pvc("shared", ["ReadWriteMany"])),
      pods: [
        stsPod("db-0", { priority: 100 }),
        stsPod("db-1", { priority: 1000 }),
        pod("cache-0", { priority: 500, claims: ["cache-data"] }),
        pod("web", { claims: ["shared"], deleting: at(900) }), // not guarded, terminating: the pod GC controller's
        // Succeeded on a node that went silent: the phase proves nothing there (pod GC writes one itself), so it is
        // released with the rest, highest priority first.
        stsPod("done-0", { phase: "Succeeded", priority: 5000 }),
        stsPod("db-9", { node: "node-2", priority: 9000 }), // another node's
      ],
      vas: [volumeAttachment("va-1", "node-1"), volumeAttachment("va-2", "node-2"), volumeAttachment("va-3", "node-1")],
    });
    const first = walk(s);
    assert.deepEqual(describeSteps(first), [
      "addFinalizer",
      "start",
      "begin",
      "runAgent off L0 ipmi",
      "record Succeeded",
      "confirmed PowerOffConfirmed",
      "markNode",
      "release Taint Added",
      "release Pod done-0 + Pod db-1 + Pod cache-0 + Pod db-0",
      "release VA va-1 + VA va-3",
      "wait WaitingForPodGC",
    ]);
    const start = first[1];
    assert.ok(start?.kind === "start");
    assert.equal(start.policy, "default");
    assert.equal(start.bootID, "boot-1");
    assert.equal(start.snapshot.release?.outOfServiceTaint, true, "the policy's settings are snapshotted");
    const confirmed = first[5];
    assert.ok(confirmed?.kind === "confirmed");
    assert.deepEqual(confirmed.evidence.agents, ["ipmi"]);
    assert.equal(confirmed.evidence.heartbeat.silent, true, "the node was partitioned when confirmed");
    assert.equal(confirmed.evidence.heartbeat.leaseRenewTime, T0.toUTC().toISO());
    assert.equal(s.fence.status?.phase, "Releasing");
    assert.ok(hasTaint(s.node, OUT_OF_SERVICE_TAINT) && hasTaint(s.node, FENCED_TAINT));

    assert.deepEqual(describeSteps(walk(s)), ["wait WaitingForPodGC"]);
    s.pods = s.pods.filter((p) => p.metadata?.name !== "web");
    assert.deepEqual(describeSteps(walk(s)), ["release Taint Removed", "released", "done"]);
    assert.ok(!hasTaint(s.node, OUT_OF_SERVICE_TAINT));
    assert.ok(hasTaint(s.node, FENCED_TAINT), "the fenced taint stays until unfenced");
    assert.ok(
      s.vas.some((v) => v.metadata?.name === "va-2"),
      "another node's VolumeAttachment is untouched",
    );
    assert.ok(
      s.pods.some((p) => p.metadata?.name === "db-9"),
      "another node's pod is untouched",
    );
    assert.deepEqual(describeSteps(walk(s)), ["done"]);
  });

  test("a crash in the middle of an agent run: the InProgress attempt with no operation here is interrupted and run again", () => {
    let crashes = 1;
    const s = sim({ pods: [stsPod("db-0")], agentResult: () => (crashes-- > 0 ? "crash" : "Succeeded") });
    assert.deepEqual(describeSteps(walk(s)).slice(0, 6), [
      "start",
      "begin",
      "runAgent off L0 ipmi",
      "interrupted 0",
      "runAgent off L0 ipmi",
      "record Succeeded",
    ]);
    assert.deepEqual(
      s.fence.status?.attempts?.map((a) => a.outcome),
      ["Interrupted", "Succeeded"],
    );
  });

  test("an operation still running: wait (the worker is free), then its outcome is recorded", () => {
    let hang = true;
    const s = sim({ pods: [stsPod("db-0")], agentResult: () => (hang ? "hang" : "Succeeded") });
    assert.deepEqual(describeSteps(walk(s)), ["start", "begin", "runAgent off L0 ipmi", "wait AgentRunning"]);
    hang = false;
    s.ops.set(0, { state: "done", outcome: "Succeeded", message: "off" });
    assert.deepEqual(describeSteps(walk(s)).slice(0, 2), ["record Succeeded", "confirmed PowerOffConfirmed"]);
  });

  test("escalation: level 1 fails, level 2 (two agents) succeeds; the evidence names level 2's agents", () => {
    const s = sim({
      policies: [policy("default", { escalation: [{ agents: [{ name: "ipmi" }] }, { agents: [{ name: "pdu" }, { name: "pdu-b" }] }] })],
      pods: [stsPod("db-0")],
      agentResult: (a) => (a === "ipmi" ? "TimedOut" : "Succeeded"),
    });
    const steps = walk(s);
    assert.deepEqual(describeSteps(steps).slice(0, 10), [
      "start",
      "begin",
      "runAgent off L0 ipmi",
      "record TimedOut",
      "escalate 1",
      "runAgent off L1 pdu",
      "record Succeeded",
      "runAgent off L1 pdu-b",
      "record Succeeded",
      "confirmed PowerOffConfirmed",
    ]);
    const c = steps[9];
    assert.ok(c?.kind === "confirmed");
    assert.deepEqual(c.evidence.agents, ["pdu", "pdu-b"]);
    assert.match(c.evidence.detail, /^round 1, level 2: pdu, pdu-b/);
  });
});

describe("item 1: a changed bootID is not evidence", () => {
  test("the node reboots while the attempt hangs and heartbeats again: an automatic fence is cancelled, nothing released", () => {
    const s = sim({ pods: [stsPod("db-0")], agentResult: () => "hang" });
    walk(s);
    // The machine reboots: new bootID, its kubelet heartbeats and restarts db-0 in the new boot.
    s.node = node("node-1", { ready: "True", bootID: "boot-2", heartbeat: s.now });
    heartbeat(s);
    const steps = walk(s);
    assert.deepEqual(describeSteps(steps), ["cancel", "done"]);
    assert.equal(s.fence.status?.phase, "Unfenced");
    assert.equal(s.fence.status?.attempts?.[0]?.outcome, "Cancelled");
    assert.equal(s.fence.status?.releases, undefined);
    assert.equal(s.pods.length, 1, "db-0, running in the new boot, is never force-deleted");
  });

  test("rebooted, then silent again (partitioned) while the BMC fails: fencing goes on, and nothing is released without a power-off", () => {
    const s = sim({ pods: [stsPod("db-0")], agentResult: () => "Failed" });
    s.node = node("node-1", { ready: "Unknown", bootID: "boot-2", heartbeat: T0 });
    const steps = walk(s);
    assert.ok(!steps.some((x) => x.kind === "confirmed" || x.kind === "release"), describeSteps(steps).join(" → "));
    assert.equal(steps.at(-1)?.kind, "wait");
    assert.equal(s.fence.status?.phase, "Failed");
  });

  test("a manual fence of a rebooted node keeps fencing: the administrator asked for a power-off", () => {
    const step = stepFor(fencing(), {
      spec: { origin: "Manual" },
      node: node("node-1", { ready: "True", bootID: "boot-2", heartbeat: at(999) }),
      lease: lease("node-1", at(999)),
    });
    assert.ok(step.kind === "runAgent" && step.agent.metadata?.name === "ipmi");
  });
});

describe("item 2: a deleted Node is not evidence", () => {
  test("the Node is deleted mid-fence: the machine is still powered off before anything is released", () => {
    const s = sim({ pods: [stsPod("db-0")], agentResult: () => "hang" });
    walk(s);
    s.node = undefined;
    s.lease = undefined;
    assert.deepEqual(describeSteps(walk(s)), ["wait AgentRunning"], "no confirmation from the deletion");
    s.ops.set(0, { state: "done", outcome: "Succeeded", message: "off" });
    const steps = walk(s);
    assert.deepEqual(describeSteps(steps).slice(0, 3), ["record Succeeded", "confirmed PowerOffConfirmed", "markNode"]);
  });

  test("parameters are rendered over the live Node if it is the same object, else over the snapshot", () => {
    const f = fenceOf(
      fencing({
        nodeSnapshot: { uid: "uid-node-node-1", providerID: "aws:///i-1", labels: { "node-restriction.kubernetes.io/bmc": "10.0.0.1" } },
      }),
    );
    const live = partitionedNode({ labels: { "node-restriction.kubernetes.io/bmc": "10.0.0.2" } });
    assert.equal(targetNode(f, live), live);
    const recreated = structuredClone(live);
    recreated.metadata!.uid = "new";
    for (const n of [recreated, undefined]) {
      const t = targetNode(f, n);
      assert.equal(t.metadata?.labels?.["node-restriction.kubernetes.io/bmc"], "10.0.0.1");
      assert.equal(t.spec?.providerID, "aws:///i-1");
      assert.equal(t.metadata?.name, "node-1");
    }
  });
});

describe("issue 41 item 6: a Node that is gone is fenced through what was last seen of it", () => {
  const bmc = { "node-restriction.kubernetes.io/bmc": "10.0.0.9", pool: "db" };
  const lastSeen = () => {
    const n = partitionedNode({ labels: bmc });
    n.spec = { ...n.spec, providerID: "aws:///us-east-1a/i-0123456789abcdef0" };
    return n;
  };

  test("a fence created after its Node was deleted starts on the Node as last seen: its labels pick the policy, its providerID is the target", () => {
    const dbPolicy = policy("db", { nodeSelector: { matchLabels: { pool: "db" } } });
    const step = stepFor(undefined, {
      node: undefined,
      lease: undefined,
      lastSeen: lastSeen(),
      policies: [policy("other", { nodeSelector: { matchLabels: { pool: "web" } } }), dbPolicy],
    });
    assert.ok(step.kind === "start", step.kind);
    assert.equal(step.policy, "db");
    assert.deepEqual(step.node, {
      uid: "uid-node-node-1",
      providerID: "aws:///us-east-1a/i-0123456789abcdef0",
      labels: { "node-restriction.kubernetes.io/bmc": "10.0.0.9" },
    });
    assert.equal(step.bootID, "boot-1");
  });

  test("remembered labels that no policy selects, or a named policy that does not select them: it waits", () => {
    const none = stepFor(undefined, {
      node: undefined,
      lease: undefined,
      lastSeen: lastSeen(),
      policies: [policy("web", { nodeSelector: { matchLabels: { pool: "web" } } })],
    });
    assert.ok(none.kind === "wait" && none.reason === "NoPolicy");
    const named = stepFor(undefined, {
      node: undefined,
      lease: undefined,
      lastSeen: lastSeen(),
      spec: { policy: "web", origin: "Manual" },
      policies: [policy("web", { nodeSelector: { matchLabels: { pool: "web" } } })],
    });
    assert.ok(named.kind === "wait" && named.reason === "PolicyDoesNotSelectNode", named.kind);
  });

  test("a Node never seen: an automatic fence waits NodeNotFound; a manual one naming its policy starts on the name alone", () => {
    const auto = stepFor(undefined, { node: undefined, lease: undefined });
    assert.ok(auto.kind === "wait" && auto.reason === "NodeNotFound");
    const unnamed = stepFor(undefined, { node: undefined, lease: undefined, spec: { origin: "Manual" } });
    assert.ok(unnamed.kind === "wait" && unnamed.reason === "NodeNotFound", "no labels to pick a policy by");
    const manual = stepFor(undefined, { node: undefined, lease: undefined, spec: { origin: "Manual", policy: "default" } });
    assert.ok(manual.kind === "start", manual.kind);
    assert.deepEqual(manual.node, { uid: "", providerID: "", labels: {} });
  });

  test("a fence started on the name alone never renders over a Node created after it started (another machine may have taken the name)", () => {
    const f = fenceOf(fencing({ nodeSnapshot: { uid: "", providerID: "", labels: {} }, startTime: stamp(at(900)) }), {
      origin: "Manual",
      policy: "default",
    });
    const later = lastSeen();
    later.metadata!.creationTimestamp = at(950).toJSDate();
    assert.equal(targetNode(f, later).spec?.providerID, undefined, "the name alone");
    const before = lastSeen();
    before.metadata!.creationTimestamp = at(100).toJSDate();
    assert.equal(targetNode(f, before), before, "a Node older than the fence is the one it was asked for");
  });

  test("a remembered Node of another name is never used", () => {
    const other = lastSeen();
    other.metadata!.name = "node-2";
    const step = stepFor(undefined, { node: undefined, lease: undefined, lastSeen: other });
    assert.ok(step.kind === "wait" && step.reason === "NodeNotFound");
  });

  test("end to end: fenced through the remembered target, confirmed with the Node and its Lease gone, released", () => {
    const s = sim({ node: undefined, lease: undefined, lastSeen: lastSeen(), pods: [stsPod("db-0")], policies: [policy("default")] });
    const steps = describeSteps(walk(s));
    assert.deepEqual(steps.slice(0, 4), ["start", "begin", "runAgent off L0 ipmi", "record Succeeded"]);
    assert.ok(
      steps.includes("confirmed PowerOffConfirmed") && steps.includes("release Pod db-0") && steps.at(-1) === "done",
      steps.join(" → "),
    );
    assert.equal(targetNode(s.fence, undefined).spec?.providerID, "aws:///us-east-1a/i-0123456789abcdef0");
    assert.deepEqual(s.fence.status?.evidence?.heartbeat, {
      nodeUID: "",
      bootID: "",
      leaseRenewTime: "",
      readyHeartbeatTime: "",
      silent: true,
    });
  });

  test("a gone Node whose Lease is still renewed is a live kubelet: an automatic fence powers nothing off and is cancelled", () => {
    const s = sim({
      node: undefined,
      lease: lease("node-1", at(990)),
      leaseObservedSilentMs: 5_000,
      lastSeen: lastSeen(),
      pods: [stsPod("db-0")],
    });
    const steps = describeSteps(walk(s));
    assert.ok(!steps.some((x) => x.startsWith("runAgent")), steps.join(" → "));
    assert.equal(steps.at(-1), "done");
    assert.equal(s.fence.status?.phase, "Unfenced");
    const f = fenceOf(fencing());
    assert.match(
      noLongerDue({ fence: f, node: undefined, lease: lease("node-1", at(990)), leaseObservedSilentMs: 5_000, now: at(1000) }) ?? "",
      /Lease was renewed/,
    );
    assert.match(
      noLongerDue({ fence: f, node: undefined, lease: lease("node-1", at(990)), now: at(1000) }) ?? "",
      /Lease was renewed/,
      "a Lease not yet observed counts as renewed",
    );
    assert.equal(
      noLongerDue({ fence: f, node: undefined, lease: lease("node-1", T0), leaseObservedSilentMs: 40_000, now: at(1000) }),
      undefined,
      "silent a whole lease duration",
    );
  });

  test("after a confirmation with the Node gone: a Node re-created by a live kubelet, or a Lease renewed, stops the release", () => {
    const confirmedGone = () =>
      sim({
        node: undefined,
        lease: undefined,
        lastSeen: lastSeen(),
        pods: [stsPod("db-0"), stsPod("db-1")],
        agentResult: () => "Succeeded",
      });
    for (const [what, change] of [
      ["Node re-created", (s: Sim) => (s.node = node("node-1", { ready: "True", heartbeat: s.now }))],
      ["Lease re-created", (s: Sim) => (s.lease = lease("node-1", s.now))],
    ] as const) {
      const s = confirmedGone();
      // Walk until the first release is due, then the world changes before it.
      for (let i = 0; i < 20 && s.fence.status?.phase !== "Releasing"; i++) apply(s, nextStep(observe(s)));
      assert.equal(s.fence.status?.phase, "Releasing", what);
      change(s);
      const step = nextStep(observe(s));
      assert.equal(step.kind, "reenter", `${what}: ${step.kind}`);
    }
  });

  test("a manual confirmation with the Node gone counts only while its Lease is gone or expired", () => {
    const manualOnly = [policy("default", { escalation: [{ agents: [{ name: "admin" }] }] })];
    const f = fencing({ policySnapshot: snapOf(manualOnly[0]!), attempts: [attempt("admin", "InProgress", 0, "off", stamp(at(999)))] });
    const ann = { [CONFIRMED_OFF_ANNOTATION]: "node-1" };
    const live = sim({
      policies: manualOnly,
      node: undefined,
      lease: lease("node-1", at(995)),
      leaseObservedSilentMs: 1_000,
      fence: fenceOf(f, { origin: "Manual" }),
    });
    live.fence.metadata!.annotations = ann;
    const refused = nextStep(observe(live));
    assert.ok(refused.kind === "wait" && refused.reason === "ConfirmationRefused", refused.kind);
    const gone = sim({ policies: manualOnly, node: undefined, lease: undefined, fence: fenceOf(f, { origin: "Manual" }) });
    gone.fence.metadata!.annotations = ann;
    const ok = nextStep(observe(gone));
    assert.ok(ok.kind === "recordOutcome" && ok.outcome === "Succeeded", ok.kind);
  });
});

describe("item 3: a manual confirmation counts only while the node is partitioned", () => {
  const manualOnly = [policy("default", { escalation: [{ agents: [{ name: "admin" }] }] })];
  const manualFence = (extra: NodeFenceStatus = {}) => fencing({ policySnapshot: snapOf(manualOnly[0]!), ...extra });

  test("no confirmation yet: the manual attempt waits without holding anything", () => {
    const s = sim({ policies: manualOnly, fence: fenceOf(manualFence()) });
    assert.deepEqual(describeSteps(walk(s)), ["runAgent off L0 admin", "wait WaitingForConfirmation"]);
    assert.equal(s.ops.size, 0, "no background operation for a manual agent");
  });

  test("confirmed while the node heartbeats: refused (wait ConfirmationRefused), then TimedOut with the reason", () => {
    const s = sim({ policies: manualOnly, fence: fenceOf(manualFence(), { origin: "Manual" }) });
    s.node = node("node-1", { ready: "True", heartbeat: s.now });
    heartbeat(s);
    s.fence.metadata!.annotations = { [CONFIRMED_OFF_ANNOTATION]: "node-1" };
    assert.deepEqual(describeSteps(walk(s)), ["runAgent off L0 admin", "wait ConfirmationRefused"]);
    s.now = s.now.plus({ seconds: 31 });
    heartbeat(s, true);
    const steps = walk(s);
    assert.equal(describeStep(steps[0]!), "record TimedOut");
    assert.ok(steps[0]?.kind === "recordOutcome" && /refused: the node still heartbeats/.test(steps[0].message));
    assert.ok(!steps.some((x) => x.kind === "confirmed"));
  });

  test("confirmed and partitioned: Succeeded, ManualConfirmation", () => {
    const s = sim({ policies: manualOnly, fence: fenceOf(manualFence()) });
    s.fence.metadata!.annotations = { [CONFIRMED_OFF_ANNOTATION]: "node-1" };
    assert.deepEqual(describeSteps(walk(s)).slice(0, 3), ["runAgent off L0 admin", "record Succeeded", "confirmed ManualConfirmation"]);
  });

  test("issue 31: confirmed while partitioned only by its expired Lease: refused until the node controller says Ready=Unknown", () => {
    const s = sim({ policies: manualOnly, fence: fenceOf(manualFence()) });
    s.node = node("node-1", { ready: "True", heartbeat: T0 });
    s.leaseObservedSilentMs = 1_000_000; // the operator saw the renewTime of T0 unchanged since: its Lease expired
    s.fence.metadata!.annotations = { [CONFIRMED_OFF_ANNOTATION]: "node-1" };
    const steps = walk(s);
    assert.deepEqual(describeSteps(steps), ["runAgent off L0 admin", "wait ConfirmationRefused"]);
    assert.match(
      steps[1]?.kind === "wait" ? steps[1].message : "",
      /Lease expired, but the node controller has not marked it Ready=Unknown/,
    );
    s.node = node("node-1", { ready: "Unknown", heartbeat: T0 });
    assert.deepEqual(describeSteps(walk(s)).slice(0, 2), ["record Succeeded", "confirmed ManualConfirmation"]);
  });

  test("an annotation naming another node confirms nothing", () => {
    const s = sim({ policies: manualOnly, fence: fenceOf(manualFence()) });
    s.fence.metadata!.annotations = { [CONFIRMED_OFF_ANNOTATION]: "node-2" };
    assert.deepEqual(describeSteps(walk(s)), ["runAgent off L0 admin", "wait WaitingForConfirmation"]);
  });
});

describe("item 4: no release after a heartbeat since the confirmation", () => {
  const changes: [string, (s: Sim) => void][] = [
    ["the Lease is renewed", (s) => heartbeat(s)],
    ["the Ready heartbeat moves", (s) => (s.node!.status!.conditions![0]!.lastHeartbeatTime = s.now.toJSDate())],
    ["a new boot", (s) => (s.node!.status!.nodeInfo!.bootID = "boot-9")],
    ["the Node is re-created (new uid)", (s) => (s.node!.metadata!.uid = "uid-new")],
    ["the Lease disappears", (s) => (s.lease = undefined)],
  ];
  for (const phase of ["Fenced", "Releasing"] as const)
    for (const [what, change] of changes)
      test(`${phase}, then ${what}: re-enter fencing (new round), nothing released`, () => {
        const s = sim({ pods: [stsPod("db-0")], fence: fenceOf(releasing({ phase }), { origin: "Manual" }) });
        change(s);
        const steps = walk(s);
        assert.equal(describeStep(steps[0]!), "reenter");
        // Nothing more is released until the machine is powered off again and confirmed, with a new heartbeat record.
        const confirmed = steps.findIndex((x) => x.kind === "confirmed");
        const firstRelease = steps.findIndex((x) => x.kind === "release" || x.kind === "markNode");
        assert.ok(confirmed > 0 && (firstRelease < 0 || firstRelease > confirmed), describeSteps(steps).join(" → "));
        assert.ok(
          describeSteps(steps).slice(1, confirmed).includes("runAgent off L0 ipmi"),
          "the old round's success does not count: the agent runs again",
        );
        assert.equal(s.fence.status?.round, 1);
      });

  test("an automatic fence whose node heartbeats mid-release is cancelled after the re-entry, its marks removed", () => {
    const s = sim({ pods: [stsPod("db-0"), stsPod("db-1")], fence: fenceOf(releasing()) });
    s.node!.spec = { taints: [{ key: FENCED_TAINT, effect: "NoExecute" }] };
    heartbeat(s, true);
    assert.deepEqual(describeSteps(walk(s)), ["reenter", "cancel", "done"]);
    assert.ok(!hasTaint(s.node, FENCED_TAINT));
    assert.equal(s.pods.length, 2);
  });

  test("the re-entry drops the manual confirmation so a new one is needed", () => {
    const s = sim({ fence: fenceOf(releasing(), { origin: "Manual" }) });
    s.fence.metadata!.annotations = { [CONFIRMED_OFF_ANNOTATION]: "node-1" };
    heartbeat(s);
    walk(s);
    assert.equal(s.fence.metadata?.annotations?.[CONFIRMED_OFF_ANNOTATION], undefined);
  });

  test("evidence of an earlier round, or without a heartbeat record (older status), is not enough: re-enter", () => {
    for (const ev of [evidenceNow({ round: 0 }), { ...evidenceNow(), heartbeat: undefined }]) {
      const step = stepFor(releasing({ round: ev.heartbeat ? 1 : 0, evidence: ev }), { pods: [stsPod("db-0")] });
      assert.equal(step.kind, "reenter");
    }
  });

  test("a node's pods are released side by side in batches of MAX_RELEASE_BATCH, highest priority first, none twice", () => {
    const n = MAX_RELEASE_BATCH * 2 + 3;
    const pods = Array.from({ length: n }, (_, i) => stsPod(`db-${String(i).padStart(2, "0")}`, { priority: i }));
    const s = sim({ pods, fence: fenceOf(releasing(), {}) });
    const steps = walk(s).filter((x) => x.kind === "release");
    assert.deepEqual(
      steps.map((x) => x.items.length),
      [MAX_RELEASE_BATCH, MAX_RELEASE_BATCH, 3],
    );
    const order = steps.flatMap((x) => x.items.map((i) => (i.kind === "Pod" ? (i.pod.spec?.priority ?? -1) : -1)));
    assert.deepEqual(order, [...Array(n).keys()].reverse(), "highest priority first, across and within batches");
    assert.equal(new Set((s.fence.status?.releases ?? []).map((r) => r.uid)).size, n, "each pod recorded once");
  });

  test("a fence confirmed while the node still heartbeat waits one and a half renewals of silence before the first release", () => {
    const ev = evidenceNow({ time: stamp(at(1000)), heartbeat: { ...evidenceNow().heartbeat, silent: false } });
    const s = sim({ pods: [stsPod("db-0")], fence: fenceOf(releasing({ phase: "Fenced", evidence: ev }), { origin: "Manual" }) });
    const w = walk(s);
    assert.deepEqual(describeSteps(w), ["wait WaitingForSilence"]);
    s.now = at(1000 + 15);
    assert.deepEqual(describeSteps(walk(s)).slice(0, 2), ["markNode", "release Pod db-0"]);
  });

  test("heartbeat changes are compared by value and named for people", () => {
    const before = heartbeatOf(partitionedNode(), lease("node-1", T0));
    assert.deepEqual(heartbeatChanges(before, heartbeatOf(partitionedNode(), lease("node-1", T0))), []);
    const after = heartbeatOf(partitionedNode({ bootID: "boot-2" }), lease("node-1", at(5)));
    assert.deepEqual(
      heartbeatChanges(before, after).map((x) => x.split(" ")[0]),
      ["bootID", "Lease"],
    );
  });
});

describe("item 5 (the pure part): an automatic fence never powers off a node that heartbeats", () => {
  test("after a timed-out try, the node heartbeats: cancel, not another power-off", () => {
    const step = stepFor(fencing({ attempts: [attempt("ipmi", "TimedOut")] }), {
      node: node("node-1", { ready: "True", heartbeat: at(999) }),
      lease: lease("node-1", at(999)),
    });
    assert.equal(step.kind, "cancel");
  });
  test("Pending and an automatic fence: a fresh heartbeat cancels before anything runs", () => {
    const step = stepFor(
      { ...fencing(), phase: "Pending" },
      { lease: lease("node-1", at(999)), node: node("node-1", { ready: "True", heartbeat: at(999) }) },
    );
    assert.equal(step.kind, "cancel");
  });
  test("waitForNodeController: Suspect (silent but Ready not yet Unknown) counts as heartbeating: no power-off", () => {
    const snap = { ...SNAPSHOT, waitForNodeController: true };
    const step = stepFor(fencing({ policySnapshot: snap }), { node: node("node-1", { ready: "True", heartbeat: T0 }) });
    assert.equal(step.kind, "cancel");
  });
  test("issue 31: silent, Ready=True, its Lease expired: partitioned by the Lease, the power-off goes on (snapshot false or absent)", () => {
    const silentReady = node("node-1", { ready: "True", heartbeat: T0 });
    // The operator saw the Lease's renewTime (T0) unchanged for 1,000 s, on its own clock.
    const seen = { node: silentReady, leaseObservedSilentMs: 1_000_000 };
    assert.equal(SNAPSHOT.waitForNodeController, false, "snapshotOf carries the policy's switch (default false)");
    assert.equal(stepFor(fencing(), seen).kind, "runAgent");
    const older = { ...SNAPSHOT };
    delete older.waitForNodeController;
    assert.equal(stepFor(fencing({ policySnapshot: older }), seen).kind, "runAgent", "absent means false");
    // Not yet expired (seen 35 s ago, 40 s Lease): silent for 30 s, but neither signal: cancel.
    const recent = stepFor(fencing(), {
      node: node("node-1", { ready: "True", heartbeat: at(965) }),
      lease: lease("node-1", at(965)),
      leaseObservedSilentMs: 35_000,
    });
    assert.equal(recent.kind, "cancel");
    // The renewTime's value looks 1,000 s old, but the operator has not seen the Lease unchanged (no observation, or
    // a renewal just seen): the Lease is not expired, only Ready=Unknown would do.
    assert.equal(stepFor(fencing(), { node: silentReady }).kind, "cancel", "no observation: the Lease does not count");
    assert.equal(stepFor(fencing(), { node: silentReady, leaseObservedSilentMs: 0 }).kind, "cancel", "just seen renewed");
  });
  test("issue 31: powerOffRefused (the fresh read before each power-off) follows the snapshot's waitForNodeController", () => {
    const silentReady = node("node-1", { ready: "True", heartbeat: T0 });
    const fresh = (
      snap: NodeFenceStatus["policySnapshot"],
      n: V1Node = silentReady,
      l: V1Lease | null = lease("node-1", T0),
      observed: number | undefined = 1_000_000,
    ) => ({
      fence: fenceOf(fencing({ policySnapshot: snap })),
      node: n,
      lease: l ?? undefined,
      leaseObservedSilentMs: observed,
      now: at(1000),
      policies: [policy("default")],
      pods: [],
    });
    const older = { ...SNAPSHOT };
    delete older.waitForNodeController;
    assert.equal(powerOffRefused(fresh({ ...SNAPSHOT, waitForNodeController: false })), undefined, "its Lease expired: may power off");
    assert.equal(powerOffRefused(fresh(older)), undefined, "a snapshot without the field means false");
    assert.match(powerOffRefused(fresh({ ...SNAPSHOT, waitForNodeController: true })) ?? "", /heartbeats again.*Ready=True/);
    // With the node controller's word, both allow it.
    const unknown = node("node-1", { ready: "Unknown", heartbeat: T0 });
    assert.equal(powerOffRefused(fresh({ ...SNAPSHOT, waitForNodeController: true }, unknown)), undefined);
    // No Lease at all: only Ready=Unknown counts, whatever the snapshot says.
    assert.match(powerOffRefused(fresh(SNAPSHOT, silentReady, null)) ?? "", /heartbeats again/);
    assert.equal(powerOffRefused(fresh(SNAPSHOT, unknown, null)), undefined);
    // The fresh read's renewTime differs from the cache's (observed 0), however old its value looks: refused.
    assert.match(powerOffRefused(fresh(SNAPSHOT, silentReady, lease("node-1", T0), 0)) ?? "", /heartbeats again/);
    assert.match(powerOffRefused(fresh(SNAPSHOT, silentReady, lease("node-1", T0), 39_999)) ?? "", /heartbeats again/);
    assert.equal(powerOffRefused(fresh(SNAPSHOT, silentReady, lease("node-1", T0), 40_000)), undefined, "observed for 40 s");
    // A renewal since: refused in both modes.
    for (const w of [false, true])
      assert.match(
        powerOffRefused(fresh({ ...SNAPSHOT, waitForNodeController: w }, silentReady, lease("node-1", at(999)))) ?? "",
        /heartbeats again/,
      );
  });
});

describe("item 10: a NodeFence cannot pick a policy that does not select its node", () => {
  test("spec.policy whose nodeSelector does not match: wait PolicyDoesNotSelectNode (never starts)", () => {
    const policies = [
      policy("manual-only", { nodeSelector: { matchLabels: { role: "lab" } }, escalation: [{ agents: [{ name: "admin" }] }] }),
    ];
    const step = stepFor(undefined, { policies, spec: { origin: "Manual", policy: "manual-only" } });
    assert.ok(step.kind === "wait");
    assert.equal(step.reason, "PolicyDoesNotSelectNode");
    assert.match(step.message, /does not select node node-1/);
    const ok = stepFor(undefined, {
      policies,
      spec: { origin: "Manual", policy: "manual-only" },
      node: partitionedNode({ labels: { role: "lab" } }),
    });
    assert.equal(ok.kind, "start");
  });
});

describe("items 12, 13: nothing is final, nothing missing from a cache is a failure", () => {
  test("every level fails: Failed with a retry time; no release; retried as a new round while partitioned", () => {
    let fail = true;
    const s = sim({
      policies: [policy("default", { escalation: [{ agents: [{ name: "ipmi" }] }, { agents: [{ name: "pdu" }] }] })],
      pods: [stsPod("db-0")],
      agentResult: () => (fail ? "Failed" : "Succeeded"),
    });
    const steps = walk(s);
    assert.deepEqual(describeSteps(steps), [
      "start",
      "begin",
      "runAgent off L0 ipmi",
      "record Failed",
      "escalate 1",
      "runAgent off L1 pdu",
      "record Failed",
      "roundFailed FencingFailed",
      "wait RetryScheduled",
    ]);
    const f = steps[7];
    assert.ok(f?.kind === "roundFailed" && /every escalation level failed; last: level 2: pdu: Failed/.test(f.message));
    assert.equal(s.fence.status?.phase, "Failed");
    assert.equal(s.fence.status?.nextRetryTime, stamp(s.now.minus({ seconds: 2 }).plus({ seconds: retryDelaySeconds(1) })));
    // The BMC comes back; the retry time passes.
    fail = false;
    s.now = s.now.plus({ seconds: 60 });
    const again = walk(s);
    assert.deepEqual(describeSteps(again).slice(0, 4), [
      "retry",
      "runAgent off L0 ipmi",
      "record Succeeded",
      "confirmed PowerOffConfirmed",
    ]);
    assert.equal(s.fence.status?.round, 1);
  });

  test("retry backoff: 30 s doubling, capped at 10 min", () => {
    assert.deepEqual([1, 2, 3, 5, 6, 20].map(retryDelaySeconds), [30, 60, 120, 480, 600, 600]);
  });

  test("a failed automatic fence whose node heartbeats again ends NodeRecovered; a manual one is retried anyway", () => {
    const failed = { ...fencing(), phase: "Failed" as const, nextRetryTime: stamp(at(900)), failures: 1 };
    const healthy = { node: node("node-1", { ready: "True", heartbeat: at(999) }), lease: lease("node-1", at(999)) };
    assert.equal(stepFor(failed, healthy).kind, "cancel");
    assert.equal(stepFor(failed, { ...healthy, spec: { origin: "Manual" } }).kind, "retry");
  });

  test("a retry takes a new snapshot of the policy if it still selects the node, else keeps the old one", () => {
    const failed = { ...fencing(), phase: "Failed" as const, nextRetryTime: stamp(at(900)), failures: 1 };
    const edited = [policy("default", { escalation: [{ agents: [{ name: "pdu" }] }] })];
    const r = stepFor(failed, { policies: edited });
    assert.ok(r.kind === "retry");
    assert.deepEqual(r.snapshot?.escalation, [{ agents: ["pdu"] }]);
    const gone = stepFor(failed, { policies: [] });
    assert.ok(gone.kind === "retry" && gone.snapshot === undefined);
  });

  test("no Node, no policy, a missing policy: wait (retryable) with a reason, never Failed", () => {
    const cases: [Partial<Sim> & { spec?: Partial<NodeFenceSpec> }, string][] = [
      [{ node: undefined }, "NodeNotFound"],
      [{ policies: [] }, "NoPolicy"],
      [{ spec: { policy: "nope" } }, "PolicyNotFound"],
    ];
    for (const [o, reason] of cases) {
      const step = stepFor(undefined, o);
      assert.ok(step.kind === "wait", `${reason}: ${step.kind}`);
      assert.equal(step.reason, reason);
    }
  });

  test("a FenceAgent missing from the cache fails only its own level; a later level can still fence", () => {
    const p = policy("default", { escalation: [{ agents: [{ name: "ghost" }] }, { agents: [{ name: "ipmi" }] }] });
    const s = sim({ policies: [p], fence: fenceOf(fencing({ policySnapshot: snapOf(p) })) });
    assert.deepEqual(describeSteps(walk(s)).slice(0, 4), [
      "escalate 1",
      "runAgent off L1 ipmi",
      "record Succeeded",
      "confirmed PowerOffConfirmed",
    ]);
  });
});

describe("item 17: escalation[].timeoutSeconds bounds a level", () => {
  const p = policy("default", {
    escalation: [{ agents: [{ name: "ipmi" }, { name: "pdu" }], timeoutSeconds: 20 }, { agents: [{ name: "admin" }] }],
  });
  test("an agent gets at most what is left of the level's time", () => {
    const step = stepFor(fencing({ policySnapshot: snapOf(p), levelStartTime: stamp(at(990)) }), { policies: [p] });
    assert.ok(step.kind === "runAgent");
    assert.equal(step.timeoutMs, 10_000, "agent timeout 30 s, but only 10 s left of the level's 20");
  });
  test("once the level's time is up, the next level starts", () => {
    const step = stepFor(fencing({ policySnapshot: snapOf(p), levelStartTime: stamp(at(970)), attempts: [attempt("ipmi", "Succeeded")] }), {
      policies: [p],
    });
    assert.ok(step.kind === "escalate" && /time limit passed/.test(step.message));
  });
  test("a manual wait ends at the level's deadline", () => {
    const q = policy("default", { escalation: [{ agents: [{ name: "admin" }], timeoutSeconds: 5 }] });
    const step = stepFor(
      fencing({
        policySnapshot: snapOf(q),
        levelStartTime: stamp(at(990)),
        attempts: [attempt("admin", "InProgress", 0, "off", stamp(at(991)))],
      }),
      { policies: [q] },
    );
    assert.ok(step.kind === "recordOutcome" && step.outcome === "TimedOut");
  });
});

describe("item 19: a running fence does not change when its policy does", () => {
  const two = policy("default", { escalation: [{ agents: [{ name: "ipmi" }, { name: "pdu" }] }, { agents: [{ name: "admin" }] }] });
  const running = () => fencing({ policySnapshot: snapOf(two), attempts: [attempt("ipmi", "Succeeded")] });
  test("removing an agent from the current level does not turn a partial success into a confirmation", () => {
    const edited = [policy("default", { escalation: [{ agents: [{ name: "ipmi" }] }] })];
    const step = stepFor(running(), { policies: edited });
    assert.ok(step.kind === "runAgent" && step.agent.metadata?.name === "pdu");
  });
  test("shrinking the escalation does not fail the fence; deleting the policy does not stop it", () => {
    const f = fencing({ policySnapshot: snapOf(two), currentLevel: 1 });
    for (const policies of [[policy("default")], []]) {
      const step = stepFor(f, { policies });
      assert.ok(step.kind === "runAgent" && step.agent.metadata?.name === "admin", step.kind);
    }
    const rel = stepFor(releasing({ policySnapshot: snapOf(two) }), { policies: [], pods: [stsPod("db-0")] });
    assert.equal(rel.kind, "release");
  });
  test("a status without a snapshot (older or hand-written) never acts: it fails the round and retries with a fresh snapshot", () => {
    const step = stepFor({ ...releasing(), policySnapshot: undefined }, { pods: [stsPod("db-0")] });
    assert.equal(step.kind, "roundFailed");
  });
});

describe("item 20: a finalizer cleans the node when the NodeFence is deleted", () => {
  test("no finalizer yet: it is added first", () => {
    assert.equal(nextStep(observe(sim({ fence: fenceOf(fencing(), {}, []) }))).kind, "addFinalizer");
  });
  test("deleted: finalize (whatever the phase); without our finalizer: done", () => {
    for (const status of [undefined, fencing(), releasing(), { ...releasing(), phase: "Released" as const }]) {
      const f = fenceOf(status);
      f.metadata!.deletionTimestamp = at(999).toJSDate();
      assert.equal(nextStep(observe(sim({ fence: f }))).kind, "finalize");
      f.metadata!.finalizers = [];
      assert.equal(nextStep(observe(sim({ fence: f }))).kind, "done");
    }
  });
});

describe("unfencing", () => {
  test("spec.unfence on any started phase: startUnfence; Unfenced is final", () => {
    for (const phase of ["Pending", "Fencing", "Fenced", "Releasing", "Released", "Failed"] as const)
      assert.deepEqual(stepFor({ ...releasing(), phase }, { spec: { unfence: true } }), {
        kind: "startUnfence",
        reason: "UnfenceRequested",
      });
    assert.equal(stepFor({ ...releasing(), phase: "Unfenced" }, { spec: { unfence: true } }).kind, "done");
  });
  test("after PowerOffConfirmed with action off: power on through the confirming level's agents, then unmarkNode", () => {
    const s = sim({ fence: fenceOf({ ...releasing(), phase: "Released" }, { unfence: true }) });
    assert.deepEqual(describeSteps(walk(s)), [
      "startUnfence UnfenceRequested",
      "runAgent on L0 ipmi",
      "record Succeeded",
      "unmarkNode UnfenceRequested",
      "done",
    ]);
  });
  test("no power-on without PowerOffConfirmed or with action reboot", () => {
    const manual = { ...releasing(), phase: "Unfencing" as const, evidence: evidenceNow({ method: "ManualConfirmation" }) };
    assert.equal(stepFor(manual).kind, "unmarkNode");
    const reboot = { ...releasing(), phase: "Unfencing" as const, policySnapshot: snapOf(policy("default", { action: "reboot" })) };
    assert.equal(stepFor(reboot).kind, "unmarkNode");
  });
  test("action reboot: powered on once released; unfenceOnReboot unfences when it is back Ready with a new bootID", () => {
    const snap = snapOf(policy("default", { action: "reboot", unfenceOnReboot: true }));
    const s = sim({ fence: fenceOf({ ...releasing(), phase: "Released", policySnapshot: snap }) });
    assert.deepEqual(describeSteps(walk(s)), ["runAgent on L0 ipmi", "record Succeeded", "done"]);
    s.node = node("node-1", { ready: "True", bootID: "boot-2", heartbeat: s.now });
    assert.deepEqual(describeSteps(walk(s)), ["startUnfence Rebooted", "unmarkNode Rebooted", "done"]);
  });
});

describe("storage fencing (issue 11 item 4): StorageFenced releases volumes only", () => {
  const netfence = (name = "netfence", classes = "san") => {
    const a = agent(name, "csiAddonsNetworkFence");
    a.spec.parameters = { networkFenceClassName: "ceph", storageClasses: classes };
    return a;
  };
  const agents = () => agentMap(agent("ipmi"), agent("admin", "manual"), netfence());
  const twoLevels = (release = {}) => [
    policy("default", { escalation: [{ agents: [{ name: "ipmi" }] }, { agents: [{ name: "netfence" }] }], release }),
  ];
  const lockedClaim = (name: string, holder: V1Pod, token: number, storageClassName: string) => {
    const c = pvc(name, ["ReadWriteOnce"]);
    c.metadata!.uid = `uid-pvc-${name}`;
    c.spec!.storageClassName = storageClassName;
    c.spec!.volumeName = `pv-${name}`;
    c.metadata!.annotations = {
      [LOCK_ANNOTATION]: formatLock({ v: 1, token, holder: { pod: holder.metadata!.name!, uid: holder.metadata!.uid! }, time: stamp(T0) }),
    };
    return c;
  };
  /** A Deployment-like pod (RWO on the SAN), a StatefulSet pod (SAN) and a pod on another storage class, all on node-1. */
  function world(o: { release?: object; agentResult?: Sim["agentResult"] } = {}) {
    const app = pod("app", { claims: ["app-data"] });
    const db0 = stsPod("db-0", { claims: ["data-db-0"] });
    const nfs = pod("nfs-user", { claims: ["nfs-data"] });
    const vaFor = (claim: string) => {
      const v = volumeAttachment(`va-${claim}`, "node-1");
      v.spec.source.persistentVolumeName = `pv-${claim}`;
      return v;
    };
    return sim({
      fence: fenceOf(undefined, {}, []),
      agents: agents(),
      policies: twoLevels(o.release),
      pods: [app, db0, nfs],
      pvcs: pvcMap(lockedClaim("app-data", app, 7, "san"), lockedClaim("data-db-0", db0, 3, "san"), lockedClaim("nfs-data", nfs, 2, "nfs")),
      vas: [vaFor("app-data"), vaFor("data-db-0"), vaFor("nfs-data")],
      agentResult: o.agentResult ?? ((name) => (name === "ipmi" ? "Failed" : "Succeeded")),
    });
  }

  test("level 1 (power) fails, level 2 (NetworkFence) fences: StorageFenced; SAN claim locks and VolumeAttachments released; no pod, no taint, nothing of another StorageClass", () => {
    const s = world({ release: { forceDeletePods: true, outOfServiceTaint: true, deleteVolumeAttachments: true } });
    const steps = describeSteps(walk(s));
    assert.ok(steps.includes("escalate 1"), steps.join(" → "));
    assert.ok(steps.includes("confirmed StorageFenced"), steps.join(" → "));
    assert.deepEqual(
      steps.filter((x) => x.startsWith("release ")),
      ["release ClaimLock app-data + ClaimLock data-db-0", "release VA va-app-data + VA va-data-db-0"],
    );
    assert.equal(steps.at(-1), "done");
    assert.equal(s.fence.status?.phase, "Released");
    assert.deepEqual(s.fence.status?.evidence?.storageClasses, ["san"]);
    assert.equal(s.pods.length, 3, "no pod force-deleted");
    assert.ok(!hasTaint(s.node, OUT_OF_SERVICE_TAINT), "no out-of-service taint");
    const nfs = parseLock(s.pvcs.get("default/nfs-data")!);
    assert.equal(nfs.ok && nfs.lock?.holder?.pod, "nfs-user", "a claim of another StorageClass keeps its lock");
    assert.deepEqual(
      s.vas.map((v) => v.metadata?.name),
      ["va-nfs-data"],
    );
  });

  test("a level proves what its agents prove together: power + storage is PowerOffConfirmed, manual + storage ManualConfirmation", () => {
    const confirmedWith = (names: string[]) => {
      const s = sim({
        fence: fenceOf(undefined, {}, []),
        agents: agents(),
        policies: [policy("default", { escalation: [{ agents: names.map((name) => ({ name })) }] })],
      });
      s.fence.metadata!.annotations = { [CONFIRMED_OFF_ANNOTATION]: "node-1" };
      const step = walk(s).find((x) => x.kind === "confirmed");
      return step?.kind === "confirmed" ? step.evidence.method : "none";
    };
    assert.equal(confirmedWith(["ipmi", "netfence"]), "PowerOffConfirmed");
    assert.equal(confirmedWith(["admin", "netfence"]), "ManualConfirmation");
    assert.equal(confirmedWith(["netfence"]), "StorageFenced");
  });

  test("issue 26 item 5: a heartbeat does not void StorageFenced (storage cut, not power off): volumes still released, never a pod; a lifted storage fence voids it", () => {
    const status = (
      evidence: Partial<NodeFenceStatusEvidence>,
      attempts = [attempt("ipmi", "Failed"), attempt("netfence", "Succeeded", 1)],
    ) => releasing({ policySnapshot: snapOf(twoLevels()[0]!), currentLevel: 1, attempts, evidence: evidenceNow(evidence) });
    const storage = { method: "StorageFenced" as const, agents: ["netfence"], storageClasses: ["san"] };
    // The kubelet renews, posts Ready, even reports a new boot: the storage fence is as it was.
    for (const change of [
      (s: Sim) => heartbeat(s),
      (s: Sim) => heartbeat(s, true),
      (s: Sim) => (s.node!.status!.nodeInfo!.bootID = "boot-2"),
    ]) {
      const s = world({ release: { forceDeletePods: true, outOfServiceTaint: true } });
      s.fence = fenceOf(status(storage));
      change(s);
      const steps = describeSteps(walk(s));
      assert.deepEqual(
        steps.filter((x) => x.startsWith("release ")),
        ["release ClaimLock app-data + ClaimLock data-db-0", "release VA va-app-data + VA va-data-db-0"],
        steps.join(" → "),
      );
      assert.equal(s.fence.status?.phase, "Released");
      assert.equal(s.pods.length, 3, "no pod force-deleted");
      assert.ok(!hasTaint(s.node, OUT_OF_SERVICE_TAINT));
      // And stays there: no re-entry, no new attempt while the kubelet goes on heartbeating.
      const n = s.fence.status?.attempts?.length;
      s.now = s.now.plus({ seconds: 30 });
      heartbeat(s, true);
      assert.deepEqual(describeSteps(walk(s)), ["done"]);
      assert.equal(s.fence.status?.attempts?.length, n);
    }
    // Power evidence under the same heartbeat is void (the fingerprint rule, unchanged).
    const p = world();
    p.fence = fenceOf(releasing());
    heartbeat(p);
    assert.equal(nextStep(observe(p)).kind, "reenter");
    // A storage fence no longer held (an "on" succeeded since) voids StorageFenced: nothing more is released on it.
    const lifted = world();
    lifted.fence = fenceOf(
      status(storage, [attempt("ipmi", "Failed"), attempt("netfence", "Succeeded", 1), attempt("netfence", "Succeeded", 1, "on")]),
    );
    assert.equal(nextStep(observe(lifted)).kind, "reenter");
  });

  test("issue 26 item 5: a manual storage-only fence of a node whose kubelet is alive reaches Released and stays (no loop of attempts, re-entries or Events)", () => {
    const s = sim({
      fence: fenceOf(undefined, { origin: "Manual" }, []),
      node: node("node-1", { ready: "True", heartbeat: at(999) }),
      lease: lease("node-1", at(999)),
      agents: agents(),
      policies: [policy("default", { escalation: [{ agents: [{ name: "netfence" }] }] })],
    });
    const steps: string[] = [];
    // The kubelet renews its Lease and posts Ready at every step, as a live one does within seconds.
    for (let i = 0; i < 60; i++) {
      heartbeat(s, true);
      const step = nextStep(observe(s));
      steps.push(describeStep(step));
      apply(s, step);
      if (step.kind === "wait") s.now = s.now.plus({ seconds: 15 });
    }
    const trace = steps.join(" → ");
    assert.ok(!steps.includes("reenter"), trace);
    assert.equal(steps.filter((x) => x === "confirmed StorageFenced").length, 1, trace);
    assert.equal(s.fence.status?.attempts?.length, 1, trace);
    assert.equal(s.fence.status?.phase, "Released", trace);
    assert.deepEqual(steps.slice(-5), ["done", "done", "done", "done", "done"], trace);
  });

  test("issue 26 item 3: what an attempt proves is what its agent was when it ran — a storage fence deleted or re-typed to ipmi before the confirmation never yields PowerOffConfirmed", () => {
    for (const change of ["deleted", "ipmi", "manual"] as const) {
      // The NetworkFence is being made when the administrator deletes or re-types the FenceAgent.
      const s = world({
        release: { forceDeletePods: true, outOfServiceTaint: true },
        agentResult: (name) => (name === "ipmi" ? "Failed" : "hang"),
      });
      const before = describeSteps(walk(s));
      assert.equal(before.at(-1), "wait AgentRunning", before.join(" → "));
      if (change === "deleted") s.agents.delete("netfence");
      else s.agents.set("netfence", agent("netfence", change));
      for (const [k, v] of s.ops) if (v.state === "running") s.ops.set(k, { state: "done", outcome: "Succeeded", message: "fenced" });
      const steps = describeSteps(walk(s));
      assert.ok(steps.includes("confirmed StorageFenced"), `${change}: ${steps.join(" → ")}`);
      assert.deepEqual(s.fence.status?.evidence?.storageClasses, ["san"], "the StorageClasses recorded when it ran");
      assert.equal(s.pods.length, 3, `${change}: no pod force-deleted`);
      assert.ok(!hasTaint(s.node, OUT_OF_SERVICE_TAINT), `${change}: no out-of-service taint`);
      assert.ok(!(s.fence.status?.releases ?? []).some((r) => r.kind === "Pod" || r.kind === "Taint"));
      // Still held: the recorded type says it is a storage fence, whatever the FenceAgent says now.
      assert.deepEqual(storageFencesHeld(observe(s)), ["netfence"]);
    }
    // A power agent re-typed to a storage fence after it powered the machine off still proves the power-off.
    const p = world({ agentResult: (name) => (name === "ipmi" ? "hang" : "Succeeded") });
    walk(p);
    p.agents.set("ipmi", netfence("ipmi"));
    for (const [k] of p.ops) p.ops.set(k, { state: "done", outcome: "Succeeded", message: "off" });
    assert.ok(describeSteps(walk(p)).includes("confirmed PowerOffConfirmed"));
  });

  test('issue 26 item 3: an unfence never runs the "on" of a storage fence re-typed to a power agent (it would power the machine on)', () => {
    // StorageFenced, then netfence re-typed to ipmi: held still (recorded type), but not lifted through ipmi. The unfence
    // waits and says why (issue 26 item 4: lifted or reported held), until the type is back or the fence is abandoned.
    const s = world();
    walk(s);
    s.agents.set("netfence", agent("netfence", "ipmi"));
    s.fence.spec.unfence = true;
    assert.deepEqual(describeSteps(walk(s)), ["startUnfence UnfenceRequested", "wait StorageFenceNotLifted"]);
    const w = nextStep(observe(s));
    assert.match(w.kind === "wait" ? w.message : "", /netfence is of type ipmi now, not a storage fence/);
    s.fence.metadata!.annotations = { [ABANDON_STORAGE_FENCES_ANNOTATION]: "node-1" };
    assert.deepEqual(describeSteps(walk(s)), ["unmarkNode UnfenceRequested", "done"]);
    assert.ok(!(s.fence.status?.attempts ?? []).some((a) => a.operation === "on"), "no on ran through the re-typed agent");
    // PowerOffConfirmed by [ipmi + netfence], netfence re-typed to ipmi: the power-on runs through ipmi only.
    const m = world({ agentResult: () => "Succeeded" });
    m.policies = [policy("default", { escalation: [{ agents: [{ name: "ipmi" }, { name: "netfence" }] }] })];
    walk(m);
    assert.equal(m.fence.status?.evidence?.method, "PowerOffConfirmed");
    m.agents.set("netfence", agent("netfence", "ipmi"));
    m.fence.spec.unfence = true;
    // The storage fence comes first: held (reported) until its agent is a storage fence again, or it is abandoned.
    assert.deepEqual(describeSteps(walk(m)), ["startUnfence UnfenceRequested", "wait StorageFenceNotLifted"]);
    m.fence.metadata!.annotations = { [ABANDON_STORAGE_FENCES_ANNOTATION]: "node-1" };
    const steps = describeSteps(walk(m));
    assert.deepEqual(
      steps.filter((x) => x.startsWith("runAgent")),
      ["runAgent on L0 ipmi"],
      steps.join(" → "),
    );
  });

  test("issue 26 item 3: an attempt without a recorded type (an older version's) never counts as a power agent", () => {
    const legacy = (name: string, level = 0): NodeFenceStatusAttempts => legacyAttempt(name, "Succeeded", level);
    for (const agents of [agentMap(agent("netfence", "ipmi")), agentMap(agent("netfence", "manual")), agentMap()]) {
      const s = world({ release: { forceDeletePods: true, outOfServiceTaint: true } });
      s.agents = agents;
      s.policies = [policy("default", { escalation: [{ agents: [{ name: "netfence" }] }] })];
      s.fence = fenceOf(fencing({ policySnapshot: snapOf(s.policies[0]!), attempts: [legacy("netfence")] }));
      const step = nextStep(observe(s));
      assert.equal(step.kind === "confirmed" && step.evidence.method, "StorageFenced", describeSteps([step]).join());
      assert.deepEqual(step.kind === "confirmed" && step.evidence.storageClasses, [], "no StorageClass: nothing is released on it");
      // Nothing is released on it (what follows, if anything, is a new round that runs the agent as it is now).
      const steps = describeSteps(walk(s));
      const before = steps.slice(0, steps.findIndex((x) => x.startsWith("runAgent")) >>> 0);
      assert.ok(!before.some((x) => x.startsWith("release ")), steps.join(" → "));
    }
    // Beside a recorded power-off it adds nothing and takes nothing away.
    const s = world();
    s.policies = [policy("default", { escalation: [{ agents: [{ name: "ipmi" }, { name: "netfence" }] }] })];
    s.fence = fenceOf(fencing({ policySnapshot: snapOf(s.policies[0]!), attempts: [attempt("ipmi", "Succeeded"), legacy("netfence")] }));
    const step = nextStep(observe(s));
    assert.equal(step.kind === "confirmed" && step.evidence.method, "PowerOffConfirmed");
  });

  test("a node back without a reboot keeps its storage fence: an automatic fence waits StorageFenceHeld, never cancels", () => {
    const s = world();
    walk(s);
    assert.equal(s.fence.status?.phase, "Released");
    // The partition heals: the same boot heartbeats again.
    heartbeat(s, true);
    assert.deepEqual(describeSteps(walk(s)), ["done"], "Released stays Released: no unfence on a heartbeat");
    // Mid-release instead: re-entry, then the hold (without it: cancel, the marks off and the fence orphaned).
    const r = world();
    r.fence = fenceOf(
      fencing({
        policySnapshot: snapOf(twoLevels()[0]!),
        currentLevel: 1,
        round: 1,
        attempts: [attempt("ipmi", "Failed"), attempt("netfence", "Succeeded", 1)],
      }),
    );
    heartbeat(r, true);
    const step = nextStep(observe(r));
    assert.equal(step.kind === "wait" && step.reason, "StorageFenceHeld", describeSteps([step]).join());
    // Failed rounds hold it the same way.
    r.fence.status!.phase = "Failed";
    const failed = nextStep(observe(r));
    assert.equal(failed.kind === "wait" && failed.reason, "StorageFenceHeld");
  });

  test("issue 26 item 6: a new bootID (the node's kubelet can write one) never lifts a storage fence: Released stays, Fencing waits StorageFenceHeld naming the two ways out", () => {
    const s = world();
    walk(s);
    s.node = node("node-1", { ready: "True", bootID: "boot-2", heartbeat: s.now });
    s.lease = lease("node-1", s.now);
    assert.deepEqual(describeSteps(walk(s)), ["done"]);
    assert.equal(s.fence.status?.phase, "Released");
    assert.deepEqual(storageFencesHeld(observe(s)), ["netfence"]);
    assert.ok(!(s.fence.status?.attempts ?? []).some((a) => a.operation === "on"), "no unfence of the storage");
    // While it holds, Fencing or Failed with a rebooted node waits, for as long as it takes.
    for (const phase of ["Fencing", "Failed"] as const) {
      const r = world();
      r.fence = fenceOf({
        ...fencing({ policySnapshot: snapOf(twoLevels()[0]!), currentLevel: 1, attempts: [attempt("netfence", "Succeeded", 1)] }),
        phase,
      });
      r.node = node("node-1", { ready: "True", bootID: "boot-2", heartbeat: r.now });
      r.lease = lease("node-1", r.now);
      const step = nextStep(observe(r));
      assert.equal(step.kind, "wait", describeSteps([step]).join());
      assert.equal(step.kind === "wait" && step.reason, "StorageFenceHeld");
      const message = step.kind === "wait" ? step.message : "";
      assert.match(message, /spec\.unfence/);
      assert.match(message, /confirms the machine off/);
      assert.match(message, /new bootID does not lift it/);
    }
  });

  test("issue 26 item 6: a storage fence of an earlier level comes down once a later level confirmed the machine off and its pods were released", () => {
    const s = world({ agentResult: (name) => (name === "netfence" ? "Succeeded" : "Succeeded") });
    s.policies = [policy("default", { escalation: [{ agents: [{ name: "netfence" }] }, { agents: [{ name: "ipmi" }] }] })];
    // Round 1: storage fenced (level 1), released its volumes; the node heartbeats (a new boot): re-entry is not what
    // lifts it. Round 2 (the node silent again): level 1 fails this time, level 2 powers it off.
    s.fence = fenceOf(
      fencing({
        policySnapshot: snapOf(s.policies[0]!),
        round: 1,
        attempts: [
          { ...attempt("netfence", "Succeeded"), ...attemptFacts(netfence()) },
          { ...attempt("netfence", "Failed", 0, "off", stamp(at(990)), 1), ...attemptFacts(netfence()) },
        ],
      }),
    );
    const before = describeSteps(walk(s));
    assert.ok(before.includes("confirmed PowerOffConfirmed"), before.join(" → "));
    // Released on the power-off, then the NetworkFence is lifted; the node stays fenced (tainted) until unfenced.
    assert.deepEqual(before.slice(-4), ["released", "runAgent on L0 netfence", "record Succeeded", "done"], before.join(" → "));
    assert.deepEqual(storageFencesHeld(observe(s)), []);
    assert.equal(s.fence.status?.phase, "Released");
    assert.ok(hasTaint(s.node, FENCED_TAINT));
    // Without the power-off (StorageFenced in Released) nothing comes down: covered above.
  });

  test("an administrator's unfence lifts every storage fence held, from any level, and powers nothing on that was not powered off", () => {
    const s = world();
    walk(s);
    s.fence.spec.unfence = true;
    assert.deepEqual(describeSteps(walk(s)), [
      "startUnfence UnfenceRequested",
      "runAgent on L1 netfence",
      "record Succeeded",
      "unmarkNode UnfenceRequested",
      "done",
    ]);
    // A storage fence put up by a level that failed, the power-off confirmed by the next with a storage fence of its
    // own: the first comes down once the machine is confirmed off and released (issue 26 item 6); the confirming
    // level's stays with it until the unfence, which undoes both it and the power-off.
    const mixed = sim({
      fence: fenceOf(undefined, {}, []),
      agents: agentMap(agent("ipmi"), agent("pdu"), netfence(), netfence("netfence-b")),
      policies: [
        policy("default", {
          escalation: [{ agents: [{ name: "netfence" }, { name: "ipmi" }] }, { agents: [{ name: "pdu" }, { name: "netfence-b" }] }],
        }),
      ],
      agentResult: (name) => (name === "ipmi" ? "Failed" : "Succeeded"),
    });
    const fenced = describeSteps(walk(mixed));
    assert.equal(mixed.fence.status?.evidence?.method, "PowerOffConfirmed");
    assert.deepEqual(fenced.slice(-4), ["released", "runAgent on L0 netfence", "record Succeeded", "done"], fenced.join(" → "));
    assert.deepEqual(storageFencesHeld(observe(mixed)), ["netfence-b"]);
    mixed.fence.spec.unfence = true;
    const steps = describeSteps(walk(mixed));
    assert.ok(steps.includes("runAgent on L1 netfence-b"), steps.join(" → "));
    assert.ok(!steps.some((x) => /^runAgent on L\d netfence$/.test(x)), steps.join(" → "));
    assert.ok(steps.includes("runAgent on L1 pdu"), steps.join(" → "));
    assert.deepEqual(storageFencesHeld(observe(mixed)), []);
  });

  test("fencedSince (claim grants, force-delete admission): a storage fence proves only the claims of its StorageClasses, never a pod", () => {
    const f = fenceOf({
      ...releasing({ evidence: evidenceNow({ method: "StorageFenced", storageClasses: ["san"] }) }),
      phase: "Released",
    });
    const n = partitionedNode();
    const san = pvc("a", ["ReadWriteOnce"]);
    san.spec!.storageClassName = "san";
    const nfs = pvc("b", ["ReadWriteOnce"]);
    nfs.spec!.storageClassName = "nfs";
    const l = lease("node-1", T0);
    assert.ok(fencedSince(f, n, l, san) instanceof Date);
    assert.equal(fencedSince(f, n, l, nfs), undefined);
    assert.equal(fencedSince(f, n, l), undefined, "without a claim (a force delete) a storage fence proves nothing");
    const power = fenceOf({ ...releasing(), phase: "Released" });
    assert.ok(fencedSince(power, n, l) instanceof Date);
  });

  test("fencedSince: the fresh Node and Lease must match the evidence's heartbeat fingerprint exactly, as every release does", () => {
    const l = lease("node-1", T0);
    const n = partitionedNode();
    for (const phase of ["Fenced", "Releasing", "Released"] as const)
      assert.ok(fencedSince(fenceOf({ ...releasing(), phase }), n, l) instanceof Date, phase);
    const f = fenceOf({ ...releasing(), phase: "Released" });
    // The machine came back for a moment: one Lease renewal, still Ready=Unknown (the node controller lags).
    assert.equal(fencedSince(f, n, lease("node-1", at(1000))), undefined, "the Lease was renewed since the evidence");
    assert.equal(
      fencedSince(f, node("node-1", { ready: "Unknown", bootID: "boot-1", heartbeat: at(1000) }), l),
      undefined,
      "Ready heartbeat",
    );
    assert.equal(fencedSince(f, partitionedNode({ bootID: "boot-2" }), l), undefined, "booted again");
    const recreated = partitionedNode();
    recreated.metadata!.uid = "uid-other";
    assert.equal(fencedSince(f, recreated, l), undefined, "the Node was re-created");
    assert.equal(fencedSince(f, undefined, undefined), undefined, "the Node (and its Lease) deleted after the evidence");
    assert.equal(fencedSince(f, n, undefined), undefined, "the Lease deleted after the evidence");
    // Evidence of an earlier round, or none recorded: nothing to compare, no proof.
    assert.equal(fencedSince(fenceOf({ ...releasing(), phase: "Released", round: 1 }), n, l), undefined, "stale round");
    assert.equal(
      fencedSince(fenceOf({ ...releasing({ evidence: evidenceNow({ heartbeat: undefined }) }), phase: "Released" }), n, l),
      undefined,
    );
    // Confirmed while the node still heartbeat: no proof until the release began (after the settle wait).
    const loud = evidenceNow({ heartbeat: { ...heartbeatOf(n, l), silent: false } });
    assert.equal(fencedSince(fenceOf({ ...releasing({ evidence: loud }), phase: "Fenced" }), n, l), undefined, "settle wait");
    assert.ok(fencedSince(fenceOf({ ...releasing({ evidence: loud }), phase: "Releasing" }), n, l) instanceof Date);
  });
});

// ---- The safety invariant, as properties --------------------------------------------------------------------------

const PHASES: (NodeFenceStatus["phase"] | undefined)[] = [
  undefined,
  "Pending",
  "Fencing",
  "Fenced",
  "Releasing",
  "Released",
  "Failed",
  "Unfencing",
  "Unfenced",
];
const EVIDENCE: (NodeFenceStatusEvidence | undefined)[] = [
  undefined,
  evidenceNow(),
  evidenceNow({ method: "ManualConfirmation" }),
  evidenceNow({ method: "StorageFenced", agents: ["netfence"], storageClasses: ["san"] }),
  evidenceNow({ round: 1 }),
  evidenceNow({ heartbeat: { ...evidenceNow().heartbeat, leaseRenewTime: stamp(at(-5)) } }),
  evidenceNow({ heartbeat: { ...evidenceNow().heartbeat, silent: false }, time: stamp(at(999)) }),
  { ...evidenceNow(), heartbeat: undefined },
];
const ATTEMPTS: NodeFenceStatusAttempts[][] = [
  [],
  [attempt("ipmi", "InProgress")],
  [attempt("ipmi", "Succeeded")],
  [attempt("ipmi", "Failed")],
  [attempt("ipmi", "Succeeded", 0, "off", stamp(at(990)), 1)],
  [attempt("admin", "InProgress")],
  [attempt("ipmi", "TimedOut"), attempt("pdu", "Succeeded", 1)],
  // Written by an older version (no agent type): never a power-off.
  [legacyAttempt("ipmi", "Succeeded")],
];
/** [node, lease]: partitioned as at the evidence; heartbeating; rebooted and silent; deleted; re-created. */
const WORLDS: (() => [V1Node | undefined, V1Lease | undefined])[] = [
  () => [partitionedNode(), lease("node-1", T0)],
  () => [node("node-1", { ready: "True", heartbeat: at(999) }), lease("node-1", at(999))],
  () => [partitionedNode({ bootID: "boot-2" }), lease("node-1", T0)],
  () => [undefined, undefined],
  () => {
    const n = partitionedNode();
    n.metadata!.uid = "uid-recreated";
    return [n, lease("node-1", T0)];
  },
];
const POLICIES: FencingPolicy[][] = [
  [policy("default", { escalation: [{ agents: [{ name: "ipmi" }] }, { agents: [{ name: "pdu" }] }] })],
  [policy("default", { release: { forceDeletePods: false, outOfServiceTaint: true } })],
  [policy("default", { action: "reboot", unfenceOnReboot: true, escalation: [{ agents: [{ name: "admin" }] }] })],
  [],
];
const taintRec = (action: string) => ({ kind: "Taint" as const, name: OUT_OF_SERVICE_TAINT, action, time: stamp(at(30)) });
const RELEASES: NonNullable<NodeFenceStatus["releases"]>[] = [
  [],
  [taintRec("Added")],
  [{ kind: "Pod", namespace: "default", name: "db-1", uid: "uid-default-db-1", action: "ForceDeleted", time: stamp(at(30)) }],
];
const PODS: V1Pod[][] = [
  [stsPod("db-0", { priority: 5 }), stsPod("db-1", { priority: 50 }), pod("web", { deleting: at(900) }), stsPod("far", { node: "node-2" })],
  [],
];

/** Evidence must come from this round's successful attempts of the whole level. */
function checkConfirmed(o: FenceObservation, step: Step, where: string): void {
  if (step.kind !== "confirmed") return;
  const st = o.fence.status ?? {};
  assert.equal(st.phase, "Fencing", `confirmed from phase ${st.phase}: ${where}`);
  const ev = step.evidence;
  const level = st.currentLevel ?? 0;
  const round = st.round ?? 0;
  assert.equal(ev.round, round, `evidence of another round: ${where}`);
  const wanted = st.policySnapshot?.escalation[level]?.agents ?? [];
  assert.deepEqual(ev.agents, wanted, `evidence names other agents than the level's: ${where}`);
  const types: (string | undefined)[] = [];
  for (const name of wanted) {
    const last = (st.attempts ?? [])
      .filter((a) => (a.round ?? 0) === round && a.level === level && a.agent === name && a.operation === "off")
      .at(-1);
    assert.equal(last?.outcome, "Succeeded", `${ev.method} although ${name} did not succeed this round: ${where}`);
    types.push(last?.agentType);
  }
  // What the attempts recorded when they started decides, never the FenceAgents as they are now.
  if (ev.method === "PowerOffConfirmed")
    assert.ok(
      types.some((t) => t !== undefined && t !== "manual" && t !== "csiAddonsNetworkFence"),
      `PowerOffConfirmed without an attempt recorded as a power agent's: ${where}`,
    );
  assert.deepEqual(
    { ...ev.heartbeat, silent: undefined },
    { ...heartbeatOf(o.node, o.lease), silent: undefined },
    `evidence records another heartbeat than observed: ${where}`,
  );
}

/** Checks one step against the invariant; returns whether it was a release (or the fenced taint). */
function checkStep(o: FenceObservation, step: Step, where: string): boolean {
  checkConfirmed(o, step, where);
  if (o.fence.spec.origin === "Automatic" && step.kind === "runAgent" && step.operation === "off") {
    const h = o.node && o.node.status?.conditions?.find((c) => c.type === "Ready")?.status;
    assert.ok(h === undefined || h === "Unknown", `an automatic power-off of a node that is not partitioned: ${where}`);
  }
  if (step.kind !== "release" && step.kind !== "markNode") return false;
  const st = o.fence.status ?? {};
  assert.ok(st.phase === "Releasing" || (step.kind === "markNode" && st.phase === "Fenced"), `release from phase ${st.phase}: ${where}`);
  const ev = st.evidence;
  assert.ok(ev?.method && ev.heartbeat, `release without evidence: ${where}`);
  assert.equal(ev.round ?? 0, st.round ?? 0, `release on evidence of another round: ${where}`);
  if (ev.method === "StorageFenced") {
    // Storage cut, not power off: a heartbeat does not void it (docs/safety.md §3), a lifted storage fence does.
    const held = storageFencesHeld(o);
    const legacyOnly = (n: string) => {
      const offs = (st.attempts ?? []).filter((a) => a.agent === n && a.operation === "off" && a.outcome === "Succeeded");
      return offs.length > 0 && offs.every((a) => a.agentType === undefined && o.agents.get(n)?.spec.type !== "csiAddonsNetworkFence");
    };
    assert.ok(
      ev.agents?.length && ev.agents.every((n) => held.includes(n) || legacyOnly(n)),
      `a release on StorageFenced whose storage fence is not held: ${where}`,
    );
  } else {
    assert.deepEqual(
      heartbeatChanges(ev.heartbeat, heartbeatOf(o.node, o.lease)),
      [],
      `release although the node heartbeat since: ${where}`,
    );
    if (!ev.heartbeat.silent) assert.ok(o.now.diff(at(999)).as("seconds") >= 15, `release before the silence was proven: ${where}`);
  }
  assert.ok(!o.fence.spec.unfence, `release although an unfence was asked: ${where}`);
  const items = step.kind === "release" ? step.items : [];
  if (step.kind === "release") {
    assert.ok(items.length > 0 && items.length <= MAX_RELEASE_BATCH, `a release of ${items.length} items: ${where}`);
    assert.equal(new Set(items.map((i) => i.kind)).size, 1, `a release step mixing kinds: ${where}`);
  }
  for (const item of items) {
    if (ev.method === "StorageFenced")
      assert.ok(item.kind === "ClaimLock" || item.kind === "VolumeAttachment", `a ${item.kind} released on StorageFenced: ${where}`);
    if (item.kind !== "Pod") continue;
    const pod = item.pod;
    assert.equal(pod.spec?.nodeName, o.fence.spec.nodeName, `a pod of another node: ${where}`);
    assert.ok(isGuarded(pod, st.policySnapshot?.guardedPods, o.pvcs).guarded, `an unguarded pod: ${where}`);
    assert.ok(!(st.releases ?? []).some((r) => r.kind === "Pod" && r.uid === pod.metadata?.uid), `a pod released twice: ${where}`);
  }
  return step.kind === "release";
}

describe("the safety invariant: nothing is released without this round's evidence and an unchanged heartbeat", () => {
  test("exhaustively over phases × evidence × attempts × world × origin × unfence × policy × releases × pods", () => {
    let combos = 0;
    let releases = 0;
    const kinds = new Map<string, number>();
    for (const phase of PHASES)
      for (const [ei, evidence] of EVIDENCE.entries())
        for (const [ai, attempts] of ATTEMPTS.entries())
          for (const [wi, world] of WORLDS.entries())
            for (const origin of ["Automatic", "Manual"] as const)
              for (const unfence of [false, true])
                for (const [pi, policies] of POLICIES.entries())
                  for (const [ri, recorded] of RELEASES.entries())
                    for (const [qi, pods] of PODS.entries()) {
                      const round = ai === 4 || ei === 4 ? 1 : 0;
                      const snap = policies[0] ? snapOf(policies[0]) : SNAPSHOT;
                      const status: NodeFenceStatus | undefined =
                        phase === undefined && ei === 0 && ai === 0 && ri === 0
                          ? undefined
                          : {
                              ...fencing({ policySnapshot: snap, round, currentLevel: ai === 6 ? 1 : 0 }),
                              phase,
                              fencedTime: stamp(at(995)),
                              evidence,
                              attempts,
                              releases: recorded,
                            };
                      const [n, l] = world();
                      const f = fenceOf(status, { unfence, origin });
                      if (ai === 5) f.metadata!.annotations = { [CONFIRMED_OFF_ANNOTATION]: "node-1" };
                      const vas = qi === 0 ? [volumeAttachment("va-1", "node-1"), volumeAttachment("va-2", "node-2")] : [];
                      // nextStep never changes its input: no copies needed here (this loop runs ~100k times).
                      const o: FenceObservation = {
                        ...observe(sim({ policies })),
                        fence: f,
                        node: n,
                        lease: l,
                        pods,
                        volumeAttachments: vas,
                      };
                      const step = nextStep(o);
                      combos++;
                      kinds.set(step.kind, (kinds.get(step.kind) ?? 0) + 1);
                      if (
                        checkStep(
                          o,
                          step,
                          `phase=${phase} evidence=${ei} attempts=${ai} world=${wi} ${origin} unfence=${unfence} policy=${pi} releases=${ri} pods=${qi}`,
                        )
                      )
                        releases++;
                    }
    assert.ok(combos > 50_000, `${combos} combinations`);
    assert.ok(releases > 100, `the enumeration must reach releases (got ${releases})`);
    for (const k of [
      "start",
      "wait",
      "begin",
      "cancel",
      "interrupted",
      "runAgent",
      "recordOutcome",
      "escalate",
      "roundFailed",
      "retry",
      "confirmed",
      "reenter",
      "markNode",
      "release",
      "released",
      "startUnfence",
      "unmarkNode",
      "done",
    ] as Kind[])
      assert.ok(kinds.get(k), `the enumeration never produced ${k}`);
  });

  test("random walks: heartbeats, reboots, deletions, re-creations, crashes, hangs, unfence requests — no release after a heartbeat since the confirmation", () => {
    const rand = prng(0x5eed);
    const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rand() * xs.length)]!;
    let releasedTotal = 0;
    let reentered = 0;
    for (let run = 0; run < 500; run++) {
      const levels = pick([
        [{ agents: [{ name: "ipmi" }] }],
        [{ agents: [{ name: "ipmi" }] }, { agents: [{ name: "pdu" }, { name: "pdu-b" }] }],
        [{ agents: [{ name: "ipmi" }] }, { agents: [{ name: "admin" }] }],
        [{ agents: [{ name: "ipmi" }] }, { agents: [{ name: "netfence" }] }],
      ]);
      const s = sim({
        fence: fenceOf(undefined, { origin: pick(["Automatic", "Manual"] as const) }, []),
        policies: [
          policy("default", {
            escalation: levels,
            action: pick(["off", "reboot"] as const),
            release: pick([{}, { outOfServiceTaint: true }, { deleteVolumeAttachments: false }]),
          }),
        ],
        pods: [stsPod("db-0", { priority: 1 }), stsPod("db-1", { priority: 100 }), pod("web"), stsPod("elsewhere", { node: "node-2" })],
        vas: [volumeAttachment("va-1", "node-1"), volumeAttachment("va-2", "node-2")],
        agentResult: () => pick(["Succeeded", "Succeeded", "Succeeded", "Failed", "TimedOut", "crash", "hang"] as const),
      });
      let confirmedBeat: string | undefined;
      const trace: Step[] = [];
      for (let i = 0; i < 120; i++) {
        const r = rand();
        if (r < 0.03) heartbeat(s);
        else if (r < 0.05 && s.node) s.node.status!.nodeInfo!.bootID = `boot-${i}`;
        else if (r < 0.06) [s.node, s.lease] = [undefined, undefined];
        else if (r < 0.07) [s.node, s.lease] = [partitionedNode({ bootID: `boot-r${i}` }), lease("node-1", s.now)];
        else if (r < 0.08) s.fence.spec.unfence = true;
        else if (r < 0.1) s.fence.metadata!.annotations = { [CONFIRMED_OFF_ANNOTATION]: "node-1" };
        else if (r < 0.14)
          for (const [k, v] of s.ops)
            if (v.state === "running") s.ops.set(k, { state: "done", outcome: "Succeeded", message: "" });
            else if (r < 0.16)
              s.ops.clear(); // the operator restarted
            else if (r < 0.2) s.now = s.now.plus({ seconds: 120 });
        const o = observe(s);
        const step = nextStep(o);
        const where = `run ${run} step ${i}: ${describeSteps([...trace, step])
          .slice(-12)
          .join(" → ")}`;
        if (checkStep(o, step, where) && o.fence.status?.evidence?.method !== "StorageFenced") {
          releasedTotal++;
          assert.equal(
            JSON.stringify({ ...heartbeatOf(o.node, o.lease) }),
            confirmedBeat,
            `release after a heartbeat since the confirmation: ${where}`,
          );
        }
        if (step.kind === "confirmed") confirmedBeat = JSON.stringify({ ...heartbeatOf(o.node, o.lease) });
        if (step.kind === "reenter") reentered++;
        trace.push(step);
        apply(s, step);
        if (step.kind === "done" && (s.fence.status?.phase === "Unfenced" || s.fence.status?.phase === "Released")) break;
      }
      const uids = (s.fence.status?.releases ?? []).filter((x) => x.kind === "Pod").map((x) => x.uid);
      assert.equal(new Set(uids).size, uids.length, `a pod was released twice in run ${run}`);
      assert.ok(
        !uids.includes("uid-default-web") && !uids.includes("uid-default-elsewhere"),
        `released an unguarded or foreign pod in run ${run}`,
      );
    }
    assert.ok(releasedTotal > 100, `the walks must reach releases (got ${releasedTotal})`);
    assert.ok(reentered > 10, `the walks must reach re-entries (got ${reentered})`);
  });
});

describe("issue 26 item 5: the status lists are bounded, and every decision is the same after pruning", () => {
  test("a fence failing for days keeps at most the bound of attempts (each round adds one per agent), and counts the dropped", () => {
    for (const bound of [undefined, STATUS_BOUND]) {
      const s = sim({ fence: fenceOf(undefined, { origin: "Manual" }, []), agentResult: () => "Failed", bound });
      for (let round = 0; round < 100; round++) {
        walk(s);
        s.now = s.now.plus({ seconds: RETRY_MAX_SECONDS });
      }
      const st = s.fence.status!;
      assert.equal(st.phase, "Failed");
      const total = (st.attempts?.length ?? 0) + (st.attemptsDropped ?? 0);
      assert.ok(total >= 100, `${total} attempts in 100 rounds`);
      if (!bound) {
        assert.ok((st.attempts?.length ?? 0) >= 100, "without the bound the list grows with every round");
        continue;
      }
      assert.ok((st.attempts?.length ?? 0) <= STATUS_BOUND.limit + 1, `${st.attempts?.length} attempts kept`);
      assert.equal(st.attempts?.[0]?.round, 0, "how it began is kept");
      assert.equal(st.attempts?.at(-1)?.round, st.round, "what it does now is kept");
      // And it still fences: the next round with a working BMC confirms and releases.
      s.agentResult = () => "Succeeded";
      s.now = s.now.plus({ seconds: RETRY_MAX_SECONDS });
      walk(s);
      assert.equal(s.fence.status?.evidence?.method, "PowerOffConfirmed");
    }
  });

  test("random walks in lockstep, one pruned hard (lists past 2 entries): the same steps, the same releases, the same storage fences held", () => {
    const rand = prng(0xb0d);
    const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rand() * xs.length)]!;
    let pruned = 0;
    let steps = 0;
    for (let run = 0; run < 200; run++) {
      const levels = pick([
        [{ agents: [{ name: "ipmi" }] }, { agents: [{ name: "pdu" }, { name: "pdu-b" }] }],
        [{ agents: [{ name: "ipmi" }] }, { agents: [{ name: "netfence" }] }],
        [{ agents: [{ name: "netfence" }] }, { agents: [{ name: "ipmi" }] }],
        [{ agents: [{ name: "netfence" }, { name: "ipmi" }] }, { agents: [{ name: "admin" }] }],
      ]);
      const origin = pick(["Automatic", "Manual"] as const);
      const action = pick(["off", "reboot"] as const);
      const make = (bound?: StatusBound) =>
        sim({
          fence: fenceOf(undefined, { origin }, []),
          policies: [policy("default", { escalation: levels, action, unfenceOnReboot: true, release: { outOfServiceTaint: true } })],
          pods: [stsPod("db-0", { priority: 1 }), stsPod("db-1", { priority: 100 }), pod("web")],
          vas: [volumeAttachment("va-1", "node-1")],
          bound,
        });
      const a = make();
      const b = make({ limit: 2, keepFirst: 0, keepLast: 1 });
      const trace: string[] = [];
      for (let i = 0; i < 150; i++) {
        const r = rand();
        const outcome = pick(["Succeeded", "Failed", "Failed", "TimedOut", "crash", "hang"] as const);
        const vaUid = `uid-va-${run}-${i}`;
        for (const s of [a, b]) {
          s.agentResult = () => outcome;
          if (r < 0.04) heartbeat(s);
          else if (r < 0.06) [s.node, s.lease] = [partitionedNode({ bootID: `boot-r${i}` }), lease("node-1", T0)];
          else if (r < 0.07) s.fence.spec.unfence = true;
          else if (r < 0.1) s.fence.metadata!.annotations = { [CONFIRMED_OFF_ANNOTATION]: "node-1" };
          else if (r < 0.14) {
            for (const [k, v] of s.ops) if (v.state === "running") s.ops.set(k, { state: "done", outcome: "Succeeded", message: "" });
          } else if (r < 0.16) s.ops.clear();
          else if (r < 0.3) s.now = s.now.plus({ seconds: 700 });
          else if (r < 0.35) s.vas.push(volumeAttachment(`va-${i}`, "node-1", vaUid)); // the attach/detach controller re-attaches
        }
        const [sa, sb] = [nextStep(observe(a)), nextStep(observe(b))];
        const norm = (x: Step) => describeStep(x).replace(/^interrupted \d+$/, "interrupted");
        trace.push(norm(sa));
        const where = `run ${run} step ${i}: ${trace.slice(-10).join(" → ")}`;
        assert.equal(norm(sb), norm(sa), `the pruned fence decided otherwise: ${where}`);
        if (sa.kind === "interrupted" && sb.kind === "interrupted")
          assert.deepEqual(
            b.fence.status?.attempts?.[sb.index],
            a.fence.status?.attempts?.[sa.index],
            `another attempt interrupted: ${where}`,
          );
        checkStep(observe(b), sb, where);
        apply(a, sa);
        apply(b, sb);
        steps++;
        const [x, y] = [a.fence.status ?? {}, b.fence.status ?? {}];
        assert.equal(y.phase, x.phase, where);
        assert.deepEqual(storageFencesHeld(observe(b)), storageFencesHeld(observe(a)), `storage fences held differ: ${where}`);
        const podsOf = (st: NodeFenceStatus) => (st.releases ?? []).filter((r) => r.kind !== "VolumeAttachment" && r.kind !== "ClaimLock");
        assert.deepEqual(podsOf(y), podsOf(x), `Pod and Taint records differ: ${where}`);
        assert.equal((y.attempts?.length ?? 0) + (y.attemptsDropped ?? 0), x.attempts?.length ?? 0, `attempts miscounted: ${where}`);
        assert.equal((y.releases?.length ?? 0) + (y.releasesDropped ?? 0), x.releases?.length ?? 0, `releases miscounted: ${where}`);
        if (y.attemptsDropped || y.releasesDropped) pruned++;
        if (sa.kind === "done" && (x.phase === "Unfenced" || x.phase === "Released")) break;
      }
    }
    assert.ok(pruned > 1000, `the walks must prune (pruned in ${pruned} of ${steps} steps)`);
  });
});

describe("storage fences that nothing lifted (issue 26 item 4): lifted before Unfenced or deletion, retried, or reported held", () => {
  const levels = () => [policy("default", { escalation: [{ agents: [{ name: "ipmi" }] }, { agents: [{ name: "netfence" }] }] })];
  /** An automatic fence at level 2, whose NetworkFence "off" is `outcome` (InProgress: running in this process). */
  function inFlight(outcome: Outcome, o: Partial<Sim> = {}): Sim {
    const s = sim({ policies: levels(), ...o });
    s.fence = fenceOf(
      fencing({
        policySnapshot: snapOf(levels()[0]!),
        currentLevel: 1,
        attempts: [attempt("ipmi", "Failed"), attempt("netfence", outcome, 1)],
      }),
    );
    if (outcome === "InProgress") s.ops.set(1, { state: "running" });
    return s;
  }

  test("held: any storage off not followed by a successful on of that agent, whatever its outcome; power agents never", () => {
    for (const outcome of ["InProgress", "Cancelled", "TimedOut", "Interrupted", "Failed", "Succeeded"] as Outcome[]) {
      const s = inFlight(outcome);
      assert.deepEqual(storageFencesToLift(observe(s)), ["netfence"], outcome);
      s.fence.status!.attempts!.push(attempt("netfence", "Failed", 1, "on"));
      assert.deepEqual(storageFencesToLift(observe(s)), ["netfence"], `${outcome}, then a failed lift`);
      s.fence.status!.attempts!.push(attempt("netfence", "Succeeded", 1, "on"));
      assert.deepEqual(storageFencesToLift(observe(s)), [], `${outcome}, then lifted`);
    }
  });

  test("(a) cancel while the NetworkFence off is in flight: the fence is lifted before Unfenced, never left on a healthy node", () => {
    const s = inFlight("InProgress");
    heartbeat(s, true);
    assert.deepEqual(describeSteps(walk(s)), [
      "startUnfence NodeRecovered",
      "runAgent on L1 netfence",
      "record Succeeded",
      "unmarkNode NodeRecovered",
      "done",
    ]);
    assert.equal(s.fence.status?.attempts?.[1]?.outcome, "Cancelled");
    assert.deepEqual(storageFencesToLift(observe(s)), []);
    // A round that failed after a storage fence timed out: the same.
    const f = inFlight("TimedOut");
    f.fence.status!.phase = "Failed";
    heartbeat(f, true);
    assert.deepEqual(describeSteps(walk(f)).slice(0, 3), ["startUnfence NodeRecovered", "runAgent on L1 netfence", "record Succeeded"]);
    assert.equal(f.fence.status?.phase, "Unfenced");
  });

  test("(a) an administrator's unfence lifts a storage fence whose off was cancelled, timed out or failed, not only one that succeeded", () => {
    for (const outcome of ["InProgress", "Cancelled", "TimedOut", "Interrupted", "Failed"] as Outcome[]) {
      const s = inFlight(outcome);
      s.fence.spec.unfence = true;
      const steps = describeSteps(walk(s));
      assert.ok(steps.includes("runAgent on L1 netfence"), `${outcome}: ${steps.join(" → ")}`);
      assert.equal(s.fence.status?.phase, "Unfenced", outcome);
    }
  });

  test("(b) a failed lift is retried with backoff, for as long as it fails, and the wait says so; Unfenced only once lifted", () => {
    let fails = 2;
    const s = inFlight("Succeeded", { agentResult: (_n, op) => (op === "on" && fails-- > 0 ? "Failed" : "Succeeded") });
    s.fence.spec.unfence = true;
    const first = walk(s);
    assert.deepEqual(describeSteps(first), [
      "startUnfence UnfenceRequested",
      "runAgent on L1 netfence",
      "record Failed",
      "wait StorageFenceNotLifted",
    ]);
    const w = first.at(-1)!;
    assert.ok(w.kind === "wait" && w.requeueAfterMs <= 10_000 && w.requeueAfterMs > 8_000, JSON.stringify(w));
    assert.match(
      w.kind === "wait" ? w.message : "",
      /netfence \(NetworkFence stockade-netfence-node-1-[0-9a-f]+\): Failed: agent said no; next try at/,
    );
    assert.match(w.kind === "wait" ? w.message : "", new RegExp(ABANDON_STORAGE_FENCES_ANNOTATION));
    assert.equal(s.fence.status?.phase, "Unfencing");
    // Not before its time; then again, and the next wait is longer.
    assert.deepEqual(describeSteps(walk(s)), ["wait StorageFenceNotLifted"]);
    s.now = s.now.plus({ seconds: 10 });
    const second = walk(s);
    assert.deepEqual(describeSteps(second), ["runAgent on L1 netfence", "record Failed", "wait StorageFenceNotLifted"]);
    const w2 = second.at(-1)!;
    // As long again as it has been failing (from the first try's start to the last one's end), plus the base.
    assert.ok(w2.kind === "wait" && w2.requeueAfterMs >= 20_000 && w2.requeueAfterMs <= 30_000, JSON.stringify(w2));
    assert.deepEqual(describeSteps(walk(s)), ["wait StorageFenceNotLifted"]);
    s.now = s.now.plus({ seconds: 30 });
    assert.deepEqual(describeSteps(walk(s)), ["runAgent on L1 netfence", "record Succeeded", "unmarkNode UnfenceRequested", "done"]);
    assert.equal(s.fence.status?.phase, "Unfenced");
  });

  test("(b) a clock that jumped back does not push the retry out by the jump; an interrupted lift is run again at once", () => {
    const s = inFlight("Succeeded", { agentResult: (_n, op) => (op === "on" ? "Failed" : "Succeeded") });
    s.fence.spec.unfence = true;
    walk(s);
    s.now = s.now.minus({ hours: 5 });
    assert.deepEqual(describeSteps(walk(s)).slice(0, 2), ["runAgent on L1 netfence", "record Failed"]);
    // The operator stopped during a lift: the next one runs it again at once.
    let crashes = 1;
    const r = inFlight("Succeeded", { agentResult: (_n, op) => (op === "on" && crashes-- > 0 ? "crash" : "Succeeded") });
    r.fence.spec.unfence = true;
    assert.deepEqual(describeSteps(walk(r)), [
      "startUnfence UnfenceRequested",
      "runAgent on L1 netfence",
      "interrupted 2",
      "runAgent on L1 netfence",
      "record Succeeded",
      "unmarkNode UnfenceRequested",
      "done",
    ]);
  });

  test("(c) deleting the NodeFence lifts its storage fences before the finalizer goes; while it cannot, the finalizer stays", () => {
    const s = inFlight("Succeeded");
    s.fence.metadata!.deletionTimestamp = stamp(s.now) as unknown as Date;
    assert.deepEqual(describeSteps(walk(s)), ["startUnfence Deleted", "runAgent on L1 netfence", "record Succeeded", "finalize", "done"]);
    // A lift that fails keeps the finalizer, retried.
    const f = inFlight("TimedOut", { agentResult: (_n, op) => (op === "on" ? "Failed" : "Succeeded") });
    f.fence.metadata!.deletionTimestamp = stamp(f.now) as unknown as Date;
    assert.deepEqual(describeSteps(walk(f)), [
      "startUnfence Deleted",
      "runAgent on L1 netfence",
      "record Failed",
      "wait StorageFenceNotLifted",
    ]);
    f.now = f.now.plus({ minutes: 1 });
    assert.deepEqual(describeSteps(walk(f)).slice(0, 1), ["runAgent on L1 netfence"]);
    assert.ok(f.fence.metadata?.finalizers?.includes(FINALIZER));
    // The way out for a node gone for good: abandon the storage fences explicitly; the finalizer goes, they stay.
    f.fence.metadata!.annotations = { [ABANDON_STORAGE_FENCES_ANNOTATION]: "node-1" };
    f.now = f.now.plus({ minutes: 10 });
    assert.deepEqual(describeSteps(walk(f)), ["finalize", "done"]);
    const c = storageFenceCondition(observe(f));
    assert.equal(c?.reason, "Abandoned");
    assert.match(c?.message ?? "", /stay in place/);
    // Another node's name does not abandon this one's.
    const g = inFlight("Succeeded", { agentResult: () => "Failed" });
    g.fence.metadata!.deletionTimestamp = stamp(g.now) as unknown as Date;
    g.fence.metadata!.annotations = { [ABANDON_STORAGE_FENCES_ANNOTATION]: "node-2" };
    assert.equal(describeSteps(walk(g)).at(-1), "wait StorageFenceNotLifted");
  });

  test("an Unfenced NodeFence with a storage fence still up (a lift an older version did not retry) lifts it", () => {
    const s = inFlight("Succeeded");
    s.fence.status!.phase = "Unfenced";
    s.fence.status!.attempts!.push({ ...attempt("netfence", "Failed", 1, "on"), endTime: stamp(at(900)) });
    assert.deepEqual(describeSteps(walk(s)), [
      "startUnfence StorageFenceHeld",
      "runAgent on L1 netfence",
      "record Succeeded",
      "unmarkNode StorageFenceHeld",
      "done",
    ]);
  });

  test("the StorageFenceHeld condition: True while one may be up (naming its NetworkFence), False once lifted, absent when never fenced", () => {
    const s = inFlight("TimedOut");
    const held = storageFenceCondition(observe(s));
    assert.equal(held?.status, "True");
    assert.equal(held?.reason, "Held");
    assert.match(held?.message ?? "", /netfence \(NetworkFence stockade-netfence-node-1-/);
    s.fence.status!.attempts!.push(attempt("netfence", "Succeeded", 1, "on"));
    assert.equal(storageFenceCondition(observe(s)), undefined, "never set: nothing to say");
    s.fence.status!.conditions = [{ type: "StorageFenceHeld", status: "True", reason: "Held", message: "", lastTransitionTime: stamp(T0) }];
    assert.equal(storageFenceCondition(observe(s))?.status, "False");
    assert.equal(storageFenceCondition(observe(sim())), undefined);
  });

  test("a storage FenceAgent deleted while its fence is up: still known from what it left, reported held, lifted once an agent of that name exists again", () => {
    const s = inFlight("Succeeded");
    s.agents = agentMap(agent("ipmi"));
    // Known by the type its attempt recorded (issue 26 item 3), whatever its message says.
    s.fence.status!.attempts![1]!.message = "off confirmed";
    assert.deepEqual(storageFencesToLift(observe(s)), ["netfence"]);
    // An older version's attempt (no recorded type): known from the storage runner's own words.
    delete s.fence.status!.attempts![1]!.agentType;
    s.fence.status!.attempts![1]!.message = "storage of node-1 fenced (the storage side confirmed); the machine itself may still run";
    assert.deepEqual(storageFencesToLift(observe(s)), ["netfence"]);
    s.fence.spec.unfence = true;
    const steps = walk(s);
    assert.deepEqual(describeSteps(steps), ["startUnfence UnfenceRequested", "wait StorageFenceNotLifted"]);
    const w = steps.at(-1)!;
    assert.match(
      w.kind === "wait" ? w.message : "",
      /FenceAgent netfence no longer exists: create .* again to lift its NetworkFence stockade-netfence-node-1-/,
    );
    s.agents = agentMap(agent("ipmi"), storageAgent("netfence"));
    assert.deepEqual(describeSteps(walk(s)), ["runAgent on L1 netfence", "record Succeeded", "unmarkNode UnfenceRequested", "done"]);
    // A power agent deleted since (an older version's attempt, without a recorded type) is not taken for one.
    const p = inFlight("Succeeded");
    delete p.fence.status!.attempts![1]!.agentType;
    p.fence.status!.attempts![1]!.message = "off confirmed";
    p.agents = agentMap(agent("ipmi"));
    assert.deepEqual(storageFencesToLift(observe(p)), []);
  });
});

describe("issue 28: the agent monitor never blocks a fence", () => {
  test("an agent whose every node failed the monitor's status query (Ready and Reachable False) is still run, as if healthy", () => {
    const failing = (a: FenceAgent): FenceAgent => ({
      ...a,
      status: {
        conditions: ["Ready", "Reachable"].map((type) => ({
          type,
          status: "False" as const,
          reason: "AuthFailed",
          message: "1 of 1 node(s) could not be fenced through this agent now",
          lastTransitionTime: stamp(T0),
        })),
        monitor: { intervalSeconds: 300, nodes: 1, reachable: 0, failing: 1, pending: 0, failures: [] },
      },
    });
    const healthy = walk(sim({ fence: fenceOf(undefined, {}, []) }));
    const monitored = walk(sim({ fence: fenceOf(undefined, {}, []), agents: agentMap(failing(agent("ipmi")), failing(agent("pdu"))) }));
    assert.deepEqual(describeSteps(monitored), describeSteps(healthy));
    assert.ok(describeSteps(monitored).includes("runAgent off L0 ipmi"));
  });
});

describe("issue 28 items 3 and 4: a fence a node condition triggered, and control-plane nodes", () => {
  const KD = { type: "KernelDeadlock", status: "True" as const, forSeconds: 60, trustedWriters: ["node-problem-detector"] };
  /** node-1 heartbeating (Lease and Ready renewed at `t`), KernelDeadlock as given, set by `writer`. */
  function alive(
    t: DateTime,
    kd: "True" | "False" = "True",
    labels: Record<string, string> = {},
    writer = "node-problem-detector",
  ): V1Node {
    const n = node("node-1", { ready: "True", heartbeat: t, bootID: "boot-1", labels });
    n.status!.conditions!.push({ type: "KernelDeadlock", status: kd, reason: "DockerHung", lastTransitionTime: T0.toJSDate() });
    return writtenBy(n, "KernelDeadlock", writer);
  }

  test("a heartbeating node whose trigger condition holds is powered off, confirmed, and released only once silent", () => {
    const s = sim({
      node: alive(at(1000)),
      lease: lease("node-1", at(1000)),
      pods: [stsPod("db-0")],
      fence: fenceOf(undefined, { trigger: { nodeCondition: KD } }, []),
    });
    // The sim's machine stops heartbeating once powered off: its Lease and Ready stay at 1000.
    const first = describeSteps(walk(s));
    assert.deepEqual(first, [
      "addFinalizer",
      "start",
      "begin",
      "runAgent off L0 ipmi",
      "record Succeeded",
      "confirmed PowerOffConfirmed",
      "wait WaitingForSilence",
    ]);
    assert.equal(s.fence.status?.evidence?.heartbeat?.silent, false, "confirmed while it still heartbeat");
    assert.equal(s.fence.status?.releases, undefined, "nothing released before silence");
    s.now = s.now.plus({ seconds: 15 });
    const rest = describeSteps(walk(s));
    assert.deepEqual(rest.slice(0, 2), ["markNode", "release Pod db-0"]);
    assert.equal(rest.at(-1), "done");
  });

  test("the trigger condition cleared while the node heartbeats: cancelled before any power-off (Pending, Fencing, a failed round)", () => {
    const spec = { trigger: { nodeCondition: KD } };
    const cleared = { node: alive(at(999), "False"), lease: lease("node-1", at(999)), spec };
    const pending = stepFor({ ...fencing(), phase: "Pending" }, cleared);
    assert.equal(pending.kind, "cancel");
    assert.match(
      pending.kind === "cancel" ? pending.message : "",
      /its condition KernelDeadlock=True no longer holds and the node heartbeats/,
    );
    assert.equal(stepFor(fencing(), cleared).kind, "cancel");
    assert.equal(stepFor({ ...fencing(), phase: "Failed", nextRetryTime: stamp(at(2000)) }, cleared).kind, "cancel");
    // Still held: it goes on although the node heartbeats.
    const held = { node: alive(at(999)), lease: lease("node-1", at(999)), spec };
    assert.equal(stepFor({ ...fencing(), phase: "Pending" }, held).kind, "begin");
    assert.equal(stepFor(fencing(), held).kind, "runAgent");
    // Cleared, but the node went silent meanwhile (partitioned): its silence justifies it.
    const silent = partitionedNode();
    silent.status!.conditions!.push({ type: "KernelDeadlock", status: "False", reason: "x" });
    assert.equal(stepFor(fencing(), { node: silent, spec }).kind, "runAgent");
    // Without a trigger a heartbeating node is cancelled as before, whatever its conditions say.
    assert.equal(stepFor(fencing(), { node: alive(at(999)), lease: lease("node-1", at(999)) }).kind, "cancel");
  });

  test("issue 41 item 4: the condition set by a writer the fence's trigger does not trust, on the fresh read: cancelled, never powered off", () => {
    const spec = { trigger: { nodeCondition: KD } };
    const taken = { node: alive(at(999), "True", {}, "calico-node"), lease: lease("node-1", at(999)), spec };
    for (const st of [
      { ...fencing(), phase: "Pending" as const },
      fencing(),
      { ...fencing(), phase: "Failed" as const, nextRetryTime: stamp(at(2000)) },
    ]) {
      const step = stepFor(st, taken);
      assert.equal(step.kind, "cancel");
      assert.match(
        step.kind === "cancel" ? step.message : "",
        /KernelDeadlock=True is not set by a trusted writer \(set by calico-node; trusted: node-problem-detector\)/,
      );
    }
    const now = at(1000);
    assert.match(noLongerDue({ fence: fenceOf(fencing(), spec), ...taken, now }) ?? "", /not set by a trusted writer/);
    // Co-owned by the trusted writer and another: the same.
    const co = alive(at(999), "True", {}, "attacker");
    writtenBy(co, "KernelDeadlock", "attacker", { operation: "Apply", subresource: "" });
    writtenBy(co, "KernelDeadlock", "node-problem-detector", { operation: "Apply", subresource: "" });
    assert.equal(stepFor(fencing(), { node: co, lease: lease("node-1", at(999)), spec }).kind, "cancel");
    // A fence made before triggers listed writers (its trigger records none): trusts nothing, so a heartbeating node is not powered off.
    const old = { trigger: { nodeCondition: { type: "KernelDeadlock", status: "True" as const, forSeconds: 60 } } };
    assert.equal(stepFor(fencing(), { node: alive(at(999)), lease: lease("node-1", at(999)), spec: old }).kind, "cancel");
  });

  test("noLongerDue, the check right before each power-off try", () => {
    const f = fenceOf(fencing(), { trigger: { nodeCondition: KD } });
    const now = at(1000);
    assert.equal(noLongerDue({ fence: f, node: alive(at(999)), lease: lease("node-1", at(999)), now }), undefined);
    assert.match(noLongerDue({ fence: f, node: alive(at(999), "False"), lease: lease("node-1", at(999)), now }) ?? "", /no longer holds/);
    assert.equal(noLongerDue({ fence: f, node: undefined, lease: undefined, now }), undefined, "a deleted Node is no heartbeat");
    const plain = fenceOf(fencing());
    assert.match(noLongerDue({ fence: plain, node: alive(at(999)), lease: lease("node-1", at(999)), now }) ?? "", /heartbeats again/);
  });

  test("a NodeFence (manual or automatic) of a control-plane or etcd node waits, refused, unless the policy allows it", () => {
    const cp = partitionedNode({ labels: { "node-role.kubernetes.io/control-plane": "" } });
    for (const origin of ["Manual", "Automatic"] as const) {
      const step = stepFor(undefined, { node: cp, spec: { origin } });
      assert.equal(step.kind, "wait");
      assert.equal(step.kind === "wait" && step.reason, "ControlPlaneNode");
      assert.match(
        step.kind === "wait" ? step.message : "",
        /node-1 is not fenced: it is a control-plane node .*spec\.allowControlPlane.*nothing was powered off/,
      );
    }
    const etcd = pod("etcd-node-1", { node: "node-1", ns: "kube-system", labels: { component: "etcd" } });
    etcd.metadata!.annotations = { "kubernetes.io/config.mirror": "x" };
    const e = stepFor(undefined, { pods: [etcd], spec: { origin: "Manual" } });
    assert.equal(e.kind === "wait" && e.reason, "ControlPlaneNode");
    const allowed = stepFor(undefined, {
      node: cp,
      policies: [policy("default", { allowControlPlane: true })],
      spec: { origin: "Manual" },
    });
    assert.equal(allowed.kind, "start");
  });

  test("labelled control-plane after the fence started: no further power-off try (fence machine and the fresh read before each try)", () => {
    const cp = partitionedNode({ labels: { "node-role.kubernetes.io/control-plane": "" } });
    for (const origin of ["Manual", "Automatic"] as const) {
      const step = stepFor(fencing(), { node: cp, spec: { origin } });
      assert.equal(step.kind === "wait" && step.reason, "ControlPlaneNode", `${origin}: ${step.kind}`);
      assert.match(step.kind === "wait" ? step.message : "", /no further power-off is tried/);
    }
    assert.equal(stepFor(fencing(), { node: cp, policies: [policy("default", { allowControlPlane: true })] }).kind, "runAgent");
    const fresh = (n: V1Node, origin: "Manual" | "Automatic", policies = [policy("default")]) => ({
      fence: fenceOf(fencing(), { origin }),
      node: n,
      lease: lease("node-1", at(999)),
      now: at(1000),
      policies,
      pods: [],
    });
    assert.match(powerOffRefused(fresh(cp, "Manual")) ?? "", /control-plane node/);
    assert.equal(powerOffRefused(fresh(cp, "Manual", [policy("default", { allowControlPlane: true })])), undefined);
    // A policy deleted since: a control-plane node is refused, any other node is not for that.
    assert.match(powerOffRefused(fresh(cp, "Manual", [])) ?? "", /FencingPolicy \(none\)/);
    assert.equal(powerOffRefused(fresh(alive(at(999)), "Manual", [])), undefined, "a manual fence of a node that heartbeats");
    assert.match(powerOffRefused(fresh(alive(at(999)), "Automatic")) ?? "", /heartbeats again/);
  });
});

describe("issue 41 item 6 (second review): an automatic fence never powers off a machine whose Node is gone", () => {
  test("automatic: refused, with how it is fenced instead; manual: a person's word, allowed", () => {
    const o = { fence: fenceOf(fencing()), node: undefined, lease: undefined, now: at(1000), policies: [], pods: [] };
    assert.match(powerOffRefused(o) ?? "", /was deleted .* powers it off only on a person's word/);
    const manual = { ...o, fence: fenceOf(fencing(), { origin: "Manual" }) };
    assert.equal(powerOffRefused(manual), undefined);
  });
});

describe("issue 41 item 1: silence counted again after this replica's own gap neither powers off nor cancels", () => {
  // The node was silent when the fence was decided (its last heartbeat, T0, recorded); then this replica had a gap
  // (an outage, a change of leader) and has seen the Lease unchanged for only 5 s since.
  const recorded = { lastHeartbeatTime: stamp(T0) };
  const readyTrue = () => node("node-1", { ready: "True", bootID: "boot-1", heartbeat: T0 });

  test("Fencing, no heartbeat since the decision, seen silent 5 s of 40: wait, no power-off, no cancel", () => {
    const step = stepFor(fencing(recorded), { node: readyTrue(), lease: lease("node-1", T0), leaseObservedSilentMs: 5_000 });
    assert.equal(step.kind, "wait");
    assert.equal((step as { reason: string }).reason, "SilenceRecounted");
  });
  test("Pending, the same: wait before anything runs", () => {
    const step = stepFor(
      { ...fencing(recorded), phase: "Pending" },
      { node: readyTrue(), lease: lease("node-1", T0), leaseObservedSilentMs: 5_000 },
    );
    assert.equal(step.kind, "wait");
  });
  test("the fresh read right before a power-off refuses it while the silence is being counted again", () => {
    const o = {
      fence: fenceOf(fencing(recorded)),
      node: readyTrue(),
      lease: lease("node-1", T0),
      now: at(1000),
      leaseObservedSilentMs: 5_000,
    };
    assert.match(noLongerDue(o) ?? "", /not yet seen it silent/);
    assert.equal(noLongerDue({ ...o, leaseObservedSilentMs: 40_000 }), undefined, "seen silent for the Lease's 40 s: it may");
  });
  test("Failed, dead for long but seen silent 5 s since the gap: wait, not cancel (the fence's gates and guard stay)", () => {
    const failed = { ...fencing(recorded), phase: "Failed" as const, nextRetryTime: stamp(at(990)) };
    const unknown = () => node("node-1", { ready: "Unknown", bootID: "boot-1", heartbeat: T0 });
    const step = stepFor(failed, { node: unknown(), lease: lease("node-1", T0), leaseObservedSilentMs: 5_000 });
    assert.equal(step.kind, "wait");
    assert.equal((step as { reason: string }).reason, "SilenceRecounted");
    const seen = stepFor(failed, { node: unknown(), lease: lease("node-1", T0), leaseObservedSilentMs: 40_000 });
    assert.equal(seen.kind, "retry", "seen silent for the timeout again: retried as before");
  });
  test("a renewal since the decision still cancels", () => {
    const step = stepFor(fencing(recorded), {
      node: node("node-1", { ready: "True", bootID: "boot-1", heartbeat: T0 }),
      lease: lease("node-1", at(5)),
      leaseObservedSilentMs: 1_000,
    });
    assert.equal(step.kind, "cancel");
  });
});
