// The node agent's decision each check (issue 30): whether it may go on feeding its node's watchdog, and until when;
// whether to fence itself now; whether to ask its peers. Pure: the agent's monotonic time is passed in, the shell
// (src/node-agent/) does the API reads, the signed peer exchange and the feeding in its own timer.
//
// The promise the operator relies on (its record's deadline-seconds, D): the agent feeds only while
// now < lastConfirmation + D, where lastConfirmation is the START time (taken before sending) of the latest check that
// established "no NodeFence that would fence me exists": its own fresh GET, or a known peer's signed answer (the
// peer's fresh GET made after our request arrived) — or a round in which a strict majority of ALL known peers signed
// "I cannot reach the API, and have not for at least F seconds" (the control plane is down: stay up, no reboot
// storm). Each such read happened after its check started, so a NodeFence created at t bounds every later extension:
// feeding stops by t + D on the agent's clock. A NodeFence seen by any check stops feeding at once, for good.
// An exception, a failed check, a hung request: none extends, none stops feeding before the deadline.

/** Defaults (seconds, counts): check interval c, failed checks before asking peers N, deadline D, control plane down F. */
export const DEFAULT_CHECK_INTERVAL_SECONDS = 5;
export const DEFAULT_FAILED_CHECKS_BEFORE_PEERS = 2;
export const DEFAULT_DEADLINE_SECONDS = 30;
export const DEFAULT_CONTROL_PLANE_DOWN_SECONDS = 10;
export const DEFAULT_PEER_TIMEOUT_SECONDS = 3;
/**
 * The operator's doubt window (decide/watchdog-evidence.ts) counts another agent's record unchanged for F − this many
 * seconds as an agent that may be voting "the control plane is down" (renewal and watch delays make a voter's record
 * look silent for a little less than F).
 */
export const SILENCE_SLACK_SECONDS = 2;
/**
 * A healthy agent's record is renewed once per check, about every c seconds: F − slack must stay above that, by this
 * much (the check's own read, the write and the operator's watch), or every healthy agent looks silent to the operator,
 * its doubt window never closes and watchdog evidence never holds. So F ≥ c + slack + this.
 */
export const RENEWAL_MARGIN_SECONDS = 1;
/** The smallest F an agent with check interval c accepts (see above), and the default: 2·c, or that if more. */
export const minControlPlaneDownSeconds = (c: number): number => c + SILENCE_SLACK_SECONDS + RENEWAL_MARGIN_SECONDS;
export const defaultControlPlaneDownSeconds = (c: number): number => Math.max(2 * c, minControlPlaneDownSeconds(c));
/** The longest deadline an agent may promise (the record parser refuses more: decide/node-agent-record.ts). */
export const MAX_AGENT_DEADLINE_SECONDS = 600;

export interface AgentConfig {
  /** c: seconds between checks. */
  checkIntervalSeconds: number;
  /** N: consecutive failed API checks before the agent asks its peers. */
  failedChecksBeforePeers: number;
  /** D: the promise; see the file's header. */
  deadlineSeconds: number;
  /** F: how long a peer must have been without the API for its "unreachable" to count towards control-plane-down. */
  controlPlaneDownSeconds: number;
  /**
   * The membership: every other node whose record the agent listed while it had the API. A strict majority of ALL of
   * them is needed for control-plane-down; a peer that does not answer is not a vote.
   */
  peers: readonly string[];
}

/** What the agent's own API check (a fresh GET of the NodeFence named after its node) gave since the last decision. */
export type OwnCheck =
  /** A completed GET. `nodeFence` is classified by nodeFenceVerdict. `startedMs`: taken before the request was sent. */
  | { kind: "ok"; nodeFence: "absent" | "fence"; startedMs: number }
  /** A failed or timed-out GET. */
  | { kind: "failed"; startedMs: number }
  /** A GET still waiting for its answer: it neither extends nor fails anything until it ends. */
  | { kind: "in-flight"; sinceMs: number }
  /** The loop threw (a bug, a full disk, a failed record write): not isolation, not a confirmation. */
  | { kind: "error"; message: string }
  /** Nothing new. */
  | { kind: "none" };

/** A peer's answer, already authenticated by the shell (signed by `from` with its record's key, echoing our nonce). */
export interface PeerAnswer {
  from: string;
  api: "reachable" | "unreachable";
  nodeFence: "absent" | "fence" | "unknown";
  unreachableForSeconds: number;
  /** The start time (our monotonic clock, taken before the requests were sent) of the round this answers. */
  roundStartedMs: number;
}

