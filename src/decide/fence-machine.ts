// The NodeFence state machine: from the fence's recorded status and what is observed now (the Node and its
// Lease read fresh from the apiserver, the caches, the agent operations this process runs), the one next
// step. The reconciler performs it, writes the result to status, and asks again — so a restarted operator
// resumes from status, never skips confirmation, and never releases the same thing twice.
//
//   Pending → Fencing → Fenced → Releasing → Released      (→ Unfencing → Unfenced)
//               ↑ └→ Failed ─(retry, new round)─┘  │
//               └──── heartbeat after the fence ───┘
//
// The safety rules (docs/safety.md) live here, where they can be tested exhaustively:
// - evidence is only PowerOffConfirmed or ManualConfirmation, each from the attempts of the current round — or
//   StorageFenced (a level of storage fences only), which releases volumes only: never a pod, never out-of-service;
//   what each attempt proves is what its agent was when the attempt started (recorded in it), never today's FenceAgent;
//   or WatchdogExpired (a level of watchdog agents only, under a policy that allows it in its snapshot and now), from
//   the arithmetic the observation carries (decide/watchdog-evidence.ts), with the node agent's record, read fresh,
//   compared before each release step as the heartbeat is;
// - a storage fence, once confirmed up, comes down only for an administrator's unfence, the NodeFence's deletion, or
//   after a later confirmed power-off — never for a new bootID (the node's kubelet writes it);
// - every storage fence that may have gone out is lifted (retried with backoff) before the fence ends Unfenced or its
//   finalizer goes, or is explicitly abandoned by an administrator; until then status and Events say it is held;
// - before each release step on power or manual evidence the node's heartbeat must be exactly what it was right after
//   the confirmation (StorageFenced proves the storage cut, which a heartbeat does not undo: docs/safety.md §3);
// - an automatic fence needs the node partitioned at every step that could power it off — or, for a fence a node
//   condition triggered (spec.trigger), that condition still held on the fresh read, set by its trusted writers only;
// - a control-plane or etcd node is never fenced unless its policy allows it (decide/quorum.ts).
import type { V1Lease, V1Node, V1PersistentVolumeClaim, V1Pod, V1Taint, V1VolumeAttachment } from "@kubernetes/client-node";
import type { DateTime } from "luxon";
import type {
  FenceAgent,
  FencingPolicy,
  NodeFence,
  NodeFenceStatusAttempts,
  NodeFenceStatusEvidenceHeartbeat,
  NodeFenceStatusNodeSnapshot,
  NodeFenceStatusPolicySnapshot,
  NodeFenceStatusWatchdog,
} from "../api/v1alpha1.ts";
import { isGuarded } from "./guarded-pods.ts";
import { heartbeatChanges, heartbeatOf } from "./heartbeat.ts";
import { assessNode, DEFAULT_HEARTBEAT_TIMEOUT_SECONDS, toDateTime, type NodeHealth } from "./node-health.ts";
import { claimNames, parseLock } from "./claim-lock.ts";
import { orderPodsForRelease } from "./priority.ts";
import { heldCondition, stillHeld } from "./node-conditions.ts";
import { conditionTrust } from "./condition-writers.ts";
import { quorumRefusal } from "./quorum.ts";
import { goneLeaseRenewed } from "./gone-nodes.ts";
import { matchesSelector, policyForNode } from "./selectors.ts";
import { fencedStorageClasses, isStorageFence, networkFenceName } from "./storage-fence.ts";
import { agentRecordChanges, agentRecordFingerprint, describeArithmetic, watchdogStatus, watchdogWaitMessage } from "./watchdog-fence.ts";
import { NODE_AGENT_NAMESPACE } from "./node-agent-record.ts";
import type { WatchdogEvidence } from "./watchdog-evidence.ts";

export const FENCED_TAINT = "stockade.io/fenced";
export const OUT_OF_SERVICE_TAINT = "node.kubernetes.io/out-of-service";
export const FINALIZER = "stockade.io/node-cleanup";
export const NODE_RESTRICTION_PREFIX = "node-restriction.kubernetes.io/";
export { DEFAULT_HEARTBEAT_TIMEOUT_SECONDS, heartbeatChanges, heartbeatOf };
/**
 * Set on a NodeFence by an administrator who powered its machine off (value: the node's name, so a copy-pasted
 * annotation cannot confirm the wrong node): ManualConfirmation evidence, read by the manual agent (agents/manual.ts).
 */
export const CONFIRMED_OFF_ANNOTATION = "stockade.io/confirmed-off";
/** Retry of a failed round: 30 s, doubling, at most 10 min. */
export const RETRY_BASE_SECONDS = 30;
export const RETRY_MAX_SECONDS = 600;
/** Retry of a failed storage lift: 10 s, doubling, at most 5 min, for as long as the fence is held. */
export const LIFT_RETRY_BASE_SECONDS = 10;
export const LIFT_RETRY_MAX_SECONDS = 300;
/**
 * Set on a NodeFence (value: its node's name) to stop lifting the node's storage fences: its finalizer goes and an
 * unfence ends without them, and the NetworkFences stay in place (for a node gone for good, or a storage agent gone).
 */
export const ABANDON_STORAGE_FENCES_ANNOTATION = "stockade.io/abandon-storage-fences";
/** A NodeFence condition: True while a storage fence it may have put up is not lifted (docs/safety.md §3). */
export const STORAGE_FENCE_HELD_CONDITION = "StorageFenceHeld";
/** Agent types that power nothing off: a person (manual) or the node's own watchdog (watchdog). */
const NO_POWER_TYPES: ReadonlySet<string> = new Set(["manual", "watchdog"]);
/** Whether an agent type powers the machine off and confirms it with a status query (not manual, watchdog, storage). */
export const isPowerType = (t: string | undefined): boolean => t !== undefined && !NO_POWER_TYPES.has(t) && !isStorageFence(t);
/** A kubelet's default Lease duration, when the node has no Lease to say. */
const DEFAULT_LEASE_SECONDS = 40;

export type AttemptOutcome = NodeFenceStatusAttempts["outcome"];

/** An agent operation this process runs in the background, by attempt index. */
export type Operation = { state: "running" } | { state: "done"; outcome: Exclude<AttemptOutcome, "InProgress">; message: string };

export interface FenceObservation {
  now: DateTime;
  fence: NodeFence;
  /** The Node, read from the apiserver right before this decision; undefined when it does not exist. */
  node: V1Node | undefined;
  /** Its Lease in kube-node-lease, read with it; undefined when there is none. */
  lease: V1Lease | undefined;
  /**
   * How long the operator has seen that Lease's renewTime unchanged (monotonic ms, kube/lease-observer.ts): its Lease
   * counts as expired once that reaches leaseDurationSeconds. Absent: the Lease does not count (only Ready=Unknown).
   */
  leaseObservedSilentMs?: number;
  policies: readonly FencingPolicy[];
  agents: ReadonlyMap<string, FenceAgent>;
  /** Every pod bound to the node. */
  pods: readonly V1Pod[];
  pvcs: ReadonlyMap<string, V1PersistentVolumeClaim>;
  volumeAttachments: readonly V1VolumeAttachment[];
  /** The agent operations this process runs for this fence, by attempt index. */
  operations: ReadonlyMap<number, Operation>;
  /**
   * The fenced node's node agent record (a Lease in stockade-node-agent), read from the apiserver with the Node; only
   * for a fence whose policy snapshot allows watchdog evidence (undefined otherwise, or when there is none).
   */
  agentRecord?: V1Lease;
  /**
   * WatchdogExpired as the shell computed it on this read (decide/watchdog-evidence.ts over what this process itself
   * observed: kube/watchdog-observer.ts); absent while the node agents' records are not listed yet, or when not needed.
   */
  watchdog?: WatchdogEvidence;
  /**
   * The Node as this process last saw it before it was deleted (kube/last-seen-nodes.ts), when `node` is undefined
   * and this process saw it: what a fence that starts after the deletion is decided on and fences through.
   */
  lastSeenNode?: V1Node;
}

export type Evidence = {
  method: "PowerOffConfirmed" | "ManualConfirmation" | "StorageFenced" | "WatchdogExpired";
  detail: string;
  /** StorageFenced: the StorageClasses whose volumes the storage fences cut off (only those are released). */
  storageClasses?: string[];
  agents: string[];
  round: number;
  heartbeat: NodeFenceStatusEvidenceHeartbeat;
};

