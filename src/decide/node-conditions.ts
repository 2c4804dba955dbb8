// Condition triggers (FencingPolicy spec.triggers.nodeConditions): a node whose condition has had a status for
// forSeconds is due for fencing, as NodeHealthCheck users fence on Ready=False or node-problem-detector's
// KernelDeadlock. The conditions are written by the node itself (its kubelet, node-problem-detector): its clock may be
// skewed and it may lie. So how long a condition has held is measured on the operator's clock from when the operator
// first saw it held — never from the node's lastTransitionTime, which is only compared by value: a change means the
// condition flipped between two of our looks, and the wait starts again.
//
// Two clocks bound the wait: the wall clock (persisted in the policy's status, so a restarted or newly elected
// operator resumes) and this process's monotonic clock. The time held is the smaller of the two, so a wall clock set
// forward while the operator runs cannot shorten it; one set back only lengthens it. A successor seeds its monotonic
// record from the persisted wall time once, when it first sees the condition (that one reading is trusted).
//
// Who wrote the condition matters too: a condition counts only when its status was set by writers the trigger lists
// (trustedWriters; decide/condition-writers.ts). One set by another writer is not held — its wait starts again once a
// trusted writer sets it — and is reported instead.
import type { V1Node, V1NodeCondition } from "@kubernetes/client-node";
import { DateTime } from "luxon";
import { conditionTrust } from "./condition-writers.ts";

export type ConditionStatus = "True" | "False" | "Unknown";

export interface ConditionTrigger {
  type: string;
  status: ConditionStatus;
  forSeconds: number;
  /** The field managers trusted to set this condition; none listed: the trigger never holds. */
  trustedWriters?: readonly string[];
}

/** A trigger condition seen held on a node but not set by the trigger's trusted writers: reported, never acted on. */
export interface UntrustedCondition {
  node: string;
  type: string;
  status: string;
  /** Every field manager that owns the condition's status (empty: none recorded). */
  writers: string[];
  /** Those of them the trigger does not list. */
  untrusted: string[];
}

/** What the operator remembers of one node condition held: the policy's status form. */
export interface HeldCondition {
  node: string;
  type: string;
  status: string;
  /** When the operator first saw it held, on its wall clock (ISO). */
  since: string;
  /** The condition's lastTransitionTime as the node wrote it (compared by value only). */
  lastTransitionTime?: string;
}

/** A sighting held in memory: the persisted form plus this process's monotonic reading when it began. */
export interface Sighting extends HeldCondition {
  /** This process's monotonic clock (ms) at `since`, or as seeded from the persisted `since`. */
  sinceMono: number;
}

export interface Clocks {
  /** The wall clock. */
  now: DateTime;
  /** A monotonic clock, in ms (performance.now()); the CLI, which has none, passes undefined. */
  mono: number | undefined;
}

export const sightingKey = (node: string, type: string): string => `${node}\u0000${type}`;

/** The node's condition of this type, if it has that status (whoever wrote it). */
export function heldCondition(node: V1Node | undefined, t: Pick<ConditionTrigger, "type" | "status">): V1NodeCondition | undefined {
  const c = node?.status?.conditions?.find((x) => x.type === t.type);
  return c && c.status === t.status ? c : undefined;
}

/** The lastTransitionTime exactly as written (a Date from a list, a string from a watch), as one string to compare. */
function transitionOf(c: V1NodeCondition): string {
  const v = c.lastTransitionTime as Date | string | undefined | null;
  if (v === undefined || v === null) return "";
  if (typeof v === "string") {
    const ms = Date.parse(v);
    return Number.isNaN(ms) ? v : new Date(ms).toISOString();
  }
  return Number.isNaN(v.getTime()) ? "" : v.toISOString();
}

/**
 * The sighting of one trigger condition on one node after this look: undefined when it does not hold; the earlier
 * sighting when it held since (same lastTransitionTime); else one seeded from the persisted record (same
 * lastTransitionTime, not in the future of our clock), else a new one starting now.
 */
