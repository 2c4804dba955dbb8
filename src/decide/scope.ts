// What a *live* FencingPolicy covers, for the two webhooks: the force-delete guard and the claim gate act only there.
// A pod is in a policy's scope when its namespace is one the policy names (spec.guardedPods.namespaces; none named:
// every namespace) and its labels match the policy's spec.guardedPods.podSelector (none: every pod).
//   - The force-delete guard covers a pod when the policy that governs its node (the first by name whose nodeSelector
//     matches, as for fencing) is live (not dryRun), keeps the guard (forceDeleteGuard) and guards the pod — or when a
//     NodeFence of its node is under way, whatever the policies say now: Stockade is fencing that node and releases
//     the pod itself.
//   - The claim gate, called before the pod has a node, covers a pod in the scope of any live policy that keeps the
//     claim lock (claimLock) — and, whatever the policies say now, holds a claim that another pod uses on a node whose
//     NodeFence has not ended (gateClaims): that instance may still write until the fence proves it dead.
// No FencingPolicy, or only dry runs, and no fence under way: nothing is guarded or gated. Pure: the webhooks feed it
// their cache (policies) and fresh reads (the pod's Node and NodeFence); the claim-lock controller its fresh reads.
import type { V1Node, V1PersistentVolumeClaim, V1Pod } from "@kubernetes/client-node";
import type { FencingPolicy, FencingPolicySpecGuardedPods, NodeFence } from "../api/v1alpha1.ts";
import { claimGuard, claimNames, podOptedOut, type ClaimPolicy } from "./claim-lock.ts";
import { HOLDING_PHASES } from "./fence-phases.ts";
import { GUARDED_LABEL, inPodScope, isGuarded, type GuardedPodsPolicy } from "./guarded-pods.ts";
import { governingPolicy } from "./selectors.ts";

export { inPodScope };

/** Where a policy's scope is narrower than every pod, in words (for messages). */
export function describeScope(g: FencingPolicySpecGuardedPods | undefined): string {
  const parts = [
    g?.namespaces?.length ? `namespaces ${g.namespaces.join(", ")}` : "",
    g?.podSelector && (Object.keys(g.podSelector.matchLabels ?? {}).length || g.podSelector.matchExpressions?.length)
      ? "its podSelector"
      : "",
  ].filter(Boolean);
  return parts.length ? parts.join(" and ") : "every namespace";
}

const policyName = (p: FencingPolicy) => p.metadata?.name ?? "";
/** A policy that acts: not a dry run. (A paused one still does: it only starts no new fence.) */
export const isLive = (p: FencingPolicy) => !p.spec.dryRun;
export const keepsGuard = (p: FencingPolicy) => isLive(p) && p.spec.forceDeleteGuard !== false;
export const keepsClaimLock = (p: FencingPolicy) => isLive(p) && p.spec.claimLock !== false;

/** Phases of a NodeFence in which Stockade is fencing the node or holds it fenced. */
const UNDER_WAY = new Set(["", "Pending", "Fencing", "Fenced", "Releasing", "Released", "Failed"]);

export interface GuardScopeInput {
  pod: V1Pod;
  /** The pod's Node, read fresh; undefined when it does not exist (deleted: its labels are gone with it). */
  node: V1Node | undefined;
  /** The pod's node's NodeFence, read fresh. */
  fence: NodeFence | undefined;
  /** Every FencingPolicy (the cache); undefined until the cache has synced. */
  policies: readonly FencingPolicy[] | undefined;
  /** The pod's namespace's claims, by name (the cache). */
  pvc: (name: string) => V1PersistentVolumeClaim | undefined;
}

export type GuardScope =
  | {
      covered: true;
      /** Why the pod is guarded (a StatefulSet's, a ReadWriteOnce claim, …). */
      guarded: string;
      /** What puts it in scope (the policy, the fence under way, the caches not synced). */
      why: string;
      /** The policy that selects its node, when one does: `kubectl stockade fence` of that node can work. */
      policy?: string;
      /** The phase of a NodeFence under way on its node. */
      fencePhase?: string;
    }
  | { covered: false; why: string };

