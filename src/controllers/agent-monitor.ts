// The agent monitor: the leader queries every node's fence device for its power status on a schedule
// (spec.monitor.intervalSeconds of each FenceAgent, spread over the period, a bounded number at a time, each under
// the agent's own deadline), from this process: its network path and the credentials it reads are the ones a
// fence would use. Status queries only: it never powers anything off or on, writes nothing but what it reports
// through the FenceAgent controller (the Ready and Reachable conditions, status.monitor, aggregate Events), and a
// failed query fences nothing. Fences come first: it leaves alone the nodes whose fence or unfence is under way, and
// while any is, it runs one query at a time. Which nodes are due and how results fold: decide/agent-monitor.ts.
import type { V1Node } from "@kubernetes/client-node";
import type { Logger } from "pino";
import type { FenceAgent } from "../api/v1alpha1.ts";
import { resolveParameters, secretKey, secretRefsFor } from "../agents/parameters.ts";
import { driverFor as registryDriverFor, loadRules } from "../agents/registry.ts";
import { redact, runOperation } from "../agents/run.ts";
import { AgentError, type AgentDriver, type AgentErrorKind } from "../agents/types.ts";
import { nodesForAgent } from "../decide/agent-check.ts";
import {
  dueNodes,
  failingTransitions,
  foldMonitor,
  monitorIntervalMs,
  nextResult,
  resultChanged,
  watchdogNodeResult,
  type MonitorFold,
  type MonitorReason,
  type NodeResult,
  type RecordSighting,
} from "../decide/agent-monitor.ts";
import type { Caches } from "../kube/caches.ts";
import type { Metrics } from "../metrics.ts";

/** Status queries at once across every agent, when no fence is under way. */
export const MONITOR_CONCURRENCY = 8;
/** …and while one is: fences come first (their own operations are never queued behind these). */
export const MONITOR_CONCURRENCY_DURING_FENCES = 1;
/** How often the schedule is looked at. */
export const MONITOR_TICK_MS = 1_000;
/** A credentials Secret read for a query is reused this long (a rotation shows at the next query after it). */
const SECRET_TTL_MS = 5_000;
/**
 * Which nodes each agent serves is worked out again at most this often (every node against every policy's selector:
 * milliseconds at 5,000 nodes, not to be spent every tick on the event loop the fences share).
 */
const NODES_REFRESH_MS = 5_000;
/** NodeFence phases during which the node's device is left to the fence. */
const FENCE_BUSY_PHASES = new Set(["Pending", "Fencing", "Unfencing"]);

export interface AgentMonitorDeps {
  kube: { readSecret(namespace: string, name: string): Promise<Record<string, string>> };
  caches: Pick<Caches, "agents" | "policies" | "nodes" | "fences">;
  log: Logger;
  metrics?: Metrics;
  /** A result changed what the agent's status says: the FenceAgent controller should fold it in (coalesced by the caller). */
  onChange: (agent: string) => void;
  now?: () => number;
  /** Whether this replica still leads: a replica that cannot say so starts no query (the new leader's monitor runs). */
  leading?: () => boolean;
  concurrency?: number;
  /**
   * The node agents' records as the operator's cache holds them (Caches.watchAgentRecords: started on the first call,
   * so only once a watchdog agent is monitored). Without it a watchdog agent's nodes stay pending.
   */
  agentRecords?: () => { hasSynced: boolean; sighting(node: string): RecordSighting | undefined };
  /** For tests: the driver of an agent type. */
  driverFor?: (type: string, agent?: string) => AgentDriver;
}

interface AgentState {
  uid: string | undefined;
  generation: number | undefined;
  /** When this spec began to be watched: never-queried nodes are due from here. */
  sinceMs: number;
  results: Map<string, NodeResult>;
  lastStart: Map<string, number>;
  running: Set<string>;
  /** Failing nodes the last aggregate Event (or fold) told about. */
  reported: Set<string>;
  lastQueryMs?: number;
}

export class AgentMonitor {
  private readonly d: AgentMonitorDeps;
  private readonly states = new Map<string, AgentState>();
  private readonly secrets = new Map<string, { atMs: number; value: Promise<Record<string, string> | undefined> }>();
  private readonly abort = new AbortController();
  private readonly work = new Set<Promise<void>>();
  private timer: NodeJS.Timeout | undefined;
  private running = 0;
  private served: { atMs: number; byAgent: Map<string, V1Node[]> } | undefined;

  constructor(d: AgentMonitorDeps) {
    this.d = d;
  }

  private now(): number {
    return this.d.now?.() ?? Date.now();
  }

  start(): void {
    if (this.timer || this.abort.signal.aborted) return;
    this.timer = setInterval(() => this.tick(), MONITOR_TICK_MS);
    this.timer.unref();
    this.tick();
  }

  /** Stops the schedule and cancels the queries under way (they record nothing). */
  async stop(): Promise<void> {
    clearInterval(this.timer);
    this.abort.abort();
    await Promise.all([...this.work]);
  }

  /** Queries in flight now. */
  get inFlight(): number {
    return this.running;
  }

