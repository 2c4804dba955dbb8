// Prometheus metrics (prom-client). Counters and histograms are fed where things happen; gauges of
// state are computed at scrape time from the caches, so they can never drift from what we see.
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from "prom-client";
import type { NodeFence } from "./api/v1alpha1.ts";
import type { QueueMetric } from "./runtime/work-queue.ts";

/** A NodeFence in one of these phases is still working: one that stays in them is stuck. */
export const IN_PROGRESS_PHASES = ["Pending", "Fencing", "Fenced", "Releasing", "Unfencing"] as const;

/**
 * NodeFences by phase (a fence without a status yet counts as Pending): how many, and the age of the oldest in seconds
 * (from its creation, at `nowMs`).
 */
export function nodeFencePhases(fences: readonly NodeFence[], nowMs: number): Map<string, { count: number; oldestSeconds: number }> {
  const out = new Map<string, { count: number; oldestSeconds: number }>();
  for (const f of fences) {
    const phase = f.status?.phase ?? "Pending";
    const created = Date.parse(String(f.metadata?.creationTimestamp ?? ""));
    const age = Number.isFinite(created) ? Math.max(0, (nowMs - created) / 1000) : 0;
    const p = out.get(phase) ?? { count: 0, oldestSeconds: 0 };
    out.set(phase, { count: p.count + 1, oldestSeconds: Math.max(p.oldestSeconds, age) });
  }
  return out;
}

