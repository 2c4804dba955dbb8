// The health controller: one fleet-wide reconcile (the storm guard and concurrency limits are about
// all nodes at once) that applies the pure fleet decision — NodeDown pod conditions, new NodeFences,
// FencingPolicy status — and logs every change of a node's verdict once, with its inputs.
import { setTimeout as sleep } from "node:timers/promises";
import type { V1Lease, V1Node, V1Pod } from "@kubernetes/client-node";
import type { DateTime } from "luxon";
import type { Logger } from "pino";
import { API_VERSION, type FencingPolicy, type NodeFence } from "../api/v1alpha1.ts";
import { decideFleet, type FenceIntent, type FleetDecision, type NodeDecision, type PolicyState } from "../decide/fleet.ts";
import { FleetMemo } from "../decide/fleet-memo.ts";
import { nameList } from "../decide/name-list.ts";
import { NODE_DOWN, nodeDownChange } from "../decide/node-down.ts";
import { lagSecondsOf, nodeChangedBeyondHeartbeat } from "../decide/node-health.ts";
import { stillHeld, type Sighting, type UntrustedCondition } from "../decide/node-conditions.ts";
import { quorumRefusal } from "../decide/quorum.ts";
import { goneLeaseRenewed } from "../decide/gone-nodes.ts";
import type { Kube } from "../kube/api.ts";
import { errorMessage, isConflict, isNotFound } from "../kube/api.ts";
import type { Caches } from "../kube/caches.ts";
import { findCondition, setCondition, type Condition } from "../kube/conditions.ts";
import type { EventRecorder } from "../runtime/events.ts";
import type { InFlight } from "../runtime/in-flight.ts";
import type { Leadership } from "../runtime/leader.ts";
import { changedBeyondStatus } from "../runtime/controller.ts";

export const FLEET_KEY = "fleet";
export const ORIGIN_LABEL = "stockade.io/origin";

export interface NodeHealthDeps {
  kube: Kube;
  caches: Caches;
  events: EventRecorder;
  log: Logger;
  clock: () => DateTime;
  /** Shutdown waits for the NodeDown writes under way. */
  inflight?: InFlight;
  /** A create that waited for a slot starts only while this replica leads (creating a fence is not destructive). */
  leadership?: Leadership;
  /** The cluster-wide storm guard's limit (--cluster-max-unhealthy-nodes); undefined: its default. */
  clusterMaxUnhealthyNodes?: number | string;
}

type NodeDownChange = FleetDecision["nodeDown"][number];

const nodeDownKey = (ch: NodeDownChange) => `${ch.namespace}/${ch.name}/${ch.uid}`;
const sameCondition = (a: NodeDownChange["condition"] | undefined, b: NodeDownChange["condition"]) =>
  a === b || (!!a && !!b && a.status === b.status && a.reason === b.reason && a.message === b.message);

const ref = (kind: string, name: string, uid?: string, namespace?: string, apiVersion = "v1") => ({
  apiVersion,
  kind,
  name,
  uid,
  namespace,
});

/** Per-object retry after a failed write: 1 s doubling to 5 min, so one bad object neither blocks nor floods. */
const RETRY_BASE_MS = 1_000;
/** NodeFences created at once (each a fresh read of the node and its Lease, then a create, ~2 round trips): with
 * 8, 50 fences due together took 7 rounds, and the last was created ~2 s after it was due. */
const FENCE_CREATES_IN_FLIGHT = 32;
/**
 * How long a NodeFence this controller created keeps counting as a fence while the cache does not show it yet
 * (monotonic time). Past it the next pass decides from the cache alone: its create of the same fence is a 409.
 */
const CREATED_ECHO_MS = 30_000;
/** NodeDown condition writes in flight at once (each is one pod's status patch, then its Event). */
const NODE_DOWN_WRITES_IN_FLIGHT = 8;
/**
 * …while a NodeFence is under way: a fence is a chain of round trips, one after the other, that the apiserver serves
 * in the same queue as these writes (one client, one flow), and 50 failed nodes carry ~1,500 of them. A pod that
 * waits a little longer for its condition loses nothing; a fence that waits keeps its pods down.
 */
const NODE_DOWN_WRITES_WHILE_FENCING = 2;
/** How often a write slot held back by a fence looks again. */
const NODE_DOWN_SLOT_POLL_MS = 200;
/** Phases in which a NodeFence is still working towards its release. */
const FENCING_PHASES = new Set(["", "Pending", "Fencing", "Fenced", "Releasing"]);
const RETRY_MAX_MS = 300_000;
/** A NodeDown write just made is not made again while the cache may not show it yet (monotonic time: a wall
 * clock set back must not make it last). */
const NODE_DOWN_ECHO_MS = 30_000;

/**
 * Whether a NodeFence event can change the fleet decision, which reads a fence's existence, phase and policy: not
 * the dozen other status writes of each fence (conditions, attempts, releases), which during a burst of failures
 * re-ran the whole decision back to back.
 */
export function fleetReadsChange(f: NodeFence, old?: NodeFence): boolean {
  return !old || changedBeyondStatus(f, old) || f.status?.phase !== old.status?.phase || f.status?.policy !== old.status?.policy;
}

/** A NodeFence this controller decided to create: waiting for a slot, under way, or made (and when). */
interface PendingCreate {
  intent: FenceIntent;
  created?: NodeFence;
  doneAt?: number;
}

/** What the last decision saw of a healthy node's Lease: a later renewal that keeps it so changes nothing. */
interface Routine {
  holder: string | undefined;
  duration: number | undefined;
  /** Until then (epoch ms) the node is not lagging even without another renewal. */
  quietUntil: number;
  /** The pass that found the node routine: an entry of an earlier pass counts as none. */
  pass: number;
  /** The decision it was worked out from: a pass that reuses that decision (decide/fleet-memo.ts) leaves it as it is. */
  decision: NodeDecision;
}