/**
 * Why the pod is guarded under these guardedPods settings, or undefined: isGuarded, or a claim opted in with the
 * stockade.io/claim-guard annotation (a claim lock's claim is the pod's identity as much as a StatefulSet's).
 */
export function guardedWhy(
  pod: V1Pod,
  g: GuardedPodsPolicy | undefined,
  pvc: (name: string) => V1PersistentVolumeClaim | undefined,
): string | undefined {
  const ns = pod.metadata?.namespace ?? "";
  const pvcs = new Map(claimNames(pod).flatMap((c) => (pvc(c) ? [[`${ns}/${c}`, pvc(c)!] as const] : [])));
  const fencing = isGuarded(pod, g, pvcs);
  if (fencing.guarded) return fencing.why;
  if (pod.metadata?.labels?.[GUARDED_LABEL] === "false" || !inPodScope(pod, g)) return undefined;
  const claim = claimNames(pod).find((c) => claimGuard(pvc(c), { readWriteOnceVolumes: g?.readWriteOnceVolumes ?? true }).guarded);
  return claim ? `uses guarded claim ${claim}` : undefined;
}

/** Does the force-delete guard cover this pod? (The delete's grace period and who asks are force-delete.ts's business.) */
export function guardScope(i: GuardScopeInput): GuardScope {
  const nodeName = i.pod.spec?.nodeName ?? "";
  // Until the cache has its first list nothing tells an absent policy from one not seen yet: guard as if every
  // node were selected with the defaults (what the guard did before policies scoped it), and say so.
  if (!i.policies) {
    const g = guardedWhy(i.pod, undefined, i.pvc);
    return g
      ? {
          covered: true,
          guarded: g,
          why: "Stockade's view of the FencingPolicies is not loaded yet (it has just started): try again in a moment",
        }
      : { covered: false, why: "not guarded" };
  }
  // Stockade is fencing this node (or holds it fenced): its guarded pods are its to release, whatever the policies
  // say now (the fence runs with the snapshot taken when it started). A NodeFence that has not started (no snapshot:
  // waiting for its Node or for a policy that selects it) fences nothing yet.
  const phase = i.fence?.status?.phase ?? "";
  if (i.fence?.status?.policySnapshot && UNDER_WAY.has(phase)) {
    const g = guardedWhy(i.pod, i.fence.status?.policySnapshot?.guardedPods, i.pvc);
    if (g) return { covered: true, guarded: g, why: `NodeFence ${nodeName} is ${phase || "new"}`, fencePhase: phase || "Pending" };
  }
  const guards = i.policies.filter(keepsGuard);
  if (!i.node) {
    // A deleted Node proves nothing (a live kubelet re-creates it), and its labels are gone with it: which policy
    // selected it cannot be known. Fail closed for the pods any live guard's pod scope covers.
    const by = guards.find((p) => guardedWhy(i.pod, p.spec.guardedPods, i.pvc));
    if (!by) return { covered: false, why: `its Node ${nodeName} is gone and no live FencingPolicy with the guard covers the pod` };
    return {
      covered: true,
      guarded: guardedWhy(i.pod, by.spec.guardedPods, i.pvc)!,
      why: `its Node ${nodeName} is gone, so which policy selected it cannot be known; FencingPolicy ${policyName(by)} guards such pods`,
    };
  }
  const policy = governingPolicy(i.node, i.policies);
  if (!policy) return { covered: false, why: `no FencingPolicy selects node ${nodeName}` };
  const name = policyName(policy);
  if (policy.spec.dryRun) return { covered: false, why: `FencingPolicy ${name}, which selects node ${nodeName}, is a dry run` };
  if (policy.spec.forceDeleteGuard === false)
    return { covered: false, why: `FencingPolicy ${name}, which selects node ${nodeName}, has forceDeleteGuard: false` };
  const g = guardedWhy(i.pod, policy.spec.guardedPods, i.pvc);
  if (!g) {
    const out = !inPodScope(i.pod, policy.spec.guardedPods) && i.pod.metadata?.labels?.[GUARDED_LABEL] !== "false";
    return {
      covered: false,
      why: out
        ? `outside FencingPolicy ${name}'s scope (${describeScope(policy.spec.guardedPods)})`
        : `not guarded by FencingPolicy ${name}`,
    };
  }
  return { covered: true, guarded: g, why: `FencingPolicy ${name} selects node ${nodeName}`, policy: name };
}

