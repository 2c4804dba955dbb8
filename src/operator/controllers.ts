// The leader's controllers and their work queues: the fleet pass (node health), the NodeFences, the FenceAgents and
// the claim locks, with the fence history and the agent monitor they use.
import type { DateTime } from "luxon";
import type { Logger } from "pino";
import type { Config } from "../config.ts";
import { AgentMonitor } from "../controllers/agent-monitor.ts";
import { ClaimLockController } from "../controllers/claim-lock.ts";
import { FenceAgentController } from "../controllers/fence-agent.ts";
import { FenceHistory } from "../controllers/fence-history.ts";
import { NodeFenceController } from "../controllers/node-fence.ts";
import { NodeHealthController } from "../controllers/node-health.ts";
import { RecordPolicyCheck } from "../kube/admission-check.ts";
import { Kube } from "../kube/api.ts";
import type { Caches } from "../kube/caches.ts";
import type { Metrics } from "../metrics.ts";
import { Controller } from "../runtime/controller.ts";
import type { EventRecorder } from "../runtime/events.ts";
import type { InFlight } from "../runtime/in-flight.ts";
import type { Leadership } from "../runtime/leader.ts";
import { WorkQueue } from "../runtime/work-queue.ts";
import type { KubeConfig } from "@kubernetes/client-node";

/** Monitor results that change an agent's status reach it within this, many as one status write. */
const MONITOR_CHANGE_COALESCE_MS = 5_000;

export interface ControllerDeps {
  cfg: Config;
  /** The controllers' API client (writes with the leadership's deadline). */
  kube: Kube;
  /** Reads only (the request timeout): the agent monitor's status queries. */
  reads: KubeConfig;
  caches: Caches;
  events: EventRecorder;
  log: Logger;
  clock: () => DateTime;
  metrics: Metrics;
  leadership: Leadership;
  inflight: InFlight;
  /** Whether this replica leads now (the monitor queries only then). */
  leading: () => boolean;
}

export interface OperatorControllers {
  health: NodeHealthController;
  /** Fence history: each NodeFence's FenceRecord (controllers/fence-history.ts). */
  history: FenceHistory;
  /** Status queries of every node's fence device, on the leader (controllers/agent-monitor.ts). */
  monitor: AgentMonitor;
  claims: ClaimLockController;
  fleet: Controller;
  fences: Controller;
  agents: Controller;
  claimQueue: Controller;
  /** Started in this order: fleet, fences, agents, claims. */
  all: Controller[];
}

export function buildControllers(o: ControllerDeps): OperatorControllers {
  const { cfg, caches, log, metrics } = o;
  const deps = { kube: o.kube, caches, events: o.events, log, clock: o.clock, metrics, leadership: o.leadership, inflight: o.inflight };
  const health = new NodeHealthController({ ...deps, clusterMaxUnhealthyNodes: cfg.clusterMaxUnhealthyNodes });
  // Read before every WatchdogExpired, and by the monitor of watchdog agents (shared, a minute old at most there).
  const recordPolicy = new RecordPolicyCheck(o.reads);
  const history = new FenceHistory({
    kube: o.kube,
    log,
    clock: o.clock,
    retention: { perNode: cfg.historyPerNode, maxAgeDays: cfg.historyMaxAgeDays },
    liveFences: () => new Set(caches.fences.list().map((f) => f.metadata?.uid ?? "")),
  });
  const fence = new NodeFenceController({ ...deps, history, recordPolicy });
  const queue = (name: string) => new WorkQueue({ onMetric: metrics.queue(name) });
  const agentQueue = queue("fence-agent");
  const monitor = new AgentMonitor({
    kube: new Kube(o.reads),
    caches,
    log,
    metrics,
    onChange: (name) => agentQueue.addAfter(name, MONITOR_CHANGE_COALESCE_MS),
    leading: o.leading,
    agentRecords: () => caches.watchAgentRecords(),
  });
  const agent = new FenceAgentController({ ...deps, monitor });
  const fleet = new Controller({
    name: "node-health",
    queue: queue("node-health"),
    reconcile: () => health.reconcile(),
    log,
    // At most half the event loop for fleet passes, however often their inputs change; never more than a second
    // of rest (a pass stretched by a GC pause must not hold the next fence back long).
    restMs: () => Math.min(health.lastPassMs, 1_000),
  });
  const fences = new Controller({
    name: "node-fence",
    queue: queue("node-fence"),
    workers: cfg.fenceWorkers,
    reconcile: (k) => fence.reconcile(k),
    log,
  });
  fence.enqueue = (k) => fences.queue.add(k);
  const agents = new Controller({ name: "fence-agent", queue: agentQueue, reconcile: (k) => agent.reconcile(k), log });
  const claims = new ClaimLockController(deps);
  const claimQueue = new Controller({
    name: "claim-lock",
    queue: queue("claim-lock"),
    workers: 4,
    reconcile: (k) => claims.reconcile(k),
    log,
  });
  claims.watch(claimQueue.queue);
  return { health, history, monitor, claims, fleet, fences, agents, claimQueue, all: [fleet, fences, agents, claimQueue] };
}