export class NodeHealthController {
  /** What the log last said of each node: a line is written when it changes. */
  private readonly lastVerdict = new Map<string, { verdict: string; message: string; decision?: NodeDecision }>();
  /**
   * What the fleet decision worked out per node, for the next pass: a node none of whose objects changed (the caches
   * replace an object on every event) and whose clock deadline has not come is not assessed again. It changes nothing
   * that is decided (test/unit/decide-fleet-memo.test.ts).
   */
  private readonly memo = new FleetMemo();
  /** Nodes the last decision found Healthy, Ready and not lagging, with what it saw of their Leases. */
  private readonly routine = new Map<string, Routine>();
  private pass = 0;
  /** Trigger conditions held, as the last decision saw them: measured on this process's monotonic clock too. */
  private sightings = new Map<string, Sighting>();
  private readonly failing = new Map<string, { failures: number; retryAt: number }>();
  /**
   * NodeFences this controller decided to create, by node: waiting for a slot, being created, or created and not in
   * the cache yet. Each counts in the decision as a new fence of its node, so a pass while they are under way
   * neither decides them again nor gives their slots of maxConcurrentFences to other nodes.
   */
  private readonly creating = new Map<string, PendingCreate>();
  private readonly createQueue: FenceIntent[] = [];
  private readonly createsRunning = new Set<Promise<void>>();
  /**
   * NodeDown writes waiting, by node: the condition the latest pass wants on the node's pods, expanded to the pods (as
   * the cache then shows them) only when the drain comes to the node. One entry per node, not per pod: a mass silence
   * held by the storm guard queued every pod of thousands of nodes (3,700 × 30 at 5,000 nodes) faster than a loaded
   * apiserver took them, and the operator ran out of heap. The pods under way, and those just written, are by pod.
   */
  private nodeDownQueue = new Map<string, NodeDownChange["condition"]>();
  /** The pods of the node the drain is at that are still to be looked at (one node's, never more). */
  private nodeDownExpanding: { node: string; pods: readonly V1Pod[]; next: number; want: NodeDownChange["condition"] } | undefined;
  private readonly nodeDownBusy = new Set<string>();
  private readonly nodeDownWritten = new Map<string, { present: boolean; at: number }>();
  private nodeDownDrain: Promise<void> | undefined;
  /** FencingPolicy status writes waiting (the latest decision wins), and what the last write of each replaced and returned. */
  private readonly policyQueue = new Map<string, PolicyState>();
  private readonly policyWritten = new Map<string, { replaced: string | undefined; result: FencingPolicy }>();
  private policyDrain: Promise<void> | undefined;
  private readonly d: NodeHealthDeps;

  constructor(d: NodeHealthDeps) {
    this.d = d;
  }

  decide(): FleetDecision {
    const c = this.d.caches;
    const d = decideFleet({
      now: this.d.clock(),
      mono: performance.now(),
      sightings: this.sightings,
      nodes: c.nodes.list(),
      leases: { get: (n) => c.leaseOf(n) },
      leaseSilentMs: (n, l) => c.leaseSilentForMs(n, l),
      pods: c.podsByNode,
      pvcs: c.pvcsByKey(),
      pdbs: c.pdbs.list(),
      policies: c.policies.list(),
      fences: this.fencesWithCreating(),
      watchStalenessSeconds: c.heartbeatStalenessSeconds(),
      clusterMaxUnhealthyNodes: this.d.clusterMaxUnhealthyNodes,
      memo: this.memo,
      nodeDownFirstOnly: true,
      goneNodes: c.goneNodes(),
    });
    this.sightings = d.sightings;
    return d;
  }

  /** The cached NodeFences, with a new one in place for each that this controller is creating (see `creating`). */
  private fencesWithCreating(): Map<string, NodeFence> {
    const fences = new Map(this.d.caches.fences.list().map((f) => [f.metadata?.name ?? "", f] as const));
    for (const [node, c] of this.pendingCreates()) {
      const cached = fences.get(node);
      // The cache's own, unless it is none or the earlier episode's that this create replaces.
      const replaced = c.intent.replaces;
      if (cached && !(replaced && cached.metadata?.uid === replaced.metadata?.uid)) continue;
      fences.set(node, {
        apiVersion: API_VERSION,
        kind: "NodeFence",
        metadata: { name: node },
        spec: { nodeName: node, origin: "Automatic", policy: c.intent.policy },
      });
    }
    return fences;
  }

  /** `creating`, less the fences made that the cache now shows (or that it has not shown for CREATED_ECHO_MS). */
  private pendingCreates(): Map<string, PendingCreate> {
    const now = performance.now();
    for (const [node, c] of this.creating) {
      if (c.doneAt === undefined) continue;
      const uid = this.d.caches.fences.get(node)?.metadata?.uid;
      if ((uid !== undefined && uid === c.created?.metadata?.uid) || now - c.doneAt > CREATED_ECHO_MS) this.creating.delete(node);
    }
    return this.creating;
  }

  /**
   * Whether a Lease update is a routine renewal that changes no decision: its node was Healthy, Ready and not
   * lagging in the last decision, the holder and duration are those that decision saw, and the renewal comes
   * before the node would have started lagging. At 1,000 nodes these are 100 events a second, and each used to
   * re-run the whole fleet decision; they are skipped. Anything else (a node back from silence, a new holder, a
   * renewal after a lag, any Node, Pod or policy event) still runs it, and it runs anyway at every deadline and
   * at least every 5 s.
   */
  isRoutineRenewal(lease: V1Lease): boolean {
    const seen = this.routine.get(lease.metadata?.name ?? "");
    if (!seen || seen.pass !== this.pass) return false;
    if (lease.spec?.holderIdentity !== seen.holder || lease.spec?.leaseDurationSeconds !== seen.duration) return false;
    return this.d.clock().toMillis() < seen.quietUntil;
  }