export type GateScope = { covered: true; why: string; claims: ClaimPolicy } | { covered: false; why: string };

/**
 * Does the claim gate cover this pod? It is asked when the pod is created, before it has a node: the scope is the
 * namespaces and pod labels of the live policies that keep the claim lock. Until the cache has synced, every pod is
 * (the gate is lifted later if not: cheap, where a start without it cannot be undone).
 */
export function gateScope(pod: V1Pod, policies: readonly FencingPolicy[] | undefined): GateScope {
  if (!policies) return { covered: true, why: "the FencingPolicies are not loaded yet", claims: { readWriteOnceVolumes: true } };
  if (pod.metadata?.labels?.[GUARDED_LABEL] === "false") return { covered: false, why: `opted out by label ${GUARDED_LABEL}=false` };
  if (!policies.length) return { covered: false, why: "no FencingPolicy" };
  const locks = policies.filter(keepsClaimLock);
  if (!locks.length)
    return {
      covered: false,
      why: policies.some(isLive) ? "no live FencingPolicy keeps the claim lock (claimLock: false)" : "every FencingPolicy is a dry run",
    };
  const mine = locks.filter((p) => inPodScope(pod, p.spec.guardedPods));
  if (!mine.length) return { covered: false, why: `outside the scope of every FencingPolicy that keeps the claim lock` };
  return {
    covered: true,
    why: `in the scope of FencingPolicy ${mine.map(policyName).join(", ")}`,
    claims: { readWriteOnceVolumes: mine.some((p) => p.spec.guardedPods?.readWriteOnceVolumes ?? true) },
  };
}

/**
 * A claim of a gated pod that a NodeFence holds: another pod uses it on a node whose fence has not ended, so the gate
 * stays whatever the policies say now and comes off only by a grant (the claim lock's own proof: that instance gone,
 * or its node confirmed fenced).
 */
export interface FenceHold {
  claim: string;
  /** The pod that uses the claim on the fenced node. */
  user: string;
  node: string;
  /** The NodeFence's phase ("Pending" while it has none written yet). */
  phase: string;
}

export interface GateClaimsInput {
  /** The gated pod (or the pod being created). */
  pod: V1Pod;
  /** Claims of the pod's namespace, by name; undefined when not found. */
  pvc: (name: string) => V1PersistentVolumeClaim | undefined;
  /** Every FencingPolicy (the cache); undefined until the cache has synced. */
  policies: readonly FencingPolicy[] | undefined;
  /**
   * Pods that may use the pod's claims: the controller's fresh list of the namespace, or the webhook's cached pods of
   * the nodes being fenced. Pods of other namespaces are ignored.
   */
  pods: readonly V1Pod[];
  /** The NodeFence of a node (named after it): read fresh by the controller for the nodes fenceHoldNodes names. */
  fence: (node: string) => NodeFence | undefined;
}

export interface GateClaims {
  /** What the policies say now. */
  scope: GateScope;
  /** The claims the pod must be granted before its gate comes off, in claim-name order, with why each is guarded. */
  guarded: { claim: string; why: string }[];
  /** Of those, the ones only a NodeFence keeps guarded: the policies alone would let them go without a grant. */
  held: FenceHold[];
}

