// The NodeFence controller: performs the state machine's next step (decide/fence-machine.ts), writes
// what happened to status (resourceVersion-guarded), and asks again, until the machine says wait or
// done. Status is the only memory: a restarted or newly elected operator resumes from it.
import type { V1Node, V1Taint } from "@kubernetes/client-node";
import { DateTime } from "luxon";
import type { Logger } from "pino";
import { API_VERSION, type FenceAgent, type NodeFence, type NodeFenceStatus, type NodeFenceStatusAttempts } from "../api/v1alpha1.ts";
import { resolveParameters, secretRefsFor } from "../agents/parameters.ts";
import { driverFor } from "../agents/registry.ts";
import { fenceOff, redact, runOperation } from "../agents/run.ts";
import {
  nextStep,
  FENCED_TAINT,
  OUT_OF_SERVICE_TAINT,
  type FenceObservation,
  type ReleaseItem,
  type Step,
} from "../decide/fence-machine.ts";
import { DEFAULT_HEARTBEAT_TIMEOUT_SECONDS } from "../decide/fleet.ts";
import { assessNode } from "../decide/node-health.ts";
import { errorMessage, isNotFound, type Kube } from "../kube/api.ts";
import type { Caches } from "../kube/caches.ts";
import { setCondition, type Condition } from "../kube/conditions.ts";
import type { EventRecorder } from "../runtime/events.ts";
import type { Metrics } from "../metrics.ts";

export const FENCED_CONDITION = "Fenced";

export interface NodeFenceDeps {
  kube: Kube;
  caches: Caches;
  events: EventRecorder;
  log: Logger;
  clock: () => DateTime;
  metrics?: Metrics;
}

type Status = NodeFenceStatus;
const MAX_STEPS = 100;

export class NodeFenceController {
  private readonly d: NodeFenceDeps;

  constructor(d: NodeFenceDeps) {
    this.d = d;
  }

  private now(): string {
    return this.d.clock().toUTC().toISO() ?? "";
  }

  observe(fence: NodeFence, node: V1Node | undefined): FenceObservation {
    const c = this.d.caches;
    const name = fence.spec.nodeName;
    return {
      now: this.d.clock(),
      fence,
      node,
      policies: c.policies.list(),
      agents: new Map(c.agents.list().map((a) => [a.metadata?.name ?? "", a] as const)),
      pods: c.pods.list().filter((p) => p.spec?.nodeName === name),
      pvcs: new Map(c.pvcs.list().map((p) => [`${p.metadata?.namespace}/${p.metadata?.name}`, p] as const)),
      volumeAttachments: c.volumeAttachments.list(),
    };
  }

  async reconcile(name: string): Promise<{ requeueAfterMs?: number } | void> {
    let fence = await this.d.kube.getNodeFence(name);
    for (let i = 0; i < MAX_STEPS && fence; i++) {
      // The Node is read from the apiserver: bootID and deletion are evidence, a cache may lag.
      const node = await this.d.kube.readNode(fence.spec.nodeName);
      const step = nextStep(this.observe(fence, node));
      if (step.kind === "done") return;
      if (step.kind === "wait") {
        await this.write(fence, (s) => this.waitCondition(fence!, s, step.reason, step.message));
        return { requeueAfterMs: step.requeueAfterMs };
      }
      fence = await this.perform(fence, node, step);
    }
    return { requeueAfterMs: 1_000 };
  }

  /** Writes a new status computed from the current one; returns the stored object. */
  private async write(fence: NodeFence, change: (s: Status) => Status): Promise<NodeFence> {
    const status = change(structuredClone(fence.status ?? {}));
    status.observedGeneration = fence.metadata?.generation;
    return await this.d.kube.replaceStatus("nodefences", { ...fence, status });
  }

  private cond(s: Status, c: Omit<Condition, "lastTransitionTime" | "observedGeneration">, fence: NodeFence): Status {
    s.conditions = setCondition(
      s.conditions as Condition[] | undefined,
      { ...c, observedGeneration: fence.metadata?.generation },
      this.now(),
    );
    return s;
  }

  private waitCondition(fence: NodeFence, s: Status, reason: string, message: string): Status {
    const type = s.phase === "Releasing" ? "Released" : "Fenced";
    return this.cond(s, { type, status: "False", reason, message }, fence);
  }

