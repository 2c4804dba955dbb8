// The FenceAgent controller: reports in the agent's Ready condition (and an Event when it turns bad)
// whether it could fence the nodes its policies give it — before a node fails, not during the fence.
import type { DateTime } from "luxon";
import type { Logger } from "pino";
import { API_VERSION, type FenceAgent, type FencingPolicy } from "../api/v1alpha1.ts";
import { secretKey, secretRefsFor } from "../agents/parameters.ts";
import { loadRules } from "../agents/registry.ts";
import { checkAgentInSteps, nodesForAgent, type AgentCheck } from "../decide/agent-check.ts";
import { isNotFound, statusCode, type Kube } from "../kube/api.ts";
import type { Caches } from "../kube/caches.ts";
import { findCondition, setCondition, type Condition } from "../kube/conditions.ts";
import { changedBeyondStatus } from "../runtime/controller.ts";
import type { EventRecorder } from "../runtime/events.ts";
import { inTurns } from "../runtime/steps.ts";

export interface FenceAgentDeps {
  kube: Kube;
  caches: Caches;
  events: EventRecorder;
  log: Logger;
  clock: () => DateTime;
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
    const { caches, kube } = this.d;
    const agent = caches.agents.get(name);
    if (!agent) return;
    const allNodes = caches.nodes.list();
    const nodes = nodesForAgent(agent, caches.policies.list(), allNodes);
    // Reads a fence agent's metadata without blocking (checkAgent and the fencing path then hit the cache);
    // a failure is reported by checkAgent.
    await loadRules(agent.spec).catch(() => undefined);
    const secrets = new Map<string, Record<string, string> | undefined>();
    const forbidden: string[] = [];
    for (const n of nodes)
      for (const ref of secretRefsFor(agent.spec, n.metadata?.name ?? "")) {
        const key = secretKey(ref);
        if (secrets.has(key)) continue;
        try {
          secrets.set(key, await kube.readSecret(ref.namespace, ref.name));
        } catch (err) {
          if (statusCode(err) === 403) forbidden.push(key);
          else if (!isNotFound(err)) throw err;
          secrets.set(key, undefined);
        }
      }
    const check: AgentCheck = forbidden.length
      ? {
          ok: false,
          reason: "SecretForbidden",
          message: `the operator may not read Secret ${forbidden.join(", ")}: keep credentials in the operator's namespace, or grant its ServiceAccount get on secrets there (a Role and RoleBinding)`,
          nodes: [],
        }
      : await inTurns(checkAgentInSteps(agent, nodes, secrets, allNodes));
    const gen = agent.metadata?.generation;
    const before = findCondition(agent.status?.conditions as Condition[] | undefined, "Ready");
    const conditions = setCondition(
      agent.status?.conditions as Condition[] | undefined,
      {
        type: "Ready",
        status: check.ok ? "True" : "False",
        reason: check.reason,
        message: check.message.slice(0, 32_000),
        observedGeneration: gen,
      },
      this.d.clock().toUTC().toISO() ?? "",
    );
    const after = conditions.find((c) => c.type === "Ready")!;
    const changed =
      before?.status !== after.status ||
      before.reason !== after.reason ||
      before.message !== after.message ||
      agent.status?.observedGeneration !== gen;
    if (changed) {
      await kube.replaceStatus("fenceagents", { ...agent, status: { ...agent.status, conditions, observedGeneration: gen } } as FenceAgent);
      if (!check.ok) {
        this.d.log.warn({ fenceAgent: name, reason: check.reason }, `FenceAgent ${name} is not ready: ${check.message}`);
        await this.d.events.record(
          { apiVersion: API_VERSION, kind: "FenceAgent", name, uid: agent.metadata?.uid },
          "Warning",
          check.reason,
          check.message,
        );
      }
    }
    // Secrets are not watched (the operator reads only those it needs): look again now and then.
    return { requeueAfterMs: 60_000 };
  }
}