export type ReleaseItem =
  | { kind: "Pod"; pod: V1Pod }
  | { kind: "VolumeAttachment"; name: string; uid: string }
  | { kind: "Taint"; action: "Added" | "Removed" }
  /** The claim lock a pod of the node holds on a PVC (decide/claim-lock.ts). */
  | { kind: "ClaimLock"; pvc: V1PersistentVolumeClaim; pod: V1Pod; token: number };

/**
 * How many items of one kind one release step takes. Each is its own call with its own preconditions, so they run
 * side by side and one status write records them: a node's pods no longer cost a round of fresh reads and a status
 * write each. Bounded so that a node with a hundred pods still goes highest priority first, in steps.
 */
export const MAX_RELEASE_BATCH = 16;
const vaItem = (va: V1VolumeAttachment): ReleaseItem => ({
  kind: "VolumeAttachment",
  name: va.metadata?.name ?? "",
  uid: va.metadata?.uid ?? "",
});
const batch = (items: ReleaseItem[]): Step | undefined =>
  items.length ? { kind: "release", items: items.slice(0, MAX_RELEASE_BATCH) } : undefined;

export type Step =
  | { kind: "addFinalizer" }
  /** The NodeFence is being deleted: abort its operations, remove the taints and condition it added, drop the finalizer. */
  | { kind: "finalize" }
  | { kind: "start"; policy: string; snapshot: NodeFenceStatusPolicySnapshot; node: NodeFenceStatusNodeSnapshot; bootID: string }
  /** watchdog: the WatchdogExpired arithmetic to show in status while a level of watchdog agents waits. */
  | { kind: "wait"; reason: string; message: string; requeueAfterMs: number; watchdog?: NodeFenceStatusWatchdog }
  | { kind: "begin" }
  /** An automatic fence whose node heartbeats again: nothing more is powered off or released; our marks come off. */
  | { kind: "cancel"; message: string }
  | { kind: "interrupted"; index: number }
  | { kind: "runAgent"; level: number; agent: FenceAgent; operation: "off" | "on"; timeoutMs: number }
  | {
      kind: "recordOutcome";
      index: number;
      outcome: Exclude<AttemptOutcome, "InProgress">;
      message: string;
      watchdog?: NodeFenceStatusWatchdog;
    }
  | { kind: "escalate"; to: number; message: string }
  | { kind: "roundFailed"; reason: string; message: string; retryAt: DateTime }
  | { kind: "retry"; snapshot: NodeFenceStatusPolicySnapshot | undefined; message: string }
  | { kind: "confirmed"; evidence: Evidence }
  | { kind: "reenter"; message: string }
  | { kind: "markNode" }
  /** Items of one kind, independent of each other, released together (at most MAX_RELEASE_BATCH, in release order). */
  | { kind: "release"; items: ReleaseItem[] }
  | { kind: "released" }
  | { kind: "startUnfence"; reason: string }
  | { kind: "unmarkNode"; reason: string }
  | { kind: "done" };

const attemptsOf = (f: NodeFence): NodeFenceStatusAttempts[] => f.status?.attempts ?? [];
const iso = (d: DateTime) => d.toUTC().toISO({ suppressMilliseconds: true }) ?? "";

export function hasTaint(node: V1Node | undefined, key: string): boolean {
  return (node?.spec?.taints ?? []).some((t: V1Taint) => t.key === key);
}

/** What a fence runs with: the policy's settings at the start of a round. */
export function snapshotOf(p: FencingPolicy): NodeFenceStatusPolicySnapshot {
  const s = p.spec;
  return {
    generation: p.metadata?.generation,
    escalation: s.escalation.map((l) => ({
      agents: l.agents.map((a) => a.name),
      ...(l.timeoutSeconds !== undefined ? { timeoutSeconds: l.timeoutSeconds } : {}),
    })),
    action: s.action ?? "off",
    release: {
      forceDeletePods: s.release?.forceDeletePods ?? true,
      deleteVolumeAttachments: s.release?.deleteVolumeAttachments ?? true,
      outOfServiceTaint: s.release?.outOfServiceTaint ?? false,
    },
    guardedPods: {
      statefulSets: s.guardedPods?.statefulSets ?? true,
      readWriteOnceVolumes: s.guardedPods?.readWriteOnceVolumes ?? true,
      ...(s.guardedPods?.namespaces?.length ? { namespaces: [...s.guardedPods.namespaces] } : {}),
      ...(s.guardedPods?.podSelector ? { podSelector: s.guardedPods.podSelector } : {}),
    },
    heartbeatTimeoutSeconds: s.detection?.heartbeatTimeoutSeconds ?? DEFAULT_HEARTBEAT_TIMEOUT_SECONDS,
    waitForNodeController: s.detection?.waitForNodeController ?? false,
    unfenceOnReboot: s.unfenceOnReboot ?? false,
    allowWatchdogEvidence: s.allowWatchdogEvidence ?? false,
  };
}

/** The parts of a Node that agents' parameters may be rendered from (administrator-owned: docs/safety.md). */
export function nodeSnapshotOf(node: V1Node): NodeFenceStatusNodeSnapshot {
  const labels = Object.fromEntries(Object.entries(node.metadata?.labels ?? {}).filter(([k]) => k.startsWith(NODE_RESTRICTION_PREFIX)));
  return { uid: node.metadata?.uid ?? "", providerID: node.spec?.providerID ?? "", labels };
}

/**
 * The Node to render agents' parameters over: the live one if it is the same object, else the snapshot. A snapshot
 * without a uid (a fence started on the node's name alone, after its Node was deleted) never takes a Node created
 * after the fence started: that may be another machine registered under the same name.
 */
export function targetNode(fence: NodeFence, node: V1Node | undefined): V1Node {
  const snap = fence.status?.nodeSnapshot;
  const started = toDateTime(fence.status?.startTime);
  const created = toDateTime(node?.metadata?.creationTimestamp as Date | string | undefined);
  const newer = !snap?.uid && !!snap && !!started && (!created || created > started);
  if (node && !newer && (!snap?.uid || node.metadata?.uid === snap.uid)) return node;
  return {
    metadata: { name: fence.spec.nodeName, uid: snap?.uid, labels: { ...snap?.labels } },
    spec: snap?.providerID ? { providerID: snap.providerID } : {},
  };
}

type Fresh = Pick<FenceObservation, "fence" | "node" | "lease" | "now" | "leaseObservedSilentMs">;

/**
 * The node's health under the fence's snapshot; undefined when the Node does not exist. A snapshot without
 * waitForNodeController (written before it existed) means false: the node's expired Lease counts, as for new fences.
 */
export function healthOf(o: Fresh): NodeHealth | undefined {
  const snap = o.fence.status?.policySnapshot;
  const timeout = snap?.heartbeatTimeoutSeconds ?? DEFAULT_HEARTBEAT_TIMEOUT_SECONDS;
  return o.node ? assessNode(o.node, o.lease, o.now, timeout, snap?.waitForNodeController ?? false, o.leaseObservedSilentMs) : undefined;
}

/** A node that is not partitioned heartbeats (or just did); a deleted Node is not a heartbeat. */
function heartbeats(h: NodeHealth | undefined): boolean {
  return h !== undefined && h.state !== "Partitioned";
}

/**
 * A Node that is gone heartbeats only through its Lease: a kubelet whose Node was deleted goes on renewing (and
 * re-creates) its Lease. It is silent once it has no Lease, or once this process has seen the Lease's renewTime
 * unchanged for a whole lease duration; a Lease present but not yet observed counts as renewed (docs/safety.md §3).
 */
export function goneNodeLeaseAlive(o: Pick<Fresh, "lease" | "leaseObservedSilentMs">): boolean {
  return goneLeaseRenewed(o.lease, o.leaseObservedSilentMs);
}

/** Whether the node is silent on this read: partitioned, or its Node gone and its Lease gone or expired. */
function silentNow(o: Fresh, h: NodeHealth | undefined): boolean {
  return h === undefined ? !o.node && !goneNodeLeaseAlive(o) : h.state === "Partitioned";
}

function describeHealth(h: NodeHealth | undefined): string {
  if (!h) return "the Node does not exist";
  const beat = h.lastHeartbeat ? iso(h.lastHeartbeat) : "never";
  return `last heartbeat ${beat}, Ready=${h.ready}`;
}

/**
 * Why an automatic fence must not go on (power the node off, start, retry), or undefined while what made it due still
 * holds on this read: the node partitioned (or its Node deleted), or — for a fence a node condition triggered — that
 * condition still held.
 */
