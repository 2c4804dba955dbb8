// `kubectl stockade status`: what is wrong right now and what Stockade is doing about it. The node
// health comes from the operator's own pure code with each node's policy's heartbeat timeout.
import type { V1Lease, V1Node, V1Pod } from "@kubernetes/client-node";
import type { DateTime } from "luxon";
import type { FencingPolicy, NodeFence } from "../api/v1alpha1.ts";
import { DEFAULT_HEARTBEAT_TIMEOUT_SECONDS } from "../decide/fleet.ts";
import { NODE_DOWN } from "../decide/node-down.ts";
import { assessNode } from "../decide/node-health.ts";
import { policyForNode } from "../decide/selectors.ts";
import type { Cluster } from "./cluster.ts";
import { age, clip, dash, iso, table } from "./format.ts";

export interface StatusInput {
  now: DateTime;
  nodes: readonly V1Node[];
  leases: ReadonlyMap<string, V1Lease>;
  pods: readonly V1Pod[];
  policies: readonly FencingPolicy[];
  fences: ReadonlyMap<string, NodeFence>;
}

export async function gatherStatus(c: Cluster, now: DateTime): Promise<StatusInput> {
  const [nodes, leases, pods, policies, fences] = await Promise.all([c.nodes(), c.leases(), c.pods(), c.policies(), c.fences()]);
  return { now, nodes, leases, pods, policies, fences };
}

const byName = <T extends { metadata?: { name?: string } }>(a: T, b: T) => (a.metadata?.name ?? "").localeCompare(b.metadata?.name ?? "");

/** The last attempt of a NodeFence, e.g. "lab-ipmi off Succeeded 12s ago: …". */
export function lastAttempt(f: NodeFence, now: DateTime): string {
  const a = f.status?.attempts?.at(-1);
  if (!a) return "-";
  const t = a.endTime ?? a.startTime;
  const msg = a.message ? `: ${clip(a.message, 60)}` : "";
  return `${a.agent} ${a.operation} ${a.outcome} ${age(t, now)} ago${msg}`;
}

export function renderStatus(i: StatusInput): string {
  const { now } = i;
  const out: string[] = [];

  const sick = [];
  for (const n of [...i.nodes].sort(byName)) {
    const { policy } = policyForNode(n, i.policies);
    const timeout = policy?.spec.detection?.heartbeatTimeoutSeconds ?? DEFAULT_HEARTBEAT_TIMEOUT_SECONDS;
    const h = assessNode(n, i.leases.get(n.metadata?.name ?? ""), now, timeout, policy?.spec.detection?.waitForNodeController ?? false);
    if (h.state === "Healthy") continue;
    sick.push([
      h.name,
      h.state,
      h.ready,
      h.lastHeartbeat ? `${age(h.lastHeartbeat, now)} ago` : "never",
      h.partitionedSince ? `${age(h.partitionedSince, now)} ago` : "-",
      `${timeout}s`,
      dash(policy?.metadata?.name),
    ]);
  }
  out.push("NODES");
  out.push(
    sick.length
      ? table(["NAME", "HEALTH", "READY", "LAST HEARTBEAT", "PARTITIONED", "TIMEOUT", "POLICY"], sick)
      : `all ${i.nodes.length} node(s) heartbeating`,
  );

  out.push("", "NODEFENCES");
  const fences = [...i.fences.values()].sort(byName);
  out.push(
    fences.length
      ? table(
          ["NAME", "PHASE", "ORIGIN", "LEVEL", "EVIDENCE", "AGE", "LAST ATTEMPT"],
          fences.map((f) => [
            f.metadata?.name ?? "",
            f.status?.phase ?? "(new)",
            f.spec.origin ?? "Manual",
            // Counted from 1, as the operator's messages and Events say "level 1".
            f.status?.currentLevel === undefined ? "-" : String(f.status.currentLevel + 1),
            dash(f.status?.evidence?.method),
            age(f.metadata?.creationTimestamp, now),
            lastAttempt(f, now),
          ]),
        )
      : "none",
  );
  const unfencing = fences.filter((f) => f.spec.unfence && f.status?.phase !== "Unfenced").map((f) => f.metadata?.name);
  if (unfencing.length) out.push(`unfence requested: ${unfencing.join(", ")}`);

  out.push("", `PODS WITH ${NODE_DOWN}`);
  const down = i.pods
    .map((p) => ({ p, c: p.status?.conditions?.find((c) => c.type === NODE_DOWN && c.status === "True") }))
    .filter((x) => x.c)
    .sort((a, b) => `${a.p.metadata?.namespace}/${a.p.metadata?.name}`.localeCompare(`${b.p.metadata?.namespace}/${b.p.metadata?.name}`));
  out.push(
    down.length
      ? table(
          ["POD", "NODE", "SINCE", "REASON"],
          down.map(({ p, c }) => [
            `${p.metadata?.namespace}/${p.metadata?.name}`,
            dash(p.spec?.nodeName),
            age(c?.lastTransitionTime, now),
            dash(c?.reason),
          ]),
        )
      : "none",
  );

  out.push("", "FENCINGPOLICIES");
  const policies = [...i.policies].sort(byName);
  if (!policies.length) out.push("none: Stockade fences nothing automatically until a FencingPolicy exists");
  else {
    const cond = (p: FencingPolicy, type: string) => p.status?.conditions?.find((c) => c.type === type);
    out.push(
      table(
        ["NAME", "READY", "STORMGUARD", "DRYRUN", "PAUSED", "PARTITIONED", "ACTIVE"],
        policies.map((p) => [
          p.metadata?.name ?? "",
          dash(cond(p, "Ready")?.status ?? "Unknown"),
          cond(p, "StormGuard")?.status === "True" ? `True (${cond(p, "StormGuard")?.reason})` : dash(cond(p, "StormGuard")?.status),
          cond(p, "DryRun")?.status === "True" ? "True" : p.spec.dryRun ? "enabled" : dash(cond(p, "DryRun")?.status),
          p.spec.paused ? "yes" : "no",
          dash(p.status?.partitionedNodes?.join(",")),
          dash(p.status?.activeFences),
        ]),
      ),
    );
    // The conditions that need a reader's attention, with their messages.
    for (const p of policies) {
      for (const c of p.status?.conditions ?? []) {
        const bad = (c.type === "Ready" && c.status !== "True") || (c.type !== "Ready" && c.status === "True");
        if (bad) out.push(`  ${p.metadata?.name} ${c.type}=${c.status} ${c.reason}: ${c.message}`);
      }
      if (!p.status?.conditions?.length) out.push(`  ${p.metadata?.name}: no status yet (is the operator running?)`);
    }
  }
  return out.join("\n") + "\n";
}

