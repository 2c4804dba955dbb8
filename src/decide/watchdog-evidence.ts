// WatchdogExpired (issue 30): the operator's arithmetic over a node agent's promise, pure. The wiring into the fence
// machine comes later; this is what it will call, and what the NodeFence status will show.
//
// The promise (decide/isolation.ts): once a NodeFence for its node exists, the node's agent stops feeding its watchdog
// within D seconds (its record's deadline-seconds), and the watchdog resets the machine within T more (its record's
// watchdog-timeout-seconds) — unless a strict majority of all its peers sign that they cannot reach the API either (the
// control plane is down). The operator counts, on its own monotonic clock, from t0: when it first saw the NodeFence
// (it created it or saw it; never from status: a restarted or newly elected operator starts again, so waits longer).
// WatchdogExpired holds iff
//  - the record as last read is valid, for this node, and says armed, with its T and D;
//  - the record's authority is in force (decide/record-authority.ts): the admission policy that limits each agent to
//    its own node's record is installed and enforcing, and the record's holder is the node agent's pod on that node;
//  - neither the kubelet's Lease nor the agent's record changed since t0 (as kube/lease-observer.ts measures: observed
//    unchanged on the monotonic clock, since the operator's first full list);
//  - now − windowStart ≥ (D + T)·(1 + ρ) + m, where windowStart is t0, moved to "now" each time a third or more of the
//    OTHER agents had a record silent for ≥ F − slack (control-plane doubt: the majority rule may be keeping the node
//    up, and those peers' records stop being renewed while they cannot reach the API). More time, never less.
// ρ bounds how much faster the operator's clock may run than the node's clocks (the agent's and the watchdog's);
// m covers the gaps between the agent's checks and feeds and the operator's reads.

import { DEFAULT_CONTROL_PLANE_DOWN_SECONDS, SILENCE_SLACK_SECONDS } from "./isolation.ts";
import type { ParsedRecord } from "./node-agent-record.ts";
import { authorityRefusal, type RecordAuthority } from "./record-authority.ts";

/** ρ: the operator's clock may run at most 5 % faster than the node agent's and its watchdog's. */
export const CLOCK_RATE_DRIFT = 0.05;
/** m: a fixed margin, seconds, added after the drift. */
export const FIXED_MARGIN_SECONDS = 5;
/** How much shorter than F an agent record's observed silence may be and still count as doubt (renewal and watch delays). */
export { SILENCE_SLACK_SECONDS };
/** The share of the other agents that, silent, restarts the window: a third (below the agents' strict majority). */
export const DOUBT_FRACTION = 1 / 3;

/** The control-plane-doubt window: when the wait counts from, and what the last look at the other agents saw. */
export interface DoubtWindow {
  /** Operator monotonic ms: t0, or the last time doubt was seen; only ever moves later. */
  startMs: number;
  /** The same instant on the operator's wall clock (ISO), for people. */
  startWall: string;
  /** Other agents whose record was silent ≥ F − slack at the last look, and how many other agents there were. */
  silentAgents: number;
  agents: number;
  /** How many times doubt moved the start. */
  restarts: number;
}

export const startDoubtWindow = (t0Ms: number, t0Wall: string): DoubtWindow => ({
  startMs: t0Ms,
  startWall: t0Wall,
  silentAgents: 0,
  agents: 0,
  restarts: 0,
});

/**
 * One agent's record, as the operator saw it since its previous call: the longest silence (monotonic ms) it observed,
 * including a silence that ended since (a record renewed just now after 12 s of silence counts as 12 s). The shell
 * must report ended silences too, or a silence that began and ended between two calls would be missed.
 */
export interface AgentSilence {
  node: string;
  silentMs: number;
  /**
   * The operator has not yet seen this record renewed since it started watching (a restarted operator: the silence
   * may have begun long before it looked). Counted as silent until it is seen renewed: more time, never less.
   */
  unseen?: boolean;
}

