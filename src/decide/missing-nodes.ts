// Guarded pods bound to a Node that no longer exists. The pod GC controller's force delete of them is refused (a
// deleted Node proves nothing: docs/safety.md §1), so they wait until a NodeFence fences their machine and releases
// them: this is what the operator shows about them (a gauge and an alert) so that a person learns of it. Pure.
import type { V1PersistentVolumeClaim, V1Pod } from "@kubernetes/client-node";
import type { FencingPolicy, NodeFence } from "../api/v1alpha1.ts";
import { guardedWhy, keepsGuard } from "./scope.ts";

export interface WaitingOnMissingNode {
  node: string;
  /** Guarded pods bound to it: covered by the pod scope of a live FencingPolicy that keeps the guard. */
  pods: number;
  /** Whether this process saw the Node before it was deleted (a fence can start on what it saw). */
  remembered: boolean;
  /** Its NodeFence's phase ("" for one not started); undefined when there is none. */
  fencePhase?: string;
}

export interface MissingNodesInput {
  /** Every node name that some cached pod is bound to. */
  podNodes: Iterable<string>;
  nodeExists: (name: string) => boolean;
  podsOn: (name: string) => readonly V1Pod[];
  policies: readonly FencingPolicy[];
  pvcs: ReadonlyMap<string, V1PersistentVolumeClaim>;
  fence: (name: string) => NodeFence | undefined;
  remembered: (name: string) => boolean;
}

/** The missing Nodes that guarded pods are bound to, by name. */
export function guardedPodsOnMissingNodes(i: MissingNodesInput): WaitingOnMissingNode[] {
  const guards = i.policies.filter(keepsGuard);
  if (!guards.length) return [];
  const out: WaitingOnMissingNode[] = [];
  for (const node of new Set(i.podNodes)) {
    if (!node || i.nodeExists(node)) continue;
    // Which policy selected the node cannot be known (its labels went with it): any live guard's pod scope, as the
    // force-delete guard decides for these pods.
    const pods = i.podsOn(node).filter((p) => {
      const ns = p.metadata?.namespace ?? "";
      return guards.some((g) => guardedWhy(p, g.spec.guardedPods, (c) => i.pvcs.get(`${ns}/${c}`)));
    }).length;
    if (!pods) continue;
    const f = i.fence(node);
    out.push({ node, pods, remembered: i.remembered(node), ...(f ? { fencePhase: f.status?.phase ?? "" } : {}) });
  }
  return out.sort((a, b) => a.node.localeCompare(b.node));
}
