// Priority decides order when guards limit concurrency: nodes whose guarded pods matter most are fenced
// first, and pods are released highest priority first. spec.priority is the PriorityClass value the
// admission plugin resolved when the pod was created.
import type { V1Pod } from "@kubernetes/client-node";

export const podPriority = (p: V1Pod): number => p.spec?.priority ?? 0;

export interface Candidate {
  node: string;
  /** Highest priority among the node's guarded pods. */
  priority: number;
  /** Guarded pods whose disruption budget allows no further disruption: their app is already degraded. */
  atDisruptionLimit: number;
  /** Seconds since the node was partitioned. */
  waitedSeconds: number;
}

export function orderCandidates<C extends Candidate>(cs: readonly C[]): C[] {
  return [...cs].sort(
    (a, b) =>
      b.priority - a.priority ||
      b.atDisruptionLimit - a.atDisruptionLimit ||
      b.waitedSeconds - a.waitedSeconds ||
      a.node.localeCompare(b.node),
  );
}

export function orderPodsForRelease(pods: readonly V1Pod[]): V1Pod[] {
  const key = (p: V1Pod) => `${p.metadata?.namespace}/${p.metadata?.name}`;
  return [...pods].sort((a, b) => podPriority(b) - podPriority(a) || key(a).localeCompare(key(b)));
}
