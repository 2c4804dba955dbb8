// The NodeFence state machine: from the fence's recorded status and what is observed now, the one
// next step. The reconciler performs it, writes the result to status, and asks again — so a restarted
// operator resumes from status, never skips confirmation, and never releases the same thing twice.
//
//   Pending → Fencing → Fenced → Releasing → Released      (→ Unfencing → Unfenced)
//                 └→ Failed
import type { V1Node, V1PersistentVolumeClaim, V1Pod, V1Taint, V1VolumeAttachment } from "@kubernetes/client-node";
import type { DateTime } from "luxon";
import type { FenceAgent, FencingPolicy, NodeFence, NodeFenceStatusAttempts } from "../api/v1alpha1.ts";
import { isFinished, isGuarded } from "./guarded-pods.ts";
import { orderPodsForRelease } from "./priority.ts";
import { policyForNode } from "./selectors.ts";

export const FENCED_TAINT = "stockade.io/fenced";
export const OUT_OF_SERVICE_TAINT = "node.kubernetes.io/out-of-service";

export interface FenceObservation {
  now: DateTime;
  fence: NodeFence;
  /** The Node; undefined when it was deleted. */
  node: V1Node | undefined;
  policies: readonly FencingPolicy[];
  agents: ReadonlyMap<string, FenceAgent>;
  /** Every pod bound to the node. */
  pods: readonly V1Pod[];
  pvcs: ReadonlyMap<string, V1PersistentVolumeClaim>;
  volumeAttachments: readonly V1VolumeAttachment[];
}

export type Evidence = {
  method: "PowerOffConfirmed" | "BootIDChanged" | "NodeDeleted" | "ManualConfirmation";
  detail: string;
  agents: string[];
};

export type ReleaseItem =
  { kind: "Pod"; pod: V1Pod } | { kind: "VolumeAttachment"; name: string; uid: string } | { kind: "Taint"; action: "Added" | "Removed" };

export type Step =
  | { kind: "start"; policy: string; bootID: string }
  | { kind: "fail"; reason: string; message: string }
  | { kind: "wait"; reason: string; message: string; requeueAfterMs: number }
  | { kind: "begin" }
  | { kind: "interrupted"; index: number }
  | { kind: "runAgent"; level: number; agent: FenceAgent; operation: "off" | "on" }
  | { kind: "escalate"; to: number; message: string }
  | { kind: "confirmed"; evidence: Evidence }
  | { kind: "markNode" }
  | { kind: "release"; item: ReleaseItem }
  | { kind: "released" }
  | { kind: "startUnfence"; reason: string }
  | { kind: "unmarkNode"; reason: string }
  | { kind: "done" };

const attemptsOf = (f: NodeFence): NodeFenceStatusAttempts[] => f.status?.attempts ?? [];

export function resolvePolicy(o: FenceObservation): FencingPolicy | undefined {
  const name = o.fence.status?.policy || o.fence.spec.policy;
  if (name) return o.policies.find((p) => p.metadata?.name === name);
  return o.node ? policyForNode(o.node, o.policies).policy : undefined;
}

export function hasTaint(node: V1Node | undefined, key: string): boolean {
  return (node?.spec?.taints ?? []).some((t: V1Taint) => t.key === key);
}

/** Guarded pods on the node that still have to be released, highest priority first. */
export function podsToRelease(o: FenceObservation, policy: FencingPolicy): V1Pod[] {
  const released = new Set((o.fence.status?.releases ?? []).filter((r) => r.kind === "Pod").map((r) => r.uid));
  return orderPodsForRelease(
    o.pods.filter((p) => !released.has(p.metadata?.uid) && !isFinished(p) && isGuarded(p, policy.spec.guardedPods, o.pvcs).guarded),
  );
}