/**
 * The window after one look at the other agents' records (the fenced node's own excluded): restarted at nowMs when
 * a third or more of them were silent for ≥ F − slack. F is the smallest control-plane-down time any agent uses.
 */
export function advanceDoubtWindow(
  w: DoubtWindow,
  fencedNode: string,
  observations: readonly AgentSilence[],
  nowMs: number,
  nowWall: string,
  controlPlaneDownSeconds: number = DEFAULT_CONTROL_PLANE_DOWN_SECONDS,
): DoubtWindow {
  const others = new Map<string, number>();
  for (const o of observations)
    if (o.node !== fencedNode) others.set(o.node, Math.max(others.get(o.node) ?? 0, o.unseen ? Infinity : o.silentMs));
  const threshold = Math.max(0, controlPlaneDownSeconds - SILENCE_SLACK_SECONDS) * 1000;
  // A silence that cannot be measured (NaN) counts as silent: the safe side.
  const silentAgents = [...others.values()].filter((ms) => !(ms < threshold)).length;
  const agents = others.size;
  const doubt = silentAgents > 0 && silentAgents >= agents * DOUBT_FRACTION;
  if (!doubt) return { ...w, silentAgents, agents };
  const later = nowMs > w.startMs;
  return {
    startMs: later ? nowMs : w.startMs,
    startWall: later ? nowWall : w.startWall,
    silentAgents,
    agents,
    restarts: w.restarts + 1,
  };
}

/**
 * F for the doubt window: the smallest control-plane-down time any valid agent record states (an agent with a smaller
 * F signs "unreachable" sooner, so its record is silent for less when it votes), or the agents' default when no
 * record is valid. Unusable records say nothing about F and are skipped: the operator does not vouch for them either.
 */
export function doubtControlPlaneDownSeconds(records: readonly ParsedRecord[]): number {
  let f = Infinity;
  for (const r of records) if (r.ok) f = Math.min(f, r.record.controlPlaneDownSeconds);
  return Number.isFinite(f) ? f : DEFAULT_CONTROL_PLANE_DOWN_SECONDS;
}

export interface WatchdogEvidenceInput {
  /** The fenced node. */
  node: string;
  /** Its agent record as last read (undefined: none listed). */
  record: ParsedRecord | undefined;
  /**
   * The record's authority as the shell checked it with that read (the record policy, the holder pod, both read fresh);
   * undefined: not checked, which refuses the evidence like a policy not in force.
   */
  authority: RecordAuthority | undefined;
  /** Operator monotonic ms when it first saw the NodeFence, and the same on its wall clock (ISO). */
  t0Ms: number;
  t0Wall: string;
  window: DoubtWindow;
  nowMs: number;
  /** How long (ms) the operator has observed the node's kubelet Lease unchanged (LeaseObserver.silentForMs); undefined: no Lease. */
  kubeletSilentMs: number | undefined;
  /** The same for the node agent's record. */
  recordSilentMs: number | undefined;
  clockRateDrift?: number;
  marginSeconds?: number;
}

/** Every number a person needs to check the arithmetic. */
export interface WatchdogArithmetic {
  watchdogTimeoutSeconds: number;
  deadlineSeconds: number;
  clockRateDrift: number;
  marginSeconds: number;
  /** (D + T)·(1 + ρ) + m, rounded up to the millisecond. */
  requiredSeconds: number;
  /** now − window start, on the operator's monotonic clock. */
  observedSeconds: number;
  /** When the operator first saw the NodeFence, and when the wait counts from (later if doubt restarted it). */
  firstSeen: string;
  windowStart: string;
  silentAgents: number;
  agents: number;
  windowRestarts: number;
}

export type WatchdogEvidence =
  { holds: true; arithmetic: WatchdogArithmetic } | { holds: false; reason: string; arithmetic?: WatchdogArithmetic };