  private event(fence: NodeFence, type: "Normal" | "Warning", reason: string, message: string, node?: V1Node): Promise<void>[] {
    const out = [
      this.d.events.record(
        { apiVersion: API_VERSION, kind: "NodeFence", name: fence.metadata?.name ?? "", uid: fence.metadata?.uid },
        type,
        reason,
        message,
      ),
    ];
    if (node)
      out.push(
        this.d.events.record(
          { apiVersion: "v1", kind: "Node", name: node.metadata?.name ?? "", uid: node.metadata?.uid },
          type,
          reason,
          message,
        ),
      );
    return out;
  }

  private async perform(
    fence: NodeFence,
    node: V1Node | undefined,
    step: Exclude<Step, { kind: "done" | "wait" }>,
  ): Promise<NodeFence | undefined> {
    const { log } = this.d;
    const nodeName = fence.spec.nodeName;
    const flog = log.child({ nodeFence: fence.metadata?.name, step: step.kind });
    switch (step.kind) {
      case "start": {
        // The node was just read; only its Lease is missing for the last heartbeat (the timeout does not matter here).
        const beat = node
          ? assessNode(node, await this.d.kube.readLease(nodeName), this.d.clock(), DEFAULT_HEARTBEAT_TIMEOUT_SECONDS).lastHeartbeat
          : undefined;
        const next = await this.write(fence, (s) => {
          s.phase = "Pending";
          s.policy = step.policy;
          s.bootID = step.bootID;
          if (beat) s.lastHeartbeatTime = beat.toUTC().toISO() ?? undefined;
          s.startTime = this.now();
          return this.cond(
            s,
            { type: FENCED_CONDITION, status: "False", reason: "Pending", message: `fencing requested (${fence.spec.origin ?? "Manual"})` },
            fence,
          );
        });
        flog.info({ policy: step.policy, bootID: step.bootID, origin: fence.spec.origin }, `fencing ${nodeName}: pending`);
        await Promise.all(
          this.event(
            next,
            "Normal",
            "FencePending",
            `fencing ${nodeName} under FencingPolicy ${step.policy}: ${fence.spec.reason ?? ""}`,
            node,
          ),
        );
        return next;
      }
      case "fail": {
        const next = await this.write(fence, (s) => {
          s.phase = "Failed";
          this.cond(s, { type: "Failed", status: "True", reason: step.reason, message: step.message }, fence);
          return this.cond(
            s,
            { type: FENCED_CONDITION, status: "False", reason: step.reason, message: "not fenced: nothing will be released" },
            fence,
          );
        });
        flog.error({ reason: step.reason }, `fencing ${nodeName} failed: ${step.message}`);
        this.d.metrics?.fences.inc({ outcome: "Failed", agent: "" });
        await Promise.all(this.event(next, "Warning", "FenceFailed", `${step.message}; nothing was released`, node));
        return next;
      }
      case "begin": {
        if (fence.spec.origin === "Automatic" && !(await this.stillPartitioned(fence))) return await this.cancel(fence, node);
        const next = await this.write(fence, (s) => {
          s.phase = "Fencing";
          s.currentLevel = 0;
          return this.cond(s, { type: FENCED_CONDITION, status: "False", reason: "Fencing", message: "running escalation level 1" }, fence);
        });
        return next;
      }
      case "interrupted": {
        return await this.write(fence, (s) => {
          const a = s.attempts?.[step.index];
          if (a) {
            a.outcome = "Interrupted";
            a.endTime = this.now();
            a.message = "the operator stopped during this attempt; it is retried (agents are idempotent)";
          }
          return s;
        });
      }
      case "escalate": {
        const next = await this.write(fence, (s) => {
          s.currentLevel = step.to;
          return this.cond(s, { type: FENCED_CONDITION, status: "False", reason: "Escalating", message: step.message }, fence);
        });
        flog.warn({ level: step.to + 1 }, step.message);
        await Promise.all(this.event(next, "Warning", "Escalating", step.message, node));
        return next;
      }
      case "runAgent":
        return await this.runAgent(fence, node, step.level, step.agent, step.operation);
      case "confirmed": {
        const next = await this.write(fence, (s) => {
          s.phase = "Fenced";
          s.fencedTime = this.now();
          s.evidence = { method: step.evidence.method, time: this.now(), agents: step.evidence.agents, detail: step.evidence.detail };
          return this.cond(
            s,
            { type: FENCED_CONDITION, status: "True", reason: step.evidence.method, message: step.evidence.detail },
            fence,
          );
        });
        flog.warn({ evidence: step.evidence }, `node ${nodeName} confirmed fenced: ${step.evidence.detail}`);
        this.d.metrics?.fences.inc({ outcome: "Fenced", agent: step.evidence.agents.join(",") || step.evidence.method });
        const started = next.status?.startTime ? DateTime.fromISO(next.status.startTime) : undefined;
        if (started?.isValid) this.d.metrics?.fenceDuration.observe(this.d.clock().diff(started).as("seconds"));
        await Promise.all(
          this.event(next, "Warning", "Fenced", `confirmed fenced (${step.evidence.method}): ${step.evidence.detail}`, node),
        );
        return next;
      }
      case "markNode": {
        if (node) {
          await this.addTaint(node, { key: FENCED_TAINT, effect: "NoExecute", value: "true" });
          await this.d.kube.setNodeCondition(nodeName, FENCED_CONDITION, {
            type: FENCED_CONDITION,
            status: "True",
            reason: "FencedByStockade",
            message: `fenced by Stockade (NodeFence ${fence.metadata?.name}); it stays tainted until unfenced`,
            lastTransitionTime: new Date(),
            lastHeartbeatTime: new Date(),
          });
        }
        return await this.write(fence, (s) => {
          s.phase = "Releasing";
          return this.cond(
            s,
            { type: "Released", status: "False", reason: "Releasing", message: "releasing the node's guarded pods and volumes" },
            fence,
          );
        });
      }
      case "release":
        return await this.release(fence, node, step.item);
      case "released": {
        const next = await this.write(fence, (s) => {
          s.phase = "Released";
          s.releasedTime = this.now();
          const n = (s.releases ?? []).length;
          return this.cond(s, { type: "Released", status: "True", reason: "Released", message: `${n} release(s) recorded` }, fence);
        });
        flog.info({ releases: next.status?.releases?.length }, `node ${nodeName}: released`);
        const beat = next.status?.lastHeartbeatTime ? DateTime.fromISO(next.status.lastHeartbeatTime) : undefined;
        if (beat?.isValid) this.d.metrics?.failoverDuration.observe(this.d.clock().diff(beat).as("seconds"));
        await Promise.all(
          this.event(next, "Normal", "Released", `released ${next.status?.releases?.length ?? 0} item(s) of ${nodeName}`, node),
        );
        return next;
      }
      case "startUnfence": {
        const next = await this.write(fence, (s) => {
          s.phase = "Unfencing";
          return this.cond(s, { type: FENCED_CONDITION, status: "False", reason: step.reason, message: "unfencing" }, fence);
        });
        await Promise.all(this.event(next, "Normal", "Unfencing", `unfencing ${nodeName} (${step.reason})`, node));
        return next;
      }
      case "unmarkNode": {
        if (node) {
          const ours = new Set([
            FENCED_TAINT,
            ...(fence.status?.releases?.some((r) => r.kind === "Taint" && r.action === "Added") ? [OUT_OF_SERVICE_TAINT] : []),
          ]);
          const taints = node.spec?.taints ?? [];
          if (taints.some((t) => ours.has(t.key)))
            await this.d.kube.setTaints(
              node,
              taints.filter((t) => !ours.has(t.key)),
            );
          await this.d.kube.setNodeCondition(nodeName, FENCED_CONDITION, null);
        }
        const next = await this.write(fence, (s) => {
          s.phase = "Unfenced";
          s.unfencedTime = this.now();
          return this.cond(
            s,
            { type: FENCED_CONDITION, status: "False", reason: step.reason, message: "unfenced: taint and node condition removed" },
            fence,
          );
        });
        flog.info({ reason: step.reason }, `node ${nodeName} unfenced`);
        await Promise.all(this.event(next, "Normal", "Unfenced", `node ${nodeName} unfenced (${step.reason})`, node));
        return next;
      }
    }
  }

