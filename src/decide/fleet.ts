// The fleet decision: from everything observed, which pods get NodeDown, which nodes get a NodeFence,
// and why every other partitioned node does not. Pure: observed state, policies and a clock in,
// intentions out; the health controller applies them.
import type { V1Lease, V1Node, V1PersistentVolumeClaim, V1Pod, V1PodDisruptionBudget } from "@kubernetes/client-node";
import { DateTime } from "luxon";
import type { FencingPolicy, NodeFence } from "../api/v1alpha1.ts";
import { podWaitSeconds } from "./forgiveness.ts";
import { provenFinished } from "./claim-lock.ts";
import { isGuarded } from "./guarded-pods.ts";
import { assessNode, DEFAULT_HEARTBEAT_TIMEOUT_SECONDS, partitionSignal, readyCondition, type NodeHealth } from "./node-health.ts";
import type { FleetMemo, NodeMemo } from "./fleet-memo.ts";
import { desiredNodeDown, hasNodeDown, nodeDownChange, type NodeDownChange } from "./node-down.ts";
import { orderCandidates, podPriority, type Candidate } from "./priority.ts";
import {
  heldForStatus,
  persistedSightings,
  triggerStates,
  type ConditionTrigger,
  type HeldCondition,
  type Sighting,
  type TriggerState,
  type UntrustedCondition,
} from "./node-conditions.ts";
import { quorumRefusal } from "./quorum.ts";
import { governingPolicy, matchesSelector } from "./selectors.ts";
import { ACTIVE_PHASES, FENCED_PHASES, HOLDING_PHASES } from "./fence-phases.ts";
import { coveringPolicies, goneHealth, goneNodePolicy, goneNodeStep, manualFenceCommand, type GoneNode } from "./gone-nodes.ts";
import { clusterStorm, evaluateGuards, type Hold } from "./storm-guard.ts";

export { DEFAULT_HEARTBEAT_TIMEOUT_SECONDS };
export type { GoneNode };

export interface FleetInput {
  now: DateTime;
  nodes: readonly V1Node[];
  /** Node Leases by node name. */
  leases: Pick<ReadonlyMap<string, V1Lease>, "get">;
  /**
   * How long the operator has seen this Lease's renewTime unchanged (monotonic ms, kube/lease-observer.ts): the Lease
   * counts as expired once that reaches its leaseDurationSeconds. Absent (the CLI): the Lease never counts.
   */
  leaseSilentMs?: (node: string, lease: V1Lease) => number | undefined;
  pods: PodsByNode;
  /** Claims by "namespace/name". */
  pvcs: ReadonlyMap<string, V1PersistentVolumeClaim>;
  pdbs: readonly V1PodDisruptionBudget[];
  policies: readonly FencingPolicy[];
  /** NodeFences by name (= node name). */
  fences: ReadonlyMap<string, NodeFence>;
  watchStalenessSeconds: number;
  /**
   * How many of all the nodes (count, or percentage) may be silent before every policy holds (the cluster-wide storm
   * guard, storm-guard.ts clusterStorm; the operator's --cluster-max-unhealthy-nodes). Default 50%.
   */
  clusterMaxUnhealthyNodes?: number | string;
  /** The operator's monotonic clock (ms, performance.now()); undefined where there is none (the CLI). */
  mono?: number;
  /** What the last pass saw of trigger conditions held (FleetDecision.sightings); absent: only the policies' status. */
  sightings?: Pick<ReadonlyMap<string, Sighting>, "get">;
  /**
   * What earlier decisions of the same fleet worked out per node (decide/fleet-memo.ts): reused for each node whose
   * inputs did not change, and updated. The decision is the same with or without it.
   */
  memo?: FleetMemo;
  /**
   * Only the first of each node's NodeDown changes (they all carry the node's one condition): the health controller
   * queues writes by node and reads the pods when it writes them. A pass that listed every pod of 3,700 silent nodes
   * made 110,000 changes, every pass, for a queue that keeps one per node.
   */
  nodeDownFirstOnly?: boolean;
  /**
   * Nodes that pods are bound to and whose Node does not exist (decide/gone-nodes.ts): fenced as last seen when this
   * process saw them, reported on the policies otherwise. Absent: none.
   */
  goneNodes?: readonly GoneNode[];
}

