// Guarded pods bound to a Node that no longer exists (docs/safety.md §3, "A machine whose Node is gone"). The force
// delete of pod GC is refused for them (a deleted Node proves nothing), so without a fence they wait forever. When this
// process saw the Node before its deletion, the fleet decision fences its machine as for any silent node: the policy
// that selects its last-seen labels, the same guards, and a wait counted from the last sign of the machine this
// process saw — the Node's deletion, its Lease's last renewal or deletion, the end of its own last gap in sight — never
// while its Lease is still renewed (a live kubelet re-creates its Node). When it never saw the Node, nothing says which
// machine it was: a person must (the policy's MissingNodes condition says how). Pure.
import type { V1Lease, V1Node, V1PersistentVolumeClaim, V1Pod } from "@kubernetes/client-node";
import { DateTime } from "luxon";
import type { FencingPolicy } from "../api/v1alpha1.ts";
import { API_VERSION } from "../api/v1alpha1.ts";
import { provenFinished } from "./claim-lock.ts";
import { podWaitSeconds } from "./forgiveness.ts";
import { isGuarded } from "./guarded-pods.ts";
import { DEFAULT_HEARTBEAT_TIMEOUT_SECONDS, type NodeHealth } from "./node-health.ts";
import { guardedWhy, keepsGuard } from "./scope.ts";
import { governingPolicy } from "./selectors.ts";

/** A kubelet's default leaseDurationSeconds: what a Lease without one, or a Lease gone, is measured with. */
export const DEFAULT_LEASE_SECONDS = 40;

/**
 * A node that guarded pods are bound to and whose Node does not exist, as the operator's caches show it: the pods
 * cache is the only place it still shows.
 */
export interface GoneNode {
  name: string;
  /** The Node as this process last saw it before its deletion (kube/last-seen-nodes.ts); undefined: it never saw it. */
  lastSeen?: V1Node;
  /** The node's Lease, while it exists (a kubelet whose Node was deleted goes on renewing it, or makes a new one). */
  lease?: V1Lease;
  /** How long this process has seen the Lease's renewTime unchanged (kube/lease-observer.ts); undefined: not observed. */
  leaseSilentMs?: number;
  /**
   * How long (ms, this process's monotonic clock) it has had no sign of the machine: since it saw the Node deleted,
   * the Lease last renewed or deleted, and the end of its own last gap in sight, whichever is latest. Undefined: it
   * cannot count (it cannot see now, or never saw the Node).
   */
  quietMs?: number;
}

/**
 * Whether a Lease of a Node that is gone is a live kubelet's: present, and not seen unchanged for a whole lease
 * duration (a Lease not yet observed counts as renewed). The fence machine applies the same on its fresh reads.
 */
export function goneLeaseRenewed(lease: V1Lease | undefined, observedSilentMs: number | undefined): boolean {
  if (!lease) return false;
  const durationMs = (lease.spec?.leaseDurationSeconds || DEFAULT_LEASE_SECONDS) * 1000;
  return observedSilentMs === undefined || !Number.isFinite(observedSilentMs) || observedSilentMs < durationMs;
}

export type GoneStep =
  | {
      kind: "decision";
      verdict: "NoPolicy" | "NothingToProtect" | "Tolerated" | "Waiting" | "NotRemembered";
      message: string;
      /** When the wait ends (the pods' forgiveness), for a look then. */
      at?: DateTime;
    }
  | {
      kind: "candidate";
      why: string;
      waitedSeconds: number;
      guarded: readonly V1Pod[];
    };

export interface GoneInput {
  g: GoneNode;
  now: DateTime;
  policy: FencingPolicy | undefined;
  pods: readonly V1Pod[];
  pvcs: ReadonlyMap<string, V1PersistentVolumeClaim>;
  /** When the policy's storm guard last ended (a wait starts again from then). */
  stormEnd: DateTime | undefined;
}

const iso = (d: DateTime | undefined) => d?.toUTC().toISO({ suppressMilliseconds: true }) ?? undefined;

/** The policy that governs a gone node: the one whose nodeSelector selects its last-seen labels. */
export const goneNodePolicy = (g: GoneNode, policies: readonly FencingPolicy[]) =>
  g.lastSeen ? governingPolicy(g.lastSeen, policies) : undefined;

/**
 * How long without a sign of the machine makes a gone node silent: the policy's heartbeat timeout, and at least a
 * whole lease duration (a live kubelet whose Lease was collected with its Node makes a new one within a renewal).
 */
export function goneSilenceSeconds(g: GoneNode, policy: FencingPolicy | undefined): number {
  const timeout = policy?.spec.detection?.heartbeatTimeoutSeconds ?? DEFAULT_HEARTBEAT_TIMEOUT_SECONDS;
  return Math.max(timeout, g.lease?.spec?.leaseDurationSeconds || DEFAULT_LEASE_SECONDS);
}

