// The validating half: a DELETE with gracePeriodSeconds 0 (kubectl delete --force --grace-period=0, or an
// eviction asking for it) removes a pod's API object at once, without its kubelet confirming that its
// containers stopped; its replacement may then start while it still runs. Refused for a guarded pod unless
// its instance is known dead or someone who may decide that asks. Pure: the server gathers the facts fresh.
import type { V1Pod } from "@kubernetes/client-node";
import { isFinished } from "../decide/guarded-pods.ts";

/** On a pod: a person's explicit acceptance of the risk of force-deleting it (the proposal's --confirm). */
export const FORCE_DELETE_ANNOTATION = "stockade.io/force-delete-acknowledged";

/** Users the pod GC controller runs as (its own ServiceAccount, or the controller-manager's identity). */
const POD_GC_USERS = ["system:serviceaccount:kube-system:pod-garbage-collector", "system:kube-controller-manager"];

export interface ForceDeleteFacts {
  pod: V1Pod;
  username: string;
  /** gracePeriodSeconds of the request's DeleteOptions (undefined: the pod's own grace period). */
  gracePeriodSeconds: number | undefined;
  /** Why the pod is guarded, or undefined when it is not. */
  guarded: string | undefined;
  /** The operator's own user (its ServiceAccount). */
  operatorUsers: readonly string[];
  /** Does the pod's Node object exist (fresh read)? */
  nodeExists: boolean;
  /** When the pod's node was confirmed fenced (a NodeFence with evidence, fresh read), if it is. */
  fencedSince: Date | undefined;
}

export type ForceDeleteAnswer = { allowed: true; why: string; acknowledged?: string } | { allowed: false; message: string };

export function checkForceDelete(f: ForceDeleteFacts): ForceDeleteAnswer {
  const pod = `${f.pod.metadata?.namespace}/${f.pod.metadata?.name}`;
  const node = f.pod.spec?.nodeName;
  if (f.gracePeriodSeconds !== 0) return { allowed: true, why: "not a force delete: the kubelet confirms termination" };
  if (!f.guarded) return { allowed: true, why: "not guarded" };
  if (!node) return { allowed: true, why: "never scheduled: no instance runs" };
  if (isFinished(f.pod)) return { allowed: true, why: `phase ${f.pod.status?.phase}: its kubelet reported every container stopped` };
  if (f.operatorUsers.includes(f.username)) return { allowed: true, why: "Stockade releases it after a confirmed fence" };
  if (f.username === `system:node:${node}`) return { allowed: true, why: "its own kubelet confirms termination" };
  if (POD_GC_USERS.includes(f.username) && !f.nodeExists)
    return { allowed: true, why: `the pod GC controller removes a pod of node ${node}, which no longer exists` };
  const created = new Date(f.pod.metadata?.creationTimestamp ?? 0).getTime();
  if (f.fencedSince && created < f.fencedSince.getTime())
    return { allowed: true, why: `node ${node} is confirmed fenced since ${f.fencedSince.toISOString()}` };
  const ack = f.pod.metadata?.annotations?.[FORCE_DELETE_ANNOTATION];
  if (ack) return { allowed: true, why: `acknowledged by annotation ${FORCE_DELETE_ANNOTATION}`, acknowledged: ack };
  return {
    allowed: false,
    message:
      `refusing to force-delete pod ${pod}: it is guarded by Stockade (${f.guarded}) and its node ${node} is not confirmed fenced, ` +
      `so its containers may still be running and writing; a force delete lets its replacement start next to it (two writers of one volume or identity). ` +
      `The safe path: kubectl stockade fence ${node} — the pod is released as soon as the machine is confirmed powered off. ` +
      `To force-delete anyway and accept that risk: kubectl annotate pod -n ${f.pod.metadata?.namespace} ${f.pod.metadata?.name} ${FORCE_DELETE_ANNOTATION}="<why>" and delete again (recorded in an Event).`,
  };
}