function triggerGone(o: Fresh, h: NodeHealth | undefined): string | undefined {
  if (!o.node && goneNodeLeaseAlive(o))
    return `the Node does not exist but its Lease was renewed within its duration (a live kubelet: renewTime ${String(o.lease?.spec?.renewTime ?? "")})`;
  if (!heartbeats(h)) return undefined;
  const c = o.fence.spec.trigger?.nodeCondition;
  if (!c) return `the node heartbeats again (${describeHealth(h)})`;
  if (stillHeld(o.node, c)) return undefined;
  if (heldCondition(o.node, c)) {
    const t = conditionTrust(o.node, c.type, c.trustedWriters);
    const by = t.writers.length ? `set by ${t.untrusted.join(", ")}` : "no writer recorded";
    return `its condition ${c.type}=${c.status} is not set by a trusted writer (${by}; trusted: ${c.trustedWriters?.join(", ") || "none"}) and the node heartbeats (${describeHealth(h)})`;
  }
  return `its condition ${c.type}=${c.status} no longer holds and the node heartbeats (${describeHealth(h)})`;
}

/**
 * For an automatic fence its node's silence made due: the node is not partitioned on this read, yet it has not
 * heartbeat since the fence began (its last heartbeat is the one recorded then). That is this replica counting the
 * silence again after a gap in its own view or a change of leader (kube/sight.ts), not the node coming back: nothing
 * is powered off until the silence is seen again, and nothing is cancelled either. Undefined otherwise.
 */
function silenceRecounted(o: Pick<Fresh, "fence" | "now">, h: NodeHealth | undefined): Step | undefined {
  const f = o.fence;
  if (f.spec.origin !== "Automatic" || f.spec.trigger?.nodeCondition || !h || h.state === "Partitioned" || !h.silent) return undefined;
  const recorded = f.status?.lastHeartbeatTime ? toDateTime(f.status.lastHeartbeatTime)?.toMillis() : undefined;
  if (recorded === undefined || h.lastHeartbeatMs !== recorded) return undefined;
  const next = h.nextCheckMs ?? o.now.toMillis() + 5_000;
  return {
    kind: "wait",
    reason: "SilenceRecounted",
    message: `no heartbeat from ${f.spec.nodeName} since ${h.lastHeartbeat ? iso(h.lastHeartbeat) : "never"}, but this operator has not yet seen it silent for long enough since it could last see the cluster (after a gap in its view of the API or a change of leader): nothing is powered off until it has`,
    requeueAfterMs: Math.max(1_000, Math.min(10_000, next - o.now.toMillis())),
  };
}

/** The fence's policy as it is now (undefined when it was deleted: a control-plane node is then refused). */
const policyOf = (o: Pick<FenceObservation, "fence" | "policies">): FencingPolicy | undefined =>
  o.policies.find((p) => p.metadata?.name === o.fence.status?.policy);

/**
 * Why no power-off may be tried now on this fresh read of the Node: a control-plane or etcd node under a policy that
 * does not allow it (any fence), or what made an automatic fence due gone (see triggerGone); undefined while it may.
 */
export function powerOffRefused(o: Fresh & Pick<FenceObservation, "policies" | "pods">): string | undefined {
  // A kubelet whose Node was deleted goes on running its pods and never says so: it registers again only when it
  // restarts, and its Lease goes with the Node. No silence can be seen of such a machine, so automation never powers
  // it off; it only confirms one already off (queryFirst: a status query, or its cloud saying the instance is gone).
  if (!o.node && o.fence.spec.origin === "Automatic")
    return `the Node ${o.fence.spec.nodeName} was deleted and a machine whose Node is gone may still run its pods (its kubelet does not register again until it restarts): Stockade powers it off only on a person's word. It is fenced as soon as a status query finds it off (its cloud saying the instance is terminated or gone counts); otherwise check the machine, then delete this NodeFence and create a Manual one (origin Manual, spec.policy)`;
  const refused = quorumRefusal(o.node, nodePods(o), policyOf(o));
  if (refused) return refused;
  return o.fence.spec.origin === "Automatic" ? noLongerDue(o) : undefined;
}

/** Why an automatic fence must not power the node off (see triggerGone), or undefined while it may. */
export function noLongerDue(o: Fresh): string | undefined {
  const h = healthOf(o);
  const recount = silenceRecounted(o, h);
  if (recount?.kind === "wait") return recount.message;
  return triggerGone(o, h);
}

/** The fenced node's pods: whoever observes may pass more, and nothing of another node is ever released. */
const nodePods = (o: Pick<FenceObservation, "fence" | "pods">): V1Pod[] => o.pods.filter((p) => p.spec?.nodeName === o.fence.spec.nodeName);

/**
 * Guarded pods on the node that still have to be released, highest priority first. A Failed or Succeeded one too: on
 * a silent node its phase proves nothing (the pod GC controller writes Failed itself), so no one else may delete it,
 * and after the fence it is as dead as the rest.
 */
export function podsToRelease(o: FenceObservation): V1Pod[] {
  const released = new Set((o.fence.status?.releases ?? []).filter((r) => r.kind === "Pod").map((r) => r.uid));
  const guarded = o.fence.status?.policySnapshot?.guardedPods;
  return orderPodsForRelease(nodePods(o).filter((p) => !released.has(p.metadata?.uid) && isGuarded(p, guarded, o.pvcs).guarded));
}

/** Claim locks held by pods of the fenced node that no release has broken yet. */
export function claimLocksToBreak(o: FenceObservation): Extract<ReleaseItem, { kind: "ClaimLock" }>[] {
  const done = new Set((o.fence.status?.releases ?? []).filter((r) => r.kind === "ClaimLock").map((r) => `${r.uid}/${r.message ?? ""}`));
  const out: Extract<ReleaseItem, { kind: "ClaimLock" }>[] = [];
  for (const pod of nodePods(o)) {
    const ns = pod.metadata?.namespace ?? "";
    for (const claim of claimNames(pod)) {
      const pvc = o.pvcs.get(`${ns}/${claim}`);
      const parsed = pvc ? parseLock(pvc) : undefined;
      if (!pvc || !parsed?.ok || !parsed.lock?.holder || parsed.lock.holder.uid !== pod.metadata?.uid) continue;
      if (done.has(`${pvc.metadata?.uid}/${claimLockMessage(pod, parsed.lock.token)}`)) continue;
      out.push({ kind: "ClaimLock", pvc, pod, token: parsed.lock.token });
    }
  }
  return out;
}

/** The release record's message for a broken claim lock (also how a repeat is recognised). */
export const claimLockMessage = (pod: V1Pod, token: number) => `token ${token} held by pod ${pod.metadata?.name}`;

/**
 * What an attempt records about its agent when it starts (controllers/node-fence/power.ts runAgent): evidence is derived
 * from this, never from the FenceAgent as it is at the confirmation — one deleted or re-typed in between changes nothing.
 */
export function attemptFacts(agent: FenceAgent): Pick<NodeFenceStatusAttempts, "agentType" | "storageClasses"> {
  const type = agent.spec.type;
  return { agentType: type, ...(isStorageFence(type) ? { storageClasses: fencedStorageClasses(agent.spec.parameters) } : {}) };
}

/**
 * The storage fences this NodeFence may have put up and not taken down: every storage agent with an "off" attempt not
 * followed by a successful "on" of the same agent — whatever that off's outcome: InProgress, Cancelled, TimedOut,
 * Interrupted or Failed, its request may have gone out. A superset of storageFencesHeld. Each is lifted before the
 * fence ends Unfenced or its finalizer goes, or is reported held (StorageFenceHeld condition, Events) until it is.
 */
export function storageFencesToLift(o: Pick<FenceObservation, "fence" | "agents">): string[] {
  const held = new Set<string>();
  for (const a of attemptsOf(o.fence)) {
    if (!storageAttempt(o, a)) continue;
    if (a.operation === "off") held.add(a.agent);
    else if (a.operation === "on" && a.outcome === "Succeeded") held.delete(a.agent);
  }
  return [...held];
}

/** An administrator abandoned the node's storage fences (ABANDON_STORAGE_FENCES_ANNOTATION): they are not lifted. */
const abandoned = (f: NodeFence) => f.metadata?.annotations?.[ABANDON_STORAGE_FENCES_ANNOTATION] === f.spec.nodeName;