export function sight(
  node: V1Node,
  trigger: Pick<ConditionTrigger, "type" | "status">,
  prev: Sighting | undefined,
  persisted: HeldCondition | undefined,
  clocks: Clocks,
): Sighting | undefined {
  const c = heldCondition(node, trigger);
  if (!c) return undefined;
  const name = node.metadata?.name ?? "";
  const transition = transitionOf(c);
  const same = (x: HeldCondition | undefined) =>
    x !== undefined &&
    x.node === name &&
    x.type === trigger.type &&
    x.status === trigger.status &&
    (x.lastTransitionTime ?? "") === transition;
  if (prev && same(prev)) return prev;
  const nowMs = clocks.now.toMillis();
  const mono = clocks.mono ?? nowMs;
  if (!prev && persisted && same(persisted)) {
    const sinceMs = DateTime.fromISO(persisted.since).toMillis();
    // A record from our future (a clock set back since it was written) or unreadable counts from now.
    if (Number.isFinite(sinceMs) && sinceMs <= nowMs) return { ...persisted, sinceMono: mono - (nowMs - sinceMs) };
  }
  return {
    node: name,
    type: trigger.type,
    status: trigger.status,
    since: clocks.now.toUTC().toISO() ?? "",
    ...(transition ? { lastTransitionTime: transition } : {}),
    sinceMono: mono,
  };
}

/** Seconds the condition has held: the smaller of the wall-clock and monotonic elapsed times, never below 0. */
export function heldSeconds(s: Sighting, clocks: Clocks): number {
  const nowMs = clocks.now.toMillis();
  const wall = nowMs - DateTime.fromISO(s.since).toMillis();
  const mono = (clocks.mono ?? nowMs) - s.sinceMono;
  const ms = Math.min(Number.isFinite(wall) ? wall : 0, mono);
  return Math.max(0, ms / 1000);
}

export interface TriggerState {
  trigger: ConditionTrigger;
  sighting: Sighting;
  /** Seconds held so far. */
  held: number;
  /** Seconds left before it is due (0 when due). */
  left: number;
}

/**
 * Every trigger of the policy that holds on the node now, with how long it has held and how long is left, the first
 * due (or nearest to due) first. Records each sighting in `next`. Only conditions set by the trigger's trusted writers
 * hold; each other one the trigger finds is added to `untrusted`.
 */
export function triggerStates(
  node: V1Node,
  triggers: readonly ConditionTrigger[],
  prev: Pick<ReadonlyMap<string, Sighting>, "get">,
  persisted: Pick<ReadonlyMap<string, HeldCondition>, "get">,
  clocks: Clocks,
  next: Map<string, Sighting>,
  untrusted?: UntrustedCondition[],
): TriggerState[] {
  const name = node.metadata?.name ?? "";
  const out: TriggerState[] = [];
  for (const trigger of triggers) {
    // A trigger that lists no writer trusts nothing: the policy reports it once, not on every node.
    if (!trigger.trustedWriters?.length) continue;
    if (!heldCondition(node, trigger)) continue;
    const trust = conditionTrust(node, trigger.type, trigger.trustedWriters);
    if (!trust.trusted) {
      untrusted?.push({ node: name, type: trigger.type, status: trigger.status, writers: trust.writers, untrusted: trust.untrusted });
      continue;
    }
    const key = sightingKey(name, trigger.type);
    const s = sight(node, trigger, prev.get(key), persisted.get(key), clocks);
    if (!s) continue;
    next.set(key, s);
    const held = heldSeconds(s, clocks);
    out.push({ trigger, sighting: s, held, left: Math.max(0, trigger.forSeconds - held) });
  }
  return out.sort((a, b) => a.left - b.left);
}

/**
 * Whether a fence for this condition may go on: on a fresh read of the Node the condition still holds, set only by
 * the trigger's trusted writers.
 */
export function stillHeld(node: V1Node | undefined, t: Pick<ConditionTrigger, "type" | "status" | "trustedWriters">): boolean {
  return heldCondition(node, t) !== undefined && conditionTrust(node, t.type, t.trustedWriters).trusted;
}

/** The persisted records of a policy's status, by key. */
export function persistedSightings(held: readonly HeldCondition[] | undefined): Map<string, HeldCondition> {
  return new Map((held ?? []).map((h) => [sightingKey(h.node, h.type), h] as const));
}

/** At most this many held conditions are persisted per policy (the status list's maxItems); the oldest are kept. */
export const MAX_HELD_CONDITIONS = 1000;

/** The status form of the sightings: sorted, bounded, without the monotonic reading. */
export function heldForStatus(sightings: readonly Sighting[]): HeldCondition[] {
  return sightings
    .map(({ node, type, status, since, lastTransitionTime }) => ({
      node,
      type,
      status,
      since,
      ...(lastTransitionTime ? { lastTransitionTime } : {}),
    }))
    .sort((a, b) => a.since.localeCompare(b.since) || a.node.localeCompare(b.node) || a.type.localeCompare(b.type))
    .slice(0, MAX_HELD_CONDITIONS);
}