  /**
   * The same for a Node update: a routine status write (nothing changed but the conditions' heartbeat times) of a
   * node the last decision found Healthy, Ready and not lagging, before it could have lagged. Every kubelet writes
   * its Node at least every 5 minutes (17 a second at 5,000 nodes), and each ran a whole pass: 51 passes a minute of
   * ~300 ms at 5,000 nodes / 150,000 pods, a third of a core. A new node, a deleted one, or any other change runs it.
   */
  isRoutineNodeUpdate(n: V1Node, old?: V1Node): boolean {
    if (!old) return false;
    const seen = this.routine.get(n.metadata?.name ?? "");
    if (!seen || seen.pass !== this.pass || this.d.clock().toMillis() >= seen.quietUntil) return false;
    return !nodeChangedBeyondHeartbeat(n, old);
  }

  /**
   * How long the last pass held the event loop (the decision and what is done with it before the first write). The
   * controller rests as long after each pass: at 5,000 nodes a pass takes ~0.5 s, and during a burst of failures the
   * fences' own writes asked for ~3 passes a second, which left the fences' round trips waiting behind them.
   */
  lastPassMs = 0;

  async reconcile(): Promise<{ requeueAfterMs: number }> {
    const t0 = performance.now();
    const d = this.decide();
    this.rememberRoutine(d);
    this.logDecisions(d);
    this.lastPassMs = performance.now() - t0;
    // Each object's write is isolated: one pod whose condition cannot be written never stops a fence. Writes go on
    // in the background: a pass that waited for its creates (two fresh reads and a create each, seconds under load)
    // held back every fence that fell due meanwhile; 50 nodes failing at once carry ~1,500 NodeDown writes.
    this.queueCreates(d.create);
    this.queueNodeDown(d.nodeDown);
    this.queuePolicyStatus(d.policies);
    // Time alone changes verdicts (a heartbeat going stale); look again then, and at least every 5 s for the guards.
    // Measured from now, not from the pass's start: a pass of 400 ms would otherwise wake 400 ms after the deadline.
    const wait = d.nextCheck ? Math.max(100, d.nextCheck.diff(this.d.clock()).as("milliseconds") + 50) : 5_000;
    const retry = Math.min(...[...this.failing.values()].map((f) => f.retryAt - Date.now()));
    return { requeueAfterMs: Math.max(100, Math.min(wait, 5_000, retry)) };
  }

  private queueCreates(intents: readonly FenceIntent[]): void {
    for (const intent of intents) {
      if (this.creating.has(intent.node)) continue; // already under way (the cache shows another fence of that node)
      this.creating.set(intent.node, { intent });
      this.createQueue.push(intent);
    }
    while (this.createQueue.length && this.createsRunning.size < FENCE_CREATES_IN_FLIGHT && !this.d.inflight?.stopping) {
      const intent = this.createQueue.shift()!;
      const entry = this.creating.get(intent.node)!;
      const run = this.isolated(`NodeFence ${intent.node}`, async () => {
        entry.created = await this.createFence(intent);
      }).finally(() => {
        this.createsRunning.delete(run);
        // Not created (a fresh read said no, a 409, a failure): the next pass decides again from the cache.
        if (!entry.created) this.creating.delete(intent.node);
        else entry.doneAt = performance.now();
        this.queueCreates([]);
      });
      this.createsRunning.add(run);
      this.d.inflight?.track(run);
    }
    // Shutting down: what never started is forgotten (the next leader decides again).
    if (this.d.inflight?.stopping) for (const i of this.createQueue.splice(0)) this.creating.delete(i.node);
  }

  /** Waits until the NodeFence creates decided so far have been made (or given up). */
  async fenceCreatesSettled(): Promise<void> {
    while (this.createsRunning.size) await Promise.all(this.createsRunning);
  }

  // Entries are updated in place and stamped with the pass, not made anew: 5,000 a pass at 5,000 nodes.
  private rememberRoutine(d: FleetDecision): void {
    const pass = ++this.pass;
    for (const x of d.decisions) {
      const h = x.health;
      if (h.state !== "Healthy" || h.ready !== "True" || h.lagging || h.silent || h.lastHeartbeatMs === undefined) continue;
      const seen = this.routine.get(x.node);
      // The same decision object as the last pass's: the memo reused it, so the node's Lease is the one it saw then.
      if (seen?.decision === x) {
        seen.pass = pass;
        continue;
      }
      const lease = this.d.caches.leaseOf(x.node);
      const holder = lease?.spec?.holderIdentity;
      const duration = lease?.spec?.leaseDurationSeconds;
      const quietUntil = h.lastHeartbeatMs + lagSecondsOf(lease, h.timeoutSeconds) * 1000;
      if (!seen) this.routine.set(x.node, { holder, duration, quietUntil, pass, decision: x });
      else {
        seen.holder = holder;
        seen.duration = duration;
        seen.quietUntil = quietUntil;
        seen.pass = pass;
        seen.decision = x;
      }
    }
    // Nodes deleted or no longer routine keep an old entry (which counts as none) until they are as many as the fleet.
    if (this.routine.size > 2 * d.decisions.length) for (const [n, r] of this.routine) if (r.pass !== pass) this.routine.delete(n);
  }

