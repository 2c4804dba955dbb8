// Pod forgiveness: a pod's node.kubernetes.io/unreachable toleration says how long it is willing to
// wait for its node to come back; the policy's fenceAfterSeconds applies to pods that do not say. Pods
// are written by tenants: the policy's minTolerationSeconds bounds how soon one can get a shared node fenced.
// Kubernetes gives every pod that has no unreachable toleration one of 300 s (kube-apiserver's
// DefaultTolerationSeconds admission plugin): that one is not its author's word, so it counts as none.
import type { V1Pod, V1Toleration } from "@kubernetes/client-node";

export const UNREACHABLE_TAINT = "node.kubernetes.io/unreachable";

export interface DetectionPolicy {
  fenceAfterSeconds?: number;
  honorPodTolerations?: boolean;
  minTolerationSeconds?: number;
  injectedTolerationSeconds?: number;
}

export const DEFAULT_FENCE_AFTER_SECONDS = 10;
export const DEFAULT_MIN_TOLERATION_SECONDS = 30;
/** kube-apiserver's --default-unreachable-toleration-seconds unless a cluster changed it. */
export const DEFAULT_INJECTED_TOLERATION_SECONDS = 300;

/** The pod's toleration of an unreachable node (NoExecute), if it has one. */
export function unreachableToleration(pod: V1Pod): V1Toleration | undefined {
  return (pod.spec?.tolerations ?? []).find(
    (t) => (t.key === UNREACHABLE_TAINT || (t.key === undefined && t.operator === "Exists")) && (!t.effect || t.effect === "NoExecute"),
  );
}

/**
 * Exactly the toleration the DefaultTolerationSeconds admission plugin adds to a pod that has none (key, operator
 * Exists, effect NoExecute, no value, the cluster's default seconds). A pod author who writes the very same one
 * cannot be told apart; docs/fencing.md says so. A negative injectedTolerationSeconds turns this off.
 */
export function isInjectedToleration(t: V1Toleration, detection: DetectionPolicy | undefined): boolean {
  const seconds = detection?.injectedTolerationSeconds ?? DEFAULT_INJECTED_TOLERATION_SECONDS;
  return (
    seconds >= 0 &&
    t.key === UNREACHABLE_TAINT &&
    t.operator === "Exists" &&
    t.effect === "NoExecute" &&
    !t.value &&
    t.tolerationSeconds === seconds
  );
}

/** Seconds after the partition this pod wants its node fenced, or null if it tolerates the partition forever. */
export function podWaitSeconds(pod: V1Pod, detection: DetectionPolicy | undefined): number | null {
  const fallback = detection?.fenceAfterSeconds ?? DEFAULT_FENCE_AFTER_SECONDS;
  if (!(detection?.honorPodTolerations ?? true)) return fallback;
  const t = unreachableToleration(pod);
  if (!t || isInjectedToleration(t, detection)) return fallback;
  if (t.tolerationSeconds === undefined || t.tolerationSeconds === null) return null;
  return Math.max(detection?.minTolerationSeconds ?? DEFAULT_MIN_TOLERATION_SECONDS, t.tolerationSeconds);
}
