// "When in doubt, stop." Many nodes silent at once, a whole zone silent, or our own watches silent look
// like a network or control-plane failure, not dead machines: fencing then would turn an outage of the
// control plane into an outage of the workloads. The guard holds, and says why.
import { nameList } from "./name-list.ts";

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

export type Hold = { reason: "TooManyUnhealthyNodes" | "WatchesStale" | "ZonePartitioned"; message: string };

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
