// The claim-lock controller (leader only): grants gated pods their guarded claims and lifts the gate.
// Every grant rests on fresh reads (its namespace's pods, the pod among them, the NodeFences and Nodes where
// its other users sit), is made by the current leader, and is a compare-and-swap of the claim's lock record
// on the version decided on; only then is the gate lifted, with the tokens in the same write. A crash between the two is
// resumed from the record ("held"), so no token is ever handed out twice.
import type { V1PersistentVolumeClaim, V1Pod } from "@kubernetes/client-node";
import type { DateTime } from "luxon";
import type { Logger } from "pino";
import {
  CLAIM_GATE,
  LOCK_ANNOTATION,
  MAX_CONTINUED_TOKEN,
  TOKENS_ANNOTATION,
  TOKEN_ANNOTATION,
  CLAIM_GUARD_ANNOTATION,
  claimNames,
  decideClaim,
  type ClaimDecision,
  fencedSince,
  formatLock,
  heartbeatsNow,
  isGated,
  parseLock,
  podTokens,
  tokenAnnotation,
} from "../decide/claim-lock.ts";
import { GUARDED_LABEL } from "../decide/guarded-pods.ts";
import { fenceHoldNodes, gateClaims, gateScope, heldWhy, type GateClaims } from "../decide/scope.ts";
import { isNotFound, type Kube } from "../kube/api.ts";
import type { Caches } from "../kube/caches.ts";
import type { Metrics } from "../metrics.ts";
import { objectRef, type EventRecorder } from "../runtime/events.ts";
import type { Leadership } from "../runtime/leader.ts";
import type { WorkQueue } from "../runtime/work-queue.ts";

export interface ClaimLockDeps {
  kube: Kube;
  caches: Caches;
  events: EventRecorder;
  log: Logger;
  clock: () => DateTime;
  leadership: Leadership;
  metrics?: Metrics;
}

/** How often a waiting pod is looked at again even without an event (a missed event must not strand it). */
const RECHECK_MS = 30_000;
/**
 * How long a fresh decision that a claim is in use stands for the claim's other waiters (below RECHECK_MS, so a change
 * no event tells of, such as a Node's, is still read fresh at every recheck).
 */
const SHARED_WAIT_MS = 10_000;
/** How long a waiter awaits the decision another waiter of its claim is making, before it is requeued. */
const SHARED_AWAIT_MS = 1_000;

/** A fresh decision under way: whether an event touched one of its claims since it began, and when it ends. */
interface Run {
  dirty: boolean;
  done: Promise<void>;
  end: () => void;
}

/** A fresh decision that a claim is in use, shared with its other waiters until an event touches the claim. */
interface SharedWait {
  at: number;
  /** The uids of the pods that may still run an instance of the claim: one of them waits for nobody. */
  live: ReadonlySet<string>;
  message: string;
}

/** Where the guarded claims' other users are bound, read fresh: fenced (per claim, since when) and heartbeating now. */
interface UserNodes {
  fencedNodesFor: (pvc: V1PersistentVolumeClaim) => Map<string, Date>;
  heartbeatingNodes: Set<string>;
}

const podRef = (p: V1Pod) => objectRef("Pod", p);
const pvcRef = (c: V1PersistentVolumeClaim) => objectRef("PersistentVolumeClaim", c);

export class ClaimLockController {
  private readonly d: ClaimLockDeps;
  /**
   * Gated pods ("namespace/name") and the claims each waits for, kept from pod events (few pods are gated), with when
   * the cache first showed the pod gated (performance.now(), for the grant's phases in the log).
   */
  private readonly gated = new Map<string, { namespace: string; claims: string[]; seen: number }>();
  /** Fresh decisions under way, by claim ("namespace/claim"). */
  private readonly running = new Map<string, Set<Run>>();
  /** The last fresh "in use" decision of each claim no event has touched since it began. */
  private readonly waits = new Map<string, SharedWait>();
  /** What each gated pod was last told it waits for (its WaitingForClaim Event), to tell it again only when that changes. */
  private readonly told = new Map<string, string>();
  /** Claims (uid) already told that their stockade.io/claim-guard=false is ignored (a Warning Event, once per operator run). */
  private readonly ignoredOptOut = new Set<string>();