  /** Automatic fencing needs sustained silence, re-read from the apiserver right before acting. */
  private async stillPartitioned(fence: NodeFence): Promise<boolean> {
    const policy = this.d.caches.policies.get(fence.status?.policy ?? fence.spec.policy ?? "");
    const { health } = await this.d.kube.freshHealth(fence.spec.nodeName, policy?.spec.detection?.heartbeatTimeoutSeconds, this.d.clock());
    return !health || health.state === "Partitioned";
  }

  private async cancel(fence: NodeFence, node: V1Node | undefined): Promise<NodeFence> {
    const next = await this.write(fence, (s) => {
      s.phase = "Unfenced";
      s.unfencedTime = this.now();
      return this.cond(
        s,
        {
          type: FENCED_CONDITION,
          status: "False",
          reason: "NodeRecovered",
          message: "the node heartbeats again: fencing cancelled before any action",
        },
        fence,
      );
    });
    this.d.log.info({ node: fence.spec.nodeName }, `fencing of ${fence.spec.nodeName} cancelled: heartbeats are back`);
    this.d.metrics?.fences.inc({ outcome: "Cancelled", agent: "" });
    await Promise.all(this.event(next, "Normal", "FenceCancelled", "the node heartbeats again: nothing was powered off or released", node));
    return next;
  }