  /** Runs one object's write; a failure is logged and retried for that object alone, with backoff. */
  private async isolated(what: string, fn: () => Promise<void>): Promise<void> {
    const f = this.failing.get(what);
    if (f && Date.now() < f.retryAt) return;
    try {
      await fn();
      this.failing.delete(what);
    } catch (err) {
      const failures = (f?.failures ?? 0) + 1;
      const delay = Math.min(RETRY_MAX_MS, RETRY_BASE_MS * 2 ** (failures - 1));
      this.failing.set(what, { failures, retryAt: Date.now() + delay });
      // Forget entries of objects that went away, so the map cannot grow without bound.
      if (this.failing.size > 10_000) this.failing.clear();
      this.d.log.warn({ object: what, err: errorMessage(err), failures, retryInMs: delay }, `writing ${what} failed: ${errorMessage(err)}`);
    }
  }

  private logDecisions(d: FleetDecision): void {
    // Every node has a decision in every pass, so more entries than decisions are nodes that were deleted: forget
    // them (the map grew with every node ever seen; a node re-created under the same name is logged afresh).
    if (this.lastVerdict.size > d.decisions.length) {
      const live = new Set(d.decisions.map((x) => x.node));
      for (const n of this.lastVerdict.keys()) if (!live.has(n)) this.lastVerdict.delete(n);
    }
    for (const x of d.decisions) {
      const last = this.lastVerdict.get(x.node);
      if (last?.decision === x) continue;
      if (last?.verdict === x.verdict && last.message === x.message) {
        last.decision = x;
        continue;
      }
      this.lastVerdict.set(x.node, { verdict: x.verdict, message: x.message, decision: x });
      this.d.log.info(
        {
          node: x.node,
          verdict: x.verdict,
          policy: x.policy,
          health: x.health.state,
          ready: x.health.ready,
          lastHeartbeat: x.health.lastHeartbeat?.toISO(),
          partitionedSince: x.health.partitionedSince?.toISO(),
          bootID: x.health.bootID,
        },
        `decision for ${x.node}: ${x.verdict}: ${x.message}`,
      );
    }
  }

  /**
   * FencingPolicy status is written in the background, one policy at a time, the latest decision winning: during a
   * burst it changes on every pass (partitioned nodes, active fences), and a pass that waited for the write (and its
   * Events) held back every NodeFence falling due meanwhile.
   */
  private queuePolicyStatus(states: ReadonlyMap<string, PolicyState>): void {
    for (const p of this.d.caches.policies.list()) {
      const name = p.metadata?.name ?? "";
      const s = states.get(name);
      if (s) this.policyQueue.set(name, s);
    }
    if (this.policyQueue.size && !this.policyDrain && !this.d.inflight?.stopping) {
      const drain = this.drainPolicyStatus().finally(() => (this.policyDrain = undefined));
      this.policyDrain = drain;
      this.d.inflight?.track(drain);
    }
  }

  private async drainPolicyStatus(): Promise<void> {
    while (this.policyQueue.size && !this.d.inflight?.stopping) {
      const [name, s] = this.policyQueue.entries().next().value!;
      this.policyQueue.delete(name);
      const p = this.policyToWrite(name);
      if (p) await this.isolated(`FencingPolicy ${name}`, () => this.updatePolicyStatus(p, s));
    }
    this.policyQueue.clear();
  }

  /**
   * The policy as the next status write must start from: the cache's, unless the cache still shows the version this
   * controller's last write replaced (its watch event not in yet), in which case what that write returned. Writing
   * from the older one was a 409 on every back-to-back pass of a burst.
   */
  private policyToWrite(name: string): FencingPolicy | undefined {
    const cached = this.d.caches.policies.get(name);
    if (!cached) return undefined;
    const last = this.policyWritten.get(name);
    if (last && last.replaced === cached.metadata?.resourceVersion) return last.result;
    this.policyWritten.delete(name);
    return cached;
  }

  /** Waits until the FencingPolicy status writes queued so far have been made. */
  async policyStatusSettled(): Promise<void> {
    while (this.policyDrain) await this.policyDrain;
  }

  /** NodeDown writes still queued or under way, in pods (counted from the cache on each call: for tests and the bench). */
  nodeDownBacklog(): number {
    let n = this.nodeDownBusy.size;
    const x = this.nodeDownExpanding;
    if (x) for (let k = x.next; k < x.pods.length; k++) if (this.nodeDownWrite(x.pods[k]!, x.want)) n++;
    for (const [node, want] of this.nodeDownQueue) for (const p of this.nodeDownPodsOn(node, want)) if (this.nodeDownWrite(p, want)) n++;
    return n;
  }

  /** NodeDown entries this controller holds: queued nodes, and pods under way (bounded by nodes, not by pods). */
  nodeDownHeld(): { nodes: number; pods: number } {
    return { nodes: this.nodeDownQueue.size, pods: this.nodeDownBusy.size + (this.nodeDownExpanding?.pods.length ?? 0) };
  }

  /** Waits until the NodeDown writes queued so far have been made. */
  async nodeDownSettled(): Promise<void> {
    while (this.nodeDownDrain) await this.nodeDownDrain;
  }

