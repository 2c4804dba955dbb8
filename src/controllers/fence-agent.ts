// The FenceAgent controller: reports in the agent's Ready condition (and an Event when it turns bad)
// whether it could fence the nodes its policies give it — before a node fails, not during the fence: its
// configuration (checked here) and, from the agent monitor (controllers/agent-monitor.ts), whether every node's
// device answered its last status query (the Reachable condition, status.monitor, aggregate Events).
import type { V1Node } from "@kubernetes/client-node";
import type { DateTime } from "luxon";
import type { Logger } from "pino";
import { API_VERSION, type FenceAgent, type FencingPolicy } from "../api/v1alpha1.ts";
import { secretKey, secretRefsFor } from "../agents/parameters.ts";
import { loadRules } from "../agents/registry.ts";
import { checkAgentInSteps } from "../agents/check.ts";
import { nodesForAgent, secretForbidden, type AgentCheck } from "../decide/agent-check.ts";
import { nameFailures, readyVerdict, type MonitorFold } from "../decide/agent-monitor.ts";
import { isNotFound, statusCode, type Kube } from "../kube/api.ts";
import type { Caches } from "../kube/caches.ts";
import { findCondition, setCondition, type Condition } from "../kube/conditions.ts";
import { changedBeyondStatus } from "../runtime/controller.ts";
import type { EventRecorder } from "../runtime/events.ts";
import { inTurns } from "../runtime/steps.ts";
import type { AgentMonitor } from "./agent-monitor.ts";

export interface FenceAgentDeps {
  kube: Kube;
  caches: Caches;
  events: EventRecorder;
  log: Logger;
  clock: () => DateTime;
  /** The agent monitor (leader only); without it Ready is the configuration check alone. */
  monitor?: Pick<AgentMonitor, "fold" | "transitions">;
}

/** status.monitor's lastQueryTime alone is written at most this often (every other change at once). */
const QUERY_TIME_WRITE_MS = 60_000;

/** Whether two status.monitor values differ in more than their query times (which move at every query). */
export function monitorChanged(a: unknown, b: unknown): boolean {
  const strip = (m: unknown) => JSON.stringify(m, (k, v: unknown) => (k === "lastQueryTime" ? undefined : v));
  return strip(a) !== strip(b);
}

/**
 * The agents to check again after a FencingPolicy event: all of them when the policy is new, deleted, or its spec or
 * metadata changed (which nodes each agent serves), none on a write of its status alone, which the check never reads.
 * The fleet pass writes a policy's status at every change of a burst of failures, and each check resolves every
 * node's parameters: at 2,000 nodes these checks were the operator's largest use of CPU during a burst (12.8 s of
 * 175, from a CPU profile), in stretches of ~0.5 s that held every fence's round trips.
 */
export function agentsForPolicyEvent(agents: readonly FenceAgent[], p: FencingPolicy, old?: FencingPolicy): string[] {
  return changedBeyondStatus(p, old) ? agents.map((a) => a.metadata?.name ?? "") : [];
}

export class FenceAgentController {
  private readonly d: FenceAgentDeps;

  constructor(d: FenceAgentDeps) {
    this.d = d;
  }

  async reconcile(name: string): Promise<{ requeueAfterMs: number } | void> {
    const { caches } = this.d;
    const agent = caches.agents.get(name);
    if (!agent) return;
    const allNodes = caches.nodes.list();
    const nodes = nodesForAgent(agent, caches.policies.list(), allNodes);
    const check = await this.check(agent, nodes, allNodes);
    const names = nodes.map((n) => n.metadata?.name ?? "");
    const fold: MonitorFold | undefined = this.d.monitor?.fold(agent, names);
    const { status, changed, readyChanged } = this.nextStatus(agent, check, fold);
    if (changed) await this.d.kube.replaceStatus("fenceagents", { ...agent, status } as FenceAgent);
    if (fold && this.d.monitor) await this.monitorEvents(agent, fold, names);
    if (readyChanged && !check.ok) await this.reportNotReady(agent, check);
    // Secrets are not watched (the operator reads only those it needs): look again now and then.
    return { requeueAfterMs: 60_000 };
  }

  /** The configuration check (agents/check.ts), on the Secrets read now; one the operator may not read fails it. */
  private async check(agent: FenceAgent, nodes: V1Node[], allNodes: readonly V1Node[]): Promise<AgentCheck> {
    // Reads a fence agent's metadata without blocking (checkAgent and the fencing path then hit the cache);
    // a failure is reported by checkAgent.
    await loadRules(agent.spec).catch(() => undefined);
    const { secrets, forbidden } = await this.readSecrets(agent, nodes);
    return forbidden.length ? secretForbidden(forbidden) : await inTurns(checkAgentInSteps(agent, nodes, secrets, allNodes));
  }