  /** The state of an agent's current spec (reset when it is re-created or its spec changes). */
  private stateOf(agent: FenceAgent): AgentState {
    const name = agent.metadata?.name ?? "";
    const s = this.states.get(name);
    if (s && s.uid === agent.metadata?.uid && s.generation === agent.metadata?.generation) return s;
    const fresh: AgentState = {
      uid: agent.metadata?.uid,
      generation: agent.metadata?.generation,
      sinceMs: this.now(),
      results: new Map(),
      lastStart: new Map(),
      running: new Set(),
      // What was said about the old spec stays said: a node that fails again is not news, one that answers is.
      reported: s?.reported ?? new Set(),
    };
    this.states.set(name, fresh);
    return fresh;
  }

  /** Starts the queries that are due, within the concurrency bound. Exposed for tests. */
  tick(): void {
    if (this.abort.signal.aborted || this.d.leading?.() === false) return;
    const { caches } = this.d;
    const nowMs = this.now();
    const fences = caches.fences.list();
    const busy = new Set(fences.filter((f) => FENCE_BUSY_PHASES.has(f.status?.phase ?? "Pending")).map((f) => f.spec.nodeName));
    const limit = busy.size ? MONITOR_CONCURRENCY_DURING_FENCES : (this.d.concurrency ?? MONITOR_CONCURRENCY);
    const agents = caches.agents.list();
    const names = new Set(agents.map((a) => a.metadata?.name ?? ""));
    for (const n of this.states.keys()) if (!names.has(n)) this.states.delete(n);
    if (this.running >= limit) return;
    if (!this.served || nowMs - this.served.atMs >= NODES_REFRESH_MS || nowMs < this.served.atMs) {
      const policies = caches.policies.list();
      const allNodes = caches.nodes.list();
      this.served = { atMs: nowMs, byAgent: new Map(agents.map((a) => [a.metadata?.name ?? "", nodesForAgent(a, policies, allNodes)])) };
    }
    const due: { agent: FenceAgent; node: V1Node; waitingSince: number }[] = [];
    for (const agent of agents) {
      const intervalMs = monitorIntervalMs(agent);
      const name = agent.metadata?.name ?? "";
      if (intervalMs === undefined) {
        this.states.delete(name);
        continue;
      }
      const s = this.stateOf(agent);
      const nodes = this.served.byAgent.get(name) ?? [];
      const byName = new Map(nodes.map((n) => [n.metadata?.name ?? "", n] as const));
      // Nodes the agent no longer serves (deleted, relabelled, their policy changed) are forgotten.
      for (const m of [s.results, s.lastStart]) for (const n of m.keys()) if (!byName.has(n)) m.delete(n);
      for (const node of dueNodes({
        agent: name,
        nodes: [...byName.keys()],
        intervalMs,
        nowMs,
        sinceMs: s.sinceMs,
        lastStart: s.lastStart,
        running: s.running,
        busy,
      }))
        due.push({ agent, node: byName.get(node)!, waitingSince: s.lastStart.get(node) ?? s.sinceMs });
    }
    due.sort((a, b) => a.waitingSince - b.waitingSince);
    for (const q of due.slice(0, Math.max(0, limit - this.running))) this.launch(q.agent, q.node, nowMs);
  }

  private launch(agent: FenceAgent, node: V1Node, nowMs: number): void {
    const s = this.stateOf(agent);
    const name = node.metadata?.name ?? "";
    s.running.add(name);
    s.lastStart.set(name, nowMs);
    this.running++;
    const p = this.query(agent, node)
      .then((r) => {
        if (this.abort.signal.aborted) return;
        // Nothing to say yet (a record cache not listed yet): due again at once, not an interval later.
        if (!r) return void s.lastStart.delete(name);
        // Recorded only under the spec it was made with.
        if (this.states.get(agent.metadata?.name ?? "") !== s) return;
        const previous = s.results.get(name);
        const next = nextResult(previous, r);
        s.results.set(name, next);
        s.lastQueryMs = r.atMs;
        this.d.metrics?.monitorQueries.inc({
          agent: agent.metadata?.name ?? "",
          result: next.ok ? "Reachable" : (next.reason ?? "Failed"),
        });
        if (resultChanged(previous, next)) this.d.onChange(agent.metadata?.name ?? "");
      })
      .catch((err: unknown) => this.d.log.error({ err: String(err), node: name }, `agent monitor: status query of ${name} went wrong`))
      .finally(() => {
        s.running.delete(name);
        this.running--;
        this.work.delete(p);
      });
    this.work.add(p);
  }

  private secret(namespace: string, name: string): Promise<Record<string, string> | undefined> {
    const key = `${namespace}/${name}`;
    const hit = this.secrets.get(key);
    if (hit && this.now() - hit.atMs < SECRET_TTL_MS) return hit.value;
    const value = this.d.kube.readSecret(namespace, name).catch(() => undefined);
    this.secrets.set(key, { atMs: this.now(), value });
    return value;
  }