  /** The latest pass wins: a node whose pods it would not change any more is dropped from the queue. */
  private queueNodeDown(changes: NodeDownChange[]): void {
    const now = performance.now();
    for (const [k, w] of this.nodeDownWritten) if (now - w.at > NODE_DOWN_ECHO_MS) this.nodeDownWritten.delete(k);
    const queue = new Map<string, NodeDownChange["condition"]>();
    // Every change of a node carries the same condition (the decision wants one per node).
    for (const ch of changes) if (!queue.has(ch.node)) queue.set(ch.node, ch.condition);
    // The node the drain is at goes on if this pass wants the same of it; otherwise it stops there.
    const x = this.nodeDownExpanding;
    if (x && queue.has(x.node) && sameCondition(queue.get(x.node), x.want)) queue.delete(x.node);
    else if (x) x.next = x.pods.length;
    this.nodeDownQueue = queue;
    if (queue.size && !this.nodeDownDrain && !this.d.inflight?.stopping) {
      const drain = this.drainNodeDown().finally(() => (this.nodeDownDrain = undefined));
      this.nodeDownDrain = drain;
      this.d.inflight?.track(drain);
    }
  }

  private nodeDownPodsOn(node: string, want: NodeDownChange["condition"]): readonly V1Pod[] {
    return want ? this.d.caches.podsByNode.on(node) : this.d.caches.podsByNode.markedOn(node);
  }

  /** The write a pod needs, unless it is under way, or just made and not in the cache yet (the pass after its watch
   * event decides again). */
  private nodeDownWrite(pod: V1Pod, want: NodeDownChange["condition"]): NodeDownChange | undefined {
    const ch = nodeDownChange(pod, want);
    if (!ch) return undefined;
    const key = nodeDownKey(ch);
    if (this.nodeDownBusy.has(key) || this.nodeDownWritten.get(key)?.present === !!want) return undefined;
    return ch;
  }

  /** The next pod write: from the node the drain is at, else from the next node queued (its pods read then). */
  private nextNodeDown(): NodeDownChange | undefined {
    for (;;) {
      const x = this.nodeDownExpanding;
      while (x && x.next < x.pods.length) {
        const ch = this.nodeDownWrite(x.pods[x.next++]!, x.want);
        if (ch) return ch;
      }
      this.nodeDownExpanding = undefined;
      const first = this.nodeDownQueue.entries().next();
      if (first.done || this.d.inflight?.stopping) return undefined;
      const [node, want] = first.value;
      this.nodeDownQueue.delete(node);
      this.nodeDownExpanding = { node, pods: this.nodeDownPodsOn(node, want), next: 0, want };
    }
  }

  private async drainNodeDown(): Promise<void> {
    while (this.nodeDownQueue.size && !this.d.inflight?.stopping) {
      // The NodeFences decided with them go first: both queue at the apiserver in one flow.
      await this.fenceCreatesSettled();
      const slot = async (n: number) => {
        for (;;) {
          const x = this.nodeDownExpanding;
          const left = this.nodeDownQueue.size > 0 || (x !== undefined && x.next < x.pods.length);
          // Nothing left: this slot waits while another write is under way (a pass meanwhile may queue more, and
          // one slot alone would take it), and ends with the last.
          if (!left && this.nodeDownBusy.size === 0) return;
          if (!left || n >= this.nodeDownSlots()) {
            await sleep(NODE_DOWN_SLOT_POLL_MS);
            continue;
          }
          const ch = this.nextNodeDown();
          if (!ch) {
            if (this.d.inflight?.stopping) return; // what is left is the next leader's
            continue; // nothing needed a write after all: the next turn waits or ends
          }
          const key = nodeDownKey(ch);
          this.nodeDownBusy.add(key);
          try {
            await this.isolated(`pod ${ch.namespace}/${ch.name}`, async () => {
              await this.applyNodeDown(ch);
              this.nodeDownWritten.set(key, { present: !!ch.condition, at: performance.now() });
            });
          } finally {
            this.nodeDownBusy.delete(key);
          }
        }
      };
      await Promise.all(Array.from({ length: NODE_DOWN_WRITES_IN_FLIGHT }, (_, n) => slot(n)));
    }
    this.nodeDownQueue.clear();
    this.nodeDownExpanding = undefined;
  }

  /** NodeDown writes allowed in flight now: fewer while a NodeFence is under way (not when shutting down). */
  nodeDownSlots(): number {
    if (this.d.inflight?.stopping) return NODE_DOWN_WRITES_IN_FLIGHT;
    const fencing =
      this.pendingCreates().size > 0 ||
      this.d.caches.fences.list().some((f) => !f.metadata?.deletionTimestamp && FENCING_PHASES.has(f.status?.phase ?? ""));
    return fencing ? NODE_DOWN_WRITES_WHILE_FENCING : NODE_DOWN_WRITES_IN_FLIGHT;
  }

  private async applyNodeDown(ch: NodeDownChange): Promise<void> {
    try {
      await this.d.kube.setPodCondition(ch.namespace, ch.name, ch.uid, NODE_DOWN, ch.condition);
    } catch (err) {
      if (isNotFound(err)) return;
      throw err;
    }
    const pod = ref("Pod", ch.name, ch.uid, ch.namespace);
    if (ch.condition) await this.d.events.record(pod, "Warning", "NodeDown", ch.condition.message);
    else await this.d.events.record(pod, "Normal", "NodeUp", "the pod's node is heartbeating again; NodeDown removed");
  }

