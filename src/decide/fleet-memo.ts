// What a fleet pass worked out for each node that only the node's own objects and the clock can change, kept for the
// next pass: the fleet decision reuses it for a node whose inputs are those it was worked out from, instead of
// assessing the node again. At 5,000 nodes a pass in a burst finds a few dozen nodes changed (their Lease renewed, a
// Node written, a fence made): the others cost a lookup and a few comparisons. Only nodes found heartbeating (not
// silent: their Lease's observed silence is not read), holding no trigger condition (nor one from an untrusted writer,
// which each pass reports), without a fence in a holding phase are kept, as they are decided "Healthy": every other
// node (silent, partitioned, fenced, holding a condition) is assessed afresh on every pass, as before. The decision is
// the same with or without a memo (test/unit/decide-fleet-memo.test.ts runs random sequences of changes and compares
// both after every step).
//
// What an entry is keyed by, all compared on every use:
// - the Node object, its Ready condition's status and heartbeat time, its labels, and the Lease object with its
//   renewTime and leaseDurationSeconds (the caches replace objects, never change them in place; the values read are
//   compared too, so one changed in place is assessed again, never read stale);
// - the NodeFence of the node (the object, or none);
// - the policies: any change to the list (a policy added, removed, renamed, reordered, or its spec changed) forgets
//   every entry. A policy's status is not read for a node decided Healthy (only for nodes that are due, held, or hold
//   a trigger condition, never kept): the pass's own status writes, on every pass of a burst, keep the entries;
// - the clock: the health it holds is valid in a window of wall-clock time, [validFromMs, validUntilMs): until the
//   node would start lagging (two missed renewals of its Lease), and once lagging until its silence reaches the
//   heartbeat timeout. A node whose Lease simply stops being renewed sends no event: its entry runs out by the
//   clock, the pass assesses it again, and the pass's nextCheck wakes it at that time (the health's nextCheckMs).
//   A wall clock set back before validFromMs (the node was lagging) is outside the window too.
import { isDeepStrictEqual } from "node:util";
import type { V1Lease, V1Node, V1NodeCondition } from "@kubernetes/client-node";
import type { FencingPolicy, NodeFence } from "../api/v1alpha1.ts";
import { lagSecondsOf, type NodeHealth } from "./node-health.ts";
import type { NodeDownChange } from "./node-down.ts";
import type { GuardNode } from "./storm-guard.ts";

/** One node's reusable assessment, and the inputs it came from. */
export interface NodeMemo {
  node: V1Node;
  ready: V1NodeCondition | undefined;
  readyStatus: string | undefined;
  readyBeat: Date | string | undefined;
  labels: Record<string, string> | undefined;
  lease: V1Lease | undefined;
  renewTime: Date | string | undefined;
  leaseDuration: number | undefined;
  fence: NodeFence | undefined;
  /** The window of wall-clock time (epoch ms) in which the health is what the clock makes it. */
  validFromMs: number;
  validUntilMs: number;
  policy: FencingPolicy | undefined;
  health: NodeHealth;
  /** What the node's pods' NodeDown condition should be (the node's pods are read on every pass). */
  want: NodeDownChange["condition"];
  /** The node's decision ("Healthy"): the same object on every pass that reuses it. */
  decision: { node: string; verdict: "Healthy"; message: string; policy: string | undefined; health: NodeHealth };
  /** Whether each policy (by its index in the list) selects the node, worked out when first asked. */
  selected: (boolean | undefined)[];
  /** The node as the storm guard counts it. */
  guard: GuardNode | undefined;
  /** The pass that last used it: entries of nodes gone are forgotten. */
  pass: number;
}

/**
 * The memo a caller keeps from one fleet decision to the next (the health controller's: one per process). Give the
 * same one to every decision of the same fleet; it changes nothing that is decided, only how much is worked out again.
 */
export class FleetMemo {
  readonly nodes = new Map<string, NodeMemo>();
  /** The policies the entries were worked out under. */
  private policies: readonly FencingPolicy[] = [];
  pass = 0;