  private async runAgent(
    fence: NodeFence,
    node: V1Node | undefined,
    level: number,
    agent: FenceAgent,
    op: "off" | "on",
  ): Promise<NodeFence> {
    const nodeName = fence.spec.nodeName;
    const agentName = agent.metadata?.name ?? "";
    if (op === "off" && fence.spec.origin === "Automatic" && !(await this.stillPartitioned(fence))) {
      const anyOff = (fence.status?.attempts ?? []).some((a) => a.operation === "off" && a.outcome !== "Failed");
      if (!anyOff) return await this.cancel(fence, node);
    }
    const started = this.now();
    const index = fence.status?.attempts?.length ?? 0;
    let current = await this.write(fence, (s) => {
      s.attempts = [
        ...(s.attempts ?? []),
        { level, agent: agentName, operation: op, startTime: started, outcome: "InProgress", message: "" },
      ];
      return s;
    });
    const flog = this.d.log.child({ nodeFence: fence.metadata?.name, agent: agentName, level: level + 1, operation: op });
    flog.info(`running ${agent.spec.type} agent ${agentName} (${op}) for ${nodeName}`);
    let outcome: NodeFenceStatusAttempts["outcome"];
    let message: string;
    let secretValues: string[] = [];
    try {
      const secrets = new Map<string, Record<string, string>>();
      for (const r of secretRefsFor(agent.spec, nodeName)) {
        try {
          secrets.set(`${r.namespace}/${r.name}`, await this.d.kube.readSecret(r.namespace, r.name));
        } catch (err) {
          throw new Error(
            isNotFound(err)
              ? `Secret ${r.namespace}/${r.name} named by FenceAgent ${agentName} does not exist: create it with the agent's credentials (e.g. key "password")`
              : `cannot read Secret ${r.namespace}/${r.name}: ${errorMessage(err)}`,
            { cause: err },
          );
        }
      }
      secretValues = [...secrets.values()].flatMap((m) => Object.values(m));
      if (!node) throw new Error(`Node ${nodeName} does not exist: per-node parameters cannot be resolved`);
      const resolved = resolveParameters(agent.spec, node, secrets);
      if ("errors" in resolved) throw new Error(`FenceAgent ${agentName}: ${resolved.errors.join("; ")}`);
      const driver = driverFor(agent.spec.type, agent.spec.agent);
      const problems = driver.validate(resolved.parameters);
      if (problems.length) throw new Error(`FenceAgent ${agentName}: ${problems.join("; ")}`);
      // Live view of the NodeFence's annotations: a manual agent polls for the administrator's confirmation during the attempt.
      const fenceName = fence.metadata?.name ?? "";
      const annotations = new Proxy({} as Record<string, string>, {
        get: (_t, key) => (typeof key === "string" ? this.d.caches.fences.get(fenceName)?.metadata?.annotations?.[key] : undefined),
      });
      const ctx = { node: nodeName, parameters: resolved.parameters, annotations };
      const opts = {
        timeoutMs: (agent.spec.timeoutSeconds ?? 30) * 1000,
        retries: agent.spec.retries ?? 2,
        backoffMs: (agent.spec.retryBackoffSeconds ?? 1) * 1000,
      };
      const r = op === "off" ? await fenceOff(driver, ctx, opts) : await runOperation(driver, ctx, op, opts);
      outcome = r.outcome;
      message = r.message;
    } catch (err) {
      outcome = "Failed";
      message = err instanceof Error ? err.message : String(err);
    }
    message = redact(message, secretValues).slice(0, 2048);
    current = await this.write(current, (s) => {
      const a = s.attempts?.[index];
      if (a) {
        a.outcome = outcome;
        a.endTime = this.now();
        a.message = message;
      }
      return s;
    });
    this.d.metrics?.attempts.inc({ agent: agentName, type: agent.spec.type, operation: op, outcome });
    const ok = outcome === "Succeeded";
    (ok ? flog.info.bind(flog) : flog.warn.bind(flog))({ outcome }, `agent ${agentName} ${op} for ${nodeName}: ${outcome}: ${message}`);
    await Promise.all(
      this.event(
        current,
        ok ? "Normal" : "Warning",
        ok ? "AgentSucceeded" : "AgentFailed",
        `level ${level + 1}, ${agentName} (${agent.spec.type}) ${op}: ${outcome}: ${message}`,
        node,
      ),
    );
    return current;
  }