  /** Creates the NodeFence if a fresh read still says so; returns it if this call created it. */
  private async createFence(intent: FenceIntent): Promise<NodeFence | undefined> {
    const { kube, log, events } = this.d;
    // Re-check from the apiserver, not the cache, right before acting.
    const policy = this.d.caches.policies.get(intent.policy);
    if (!policy) return undefined;
    const observed = (lease: V1Lease) => this.d.caches.leaseSilentForMs(intent.node, lease);
    const fresh = await kube.freshHealth(intent.node, policy.spec.detection, this.d.clock(), observed);
    const { health: h } = fresh;
    // A fence decided on a Node that is gone (decided on it as last seen): still due while the Node is still absent and
    // its Lease, if any, not renewed; a Node registered again, or a Lease renewed, is a live kubelet.
    const lastSeen = intent.gone ? this.d.caches.lastSeenNodes.get(intent.node) : undefined;
    const notDue = intent.gone ? goneNoLongerDue(fresh, lastSeen) : undefined;
    if (notDue) {
      log.info({ node: intent.node, policy: intent.policy }, `not fencing ${intent.node}: a fresh read shows ${notDue}`);
      return undefined;
    }
    const node = fresh.node ?? lastSeen;
    if (!node || (!h && !intent.gone)) return undefined;
    // Silence, or the node condition that made it due, still holds on the fresh read.
    const t = intent.trigger;
    if (h && h.state !== "Partitioned" && !(t && stillHeld(node, t))) {
      const why = t
        ? `its condition ${t.type}=${t.status} no longer holds (or not from a trusted writer) and it is ${h.state}`
        : `it is ${h.state}`;
      log.info({ node: intent.node, health: h.state, trigger: t }, `not fencing ${intent.node}: a fresh read shows ${why}`);
      return undefined;
    }
    // Never a node whose loss may break the control plane's quorum (labels read fresh; etcd members from the cache).
    const refused = quorumRefusal(node, this.d.caches.podsByNode.on(intent.node), policy);
    if (refused) {
      log.warn({ node: intent.node, policy: intent.policy }, refused);
      return undefined;
    }
    if (intent.replaces) {
      // Being deleted already (its finalizer runs): the next pass creates the new one once it is gone.
      if (intent.replaces.metadata?.deletionTimestamp) return undefined;
      try {
        await kube.deleteNodeFence(intent.replaces);
      } catch (err) {
        if (isConflict(err)) return undefined; // it changed since the cache saw it: decide again on the next pass
        if (!isNotFound(err)) throw err;
      }
    }
    this.d.leadership?.assertLeading(`create NodeFence ${intent.node}`);
    try {
      const created = await kube.createNodeFence(automaticFence(intent));
      log.warn({ node: intent.node, policy: intent.policy, reason: intent.reason }, `created NodeFence ${intent.node}`);
      // Best-effort (the recorder never throws), and not awaited: two round trips per fence held the pass, and with
      // it every fence falling due meanwhile. Shutdown waits for them.
      const recorded = Promise.all([
        events.record(
          ref("Node", intent.node, node.metadata?.uid),
          "Warning",
          "FenceRequested",
          `FencingPolicy ${intent.policy}: ${intent.reason}`,
        ),
        events.record(ref("NodeFence", intent.node, created.metadata?.uid, undefined, API_VERSION), "Normal", "Created", intent.reason),
      ]);
      void this.d.inflight?.track(recorded); // made first: `?.` would skip the writes, not only the tracking
      return created;
    } catch (err) {
      if (errorMessage(err).startsWith("409")) return undefined; // someone (an administrator, another replica) created it first
      throw err;
    }
  }

  private async updatePolicyStatus(p: FencingPolicy, s: PolicyState | undefined): Promise<void> {
    if (!s) return;
    const now = this.d.clock().toUTC().toISO({ suppressMilliseconds: true }) ?? "";
    const gen = p.metadata?.generation;
    const wouldFence = s.wouldFence.length ? `dry run: would fence ${nameList(s.wouldFence)}` : "";
    const missing = p.spec.escalation.flatMap((l) => l.agents.map((a) => a.name)).filter((n) => !this.d.caches.agents.get(n));
    let conditions = (p.status?.conditions ?? []) as Condition[];
    for (const c of [
      stormGuardCondition(s, gen),
      dryRunCondition(p, wouldFence, gen),
      readyCondition(p, s, missing, gen),
      quorumGuardCondition(p, s, gen),
      untrustedConditionsCondition(s, gen),
      missingNodesCondition(s, gen),
    ])
      conditions = setCondition(conditions, c, now);
    const status = {
      ...p.status,
      conditions,
      observedGeneration: gen,
      partitionedNodes: s.partitioned,
      activeFences: s.activeFences,
      heldConditions: s.held,
    };
    if (canonical(status) === canonical(p.status)) return;
    const updated = await this.d.kube.replaceStatus("fencingpolicies", { ...p, status } as FencingPolicy);
    this.policyWritten.set(p.metadata?.name ?? "", { replaced: p.metadata?.resourceVersion, result: updated });
    await this.announcePolicyStatus(p, updated, s, wouldFence);
  }