/** The storage fences still to lift: none once abandoned. */
function toLift(o: Pick<FenceObservation, "fence" | "agents">): string[] {
  return abandoned(o.fence) ? [] : storageFencesToLift(o);
}

/** Storage fences an administrator abandoned, left in place; [] when none. */
export function abandonedStorageFences(o: Pick<FenceObservation, "fence" | "agents">): string[] {
  return abandoned(o.fence) ? storageFencesToLift(o) : [];
}

/** The objects a held storage fence is, for people: the agent and, for csi-addons, its NetworkFence. */
function describeStorageFences(o: Pick<FenceObservation, "fence" | "agents">, names: string[]): string {
  return names
    .map((n) =>
      (o.agents.get(n)?.spec.type ?? "csiAddonsNetworkFence") === "csiAddonsNetworkFence"
        ? `${n} (NetworkFence ${networkFenceName(n, o.fence.spec.nodeName)})`
        : n,
    )
    .join(", ");
}

/**
 * The StorageFenceHeld condition for a status (undefined: none to set, the fence never fenced storage): True while a
 * storage fence may be up (Held; Abandoned once an administrator gave it up), False once every one was lifted.
 */
export function storageFenceCondition(
  o: Pick<FenceObservation, "fence" | "agents">,
): { status: "True" | "False"; reason: string; message: string } | undefined {
  const held = storageFencesToLift(o);
  const had = o.fence.status?.conditions?.some((c) => c.type === STORAGE_FENCE_HELD_CONDITION);
  if (!held.length) return had ? { status: "False", reason: "Lifted", message: "no storage fence of this NodeFence is up" } : undefined;
  const what = describeStorageFences(o, held);
  if (abandoned(o.fence))
    return {
      status: "True",
      reason: "Abandoned",
      message: `storage fence(s) ${what} abandoned by annotation ${ABANDON_STORAGE_FENCES_ANNOTATION}: Stockade no longer lifts them; they stay in place until removed by hand (docs/safety.md §3)`,
    };
  return {
    status: "True",
    reason: "Held",
    message: `storage fence(s) ${what} may be up (fenced, or a request that may have gone out): lifted on unfence, cancel or deletion of this NodeFence`,
  };
}

/**
 * Seconds before a storage lift is tried again, after it has failed for `failingForSeconds` (from the start of the first
 * try since the fence went up to the end of the last): as long again plus the base — with quick tries 10, 20, 40, 80,
 * 160 s, then every 5 min. Counted from the first and last tries, which the status bound keeps (decide/status-bound.ts),
 * not from the number of tries, which it does not.
 */
export function liftRetryDelaySeconds(failingForSeconds: number): number {
  return Math.min(LIFT_RETRY_MAX_SECONDS, LIFT_RETRY_BASE_SECONDS + Math.max(0, failingForSeconds));
}

/**
 * Whether an attempt was a storage fence's: its recorded type. For an attempt written by an older version (no type):
 * today's FenceAgent, or, for one deleted since, what is left of it (the evidence it gave, or the storage runner's own
 * words in the attempt's message: agents/run-storage.ts) — counting it a storage fence is the safe direction (a
 * fence waits, an unfence lifts it).
 */
function storageAttempt(o: Pick<FenceObservation, "fence" | "agents">, a: NodeFenceStatusAttempts): boolean {
  if (a.agentType) return isStorageFence(a.agentType);
  const agent = o.agents.get(a.agent);
  if (agent) return isStorageFence(agent.spec.type);
  const ev = o.fence.status?.evidence;
  if (ev?.method === "StorageFenced" && (ev.agents ?? []).includes(a.agent)) return true;
  return /\bstorage (fence|unfence) of\b|^storage of /.test(a.message ?? "");
}

/** The storage fences this NodeFence holds up: a storage agent's last successful operation was a fence ("off"). */
export function storageFencesHeld(o: Pick<FenceObservation, "fence" | "agents">): string[] {
  const last = new Map<string, string>();
  for (const a of attemptsOf(o.fence)) if (a.outcome === "Succeeded" && storageAttempt(o, a)) last.set(a.agent, a.operation);
  return [...last].filter(([, op]) => op === "off").map(([name]) => name);
}

/** The two ways a storage fence comes down (docs/safety.md §3), for messages. */
const STORAGE_WAYS_OUT =
  "it comes down only when an administrator sets spec.unfence (after making sure the node's old pods are gone: drained, or the machine powered off) or once a power agent of a later level or round confirms the machine off (fencing resumes if the node goes silent again); a new bootID does not lift it (the node's own kubelet writes it)";

/**
 * An automatic fence whose node heartbeats again would be cancelled — but a storage fence it holds must not come
 * down with it: the node's old pods may still believe they own volumes released to replacements. It waits, adding
 * nothing to status, until an administrator's unfence or the node going silent again; undefined when nothing is held.
 */
function holdStorage(o: FenceObservation, health: NodeHealth | undefined): Step | undefined {
  const held = storageFencesHeld(o);
  // None confirmed up, but one may have gone out (in flight, timed out, failed after a try): the node is healthy,
  // so it is lifted, before the cancel ends Unfenced (nothing was released on it).
  if (!held.length) return toLift(o).length ? { kind: "startUnfence", reason: "NodeRecovered" } : undefined;
  return {
    kind: "wait",
    reason: "StorageFenceHeld",
    message: `the node heartbeats again (${describeHealth(health)}) but its storage stays fenced (${held.join(", ")}): its old pods may still think they own volumes given to replacements; ${STORAGE_WAYS_OUT}`,
    requeueAfterMs: 10_000,
  };
}

/**
 * Storage fences a confirmed power-off made unnecessary: put up by an earlier level or round than the PowerOffConfirmed
 * evidence (the machine was proven off after them, and Released: its old pods are gone). One of the confirming level
 * stays with it (a second barrier the administrator asked for) until the fence is unfenced.
 */
function storageFencesSuperseded(o: FenceObservation): string[] {
  const st = o.fence.status ?? {};
  if (st.evidence?.method !== "PowerOffConfirmed") return [];
  const round = st.evidence.round ?? 0;
  const level = st.currentLevel ?? 0;
  const attempts = attemptsOf(o.fence);
  return storageFencesHeld(o).filter((name) => {
    // Lifted through the FenceAgent as it is now: one re-typed since (its "on" would power the machine on) waits for an unfence.
    if (!isStorageFence(o.agents.get(name)?.spec.type)) return false;
    const off = attempts.filter((a) => a.agent === name && a.operation === "off" && a.outcome === "Succeeded").at(-1);
    return !!off && ((off.round ?? 0) < round || ((off.round ?? 0) === round && off.level < level));
  });
}

export function retryDelaySeconds(failures: number): number {
  return Math.min(RETRY_MAX_SECONDS, RETRY_BASE_SECONDS * 2 ** Math.max(0, failures - 1));
}

/** Seconds a node must stay silent after a confirmation made while it heartbeat: one and a half renewals. */
export function settleSeconds(lease: V1Lease | undefined): number {
  return ((lease?.spec?.leaseDurationSeconds ?? DEFAULT_LEASE_SECONDS) / 4) * 1.5;
}

