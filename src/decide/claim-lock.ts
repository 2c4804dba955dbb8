// The claim lock: the pod-safety proposal's attach compare-and-swap, kept on the PersistentVolumeClaim.
// A pod that uses a guarded claim is created with a scheduling gate (admission/claim-gate.ts); the leader
// grants it the claim by a compare-and-swap of the PVC's lock record (resourceVersion precondition), with a
// fencing token one above the last one, and only when no other instance can still be using the claim: every
// other pod that uses it has gone, finished, or sits on a node confirmed fenced. Then the gate comes off.
// Pure: the controller (controllers/claim-lock.ts) feeds it fresh reads and applies what it returns.
import type { V1Lease, V1Node, V1PersistentVolumeClaim, V1Pod } from "@kubernetes/client-node";
import type { DateTime } from "luxon";
import type { NodeFence } from "../api/v1alpha1.ts";
import { heartbeatChanges, heartbeatOf } from "./heartbeat.ts";
import { agentRecordChanges } from "./watchdog-fence.ts";
import { GUARDED_LABEL, isFinished } from "./guarded-pods.ts";
import { DEFAULT_HEARTBEAT_TIMEOUT_SECONDS, toDateTime } from "./node-health.ts";

/** The scheduling gate that holds a pod until it holds its guarded claims. */
export const CLAIM_GATE = "stockade.io/claim-lock";
/** On a PVC: the lock record (JSON, see ClaimLock). Written only by Stockade, only by compare-and-swap. */
export const LOCK_ANNOTATION = "stockade.io/claim-lock";
/**
 * On a PVC: "true" guards it whatever its access modes (in a live policy's scope). "false" opted a claim out before
 * issue 28 and is no longer read: the one opt-out is the pod label stockade.io/guarded=false (docs/api.md).
 */
export const CLAIM_GUARD_ANNOTATION = "stockade.io/claim-guard";
/** On a pod: the fencing token of each claim it holds, JSON {"claim name": token}. */
export const TOKENS_ANNOTATION = "stockade.io/claim-tokens";
/** On a pod that holds exactly one guarded claim (the usual case): its token, a decimal string, for the downward API. */
export const TOKEN_ANNOTATION = "stockade.io/claim-token";
/** On a pod, one per claim it holds (claim names up to 63 characters): the token as a decimal string. */
export const TOKEN_ANNOTATION_PREFIX = "claim-token.stockade.io/";

/** The per-claim token annotation's key, or undefined when the claim's name cannot be an annotation name. */
export function tokenAnnotation(claim: string): string | undefined {
  return claim.length <= 63 ? `${TOKEN_ANNOTATION_PREFIX}${claim}` : undefined;
}

/** The lock record. holder is absent when nobody holds the claim (never granted, or broken by a fence). */
export interface ClaimLock {
  v: 1;
  /** Fencing token of the current (or last) holder: strictly increasing per claim, never reused. */
  token: number;
  holder?: { pod: string; uid: string };
  /** When the record was last written (RFC 3339). */
  time: string;
  /** Why the last holder lost it without its pod going away (e.g. "NodeFence node-2"). */
  brokenBy?: string;
}

export type ParsedLock = { ok: true; lock: ClaimLock | undefined } | { ok: false; message: string };

const isObject = (x: unknown): x is Record<string, unknown> => typeof x === "object" && x !== null && !Array.isArray(x);

