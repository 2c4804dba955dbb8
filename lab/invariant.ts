// The safety invariant, checked on a recorded timeline: no replacement instance of a pod identity
// becomes Running while an earlier instance may still be alive on a node that failed. An instance on
// a crashed or partitioned node is presumed alive until that machine is powered off or reboots (the
// lab's own power/boot log); a graceful delete on a healthy node is the kubelet's confirmation.
// Claims count as identities too (issue 10): the pods granted one guarded claim (they carry a token for it)
// are instances of "claim ns/name", whatever their names, and their tokens must rise in the order they ran.
import type { TimelineEntry } from "./recorder.ts";

export interface InvariantReport {
  identities: number;
  replacements: number;
  /** Replacements that followed an instance on a failed node: the cases fencing had to make safe. */
  fencedReplacements: number;
  violations: string[];
}

type PodEntry = Extract<TimelineEntry, { source: "pod" }>;
type LabEntry = Extract<TimelineEntry, { source: "lab" }>;

/** forceDeleted: uids Stockade released (from NodeFence status): their deletion proves nothing about the kubelet. */
export function checkInvariant(timeline: readonly TimelineEntry[], forceDeleted: ReadonlySet<string> = new Set()): InvariantReport {
  const lab = timeline.filter((e): e is LabEntry => e.source === "lab");
  const byName = new Map<string, Map<string, PodEntry[]>>();
  for (const e of timeline) {
    if (e.source !== "pod") continue;
    const id = `${e.namespace}/${e.name}`;
    const inst = byName.get(id) ?? new Map<string, PodEntry[]>();
    inst.set(e.uid, [...(inst.get(e.uid) ?? []), e]);
    byName.set(id, inst);
  }
  for (const e of timeline) {
    if (e.source !== "pod") continue;
    for (const c of e.claims ?? []) {
      // Only pods the claim lock granted (a token) are the claim's instances; a shared claim has none.
      const holders = timeline.some((x) => x.source === "pod" && x.uid === e.uid && x.tokens?.[c] !== undefined);
      if (!holders) continue;
      const id = `claim ${e.namespace}/${c}`;
      const inst = byName.get(id) ?? new Map<string, PodEntry[]>();
      inst.set(e.uid, [...(inst.get(e.uid) ?? []), e]);
      byName.set(id, inst);
    }
  }
  const report: InvariantReport = { identities: byName.size, replacements: 0, fencedReplacements: 0, violations: [] };
  for (const [id, instances] of byName) {
    if (!id.startsWith("claim ")) continue;
    const claim = id.slice(id.lastIndexOf("/") + 1);
    const ran = [...instances.values()]
      .map((es) => ({
        uid: es[0]!.uid,
        t: es.find((e) => e.phase === "Running")?.t,
        token: es.find((e) => e.tokens?.[claim])?.tokens?.[claim],
      }))
      .filter((x): x is { uid: string; t: number; token: number } => x.t !== undefined && x.token !== undefined)
      .sort((a, b) => a.t - b.t);
    for (let i = 1; i < ran.length; i++)
      if (ran[i]!.token <= ran[i - 1]!.token)
        report.violations.push(
          `${id}: pod ${ran[i]!.uid} ran with token ${ran[i]!.token} after pod ${ran[i - 1]!.uid} had run with token ${ran[i - 1]!.token}: tokens must rise`,
        );
  }
  for (const [id, instances] of byName) {
    const ordered = [...instances.values()].sort((a, b) => a[0]!.t - b[0]!.t);
    for (let i = 1; i < ordered.length; i++) {
      const running = ordered[i]!.find((e) => e.phase === "Running");
      if (!running) continue;
      report.replacements++;
      for (const prev of ordered.slice(0, i)) {
        const node = prev.find((e) => e.node)?.node;
        if (!node) continue;
        const start = prev[0]!.t;
        const gone = prev.find((e) => e.type === "delete")?.t ?? Infinity;
        // The last fault of that node while the instance existed (after it appeared, before it was gone from the
        // API) and before the replacement ran; a fault after the instance was gone cannot have kept it alive.
        const until = Math.min(running.t, gone);
        const fault =
          lab.filter((e) => e.node === node && (e.kind === "crash" || e.kind === "partition") && e.t >= start && e.t <= until).at(-1) ??
          (forceDeleted.has(prev[0]!.uid) ? { t: start, kind: "force-delete" } : undefined);
        if (!fault) continue;
        const healedBeforeGone = lab.some((e) => e.node === node && e.kind === "heal" && e.t > fault.t && e.t < gone && e.detail.resumed);
        if (healedBeforeGone) continue; // the kubelet came back and confirmed the graceful delete
        report.fencedReplacements++;
        // A claim (not a pod identity) is also safe once the node's storage was fenced: its old instance may run but
        // cannot reach the volume. (In the lab that fence is nominal: the ledger checker judges what was written.)
        const cut = (e: LabEntry) => id.startsWith("claim ") && e.kind === "storage-fence" && e.detail.state === "Fenced";
        const dead = lab.find(
          (e) => e.node === node && e.t > fault.t && ((e.kind === "power" && e.detail.power === "off") || e.kind === "boot" || cut(e)),
        );
        if (!dead || dead.t > running.t) {
          report.violations.push(
            `${id}: replacement ${running.uid} Running at ${new Date(running.t).toISOString()} while ${prev[0]!.uid} on ${node} (${fault.kind} at ${new Date(fault.t).toISOString()}) ${dead ? `was only powered off at ${new Date(dead.t).toISOString()}` : "was never powered off"}`,
          );
        }
      }
    }
  }
  return report;
}
