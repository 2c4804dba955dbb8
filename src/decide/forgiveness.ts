// Pod forgiveness: a pod's node.kubernetes.io/unreachable toleration says how long it is willing to
// wait for its node to come back; the policy's fenceAfterSeconds applies to pods that do not say. Pods
// are written by tenants: the policy's minTolerationSeconds bounds how soon one can get a shared node fenced.
import type { V1Pod } from "@kubernetes/client-node";

export const UNREACHABLE_TAINT = "node.kubernetes.io/unreachable";

export interface DetectionPolicy {
  fenceAfterSeconds?: number;
  honorPodTolerations?: boolean;
  minTolerationSeconds?: number;
}

export const DEFAULT_MIN_TOLERATION_SECONDS = 30;

/** Seconds after the partition this pod wants its node fenced, or null if it tolerates the partition forever. */
export function podWaitSeconds(pod: V1Pod, detection: DetectionPolicy | undefined): number | null {
  const fallback = detection?.fenceAfterSeconds ?? 60;
  if (!(detection?.honorPodTolerations ?? true)) return fallback;
  const t = (pod.spec?.tolerations ?? []).find(
    (t) => (t.key === UNREACHABLE_TAINT || (t.key === undefined && t.operator === "Exists")) && (!t.effect || t.effect === "NoExecute"),
  );
  if (!t) return fallback;
  if (t.tolerationSeconds === undefined || t.tolerationSeconds === null) return null;
  return Math.max(detection?.minTolerationSeconds ?? DEFAULT_MIN_TOLERATION_SECONDS, t.tolerationSeconds);
}