/**
 * The pods of each node, as the operator's cache indexes them: a pass reads the pods of the few partitioned or
 * fenced nodes, and of every other node only those that still carry NodeDown, never all of the cluster's pods.
 */
export interface PodsByNode {
  on(node: string): readonly V1Pod[];
  /** The node's pods that carry a NodeDown condition (any status): the only ones a healthy node's pass can change. */
  markedOn(node: string): readonly V1Pod[];
}

/** A PodsByNode over a plain list (the CLI's, the tests'): the operator's comes from its cache's indexes. */
export function podsByNode(pods: readonly V1Pod[]): PodsByNode {
  const all = new Map<string, V1Pod[]>();
  const marked = new Map<string, V1Pod[]>();
  const add = (by: Map<string, V1Pod[]>, n: string, p: V1Pod) => {
    const list = by.get(n);
    if (list) list.push(p);
    else by.set(n, [p]);
  };
  for (const p of pods) {
    const n = p.spec?.nodeName;
    if (!n) continue;
    add(all, n, p);
    if (hasNodeDown(p)) add(marked, n, p);
  }
  return { on: (n) => all.get(n) ?? [], markedOn: (n) => marked.get(n) ?? [] };
}

export type Verdict =
  | "Healthy"
  | "NoPolicy"
  | "NothingToProtect"
  | "Tolerated"
  | "Waiting"
  | "Paused"
  | "Held"
  | "Queued"
  | "DryRun"
  | "Fence"
  | "HasFence"
  | "ControlPlane"
  /** The node's Node is gone and this process never saw it: a person must fence it. */
  | "NotRemembered";

export interface NodeDecision {
  node: string;
  verdict: Verdict;
  message: string;
  policy?: string;
  health: NodeHealth;
  /** The policy's condition triggers that hold on the node now, with how long held and how long left. */
  triggers?: readonly TriggerState[];
}

export interface FenceIntent {
  node: string;
  policy: string;
  reason: string;
  lastHeartbeat: string | undefined;
  /** An Unfenced NodeFence of an earlier episode is in the way and must be replaced. */
  replaces: NodeFence | undefined;
  /** The node condition that made it due; undefined: the node's silence. */
  trigger?: ConditionTrigger;
  /** The Node was gone: decided on the Node as last seen; the fresh read before the create must find it still gone. */
  gone?: true;
}

export interface PolicyState {
  holds: Hold[];
  /** Nodes whose heartbeat timeout was raised above the policy's to two renewals of their Lease. */
  raisedTimeouts: { node: string; seconds: number }[];
  partitioned: string[];
  activeFences: number;
  wouldFence: string[];
  queued: string[];
  /** Trigger conditions held on the nodes this policy governs, for its status (where the next leader resumes from). */
  held: HeldCondition[];
  /** Nodes due for fencing that are not fenced because they hold up the control plane, and why. */
  controlPlane: { node: string; message: string }[];
  /** Trigger conditions held on its nodes but set by writers the trigger does not trust: ignored, and reported. */
  untrusted: UntrustedCondition[];
  /** Its triggers that list no trusted writer ("Type=Status"): they never hold. */
  unlisted: string[];
  /**
   * Gone Nodes that nothing fences on its own (this process never saw them, or no policy selects them as last seen),
   * with guarded pods under this policy's pod scope bound to them: they wait for a person (the MissingNodes
   * condition). Present only when there are some.
   */
  missing?: { node: string; pods: number; command: string; remembered: boolean }[];
}

export interface FleetDecision {
  decisions: NodeDecision[];
  nodeDown: NodeDownChange[];
  create: FenceIntent[];
  policies: Map<string, PolicyState>;
  /** When to look again if nothing happens before. */
  nextCheck: DateTime | undefined;
  /** Trigger conditions held now, as seen by this pass: the next pass's `sightings`. */
  sightings: Map<string, Sighting>;
}

export { ACTIVE_PHASES, FENCED_PHASES, HOLDING_PHASES };

const phaseOf = (f: NodeFence) => f.status?.phase ?? "";
const iso = (d: DateTime | undefined) => d?.toUTC().toISO({ suppressMilliseconds: true }) ?? undefined;

const NONE_HELD: readonly TriggerState[] = [];