/** The PVC's lock record, strictly: anything but a record Stockade could have written is refused, never trusted. */
export function parseLock(pvc: V1PersistentVolumeClaim): ParsedLock {
  const raw = pvc.metadata?.annotations?.[LOCK_ANNOTATION];
  if (raw === undefined) return { ok: true, lock: undefined };
  const bad = (why: string): ParsedLock => ({
    ok: false,
    message: `the lock record (annotation ${LOCK_ANNOTATION}) of claim ${pvc.metadata?.name} is not one Stockade writes (${why}): no pod is granted the claim until it is repaired (docs/volumes.md, "Repairing a lock record")`,
  });
  let x: unknown;
  try {
    x = JSON.parse(raw);
  } catch {
    return bad("not JSON");
  }
  if (!isObject(x)) return bad("not a JSON object");
  if (x.v !== 1) return bad(`version ${JSON.stringify(x.v)}, expected 1`);
  if (!Number.isSafeInteger(x.token) || (x.token as number) < 0) return bad(`token ${JSON.stringify(x.token)} is not a whole number`);
  if (typeof x.time !== "string" || Number.isNaN(Date.parse(x.time))) return bad("time is not a timestamp");
  if (x.brokenBy !== undefined && typeof x.brokenBy !== "string") return bad("brokenBy is not a string");
  let holder: ClaimLock["holder"];
  if (x.holder !== undefined) {
    const h = x.holder;
    if (!isObject(h) || typeof h.pod !== "string" || !h.pod || typeof h.uid !== "string" || !h.uid) return bad("holder is not {pod, uid}");
    if (x.token === 0) return bad("a holder with token 0");
    holder = { pod: h.pod, uid: h.uid };
  }
  const known = new Set(["v", "token", "holder", "time", "brokenBy"]);
  const extra = Object.keys(x).filter((k) => !known.has(k));
  if (extra.length) return bad(`unknown field(s) ${extra.join(", ")}`);
  return {
    ok: true,
    lock: { v: 1, token: x.token as number, ...(holder ? { holder } : {}), time: x.time, ...(x.brokenBy ? { brokenBy: x.brokenBy } : {}) },
  };
}

export function formatLock(lock: ClaimLock): string {
  return JSON.stringify(lock);
}

const exclusive = (pvc: V1PersistentVolumeClaim) =>
  (pvc.spec?.accessModes ?? []).some((m) => m === "ReadWriteOnce" || m === "ReadWriteOncePod");

/** What decides whether a claim is guarded, besides the claim itself: the FencingPolicies' guardedPods.readWriteOnceVolumes. */
export interface ClaimPolicy {
  /** A live FencingPolicy whose scope has the pod guards pods that use ReadWriteOnce claims (guardedPods.readWriteOnceVolumes, default true). */
  readWriteOnceVolumes: boolean;
}

export type ClaimGuard = { guarded: true; why: string } | { guarded: false; why: string };

/**
 * Is the claim lock kept for this claim (of a pod in a live policy's scope: decide/scope.ts)? The PVC's
 * stockade.io/claim-guard=true opts it in; otherwise a ReadWriteOnce or ReadWriteOncePod claim is guarded when the
 * policies guard such claims. A claim not seen yet (pvc undefined) is guarded: the gate is cheap to lift once it is
 * seen, a start without it is not undoable. The annotation's "false" is not an opt-out (the pod label is the one).
 */
export function claimGuard(pvc: V1PersistentVolumeClaim | undefined, policy: ClaimPolicy): ClaimGuard {
  if (!pvc) return { guarded: true, why: "the claim does not exist yet" };
  const opt = pvc.metadata?.annotations?.[CLAIM_GUARD_ANNOTATION];
  if (opt === "true") return { guarded: true, why: `opted in by annotation ${CLAIM_GUARD_ANNOTATION}=true` };
  if (!exclusive(pvc)) return { guarded: false, why: `access modes ${(pvc.spec?.accessModes ?? []).join(", ") || "none"}` };
  if (!policy.readWriteOnceVolumes) return { guarded: false, why: "no FencingPolicy guards ReadWriteOnce claims" };
  return { guarded: true, why: `${(pvc.spec?.accessModes ?? []).join(", ")} claim` };
}

/** The names of the PVCs a pod mounts (persistentVolumeClaim volumes; ephemeral volumes belong to the pod alone). */
export function claimNames(pod: V1Pod): string[] {
  const names = (pod.spec?.volumes ?? []).flatMap((v) => (v.persistentVolumeClaim ? [v.persistentVolumeClaim.claimName] : []));
  return [...new Set(names)].sort();
}

/** The pod opted out of Stockade's protection altogether (label stockade.io/guarded=false). */
export const podOptedOut = (pod: V1Pod) => pod.metadata?.labels?.[GUARDED_LABEL] === "false";

export const isGated = (pod: V1Pod) => (pod.spec?.schedulingGates ?? []).some((g) => g.name === CLAIM_GATE);

