// `kubectl stockade explain NODE`: the operator's own fleet decision, computed here from one list of each
// kind, for one node, with the inputs that led to it. The CLI cannot see the operator's watches, so the
// watch-staleness guard is taken as satisfied (watchStalenessSeconds 0).
import type { DateTime } from "luxon";
import type { FencingPolicy } from "../api/v1alpha1.ts";
import { decideFleet, podsByNode, type FleetInput } from "../decide/fleet.ts";
import { DEFAULT_FENCE_AFTER_SECONDS, isInjectedToleration, podWaitSeconds, unreachableToleration } from "../decide/forgiveness.ts";
import { isFinished, isGuarded } from "../decide/guarded-pods.ts";
import { conditionTrust } from "../decide/condition-writers.ts";
import { DEFAULT_HEARTBEAT_TIMEOUT_SECONDS, partitionSignal, type NodeHealth } from "../decide/node-health.ts";
import { describeScope } from "../decide/scope.ts";
import { controlPlaneRole } from "../decide/quorum.ts";
import { policyForNode } from "../decide/selectors.ts";
import { CliError, type Cluster } from "./cluster.ts";
import { clip, dash, iso, table, when } from "./format.ts";
import { lastAttempt } from "./status.ts";

export async function gatherFleet(c: Cluster, now: DateTime): Promise<FleetInput> {
  const [nodes, leases, pods, pvcs, pdbs, policies, fences] = await Promise.all([
    c.nodes(),
    c.leases(),
    c.pods(),
    c.pvcs(),
    c.pdbs(),
    c.policies(),
    c.fences(),
  ]);
  return { now, nodes, leases, pods: podsByNode(pods), pvcs, pdbs, policies, fences, watchStalenessSeconds: 0 };
}

function describePolicy(p: FencingPolicy): string {
  const d = p.spec.detection ?? {};
  const levels = p.spec.escalation.map((l, i) => `level ${i + 1}: ${l.agents.map((a) => a.name).join(" + ")}`).join(", ");
  const flags = [p.spec.dryRun ? "dryRun" : "", p.spec.paused ? "paused" : "", p.spec.allowControlPlane ? "allowControlPlane" : ""]
    .filter(Boolean)
    .join(", ");
  const triggers = (p.spec.triggers?.nodeConditions ?? []).map(
    (t) =>
      `${t.type}=${t.status} for ${t.forSeconds} s set by ${t.trustedWriters?.length ? t.trustedWriters.join("/") : "(no trustedWriters: ignored)"}`,
  );
  const off = (on: boolean | undefined, field: string) =>
    p.spec.dryRun ? "off (a dry run)" : on === false ? `off (${field}: false)` : "on";
  return [
    `heartbeatTimeoutSeconds ${d.heartbeatTimeoutSeconds ?? DEFAULT_HEARTBEAT_TIMEOUT_SECONDS}, waitForNodeController ${d.waitForNodeController ?? false}, fenceAfterSeconds ${d.fenceAfterSeconds ?? DEFAULT_FENCE_AFTER_SECONDS}, honorPodTolerations ${d.honorPodTolerations ?? true}`,
    `condition triggers: ${triggers.length ? triggers.join(", ") : "none (silence only)"}`,
    `escalation ${levels}; action ${p.spec.action ?? "off"}${flags ? `; ${flags}` : ""}`,
    `pods: ${describeScope(p.spec.guardedPods)}; force-delete guard ${off(p.spec.forceDeleteGuard, "forceDeleteGuard")}; claim lock ${off(p.spec.claimLock, "claimLock")}`,
  ].join("\n");
}