  /** The Events (and warnings) of a policy's status change: `p` as it was, `updated` as written. */
  private async announcePolicyStatus(p: FencingPolicy, updated: FencingPolicy, s: PolicyState, wouldFence: string): Promise<void> {
    const before = findCondition(p.status?.conditions as Condition[] | undefined, "StormGuard");
    const pref = ref("FencingPolicy", p.metadata?.name ?? "", p.metadata?.uid, undefined, API_VERSION);
    const after = findCondition(updated.status?.conditions as Condition[] | undefined, "StormGuard");
    if (after?.status === "True" && (before?.status !== "True" || before.message !== after.message)) {
      this.d.log.warn({ policy: p.metadata?.name, reason: after.reason }, `storm guard holds: ${after.message}`);
      await this.d.events.record(pref, "Warning", after.reason, `fencing held back: ${after.message}`);
    } else if (after?.status === "False" && before?.status === "True") {
      await this.d.events.record(pref, "Normal", "StormGuardReleased", "no guard holds fencing back any more");
    }
    if (wouldFence) await this.d.events.record(pref, "Normal", "WouldFence", wouldFence);
    // Each control-plane node newly refused: a Warning on the policy and on the Node.
    const refusedBefore = findCondition(p.status?.conditions as Condition[] | undefined, "QuorumGuard");
    for (const x of s.controlPlane) {
      if (refusedBefore?.status === "True" && refusedBefore.message.includes(x.message)) continue;
      this.d.log.warn({ policy: p.metadata?.name, node: x.node }, x.message);
      await this.d.events.record(pref, "Warning", "ControlPlaneNode", x.message);
      await this.d.events.record(
        ref("Node", x.node, this.d.caches.nodes.get(x.node)?.metadata?.uid),
        "Warning",
        "ControlPlaneNode",
        x.message,
      );
    }
    // Each trigger condition newly seen from an untrusted writer, and each trigger newly found to list none: a Warning
    // on the policy (and on the Node), never a fence.
    const untrustedBefore = findCondition(p.status?.conditions as Condition[] | undefined, UNTRUSTED_CONDITIONS);
    // Only those the condition names (a bounded list): a writer that sets a condition on every node must not make
    // thousands of Events, nor new ones on every pass for those past the list.
    for (const u of s.untrusted.slice(0, MAX_UNTRUSTED_LISTED)) {
      const m = untrustedMessage(u);
      if (untrustedBefore?.status === "True" && untrustedBefore.message.includes(m)) continue;
      this.d.log.warn({ policy: p.metadata?.name, node: u.node, condition: u.type, writers: u.writers }, m);
      await this.d.events.record(pref, "Warning", "UntrustedConditionWriter", m);
      await this.d.events.record(
        ref("Node", u.node, this.d.caches.nodes.get(u.node)?.metadata?.uid),
        "Warning",
        "UntrustedConditionWriter",
        `FencingPolicy ${p.metadata?.name}: ${m}`,
      );
    }
    for (const t of s.unlisted) {
      const m = unlistedMessage(t);
      if (untrustedBefore?.status === "True" && untrustedBefore.message.includes(m)) continue;
      await this.d.events.record(pref, "Warning", "NoTrustedWriters", m);
    }
    const missing = findCondition(updated.status?.conditions as Condition[] | undefined, "MissingNodes");
    const missingBefore = findCondition(p.status?.conditions as Condition[] | undefined, "MissingNodes");
    if (missing?.status === "True" && (missingBefore?.status !== "True" || missingBefore.message !== missing.message)) {
      this.d.log.warn({ policy: p.metadata?.name, nodes: s.missing?.map((m) => m.node) }, missing.message);
      await this.d.events.record(pref, "Warning", "GuardedPodsOnMissingNode", missing.message);
    }
    const ready = findCondition(updated.status?.conditions as Condition[] | undefined, "Ready");
    const readyBefore = findCondition(p.status?.conditions as Condition[] | undefined, "Ready");
    if (s.raisedTimeouts.length && ready?.message !== readyBefore?.message)
      await this.d.events.record(pref, "Warning", "HeartbeatTimeoutRaised", ready?.message ?? "");
  }
}

/** The automatic NodeFence of an intent: its reason, and the node condition that made it due, if one did. */
function automaticFence(intent: FenceIntent): NodeFence {
  const t = intent.trigger;
  return {
    apiVersion: API_VERSION,
    kind: "NodeFence",
    metadata: { name: intent.node, labels: { [ORIGIN_LABEL]: "automatic" } },
    spec: {
      nodeName: intent.node,
      origin: "Automatic",
      policy: intent.policy,
      reason: intent.reason.slice(0, 1024),
      ...(t
        ? {
            trigger: {
              nodeCondition: { type: t.type, status: t.status, forSeconds: t.forSeconds, trustedWriters: [...(t.trustedWriters ?? [])] },
            },
          }
        : {}),
    },
  };
}

/**
 * Why a fence decided for a Node that is gone is no longer due on the fresh read right before its create, or undefined
 * while it is: the Node still absent, remembered, and its Lease gone or not renewed (decide/gone-nodes.ts).
 */
function goneNoLongerDue(
  fresh: { node: V1Node | undefined; lease: V1Lease | undefined; leaseSilentMs: number | undefined },
  lastSeen: V1Node | undefined,
): string | undefined {
  if (fresh.node) return "its Node exists again";
  if (!lastSeen) return "this operator no longer remembers its Node";
  if (goneLeaseRenewed(fresh.lease, fresh.leaseSilentMs))
    return `its Lease is renewed (renewTime ${String(fresh.lease?.spec?.renewTime ?? "")}): a live kubelet`;
  return undefined;
}

/** Key-order-independent form of a status, so an unchanged status is never rewritten (each write wakes us again). */
function canonical(v: unknown): string {
  return JSON.stringify(v, (_k, x: unknown) =>
    x && typeof x === "object" && !Array.isArray(x) ? Object.fromEntries(Object.entries(x).sort(([a], [b]) => a.localeCompare(b))) : x,
  );
}

// A FencingPolicy's conditions, from one pass's decision (set in this order: StormGuard, DryRun, Ready, QuorumGuard,
// UntrustedConditions, MissingNodes).
type PolicyCondition = Omit<Condition, "lastTransitionTime">;

/** The StormGuard condition of a policy's state (exported: the decision's tests replay it from pass to pass). */
export function stormGuardCondition(s: PolicyState, gen: number | undefined): PolicyCondition {
  const hold = s.holds[0];
  return hold
    ? {
        type: "StormGuard",
        status: "True",
        reason: hold.reason,
        message: s.holds
          .map((h) => h.message)
          .join("; ")
          .slice(0, 32_000),
        observedGeneration: gen,
      }
    : { type: "StormGuard", status: "False", reason: "NoHold", message: "no guard holds fencing back", observedGeneration: gen };
}