  /** One status query, as a fence would make it (same driver, parameters, deadline and retries); undefined when cancelled. */
  private async query(agent: FenceAgent, node: V1Node): Promise<Omit<NodeResult, "failingSinceMs"> | undefined> {
    const nodeName = node.metadata?.name ?? "";
    if (agent.spec.type === "watchdog") return this.lookAtRecord(nodeName);
    let secretValues: string[] = [];
    const fail = (reason: MonitorReason, message: string) => ({
      ok: false,
      reason,
      message: redact(message, secretValues),
      atMs: this.now(),
    });
    try {
      const rules = await loadRules(agent.spec);
      const secrets = new Map<string, Record<string, string>>();
      for (const ref of secretRefsFor(agent.spec, nodeName)) {
        const v = await this.secret(ref.namespace, ref.name);
        if (!v) return fail("Config", `cannot read Secret ${ref.namespace}/${ref.name}: the FenceAgent's Ready condition says why`);
        secrets.set(secretKey(ref), v);
      }
      secretValues = [...secrets.values()].flatMap((m) => Object.values(m));
      const resolved = resolveParameters(agent.spec, node, secrets, rules);
      if ("errors" in resolved) return fail("Config", resolved.errors.join("; "));
      const driver = (this.d.driverFor ?? registryDriverFor)(agent.spec.type, agent.spec.agent);
      let lastKind: AgentErrorKind | undefined;
      let lastMessage: string | undefined;
      const r = await runOperation(driver, { node: nodeName, parameters: resolved.parameters, annotations: {} }, "status", {
        timeoutMs: (agent.spec.timeoutSeconds ?? 30) * 1000,
        retries: agent.spec.retries ?? 2,
        backoffMs: (agent.spec.retryBackoffSeconds ?? 1) * 1000,
        signal: this.abort.signal,
        onAttempt: (a) => {
          if (!a.ok) {
            lastKind = a.kind;
            lastMessage = a.message;
          }
        },
      });
      if (r.outcome === "Cancelled" || this.abort.signal.aborted) return undefined;
      if (r.outcome === "TimedOut") return fail(lastKind && lastKind !== "Cancelled" ? lastKind : "TimedOut", r.message);
      // The device's own words (the node and the kind are said beside them), else the runner's ("not attempted: …").
      if (r.outcome === "Failed")
        return fail(lastKind && lastKind !== "Cancelled" ? lastKind : r.tries ? "Failed" : "Config", lastMessage ?? r.message);
      if (r.power !== "on" && r.power !== "off")
        return fail("BadOutput", `the device answered but not with a power state (${r.power}): an off could not be confirmed`);
      return { ok: true, message: redact(r.message, secretValues), atMs: this.now(), power: r.power };
    } catch (err) {
      if (this.abort.signal.aborted) return undefined;
      const kind = err instanceof AgentError && err.kind !== "Cancelled" ? err.kind : "Failed";
      return fail(kind, err instanceof Error ? err.message : String(err));
    }
  }

  /** A watchdog agent's status query: the node's agent record in the cache (no network, no Secret); undefined until it lists. */
  private async lookAtRecord(node: string): Promise<Omit<NodeResult, "failingSinceMs"> | undefined> {
    const records = this.d.agentRecords?.();
    if (!records) return undefined;
    return watchdogNodeResult(node, { synced: records.hasSynced, sighting: records.sighting(node) }, this.now());
  }

  /**
   * What the monitor says about an agent, for the nodes its policies give it now (the FenceAgent controller folds
   * it into the status).
   */
  fold(agent: FenceAgent, nodes: readonly string[]): MonitorFold {
    const s = monitorIntervalMs(agent) === undefined ? undefined : this.stateOf(agent);
    return foldMonitor({ agent, nodes, results: s?.results ?? new Map() });
  }

  /** The nodes newly failing and newly recovered since the last call for this agent (then remembered as told). */
  transitions(agent: FenceAgent, fold: MonitorFold, nodes: readonly string[]): { lost: string[]; recovered: string[] } {
    const s = monitorIntervalMs(agent) === undefined ? undefined : this.stateOf(agent);
    if (!s) return { lost: [], recovered: [] };
    const t = failingTransitions(s.reported, fold.failing, nodes);
    s.reported = new Set(fold.failing);
    return t;
  }

  /** Sets the monitor's gauges (at scrape time): nodes by last result, and each agent's last query. */
  refreshGauges(): void {
    const m = this.d.metrics;
    if (!m) return;
    m.monitorNodes.reset();
    m.monitorLastRun.reset();
    for (const [agent, s] of this.states) {
      const counts = new Map<string, number>([["Reachable", 0]]);
      for (const r of s.results.values()) {
        const k = r.ok ? "Reachable" : (r.reason ?? "Failed");
        counts.set(k, (counts.get(k) ?? 0) + 1);
      }
      for (const [result, n] of counts) m.monitorNodes.set({ agent, result }, n);
      if (s.lastQueryMs !== undefined) m.monitorLastRun.set({ agent }, s.lastQueryMs / 1000);
    }
  }
}