export type ConfirmedBy = "api" | "peer" | "majority";

export interface AgentState {
  /** Start time of the latest check that established "no fence" (undefined: none yet, so no feeding). */
  lastConfirmationStartMs: number | undefined;
  /** What gave it. */
  confirmedBy: ConfirmedBy | undefined;
  consecutiveApiFailures: number;
  /** Set once a check saw a NodeFence for this node: the agent never feeds again (the watchdog resets the machine). */
  fencedAtMs: number | undefined;
  /** Why it was set, for logs. */
  fenceReason: string | undefined;
}

export const initialAgentState = (): AgentState => ({
  lastConfirmationStartMs: undefined,
  confirmedBy: undefined,
  consecutiveApiFailures: 0,
  fencedAtMs: undefined,
  fenceReason: undefined,
});

export type AgentReason =
  "healthy" | "api-lost-asking-peers" | "control-plane-down-majority" | "isolated" | "fence-requested" | "deadline-passed";

export interface AgentDecision {
  /** Whether the watchdog may be fed now. */
  feed: boolean;
  /** The feeding timer may feed while its monotonic now is below this (undefined: never). */
  feedUntilMs: number | undefined;
  /** Set on the decision that first saw a fence: stop feeding now (and reboot, where allowed). */
  fenceNow: string | undefined;
  /** Ask the peers this round. */
  askPeers: boolean;
  state: AgentState;
  reason: AgentReason;
  /** A sentence for logs. */
  message: string;
}

export interface AgentInput {
  nowMs: number;
  config: AgentConfig;
  state: AgentState;
  own: OwnCheck;
  /** The peers' answers that arrived since the last decision (any round). */
  answers: readonly PeerAnswer[];
}

/** Whether a start time can count: a number, not in the future (a start later than now is a bug, never trusted). */
const usable = (ms: number, now: number) => Number.isFinite(ms) && ms <= now;

/** The latest round in which a strict majority of all known peers signed "unreachable for ≥ F". */
function majorityRound(i: AgentInput): number | undefined {
  const known = new Set(i.config.peers);
  const byRound = new Map<number, Set<string>>();
  for (const a of i.answers) {
    if (!known.has(a.from) || !usable(a.roundStartedMs, i.nowMs)) continue;
    if (a.api !== "unreachable" || !(a.unreachableForSeconds >= i.config.controlPlaneDownSeconds)) continue;
    const voters = byRound.get(a.roundStartedMs) ?? new Set<string>();
    voters.add(a.from);
    byRound.set(a.roundStartedMs, voters);
  }
  let best: number | undefined;
  for (const [round, voters] of byRound) if (2 * voters.size > known.size && (best === undefined || round > best)) best = round;
  return best;
}

/** The fence a check saw, if any: the own GET or a known peer's answer (stopping on it is the safe side). */
function fenceSeen(i: AgentInput): string | undefined {
  if (i.own.kind === "ok" && i.own.nodeFence === "fence") return "the agent's own API read found a NodeFence for this node";
  const known = new Set(i.config.peers);
  const peer = i.answers.find((a) => known.has(a.from) && a.nodeFence === "fence");
  return peer ? `peer ${peer.from} read a NodeFence for this node` : undefined;
}

/**
 * How many distinct known peers of one round must sign "I reach the API and there is no NodeFence for you" before
 * their word extends feeding: ⌊n/6⌋ + 1 of n known peers. One compromised agent's "no NodeFence" must not keep a
 * node that the operator sees silent feeding its watchdog; this is the same tolerance (up to a sixth of the agents
 * lying) as the control-plane-down majority against the operator's doubt window (a third).
 */
export const peerQuorum = (knownPeers: number): number => Math.floor(knownPeers / 6) + 1;

/** The latest start time among this decision's confirmations, and what gave it. */
function newConfirmation(i: AgentInput): { at: number; by: ConfirmedBy } | undefined {
  const found: { at: number; by: ConfirmedBy }[] = [];
  if (i.own.kind === "ok" && i.own.nodeFence === "absent" && usable(i.own.startedMs, i.nowMs))
    found.push({ at: i.own.startedMs, by: "api" });
  const known = new Set(i.config.peers);
  const vouched = new Map<number, Set<string>>();
  for (const a of i.answers)
    if (known.has(a.from) && a.api === "reachable" && a.nodeFence === "absent" && usable(a.roundStartedMs, i.nowMs))
      vouched.set(a.roundStartedMs, (vouched.get(a.roundStartedMs) ?? new Set<string>()).add(a.from));
  const q = peerQuorum(known.size);
  for (const [round, peers] of vouched) if (peers.size >= q) found.push({ at: round, by: "peer" });
  const majority = majorityRound(i);
  if (majority !== undefined) found.push({ at: majority, by: "majority" });
  return found.reduce<{ at: number; by: ConfirmedBy } | undefined>((b, f) => (b === undefined || f.at > b.at ? f : b), undefined);
}