  constructor(d: ClaimLockDeps) {
    this.d = d;
  }

  /**
   * Something about these claims changed (a pod that uses one, the claim itself; all claims: a NodeFence or a
   * FencingPolicy): a shared decision on them no longer stands, nor does one under way.
   */
  private touch(namespace: string | undefined, claims: string[] | undefined): void {
    const keys = claims ? claims.map((c) => `${namespace ?? ""}/${c}`) : [...new Set([...this.waits.keys(), ...this.running.keys()])];
    for (const k of keys) {
      this.waits.delete(k);
      for (const r of this.running.get(k) ?? []) r.dirty = true;
    }
  }

  /**
   * Wires the caches' events to the queue: anything that may free a claim wakes the gated pods that wait for
   * it, and only those (a pod event wakes the waiters of that pod's claims, a PVC event those of that claim),
   * so a busy namespace does not re-run every waiter's fresh reads at each of its pods' status updates.
   */
  watch(queue: WorkQueue): void {
    const c = this.d.caches;
    const key = (p: V1Pod) => `${p.metadata?.namespace ?? ""}/${p.metadata?.name ?? ""}`;
    const waitersOf = (namespace: string | undefined, claims: string[], except?: string) => {
      if (!claims.length) return;
      this.touch(namespace, claims);
      for (const [k, w] of this.gated)
        if (k !== except && w.namespace === (namespace ?? "") && w.claims.some((x) => claims.includes(x))) queue.add(k);
    };
    // A pod held by the gate and bound nowhere runs nothing and frees nothing (unless it holds the claim, which only a
    // write of the claim's record makes so: a claim event), so its creation and status updates change no other
    // waiter's decision. Without this, each of a 500-replica Deployment's gated pods woke the 499 others.
    const idle = (p: V1Pod | undefined) => !!p && isGated(p) && !p.spec?.nodeName;
    const onPod = (p: V1Pod, old?: V1Pod, gone = false) => {
      if (!gone && isGated(p) && !p.metadata?.deletionTimestamp) {
        const seen = this.gated.get(key(p))?.seen;
        if (seen === undefined) queue.add(key(p));
        this.gated.set(key(p), { namespace: p.metadata?.namespace ?? "", claims: claimNames(p), seen: seen ?? performance.now() });
      } else {
        this.gated.delete(key(p));
        this.told.delete(key(p));
      }
      if (!gone && idle(p) && (!old || idle(old))) return;
      waitersOf(p.metadata?.namespace, claimNames(p), key(p));
    };
    const all = () => {
      this.touch(undefined, undefined);
      for (const k of this.gated.keys()) queue.add(k);
    };
    c.pods.on("add", (p) => onPod(p));
    c.pods.on("update", (p, old) => onPod(p, old));
    c.pods.on("delete", (p) => onPod(p, undefined, true));
    for (const verb of ["add", "update", "delete"] as const) {
      c.pvcs.on(verb, (pvc) => waitersOf(pvc.metadata?.namespace, [pvc.metadata?.name ?? ""]));
      c.fences.on(verb, all);
      c.policies.on(verb, all);
    }
  }

  /** Every gated pod the cache shows (after a leader change, before any event). */
  gatedKeys(): string[] {
    return this.d.caches.pods
      .list()
      .filter((p) => isGated(p))
      .map((p) => `${p.metadata?.namespace ?? ""}/${p.metadata?.name ?? ""}`);
  }

