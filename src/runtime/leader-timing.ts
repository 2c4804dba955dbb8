// The timing rules of leader election, pure (see runtime/leader.ts for why they are safe): when a
// leader must stop, when it may still act, when another holder's Lease has expired, and what to do with
// the Lease as just read. Times are Instants on two clocks, so tests can drive them and a jump of the
// wall clock can be told from time passing.
import { performance } from "node:perf_hooks";
import type { V1Lease } from "@kubernetes/client-node";

/** A point in time on both clocks: performance.now() (monotonic) and Date.now() (wall). */
export interface Instant {
  mono: number;
  wall: number;
}

export const systemNow = (): Instant => ({ mono: performance.now(), wall: Date.now() });

export interface ElectionTiming {
  leaseDurationMs: number;
  renewDeadlineMs: number;
  retryPeriodMs: number;
}

export const DEFAULT_TIMING: ElectionTiming = { leaseDurationMs: 15_000, renewDeadlineMs: 10_000, retryPeriodMs: 2_000 };

/** Why these timings are unsafe or useless, or undefined when they are fine. */
export function timingProblem(t: ElectionTiming): string | undefined {
  if (t.leaseDurationMs <= t.renewDeadlineMs)
    return `the lease duration (${t.leaseDurationMs / 1000} s) must be longer than the renew deadline (${t.renewDeadlineMs / 1000} s): that difference is the margin a stale leader has to stop`;
  // A renewal every retry period must leave more than the act margin (one retry period) of leadership.
  if (t.renewDeadlineMs < 3 * t.retryPeriodMs)
    return `the renew deadline (${t.renewDeadlineMs / 1000} s) must be at least 3 × the retry period (${t.retryPeriodMs / 1000} s), or the leader would be refusing to act between renewals`;
  return undefined;
}

/** Time since `since`, at least: the larger of the monotonic and wall-clock deltas. */
export function elapsedAtLeast(since: Instant, now: Instant): number {
  return Math.max(now.mono - since.mono, now.wall - since.wall);
}

/** Leadership left (ms; ≤ 0 = over) after a successful renew request sent at `renewSentAt`. */
export function leadershipLeftMs(renewSentAt: Instant, now: Instant, t: ElectionTiming): number {
  return t.renewDeadlineMs - elapsedAtLeast(renewSentAt, now);
}

/** assertLeading() passes only while more than this is left. */
export const actMarginMs = (t: ElectionTiming) => t.retryPeriodMs;

export function mayAct(renewSentAt: Instant, now: Instant, t: ElectionTiming): boolean {
  return leadershipLeftMs(renewSentAt, now, t) > actMarginMs(t);
}

/** The parts of a Lease the election looks at. */
export interface LeaseRecord {
  holder: string;
  leaseDurationSeconds?: number;
  transitions: number;
  /** Changes with every write, so "unchanged" means "nobody renewed it". */
  version: string;
}

export function recordOf(lease: V1Lease): LeaseRecord {
  const s = lease.spec ?? {};
  const renew = s.renewTime instanceof Date ? s.renewTime.toISOString() : String(s.renewTime ?? "");
  return {
    holder: s.holderIdentity ?? "",
    leaseDurationSeconds: s.leaseDurationSeconds,
    transitions: s.leaseTransitions ?? 0,
    version: `${s.holderIdentity ?? ""}|${renew}|${s.leaseDurationSeconds ?? ""}|${lease.metadata?.resourceVersion ?? ""}`,
  };
}

/** When we first saw the Lease's current record. */
export interface Observation {
  version: string;
  at: Instant;
}

export function observe(prev: Observation | undefined, record: LeaseRecord, now: Instant): Observation {
  return prev?.version === record.version ? prev : { version: record.version, at: now };
}

export type Decision =
  { kind: "create" } | { kind: "renew" } | { kind: "acquire"; transitions: number } | { kind: "wait"; holder: string; expiresInMs: number };

/** What to do with the Lease as just read (undefined: it does not exist). */
export function decide(o: {
  record: LeaseRecord | undefined;
  observation: Observation | undefined;
  identity: string;
  leading: boolean;
  now: Instant;
  timing: ElectionTiming;
}): Decision {
  const r = o.record;
  if (!r) return { kind: "create" };
  if (r.holder === o.identity && o.leading) return { kind: "renew" };
  // Released, or ours (an acquisition that was too slow to lead on): nobody else acts on it.
  if (!r.holder || r.holder === o.identity) return { kind: "acquire", transitions: r.transitions + 1 };
  // Someone else's: expired only after we saw this very record for a whole lease duration, by our monotonic clock.
  const durationMs = Math.max((r.leaseDurationSeconds ?? 0) * 1000, o.timing.leaseDurationMs);
  const seenFor = o.observation?.version === r.version ? o.now.mono - o.observation.at.mono : 0;
  if (seenFor >= durationMs) return { kind: "acquire", transitions: r.transitions + 1 };
  return { kind: "wait", holder: r.holder, expiresInMs: durationMs - seenFor };
}