export function decideFleet(i: FleetInput): FleetDecision {
  const decisions: NodeDecision[] = [];
  const nodeDown: NodeDownChange[] = [];
  // Each node's health, at the node's index in i.nodes: a Map by name cost a tenth of a pass at 5,000 nodes.
  const healths: NodeHealth[] = new Array<NodeHealth>(i.nodes.length);
  // Whether a trigger condition of its policy holds on the node (any time yet): the storm guard counts it unhealthy.
  const conditionHeld: boolean[] = new Array<boolean>(i.nodes.length).fill(false);
  const candidates = new Map<
    string,
    (Candidate & {
      policy: FencingPolicy;
      health: NodeHealth;
      why: string;
      trigger?: ConditionTrigger;
      triggers?: readonly TriggerState[];
      /** A gone node: its Node as last seen. */
      lastSeen?: V1Node;
    })[]
  >();
  const sightings = new Map<string, Sighting>();
  const heldBy = new Map<string, Sighting[]>();
  const untrustedBy = new Map<string, UntrustedCondition[]>();
  const persisted = new Map<string, Map<string, HeldCondition>>();
  const clocks = { now: i.now, mono: i.mono };
  const noSightings = { get: () => undefined };
  let nextCheckMs: number | undefined;
  const wake = (ms: number | undefined) => {
    if (ms !== undefined && (nextCheckMs === undefined || ms < nextCheckMs)) nextCheckMs = ms;
  };

  const memo = i.memo;
  memo?.begin(i.policies);
  const nowMs = i.now.toMillis();
  // Each node's memo entry, at its index in i.nodes: reused this pass, or kept from it for the next.
  const kept: (NodeMemo | undefined)[] = new Array<NodeMemo | undefined>(memo ? i.nodes.length : 0);

  for (let k = 0; k < i.nodes.length; k++) {
    const node = i.nodes[k]!;
    const name = node.metadata?.name ?? "";
    const lease = i.leases.get(name);
    const fence = i.fences.get(name);
    const ready = memo && readyCondition(node);
    const e = memo?.lookup(name, node, ready, lease, fence, nowMs);
    if (e) {
      // Nothing it was decided from changed, and the clock alone has not changed it: the same decision again. Its
      // pods are read as for any node (they are not among the inputs kept).
      kept[k] = e;
      // The Lease observer is not asked: the entry holds this same Lease object, which the pass that kept it (and the
      // cache's own events before that) already showed the observer, and a heartbeating node's health does not read it.
      healths[k] = e.health;
      wake(e.health.nextCheckMs);
      for (const p of e.want ? i.pods.on(name) : i.pods.markedOn(name)) {
        const c = nodeDownChange(p, e.want, e.health);
        if (!c) continue;
        nodeDown.push(c);
        if (i.nodeDownFirstOnly) break;
      }
      decisions.push(e.decision);
      continue;
    }
    const policy = governingPolicy(node, i.policies);
    const h = assessNode(
      node,
      lease,
      i.now,
      policy?.spec.detection?.heartbeatTimeoutSeconds ?? DEFAULT_HEARTBEAT_TIMEOUT_SECONDS,
      policy?.spec.detection?.waitForNodeController ?? false,
      lease && i.leaseSilentMs?.(name, lease),
    );
    healths[k] = h;
    wake(h.nextCheckMs);
    const holding = fence !== undefined && HOLDING_PHASES.has(phaseOf(fence));
    const want = desiredNodeDown(h, fence !== undefined && FENCED_PHASES.has(phaseOf(fence)));
    // Where no pod should carry NodeDown, only those that carry it can change: at 5,000 nodes this is what keeps a
    // pass from walking 150,000 pods.
    for (const p of want ? i.pods.on(name) : i.pods.markedOn(name)) {
      const c = nodeDownChange(p, want, h);
      if (!c) continue;
      nodeDown.push(c);
      if (i.nodeDownFirstOnly) break;
    }
    // The policy's condition triggers that hold on the node: each measured from when the operator first saw it held.
    const pname = policy?.metadata?.name ?? "";
    const triggers = policy?.spec.triggers?.nodeConditions;
    let held: readonly TriggerState[] = NONE_HELD;
    let untrusted = false;
    if (triggers?.length && !holding) {
      let p = persisted.get(pname);
      if (!p) persisted.set(pname, (p = persistedSightings(policy?.status?.heldConditions)));
      let u = untrustedBy.get(pname);
      if (!u) untrustedBy.set(pname, (u = []));
      const before = u.length;
      held = triggerStates(node, triggers, i.sightings ?? noSightings, p, clocks, sightings, u);
      untrusted = u.length > before;
      if (held.length) {
        conditionHeld[k] = true;
        const list = heldBy.get(pname);
        if (list) list.push(...held.map((t) => t.sighting));
        else
          heldBy.set(
            pname,
            held.map((t) => t.sighting),
          );
      }
    }
    const decide = (verdict: Verdict, message: string) =>
      decisions.push({
        node: name,
        verdict,
        message,
        policy: policy?.metadata?.name,
        health: h,
        ...(held.length ? { triggers: held } : {}),
      });

    if (holding) {
      decide("HasFence", `NodeFence ${name} is ${phaseOf(fence) || "new"}`);
      continue;
    }
    const partitioned = h.state === "Partitioned";
    if (!partitioned && !held.length) {
      decide("Healthy", h.state === "Healthy" ? "heartbeats are current" : `not partitioned yet (Ready=${h.ready})`);
      // Not kept while it shows a trigger condition from an untrusted writer: each pass reports it.
      if (memo && !untrusted) {
        const decision = decisions[decisions.length - 1] as NodeMemo["decision"];
        kept[k] = memo.keep({ node, lease, fence, policy, health: h, want, decision }, ready);
      }
      continue;
    }
    if (!policy) {
      decide("NoPolicy", "no FencingPolicy selects this node");
      continue;
    }
    const pvcs = i.pvcs;
    // On a partitioned node no phase is proof (the pod GC controller writes Failed itself): a Failed pod may still run.
    // On a node that heartbeats a finished pod is finished, but is not released either (nothing to release).
    const guarded = i.pods.on(name).filter((p) => !provenFinished(p, false) && isGuarded(p, policy.spec.guardedPods, pvcs).guarded);
    if (!guarded.length) {
      decide("NothingToProtect", "no guarded pods on the node: fencing it would release nothing");
      continue;
    }
    // After a storm, the wait starts again when the storm ended: when a network comes back, kubelets
    // reconnect over seconds, and the last ones are not dead machines (only ever delays a fence).
    const stormEnd = stormEndedAt(policy);
    // Each reason the node may be due (its silence, each condition held), with when; the first due decides.
    const reasons: { at: DateTime; waiting: string; why: string; waited: number; trigger?: ConditionTrigger }[] = [];
    let tolerated = false;
    if (partitioned) {
      const waits = guarded.map((p) => podWaitSeconds(p, policy.spec.detection)).filter((w): w is number => w !== null);
      if (!waits.length) tolerated = true;
      else {
        const wait = Math.min(...waits);
        const partitionedSince = h.partitionedSince ?? i.now;
        const since = stormEnd && stormEnd > partitionedSince ? stormEnd : partitionedSince;
        reasons.push({
          at: since.plus({ seconds: wait }),
          waiting:
            since === partitionedSince
              ? `partitioned since ${iso(since)}; guarded pods wait ${wait} s, until ${iso(since.plus({ seconds: wait }))}`
              : `partitioned since ${iso(partitionedSince)}, through a storm that ended at ${iso(since)}; guarded pods wait ${wait} s from then, until ${iso(since.plus({ seconds: wait }))}`,
          why: `no heartbeat since ${iso(h.lastHeartbeat)} (Ready=${h.ready}); partitioned because ${partitionSignal(h)}; ${guarded.length} guarded pod(s) waited ${wait} s`,
          waited: i.now.diff(since, "seconds").seconds,
        });
      }
    }
    for (const t of held) {
      const c = t.trigger;
      const sinceStorm = stormEnd ? Math.max(0, i.now.diff(stormEnd, "seconds").seconds) : Infinity;
      const counted = Math.min(t.held, sinceStorm);
      const at = i.now.plus({ seconds: Math.max(0, c.forSeconds - counted) });
      const cond = `condition ${c.type}=${c.status}`;
      reasons.push({
        at,
        waiting:
          counted < t.held
            ? `${cond} held since ${t.sighting.since} (operator's clock), through a storm that ended at ${iso(stormEnd)}; fenced after ${c.forSeconds} s from then, at ${iso(at)} (${Math.ceil(c.forSeconds - counted)} s left)`
            : `${cond} held since ${t.sighting.since} (operator's clock, ${Math.floor(t.held)} s); fenced after ${c.forSeconds} s, at ${iso(at)} (${Math.ceil(c.forSeconds - counted)} s left)`,
        why: `${cond} held for ${Math.floor(t.held)} s (since ${t.sighting.since}, operator's clock), at least forSeconds ${c.forSeconds}; ${guarded.length} guarded pod(s)`,
        waited: counted,
        trigger: { type: c.type, status: c.status, forSeconds: c.forSeconds, trustedWriters: [...(c.trustedWriters ?? [])] },
      });
    }
    if (!reasons.length) {
      decide("Tolerated", "every guarded pod tolerates node.kubernetes.io/unreachable forever");
      continue;
    }
    const first = reasons.reduce((a, b) => (b.at < a.at ? b : a));
    if (i.now < first.at) {
      decide(
        "Waiting",
        tolerated ? `${first.waiting} (its silence alone would not fence it: every guarded pod tolerates it forever)` : first.waiting,
      );
      wake(first.at.toMillis());
      continue;
    }
    const list = candidates.get(pname) ?? [];
    list.push({
      node: name,
      policy,
      health: h,
      priority: Math.max(...guarded.map(podPriority)),
      atDisruptionLimit: guarded.filter((p) => atDisruptionLimit(p, i.pdbs)).length,
      waitedSeconds: first.waited,
      why: first.why,
      ...(first.trigger ? { trigger: first.trigger } : {}),
      ...(held.length ? { triggers: held } : {}),
    });
    candidates.set(pname, list);
  }

  // Nodes that are gone while pods are still bound to them: each counts as a node for the storm guards (silent unless
  // its Lease is renewed), and is decided as last seen (decide/gone-nodes.ts).
  const gone = (i.goneNodes ?? []).map((g) => {
    const policy = goneNodePolicy(g, i.policies);
    return { g, policy, health: goneHealth(g, policy, i.now) };
  });
  const missingBy = new Map<string, { node: string; pods: number; command: string; remembered: boolean }[]>();
  for (const { g, policy, health: h } of gone) {
    const name = g.name;
    const fence = i.fences.get(name);
    const decide = (verdict: Verdict, message: string) =>
      decisions.push({ node: name, verdict, message, ...(policy ? { policy: policy.metadata?.name } : {}), health: h });
    if (fence !== undefined && HOLDING_PHASES.has(phaseOf(fence))) {
      decide("HasFence", `NodeFence ${name} is ${phaseOf(fence) || "new"}`);
      continue;
    }
    wake(h.nextCheckMs);
    const pods = i.pods.on(name);
    const step = goneNodeStep({ g, now: i.now, policy, pods, pvcs: i.pvcs, stormEnd: policy && stormEndedAt(policy) }, h);
    if (step.kind === "decision") {
      // Nothing fences it on its own — never seen, or no policy selects it as last seen (or the one that does guards
      // none of its pods) — while a live policy's scope guards pods bound to it (the force-delete guard refuses their
      // deletion): those policies say so, with the command that fences it (second review of issue 41).
      const unfenced = step.verdict === "NotRemembered" || step.verdict === "NoPolicy" || step.verdict === "NothingToProtect";
      const covering = unfenced ? coveringPolicies(pods, i.policies, i.pvcs) : [];
      if (step.verdict === "NotRemembered" && !covering.length) {
        decide("NothingToProtect", `Node ${name} does not exist; no live FencingPolicy guards the pods bound to it`);
        continue;
      }
      for (const c of covering) {
        const pname = c.policy.metadata?.name ?? "";
        const list = missingBy.get(pname) ?? [];
        list.push({ node: name, pods: c.pods, command: manualFenceCommand(name, pname), remembered: !!g.lastSeen });
        missingBy.set(pname, list);
      }
      if (step.at) wake(step.at.toMillis());
      decide(step.verdict, step.message);
      continue;
    }
    const pname = policy!.metadata?.name ?? "";
    const list = candidates.get(pname) ?? [];
    list.push({
      node: name,
      policy: policy!,
      health: h,
      priority: Math.max(...step.guarded.map(podPriority)),
      atDisruptionLimit: step.guarded.filter((p) => atDisruptionLimit(p, i.pdbs)).length,
      waitedSeconds: step.waitedSeconds,
      why: step.why,
      lastSeen: g.lastSeen,
    });
    candidates.set(pname, list);
  }

  const create: FenceIntent[] = [];
  const policies = new Map<string, PolicyState>();
  // Over every node seen, whatever policy selects it: held by every policy (its StormGuard condition, so that a node
  // still silent when the storm ends waits again from its end, as after a policy's own storm). A gone node counts too.
  // Not counted at all: a node whose silence is explained — confirmed fenced (Stockade keeps it off), or shut down by
  // its cloud (the cloud controller's shutdown taint: a stopped pool must not hold every policy's fences).
  const counted = healths.filter((_, k) => !stormExplained(i.nodes[k]!, i.fences.get(i.nodes[k]!.metadata?.name ?? "")));
  const goneCounted = gone.filter((x) => !(i.fences.get(x.g.name) && FENCED_PHASES.has(phaseOf(i.fences.get(x.g.name)!))));
  const storm = clusterStorm(gone.length ? [...counted, ...goneCounted.map((x) => x.health)] : counted, i.clusterMaxUnhealthyNodes);
  for (let pk = 0; pk < i.policies.length; pk++) {
    const policy = i.policies[pk]!;
    const pname = policy.metadata?.name ?? "";
    const selected: number[] = []; // indexes in i.nodes
    for (let k = 0; k < i.nodes.length; k++) {
      const e = kept[k];
      const sel = e
        ? (e.selected[pk] ??= matchesSelector(e.labels, policy.spec.nodeSelector))
        : matchesSelector(i.nodes[k]!.metadata?.labels, policy.spec.nodeSelector);
      if (sel) selected.push(k);
    }
    const nameAt = (k: number) => i.nodes[k]!.metadata?.name ?? "";
    const active = [...i.fences.values()].filter(
      (f) => (f.status?.policy ?? f.spec.policy) === pname && ACTIVE_PHASES.has(phaseOf(f)),
    ).length;
    // The gone nodes whose last-seen labels it selects: each unhealthy (its Ready is Missing).
    const goneSelected = gone.filter((x) => x.g.lastSeen && matchesSelector(x.g.lastSeen.metadata?.labels, policy.spec.nodeSelector));
    const guardNodes = selected.map((k) => {
      const e = kept[k];
      if (e?.guard) return e.guard;
      const h = healths[k]!;
      const g = {
        name: nameAt(k),
        labels: i.nodes[k]!.metadata?.labels ?? {},
        // Silence by the wall clock counts only if this replica has not heard the node lately (a clock behind).
        unhealthy: (!h.heard && (h.silent || h.lagging)) || h.ready !== "True" || conditionHeld[k]!,
      };
      if (e) e.guard = g;
      return g;
    });
    for (const x of goneSelected)
      guardNodes.push({ name: x.g.name, labels: x.g.lastSeen?.metadata?.labels ?? {}, unhealthy: x.health.silent });
    const verdict = evaluateGuards({
      guards: policy.spec.guards,
      nodes: guardNodes,
      activeFences: active,
      watchStalenessSeconds: i.watchStalenessSeconds,
    });
    // The policy's own holds first: the StormGuard condition's reason is the first hold's.
    const holds = storm ? [...verdict.holds, storm] : verdict.holds;
    const state: PolicyState = {
      // A copy: zone holds are added below for reporting, and must not turn into holds on every later candidate.
      holds: [...holds],
      partitioned: [
        ...selected.filter((k) => healths[k]!.state === "Partitioned").map(nameAt),
        ...goneSelected.filter((x) => x.health.state === "Partitioned").map((x) => x.g.name),
      ],
      raisedTimeouts: selected.flatMap((k) => {
        const h = healths[k]!;
        const asked = policy.spec.detection?.heartbeatTimeoutSeconds ?? DEFAULT_HEARTBEAT_TIMEOUT_SECONDS;
        return h.timeoutSeconds > asked ? [{ node: h.name, seconds: h.timeoutSeconds }] : [];
      }),
      activeFences: active,
      wouldFence: [],
      queued: [],
      held: heldForStatus(heldBy.get(pname) ?? []),
      controlPlane: [],
      untrusted: (untrustedBy.get(pname) ?? []).sort((a, b) => a.node.localeCompare(b.node) || a.type.localeCompare(b.type)),
      unlisted: (policy.spec.triggers?.nodeConditions ?? []).filter((t) => !t.trustedWriters?.length).map((t) => `${t.type}=${t.status}`),
      ...(missingBy.has(pname) ? { missing: missingBy.get(pname) } : {}),
    };
    policies.set(pname, state);
    let slots = verdict.slots;
    // One string shared by every held node's decision, not a copy each.
    const held = holds.map((h) => h.message).join("; ");
    for (const c of orderCandidates(candidates.get(pname) ?? [])) {
      const d = (verdict: Verdict, message: string) =>
        decisions.push({
          node: c.node,
          verdict,
          message,
          policy: pname,
          health: c.health,
          ...(c.triggers ? { triggers: c.triggers } : {}),
        });
      const blocked = verdict.blocked.get(c.node);
      // Never the node whose loss may break the control plane's quorum, whatever else holds (dry run included).
      const refused = quorumRefusal(c.lastSeen ?? i.nodes.find((n) => n.metadata?.name === c.node), i.pods.on(c.node), policy);
      if (refused) {
        d("ControlPlane", `${refused}; would fence: ${c.why}`);
        state.controlPlane.push({ node: c.node, message: refused });
      } else if (policy.spec.paused) d("Paused", `FencingPolicy ${pname} is paused; would fence: ${c.why}`);
      else if (holds.length) d("Held", held);
      else if (stormInStatus(policy)) {
        // The storm ends now (its end is recorded in the policy's status by this pass): its wait starts now.
        d("Waiting", `the storm guard lifts now; guarded pods wait again from now before ${c.node} is fenced`);
        wake(i.now.toMillis() + 1_000);
      } else if (blocked) {
        d("Held", blocked.message);
        if (!state.holds.some((h) => h.message === blocked.message)) state.holds.push(blocked);
      } else if (slots <= 0) {
        d("Queued", `waiting for a fence slot (maxConcurrentFences ${policy.spec.guards?.maxConcurrentFences ?? 1}, ${active} in flight)`);
        state.queued.push(c.node);
      } else if (policy.spec.dryRun) {
        slots--;
        d("DryRun", `dry run: would fence: ${c.why}`);
        state.wouldFence.push(c.node);
      } else {
        slots--;
        d("Fence", c.why);
        const old = i.fences.get(c.node);
        create.push({
          node: c.node,
          policy: pname,
          reason: c.why,
          lastHeartbeat: iso(c.health.lastHeartbeat),
          replaces: old,
          ...(c.trigger ? { trigger: c.trigger } : {}),
          ...(c.lastSeen ? { gone: true as const } : {}),
        });
      }
    }
  }
  memo?.end(i.nodes.length);
  const nextCheck = nextCheckMs === undefined ? undefined : DateTime.fromMillis(nextCheckMs, { zone: "utc" });
  return { decisions, nodeDown, create, policies, nextCheck, sightings };
}