export class Metrics {
  readonly registry = new Registry();
  readonly fences = new Counter({
    name: "stockade_fences_total",
    help: "NodeFences that ended, by outcome (Fenced, Failed, Cancelled) and the agents of the confirming level",
    labelNames: ["outcome", "agent"] as const,
    registers: [this.registry],
  });
  readonly attempts = new Counter({
    name: "stockade_fence_attempts_total",
    help: "Agent operations, by agent, type, operation and outcome",
    labelNames: ["agent", "type", "operation", "outcome"] as const,
    registers: [this.registry],
  });
  readonly fenceDuration = new Histogram({
    name: "stockade_fence_duration_seconds",
    help: "From the NodeFence's start to the node confirmed fenced",
    buckets: [0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300],
    registers: [this.registry],
  });
  readonly failoverDuration = new Histogram({
    name: "stockade_failover_duration_seconds",
    help: "From the node's last heartbeat to its guarded pods released",
    buckets: [5, 10, 15, 20, 30, 45, 60, 90, 120, 300, 600],
    registers: [this.registry],
  });
  readonly fenceStep = new Histogram({
    name: "stockade_fence_step_duration_seconds",
    help: "Time one NodeFence step took (its API calls), by step; read: the fresh read of the node and its Lease before each step; agent: an agent operation, run in the background",
    labelNames: ["step"] as const,
    buckets: [0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60],
    registers: [this.registry],
  });
  readonly releases = new Counter({
    name: "stockade_releases_total",
    help: "Pods, VolumeAttachments and taints released after a confirmed fence",
    labelNames: ["kind", "action"] as const,
    registers: [this.registry],
  });
  readonly claimGrants = new Counter({
    name: "stockade_claim_grants_total",
    help: "Claim locks granted (a fencing token handed to a gated pod)",
    registers: [this.registry],
  });
  readonly claimGateSeconds = new Histogram({
    name: "stockade_claim_gate_seconds",
    help: "From a gated pod's creation to its claim-lock gate lifted",
    buckets: [0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 30, 60, 300],
    registers: [this.registry],
  });
  readonly admissionRequests = new Counter({
    name: "stockade_admission_requests_total",
    help: "Admission reviews answered, by webhook and outcome (allowed, gated, denied, error)",
    labelNames: ["webhook", "outcome"] as const,
    registers: [this.registry],
  });
  readonly partitioned = new Gauge({ name: "stockade_nodes_partitioned", help: "Nodes partitioned now", registers: [this.registry] });
  readonly guardedPods = new Gauge({
    name: "stockade_guarded_pods",
    help: "Guarded pods on partitioned nodes",
    registers: [this.registry],
  });
  readonly guardedPodsOnMissingNodes = new Gauge({
    name: "stockade_guarded_pods_on_missing_nodes",
    help: "Guarded pods bound to a Node that no longer exists, by node: they wait until a NodeFence fences their machine",
    labelNames: ["node", "remembered"] as const,
    registers: [this.registry],
  });
  readonly stormGuard = new Gauge({
    name: "stockade_storm_guard_holding",
    help: "1 while a storm guard holds fencing back under a policy, by reason",
    labelNames: ["policy", "reason"] as const,
    registers: [this.registry],
  });
  readonly monitorNodes = new Gauge({
    name: "stockade_agent_monitor_nodes",
    help: "Nodes by the result of their last status query through each FenceAgent (the agent monitor, leader only): Reachable, or why it failed (AuthFailed, Unreachable, TimedOut, BadOutput, Config, Failed)",
    labelNames: ["agent", "result"] as const,
    registers: [this.registry],
  });
  readonly monitorLastRun = new Gauge({
    name: "stockade_agent_monitor_last_run_timestamp_seconds",
    help: "When the agent monitor last finished a status query through each FenceAgent, in seconds since the epoch (leader only)",
    labelNames: ["agent"] as const,
    registers: [this.registry],
  });
  readonly monitorQueries = new Counter({
    name: "stockade_agent_monitor_queries_total",
    help: "Status queries the agent monitor made, by FenceAgent and result (Reachable, or why it failed)",
    labelNames: ["agent", "result"] as const,
    registers: [this.registry],
  });
  readonly leader = new Gauge({ name: "stockade_leader", help: "1 while this replica is the leader", registers: [this.registry] });
  readonly admissionPolicy = new Gauge({
    name: "stockade_admission_policy_in_force",
    help: "1 when the admission policy that guards NodeFence status and confirmations is installed and bound (checked every 10 min)",
    registers: [this.registry],
  });
  readonly webhookCertificateExpiry = new Gauge({
    name: "stockade_webhook_certificate_expiry_timestamp_seconds",
    help: "When the webhooks' certificate this replica serves (certificate=serving) and its CA (certificate=ca) expire, in seconds since the epoch; renewed 30 days (serving) and 365 days (CA) before",
    labelNames: ["certificate"] as const,
    registers: [this.registry],
  });
  readonly nodeFences = new Gauge({
    name: "stockade_nodefences",
    help: "NodeFences by phase",
    labelNames: ["phase"] as const,
    registers: [this.registry],
  });
  readonly nodeFenceOldest = new Gauge({
    name: "stockade_nodefence_oldest_seconds",
    help: "Age of the oldest NodeFence in each phase, from its creation",
    labelNames: ["phase"] as const,
    registers: [this.registry],
  });
  readonly heartbeatsVisible = new Gauge({
    name: "stockade_heartbeats_visible",
    help: "1 while this replica sees the nodes' heartbeats without a gap (watches current, apiserver answering); while 0 no node counts as silent",
    registers: [this.registry],
  });
  readonly silenceRestarts = new Counter({
    name: "stockade_silence_restarts_total",
    help: "Times every node's silence was counted again from zero: a gap in this replica's view of the heartbeats (watch, apiserver or etcd down) ended, or it became the leader",
    labelNames: ["source"] as const,
    registers: [this.registry],
  });
  readonly watchRestarts = new Gauge({
    name: "stockade_watch_restarts",
    help: "Watches restarted after an error or a stale stream, since start",
    registers: [this.registry],
  });
  private readonly queueDepth = new Gauge({
    name: "stockade_workqueue_depth",
    help: "Keys waiting",
    labelNames: ["name"] as const,
    registers: [this.registry],
  });
  private readonly queueAdds = new Counter({
    name: "stockade_workqueue_adds_total",
    help: "Keys added",
    labelNames: ["name"] as const,
    registers: [this.registry],
  });
  private readonly queueRetries = new Counter({
    name: "stockade_workqueue_retries_total",
    help: "Keys re-added after a failed reconcile",
    labelNames: ["name"] as const,
    registers: [this.registry],
  });
  private readonly queueLatency = new Histogram({
    name: "stockade_workqueue_queue_duration_seconds",
    help: "Time a key waited in the queue",
    labelNames: ["name"] as const,
    buckets: [0.001, 0.01, 0.1, 0.5, 1, 5, 10, 60],
    registers: [this.registry],
  });
  private readonly workDuration = new Histogram({
    name: "stockade_workqueue_work_duration_seconds",
    help: "Time a reconcile took",
    labelNames: ["name"] as const,
    buckets: [0.001, 0.01, 0.1, 0.5, 1, 5, 10, 30, 60, 300],
    registers: [this.registry],
  });

  constructor() {
    collectDefaultMetrics({ register: this.registry });
  }

  /** The onMetric callback of a WorkQueue named `name`. */
  queue(name: string): (m: QueueMetric, v: number) => void {
    return (m, v) => {
      if (m === "depth") this.queueDepth.set({ name }, v);
      else if (m === "adds") this.queueAdds.inc({ name }, v);
      else if (m === "retries") this.queueRetries.inc({ name }, v);
      else if (m === "queueLatencyMs") this.queueLatency.observe({ name }, v / 1000);
      else this.workDuration.observe({ name }, v / 1000);
    };
  }
}