function failuresAfter(own: OwnCheck, before: number): number {
  if (own.kind === "ok") return 0;
  if (own.kind === "failed") return before + 1;
  return before;
}

/** The agent's decision now. See the file's header for the rules. */
export function decideIsolation(i: AgentInput): AgentDecision {
  const { nowMs: now, config: c } = i;
  const D = c.deadlineSeconds * 1000;
  const seen = i.state.fencedAtMs === undefined ? fenceSeen(i) : undefined;
  if (i.state.fencedAtMs !== undefined || seen !== undefined) {
    const state: AgentState = {
      ...i.state,
      fencedAtMs: i.state.fencedAtMs ?? now,
      fenceReason: i.state.fenceReason ?? seen,
      consecutiveApiFailures: failuresAfter(i.own, i.state.consecutiveApiFailures),
    };
    const why = state.fenceReason ?? "a NodeFence for this node";
    return {
      feed: false,
      feedUntilMs: undefined,
      fenceNow: seen,
      askPeers: false,
      state,
      reason: "fence-requested",
      message: `${why}: not feeding the watchdog`,
    };
  }
  const fresh = newConfirmation(i);
  const keep = i.state.lastConfirmationStartMs;
  const better = fresh !== undefined && (keep === undefined || fresh.at > keep);
  const state: AgentState = {
    ...i.state,
    lastConfirmationStartMs: better ? fresh.at : keep,
    confirmedBy: better ? fresh.by : i.state.confirmedBy,
    consecutiveApiFailures: failuresAfter(i.own, i.state.consecutiveApiFailures),
  };
  const feedUntilMs = state.lastConfirmationStartMs === undefined ? undefined : state.lastConfirmationStartMs + D;
  const feed = feedUntilMs !== undefined && now < feedUntilMs;
  const hung = i.own.kind === "in-flight" && now - i.own.sinceMs >= c.failedChecksBeforePeers * c.checkIntervalSeconds * 1000;
  const apiLost = state.consecutiveApiFailures >= c.failedChecksBeforePeers || hung;
  const askPeers = apiLost && c.peers.length > 0;
  const left = feedUntilMs === undefined ? "" : ` (feeding until ${((feedUntilMs - now) / 1000).toFixed(1)} s from now)`;
  const base = { feed, feedUntilMs, fenceNow: undefined, askPeers, state };
  if (!feed) {
    if (apiLost)
      return {
        ...base,
        reason: "isolated",
        message: `no API for ${state.consecutiveApiFailures} checks and no peer confirmed within ${c.deadlineSeconds} s: not feeding`,
      };
    const never = state.lastConfirmationStartMs === undefined;
    return {
      ...base,
      reason: "deadline-passed",
      message: never
        ? "no check has confirmed yet that no NodeFence exists: not feeding"
        : `the last confirmation is ${c.deadlineSeconds} s old or more: not feeding`,
    };
  }
  if (state.confirmedBy === "majority" && apiLost)
    return {
      ...base,
      reason: "control-plane-down-majority",
      message: `most peers cannot reach the API either: the control plane is down, staying up${left}`,
    };
  if (apiLost)
    return { ...base, reason: "api-lost-asking-peers", message: `no API for ${state.consecutiveApiFailures} checks: asking peers${left}` };
  return { ...base, reason: "healthy", message: `confirmed by ${state.confirmedBy}${left}` };
}

/** Whether the feeding timer may feed now: the decision's feedUntilMs, checked at each feed (not when the API call returns). */
export const mayFeed = (feedUntilMs: number | undefined, nowMs: number): boolean => feedUntilMs !== undefined && nowMs < feedUntilMs;