/** A gone node's health, for the decision's record and the storm guards: unhealthy once quiet for its silence time. */
export function goneHealth(g: GoneNode, policy: FencingPolicy | undefined, now: DateTime): NodeHealth {
  const renewed = goneLeaseRenewed(g.lease, g.leaseSilentMs);
  const timeoutSeconds = goneSilenceSeconds(g, policy);
  const lastMs = g.quietMs === undefined ? undefined : now.toMillis() - g.quietMs;
  const lastHeartbeat = lastMs === undefined ? undefined : DateTime.fromMillis(lastMs, { zone: "utc" });
  const staleAtMs = lastMs === undefined ? undefined : lastMs + timeoutSeconds * 1000;
  const partitioned = !renewed && staleAtMs !== undefined && now.toMillis() >= staleAtMs;
  const nextCheckMs = !renewed && staleAtMs !== undefined && !partitioned ? staleAtMs : undefined;
  return {
    name: g.name,
    state: partitioned ? "Partitioned" : "Suspect",
    ready: "Missing",
    lastHeartbeat,
    lastHeartbeatMs: lastMs,
    partitionedSince: partitioned ? DateTime.fromMillis(staleAtMs!, { zone: "utc" }) : undefined,
    bootID: g.lastSeen?.status?.nodeInfo?.bootID ?? "",
    // Silent for the storm guards only once quiet for as long as a node must be: a Node just deleted by an autoscaler
    // (its DaemonSet pods still bound for a while) is not a storm.
    silent: partitioned,
    lagging: partitioned,
    heard: false,
    nextCheck: nextCheckMs === undefined ? undefined : DateTime.fromMillis(nextCheckMs, { zone: "utc" }),
    nextCheckMs,
    timeoutSeconds,
    partitionedBy: undefined,
    leaseExpiresMs: undefined,
    leaseExpiry: undefined,
    leaseDurationSeconds: g.lease?.spec?.leaseDurationSeconds ?? undefined,
  };
}

/** The exact command that fences a gone node a person has checked, under the policy: a Manual NodeFence on its name. */
export function manualFenceCommand(node: string, policy: string): string {
  const body = {
    apiVersion: API_VERSION,
    kind: "NodeFence",
    metadata: { name: node },
    spec: { nodeName: node, origin: "Manual", policy, reason: `Node ${node} is gone; guarded pods wait on it` },
  };
  return `echo '${JSON.stringify(body)}' | kubectl create -f -`;
}

/**
 * The live policies (not dry run, guard on) whose pod scope covers a guarded pod bound to a gone node this process
 * never saw: the force-delete guard refuses the pods' deletion under them, so they are the ones to say so.
 */
export function coveringPolicies(
  pods: readonly V1Pod[],
  policies: readonly FencingPolicy[],
  pvcs: ReadonlyMap<string, V1PersistentVolumeClaim>,
): { policy: FencingPolicy; pods: number }[] {
  return policies.filter(keepsGuard).flatMap((p) => {
    const n = pods.filter((pod) => {
      const ns = pod.metadata?.namespace ?? "";
      return !provenFinished(pod, false) && guardedWhy(pod, p.spec.guardedPods, (c) => pvcs.get(`${ns}/${c}`)) !== undefined;
    }).length;
    return n ? [{ policy: p, pods: n }] : [];
  });
}

/** What the fleet decides of a gone node with no NodeFence under way. */
export function goneNodeStep(i: GoneInput, h: NodeHealth): GoneStep {
  const { g, policy, now } = i;
  const name = g.name;
  if (!g.lastSeen)
    return {
      kind: "decision",
      verdict: "NotRemembered",
      message: `Node ${name} does not exist and this operator never saw it (it was deleted before this replica started): nothing says which machine it was, so guarded pods bound to it wait until a person fences it (see the policy's MissingNodes condition)`,
    };
  if (!policy)
    return { kind: "decision", verdict: "NoPolicy", message: `Node ${name} is gone and no FencingPolicy selects its labels as last seen` };
  const guarded = i.pods.filter((p) => !provenFinished(p, false) && isGuarded(p, policy.spec.guardedPods, i.pvcs).guarded);
  if (!guarded.length)
    return { kind: "decision", verdict: "NothingToProtect", message: `Node ${name} is gone; no guarded pods are bound to it` };
  if (goneLeaseRenewed(g.lease, g.leaseSilentMs))
    return {
      kind: "decision",
      verdict: "Waiting",
      message: `Node ${name} is gone but its Lease is still renewed (renewTime ${String(g.lease?.spec?.renewTime ?? "")}): a live kubelet, which registers its Node again; not fenced while it renews`,
    };
  if (h.lastHeartbeat === undefined)
    return {
      kind: "decision",
      verdict: "Waiting",
      message: `Node ${name} is gone, and this operator cannot count its silence now (it cannot see the cluster without a gap)`,
    };
  const lease = g.lease ? "its Lease not renewed since" : "its Lease gone";
  const last = `no sign of its machine since ${iso(h.lastHeartbeat)} (operator's clock: the Node's deletion, ${lease})`;
  if (h.state !== "Partitioned")
    return {
      kind: "decision",
      verdict: "Waiting",
      message: `Node ${name} is gone; ${last}; silent at ${iso(h.nextCheck)} (${h.timeoutSeconds} s), then guarded pods wait`,
    };
  const waits = guarded.map((p) => podWaitSeconds(p, policy.spec.detection)).filter((w): w is number => w !== null);
  if (!waits.length)
    return { kind: "decision", verdict: "Tolerated", message: "every guarded pod tolerates node.kubernetes.io/unreachable forever" };
  const wait = Math.min(...waits);
  const partitionedSince = h.partitionedSince!;
  const since = i.stormEnd && i.stormEnd > partitionedSince ? i.stormEnd : partitionedSince;
  const at = since.plus({ seconds: wait });
  if (now < at)
    return {
      kind: "decision",
      verdict: "Waiting",
      message: `Node ${name} is gone; ${last}; silent since ${iso(partitionedSince)}${since === partitionedSince ? "" : `, through a storm that ended at ${iso(since)}`}; guarded pods wait ${wait} s, until ${iso(at)}`,
      at,
    };
  const provider = g.lastSeen.spec?.providerID;
  return {
    kind: "candidate",
    why: `Node ${name} was deleted while its machine may still run; ${last}; silent since ${iso(partitionedSince)}; ${guarded.length} guarded pod(s) waited ${wait} s; fenced as this operator last saw it (${provider ? `providerID ${provider}` : "no providerID"})`,
    waitedSeconds: now.diff(since, "seconds").seconds,
    guarded,
  };
}
