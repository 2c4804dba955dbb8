// The health controller: one fleet-wide reconcile (the storm guard and concurrency limits are about
// all nodes at once) that applies the pure fleet decision — NodeDown pod conditions, new NodeFences,
// FencingPolicy status — and logs every change of a node's verdict once, with its inputs.
import type { V1Lease } from "@kubernetes/client-node";
import type { DateTime } from "luxon";
import type { Logger } from "pino";
import { API_VERSION, type FencingPolicy, type NodeFence } from "../api/v1alpha1.ts";
import { decideFleet, type FenceIntent, type FleetDecision, type PolicyState } from "../decide/fleet.ts";
import { NODE_DOWN } from "../decide/node-down.ts";
import type { Kube } from "../kube/api.ts";
import { errorMessage, isNotFound } from "../kube/api.ts";
import type { Caches } from "../kube/caches.ts";
import { findCondition, setCondition, type Condition } from "../kube/conditions.ts";
import type { EventRecorder } from "../runtime/events.ts";

export const FLEET_KEY = "fleet";
export const ORIGIN_LABEL = "stockade.io/origin";

export interface NodeHealthDeps {
  kube: Kube;
  caches: Caches;
  events: EventRecorder;
  log: Logger;
  clock: () => DateTime;
}

const ref = (kind: string, name: string, uid?: string, namespace?: string, apiVersion = "v1") => ({
  apiVersion,
  kind,
  name,
  uid,
  namespace,
});

export class NodeHealthController {
  private readonly lastVerdict = new Map<string, string>();
  private readonly d: NodeHealthDeps;

  constructor(d: NodeHealthDeps) {
    this.d = d;
  }

  decide(): FleetDecision {
    const c = this.d.caches;
    const leases = new Map<string, V1Lease>();
    for (const l of c.leases.list()) leases.set(l.metadata?.name ?? "", l);
    const pvcs = new Map(c.pvcs.list().map((p) => [`${p.metadata?.namespace}/${p.metadata?.name}`, p] as const));
    return decideFleet({
      now: this.d.clock(),
      nodes: c.nodes.list(),
      leases,
      pods: c.pods.list(),
      pvcs,
      pdbs: c.pdbs.list(),
      policies: c.policies.list(),
      fences: new Map(c.fences.list().map((f) => [f.metadata?.name ?? "", f] as const)),
      watchStalenessSeconds: c.heartbeatStalenessSeconds(),
    });
  }

  async reconcile(): Promise<{ requeueAfterMs: number }> {
    const now = this.d.clock();
    const d = this.decide();
    this.logDecisions(d);
    for (const ch of d.nodeDown) await this.applyNodeDown(ch);
    for (const intent of d.create) await this.createFence(intent);
    for (const p of this.d.caches.policies.list()) await this.updatePolicyStatus(p, d.policies.get(p.metadata?.name ?? ""));
    // Time alone changes verdicts (a heartbeat going stale); look again then, and at least every 5 s for the guards.
    const wait = d.nextCheck ? Math.max(100, d.nextCheck.diff(now).as("milliseconds") + 50) : 5_000;
    return { requeueAfterMs: Math.min(wait, 5_000) };
  }

  private logDecisions(d: FleetDecision): void {
    for (const x of d.decisions) {
      const key = `${x.verdict}|${x.message}`;
      if (this.lastVerdict.get(x.node) === key) continue;
      this.lastVerdict.set(x.node, key);
      this.d.log.info(
        {
          node: x.node,
          verdict: x.verdict,
          policy: x.policy,
          health: x.health.state,
          ready: x.health.ready,
          lastHeartbeat: x.health.lastHeartbeat?.toISO(),
          partitionedSince: x.health.partitionedSince?.toISO(),
          bootID: x.health.bootID,
        },
        `decision for ${x.node}: ${x.verdict}: ${x.message}`,
      );
    }
  }

  private async applyNodeDown(ch: FleetDecision["nodeDown"][number]): Promise<void> {
    try {
      await this.d.kube.setPodCondition(ch.namespace, ch.name, ch.uid, NODE_DOWN, ch.condition);
    } catch (err) {
      if (isNotFound(err)) return;
      throw err;
    }
    const pod = ref("Pod", ch.name, ch.uid, ch.namespace);
    if (ch.condition) await this.d.events.record(pod, "Warning", "NodeDown", ch.condition.message);
    else await this.d.events.record(pod, "Normal", "NodeUp", "the pod's node is heartbeating again; NodeDown removed");
  }