  private async addTaint(node: V1Node, taint: V1Taint): Promise<void> {
    const taints = node.spec?.taints ?? [];
    if (taints.some((t) => t.key === taint.key && t.effect === taint.effect)) return;
    await this.d.kube.setTaints(node, [...taints, { ...taint, timeAdded: new Date() }]);
  }

  private async release(fence: NodeFence, node: V1Node | undefined, item: ReleaseItem): Promise<NodeFence> {
    const { kube, events } = this.d;
    const nodeName = fence.spec.nodeName;
    const evidence = fence.status?.evidence?.method ?? "";
    // The invariant, checked where it matters: nothing is released from a fence without evidence.
    if (!evidence || !["Fenced", "Releasing"].includes(fence.status?.phase ?? "")) {
      throw new Error(`refusing to release from NodeFence ${nodeName} in phase ${fence.status?.phase} without confirmation evidence`);
    }
    let rec: NonNullable<Status["releases"]>[number];
    if (item.kind === "Pod") {
      const p = item.pod;
      const result = await kube.forceDeletePod(p);
      rec = {
        kind: "Pod",
        namespace: p.metadata?.namespace,
        name: p.metadata?.name ?? "",
        uid: p.metadata?.uid,
        action: result === "deleted" ? "ForceDeleted" : "AlreadyGone",
        time: this.now(),
        message: `priority ${p.spec?.priority ?? 0}`,
      };
      if (result === "deleted") {
        await events.record(
          { apiVersion: "v1", kind: "Pod", name: rec.name, namespace: rec.namespace, uid: rec.uid },
          "Warning",
          "ForceDeleted",
          `node ${nodeName} is confirmed fenced (${evidence}); force-deleted so that a replacement can start`,
        );
      }
    } else if (item.kind === "VolumeAttachment") {
      const result = await kube.deleteVolumeAttachment(item.name, item.uid);
      rec = {
        kind: "VolumeAttachment",
        name: item.name,
        uid: item.uid,
        action: result === "deleted" ? "Deleted" : "AlreadyGone",
        time: this.now(),
      };
    } else {
      if (node) {
        if (item.action === "Added") await this.addTaint(node, { key: OUT_OF_SERVICE_TAINT, value: "nodeshutdown", effect: "NoExecute" });
        else {
          const taints = node.spec?.taints ?? [];
          if (taints.some((t) => t.key === OUT_OF_SERVICE_TAINT))
            await kube.setTaints(
              node,
              taints.filter((t) => t.key !== OUT_OF_SERVICE_TAINT),
            );
        }
      }
      rec = { kind: "Taint", name: OUT_OF_SERVICE_TAINT, action: item.action, time: this.now() };
    }
    const next = await this.write(fence, (s) => {
      s.releases = [...(s.releases ?? []), rec];
      return s;
    });
    const what = `${rec.kind} ${rec.namespace ? `${rec.namespace}/` : ""}${rec.name}: ${rec.action}`;
    this.d.log.info({ nodeFence: nodeName, release: rec }, `released ${what}`);
    this.d.metrics?.releases.inc({ kind: rec.kind, action: rec.action });
    await Promise.all(this.event(next, "Normal", "Release", what, item.kind === "Taint" ? node : undefined));
    return next;
  }
}
