// What the operator itself observed of the node agents' records (Leases in stockade-node-agent, one per node) on its
// own monotonic clock, for WatchdogExpired (docs/safety.md §8; the arithmetic is decide/watchdog-evidence.ts).
//
// Each record's renewals are timed as the node controller times a kubelet Lease (kube/lease-observer.ts): by when this
// process saw the record change, never by the renewTime's value (the agent's clock). A record's value seen in the first
// list counts as seen at the sync; a record this process has not yet seen change since is `unseen` (it may have been
// silent long before we looked) and counts as silent for the doubt window.
//
// Per NodeFence (by uid): t0, this process's first look at it for watchdog evidence (monotonic, and wall for people),
// and its DoubtWindow, advanced at every look over the longest silence of each other agent since the previous look —
// a silence that began and ended between two looks counts with its whole length.
//
// Memory only, on purpose. A restarted or newly elected operator has watched nothing: it starts again from its own
// first look (after its own first list of the records), counts every other record as unseen until it sees it renewed,
// and never reads t0 from the NodeFence's status (which anyone with write access to status could set). More time,
// never less. The same after a gap of its own (kube/sight.ts: a heartbeat watch down, the apiserver or etcd down, a
// change of leader): no window is open while it cannot see, and a window opened before the gap starts again after it.
import type { V1Lease } from "@kubernetes/client-node";
import type { Sight } from "./sight.ts";
import { parseNodeAgentRecord, type ParsedRecord } from "../decide/node-agent-record.ts";
import type { RecordAuthority } from "../decide/record-authority.ts";
import {
  advanceDoubtWindow,
  doubtControlPlaneDownSeconds,
  startDoubtWindow,
  type AgentSilence,
  type DoubtWindow,
  type WatchdogEvidenceInput,
} from "../decide/watchdog-evidence.ts";

/** Renewal instants kept per record: enough to measure every gap since any look of the last KEEP_MS. */
const KEEP_MS = 30 * 60_000;
/** A fence not looked at for this long is forgotten (deleted, or its watchdog level long over). */
const FORGET_FENCE_MS = 60 * 60_000;

interface Seen {
  /** What identifies this version of the record: its resourceVersion, else its renewTime. */
  key: string;
  /** Monotonic ms this version was first seen. */
  at: number;
  /** Monotonic ms of each change seen after the first sight (the last KEEP_MS, and always the latest). */
  renewals: number[];
  parsed: ParsedRecord;
}

interface FenceWindow {
  t0Ms: number;
  t0Wall: string;
  window: DoubtWindow;
  lastLookMs: number;
}

const versionOf = (l: V1Lease): string => {
  const rt = l.spec?.renewTime as Date | string | undefined | null;
  const renew = rt instanceof Date ? rt.toISOString() : (rt ?? "");
  return l.metadata?.resourceVersion ? `rv:${l.metadata.resourceVersion}` : `rt:${renew}`;
};

export class WatchdogObserver {
  private readonly records = new Map<string, Seen>();
  private readonly fences = new Map<string, FenceWindow>();
  private syncedAt: number | undefined;
  private readonly mono: () => number;
  private readonly wall: () => string;

  private readonly sight: Pick<Sight, "seeingSince"> | undefined;

  constructor(
    mono: () => number = () => performance.now(),
    wall: () => string = () => new Date().toISOString(),
    sight?: Pick<Sight, "seeingSince">,
  ) {
    this.mono = mono;
    this.wall = wall;
    this.sight = sight;
  }

  /**
   * Monotonic ms from which silences count: the records' first list, or the end of this replica's last gap if later;
   * undefined before the first list and while it cannot see.
   */
  private floor(): number | undefined {
    if (this.syncedAt === undefined) return undefined;
    if (!this.sight) return this.syncedAt;
    const seeing = this.sight.seeingSince();
    return seeing === undefined ? undefined : Math.max(this.syncedAt, seeing);
  }

  /** A record added or updated in the cache, or read fresh: a new version is a renewal seen now. */
  observe(lease: V1Lease): void {
    const node = lease.metadata?.name;
    if (!node) return;
    const now = this.mono();
    const key = versionOf(lease);
    const parsed = parseNodeAgentRecord(lease);
    const s = this.records.get(node);
    if (s === undefined) {
      this.records.set(node, { key, at: now, renewals: [], parsed });
      return;
    }
    s.parsed = parsed;
    if (s.key === key) return;
    s.key = key;
    s.at = now;
    s.renewals.push(now);
    while (s.renewals.length > 1 && s.renewals[0]! < now - KEEP_MS) s.renewals.shift();
  }