  /** Every Secret the nodes' parameters name, once each: undefined when absent or forbidden (those listed). */
  private async readSecrets(
    agent: FenceAgent,
    nodes: V1Node[],
  ): Promise<{ secrets: Map<string, Record<string, string> | undefined>; forbidden: string[] }> {
    const secrets = new Map<string, Record<string, string> | undefined>();
    const forbidden: string[] = [];
    for (const n of nodes)
      for (const ref of secretRefsFor(agent.spec, n.metadata?.name ?? "")) {
        const key = secretKey(ref);
        if (secrets.has(key)) continue;
        try {
          secrets.set(key, await this.d.kube.readSecret(ref.namespace, ref.name));
        } catch (err) {
          if (statusCode(err) === 403) forbidden.push(key);
          else if (!isNotFound(err)) throw err;
          secrets.set(key, undefined);
        }
      }
    return { secrets, forbidden };
  }

  /**
   * The agent's status after this check and the monitor's fold: Ready (and Reachable, status.monitor, when the
   * monitor runs here), whether it differs from what is written, and whether Ready itself changed.
   */
  private nextStatus(
    agent: FenceAgent,
    check: AgentCheck,
    fold: MonitorFold | undefined,
  ): { status: NonNullable<FenceAgent["status"]>; changed: boolean; readyChanged: boolean } {
    const gen = agent.metadata?.generation;
    const now = this.d.clock().toUTC().toISO() ?? "";
    const old = agent.status?.conditions as Condition[] | undefined;
    const ready = readyVerdict(check, fold?.reachable);
    let conditions = setCondition(
      old,
      { type: "Ready", status: ready.status, reason: ready.reason, message: ready.message.slice(0, 32_000), observedGeneration: gen },
      now,
    );
    if (fold)
      conditions = setCondition(
        conditions,
        { type: "Reachable", ...fold.reachable, message: fold.reachable.message.slice(0, 32_000), observedGeneration: gen },
        now,
      );
    const monitor = fold?.summary;
    const sameCondition = (type: string) => {
      const a = findCondition(old, type);
      const b = findCondition(conditions, type);
      return (
        a?.status === b?.status && a?.reason === b?.reason && a?.message === b?.message && a?.observedGeneration === b?.observedGeneration
      );
    };
    const readyChanged = !sameCondition("Ready");
    const oldMonitor = agent.status?.monitor;
    const queryTimeMoved =
      !!monitor?.lastQueryTime &&
      Date.parse(monitor.lastQueryTime) - Date.parse(oldMonitor?.lastQueryTime ?? "1970-01-01T00:00:00Z") >= QUERY_TIME_WRITE_MS;
    const changed =
      readyChanged ||
      !sameCondition("Reachable") ||
      (fold !== undefined && monitorChanged(oldMonitor, monitor)) ||
      queryTimeMoved ||
      agent.status?.observedGeneration !== gen;
    const status = { ...agent.status, conditions, observedGeneration: gen };
    if (fold) {
      if (monitor) status.monitor = monitor;
      else delete status.monitor;
    }
    return { status, changed, readyChanged };
  }

  /** A Warning Event and log line when Ready turns bad on the configuration. */
  private async reportNotReady(agent: FenceAgent, check: AgentCheck): Promise<void> {
    const name = agent.metadata?.name ?? "";
    this.d.log.warn({ fenceAgent: name, reason: check.reason }, `FenceAgent ${name} is not ready: ${check.message}`);
    await this.d.events.record(
      { apiVersion: API_VERSION, kind: "FenceAgent", name, uid: agent.metadata?.uid },
      "Warning",
      check.reason,
      check.message,
    );
  }

  /**
   * One Warning Event for the nodes that lost their way to be fenced since the last, one Normal Event for those that
   * found it again: aggregate, whatever their number (and the recorder folds repeats).
   */
  private async monitorEvents(agent: FenceAgent, fold: MonitorFold, nodes: readonly string[]): Promise<void> {
    const name = agent.metadata?.name ?? "";
    const t = this.d.monitor!.transitions(agent, fold, nodes);
    const ref = { apiVersion: API_VERSION, kind: "FenceAgent", name, uid: agent.metadata?.uid };
    const watchdog = agent.spec.type === "watchdog";
    if (t.lost.length) {
      const listed = new Map((fold.summary?.failures ?? []).map((f) => [f.node, f] as const));
      const failures = t.lost.map((node) => ({ node, reason: listed.get(node)?.reason, message: listed.get(node)?.message.slice(0, 240) }));
      const message =
        `${t.lost.length} node(s) can no longer be fenced through FenceAgent ${name}: ${watchdog ? "their node agent does not cover them" : "their status query failed"}: ${nameFailures(failures)}. ` +
        `Nothing is fenced because of it; fix it before these nodes fail (kubectl get fenceagent ${name} -o yaml: status.monitor)`;
      this.d.log.warn({ fenceAgent: name, nodes: t.lost.slice(0, 20), count: t.lost.length }, message);
      await this.d.events.record(ref, "Warning", "MonitorFailed", message);
    }
    if (t.recovered.length) {
      const what = watchdog ? "have an armed node agent for FenceAgent" : "answer status queries through FenceAgent";
      const message = `${t.recovered.length} node(s) ${what} ${name} again: ${nameFailures(
        t.recovered.map((node) => ({ node })),
        false,
      )}`;
      this.d.log.info({ fenceAgent: name, nodes: t.recovered.slice(0, 20), count: t.recovered.length }, message);
      await this.d.events.record(ref, "Normal", "MonitorRecovered", message);
    }
  }
}