/**
 * Where the policies alone would not guard a claim of the pod but a fence could: the claim (exclusive, or opted in
 * by annotation: the claims the lock guards with the defaults) and the other pods bound to a node that use it. A
 * fence's snapshot does not narrow this (its pod scope and readWriteOnceVolumes were a policy's word too, and the
 * gate errs towards staying: a pod held here waits only for what a live policy's gate would wait for).
 */
function fenceCandidates(i: Omit<GateClaimsInput, "fence">, scope: GateScope): { claim: string; user: string; node: string }[] {
  if (podOptedOut(i.pod)) return [];
  const ns = i.pod.metadata?.namespace ?? "";
  const uid = i.pod.metadata?.uid;
  const out: { claim: string; user: string; node: string }[] = [];
  for (const claim of claimNames(i.pod)) {
    const pvc = i.pvc(claim);
    if (!pvc || (scope.covered && claimGuard(pvc, scope.claims).guarded)) continue;
    if (!claimGuard(pvc, { readWriteOnceVolumes: true }).guarded) continue;
    for (const p of i.pods) {
      const node = p.spec?.nodeName;
      if (!node || (p.metadata?.namespace ?? "") !== ns || (uid && p.metadata?.uid === uid)) continue;
      if (claimNames(p).includes(claim)) out.push({ claim, user: p.metadata?.name ?? "", node });
    }
  }
  return out;
}

/** The nodes whose NodeFence decides whether a claim of the pod is held (read them, then call gateClaims). */
export function fenceHoldNodes(i: Omit<GateClaimsInput, "fence">): string[] {
  return [...new Set(fenceCandidates(i, gateScope(i.pod, i.policies)).map((c) => c.node))].sort();
}

/**
 * A NodeFence that has not ended: from its creation (no phase yet, Pending, even before it has a snapshot: it is a
 * request to fence a node that may be silent) through Fencing, Fenced, Releasing, Released and Failed, to Unfencing;
 * only Unfenced (or the NodeFence's deletion) ends it. Released stays: the machine is held off, and a pod its release
 * did not delete is still on it (the grant then takes the fence's proof, if it still holds, as for any claim).
 */
export const fenceNotEnded = (f: NodeFence | undefined): f is NodeFence => !!f && HOLDING_PHASES.has(f.status?.phase ?? "");

/**
 * Which claims of a gated pod must be granted before its gate comes off: those the live policies that keep the claim
 * lock guard for it (gateScope, claimGuard), and — whatever the policies say now (deleted, dry run, claimLock off,
 * namespaces or podSelector narrowed) — any exclusive or opted-in claim that another pod uses on a node whose
 * NodeFence has not ended. An administrator who stops a pilot mid-fence (docs/pilot.md) must not let a Deployment's
 * replacement start on the claim while the old instance, on the node being fenced, may still write: that gate comes
 * off only by a grant, once that instance is gone or its node is confirmed fenced (decideClaim).
 */
export function gateClaims(i: GateClaimsInput): GateClaims {
  const scope = gateScope(i.pod, i.policies);
  const guarded = scope.covered
    ? claimNames(i.pod).flatMap((claim) => {
        const g = claimGuard(i.pvc(claim), scope.claims);
        return g.guarded ? [{ claim, why: g.why }] : [];
      })
    : [];
  const held: FenceHold[] = [];
  for (const c of fenceCandidates(i, scope)) {
    const f = i.fence(c.node);
    if (!fenceNotEnded(f) || held.some((h) => h.claim === c.claim)) continue;
    held.push({ ...c, phase: f.status?.phase || "Pending" });
  }
  for (const h of held) guarded.push({ claim: h.claim, why: heldWhy(h) });
  const order = claimNames(i.pod);
  guarded.sort((a, b) => order.indexOf(a.claim) - order.indexOf(b.claim));
  return { scope, guarded, held };
}

/** Why a fence holds the claim, in words (for Events and logs). */
export const heldWhy = (h: FenceHold): string =>
  `pod ${h.user} uses it on node ${h.node}, whose NodeFence is ${h.phase}: the gate stays until that instance is gone or the node is confirmed fenced, whatever the FencingPolicies say now`;