/** The explanation of one node; throws a CliError when the node does not exist. */
export function renderExplain(i: FleetInput, nodeName: string): string {
  const node = i.nodes.find((n) => n.metadata?.name === nodeName);
  if (!node) throw new CliError(`node "${nodeName}" not found (kubectl get nodes lists them)`);
  const d = decideFleet(i);
  const x = d.decisions.find((y) => y.node === nodeName);
  if (!x) throw new CliError(`internal error: the fleet decision has no verdict for node ${nodeName}`);
  const { now } = i;
  const { policy, conflicts } = policyForNode(node, i.policies);
  const out: string[] = [];

  out.push(`Node:      ${nodeName}`);
  out.push(`Verdict:   ${x.verdict}`);
  out.push(`Why:       ${x.message}`);
  const h = x.health;
  out.push("Health:");
  // This CLI does not watch the Leases: whether one expired is the operator's to measure (unless its policy waits anyway).
  const unknowable = i.leaseSilentMs === undefined && !policy?.spec.detection?.waitForNodeController;
  out.push(`  state:             ${h.state}${h.silent && h.state !== "Partitioned" ? ` (silent, but ${notYet(h, unknowable)})` : ""}`);
  out.push(`  ready:             ${h.ready}`);
  out.push(`  last heartbeat:    ${when(h.lastHeartbeat, now)}`);
  out.push(
    `  lease expires:     ${h.leaseExpiry ? `${when(h.leaseExpiry, now)} ${LEASE_ESTIMATE}` : "- (no Lease with renewTime and leaseDurationSeconds)"}`,
  );
  out.push(`  partitioned since: ${h.partitionedSince ? when(h.partitionedSince, now) : "-"}`);
  if (h.state === "Partitioned") out.push(`  partitioned by:    ${h.partitionedBy}: ${partitionSignal(h)}`);
  out.push(`  bootID:            ${dash(h.bootID)}`);

  if (!policy) {
    out.push("Policy:    none: no FencingPolicy's nodeSelector matches this node, so Stockade never fences it automatically");
  } else {
    out.push(`Policy:    ${policy.metadata?.name}`);
    for (const l of describePolicy(policy).split("\n")) out.push(`  ${l}`);
    if (conflicts.length)
      out.push(`  also selected by ${conflicts.map((p) => p.metadata?.name).join(", ")} (ignored: the first policy by name applies)`);
    const triggers = policy.spec.triggers?.nodeConditions ?? [];
    if (triggers.length) {
      out.push("Condition triggers (held since: the operator's first sight, as recorded in the policy's status):");
      for (const t of triggers) {
        const s = x.triggers?.find((y) => y.trigger.type === t.type);
        const c = node.status?.conditions?.find((y) => y.type === t.type);
        const head = `  ${t.type}=${t.status} for ${t.forSeconds} s:`;
        const trust = conditionTrust(node, t.type, t.trustedWriters);
        if (s)
          out.push(
            `${head} HELD since ${s.sighting.since} (${Math.floor(s.held)} s); ${s.left > 0 ? `${Math.ceil(s.left)} s left` : "due"}`,
          );
        else if (c?.status === t.status && !t.trustedWriters?.length)
          out.push(`${head} held now, IGNORED: the trigger lists no trustedWriters (the field managers trusted to set it)`);
        else if (c?.status === t.status && !trust.trusted)
          out.push(
            `${head} held now, IGNORED: ${trust.writers.length ? `set by ${trust.untrusted.join(", ")}` : "no writer recorded in managedFields"}, not in trustedWriters (${t.trustedWriters?.join(", ")})`,
          );
        else if (c?.status === t.status)
          out.push(
            `${head} held now (${x.verdict === "HasFence" ? "not counted while its NodeFence runs" : "the wait starts at the operator's next look"})`,
          );
        else out.push(`${head} not held (${c ? `${t.type}=${c.status}` : `no ${t.type} condition`})`);
      }
    }
  }
  out.push(`Control plane: ${controlPlaneLine(node, [...i.pods.on(nodeName)], policy)}`);

  const fence = i.fences.get(nodeName);
  if (fence) {
    out.push(`NodeFence: ${nodeName} phase ${fence.status?.phase ?? "(new)"}, origin ${fence.spec.origin ?? "Manual"}`);
    const t = fence.spec.trigger?.nodeCondition;
    if (fence.spec.origin === "Automatic")
      out.push(`  trigger:      ${t ? `condition ${t.type}=${t.status} held for ${t.forSeconds ?? "?"} s` : "silence (no heartbeat)"}`);
    if (fence.spec.reason) out.push(`  reason:       ${clip(fence.spec.reason, 200)}`);
    const fenced = fence.status?.conditions?.find((c) => c.type === "Fenced");
    if (fenced?.reason === "ControlPlaneNode") out.push(`  refused:      ${clip(fenced.message, 400)}`);
    if (fence.status?.evidence)
      out.push(
        `  evidence:     ${fence.status.evidence.method} at ${iso(fence.status.evidence.time)}${fence.status.evidence.detail ? `: ${fence.status.evidence.detail}` : ""}`,
      );
    out.push(`  last attempt: ${lastAttempt(fence, now)}`);
    if (fence.spec.unfence) out.push("  unfence requested");
  } else out.push("NodeFence: none");

  const pods = [...i.pods.on(nodeName)];
  out.push("", `Pods on ${nodeName}: ${pods.length}`);
  if (pods.length && policy) {
    const rows = pods
      .sort((a, b) => `${a.metadata?.namespace}/${a.metadata?.name}`.localeCompare(`${b.metadata?.namespace}/${b.metadata?.name}`))
      .map((p) => {
        const name = `${p.metadata?.namespace}/${p.metadata?.name}`;
        if (isFinished(p) && h.state === "Healthy")
          return [name, "no", `finished (${p.status?.phase}) on a node that heartbeats: nothing to release`, "-"];
        const g = isGuarded(p, policy.spec.guardedPods, i.pvcs);
        if (!g.guarded) return [name, "no", g.why, "-"];
        const w = podWaitSeconds(p, policy.spec.detection);
        const policyWait = podWaitSeconds(p, { ...policy.spec.detection, honorPodTolerations: false });
        const t = unreachableToleration(p);
        const injected = t && isInjectedToleration(t, policy.spec.detection) && (policy.spec.detection?.honorPodTolerations ?? true);
        const wait =
          w === null
            ? "forever (tolerates unreachable)"
            : injected
              ? `${w}s (fenceAfterSeconds: its ${t.tolerationSeconds}s toleration is the one Kubernetes gives every pod)`
              : w === policyWait
                ? `${w}s (fenceAfterSeconds)`
                : `${w}s (its toleration)`;
        return [name, "yes", g.why, wait];
      });
    out.push(table(["POD", "GUARDED", "WHY", "WAITS"], rows));
  } else if (pods.length) out.push(`  ${pods.map((p) => `${p.metadata?.namespace}/${p.metadata?.name}`).join(", ")}`);

  if (policy) {
    const s = d.policies.get(policy.metadata?.name ?? "");
    out.push("", `Storm guard (policy ${policy.metadata?.name}):`);
    if (!s?.holds.length) out.push("  no hold: fencing is not held back");
    else for (const hold of s.holds) out.push(`  HOLD ${hold.reason}: ${hold.message}`);
    if (s) {
      out.push(`  partitioned nodes: ${s.partitioned.join(", ") || "none"}; fences in flight: ${s.activeFences}`);
      if (s.queued.length) out.push(`  queued for a fence slot: ${s.queued.join(", ")}`);
      if (s.wouldFence.length) out.push(`  dry run would fence: ${s.wouldFence.join(", ")}`);
    }
    out.push("  (the watch-staleness guard is the operator's own and is not evaluated here)");
  }
  return out.join("\n") + "\n";
}