export function nextStep(o: FenceObservation): Step {
  const f = o.fence;
  const st = f.status ?? {};
  const phase = st.phase ?? "";
  const nodeName = f.spec.nodeName;

  if (phase === "Unfenced") return { kind: "done" };
  if (phase === "Unfencing") {
    const reason = st.conditions?.find((c) => c.type === "Fenced")?.reason ?? "UnfenceRequested";
    const policy = resolvePolicy(o);
    // An administrator's unfence powers back on what our agents powered off; a reboot already did.
    if (policy && reason === "UnfenceRequested" && st.evidence?.method === "PowerOffConfirmed" && policy.spec.action !== "reboot") {
      const step = powerOnStep(o, policy);
      if (step) return step;
    }
    return { kind: "unmarkNode", reason };
  }
  if (f.spec.unfence) {
    // Asked to unfence before anything happened: nothing to undo.
    if (phase === "") return { kind: "unmarkNode", reason: "UnfenceRequested" };
    return { kind: "startUnfence", reason: "UnfenceRequested" };
  }

  const policy = resolvePolicy(o);
  if (phase === "") {
    if (!policy) {
      const asked = f.spec.policy;
      return asked
        ? { kind: "fail", reason: "PolicyNotFound", message: `FencingPolicy ${asked} does not exist: create it or fix spec.policy` }
        : { kind: "fail", reason: "NoPolicy", message: `no FencingPolicy selects node ${nodeName}: create one or set spec.policy` };
    }
    return { kind: "start", policy: policy.metadata?.name ?? "", bootID: o.node?.status?.nodeInfo?.bootID ?? "" };
  }
  if (phase === "Failed") return { kind: "done" };
  if (!policy)
    return {
      kind: "wait",
      reason: "PolicyNotFound",
      message: `FencingPolicy ${st.policy} no longer exists: recreate it`,
      requeueAfterMs: 30_000,
    };

  if (phase === "Pending") {
    if (policy.spec.paused && f.spec.origin === "Automatic")
      return { kind: "wait", reason: "Paused", message: `FencingPolicy ${st.policy} is paused`, requeueAfterMs: 10_000 };
    const missing = policy.spec.escalation.flatMap((l) => l.agents.map((a) => a.name)).filter((n) => !o.agents.has(n));
    if (missing.length)
      return {
        kind: "fail",
        reason: "AgentNotFound",
        message: `FenceAgent ${missing.join(", ")} named by FencingPolicy ${st.policy} does not exist`,
      };
    return { kind: "begin" };
  }

  if (phase === "Fencing") {
    if (!o.node) return { kind: "confirmed", evidence: { method: "NodeDeleted", detail: `Node ${nodeName} was deleted`, agents: [] } };
    const boot = o.node.status?.nodeInfo?.bootID ?? "";
    if (st.bootID && boot && boot !== st.bootID) {
      return {
        kind: "confirmed",
        evidence: { method: "BootIDChanged", detail: `bootID changed from ${st.bootID} to ${boot}`, agents: [] },
      };
    }
    const attempts = attemptsOf(f);
    const stuck = attempts.findIndex((a) => a.outcome === "InProgress");
    if (stuck >= 0) return { kind: "interrupted", index: stuck };
    const levels = policy.spec.escalation;
    const level = st.currentLevel ?? 0;
    const spec = levels[level];
    if (!spec)
      return { kind: "fail", reason: "EscalationExhausted", message: `no escalation level ${level + 1} in FencingPolicy ${st.policy}` };
    for (const ref of spec.agents) {
      const last = attempts.filter((a) => a.level === level && a.agent === ref.name && a.operation === "off").at(-1);
      if (!last || last.outcome === "Interrupted") {
        const agent = o.agents.get(ref.name);
        if (!agent) return levelFailed(levels.length, level, `FenceAgent ${ref.name} does not exist`);
        return { kind: "runAgent", level, agent, operation: "off" };
      }
      if (last.outcome !== "Succeeded") return levelFailed(levels.length, level, `${ref.name}: ${last.outcome}: ${last.message ?? ""}`);
    }
    const names = spec.agents.map((a) => a.name);
    const manual = names.filter((n) => o.agents.get(n)?.spec.type === "manual");
    return {
      kind: "confirmed",
      evidence: {
        method: manual.length === names.length ? "ManualConfirmation" : "PowerOffConfirmed",
        detail: `level ${level + 1}: ${names.join(", ")} powered the machine off and a status query confirmed it`,
        agents: names,
      },
    };
  }

  if (phase === "Fenced") return { kind: "markNode" };

  if (phase === "Releasing") {
    // The invariant holds here too, not only in the controller: a status that lost its evidence releases nothing.
    if (!st.evidence?.method)
      return {
        kind: "fail",
        reason: "EvidenceMissing",
        message: `NodeFence ${nodeName} is Releasing but has no confirmation evidence: nothing more is released; delete the NodeFence to fence again`,
      };
    const rel = policy.spec.release ?? {};
    const releases = st.releases ?? [];
    const taintAdded = releases.some((r) => r.kind === "Taint" && r.action === "Added");
    const taintRemoved = releases.some((r) => r.kind === "Taint" && r.action === "Removed");
    if (rel.outOfServiceTaint && !taintAdded) return { kind: "release", item: { kind: "Taint", action: "Added" } };
    if (rel.forceDeletePods ?? true) {
      const pod = podsToRelease(o, policy)[0];
      if (pod) return { kind: "release", item: { kind: "Pod", pod } };
    }
    if (rel.deleteVolumeAttachments ?? true) {
      const done = new Set(releases.filter((r) => r.kind === "VolumeAttachment").map((r) => r.uid));
      const va = o.volumeAttachments.find((v) => v.spec.nodeName === nodeName && !done.has(v.metadata?.uid));
      if (va) return { kind: "release", item: { kind: "VolumeAttachment", name: va.metadata?.name ?? "", uid: va.metadata?.uid ?? "" } };
    }
    if (rel.outOfServiceTaint && !taintRemoved) {
      // The taint manager evicts the node's pods and the pod GC controller force-deletes them; the taint may go
      // only once none is terminating there and no guarded pod is left (one not yet evicted would be stranded).
      const terminating = o.pods.filter((p) => p.metadata?.deletionTimestamp);
      const guarded = podsToRelease(o, policy).filter((p) => !p.metadata?.deletionTimestamp);
      if (terminating.length || guarded.length)
        return {
          kind: "wait",
          reason: "WaitingForPodGC",
          message: `${terminating.length} pod(s) still terminating and ${guarded.length} guarded pod(s) not yet evicted on ${nodeName}; the out-of-service taint stays until the pod GC controller has removed them (a pod tolerating node.kubernetes.io/out-of-service keeps it forever)`,
          requeueAfterMs: 2_000,
        };
      return { kind: "release", item: { kind: "Taint", action: "Removed" } };
    }
    return { kind: "released" };
  }

  if (phase === "Released") {
    if (policy.spec.action === "reboot" && st.evidence?.method === "PowerOffConfirmed") {
      const step = powerOnStep(o, policy);
      if (step) return step;
      const boot = o.node?.status?.nodeInfo?.bootID ?? "";
      const ready = o.node?.status?.conditions?.find((c) => c.type === "Ready")?.status === "True";
      if (policy.spec.unfenceOnReboot && boot && st.bootID && boot !== st.bootID && ready)
        return { kind: "startUnfence", reason: "Rebooted" };
    }
    return { kind: "done" };
  }
  return { kind: "done" };
}