function dryRunCondition(p: FencingPolicy, wouldFence: string, gen: number | undefined): PolicyCondition {
  return wouldFence
    ? {
        type: "DryRun",
        status: "True",
        reason: "WouldFence",
        message: wouldFence,
        observedGeneration: gen,
      }
    : { type: "DryRun", status: "False", reason: p.spec.dryRun ? "NothingToFence" : "Disabled", message: "", observedGeneration: gen };
}

function readyCondition(p: FencingPolicy, s: PolicyState, missing: string[], gen: number | undefined): PolicyCondition {
  return missing.length
    ? {
        type: "Ready",
        status: "False",
        reason: "AgentNotFound",
        message: `FenceAgent ${[...new Set(missing)].join(", ")} does not exist: create it or fix spec.escalation (fences under this policy fail)`,
        observedGeneration: gen,
      }
    : {
        type: "Ready",
        status: "True",
        reason: "Accepted",
        message: s.raisedTimeouts.length
          ? `policy is in effect; heartbeatTimeoutSeconds ${p.spec.detection?.heartbeatTimeoutSeconds} is shorter than two renewals of the node Lease of ${s.raisedTimeouts.length} node(s), which would look silent while healthy: using ${[...new Set(s.raisedTimeouts.map((r) => r.seconds))].join("/")} s for them (e.g. ${s.raisedTimeouts[0]!.node})`
          : "policy is in effect",
        observedGeneration: gen,
      };
}

function quorumGuardCondition(p: FencingPolicy, s: PolicyState, gen: number | undefined): PolicyCondition {
  const cp = s.controlPlane;
  return cp.length
    ? {
        type: "QuorumGuard",
        status: "True",
        reason: "ControlPlaneNode",
        message: cp
          .map((x) => x.message)
          .join("; ")
          .slice(0, 32_000),
        observedGeneration: gen,
      }
    : {
        type: "QuorumGuard",
        status: "False",
        reason: p.spec.allowControlPlane ? "ControlPlaneAllowed" : "NoControlPlaneNodeDue",
        message: p.spec.allowControlPlane
          ? "spec.allowControlPlane: control-plane and etcd nodes are fenced like the others"
          : "no control-plane or etcd node is due for fencing",
        observedGeneration: gen,
      };
}

/** True while a condition trigger is ignored: a condition set by a writer it does not trust, or a trigger trusting none. */
export const UNTRUSTED_CONDITIONS = "UntrustedConditions";

const writersOf = (u: UntrustedCondition) =>
  u.writers.length ? `set by ${u.untrusted.join(", ")}` : "no writer recorded in managedFields";

/** What the policy says of one ignored condition: names the node, the condition and the writers. */
export function untrustedMessage(u: UntrustedCondition): string {
  return `${u.type}=${u.status} on node ${u.node} ignored: ${writersOf(u)}, not in the trigger's trustedWriters`;
}

export function unlistedMessage(trigger: string): string {
  return `trigger ${trigger} ignored: it lists no trustedWriters (the field managers trusted to set the condition)`;
}

/** At most this many ignored conditions are named in the policy's condition (and get Events); the rest are counted. */
export const MAX_UNTRUSTED_LISTED = 50;

function untrustedConditionsCondition(s: PolicyState, gen: number | undefined): PolicyCondition {
  const more = s.untrusted.length - MAX_UNTRUSTED_LISTED;
  const messages = [
    ...s.unlisted.map(unlistedMessage),
    ...s.untrusted.slice(0, MAX_UNTRUSTED_LISTED).map(untrustedMessage),
    ...(more > 0 ? [`and ${more} more condition(s) set by untrusted writers`] : []),
  ];
  return messages.length
    ? {
        type: UNTRUSTED_CONDITIONS,
        status: "True",
        reason: s.unlisted.length ? "NoTrustedWriters" : "UntrustedWriter",
        message: messages.join("; ").slice(0, 32_000),
        observedGeneration: gen,
      }
    : {
        type: UNTRUSTED_CONDITIONS,
        status: "False",
        reason: "AllTrusted",
        message: "every trigger condition held is set by a trusted writer",
        observedGeneration: gen,
      };
}

/**
 * MissingNodes: True while guarded pods under the policy wait on a Node that no longer exists and that this operator
 * never saw (it was deleted before this replica started): nothing says which machine it was, so no fence starts on its
 * own, and the message gives the command that fences it once a person has checked the machine.
 */
export function missingNodesCondition(s: PolicyState, gen: number | undefined): PolicyCondition {
  const m = s.missing ?? [];
  if (!m.length)
    return {
      type: "MissingNodes",
      status: "False",
      reason: "NoneMissing",
      message: "no guarded pods wait on a Node that nothing fences on its own",
      observedGeneration: gen,
    };
  const each = m.map(
    (x) =>
      `Node ${x.node} (${x.pods} guarded pod(s)${x.remembered ? ", no FencingPolicy selects it as last seen" : ", never seen by this operator"}): once its machine is checked off, or to fence it through agents that need only its name (spec.nodes, {{ name }}): ${x.command}`,
  );
  const never = m.some((x) => !x.remembered);
  return {
    type: "MissingNodes",
    status: "True",
    reason: never ? "NodeNotRemembered" : "NodeNotSelected",
    message:
      `guarded pods wait on ${m.length} Node(s) that no longer exist and that no FencingPolicy fences on its own (never seen by this operator, which started after the deletion, or not selected by any policy's nodeSelector as last seen): ` +
      `a deleted Node proves nothing, so they stay until a person fences the machine; ${each.join("; ")}`.slice(0, 32_000),
    observedGeneration: gen,
  };
}
