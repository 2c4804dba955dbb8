// `kubectl stockade history NODE`: every fence episode of a node the operator kept (its FenceRecords), newest
// first — when it started and ended, who asked and why, the levels and agents tried, the outcome, what was
// released and on what evidence. The NodeFence of the current episode may have no record yet (the operator
// writes it before the first agent runs); that is said rather than hidden.
import type { DateTime } from "luxon";
import type { FenceRecord, FenceRecordStatusLevels, NodeFence } from "../api/v1alpha1.ts";
import type { Cluster } from "./cluster.ts";
import { age, clip, dash, iso, table } from "./format.ts";

export interface HistoryInput {
  now: DateTime;
  node: string;
  records: readonly FenceRecord[];
  /** The node's NodeFence now, if any. */
  fence: NodeFence | undefined;
}

export async function gatherHistory(c: Cluster, node: string, now: DateTime): Promise<HistoryInput> {
  const [records, fence] = await Promise.all([c.records(node), c.fence(node)]);
  return { now, node, records, fence };
}

const startOf = (r: FenceRecord) => r.status?.startTime ?? String(r.metadata?.creationTimestamp ?? "");

/** Newest first (by start). */
export const newestFirst = (records: readonly FenceRecord[]): FenceRecord[] =>
  [...records].sort((a, b) => startOf(b).localeCompare(startOf(a)));

/** "1: ipmi-a Failed, pdu Succeeded; round 2, 1: ipmi-a Succeeded" — levels and rounds counted from 1. */
export function describeLevels(levels: readonly FenceRecordStatusLevels[] | undefined): string {
  if (!levels?.length) return "-";
  return levels
    .map((l) => `${l.round > 1 ? `round ${l.round}, ` : ""}${l.level}: ${l.agents.map((a) => `${a.name} ${a.outcome ?? "?"}`).join(", ")}`)
    .join("; ");
}

/** Whether the NodeFence's episode is among the records (by uid). */
const recorded = (i: HistoryInput) => !!i.fence && i.records.some((r) => r.spec.nodeFence.uid === i.fence?.metadata?.uid);

export function renderHistory(i: HistoryInput): string {
  const out: string[] = [];
  const records = newestFirst(i.records);
  out.push(`FENCE HISTORY OF ${i.node}: ${records.length} episode(s), newest first`);
  if (records.length)
    out.push(
      table(
        ["STARTED", "ENDED", "ORIGIN", "OUTCOME", "EVIDENCE", "LEVELS", "PODS", "VOLUMES", "REASON"],
        records.map((r) => {
          const s = r.status ?? {};
          return [
            `${iso(s.startTime)} (${age(s.startTime, i.now)} ago)`,
            s.endTime ? `${iso(s.endTime)} (${dash(s.endReason)})` : "-",
            r.spec.origin ?? "Manual",
            dash(s.outcome),
            dash(s.evidence?.method),
            clip(describeLevels(s.levels), 60) || "-",
            String(s.podsReleased ?? 0),
            String(s.volumesReleased ?? 0),
            clip(r.spec.reason, 60) || "-",
          ];
        }),
      ),
    );
  else out.push("none kept: the node was never fenced, or its records are past the operator's retention");
  if (i.fence?.status?.phase && !recorded(i))
    out.push(
      `NodeFence ${i.node} (phase ${i.fence.status.phase}) has no FenceRecord yet: the operator writes it before the first agent runs (is it running?)`,
    );
  return out.join("\n") + "\n";
}

/** `history -o json|yaml`: every kept episode, newest first, as data (times in RFC 3339, levels counted from 1). */
export function historyReport(i: HistoryInput): Record<string, unknown> {
  return {
    time: iso(i.now),
    node: i.node,
    episodes: newestFirst(i.records).map((r) => {
      const s = r.status ?? {};
      return {
        record: r.metadata?.name ?? "",
        nodeFence: r.spec.nodeFence,
        origin: r.spec.origin ?? "Manual",
        requestedVia: r.spec.requestedVia ?? null,
        policy: r.spec.policy ?? null,
        reason: r.spec.reason ?? null,
        started: s.startTime ?? null,
        fenced: s.fencedTime ?? null,
        released: s.releasedTime ?? null,
        ended: s.endTime ?? null,
        endReason: s.endReason ?? null,
        phase: s.phase ?? null,
        outcome: s.outcome ?? null,
        evidence: s.evidence ?? null,
        level: s.levelNumber ?? null,
        levels: s.levels ?? [],
        rounds: s.rounds ?? null,
        failures: s.failures ?? null,
        podsReleased: s.podsReleased ?? 0,
        volumesReleased: s.volumesReleased ?? 0,
        message: s.message ?? null,
      };
    }),
    unrecordedNodeFence: i.fence?.status?.phase && !recorded(i) ? { phase: i.fence.status.phase, uid: i.fence.metadata?.uid } : null,
  };
}