export function nextStep(o: FenceObservation): Step {
  const f = o.fence;
  const st = f.status ?? {};
  const phase = st.phase ?? "";
  const automatic = f.spec.origin === "Automatic";

  if (f.metadata?.deletionTimestamp) {
    if (!(f.metadata.finalizers ?? []).includes(FINALIZER)) return { kind: "done" };
    // Deleted: the storage fences it may hold come down first (or are abandoned), then the finalizer goes.
    if (toLift(o).length) {
      if (phase !== "Unfencing") return { kind: "startUnfence", reason: "Deleted" };
      const lift = liftStorageStep(o);
      if (lift) return lift;
    }
    return { kind: "finalize" };
  }
  // Unfenced with a storage fence still up (a lift of an older version that failed and was not retried): lifted now.
  if (phase === "Unfenced") return toLift(o).length ? { kind: "startUnfence", reason: "StorageFenceHeld" } : { kind: "done" };
  if (!(f.metadata?.finalizers ?? []).includes(FINALIZER)) return { kind: "addFinalizer" };

  if (phase === "Unfencing") {
    const reason = st.conditions?.find((c) => c.type === "Fenced")?.reason ?? "UnfenceRequested";
    // Storage first: only an administrator's unfence, a deletion, a reboot after a confirmed power-off
    // (unfenceOnReboot) or a recovered node whose storage fence was never confirmed up gets here, the cases that may
    // lift it — through FenceAgents that are still storage fences (liftStorageStep).
    const lift = liftStorageStep(o);
    if (lift) return lift;
    // An administrator's unfence powers back on what our agents powered off; a reboot already did.
    if (reason === "UnfenceRequested" && st.evidence?.method === "PowerOffConfirmed" && st.policySnapshot?.action !== "reboot") {
      const step = powerOnStep(o);
      if (step) return step;
    }
    return { kind: "unmarkNode", reason };
  }
  if (f.spec.unfence) {
    // Asked to unfence before anything happened: nothing to undo.
    if (phase === "") return { kind: "unmarkNode", reason: "UnfenceRequested" };
    return { kind: "startUnfence", reason: "UnfenceRequested" };
  }

  if (phase === "") return startStep(o);
  const health = healthOf(o);
  if (phase === "Failed") return failedStep(o, health);
  const snap = st.policySnapshot;
  if (!snap) {
    // Written by an older version, or tampered with: never act without knowing what the fence runs with.
    return { kind: "roundFailed", reason: "SnapshotMissing", message: "the NodeFence status has no policySnapshot", retryAt: o.now };
  }

  if (phase === "Pending") {
    const policy = o.policies.find((p) => p.metadata?.name === st.policy);
    if (automatic && policy?.spec.paused)
      return { kind: "wait", reason: "Paused", message: `FencingPolicy ${st.policy} is paused`, requeueAfterMs: 10_000 };
    const recount = silenceRecounted(o, health);
    if (recount) return recount;
    const gone = automatic ? triggerGone(o, health) : undefined;
    if (gone) return holdStorage(o, health) ?? { kind: "cancel", message: `${gone}: nothing was powered off or released` };
    return { kind: "begin" };
  }

  if (phase === "Fencing") return fencingStep(o, health);

  if (phase === "Fenced" || phase === "Releasing") {
    // Nothing is released without evidence from this round and a heartbeat unchanged since it was taken.
    const ev = st.evidence;
    if (!ev?.method || !ev.heartbeat || (ev.round ?? 0) !== (st.round ?? 0))
      return { kind: "reenter", message: "the NodeFence is fenced but its evidence is missing or stale: fencing again" };
    // StorageFenced proves the node cut off its storage, never that it is off: a heartbeat (a renewal, a new boot, a
    // re-created Node) is expected of a machine that may run and does not undo the cut, so it neither stops the volume
    // releases nor re-runs the storage fence (which would find it as it is, round after round: issue 26 item 5). Pods
    // and the out-of-service taint are never released on it, and claim grants count the node fenced only while it is
    // not Ready in the boot the fence began with (decide/claim-lock.ts fencedSince).
    const storageOnly = ev.method === "StorageFenced";
    // What it does need: the storage fences that gave it still up (none lifted since, per status).
    const held = storageOnly ? storageFencesHeld(o) : [];
    // An agent with no fence recorded at all voids it too (a status that says otherwise was not written by us); one whose
    // only record is an older version's of what is no storage fence now added no StorageClass to it.
    const offs = (n: string) => attemptsOf(f).filter((a) => a.agent === n && a.operation === "off" && a.outcome === "Succeeded");
    const lifted = storageOnly
      ? (ev.agents ?? []).filter((n) => !held.includes(n) && (!offs(n).length || offs(n).some((a) => storageAttempt(o, a))))
      : [];
    if (lifted.length)
      return {
        kind: "reenter",
        message: `the storage fence of ${lifted.join(", ")} is no longer held: its StorageFenced evidence is void, fencing again`,
      };
    const changes = storageOnly ? [] : heartbeatChanges(ev.heartbeat, heartbeatOf(o.node, o.lease));
    // WatchdogExpired: the node's kubelet Lease and its agent record, read fresh, exactly as when the evidence was taken.
    if (ev.method === "WatchdogExpired") changes.push(...agentRecordChanges(ev.heartbeat, o.lease, o.agentRecord));
    if (changes.length)
      return { kind: "reenter", message: `the node heartbeat after it was confirmed fenced (${changes.join("; ")}): fencing again` };
    if (!ev.heartbeat.silent && !storageOnly) {
      // Confirmed while it still heartbeat (a fence of a healthy node): a live machine renews within a renewal.
      const until = (toDateTime(ev.time) ?? o.now).plus({ seconds: settleSeconds(o.lease) });
      if (o.now < until)
        return {
          kind: "wait",
          reason: "WaitingForSilence",
          message: `the node heartbeat until it was powered off: nothing is released before ${iso(until)} unless it stays silent`,
          requeueAfterMs: Math.max(100, until.diff(o.now).as("milliseconds")),
        };
    }
    if (phase === "Fenced") return { kind: "markNode" };
    return releaseStep(o, snap);
  }

  if (phase === "Released") {
    // Storage fences of earlier levels or rounds come down once a power-off confirmed the machine off and its pods were
    // released — never for a new bootID alone (its kubelet can write one; StorageFenced's pods were never released).
    const superseded = storageFencesSuperseded(o);
    if (superseded.length) {
      const lift = liftStorageStep(o, superseded);
      if (lift) return lift;
    }
    if (snap.action === "reboot" && st.evidence?.method === "PowerOffConfirmed") {
      const step = powerOnStep(o);
      if (step) return step;
      const boot = o.node?.status?.nodeInfo?.bootID ?? "";
      const ready = o.node?.status?.conditions?.find((c) => c.type === "Ready")?.status === "True";
      if (snap.unfenceOnReboot && boot && st.bootID && boot !== st.bootID && ready) return { kind: "startUnfence", reason: "Rebooted" };
    }
    return { kind: "done" };
  }
  return { kind: "done" };
}

/** A failed round is retried with backoff (Pacemaker retries fencing too); an automatic one ends if the node heartbeats. */
function failedStep(o: FenceObservation, health: NodeHealth | undefined): Step {
  const st = o.fence.status ?? {};
  const retryAt = toDateTime(st.nextRetryTime) ?? o.now;
  // Not yet seen silent again after this replica's own gap is no heartbeat: the failed fence neither ends (its claim
  // gates and force-delete guard would end with it) nor retries until the silence is seen again.
  const recount = silenceRecounted(o, health);
  if (recount) return recount;
  const gone = o.fence.spec.origin === "Automatic" ? triggerGone(o, health) : undefined;
  if (gone) return holdStorage(o, health) ?? { kind: "cancel", message: `${gone}: the failed fence is not retried` };
  if (o.now < retryAt)
    return {
      kind: "wait",
      reason: "RetryScheduled",
      message: `round ${(st.round ?? 0) + 1} failed; retrying at ${iso(retryAt)}`,
      requeueAfterMs: Math.max(100, retryAt.diff(o.now).as("milliseconds")),
    };
  // A new round runs with the policy as it is now, if it still exists and selects the node; else with the old snapshot.
  const policy = o.policies.find((p) => p.metadata?.name === st.policy);
  const fresh = policy && (!o.node || matchesSelector(o.node.metadata?.labels, policy.spec.nodeSelector)) ? snapshotOf(policy) : undefined;
  if (!fresh && !st.policySnapshot)
    return {
      kind: "wait",
      reason: "PolicyNotFound",
      message: `FencingPolicy ${st.policy} no longer exists or no longer selects the node, and the fence has no snapshot to retry with`,
      requeueAfterMs: 30_000,
    };
  return {
    kind: "retry",
    snapshot: fresh,
    message: `retrying: round ${(st.round ?? 0) + 2} from escalation level 1 (${describeHealth(health)})`,
  };
}

/**
 * What a fence starts on: the Node read now; once it is gone, the Node as this process last saw it (its labels select
 * the policy, its providerID and node-restriction labels become the snapshot agents fence through); for a Node this
 * process never saw, only a manual fence that names its policy, with a snapshot of the name alone (docs/safety.md §3).
 */
function startingNode(o: FenceObservation): { node: V1Node; remembered: "live" | "lastSeen" | "nameOnly" } | undefined {
  if (o.node) return { node: o.node, remembered: "live" };
  const name = o.fence.spec.nodeName;
  if (o.lastSeenNode && o.lastSeenNode.metadata?.name === name) return { node: o.lastSeenNode, remembered: "lastSeen" };
  if (o.fence.spec.origin !== "Automatic" && o.fence.spec.policy) return { node: { metadata: { name } }, remembered: "nameOnly" };
  return undefined;
}