  /**
   * Bounds the work per claim: of the waiters of one claim, one at a time makes the fresh reads, and while the claim
   * is in use the others take that decision instead of listing their namespace again (a 500-replica Deployment on one
   * claim made 500 fresh lists at each of its pods' events). Only "wait" is ever shared, never a grant or a gate lift:
   * those rest on this pod's own fresh reads, made after every write that could change them. A shared "wait" is one
   * made on reads that began after the last event that touched the claim (`touch` drops it, and any decision under way
   * then, at every event of a pod that uses the claim, of the claim, of a NodeFence or a FencingPolicy), at most
   * SHARED_WAIT_MS ago, and that does not name this pod among the claim's live users (one that holds the claim must
   * finish its own grant). Sharing can only delay a grant, never make one.
   */
  async reconcile(key: string): Promise<{ requeueAfterMs: number } | void> {
    const slash = key.indexOf("/");
    const namespace = key.slice(0, slash);
    const cached = this.d.caches.pods.get(key.slice(slash + 1), namespace);
    if (!cached || !isGated(cached)) return;
    const keys = claimNames(cached).map((c) => `${namespace}/${c}`);
    let shared = this.sharedWait(keys, cached);
    if (shared instanceof Promise) {
      // Another waiter of the claim is deciding: its answer is likely this pod's too. Awaited for a bounded time, so
      // that reads that hang do not hold every worker; then this pod comes back later.
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([shared, new Promise((r) => (timer = setTimeout(r, SHARED_AWAIT_MS)))]);
      clearTimeout(timer);
      shared = this.sharedWait(keys, cached);
      if (shared instanceof Promise) return { requeueAfterMs: SHARED_AWAIT_MS };
    }
    if (shared) {
      if (this.told.get(key) !== shared.message) {
        this.told.set(key, shared.message);
        await this.d.events.record(podRef(cached), "Normal", "WaitingForClaim", shared.message);
      }
      return { requeueAfterMs: RECHECK_MS };
    }
    // Registered before any await: the claim's other waiters woken by the same event find it and wait for its answer.
    let end!: () => void;
    const run: Run = { dirty: false, done: new Promise<void>((r) => (end = r)), end: () => end() };
    for (const k of keys) (this.running.get(k) ?? this.running.set(k, new Set()).get(k)!).add(run);
    try {
      return await this.decide(key, cached, run);
    } finally {
      for (const k of keys) {
        const rs = this.running.get(k);
        rs?.delete(run);
        if (!rs?.size) this.running.delete(k);
      }
      run.end();
    }
  }

  /** A shared "in use" decision this pod may take as its own, or the decisions under way to wait for first. */
  private sharedWait(keys: string[], pod: V1Pod): SharedWait | Promise<unknown> | undefined {
    const uid = pod.metadata?.uid ?? "";
    for (const k of keys) {
      const w = this.waits.get(k);
      if (w && performance.now() - w.at < SHARED_WAIT_MS && !w.live.has(uid)) return w;
    }
    const runs = keys.flatMap((k) => [...(this.running.get(k) ?? [])]);
    return runs.length ? Promise.all(runs.map((r) => r.done)) : undefined;
  }

