// metav1.Condition bookkeeping: lastTransitionTime moves only when the status changes.
export interface Condition {
  type: string;
  status: "True" | "False" | "Unknown";
  reason: string;
  message: string;
  observedGeneration?: number;
  lastTransitionTime: string;
}

export function setCondition(list: readonly Condition[] | undefined, c: Omit<Condition, "lastTransitionTime">, now: string): Condition[] {
  const old = (list ?? []).find((x) => x.type === c.type);
  const next: Condition = { ...c, lastTransitionTime: old && old.status === c.status ? old.lastTransitionTime : now };
  return [...(list ?? []).filter((x) => x.type !== c.type), next].sort((a, b) => a.type.localeCompare(b.type));
}

export const findCondition = (list: readonly Condition[] | undefined, type: string) => (list ?? []).find((c) => c.type === type);