/**
 * The Lease's expiry as this CLI can tell it: renewTime (written with the node's clock) + leaseDurationSeconds, on this
 * machine's clock. The operator does not decide on it: it measures the Lease on its own clock from when it saw the renewal.
 */
const LEASE_ESTIMATE =
  "(wall-clock estimate: renewTime, on the node's clock, + leaseDurationSeconds; the operator measures from when it saw the renewal)";

/** Why a silent node is not partitioned yet: the second signal it waits for. */
function notYet(h: NodeHealth, leaseUnknowable: boolean): string {
  if (h.ready === "Unknown") return "not partitioned";
  if (h.nextCheck) return `its Lease has not expired yet and Ready is not Unknown`;
  if (leaseUnknowable && h.leaseExpiresMs !== undefined)
    return "Ready is not Unknown yet; whether its Lease expired only the operator can tell (it measures it on its own clock)";
  return "Ready is not Unknown yet";
}

function controlPlaneLine(
  node: Parameters<typeof controlPlaneRole>[0],
  pods: Parameters<typeof controlPlaneRole>[1],
  policy: FencingPolicy | undefined,
): string {
  const role = controlPlaneRole(node, pods);
  if (!role) return "no (not labelled control-plane or master, no etcd member on it)";
  if (policy?.spec.allowControlPlane) return `yes: ${role}; fenced anyway: FencingPolicy ${policy.metadata?.name} sets allowControlPlane`;
  return `yes: ${role}; never fenced (its loss may break the control plane's quorum) unless its policy sets spec.allowControlPlane`;
}

/** `explain NODE -o json|yaml`: the verdict, why, the node's health and its policy, as data. */
export function explainReport(i: FleetInput, nodeName: string): Record<string, unknown> {
  const node = i.nodes.find((n) => n.metadata?.name === nodeName);
  if (!node) throw new CliError(`node "${nodeName}" not found (kubectl get nodes lists them)`);
  const x = decideFleet(i).decisions.find((y) => y.node === nodeName);
  if (!x) throw new CliError(`internal error: the fleet decision has no verdict for node ${nodeName}`);
  const { policy, conflicts } = policyForNode(node, i.policies);
  const h = x.health;
  const fence = i.fences.get(nodeName);
  return {
    node: nodeName,
    verdict: x.verdict,
    why: x.message,
    health: {
      state: h.state,
      ready: h.ready,
      lastHeartbeat: h.lastHeartbeat ? iso(h.lastHeartbeat) : null,
      partitionedSince: h.partitionedSince ? iso(h.partitionedSince) : null,
      partitionedBy: h.partitionedBy ?? null,
      leaseExpires: h.leaseExpiry ? iso(h.leaseExpiry) : null,
      bootID: h.bootID ?? null,
    },
    policy: policy?.metadata?.name ?? null,
    alsoSelectedBy: conflicts.map((p) => p.metadata?.name),
    triggers: (x.triggers ?? []).map((t) => ({
      type: t.trigger.type,
      status: t.trigger.status,
      forSeconds: t.trigger.forSeconds,
      heldSince: t.sighting.since,
      heldSeconds: Math.floor(t.held),
      secondsLeft: Math.ceil(t.left),
    })),
    controlPlane: controlPlaneRole(node, [...i.pods.on(nodeName)]) ?? null,
    nodeFence: fence
      ? {
          phase: fence.status?.phase ?? null,
          origin: fence.spec.origin ?? "Manual",
          trigger: fence.spec.trigger?.nodeCondition ?? null,
          level: fence.status?.currentLevel === undefined ? null : fence.status.currentLevel + 1,
        }
      : null,
  };
}