  /** A record deleted: a new one of that name is a new observation (unseen again). */
  forget(lease: V1Lease): void {
    const node = lease.metadata?.name;
    if (node) this.records.delete(node);
  }

  /** The records' first list is in: until then nothing has been watched, and no look starts a window. */
  synced(): void {
    this.syncedAt ??= this.mono();
  }

  /**
   * What is known of a node's record now, for the agent monitor (status only; reads nothing, starts no window):
   * undefined when no record of that name is in the cache. Silence counts from the first list when not renewed since.
   */
  sighting(node: string): { parsed: ParsedRecord; silentMs: number } | undefined {
    const s = this.records.get(node);
    const floor = this.floor();
    if (!s || floor === undefined) return undefined;
    return { parsed: s.parsed, silentMs: this.mono() - Math.max(s.at, floor) };
  }

  get hasSynced(): boolean {
    return this.syncedAt !== undefined;
  }

  /** Forget a fence's window (the NodeFence is gone). */
  drop(fenceUid: string): void {
    this.fences.delete(fenceUid);
  }

  /**
   * One look for a fence: its t0 (set at the first look), its doubt window advanced over what was seen since the
   * previous look, and the evidence input. `freshRecord` is the node's record read from the apiserver right now
   * (undefined: none); `kubeletSilentMs` how long the node's kubelet Lease has been seen unchanged (LeaseObserver);
   * `authority` what the shell read of that record's authority with it (undefined: not checked, no evidence).
   * Undefined until the records' first list.
   */
  look(
    fenceUid: string,
    node: string,
    freshRecord: V1Lease | undefined,
    kubeletSilentMs: number | undefined,
    authority?: RecordAuthority,
  ): WatchdogEvidenceInput | undefined {
    const floor = this.floor();
    if (floor === undefined) return undefined;
    if (freshRecord) this.observe(freshRecord);
    const nowMs = this.mono();
    const nowWall = this.wall();
    for (const [uid, f] of this.fences) if (nowMs - f.lastLookMs > FORGET_FENCE_MS) this.fences.delete(uid);
    let f = this.fences.get(fenceUid);
    // A window opened before this replica's last gap counted time it could not see: it starts again.
    if (f === undefined || f.t0Ms < floor) {
      f = { t0Ms: nowMs, t0Wall: nowWall, window: startDoubtWindow(nowMs, nowWall), lastLookMs: nowMs };
      this.fences.set(fenceUid, f);
    }
    const parsed = [...this.records.values()].map((s) => s.parsed);
    f.window = advanceDoubtWindow(f.window, node, this.silences(f.lastLookMs, nowMs), nowMs, nowWall, doubtControlPlaneDownSeconds(parsed));
    f.lastLookMs = nowMs;
    const own = freshRecord ? this.records.get(node) : undefined;
    return {
      node,
      record: own?.parsed,
      authority,
      t0Ms: f.t0Ms,
      t0Wall: f.t0Wall,
      window: f.window,
      nowMs,
      kubeletSilentMs,
      recordSilentMs: own ? nowMs - Math.max(own.at, floor) : undefined,
    };
  }

  /** Per record, the longest silence that overlaps (sinceMs, nowMs]: gaps between renewals seen, and the open one. */
  // From the first list, not from the end of the last gap: a longer silence of the others only restarts the window
  // more often (the safe side).
  private silences(sinceMs: number, nowMs: number): AgentSilence[] {
    const out: AgentSilence[] = [];
    for (const [node, s] of this.records) {
      if (!s.renewals.length) {
        out.push({ node, silentMs: nowMs - this.syncedAt!, unseen: true });
        continue;
      }
      let longest = nowMs - s.renewals.at(-1)!;
      for (let i = 1; i < s.renewals.length; i++)
        if (s.renewals[i]! > sinceMs) longest = Math.max(longest, s.renewals[i]! - s.renewals[i - 1]!);
      // The gap before the first renewal kept, counted from the sync: never shorter than from a dropped instant (the safe side).
      if (s.renewals[0]! > sinceMs) longest = Math.max(longest, s.renewals[0]! - this.syncedAt!);
      out.push({ node, silentMs: longest });
    }
    return out;
  }
}
