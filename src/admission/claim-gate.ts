// The mutating half of the claim lock: a new pod that uses a guarded claim is created with the
// stockade.io/claim-lock scheduling gate, so the scheduler leaves it alone until the lock controller
// (controllers/claim-lock.ts) has granted it every guarded claim. Pure: the server feeds it the cache.
import type { V1PersistentVolumeClaim, V1Pod } from "@kubernetes/client-node";
import { CLAIM_GATE, claimGuard, claimNames, podOptedOut, type ClaimPolicy } from "../decide/claim-lock.ts";
import { heldWhy, type FenceHold } from "../decide/scope.ts";

export type JsonPatchOp = { op: "add" | "remove" | "replace" | "test"; path: string; value?: unknown };

export type GateAnswer = { allowed: true; gated: boolean; why: string; patch: JsonPatchOp[] } | { allowed: false; message: string };

/**
 * How the admitted pod must change (a gate added, or nothing), or why it is refused. `policy`: what the live policies
 * whose scope has the pod say (undefined: none has it); `held`: the claims a NodeFence that has not ended holds
 * whatever the policies say (decide/scope.ts, gateClaims).
 */
export function gatePod(
  pod: V1Pod,
  pvc: (name: string) => V1PersistentVolumeClaim | undefined,
  policy: ClaimPolicy | undefined,
  held: readonly FenceHold[] = [],
): GateAnswer {
  const name = pod.metadata?.name || pod.metadata?.generateName || "pod";
  if (podOptedOut(pod)) return { allowed: true, gated: false, why: "opted out by label stockade.io/guarded=false", patch: [] };
  const guarded = claimNames(pod)
    .map((c) => {
      const h = held.find((x) => x.claim === c);
      const g = policy ? claimGuard(pvc(c), policy) : undefined;
      return { c, g: g?.guarded || !h ? (g ?? { guarded: false, why: "" }) : { guarded: true, why: heldWhy(h) } };
    })
    .filter((x) => x.g.guarded);
  if (!guarded.length) return { allowed: true, gated: false, why: "uses no guarded claim", patch: [] };
  const why = guarded.map((x) => `${x.c} (${x.g.why})`).join(", ");
  // The apiserver refuses scheduling gates on a pod bound at creation; such a pod would start unprotected.
  if (pod.spec?.nodeName)
    return {
      allowed: false,
      message: `pod ${name} sets spec.nodeName (${pod.spec.nodeName}) and uses guarded claim(s) ${why}: Stockade holds such pods with a scheduling gate until the claim is free, which a pod bound at creation cannot have. Let the scheduler place it (nodeSelector or affinity instead of nodeName), or opt the pod out with the label stockade.io/guarded=false (docs/volumes.md)`,
    };
  const gates = pod.spec?.schedulingGates;
  if (gates?.some((g) => g.name === CLAIM_GATE)) return { allowed: true, gated: true, why, patch: [] };
  const patch: JsonPatchOp[] = gates
    ? [{ op: "add", path: "/spec/schedulingGates/-", value: { name: CLAIM_GATE } }]
    : [{ op: "add", path: "/spec/schedulingGates", value: [{ name: CLAIM_GATE }] }];
  return { allowed: true, gated: true, why, patch };
}
