// WatchdogExpired in the fence machine (docs/safety.md §8), pure: what the evidence records of the node's kubelet Lease
// and its node agent record when it is taken, the comparison with fresh reads before each release step, and the
// arithmetic as the NodeFence status shows it. Its own module so that fence-machine.ts stays about steps.
import type { V1Lease } from "@kubernetes/client-node";
import type { DateTime } from "luxon";
import type { NodeFenceStatusEvidenceHeartbeat, NodeFenceStatusWatchdog } from "../api/v1alpha1.ts";
import type { WatchdogArithmetic, WatchdogEvidence } from "./watchdog-evidence.ts";

type Fingerprint = Pick<NodeFenceStatusEvidenceHeartbeat, "leaseResourceVersion" | "agentRecordRenewTime" | "agentRecordResourceVersion">;

const renewTimeOf = (l: V1Lease | undefined): string => {
  const rt = l?.spec?.renewTime as Date | string | undefined | null;
  return rt instanceof Date ? rt.toISOString() : (rt ?? "");
};

/**
 * What WatchdogExpired evidence records beyond the heartbeat (heartbeat.ts already keeps the Lease's renewTime): any
 * write to the kubelet Lease (its resourceVersion) and the agent record's renewTime and resourceVersion, as read fresh
 * when the evidence is taken.
 */
export function agentRecordFingerprint(lease: V1Lease | undefined, record: V1Lease | undefined): Fingerprint {
  return {
    leaseResourceVersion: lease?.metadata?.resourceVersion ?? "",
    agentRecordRenewTime: renewTimeOf(record),
    agentRecordResourceVersion: record?.metadata?.resourceVersion ?? "",
  };
}

/**
 * How the fresh reads differ from what the evidence recorded, as words for people; [] when neither the kubelet Lease
 * nor the agent record was written since. A record not read (or gone) differs: the safe side.
 */
export function agentRecordChanges(
  before: NodeFenceStatusEvidenceHeartbeat,
  lease: V1Lease | undefined,
  record: V1Lease | undefined,
): string[] {
  const now = agentRecordFingerprint(lease, record);
  const out: string[] = [];
  const cmp = (k: keyof Fingerprint, what: string) => {
    if ((before[k] ?? "") !== (now[k] ?? "")) out.push(`${what} ${before[k] || "(none)"} → ${now[k] || "(none)"}`);
  };
  cmp("leaseResourceVersion", "kubelet Lease resourceVersion");
  cmp("agentRecordRenewTime", "node agent record renewTime");
  cmp("agentRecordResourceVersion", "node agent record resourceVersion");
  return out;
}

/** The arithmetic in one line, for messages and the evidence's detail. */
export function describeArithmetic(a: WatchdogArithmetic): string {
  const doubt = a.windowRestarts
    ? `, counted from ${a.windowStart} (restarted ${a.windowRestarts} time(s): ${a.silentAgents} of ${a.agents} other agents silent at the last look)`
    : `, counted from ${a.firstSeen}`;
  return (
    `observed ${a.observedSeconds} s ≥ (D ${a.deadlineSeconds} + T ${a.watchdogTimeoutSeconds})·(1 + ${a.clockRateDrift}) + ${a.marginSeconds} = ` +
    `${a.requiredSeconds} s of the node's kubelet Lease and node agent record silent${doubt}`
  );
}

/**
 * Why the evidence does not hold yet, in words that stay the same from one look to the next while nothing but the
 * time passes (a wait's condition message is rewritten only when it changes): for the wait itself, when it ends on
 * the operator's wall clock for people (the window's start plus the required seconds) instead of the seconds so far.
 */
export function watchdogWaitMessage(w: Extract<WatchdogEvidence, { holds: false }>): string {
  const a = w.arithmetic;
  if (!a || !w.reason.startsWith("waiting for the watchdog")) return w.reason;
  const end = new Date(Date.parse(a.windowStart) + Math.round(a.requiredSeconds * 1000));
  const doubt = a.windowRestarts
    ? ` (restarted ${a.windowRestarts} time(s): ${a.silentAgents} of ${a.agents} other agents were silent at the last look: the control plane may be down)`
    : "";
  const until = Number.isNaN(end.getTime()) ? "" : `, about ${end.toISOString()} on the operator's clock`;
  return (
    `waiting for the watchdog: (${a.deadlineSeconds} + ${a.watchdogTimeoutSeconds})·(1 + ${a.clockRateDrift}) + ${a.marginSeconds} = ${a.requiredSeconds} s ` +
    `of silence counted from ${a.windowStart}${doubt}${until}`
  );
}

/** Whether two status.watchdog say the same but for the time passed (observedSeconds, time): no status write for it. */
export function sameWatchdogStatus(a: NodeFenceStatusWatchdog | undefined, b: NodeFenceStatusWatchdog | undefined): boolean {
  const strip = (x: NodeFenceStatusWatchdog | undefined) => (x ? { ...x, observedSeconds: undefined, time: undefined } : undefined);
  return JSON.stringify(strip(a)) === JSON.stringify(strip(b));
}

/**
 * The arithmetic as the NodeFence status shows it (status.watchdog), so that a person can check it; `reason`, when it
 * does not hold (default: the evidence's own). observedSeconds is as of `time`, truncated to the millisecond.
 */
export function watchdogStatus(w: WatchdogEvidence, now: DateTime, why?: string): NodeFenceStatusWatchdog {
  const time = now.toUTC().toISO({ suppressMilliseconds: true }) ?? "";
  const a = w.arithmetic;
  const reason = w.holds ? {} : { reason: why ?? w.reason };
  if (!a) return { holds: false, ...reason, time };
  return {
    holds: w.holds,
    ...reason,
    watchdogTimeoutSeconds: a.watchdogTimeoutSeconds,
    deadlineSeconds: a.deadlineSeconds,
    clockRateDrift: String(a.clockRateDrift),
    marginSeconds: a.marginSeconds,
    requiredSeconds: String(a.requiredSeconds),
    observedSeconds: String(Math.floor(a.observedSeconds * 1000) / 1000),
    firstSeen: a.firstSeen,
    windowStart: a.windowStart,
    silentAgents: a.silentAgents,
    agents: a.agents,
    windowRestarts: a.windowRestarts,
    time,
  };
}
