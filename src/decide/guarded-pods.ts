// Which pods Stockade protects: those whose identity or volume must never run twice. By default
// StatefulSet pods and pods holding a ReadWriteOnce volume, of the namespaces and labels the policy names
// (guardedPods.namespaces, podSelector; none named: every pod); the stockade.io/guarded label opts a pod of
// that scope in ("true"), or any pod out ("false": the one spelling of an opt-out).
import type { V1LabelSelector, V1PersistentVolumeClaim, V1Pod } from "@kubernetes/client-node";
import { matchesSelector } from "./selectors.ts";

export const GUARDED_LABEL = "stockade.io/guarded";

export interface GuardedPodsPolicy {
  statefulSets?: boolean;
  readWriteOnceVolumes?: boolean;
  /** Only pods of these namespaces; absent or empty: every namespace. */
  namespaces?: string[];
  /** Only pods whose labels match; absent: every pod. */
  podSelector?: V1LabelSelector;
}

/** Is the pod in the scope of a policy's guardedPods (namespaces and podSelector)? The opt-out label is not looked at here. */
export function inPodScope(pod: V1Pod, g: Pick<GuardedPodsPolicy, "namespaces" | "podSelector"> | undefined): boolean {
  const ns = g?.namespaces ?? [];
  if (ns.length && !ns.includes(pod.metadata?.namespace ?? "")) return false;
  return !g?.podSelector || matchesSelector(pod.metadata?.labels, g.podSelector);
}

export type Guarded = { guarded: true; why: string } | { guarded: false; why: string };

const exclusive = (modes: string[] | undefined) => (modes ?? []).some((m) => m === "ReadWriteOnce" || m === "ReadWriteOncePod");

/** pvcs is keyed "namespace/name". A claim we cannot see counts as exclusive: when in doubt, guard. */
export function isGuarded(pod: V1Pod, policy: GuardedPodsPolicy | undefined, pvcs: ReadonlyMap<string, V1PersistentVolumeClaim>): Guarded {
  const label = pod.metadata?.labels?.[GUARDED_LABEL];
  if (label === "false") return { guarded: false, why: `opted out by label ${GUARDED_LABEL}=false` };
  if (!inPodScope(pod, policy)) return { guarded: false, why: "outside the policy's namespaces or podSelector" };
  if (label === "true") return { guarded: true, why: `opted in by label ${GUARDED_LABEL}=true` };
  if ((policy?.statefulSets ?? true) && pod.metadata?.ownerReferences?.some((o) => o.kind === "StatefulSet" && o.controller)) {
    return { guarded: true, why: "owned by a StatefulSet" };
  }
  if (policy?.readWriteOnceVolumes ?? true) {
    const ns = pod.metadata?.namespace ?? "";
    for (const v of pod.spec?.volumes ?? []) {
      if (v.persistentVolumeClaim) {
        const pvc = pvcs.get(`${ns}/${v.persistentVolumeClaim.claimName}`);
        if (!pvc || exclusive(pvc.spec?.accessModes))
          return { guarded: true, why: `uses ReadWriteOnce claim ${v.persistentVolumeClaim.claimName}` };
      }
      if (exclusive(v.ephemeral?.volumeClaimTemplate?.spec?.accessModes))
        return { guarded: true, why: `uses ReadWriteOnce ephemeral volume ${v.name}` };
    }
  }
  return { guarded: false, why: "neither a StatefulSet pod nor a holder of a ReadWriteOnce volume" };
}

/** A pod that is gone for good needs no release. */
export function isFinished(pod: V1Pod): boolean {
  return pod.status?.phase === "Succeeded" || pod.status?.phase === "Failed";
}