  private async decide(key: string, cached: V1Pod, run: Run): Promise<{ requeueAfterMs: number } | void> {
    const { kube, caches, events, log } = this.d;
    const namespace = key.slice(0, key.indexOf("/"));
    const started = performance.now();
    const seen = this.gated.get(key)?.seen ?? started;
    // Order matters: every claim is read before the namespace's pods. A pod recorded as a claim's holder was
    // created before it was granted, so if the list (read after) does not show it, it is gone; read the other
    // way round, a pod created and granted in between would be missing from the list and taken for gone.
    const names = claimNames(cached);
    const t0 = performance.now();
    const claims = await this.readClaims(namespace, names, cached);
    // A pod out of every live policy's scope waits for nothing (its gate comes off below), not even a missing claim.
    const inScope = gateScope(cached, caches.policies.list()).covered;
    const missing = inScope ? names.filter((_, i) => !claims[i]) : [];
    if (missing.length) {
      await events.record(podRef(cached), "Normal", "ClaimMissing", `waiting for claim ${missing.join(", ")} to exist before granting it`);
      return { requeueAfterMs: RECHECK_MS };
    }
    const tRead = performance.now();
    // The pod itself comes from the same fresh list: gone, granted meanwhile or being deleted means nothing to do.
    const pods = await kube.listPodsFresh(namespace);
    const tList = performance.now();
    const pod = pods.find((p) => p.metadata?.uid === cached.metadata?.uid);
    if (!pod || !isGated(pod) || pod.metadata?.deletionTimestamp) return;
    // Out of every live policy's scope now (the policy deleted, turned to a dry run, claimLock: false, the pod's
    // namespace no longer named): no claim of the pod is guarded, and the gate comes off without a grant — unless
    // another pod uses the claim on a node whose NodeFence has not ended (fresh reads): then it comes off only by a
    // grant, whatever the policies say now (decide/scope.ts, gateClaims).
    const policies = caches.policies.list();
    // In scope after all (its labels changed since the cached copy), with a claim not read: look again later.
    if (gateScope(pod, policies).covered && claims.some((c) => !c)) return { requeueAfterMs: RECHECK_MS };
    const byName = new Map(claims.flatMap((c) => (c ? [[c.metadata?.name ?? "", c] as const] : [])));
    const input = { pod, pvc: (n: string) => byName.get(n), policies, pods };
    const fences = new Map(await Promise.all(fenceHoldNodes(input).map(async (n) => [n, await kube.getNodeFence(n)] as const)));
    const gate = gateClaims({ ...input, fence: (n) => fences.get(n) });
    const guarded = gate.guarded.flatMap((g) => (byName.get(g.claim) ? [byName.get(g.claim)!] : []));
    await this.warnIgnoredOptOuts(key, namespace, gate.scope.covered ? claims : []);
    const users = await this.readUserNodes(pod, pods, guarded);
    const granted = await this.grantClaims({ key, pod, pods, guarded, users, run, started, gate });
    if ("requeueAfterMs" in granted) return granted;
    const tGrant = performance.now();
    // The grants' Events only once the gate's write is answered (or failed): they are not on the pod's way to its
    // start, and written beside the lift they made it wait for the apiserver.
    const recordLater = () => Promise.all(granted.later.map((record) => record()));
    const merged = await this.liftGate(key, pod, granted.tokens).catch(async (err: unknown) => {
      await recordLater();
      throw err;
    });
    const tLift = performance.now();
    // Where a grant's time goes (ms): since the cache first showed the pod gated, until its fresh reads began (queued;
    // a pod that waited for its claim waited here too), the claims, the namespace list, the compare-and-swap, the
    // gate's patch; seenAt: when the cache first showed it gated (ms since the epoch, for benchmarks).
    const seenAt = Math.round(performance.timeOrigin + seen);
    const phases = {
      queued: t0 - seen,
      read: tRead - t0,
      list: tList - tRead,
      grant: tGrant - tList,
      lift: tLift - tGrant,
      pods: pods.length,
      seenAt,
    };
    log.info({ pod: key, tokens: merged, phases }, `pod ${key} holds its claims; gate lifted`);
    await recordLater();
  }

  /**
   * The pod's claims, in the order named. They may come from the cache: a grant is a compare-and-swap on the very
   * version decided on, so a stale claim fails its write (409) instead of granting twice. Only "held" lifts the gate
   * without writing the claim, so a claim the cache shows held by this pod, or one the cache lacks, is read fresh.
   */
  private async readClaims(namespace: string, names: string[], cached: V1Pod): Promise<(V1PersistentVolumeClaim | undefined)[]> {
    const claims = names.map((c) => this.d.caches.pvcs.get(c, namespace));
    const heldHere = (c: V1PersistentVolumeClaim | undefined) => {
      const parsed = c ? parseLock(c) : undefined;
      return parsed?.ok && parsed.lock?.holder?.uid === cached.metadata?.uid;
    };
    if (!claims.some((c) => !c || heldHere(c))) return claims;
    return Promise.all(
      names.map((claim) =>
        this.d.kube.core.readNamespacedPersistentVolumeClaim({ name: claim, namespace }).catch((err: unknown) => {
          if (isNotFound(err)) return undefined;
          throw err;
        }),
      ),
    );
  }

  /** A Warning, once per claim and operator run, for each claim that still carries the retired opt-out annotation. */
  private async warnIgnoredOptOuts(key: string, namespace: string, claims: (V1PersistentVolumeClaim | undefined)[]): Promise<void> {
    for (const c of claims) {
      const uid = c?.metadata?.uid || `${namespace}/${c?.metadata?.name}`;
      if (c?.metadata?.annotations?.[CLAIM_GUARD_ANNOTATION] !== "false" || this.ignoredOptOut.has(uid)) continue;
      this.ignoredOptOut.add(uid);
      const msg = `claim ${c.metadata?.name}: the annotation ${CLAIM_GUARD_ANNOTATION}=false no longer opts a claim out (only "true", opting one in, is read); to opt a workload out, label its pods ${GUARDED_LABEL}=false (docs/api.md, "Opting out")`;
      this.d.log.warn({ pod: key, claim: c.metadata?.name }, msg);
      await this.d.events.record(pvcRef(c), "Warning", "ClaimOptOutIgnored", msg);
    }
  }

