// The validating half: a delete whose effective grace period is 0 (kubectl delete --force --grace-period=0, an
// eviction, or a plain delete of a pod whose own grace period is 0 or whose phase is Failed/Succeeded — the apiserver
// then deletes at once, pkg/registry/core/pod/strategy.go CheckGracefulDelete) removes a pod's API object without its
// kubelet confirming that its containers stopped; its replacement may then start while it still runs. Refused for a
// guarded pod unless its instance is known dead or someone who may decide that asks. Pure: the server gathers the
// facts fresh.
import type { V1Pod } from "@kubernetes/client-node";
import { provenFinished, untrustedPhase } from "../decide/claim-lock.ts";
import { isFinished } from "../decide/guarded-pods.ts";

/** On a pod: a person's explicit acceptance of the risk of force-deleting it (the proposal's --confirm). */
export const FORCE_DELETE_ANNOTATION = "stockade.io/force-delete-acknowledged";

export interface ForceDeleteFacts {
  pod: V1Pod;
  username: string;
  /** gracePeriodSeconds of the request's DeleteOptions (undefined: the pod's own grace period). */
  gracePeriodSeconds: number | undefined;
  /** Why the pod is guarded, or undefined when it is not (or outside every live policy's scope: decide/scope.ts). */
  guarded: string | undefined;
  /**
   * The live FencingPolicy that selects the pod's node, when one does: only then can `kubectl stockade fence` of it
   * work, so only then does the refusal suggest it.
   */
  policy?: string;
  /** The phase of a NodeFence of the pod's node under way: Stockade releases the pod itself once it is confirmed. */
  fencePhase?: string;
  /** What put the pod in the guard's scope, said when neither a policy nor a fence does (decide/scope.ts). */
  coveredBy?: string;
  /** The operator's own user (its ServiceAccount). */
  operatorUsers: readonly string[];
  /** Does the pod's Node object exist (fresh read)? For the message only: a deleted Node proves nothing. */
  nodeExists: boolean;
  /** Does the pod's node heartbeat now (heartbeatsNow over a fresh read of its Node and Lease)? */
  nodeHeartbeats: boolean;
  /** When the pod's node was confirmed fenced (fencedSince over fresh reads of its NodeFence, Node and Lease), if it is. */
  fencedSince: Date | undefined;
}

export type ForceDeleteAnswer = { allowed: true; why: string; acknowledged?: string } | { allowed: false; message: string };

/**
 * The grace period the apiserver will apply to a delete of this pod (the pod strategy's CheckGracefulDelete): the
 * request's, else the pod's own; 0 for a pod never scheduled or in phase Failed/Succeeded whatever was asked; a
 * negative one becomes 1. 0 removes the object at once; any other value leaves it to the kubelet to confirm.
 */
export function effectiveGracePeriod(requested: number | undefined, pod: V1Pod): number {
  if (!pod.spec?.nodeName || isFinished(pod)) return 0;
  const period = requested ?? pod.spec?.terminationGracePeriodSeconds ?? 0;
  return period < 0 ? 1 : period;
}