  private async createFence(intent: FenceIntent): Promise<void> {
    const { kube, log, events } = this.d;
    // Re-check from the apiserver, not the cache, right before acting.
    const policy = this.d.caches.policies.get(intent.policy);
    if (!policy) return;
    const { node, health: h } = await kube.freshHealth(intent.node, policy.spec.detection?.heartbeatTimeoutSeconds, this.d.clock());
    if (!node || !h) return;
    if (h.state !== "Partitioned") {
      log.info({ node: intent.node, health: h.state }, `not fencing ${intent.node}: a fresh read shows it is ${h.state}`);
      return;
    }
    if (intent.replaces) {
      try {
        await kube.deleteNodeFence(intent.replaces);
      } catch (err) {
        if (!isNotFound(err)) throw err;
      }
    }
    const body: NodeFence = {
      apiVersion: API_VERSION,
      kind: "NodeFence",
      metadata: { name: intent.node, labels: { [ORIGIN_LABEL]: "automatic" } },
      spec: { nodeName: intent.node, origin: "Automatic", policy: intent.policy, reason: intent.reason.slice(0, 1024) },
    };
    try {
      const created = await kube.createNodeFence(body);
      log.warn({ node: intent.node, policy: intent.policy, reason: intent.reason }, `created NodeFence ${intent.node}`);
      await events.record(
        ref("Node", intent.node, node.metadata?.uid),
        "Warning",
        "FenceRequested",
        `FencingPolicy ${intent.policy}: ${intent.reason}`,
      );
      await events.record(ref("NodeFence", intent.node, created.metadata?.uid, undefined, API_VERSION), "Normal", "Created", intent.reason);
    } catch (err) {
      if (errorMessage(err).startsWith("409")) return; // someone (an administrator, another replica) created it first
      throw err;
    }
  }

  private async updatePolicyStatus(p: FencingPolicy, s: PolicyState | undefined): Promise<void> {
    if (!s) return;
    const now = this.d.clock().toUTC().toISO({ suppressMilliseconds: true }) ?? "";
    const gen = p.metadata?.generation;
    let conditions = (p.status?.conditions ?? []) as Condition[];
    const hold = s.holds[0];
    conditions = setCondition(
      conditions,
      hold
        ? {
            type: "StormGuard",
            status: "True",
            reason: hold.reason,
            message: s.holds
              .map((h) => h.message)
              .join("; ")
              .slice(0, 32_000),
            observedGeneration: gen,
          }
        : { type: "StormGuard", status: "False", reason: "NoHold", message: "no guard holds fencing back", observedGeneration: gen },
      now,
    );
    conditions = setCondition(
      conditions,
      s.wouldFence.length
        ? {
            type: "DryRun",
            status: "True",
            reason: "WouldFence",
            message: `dry run: would fence ${s.wouldFence.join(", ")}`,
            observedGeneration: gen,
          }
        : { type: "DryRun", status: "False", reason: p.spec.dryRun ? "NothingToFence" : "Disabled", message: "", observedGeneration: gen },
      now,
    );
    const missing = p.spec.escalation.flatMap((l) => l.agents.map((a) => a.name)).filter((n) => !this.d.caches.agents.get(n));
    conditions = setCondition(
      conditions,
      missing.length
        ? {
            type: "Ready",
            status: "False",
            reason: "AgentNotFound",
            message: `FenceAgent ${[...new Set(missing)].join(", ")} does not exist: create it or fix spec.escalation (fences under this policy fail)`,
            observedGeneration: gen,
          }
        : { type: "Ready", status: "True", reason: "Accepted", message: "policy is in effect", observedGeneration: gen },
      now,
    );
    const status = { ...p.status, conditions, observedGeneration: gen, partitionedNodes: s.partitioned, activeFences: s.activeFences };
    if (canonical(status) === canonical(p.status)) return;
    const before = findCondition(p.status?.conditions as Condition[] | undefined, "StormGuard");
    const updated = await this.d.kube.replaceStatus("fencingpolicies", { ...p, status } as FencingPolicy);
    const pref = ref("FencingPolicy", p.metadata?.name ?? "", p.metadata?.uid, undefined, API_VERSION);
    const after = findCondition(updated.status?.conditions as Condition[] | undefined, "StormGuard");
    if (after?.status === "True" && (before?.status !== "True" || before.message !== after.message)) {
      this.d.log.warn({ policy: p.metadata?.name, reason: after.reason }, `storm guard holds: ${after.message}`);
      await this.d.events.record(pref, "Warning", after.reason, `fencing held back: ${after.message}`);
    } else if (after?.status === "False" && before?.status === "True") {
      await this.d.events.record(pref, "Normal", "StormGuardReleased", "no guard holds fencing back any more");
    }
    if (s.wouldFence.length) await this.d.events.record(pref, "Normal", "WouldFence", `dry run: would fence ${s.wouldFence.join(", ")}`);
  }
}

/** Key-order-independent form of a status, so an unchanged status is never rewritten (each write wakes us again). */
function canonical(v: unknown): string {
  return JSON.stringify(v, (_k, x: unknown) =>
    x && typeof x === "object" && !Array.isArray(x) ? Object.fromEntries(Object.entries(x).sort(([a], [b]) => a.localeCompare(b))) : x,
  );
}