/** Power the machine back on through the agents that powered it off, each tried once (a failure is recorded, not retried). */
function powerOnStep(o: FenceObservation, policy: FencingPolicy): Step | undefined {
  const st = o.fence.status ?? {};
  const attempts = attemptsOf(o.fence);
  const stuck = attempts.findIndex((a) => a.outcome === "InProgress");
  if (stuck >= 0) return { kind: "interrupted", index: stuck };
  const level = st.currentLevel ?? 0;
  for (const ref of policy.spec.escalation[level]?.agents ?? []) {
    const agent = o.agents.get(ref.name);
    const last = attempts
      .filter((a) => a.operation === "on" && a.agent === ref.name && (a.startTime ?? "") >= (st.fencedTime ?? ""))
      .at(-1);
    if (agent && agent.spec.type !== "manual" && (!last || last.outcome === "Interrupted"))
      return { kind: "runAgent", level, agent, operation: "on" };
  }
  return undefined;
}

function levelFailed(levels: number, level: number, why: string): Step {
  if (level + 1 < levels)
    return { kind: "escalate", to: level + 1, message: `level ${level + 1} failed (${why}); escalating to level ${level + 2}` };
  return { kind: "fail", reason: "FencingFailed", message: `every escalation level failed; last: level ${level + 1}: ${why}` };
}