function startStep(o: FenceObservation): Step {
  const f = o.fence;
  const nodeName = f.spec.nodeName;
  const wait = (reason: string, message: string): Step => ({ kind: "wait", reason, message, requeueAfterMs: 30_000 });
  const starting = startingNode(o);
  if (!starting)
    return wait(
      "NodeNotFound",
      `Node ${nodeName} does not exist and this operator has no record of it (it was deleted before this replica started): ` +
        `a deleted Node proves nothing, so its pods stay; this fence starts when a kubelet registers the Node again, or set spec.policy ` +
        `(and spec.origin Manual) to fence it through agents whose parameters need only the node's name (spec.nodes, {{ name }})`,
    );
  const target = starting.node;
  const asked = f.spec.policy;
  let policy: FencingPolicy | undefined;
  if (asked) {
    policy = o.policies.find((p) => p.metadata?.name === asked);
    if (!policy) return wait("PolicyNotFound", `FencingPolicy ${asked} does not exist: create it, or delete this NodeFence`);
    // A NodeFence may not pick a policy meant for other nodes (e.g. one whose only level is a manual agent). A node
    // known by name only has no labels to check: the administrator named the policy.
    if (starting.remembered !== "nameOnly" && !matchesSelector(target.metadata?.labels, policy.spec.nodeSelector))
      return wait(
        "PolicyDoesNotSelectNode",
        `FencingPolicy ${asked} does not select node ${nodeName} (its nodeSelector does not match the Node's labels${starting.remembered === "lastSeen" ? " as last seen before it was deleted" : ""}): name a policy that selects it, or leave spec.policy empty`,
      );
  } else {
    policy = policyForNode(target, o.policies).policy;
    if (!policy) return wait("NoPolicy", `no FencingPolicy selects node ${nodeName}: create one whose nodeSelector matches it`);
  }
  // Manual or automatic, a node whose loss may break the control plane's quorum is not fenced unless the policy allows it.
  const refused = quorumRefusal(target, nodePods(o), policy);
  if (refused)
    return wait(
      "ControlPlaneNode",
      `${refused}: set it on the policy to fence such nodes, or delete this NodeFence (nothing was powered off or released)`,
    );
  return {
    kind: "start",
    policy: policy.metadata?.name ?? "",
    snapshot: snapshotOf(policy),
    node: nodeSnapshotOf(target),
    bootID: target.status?.nodeInfo?.bootID ?? "",
  };
}

function fencingStep(o: FenceObservation, health: NodeHealth | undefined): Step {
  const f = o.fence;
  const st = f.status ?? {};
  const snap = st.policySnapshot!;
  const round = st.round ?? 0;
  const attempts = attemptsOf(f);

  // An automatic fence powers nothing off once the node heartbeats again (or its trigger condition cleared), whatever
  // was tried before.
  const recount = silenceRecounted(o, health);
  if (recount) return recount;
  const gone = f.spec.origin === "Automatic" ? triggerGone(o, health) : undefined;
  if (gone) return holdStorage(o, health) ?? { kind: "cancel", message: `${gone}: fencing cancelled, nothing was released` };

  const levels = snap.escalation;
  const level = st.currentLevel ?? 0;
  const spec = levels[level];
  if (!spec) return levelFailed(o, levels.length, level, `no escalation level ${level + 1} in the fence's policy snapshot`);
  const levelStart = toDateTime(st.levelStartTime) ?? toDateTime(st.startTime) ?? o.now;
  const levelDeadline = spec.timeoutSeconds !== undefined ? levelStart.plus({ seconds: spec.timeoutSeconds }) : undefined;

  const busy = attempts.findIndex((a) => a.outcome === "InProgress");
  if (busy >= 0) return inProgressStep(o, busy, health, levelDeadline);

  // A node that became a control-plane or etcd node since the fence started (or whose policy no longer allows it) gets
  // no further power-off try, manual or automatic: the same check as at the start, on this read.
  const refused = quorumRefusal(o.node, nodePods(o), policyOf(o));
  if (refused)
    return {
      kind: "wait",
      reason: "ControlPlaneNode",
      message: `${refused}: no further power-off is tried (set it on the policy, or delete this NodeFence)`,
      requeueAfterMs: 30_000,
    };

  if (levelDeadline && o.now >= levelDeadline)
    return levelFailed(o, levels.length, level, `the level's ${spec.timeoutSeconds} s time limit passed`);

  const done: NodeFenceStatusAttempts[] = [];
  for (const name of spec.agents) {
    const last = attempts.filter((a) => (a.round ?? 0) === round && a.level === level && a.agent === name && a.operation === "off").at(-1);
    if (!last || last.outcome === "Interrupted" || last.outcome === "Cancelled") {
      const agent = o.agents.get(name);
      if (!agent) return levelFailed(o, levels.length, level, `FenceAgent ${name} does not exist`);
      if (agent.spec.type === "watchdog" && !watchdogAllowed(o))
        return levelFailed(o, levels.length, level, watchdogNotAllowed(st.policy ?? "", name));
      let timeoutMs = (agent.spec.timeoutSeconds ?? 30) * 1000;
      if (levelDeadline) timeoutMs = Math.min(timeoutMs, levelDeadline.diff(o.now).as("milliseconds"));
      return { kind: "runAgent", level, agent, operation: "off", timeoutMs: Math.max(1, Math.floor(timeoutMs)) };
    }
    if (last.outcome !== "Succeeded") return levelFailed(o, levels.length, level, `${name}: ${last.outcome}: ${last.message ?? ""}`);
    done.push(last);
  }
  // A level proves what all its agents together prove: one power-off confirmed proves the machine off; an
  // administrator's confirmation, that a person vouches for it; storage fences alone, only that its volumes are cut.
  // Each attempt proves what its agent was when it ran (recorded then), not what the FenceAgent says now: a storage
  // fence deleted or re-typed to ipmi since is still a storage fence. One without a record (an older version's)
  // proves the least: nothing of its own, no StorageClass.
  const types = done.map((a) => a.agentType);
  const power = types.some(isPowerType);
  const manual = !power && types.some((t) => t === "manual");
  // WatchdogExpired only from a level of watchdog agents alone (a mix with storage fences proves what they prove).
  const watchdog = types.length > 0 && types.every((t) => t === "watchdog");
  if (watchdog) return watchdogConfirmation(o, levels.length, level, round, spec.agents, health);
  const method: Evidence["method"] = power ? "PowerOffConfirmed" : manual ? "ManualConfirmation" : "StorageFenced";
  const storageClasses = [...new Set(done.flatMap((a) => (isStorageFence(a.agentType) ? (a.storageClasses ?? []) : [])))].sort();
  const unknown = done.filter((a) => a.agentType === undefined).map((a) => a.agent);
  const how =
    method === "PowerOffConfirmed"
      ? "powered the machine off and a status query confirmed it"
      : method === "ManualConfirmation"
        ? "confirmed by an administrator while the node was partitioned"
        : `cut the node off its storage (StorageClasses ${storageClasses.join(", ") || "none"}); the machine may still run: only those volumes are released, no pod`;
  const unrecorded = unknown.length
    ? ` (${unknown.join(", ")}: attempt recorded without its agent's type by an older version, counted as proving nothing)`
    : "";
  return {
    kind: "confirmed",
    evidence: {
      method,
      detail: `round ${round + 1}, level ${level + 1}: ${spec.agents.join(", ")} ${how}${unrecorded}`,
      ...(method === "StorageFenced" ? { storageClasses } : {}),
      agents: [...spec.agents],
      round,
      heartbeat: { ...heartbeatOf(o.node, o.lease), silent: silentNow(o, health) },
    },
  };
}

