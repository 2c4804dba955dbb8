// Who may act, and for how long a write may take: leader election (or a sole replica's leadership without it),
// and the API clients whose write deadlines end no later than another replica could take over.
import { randomBytes } from "node:crypto";
import type { KubeConfig } from "@kubernetes/client-node";
import type { Logger } from "pino";
import type { Config } from "../config.ts";
import { withRequestDeadline, withRequestTimeout } from "../kube/deadline.ts";
import { LeaderElector, SoleLeadership, type Leadership } from "../runtime/leader.ts";

export const LEADER_LEASE = "stockade-operator";

export interface LeadershipHooks {
  onStartedLeading: () => void;
  onStoppedLeading: () => void;
  /** The lowest epoch this replica may take the Lease with. */
  minEpoch: () => number;
  /** Each request of the elector answered or failed (kube/sight.ts). */
  onAnswer?: (ok: boolean, why: string) => void;
}

export interface OperatorLeadership {
  /** With leader election (cfg.leaderElect). */
  elector: LeaderElector | undefined;
  /** Without it: this replica leads while it runs. */
  sole: SoleLeadership | undefined;
  leadership: Leadership;
  /** Reads: the request timeout. */
  reads: KubeConfig;
  /** Writes (the controllers' Kube): the request timeout, cut short where the leadership could end. */
  writes: KubeConfig;
}

export function leadershipFor(kc: KubeConfig, cfg: Config, log: Logger, hooks: LeadershipHooks): OperatorLeadership {
  const requestTimeoutMs = cfg.apiRequestTimeoutSeconds * 1000;
  const timing = {
    leaseDurationMs: cfg.leaseDurationSeconds * 1000,
    renewDeadlineMs: cfg.renewDeadlineSeconds * 1000,
    retryPeriodMs: cfg.retryPeriodSeconds * 1000,
  };
  let elector: LeaderElector | undefined;
  let sole: SoleLeadership | undefined;
  if (cfg.leaderElect) {
    elector = new LeaderElector({
      kc,
      namespace: cfg.leaderElectionNamespace,
      name: LEADER_LEASE,
      // Unique per process (client-go does the same): two processes with one identity would both lead.
      identity: `${cfg.instanceId}_${randomBytes(4).toString("hex")}`,
      timing,
      log,
      onStartedLeading: hooks.onStartedLeading,
      onStoppedLeading: hooks.onStoppedLeading,
      onAnswer: hooks.onAnswer,
      minEpoch: hooks.minEpoch,
    });
  } else sole = new SoleLeadership();
  const leadership: Leadership = elector ?? sole!;
  // Reads: the request timeout. Writes (the controllers' Kube): also no later than another replica could
  // take over, so that a write of a leader cut off from the API is abandoned rather than landing late.
  const writeMs = () =>
    elector
      ? Math.min(requestTimeoutMs, Math.max(0, elector.remainingMs()) + timing.leaseDurationMs - timing.renewDeadlineMs)
      : requestTimeoutMs;
  const writes = withRequestDeadline(kc, (ctx) => (ctx.getHttpMethod() === "GET" ? requestTimeoutMs : writeMs()));
  const reads = withRequestTimeout(kc, requestTimeoutMs);
  return { elector, sole, leadership, reads, writes };
}