/**
 * The highest token a pod's annotation may carry and still continue a claim's sequence when the record does not
 * already go beyond it. Tokens go up by one per grant: 2^32 grants of one claim is a grant a second for 136 years.
 */
export const MAX_CONTINUED_TOKEN = 2 ** 32;

/** The tokens a pod was granted, from its annotation; {} when absent or unreadable. */
export function podTokens(pod: V1Pod): Record<string, number> {
  try {
    const x: unknown = JSON.parse(pod.metadata?.annotations?.[TOKENS_ANNOTATION] ?? "{}");
    if (!isObject(x)) return {};
    return Object.fromEntries(Object.entries(x).filter(([, v]) => Number.isSafeInteger(v) && (v as number) > 0)) as Record<string, number>;
  } catch {
    return {};
  }
}

/** What the lock controller observed, fresh from the API, for one claim of one gated pod. */
export interface ClaimObservation {
  /** The gated pod asking for the claim. */
  requester: V1Pod;
  pvc: V1PersistentVolumeClaim;
  /** Every pod of the claim's namespace (a fresh list). */
  pods: V1Pod[];
  /**
   * Nodes confirmed fenced, with the time of the confirmation: a NodeFence with evidence in phase Fenced,
   * Releasing or Released (read fresh). Only pods created before that time are proven dead by it.
   */
  fencedNodes: ReadonlyMap<string, Date>;
  /**
   * Nodes that heartbeat now (heartbeatsNow over a fresh read of the Node and its Lease): only there is a pod's
   * Failed/Succeeded phase taken as its kubelet's word (provenFinished). Absent: none does.
   */
  heartbeatingNodes?: ReadonlySet<string>;
  /** RFC 3339 time for the record. */
  now: string;
}

export type ClaimDecision =
  /** The requester holds the claim already (granted before a crash, or by another leader): finish un-gating. */
  | { kind: "held"; token: number }
  /** Write this record by compare-and-swap; the requester then holds the claim with this token. */
  | {
      kind: "grant";
      token: number;
      record: ClaimLock;
      previous: string;
      /** Pods whose token for the claim was ignored (above MAX_CONTINUED_TOKEN and the record's), as "pod (token)". */
      ignored?: string[];
    }
  /** `live`: the uids of the pods that may still run an instance of the claim (the holders named in the message). */
  | { kind: "wait"; reason: "ClaimInUse" | "ClaimMissing" | "ClaimTerminating"; message: string; holders: string[]; live: string[] }
  | { kind: "invalid"; message: string };

/**
 * Does the node heartbeat now: its Node (read fresh) says Ready=True and its Lease (read fresh) was renewed within
 * the heartbeat timeout. Both are written by its kubelet alone (the node controller only ever turns Ready Unknown).
 */
export function heartbeatsNow(
  node: V1Node | undefined,
  lease: V1Lease | undefined,
  now: DateTime,
  timeoutSeconds = DEFAULT_HEARTBEAT_TIMEOUT_SECONDS,
): boolean {
  if (node?.status?.conditions?.find((c) => c.type === "Ready")?.status !== "True") return false;
  const renewed = toDateTime(lease?.spec?.renewTime as Date | string | undefined);
  return !!renewed && now < renewed.plus({ seconds: timeoutSeconds });
}

const running = (p: V1Pod) =>
  [...(p.status?.initContainerStatuses ?? []), ...(p.status?.containerStatuses ?? []), ...(p.status?.ephemeralContainerStatuses ?? [])]
    .filter((c) => c.state?.running)
    .map((c) => c.name);

/**
 * Does the pod's phase prove that none of its containers runs? Failed/Succeeded is written by its kubelet once
 * they stopped — but also by the pod GC controller right before its own force delete (a pod on a Node that is gone,
 * or terminating on a node tainted out-of-service), without asking anyone, and by anyone allowed to write pods/status.
 * So the phase counts only where its kubelet is alive to stand by it (the node heartbeats now: it keeps the pod's
 * status and stops the containers of a pod the API says finished) and no container status says running (the pod GC
 * controller writes the phase alone, so the kubelet's last report of a running container stays). On a silent node
 * no phase is proof: only a fence is.
 */
export function provenFinished(p: V1Pod, nodeHeartbeats: boolean): boolean {
  if (!isFinished(p)) return false;
  if (!p.spec?.nodeName) return true;
  return nodeHeartbeats && running(p).length === 0;
}