/** The taint a cloud's node lifecycle controller puts on a Node whose instance is shut down. */
export const CLOUD_SHUTDOWN_TAINT = "node.cloudprovider.kubernetes.io/shutdown";

/**
 * Whether a node's silence is explained, so the cluster-wide storm guard does not count it: confirmed fenced (its
 * NodeFence in a fenced phase), or tainted shut down by its cloud. Neither says anything of the network or the observer.
 */
function stormExplained(node: V1Node, fence: NodeFence | undefined): boolean {
  if (fence && FENCED_PHASES.has(phaseOf(fence))) return true;
  return node.spec?.taints?.some((t) => t.key === CLOUD_SHUTDOWN_TAINT) ?? false;
}

/** The policy's status says a storm guard holds (written by an earlier pass). */
function stormInStatus(policy: FencingPolicy): boolean {
  return policy.status?.conditions?.find((c) => c.type === "StormGuard")?.status === "True";
}

/** When the policy's storm guard last stopped holding (its StormGuard condition turned False), per its status. */
function stormEndedAt(policy: FencingPolicy): DateTime | undefined {
  const c = policy.status?.conditions?.find((x) => x.type === "StormGuard");
  if (c?.status !== "False" || !c.lastTransitionTime) return undefined;
  const t = DateTime.fromISO(c.lastTransitionTime);
  return t.isValid ? t : undefined;
}

function atDisruptionLimit(pod: V1Pod, pdbs: readonly V1PodDisruptionBudget[]): boolean {
  return pdbs.some(
    (b) =>
      b.metadata?.namespace === pod.metadata?.namespace &&
      b.spec?.selector !== undefined &&
      matchesSelector(pod.metadata?.labels, b.spec.selector) &&
      (b.status?.disruptionsAllowed ?? 1) <= 0,
  );
}