/** (D + T)·(1 + ρ) + m in ms, rounded up (never down) to the millisecond. */
export function requiredWaitMs(
  deadlineSeconds: number,
  watchdogTimeoutSeconds: number,
  rho = CLOCK_RATE_DRIFT,
  marginSeconds = FIXED_MARGIN_SECONDS,
): number {
  const exact = (deadlineSeconds + watchdogTimeoutSeconds) * 1000 * (1 + rho) + marginSeconds * 1000;
  return Math.ceil(Number(exact.toFixed(6)));
}

function recordProblem(i: WatchdogEvidenceInput): string | undefined {
  const r = i.record;
  if (r === undefined) return `node ${i.node} has no node agent record: the watchdog agent cannot vouch for it (the next level applies)`;
  if (!r.ok) return `node ${i.node}'s node agent record is not usable: ${r.problem}`;
  if (r.record.node !== i.node) return `the node agent record read is ${r.record.node}'s, not ${i.node}'s`;
  if (!r.record.armed)
    return `node ${i.node}'s node agent record says its watchdog is not armed: the watchdog agent cannot vouch for it (the next level applies)`;
  const refused = authorityRefusal(i.node, i.authority);
  if (refused) return `${refused} (the next level applies)`;
  return undefined;
}

/** Whether WatchdogExpired holds for the node now; if not, why, in words a person can act on. */
export function watchdogEvidence(i: WatchdogEvidenceInput): WatchdogEvidence {
  const problem = recordProblem(i);
  if (problem !== undefined || i.record === undefined || !i.record.ok) return { holds: false, reason: problem ?? "no record" };
  const rho = i.clockRateDrift ?? CLOCK_RATE_DRIFT;
  const m = i.marginSeconds ?? FIXED_MARGIN_SECONDS;
  if (!(rho >= 0 && rho < 1) || !(m >= 0))
    return { holds: false, reason: `the clock-rate drift (${rho}) must be in [0, 1) and the margin (${m} s) not negative` };
  const { deadlineSeconds: D, watchdogTimeoutSeconds: T } = i.record.record;
  const start = Math.max(i.t0Ms, i.window.startMs);
  const required = requiredWaitMs(D, T, rho, m);
  const observed = i.nowMs - start;
  const arithmetic: WatchdogArithmetic = {
    watchdogTimeoutSeconds: T,
    deadlineSeconds: D,
    clockRateDrift: rho,
    marginSeconds: m,
    requiredSeconds: required / 1000,
    observedSeconds: Math.max(0, observed) / 1000,
    firstSeen: i.t0Wall,
    windowStart: i.window.startMs > i.t0Ms ? i.window.startWall : i.t0Wall,
    silentAgents: i.window.silentAgents,
    agents: i.window.agents,
    windowRestarts: i.window.restarts,
  };
  const sinceT0 = i.nowMs - i.t0Ms;
  if (i.kubeletSilentMs === undefined || !(i.kubeletSilentMs >= sinceT0))
    return {
      holds: false,
      arithmetic,
      reason: `node ${i.node}'s kubelet Lease was renewed (or not yet seen) since the NodeFence was first seen at ${i.t0Wall}: the node may be running`,
    };
  if (i.recordSilentMs === undefined || !(i.recordSilentMs >= sinceT0))
    return {
      holds: false,
      arithmetic,
      reason: `node ${i.node}'s node agent record was renewed (or not yet seen) since the NodeFence was first seen at ${i.t0Wall}: its agent may be running`,
    };
  if (!(observed >= required)) {
    const doubt = i.window.restarts
      ? `; counted from ${arithmetic.windowStart}, when ${i.window.silentAgents} of ${i.window.agents} other agents were silent (the control plane may be down)`
      : "";
    return {
      holds: false,
      arithmetic,
      reason: `waiting for the watchdog: ${arithmetic.observedSeconds} s of (${D} + ${T})·(1 + ${rho}) + ${m} = ${arithmetic.requiredSeconds} s${doubt}`,
    };
  }
  return { holds: true, arithmetic };
}
