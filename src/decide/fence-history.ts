// Fence history: each NodeFence is one episode of its node, and its FenceRecord (crds/stockade.io_fencerecords.yaml)
// is what is left of it after the NodeFence is deleted or replaced by the next episode. Pure: the record is derived
// from the NodeFence alone (its status is the durable state machine), so writing it again is idempotent and a
// restarted operator completes a record that fell behind from the NodeFence as it finds it. Retention (how many
// records per node, how old) is decided here too; the controller (controllers/fence-history.ts) only writes.
import { createHash } from "node:crypto";
import type { DateTime } from "luxon";
import {
  API_VERSION,
  type FenceRecord,
  type FenceRecordStatus,
  type FenceRecordStatusLevels,
  type NodeFence,
  type NodeFenceStatus,
} from "../api/v1alpha1.ts";
import { toDateTime } from "./node-health.ts";

/** Label on a FenceRecord: its node (or, for a node name too long for a label, a hash of it: nodeLabelValue). */
export const HISTORY_NODE_LABEL = "stockade.io/node";

export type Outcome = NonNullable<FenceRecordStatus["outcome"]>;

export interface Retention {
  /** Ended records kept per node, newest first (records of episodes that have not ended are never deleted). */
  perNode: number;
  /** Ended records older than this (by their end) are deleted, whatever their number. */
  maxAgeDays: number;
}

export const DEFAULT_RETENTION: Retention = { perNode: 20, maxAgeDays: 400 };

/** A NodeFence's episode ended by deletion: when (its deletionTimestamp). */
export interface Deleted {
  time: string;
}

/** The label value naming a node: the name when it fits a label value (≤ 63 characters), else a hash of it. */
export function nodeLabelValue(nodeName: string): string {
  if (nodeName.length <= 63 && /^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$/.test(nodeName)) return nodeName;
  return `h-${createHash("sha256").update(nodeName).digest("hex").slice(0, 40)}`;
}

/**
 * The record's name: the node's name and 12 hex digits of the NodeFence's uid, so that one episode always writes the
 * same record (idempotent on retry) and the next episode of the node, a new NodeFence, another. A DNS subdomain.
 */
export function recordName(nodeName: string, fenceUid: string): string {
  const id =
    fenceUid
      .replace(/[^0-9a-f]/gi, "")
      .toLowerCase()
      .slice(0, 12) || "0";
  const head = nodeName.slice(0, 253 - id.length - 1).replace(/[-.]+$/, "");
  return `${head}-${id}`;
}

const clip = (s: string | undefined, max: number): string | undefined => {
  if (s === undefined) return undefined;
  const one = s.replace(/\s+/g, " ").trim();
  return one.length > max ? `${one.slice(0, max - 1)}…` : one;
};

/** Pods and volumes released so far: the counters, or, for a status written before they existed, its list. */
export function releaseCounts(s: NodeFenceStatus): { pods: number; volumes: number } {
  const rs = s.releases ?? [];
  return {
    pods: s.podsReleased ?? rs.filter((r) => r.kind === "Pod" && r.action === "ForceDeleted").length,
    volumes:
      s.volumesReleased ??
      rs.filter((r) => (r.kind === "VolumeAttachment" && r.action === "Deleted") || (r.kind === "ClaimLock" && r.action === "Broken"))
        .length,
  };
}

/** The levels tried, in the order first tried: each agent's last power-off of that round and level (1-based). */
export function levelsTried(s: NodeFenceStatus): FenceRecordStatusLevels[] {
  const out: FenceRecordStatusLevels[] = [];
  const byKey = new Map<string, FenceRecordStatusLevels>();
  for (const a of s.attempts ?? []) {
    if (a.operation !== "off") continue;
    const round = (a.round ?? 0) + 1;
    const level = a.level + 1;
    const key = `${round}/${level}`;
    let entry = byKey.get(key);
    if (!entry) {
      entry = { round, level, agents: [] };
      byKey.set(key, entry);
      out.push(entry);
    }
    const agent = {
      name: a.agent,
      ...(a.agentType ? { type: a.agentType } : {}),
      outcome: a.outcome,
      ...(a.message ? { message: clip(a.message, 512) } : {}),
    };
    const i = entry.agents.findIndex((x) => x.name === a.agent);
    if (i >= 0) entry.agents[i] = agent;
    else if (entry.agents.length < 10) entry.agents.push(agent);
  }
  // The first and the last levels when there were more than the record keeps (a fence failing for days).
  return out.length > 64 ? [...out.slice(0, 16), ...out.slice(-48)] : out;
}

const fencedCondition = (s: NodeFenceStatus) => s.conditions?.find((c) => c.type === "Fenced");

/**
 * What the episode came to. Released wins (the fence did its work, whatever ended it later); then Cancelled (an
 * automatic fence whose node heartbeat again); then Failed (a round failed and none confirmed since); an ended
 * episode with none of these was unfenced or deleted before anything was released.
 */