/** Why a terminal phase is not taken as proof here (for messages), or undefined when it is, or there is none. */
export function untrustedPhase(p: V1Pod, nodeHeartbeats: boolean): string | undefined {
  if (!isFinished(p) || provenFinished(p, nodeHeartbeats)) return undefined;
  const phase = p.status?.phase;
  if (!nodeHeartbeats)
    return `its phase ${phase} proves nothing while node ${p.spec?.nodeName} does not heartbeat (the pod GC controller writes ${phase} itself before its own force delete)`;
  return `its phase is ${phase} but its kubelet last reported container(s) ${running(p).join(", ")} running`;
}

/** Why a pod that uses the claim may still run an instance of it, or undefined when it cannot. */
export function liveUse(
  p: V1Pod,
  claim: string,
  lock: ClaimLock | undefined,
  fencedNodes: ReadonlyMap<string, Date>,
  heartbeatingNodes: ReadonlySet<string> = new Set(),
): string | undefined {
  const node = p.spec?.nodeName;
  if (provenFinished(p, !!node && heartbeatingNodes.has(node))) return undefined;
  const fenced = node ? fencedNodes.get(node) : undefined;
  const created = p.metadata?.creationTimestamp ? new Date(p.metadata.creationTimestamp).getTime() : NaN;
  if (fenced && created < fenced.getTime()) return undefined;
  const holds = lock?.holder?.uid === p.metadata?.uid;
  // A pod still held by our gate cannot be scheduled, so it runs nothing — unless it was already granted the claim.
  if (isGated(p) && !node && !holds) return undefined;
  const name = p.metadata?.name ?? "";
  const phase = node ? untrustedPhase(p, heartbeatingNodes.has(node)) : undefined;
  if (holds) return `${name} holds it (token ${lock?.token})${node ? ` on node ${node}` : ""}${phase ? ` (${phase})` : ""}`;
  if (node) {
    const terminating = p.metadata?.deletionTimestamp ? " (terminating; its kubelet has not confirmed yet)" : "";
    return `${name} uses it on node ${node}${phase ? ` (${phase})` : terminating}`;
  }
  // Granted after the claim read here (a cached claim may lag the pod list): the gate lift wrote its token.
  const token = podTokens(p)[claim];
  if (token) return `${name} was granted it (token ${token}) and may be scheduled at any moment`;
  return `${name} uses it and may be scheduled at any moment (it was created without Stockade's gate)`;
}

/** May the requester be granted the claim now, and with which token? */
export function decideClaim(o: ClaimObservation): ClaimDecision {
  const claim = o.pvc.metadata?.name ?? "";
  const uid = o.requester.metadata?.uid ?? "";
  const parsed = parseLock(o.pvc);
  if (!parsed.ok) return { kind: "invalid", message: parsed.message };
  const lock = parsed.lock;
  if (lock?.holder?.uid === uid) return { kind: "held", token: lock.token };
  if (o.pvc.metadata?.deletionTimestamp)
    return { kind: "wait", reason: "ClaimTerminating", message: `claim ${claim} is being deleted`, holders: [], live: [] };
  const users = o.pods.filter((p) => p.metadata?.uid !== uid && claimNames(p).includes(claim));
  const holders: string[] = [];
  const live: string[] = [];
  for (const p of users) {
    const why = liveUse(p, claim, lock, o.fencedNodes, o.heartbeatingNodes);
    if (why === undefined) continue;
    holders.push(why);
    live.push(p.metadata?.uid ?? "");
  }
  // The recorded holder may be a pod we no longer see at all (deleted): then it is gone, nothing to wait for.
  if (holders.length)
    return {
      kind: "wait",
      reason: "ClaimInUse",
      message: `claim ${claim} is in use: ${holders.join("; ")}; this pod starts once that instance is gone (its kubelet confirmed it stopped) or its node is fenced`,
      holders,
      live,
    };
  // A record removed by hand must not restart the sequence below a token a live pod was given. But a pod's
  // annotations are written by whoever may update the pod, tenants included: a token no grant could have produced
  // (above MAX_CONTINUED_TOKEN and above the record's) is ignored, so that one forged huge token cannot push the
  // sequence past 2^53 and leave the claim ungrantable until that pod is deleted.
  let seen = 0;
  const ignored: string[] = [];
  for (const p of o.pods) {
    const t = podTokens(p)[claim];
    if (!t || t <= seen) continue;
    if (t > MAX_CONTINUED_TOKEN && t > (lock?.token ?? 0)) ignored.push(`${p.metadata?.name} (${t})`);
    else seen = t;
  }
  const token = Math.max(lock?.token ?? 0, seen) + 1;
  if (!Number.isSafeInteger(token))
    return { kind: "invalid", message: `claim ${claim}: the next fencing token would be ${token}, beyond 2^53` };
  return {
    kind: "grant",
    token,
    record: { v: 1, token, holder: { pod: o.requester.metadata?.name ?? "", uid }, time: o.now },
    previous: lock?.holder ? `${lock.holder.pod} (token ${lock.token})` : lock ? `nobody (last token ${lock.token})` : "nobody",
    ...(ignored.length ? { ignored } : {}),
  };
}