  /**
   * Where the guarded claims' other users are bound: is that node fenced, and still off (per claim), and does it
   * heartbeat now? Read fresh, all at once.
   */
  private async readUserNodes(pod: V1Pod, pods: V1Pod[], guarded: V1PersistentVolumeClaim[]): Promise<UserNodes> {
    const { kube } = this.d;
    const users = pods.filter(
      (p) => p.metadata?.uid !== pod.metadata?.uid && guarded.some((c) => claimNames(p).includes(c.metadata?.name ?? "")),
    );
    const nodes = [...new Set(users.flatMap((p) => (p.spec?.nodeName ? [p.spec.nodeName] : [])))];
    // The Lease too: a fence's fingerprint, and whether a Failed/Succeeded phase there can be taken as the kubelet's word.
    const fences = new Map(
      await Promise.all(
        nodes.map(async (n) => [n, await Promise.all([kube.getNodeFence(n), kube.readNode(n), kube.readLease(n)])] as const),
      ),
    );
    const seen = this.d.clock();
    const heartbeatingNodes = new Set([...fences].filter(([, [, nodeObj, lease]]) => heartbeatsNow(nodeObj, lease, seen)).map(([n]) => n));
    // Per claim: a storage fence proves only the claims of the StorageClasses it cut off (decide/claim-lock.ts).
    const fencedNodesFor = (pvc: V1PersistentVolumeClaim) => {
      const out = new Map<string, Date>();
      for (const [n, [fence, nodeObj, lease]] of fences) {
        const since = fencedSince(fence, nodeObj, lease, pvc);
        if (since) out.set(n, since);
      }
      return out;
    };
    return { fencedNodesFor, heartbeatingNodes };
  }

  /**
   * Decides each guarded claim for the pod and grants those it may have: the tokens it holds then, and the Events still
   * to record; or, when a claim is in use or its record invalid, when to look again (the gate stays).
   */
  private async grantClaims(a: {
    key: string;
    pod: V1Pod;
    pods: V1Pod[];
    guarded: V1PersistentVolumeClaim[];
    users: UserNodes;
    run: Run;
    started: number;
    /** Which claims only a NodeFence keeps guarded, and what the policies say now (for the wait's Event). */
    gate: Pick<GateClaims, "held" | "scope">;
  }): Promise<{ requeueAfterMs: number } | { tokens: Record<string, number>; later: (() => Promise<void>)[] }> {
    const { key, pod, pods, guarded, run, started, gate } = a;
    const { fencedNodesFor, heartbeatingNodes } = a.users;
    const { events, log } = this.d;
    const namespace = key.slice(0, key.indexOf("/"));
    const tokens: Record<string, number> = {};
    const later: (() => Promise<void>)[] = [];
    // Events of grants already written are recorded whatever happens to the pod's other claims (a wait, a failure).
    let handedOver = false;
    try {
      for (const pvc of guarded) {
        const claim = pvc.metadata?.name ?? "";
        const now = this.d.clock().toUTC().toISO() ?? new Date().toISOString();
        const decision = decideClaim({ requester: pod, pvc, pods, fencedNodes: fencedNodesFor(pvc), heartbeatingNodes, now });
        switch (decision.kind) {
          case "held":
            tokens[claim] = decision.token;
            break;
          case "invalid":
            log.warn({ pod: key, claim }, decision.message);
            await Promise.all([
              events.record(podRef(pod), "Warning", "ClaimLockInvalid", decision.message),
              events.record(pvcRef(pvc), "Warning", "ClaimLockInvalid", decision.message),
            ]);
            return { requeueAfterMs: RECHECK_MS };
          case "wait": {
            // Shared with the claim's other waiters, unless something touched the claim since these reads began.
            if (!run.dirty && decision.live.length)
              this.waits.set(`${namespace}/${claim}`, { at: started, live: new Set(decision.live), message: decision.message });
            // Kept only because a fence has not ended: say so, the administrator may expect the gate gone with the policy.
            const held = gate.held.find((h) => h.claim === claim);
            const message = held ? `${decision.message}. Claim ${claim}: ${heldWhy(held)} (${gate.scope.why})` : decision.message;
            if (held && this.told.get(key) !== message) log.info({ pod: key, claim, fence: held.node, phase: held.phase }, message);
            this.told.set(key, message);
            await events.record(podRef(pod), "Normal", held ? "GateKeptByFence" : "WaitingForClaim", message);
            return { requeueAfterMs: RECHECK_MS };
          }
          case "grant":
            tokens[claim] = await this.grant(key, pod, pvc, decision, later);
            break;
        }
      }
      handedOver = true;
      return { tokens, later };
    } finally {
      if (!handedOver) await Promise.all(later.map((record) => record()));
    }
  }