/** An attempt written InProgress: ours and still running, finished, a manual wait, or left by a stopped operator. */
function inProgressStep(o: FenceObservation, index: number, health: NodeHealth | undefined, levelDeadline: DateTime | undefined): Step {
  const a = attemptsOf(o.fence)[index]!;
  const agent = o.agents.get(a.agent);
  if ((a.agentType ?? agent?.spec.type) === "watchdog" && a.operation === "off") return watchdogStep(o, index);
  if ((a.agentType ?? agent?.spec.type) === "manual" && a.operation === "off") {
    // The administrator is the actuator: no background work, nothing held; each reconcile looks again.
    const start = toDateTime(a.startTime) ?? o.now;
    let deadline = start.plus({ seconds: agent?.spec.timeoutSeconds ?? 30 });
    if (levelDeadline && levelDeadline < deadline) deadline = levelDeadline;
    const confirmed = o.fence.metadata?.annotations?.[CONFIRMED_OFF_ANNOTATION] === o.fence.spec.nodeName;
    // A person's word is the only evidence here: the API must agree on both clocks, the node's expired Lease alone
    // (detection.waitForNodeController false) is not enough — the node controller's Ready=Unknown too (safety.md §3).
    const silent =
      health === undefined ? silentNow(o, health) : health.state === "Partitioned" && health.partitionedBy === "NodeController";
    if (confirmed && silent)
      return {
        kind: "recordOutcome",
        index,
        outcome: "Succeeded",
        message: `${o.fence.spec.nodeName} confirmed off by an administrator (annotation ${CONFIRMED_OFF_ANNOTATION}); the node is partitioned (${describeHealth(health)})`,
      };
    if (o.now >= deadline) {
      const why = confirmed
        ? `the administrator's confirmation was refused: the node still heartbeats (${describeHealth(health)})`
        : `power the machine off, then: kubectl annotate nodefence ${o.fence.spec.nodeName} ${CONFIRMED_OFF_ANNOTATION}=${o.fence.spec.nodeName}`;
      return {
        kind: "recordOutcome",
        index,
        outcome: "TimedOut",
        message: `no confirmation within ${Math.round(deadline.diff(start).as("seconds"))} s; ${why}`,
      };
    }
    return {
      kind: "wait",
      reason: confirmed ? "ConfirmationRefused" : "WaitingForConfirmation",
      message: confirmed
        ? health?.state === "Partitioned"
          ? `confirmed off by an administrator; the node's Lease expired, but the node controller has not marked it Ready=Unknown yet (${describeHealth(health)}): accepted once it does`
          : `confirmed off by an administrator, but the node still heartbeats (${describeHealth(health)}): accepted once it is partitioned`
        : `waiting for an administrator to power ${o.fence.spec.nodeName} off and annotate the NodeFence ${CONFIRMED_OFF_ANNOTATION}=${o.fence.spec.nodeName}`,
      requeueAfterMs: Math.max(100, Math.min(5_000, deadline.diff(o.now).as("milliseconds"))),
    };
  }
  return operationStep(o, index, `${a.agent} ${a.operation}`);
}

/** Why a watchdog agent is not used: its fence's policy has not opted in (docs/safety.md §8). */
export const watchdogNotAllowed = (policy: string, agent: string) =>
  `FenceAgent ${agent} is of type watchdog, but FencingPolicy ${policy} does not allow WatchdogExpired evidence: set spec.allowWatchdogEvidence: true on it to use the node agent's watchdog (weaker than a confirmed power-off: docs/safety.md), or remove ${agent} from its escalation`;

/**
 * WatchdogExpired is taken only while both the fence's policy snapshot and its FencingPolicy as it is now allow it:
 * an opt-in withdrawn mid-fence counts at once, and a policy deleted allows nothing (the safer reading of both).
 */
function watchdogAllowed(o: Pick<FenceObservation, "fence" | "policies">): boolean {
  return !!o.fence.status?.policySnapshot?.allowWatchdogEvidence && policyOf(o)?.spec.allowWatchdogEvidence === true;
}

/**
 * An InProgress watchdog attempt: nothing runs. Each look computes WatchdogExpired (o.watchdog, from what this process
 * observed); it succeeds once the arithmetic holds, fails when the node's record rules the watchdog out (none, not
 * armed, unusable, another node's: the next level applies), and otherwise waits, the arithmetic in status. The level's
 * time limit still applies; the agent's own timeoutSeconds does not (the wait is what the arithmetic says).
 */
function watchdogStep(o: FenceObservation, index: number): Step {
  const a = attemptsOf(o.fence)[index]!;
  if (!watchdogAllowed(o))
    return { kind: "recordOutcome", index, outcome: "Failed", message: watchdogNotAllowed(o.fence.status?.policy ?? "", a.agent) };
  const w = o.watchdog;
  if (!w)
    return {
      kind: "wait",
      reason: "WaitingForWatchdog",
      message: `waiting for the first list of the node agents' records (Leases in namespace ${NODE_AGENT_NAMESPACE}; the operator needs get, list and watch on them): the watchdog's wait counts from this operator's own first look`,
      requeueAfterMs: 2_000,
    };
  if (w.holds)
    return {
      kind: "recordOutcome",
      index,
      outcome: "Succeeded",
      message: `WatchdogExpired: ${describeArithmetic(w.arithmetic)}`,
      watchdog: watchdogStatus(w, o.now),
    };
  if (!w.arithmetic) return { kind: "recordOutcome", index, outcome: "Failed", message: w.reason, watchdog: watchdogStatus(w, o.now) };
  // Worded to stay the same while only time passes: the wait is not written to status at every look.
  const message = watchdogWaitMessage(w);
  const watchdog = watchdogStatus(w, o.now, message);
  const leftMs = (w.arithmetic.requiredSeconds - w.arithmetic.observedSeconds) * 1000;
  return {
    kind: "wait",
    reason: "WaitingForWatchdog",
    message,
    requeueAfterMs: Math.max(500, Math.min(5_000, Math.ceil(leftMs))),
    watchdog,
  };
}

/**
 * A level of watchdog agents whose attempts all succeeded: confirmed only if WatchdogExpired still holds on this read
 * (a renewal since the attempt ended voids it for good: the level fails). The evidence records the kubelet Lease and
 * the agent record as read now; every release step compares fresh reads with them.
 */
function watchdogConfirmation(
  o: FenceObservation,
  levels: number,
  level: number,
  round: number,
  agents: readonly string[],
  health: NodeHealth | undefined,
): Step {
  const w = o.watchdog;
  if (!watchdogAllowed(o)) return levelFailed(o, levels, level, watchdogNotAllowed(o.fence.status?.policy ?? "", agents.join(", ")));
  if (!w?.holds)
    return levelFailed(
      o,
      levels,
      level,
      `WatchdogExpired no longer holds on this read: ${w?.reason ?? "the node agents' records are not listed"}`,
    );
  return {
    kind: "confirmed",
    evidence: {
      method: "WatchdogExpired",
      detail: `round ${round + 1}, level ${level + 1}: ${agents.join(", ")}: the node's watchdog must have reset the machine: ${describeArithmetic(w.arithmetic)}`,
      agents: [...agents],
      round,
      heartbeat: {
        ...heartbeatOf(o.node, o.lease),
        silent: silentNow(o, health),
        ...agentRecordFingerprint(o.lease, o.agentRecord),
      },
    },
  };
}

/** The Fenced condition's reason and message while an agent operation runs (`what`: agent and operation). */
export const agentRunning = (what: string) => ({ reason: "AgentRunning", message: `${what} in progress` });

/** An InProgress attempt run in the background: record its end, wait for it, or, with no operation here, interrupt it. */
function operationStep(o: FenceObservation, index: number, what: string): Step {
  const op = o.operations.get(index);
  if (op?.state === "done") return { kind: "recordOutcome", index, outcome: op.outcome, message: op.message };
  if (op?.state === "running") return { kind: "wait", ...agentRunning(what), requeueAfterMs: 30_000 };
  return { kind: "interrupted", index };
}

function releaseStep(o: FenceObservation, snap: NodeFenceStatusPolicySnapshot): Step {
  const st = o.fence.status ?? {};
  const nodeName = o.fence.spec.nodeName;
  const rel = snap.release ?? {};
  const releases = st.releases ?? [];
  const taintAdded = releases.some((r) => r.kind === "Taint" && r.action === "Added");
  const taintRemoved = releases.some((r) => r.kind === "Taint" && r.action === "Removed");
  if (st.evidence?.method === "StorageFenced") return storageReleaseStep(o, rel);
  if (rel.outOfServiceTaint && !taintAdded) return { kind: "release", items: [{ kind: "Taint", action: "Added" }] };
  // Before the pods go: a pod's claims are found through it. Any pod of the node, guarded or not, that holds a lock.
  const locks = batch(claimLocksToBreak(o));
  if (locks) return locks;
  if (rel.forceDeletePods ?? true) {
    const pods = batch(podsToRelease(o).map((pod) => ({ kind: "Pod", pod }) as const));
    if (pods) return pods;
  }
  if (rel.deleteVolumeAttachments ?? true) {
    const done = new Set(releases.filter((r) => r.kind === "VolumeAttachment").map((r) => r.uid));
    const vas = batch(o.volumeAttachments.filter((v) => v.spec.nodeName === nodeName && !done.has(v.metadata?.uid)).map(vaItem));
    if (vas) return vas;
  }
  if (rel.outOfServiceTaint && !taintRemoved) {
    // The taint manager evicts the node's pods and the pod GC controller force-deletes them; the taint may go
    // only once none is terminating there and no guarded pod is left (one not yet evicted would be stranded).
    const terminating = nodePods(o).filter((p) => p.metadata?.deletionTimestamp);
    const guarded = podsToRelease(o).filter((p) => !p.metadata?.deletionTimestamp);
    if (terminating.length || guarded.length)
      return {
        kind: "wait",
        reason: "WaitingForPodGC",
        message: `${terminating.length} pod(s) still terminating and ${guarded.length} guarded pod(s) not yet evicted on ${nodeName}; the out-of-service taint stays until the pod GC controller has removed them (a pod tolerating node.kubernetes.io/out-of-service keeps it forever)`,
        requeueAfterMs: 2_000,
      };
    return { kind: "release", items: [{ kind: "Taint", action: "Removed" }] };
  }
  return { kind: "released" };
}

