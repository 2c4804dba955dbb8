// metav1.LabelSelector matching, and which FencingPolicy governs a node.
import type { V1LabelSelector } from "@kubernetes/client-node";

export function matchesSelector(labels: Record<string, string> | undefined, sel: V1LabelSelector | undefined): boolean {
  const l = labels ?? {};
  // Runs for every node and policy on every fleet pass: no entries array made.
  const ml = sel?.matchLabels;
  if (ml) for (const k in ml) if (Object.hasOwn(ml, k) && l[k] !== ml[k]) return false;
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

/** The policy for a node, as policyForNode chooses it, without the conflicts (and without a list made: every node, every pass). */
export function governingPolicy<P extends Named & { spec: { nodeSelector?: V1LabelSelector } }>(
  node: Named,
  policies: readonly P[],
): P | undefined {
  let best: P | undefined;
  for (const p of policies)
    if (
      matchesSelector(node.metadata?.labels, p.spec.nodeSelector) &&
      (!best || (p.metadata?.name ?? "").localeCompare(best.metadata?.name ?? "") < 0)
    )
      best = p;
  return best;
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