  /** Writes the grant decided on into the claim's lock record; its Events go to `later`. Returns the token. */
  private async grant(
    key: string,
    pod: V1Pod,
    pvc: V1PersistentVolumeClaim,
    decision: Extract<ClaimDecision, { kind: "grant" }>,
    later: (() => Promise<void>)[],
  ): Promise<number> {
    const { kube, events, log } = this.d;
    const slash = key.indexOf("/");
    const namespace = key.slice(0, slash);
    const name = key.slice(slash + 1);
    const claim = pvc.metadata?.name ?? "";
    if (decision.ignored) {
      const msg = `claim ${claim}: ignored the fencing token of pod ${decision.ignored.join(", ")}: above ${MAX_CONTINUED_TOKEN} and the lock record's, so no grant gave it (a pod's annotations are written by whoever may update the pod); the next token is ${decision.token}`;
      log.warn({ pod: key, claim, ignored: decision.ignored }, msg);
      later.push(() => events.record(pvcRef(pvc), "Warning", "ClaimTokenIgnored", msg));
    }
    this.d.leadership.assertLeading(`grant claim ${namespace}/${claim} to pod ${name}`);
    // The resourceVersion read above is the precondition: a concurrent grant makes this fail with 409.
    await kube.casAnnotateClaim(pvc, { [LOCK_ANNOTATION]: formatLock(decision.record) });
    this.d.metrics?.claimGrants.inc();
    const msg = `granted claim ${claim} to pod ${name} with fencing token ${decision.token} (previous holder: ${decision.previous})`;
    log.info({ pod: key, claim, token: decision.token }, msg);
    // Events are not on the pod's path to its start: recorded once the gate is lifted.
    later.push(
      () => events.record(pvcRef(pvc), "Normal", "ClaimLockGranted", msg),
      () => events.record(podRef(pod), "Normal", "ClaimLockGranted", msg),
    );
    return decision.token;
  }

  /** Lifts the gate, the pod's tokens in the same write (a compare-and-swap on the pod read): the tokens it holds now. */
  private async liftGate(key: string, pod: V1Pod, tokens: Record<string, number>): Promise<Record<string, number>> {
    this.d.leadership.assertLeading(`lift the claim-lock gate of pod ${key}`);
    const merged = { ...podTokens(pod), ...tokens };
    // The JSON map for programs that hold several claims; one plain number per claim for the downward API.
    const perClaim = Object.fromEntries(
      Object.entries(merged).flatMap(([c, t]) => (tokenAnnotation(c) ? [[tokenAnnotation(c)!, String(t)]] : [])),
    );
    const only: Record<string, string> = Object.values(merged).length === 1 ? { [TOKEN_ANNOTATION]: String(Object.values(merged)[0]) } : {};
    const annotations = Object.keys(merged).length ? { ...perClaim, ...only, [TOKENS_ANNOTATION]: JSON.stringify(merged) } : {};
    await this.d.kube.casPatchPod(
      pod,
      annotations,
      (pod.spec?.schedulingGates ?? []).filter((g) => g.name !== CLAIM_GATE),
    );
    const ms = Date.now() - new Date(pod.metadata?.creationTimestamp ?? Date.now()).getTime();
    this.d.metrics?.claimGateSeconds.observe(ms / 1000);
    return merged;
  }
}