/** `status -o json|yaml`: the same answers as the tables, as data (times in RFC 3339, levels counted from 1). */
export function statusReport(i: StatusInput): Record<string, unknown> {
  const { now } = i;
  const nodes = [];
  for (const n of [...i.nodes].sort(byName)) {
    const { policy } = policyForNode(n, i.policies);
    const timeout = policy?.spec.detection?.heartbeatTimeoutSeconds ?? DEFAULT_HEARTBEAT_TIMEOUT_SECONDS;
    const h = assessNode(n, i.leases.get(n.metadata?.name ?? ""), now, timeout, policy?.spec.detection?.waitForNodeController ?? false);
    nodes.push({
      name: h.name,
      health: h.state,
      ready: h.ready,
      lastHeartbeat: h.lastHeartbeat ? iso(h.lastHeartbeat) : null,
      partitionedSince: h.partitionedSince ? iso(h.partitionedSince) : null,
      partitionedBy: h.partitionedBy ?? null,
      heartbeatTimeoutSeconds: timeout,
      policy: policy?.metadata?.name ?? null,
    });
  }
  const cond = (p: FencingPolicy, type: string) => p.status?.conditions?.find((c) => c.type === type);
  return {
    time: iso(now),
    nodes,
    nodeFences: [...i.fences.values()].sort(byName).map((f) => ({
      name: f.metadata?.name ?? "",
      phase: f.status?.phase ?? null,
      origin: f.spec.origin ?? "Manual",
      level: f.status?.currentLevel === undefined ? null : f.status.currentLevel + 1,
      evidence: f.status?.evidence?.method ?? null,
      created: iso(f.metadata?.creationTimestamp),
      unfenceRequested: f.spec.unfence ?? false,
      lastAttempt: lastAttempt(f, now),
    })),
    podsWithNodeDown: i.pods.flatMap((p) => {
      const c = p.status?.conditions?.find((x) => x.type === NODE_DOWN && x.status === "True");
      return c
        ? [
            {
              namespace: p.metadata?.namespace,
              name: p.metadata?.name,
              node: p.spec?.nodeName ?? null,
              since: iso(c.lastTransitionTime),
              reason: c.reason ?? null,
            },
          ]
        : [];
    }),
    fencingPolicies: [...i.policies].sort(byName).map((p) => ({
      name: p.metadata?.name ?? "",
      ready: cond(p, "Ready")?.status ?? "Unknown",
      stormGuard: cond(p, "StormGuard")?.status ?? null,
      dryRun: p.spec.dryRun ?? false,
      paused: p.spec.paused ?? false,
      partitionedNodes: p.status?.partitionedNodes ?? [],
      activeFences: p.status?.activeFences ?? null,
      conditions: p.status?.conditions ?? [],
    })),
  };
}