export function checkForceDelete(f: ForceDeleteFacts): ForceDeleteAnswer {
  const pod = `${f.pod.metadata?.namespace}/${f.pod.metadata?.name}`;
  const node = f.pod.spec?.nodeName;
  if (effectiveGracePeriod(f.gracePeriodSeconds, f.pod) !== 0)
    return { allowed: true, why: "not a force delete: the kubelet confirms termination" };
  if (!f.guarded) return { allowed: true, why: "not guarded" };
  if (!node) return { allowed: true, why: "never scheduled: no instance runs" };
  if (provenFinished(f.pod, f.nodeHeartbeats))
    return {
      allowed: true,
      why: `phase ${f.pod.status?.phase}, and its node heartbeats with no container running: its kubelet stands by it`,
    };
  if (f.operatorUsers.includes(f.username)) return { allowed: true, why: "Stockade releases it after a confirmed fence" };
  if (f.username === `system:node:${node}`) return { allowed: true, why: "its own kubelet confirms termination" };
  const created = new Date(f.pod.metadata?.creationTimestamp ?? 0).getTime();
  if (f.fencedSince && created < f.fencedSince.getTime())
    return { allowed: true, why: `node ${node} is confirmed fenced since ${f.fencedSince.toISOString()}` };
  const ack = f.pod.metadata?.annotations?.[FORCE_DELETE_ANNOTATION];
  if (ack) return { allowed: true, why: `acknowledged by annotation ${FORCE_DELETE_ANNOTATION}`, acknowledged: ack };
  // Neither a phase on a silent node nor a deleted Node is proof: say so, since both look like it.
  const notProof = [
    untrustedPhase(f.pod, f.nodeHeartbeats),
    f.nodeExists ? undefined : `its Node object is gone, which proves nothing (a live kubelet re-creates it)`,
  ].filter(Boolean);
  const how = f.gracePeriodSeconds === 0 ? "force-delete" : "delete at once (its effective grace period is 0)";
  const by = f.policy ? ` (FencingPolicy ${f.policy})` : "";
  const other = otherRemediator(f.username);
  const safe = f.fencePhase
    ? `Stockade is fencing node ${node} (NodeFence ${node}, phase ${f.fencePhase}): the pod is released as soon as the machine is confirmed powered off (kubectl stockade explain ${node}). `
    : f.policy
      ? `The safe path: kubectl stockade fence ${node} — the pod is released as soon as the machine is confirmed powered off. `
      : f.coveredBy
        ? `Guarded here because ${f.coveredBy}. `
        : "";
  const remediator = other
    ? `The request comes from ${f.username}, which looks like ${other.name}: NodeHealthCheck is remediating node ${node} with it while Stockade guards the node${by}. ` +
      `Let one of them act on a node, not both: ${other.disable}, or take the node out of the FencingPolicy's nodeSelector (docs/pilot.md, "Living beside NodeHealthCheck"). `
    : "";
  return {
    allowed: false,
    message:
      `refusing to ${how} pod ${pod}: it is guarded by Stockade${by} (${f.guarded}) and its node ${node} is not confirmed fenced, ` +
      `so its containers may still be running and writing${notProof.length ? ` (${notProof.join("; ")})` : ""}; a force delete lets its replacement start next to it (two writers of one volume or identity). ` +
      remediator +
      safe +
      `To force-delete anyway and accept that risk: kubectl annotate pod -n ${f.pod.metadata?.namespace} ${f.pod.metadata?.name} ${FORCE_DELETE_ANNOTATION}="<why>" and delete again (the apiserver's audit log records who did).`,
  };
}

/**
 * The other node remediators whose own grace-0 deletes the guard refuses on the nodes it covers, by the username their
 * controller runs as (a ServiceAccount whose name starts as the medik8s operators' Deployments do). Named in the
 * refusal, with what to disable; never let through for it: their fence is not one Stockade can check.
 */
export const REMEDIATORS: readonly { pattern: RegExp; name: string; disable: string }[] = [
  {
    pattern: /^system:serviceaccount:[^:]+:fence-agents-remediation-/,
    name: "Fence Agents Remediation (FAR)",
    disable:
      "remove the node from the NodeHealthCheck's selector (or drop the FenceAgentsRemediationTemplate from its remediation templates)",
  },
  {
    pattern: /^system:serviceaccount:[^:]+:self-node-remediation-/,
    name: "Self Node Remediation (SNR)",
    disable: "remove the node from the NodeHealthCheck's selector (or drop the SelfNodeRemediationTemplate from its remediation templates)",
  },
];

/** The known remediator the username belongs to, if it is one. */
export function otherRemediator(username: string): { name: string; disable: string } | undefined {
  return REMEDIATORS.find((r) => r.pattern.test(username));
}