/**
 * Release on StorageFenced evidence: the machine may still run, so volumes only, and only those of the StorageClasses
 * the storage fences cut. The claim locks of the node's pods are broken (their gated replacements may be granted) and
 * the VolumeAttachments deleted; never a pod force-deleted, never the out-of-service taint (with it
 * kube-controller-manager force-deletes the node's pods): the pods stay until the machine is confirmed off or an
 * administrator decides.
 */
function storageReleaseStep(o: FenceObservation, rel: NonNullable<NodeFenceStatusPolicySnapshot["release"]>): Step {
  const classes = new Set(o.fence.status?.evidence?.storageClasses ?? []);
  const covered = (pvc: V1PersistentVolumeClaim | undefined) => !!pvc && classes.has(pvc.spec?.storageClassName ?? "");
  const locks = batch(claimLocksToBreak(o).filter((l) => covered(l.pvc)));
  if (locks) return locks;
  if (rel.deleteVolumeAttachments ?? true) {
    const byVolume = new Map([...o.pvcs.values()].filter((c) => c.spec?.volumeName).map((c) => [c.spec!.volumeName!, c] as const));
    const done = new Set((o.fence.status?.releases ?? []).filter((r) => r.kind === "VolumeAttachment").map((r) => r.uid));
    const vas = batch(
      o.volumeAttachments
        .filter(
          (v) =>
            v.spec.nodeName === o.fence.spec.nodeName &&
            !done.has(v.metadata?.uid) &&
            covered(byVolume.get(v.spec.source.persistentVolumeName ?? "")),
        )
        .map(vaItem),
    );
    if (vas) return vas;
  }
  return { kind: "released" };
}

/**
 * Lift every storage fence this NodeFence may hold (storageFencesToLift; `names` narrows it), one at a time; a failed
 * lift is tried again with backoff (each try bounded by the agent's timeout), for as long as the fence is held — the
 * wait says which and why. Only through a FenceAgent that still is a storage fence: one re-typed since would run
 * another agent's "on" (a power-on). Undefined once none is left (or they were abandoned).
 */
function liftStorageStep(o: FenceObservation, names = toLift(o)): Step | undefined {
  const attempts = attemptsOf(o.fence);
  const busy = attempts.findIndex((a) => a.outcome === "InProgress");
  if (busy >= 0) return operationStep(o, busy, "storage unfence");
  const waiting: string[] = [];
  let next: DateTime | undefined;
  for (const name of names) {
    const agent = o.agents.get(name);
    if (!agent) {
      // Deleted since: its NetworkFence is named after the agent and the node only, and a lift needs no parameters.
      waiting.push(
        `${name}: FenceAgent ${name} no longer exists: create a csiAddonsNetworkFence FenceAgent of that name again to lift its NetworkFence ${networkFenceName(name, o.fence.spec.nodeName)}`,
      );
      continue;
    }
    if (!isStorageFence(agent.spec.type)) {
      waiting.push(
        `${name}: FenceAgent ${name} is of type ${agent.spec.type} now, not a storage fence: its "on" would not lift the NetworkFence ${networkFenceName(name, o.fence.spec.nodeName)} (and might power the machine on); set its type back to csiAddonsNetworkFence to lift it`,
      );
      continue;
    }
    const lastOff = attempts.findLastIndex((a) => a.agent === name && a.operation === "off");
    const ons = attempts.slice(lastOff + 1).filter((a) => a.agent === name && a.operation === "on");
    const last = ons.at(-1);
    const run: Step = {
      kind: "runAgent",
      level: attempts[lastOff]?.level ?? 0,
      agent,
      operation: "on",
      timeoutMs: (agent.spec.timeoutSeconds ?? 30) * 1000,
    };
    if (!last || last.outcome === "Interrupted") return run;
    const first = ons.find((a) => a.outcome !== "Interrupted") ?? last;
    const lastEnd = toDateTime(last.endTime) ?? o.now;
    const delay = liftRetryDelaySeconds(lastEnd.diff(toDateTime(first.startTime) ?? lastEnd).as("seconds"));
    const retryAt = lastEnd.plus({ seconds: delay });
    // A clock that jumped back would push the retry out by the jump: never wait longer than the delay from now.
    if (o.now >= retryAt || retryAt.diff(o.now).as("seconds") > delay) return run;
    waiting.push(`${describeStorageFences(o, [name])}: ${last.outcome}: ${last.message ?? ""}; next try at ${iso(retryAt)}`);
    if (!next || retryAt < next) next = retryAt;
  }
  if (!waiting.length) return undefined;
  return {
    kind: "wait",
    reason: "StorageFenceNotLifted",
    message: `the storage fence(s) could not be lifted yet and stay up, retried until they are: ${waiting.join("; ")} (to give one up, leaving it in place: kubectl annotate nodefence ${o.fence.metadata?.name} ${ABANDON_STORAGE_FENCES_ANNOTATION}=${o.fence.spec.nodeName})`,
    requeueAfterMs: next ? Math.max(100, next.diff(o.now).as("milliseconds")) : 30_000,
  };
}

/** Power the machine back on through the agents that powered it off, each tried once (a failure is recorded, not retried). */
function powerOnStep(o: FenceObservation): Step | undefined {
  const st = o.fence.status ?? {};
  const attempts = attemptsOf(o.fence);
  const busy = attempts.findIndex((a) => a.outcome === "InProgress");
  if (busy >= 0) return operationStep(o, busy, "power on");
  const level = st.currentLevel ?? 0;
  // Only what powered the machine off, by the type its attempt recorded (an older version's: today's FenceAgent):
  // a storage fence re-typed to a power agent since never powers the machine on.
  const powered = (name: string, type: string | undefined) => {
    const off = attempts.filter((a) => a.agent === name && a.operation === "off" && a.outcome === "Succeeded").at(-1);
    const t = off?.agentType ?? type;
    return isPowerType(t);
  };
  for (const name of st.policySnapshot?.escalation[level]?.agents ?? []) {
    const agent = o.agents.get(name);
    const last = attempts.filter((a) => a.operation === "on" && a.agent === name && (a.startTime ?? "") >= (st.fencedTime ?? "")).at(-1);
    const type = agent?.spec.type;
    if (agent && isPowerType(type) && powered(name, type) && (!last || last.outcome === "Interrupted"))
      return { kind: "runAgent", level, agent, operation: "on", timeoutMs: (agent.spec.timeoutSeconds ?? 30) * 1000 };
  }
  return undefined;
}

function levelFailed(o: FenceObservation, levels: number, level: number, why: string): Step {
  if (level + 1 < levels)
    return { kind: "escalate", to: level + 1, message: `level ${level + 1} failed (${why}); escalating to level ${level + 2}` };
  const failures = (o.fence.status?.failures ?? 0) + 1;
  const retryAt = o.now.plus({ seconds: retryDelaySeconds(failures) });
  const when =
    o.fence.spec.origin === "Automatic"
      ? `retrying from level 1 at ${iso(retryAt)} while the node stays partitioned`
      : `retrying from level 1 at ${iso(retryAt)}; set spec.unfence or delete the NodeFence to stop`;
  return {
    kind: "roundFailed",
    reason: "FencingFailed",
    message: `every escalation level failed; last: level ${level + 1}: ${why}; ${when}`,
    retryAt,
  };
}