export function outcomeOf(fence: NodeFence, deleted?: Deleted): Outcome {
  const s = fence.status ?? {};
  const phase = s.phase ?? "";
  if (s.releasedTime) return "Released";
  const ended = phase === "Unfenced" || deleted !== undefined;
  if (phase === "Unfenced" && fencedCondition(s)?.reason === "NodeRecovered") return "Cancelled";
  if (phase === "Failed" || (ended && (s.failures ?? 0) > 0 && !s.fencedTime)) return "Failed";
  return ended ? "Unfenced" : "InProgress";
}

/** The FenceRecord of a NodeFence's episode as its status says now (deleted: it is being deleted). */
export function recordOf(fence: NodeFence, deleted?: Deleted): FenceRecord {
  const s = fence.status ?? {};
  const node = fence.spec.nodeName;
  const uid = fence.metadata?.uid ?? "";
  const unfenced = s.phase === "Unfenced";
  const endTime = unfenced ? (s.unfencedTime ?? deleted?.time) : deleted?.time;
  const endReason = unfenced ? (fencedCondition(s)?.reason ?? "Unfenced") : deleted ? "Deleted" : undefined;
  const counts = releaseCounts(s);
  const created = fence.metadata?.creationTimestamp as Date | string | undefined;
  const createdIso = (created ? toDateTime(created)?.toUTC().toISO({ suppressMilliseconds: true }) : undefined) ?? undefined;
  const ev = s.evidence;
  const level = s.levelNumber ?? (s.currentLevel !== undefined ? s.currentLevel + 1 : undefined);
  const manager = fence.metadata?.managedFields?.[0]?.manager;
  const status: FenceRecordStatus = {
    ...(s.phase ? { phase: s.phase } : {}),
    outcome: outcomeOf(fence, deleted),
    ...(s.startTime || createdIso ? { startTime: s.startTime ?? createdIso } : {}),
    ...(s.fencedTime ? { fencedTime: s.fencedTime } : {}),
    ...(s.releasedTime ? { releasedTime: s.releasedTime } : {}),
    ...(endTime ? { endTime } : {}),
    ...(endReason ? { endReason: endReason.slice(0, 64) } : {}),
    rounds: (s.round ?? 0) + (s.phase ? 1 : 0),
    failures: s.failures ?? 0,
    ...(level !== undefined ? { levelNumber: level } : {}),
    levels: levelsTried(s),
    ...(ev?.method
      ? {
          evidence: {
            method: ev.method,
            ...(ev.time ? { time: ev.time } : {}),
            agents: (ev.agents ?? []).slice(0, 10),
            ...(ev.detail ? { detail: clip(ev.detail, 1024) } : {}),
          },
        }
      : {}),
    podsReleased: counts.pods,
    volumesReleased: counts.volumes,
    ...(fencedCondition(s)?.message ? { message: clip(fencedCondition(s)?.message, 1024) } : {}),
  };
  return {
    apiVersion: API_VERSION,
    kind: "FenceRecord",
    metadata: { name: recordName(node, uid), labels: { [HISTORY_NODE_LABEL]: nodeLabelValue(node) } },
    spec: {
      nodeName: node,
      nodeFence: { name: fence.metadata?.name ?? node, uid },
      origin: fence.spec.origin ?? "Manual",
      ...(manager ? { requestedVia: manager.slice(0, 256) } : {}),
      ...(s.policy || fence.spec.policy ? { policy: s.policy || fence.spec.policy } : {}),
      ...(fence.spec.reason ? { reason: fence.spec.reason.slice(0, 1024) } : {}),
    },
    status,
  };
}

/** Whether a NodeFence has an episode to record: the operator has started it (it has a phase). */
export const hasEpisode = (fence: NodeFence): boolean => !!fence.status?.phase;

const started = (r: FenceRecord) => toDateTime(r.status?.startTime ?? (r.metadata?.creationTimestamp as Date | string | undefined));

/**
 * The records retention deletes: of each node's ended records, those past the newest `perNode` records of the node
 * (ended or not, by start) and those that ended more than `maxAgeDays` ago. A record without an end (an episode that
 * still runs) or whose NodeFence still exists (`live`, by uid: it would only be written again) is never deleted.
 */
export function expiredRecords(
  records: readonly FenceRecord[],
  now: DateTime,
  r: Retention,
  live: ReadonlySet<string> = new Set(),
): FenceRecord[] {
  const byNode = new Map<string, FenceRecord[]>();
  for (const rec of records) {
    const list = byNode.get(rec.spec.nodeName) ?? [];
    list.push(rec);
    byNode.set(rec.spec.nodeName, list);
  }
  const oldest = now.minus({ days: r.maxAgeDays });
  const out: FenceRecord[] = [];
  for (const list of byNode.values()) {
    list.sort((a, b) => (started(b)?.toMillis() ?? 0) - (started(a)?.toMillis() ?? 0));
    list.forEach((rec, i) => {
      const end = toDateTime(rec.status?.endTime);
      if (!end || live.has(rec.spec.nodeFence.uid)) return;
      if (i >= r.perNode || end < oldest) out.push(rec);
    });
  }
  return out;
}