/**
 * Whether a NodeFence read for this node is one the operator has started (so the agent must stop feeding): present,
 * not being deleted, and past the phases in which the operator holds it or may cancel it. Without a phase it is held
 * (no policy selects the node, or a control-plane or etcd node its policy does not allow: the quorum guard); Pending,
 * the operator may still cancel it (a paused policy, the trigger gone); Unfencing and Unfenced are over. Those reset
 * nothing, so the operator's guards hold on nodes that run the agent too. Any other phase counts (Fencing onwards, and
 * a Failed round is retried): the safe side, since the operator's WatchdogExpired clock starts at its own first look in
 * Fencing, after it wrote that phase. The phase is in the status subresource: a NodeFence's creator cannot set it.
 */
export function nodeFenceVerdict(
  f: { metadata?: { deletionTimestamp?: unknown }; status?: { phase?: string } } | undefined,
): "absent" | "fence" {
  if (f === undefined || f.metadata?.deletionTimestamp) return "absent";
  return NOT_STARTED_OR_OVER.has(f.status?.phase ?? "") ? "absent" : "fence";
}

const NOT_STARTED_OR_OVER: ReadonlySet<string> = new Set(["", "Pending", "Unfencing", "Unfenced"]);

/**
 * The agent's timing, checked before it starts: a list of problems, each saying what to change (empty: fine).
 * D must cover N failed checks, F and a peer round trip (request and answer): D ≥ N·c + F + 2·peerTimeout. F ≥ c + 3
 * (minControlPlaneDownSeconds).
 */
export function checkAgentConfig(c: number, n: number, d: number, f: number, peerTimeout: number): string[] {
  const errors: string[] = [];
  const whole = (v: number, name: string, min: number, max: number) => {
    if (!Number.isInteger(v) || v < min || v > max) errors.push(`${name} must be a whole number from ${min} to ${max}; it is ${v}`);
  };
  whole(c, "the check interval (seconds)", 1, 60);
  whole(n, "the failed checks before asking peers", 1, 10);
  whole(d, "the deadline (seconds)", 1, MAX_AGENT_DEADLINE_SECONDS);
  whole(f, "the control-plane-down time F (seconds)", 1, MAX_AGENT_DEADLINE_SECONDS);
  whole(peerTimeout, "the peer request timeout (seconds)", 1, 60);
  if (errors.length) return errors;
  if (peerTimeout >= c) errors.push(`the peer request timeout (${peerTimeout} s) must be shorter than the check interval (${c} s)`);
  const minF = minControlPlaneDownSeconds(c);
  if (f < minF)
    errors.push(
      `F (${f} s) must be at least the check interval + ${SILENCE_SLACK_SECONDS + RENEWAL_MARGIN_SECONDS} s = ${minF} s: below that the operator cannot tell an agent that lost the API from one renewing its record every ${c} s, and watchdog evidence never holds`,
    );
  const need = n * c + f + 2 * peerTimeout;
  if (d < need)
    errors.push(
      `the deadline (${d} s) must be at least N·c + F + 2·peer timeout = ${n}·${c} + ${f} + 2·${peerTimeout} = ${need} s: raise it to ${need} or shorten the others`,
    );
  return errors;
}

/**
 * What a peer may sign as its "unreachableForSeconds" when asked (whole seconds, rounded down): the time since its
 * last successful check STARTED (the protocol's rule) — and, stricter, since its record was last renewed (the write
 * acknowledged), whichever is shorter. The operator sees control-plane doubt only through records that stop being
 * renewed; a check that started F ago but whose record write landed later would let the peer vote while the
 * operator has seen its record silent for less than F. Never an "unreachable" vote without a past success: 0.
 */
export function unreachableForSeconds(
  lastSuccessStartMs: number | undefined,
  lastRecordRenewedMs: number | undefined,
  nowMs: number,
): number {
  if (lastSuccessStartMs === undefined) return 0;
  const since = Math.max(lastSuccessStartMs, lastRecordRenewedMs ?? -Infinity);
  return Math.max(0, Math.floor((nowMs - since) / 1000));
}

/**
 * What a graceful shutdown (SIGTERM) does with the watchdog: disarm it (the magic close: write "V", then close) only
 * while healthy — no fence seen and the last confirmation within D; otherwise close without "V", so the watchdog
 * fires as promised.
 */
export function shutdownAction(state: AgentState, config: AgentConfig, nowMs: number): "disarm" | "let-fire" {
  if (state.fencedAtMs !== undefined || state.lastConfirmationStartMs === undefined) return "let-fire";
  return mayFeed(state.lastConfirmationStartMs + config.deadlineSeconds * 1000, nowMs) ? "disarm" : "let-fire";
}