  /** Starts a pass: a policy list other than the last pass's (a policy added, removed, or its spec changed) forgets everything. */
  begin(policies: readonly FencingPolicy[]): void {
    this.pass++;
    if (policies.length !== this.policies.length || policies.some((p, k) => !sameSpec(p, this.policies[k]!))) this.nodes.clear();
    this.policies = [...policies];
  }

  /** Ends a pass over `live` nodes: forgets the entries of nodes not seen in it, once they are many. */
  end(live: number): void {
    if (this.nodes.size > live + 64) for (const [n, e] of this.nodes) if (e.pass !== this.pass) this.nodes.delete(n);
  }

  /** The node's entry, if every input it was worked out from is the same and `nowMs` is in its window. */
  lookup(
    name: string,
    node: V1Node,
    ready: V1NodeCondition | undefined,
    lease: V1Lease | undefined,
    fence: NodeFence | undefined,
    nowMs: number,
  ): NodeMemo | undefined {
    const e = this.nodes.get(name);
    if (
      e === undefined ||
      e.node !== node ||
      e.ready !== ready ||
      e.readyStatus !== ready?.status ||
      e.readyBeat !== ready?.lastHeartbeatTime ||
      e.labels !== node.metadata?.labels ||
      e.lease !== lease ||
      e.renewTime !== lease?.spec?.renewTime ||
      e.leaseDuration !== lease?.spec?.leaseDurationSeconds ||
      e.fence !== fence ||
      nowMs < e.validFromMs ||
      nowMs >= e.validUntilMs
    )
      return undefined;
    e.pass = this.pass;
    return e;
  }

  /** Keeps a node decided Healthy from a health that is not silent (see the module's comment), for later passes. */
  keep(
    entry: Pick<NodeMemo, "node" | "lease" | "fence" | "policy" | "health" | "want" | "decision">,
    ready: V1NodeCondition | undefined,
  ): NodeMemo | undefined {
    const h = entry.health;
    // Lagging yet heard from lately (a node whose clock runs behind): whether the storm guards count it changes with the
    // operator's own clock alone, which the window below does not follow; decided afresh on every pass.
    if (h.silent || (h.lagging && h.heard)) return undefined;
    const [validFromMs, validUntilMs] = healthWindow(h, entry.lease);
    // The node's entry is updated in place where it has one: renewals replace a tenth of them every second.
    const e = this.nodes.get(h.name) ?? ({ selected: [] } as unknown as NodeMemo);
    e.node = entry.node;
    e.ready = ready;
    e.readyStatus = ready?.status;
    e.readyBeat = ready?.lastHeartbeatTime;
    e.labels = entry.node.metadata?.labels;
    e.lease = entry.lease;
    e.renewTime = entry.lease?.spec?.renewTime;
    e.leaseDuration = entry.lease?.spec?.leaseDurationSeconds;
    e.fence = entry.fence;
    e.validFromMs = validFromMs;
    e.validUntilMs = validUntilMs;
    e.policy = entry.policy;
    e.health = h;
    e.want = entry.want;
    e.decision = entry.decision;
    e.selected.length = 0;
    e.guard = undefined;
    e.pass = this.pass;
    this.nodes.set(h.name, e);
    return e;
  }
}

/** The same policy as far as a node decided Healthy goes: its name and its spec (not its status). */
function sameSpec(a: FencingPolicy, b: FencingPolicy): boolean {
  return a === b || (a.metadata?.name === b.metadata?.name && isDeepStrictEqual(a.spec, b.spec));
}

/**
 * The wall-clock window in which a health that is not silent stays what it is with the same inputs (node_health.ts
 * assessNode): a node that never reported stays so whatever the clock; otherwise not lagging until lastHeartbeat plus
 * two renewals (or the timeout), then lagging until lastHeartbeat plus the timeout, where it turns silent.
 */
export function healthWindow(h: NodeHealth, lease: V1Lease | undefined): [number, number] {
  if (h.lastHeartbeatMs === undefined) return [-Infinity, Infinity];
  const lagAt = h.lastHeartbeatMs + lagSecondsOf(lease, h.timeoutSeconds) * 1000;
  const staleAt = h.lastHeartbeatMs + h.timeoutSeconds * 1000;
  return h.lagging ? [lagAt, staleAt] : [-Infinity, Math.min(lagAt, staleAt)];
}
