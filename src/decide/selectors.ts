// metav1.LabelSelector matching, and which FencingPolicy governs a node.
import type { V1LabelSelector } from "@kubernetes/client-node";

export function matchesSelector(labels: Record<string, string> | undefined, sel: V1LabelSelector | undefined): boolean {
  const l = labels ?? {};
  for (const [k, v] of Object.entries(sel?.matchLabels ?? {})) if (l[k] !== v) return false;
  for (const e of sel?.matchExpressions ?? []) {
    const has = Object.hasOwn(l, e.key);
    const inValues = has && (e.values ?? []).includes(l[e.key] ?? "");
    if (e.operator === "In" && !inValues) return false;
    if (e.operator === "NotIn" && inValues) return false;
    if (e.operator === "Exists" && !has) return false;
    if (e.operator === "DoesNotExist" && has) return false;
  }
  return true;
}

export interface Named {
  metadata?: { name?: string; labels?: Record<string, string> };
}

/** The policy for a node: the first by name whose selector matches; the others that also match are conflicts to report. */
export function policyForNode<P extends Named & { spec: { nodeSelector?: V1LabelSelector } }>(
  node: Named,
  policies: readonly P[],
): { policy: P | undefined; conflicts: P[] } {
  const matching = policies
    .filter((p) => matchesSelector(node.metadata?.labels, p.spec.nodeSelector))
    .sort((a, b) => (a.metadata?.name ?? "").localeCompare(b.metadata?.name ?? ""));
  return { policy: matching[0], conflicts: matching.slice(1) };
}
