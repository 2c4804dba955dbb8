// "When in doubt, stop." Many nodes silent at once, a whole zone silent, or our own watches silent look
// like a network or control-plane failure, not dead machines: fencing then would turn an outage of the
// control plane into an outage of the workloads. The guard holds, and says why.
import { nameList } from "./name-list.ts";
import type { NodeHealth } from "./node-health.ts";

export interface Guards {
  maxConcurrentFences?: number;
  maxUnhealthyNodes?: number | string;
  zoneTopologyKey?: string;
  minZoneSize?: number;
  maxWatchStalenessSeconds?: number;
}

export interface GuardNode {
  name: string;
  unhealthy: boolean;
  labels: Record<string, string>;
}

export interface GuardInput {
  guards: Guards | undefined;
  /** Every node the policy selects. */
  nodes: readonly GuardNode[];
  /** Fences of this policy still in flight (Pending or Fencing). */
  activeFences: number;
  /** Seconds since the least recently active watch we depend on saw an event or reconnected. */
  watchStalenessSeconds: number;
}

export type Hold = { reason: "TooManyUnhealthyNodes" | "WatchesStale" | "ZonePartitioned" | "ClusterStorm"; message: string };

export interface GuardVerdict {
  /** Holds that stop all fencing under this policy. */
  holds: Hold[];
  /** Nodes that may not be fenced because their whole zone is silent, with the zone's hold. */
  blocked: Map<string, Hold>;
  /** How many new fences may start now. */
  slots: number;
}

/** The allowed number of unhealthy nodes: an absolute count, or a percentage of the selected nodes (at least 1). */
export function unhealthyLimit(v: number | string | undefined, total: number): number {
  const spec = v ?? "50%";
  if (typeof spec === "number") return spec;
  const m = /^(\d{1,3})%$/.exec(spec);
  if (m) return Math.max(1, Math.floor((Number(m[1]) * total) / 100));
  const n = Number(spec);
  return Number.isInteger(n) ? n : 1;
}

export function evaluateGuards(i: GuardInput): GuardVerdict {
  const g = i.guards ?? {};
  const holds: Hold[] = [];
  const maxStale = g.maxWatchStalenessSeconds ?? 60;
  if (i.watchStalenessSeconds > maxStale) {
    holds.push({
      reason: "WatchesStale",
      message: `the operator's own watches have been silent for ${Math.round(i.watchStalenessSeconds)} s (limit ${maxStale} s): it cannot tell a dead node from its own partition`,
    });
  }
  const unhealthy = i.nodes.filter((n) => n.unhealthy);
  const limit = unhealthyLimit(g.maxUnhealthyNodes, i.nodes.length);
  if (unhealthy.length > limit) {
    holds.push({
      reason: "TooManyUnhealthyNodes",
      message: `${unhealthy.length} of ${i.nodes.length} nodes are unhealthy (${nameList(unhealthy.map((n) => n.name).sort())}), more than maxUnhealthyNodes ${g.maxUnhealthyNodes ?? "50%"} = ${limit}: this looks like a network or control-plane failure`,
    });
  }
  const blocked = new Map<string, Hold>();
  const key = g.zoneTopologyKey ?? "topology.kubernetes.io/zone";
  if (key) {
    const zones = new Map<string, GuardNode[]>();
    for (const n of i.nodes) {
      const z = n.labels[key];
      if (z === undefined) continue;
      const members = zones.get(z);
      if (members) members.push(n);
      else zones.set(z, [n]);
    }
    for (const [zone, members] of zones) {
      if (members.length >= (g.minZoneSize ?? 2) && members.every((n) => n.unhealthy)) {
        const hold: Hold = {
          reason: "ZonePartitioned",
          message: `every node of ${key}=${zone} (${members.length}) is unhealthy: a whole topology domain going silent looks like a network failure`,
        };
        for (const n of members) blocked.set(n.name, hold);
      }
    }
  }
  const slots = holds.length ? 0 : Math.max(0, (g.maxConcurrentFences ?? 1) - i.activeFences);
  return { holds, blocked, slots };
}

/**
 * The cluster-wide limit's default (the operator's --cluster-max-unhealthy-nodes): half of the nodes, as a policy's
 * maxUnhealthyNodes, so that a policy selecting every node holds at the same count with or without it, and one dead
 * node of a 1-, 2- or 3-node cluster is still fenced (the limit is at least 1).
 */
export const DEFAULT_CLUSTER_MAX_UNHEALTHY_NODES = "50%";

/**
 * Whether a node counts as silent for the cluster-wide storm guard: no heartbeat for the timeout, or two renewals of
 * its Lease missed (nodes cut off at one moment renewed last up to one renewal apart: the first is due before the
 * others are silent, but they all lag by then), or Ready=Unknown (the node controller saw it silent). A node that
 * writes Ready=False is talking: it says nothing about the network or the observer.
 */
export const silentForStorm = (h: Pick<NodeHealth, "silent" | "lagging" | "ready" | "heard">): boolean =>
  !h.heard && (h.silent || h.lagging || h.ready === "Unknown");

/**
 * The cluster-wide storm guard. A policy's own guard counts the nodes it selects, so a policy of one node never
 * trips it, and a small policy does not see the rest of the cluster go silent around it. Many nodes silent together
 * anywhere — selected by another policy, by none — say that the network, the control plane or this observer is in
 * trouble, which none of the silent nodes can be told apart from: while more than `limit` of all the nodes the
 * operator sees are silent, every policy holds.
 */
export function clusterStorm(
  nodes: readonly Pick<NodeHealth, "name" | "silent" | "lagging" | "ready" | "heard">[],
  limit: number | string | undefined,
): Hold | undefined {
  const spec = limit ?? DEFAULT_CLUSTER_MAX_UNHEALTHY_NODES;
  const max = unhealthyLimit(spec, nodes.length);
  // Counted first, named only when it holds: this runs over every node on every pass.
  let count = 0;
  for (const h of nodes) if (silentForStorm(h)) count++;
  if (count <= max) return undefined;
  const names = nodes
    .filter(silentForStorm)
    .map((h) => h.name)
    .sort();
  return {
    reason: "ClusterStorm",
    message: `${count} of the cluster's ${nodes.length} nodes are silent (${nameList(names)}), more than the operator's --cluster-max-unhealthy-nodes ${spec} = ${max}: nodes going silent together, whatever policy selects them, look like a network, control-plane or observer failure; nothing is fenced until it ends`,
  };
}