/** The record after a fence broke the holder's lock; undefined when that pod does not hold it. */
export function breakLock(pvc: V1PersistentVolumeClaim, holderUid: string, by: string, now: string): ClaimLock | undefined {
  const parsed = parseLock(pvc);
  if (!parsed.ok || parsed.lock?.holder?.uid !== holderUid) return undefined;
  return { v: 1, token: parsed.lock.token, time: now, brokenBy: by };
}

/**
 * When the NodeFence proved its node's instances dead (StorageFenced: this claim's storage cut off), if it does now:
 * evidence of the current round recorded, in phase Fenced, Releasing or Released, and the machine not heard from
 * since — the Node and its Lease, read fresh, match the heartbeat fingerprint the evidence was taken with exactly
 * (the check every release makes, fence-machine.ts): same Node uid, bootID, Lease renewTime and Ready heartbeat. A
 * machine that booted again, renewed its Lease once more, or whose Node was deleted or re-created may run pods again:
 * only the instances the fence saw silent are proven gone, and which pod is which is not knowable here. A fence
 * confirmed while the node still heartbeat proves nothing until its release began (the settle wait, fence-machine.ts).
 */
export function fencedSince(
  f: NodeFence | undefined,
  node: V1Node | undefined,
  lease: V1Lease | undefined,
  claim?: V1PersistentVolumeClaim,
  agentRecord?: { read: V1Lease | undefined },
): Date | undefined {
  const phase = f?.status?.phase;
  const ev = f?.status?.evidence;
  // WatchdogExpired: the node's agent record must also be as the evidence recorded it, read fresh; a caller that did
  // not read it (the claim lock, the force-delete guard) gets no "fenced" from it: the fence's own release breaks the
  // locks and deletes the pods, each after that check (fence-machine.ts).
  if (
    ev?.method === "WatchdogExpired" &&
    (!agentRecord || !ev.heartbeat || agentRecordChanges(ev.heartbeat, lease, agentRecord.read).length)
  )
    return undefined;
  if (!ev || !f?.status?.fencedTime || !(phase === "Fenced" || phase === "Releasing" || phase === "Released")) return undefined;
  // Storage fenced: the machine may run; only the claims of the StorageClasses cut off are safe from its pods (and no
  // pod is proven dead, so without a claim — a force delete — it proves nothing).
  if (ev.method === "StorageFenced" && !(claim && (ev.storageClasses ?? []).includes(claim.spec?.storageClassName ?? ""))) return undefined;
  if (!ev.heartbeat || (ev.round ?? 0) !== (f.status.round ?? 0)) return undefined;
  if (heartbeatChanges(ev.heartbeat, heartbeatOf(node, lease)).length) return undefined;
  if (!ev.heartbeat.silent && phase === "Fenced") return undefined;
  if (node) {
    const boot = node.status?.nodeInfo?.bootID;
    if (f.status.bootID && boot && boot !== f.status.bootID) return undefined;
    if (node.status?.conditions?.some((c) => c.type === "Ready" && c.status === "True")) return undefined;
  }
  const t = new Date(f.status.fencedTime);
  return Number.isNaN(t.getTime()) ? undefined : t;
}
