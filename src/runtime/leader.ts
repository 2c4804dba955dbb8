// Leader election on a coordination.k8s.io Lease, after client-go's leaderelection, made safe against
// requests that hang and clocks that jump. Only the leader runs controllers, and every destructive call
// is preceded by Leadership.assertLeading().
//
// Timing (defaults leaseDuration 15 s, renewDeadline 10 s, retryPeriod 2 s; flags --leader-elect-*):
// - S = when our last successful renew (or acquire) request was SENT. The apiserver wrote that record
//   after S, so no other replica can have seen it before S; a replica takes the Lease over only after
//   seeing the same record unchanged for leaseDuration on its own clock, i.e. not before S + leaseDuration.
// - We lead until S + renewDeadline, judged on the monotonic clock and the wall clock, whichever says
//   more time has passed (a wall clock set back cannot extend leadership; a suspended process whose
//   monotonic clock stopped cannot either). A timer drops leadership at that instant even while a
//   request hangs, and onStoppedLeading is called at once (main exits).
// - Every elector request carries a deadline no later than S + renewDeadline (kube/deadline.ts).
// - assertLeading() refuses once less than retryPeriod of leadership is left: a destructive call that
//   passed it has at least leaseDuration - renewDeadline + retryPeriod (7 s) before any other replica
//   can possibly act. Controllers' API writes get a deadline within that window too (operator/leadership.ts).
// - Another holder's Lease expires leaseDuration after *we* first saw its current record (monotonic
//   clock, read time = when the read returned): clock skew between replicas cannot shorten it, and a
//   suspended follower only waits longer.
// The epoch is the Lease's leaseTransitions when this replica acquired it; every acquisition bumps it.
import { CoordinationV1Api, V1MicroTime, type KubeConfig, type V1Lease } from "@kubernetes/client-node";
import { errorMessage, isConflict, isNotFound } from "../kube/api.ts";
import { withRequestDeadline } from "../kube/deadline.ts";
import type { Log } from "./controller.ts";
import {
  DEFAULT_TIMING,
  actMarginMs,
  decide,
  elapsedAtLeast,
  leadershipLeftMs,
  mayAct,
  observe,
  recordOf,
  systemNow,
  timingProblem,
  type ElectionTiming,
  type Instant,
  type Observation,
} from "./leader-timing.ts";

export class NotLeaderError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "NotLeaderError";
  }
}

export interface Leadership {
  /** Throws NotLeaderError unless this replica surely holds the Lease right now (monotonic clock, with a safety margin before the Lease could expire for others). Called right before every destructive call. */
  assertLeading(action: string): void;
  /** The leader epoch: the Lease's leaseTransitions when this replica acquired it (0 without leader election). Written into NodeFence status with each step. */
  readonly epoch: number;
}

/** A Leadership that never refuses: for code run outside an operator (tests, tools). */
export const SOLE_LEADER: Leadership = { assertLeading: () => {}, epoch: 0 };

/** Without leader election: the only replica, leading while the operator runs. */
export class SoleLeadership implements Leadership {
  readonly epoch = 0;
  private running = true;

  assertLeading(action: string): void {
    if (!this.running) throw new NotLeaderError(`the operator has stopped: not going to ${action}`);
  }

  stop(): void {
    this.running = false;
  }
}

export interface LeaderElectionOptions {
  kc: KubeConfig;
  namespace: string;
  name: string;
  /** Unique per process: two processes with one identity would both think they hold the Lease. */
  identity: string;
  timing?: Partial<ElectionTiming>;
  log: Log;
  onStartedLeading: () => void;
  /** Leadership was lost (not released): the process must stop acting at once. */
  onStoppedLeading: () => void;
  /**
   * Each request of the elector answered (ok, a conflict included) or failed: asked every retry period, the elector
   * is how the operator knows the apiserver and etcd could serve writes (kube/sight.ts).
   */
  onAnswer?: (ok: boolean, why: string) => void;
  /** Clock, for tests; default performance.now() and Date.now(). */
  now?: () => Instant;
  /**
   * The lowest epoch this replica may take (e.g. one more than any epoch recorded in NodeFence statuses): a Lease
   * deleted and created again restarts leaseTransitions at 0, and epochs must never go backwards.
   */
  minEpoch?: () => number;
}

type State = "following" | "leading" | "lost" | "stopped";

export class LeaderElector implements Leadership {
  private readonly api: CoordinationV1Api;
  private readonly o: LeaderElectionOptions;
  readonly timing: ElectionTiming;
  private readonly now: () => Instant;
  private state: State = "following";
  private renewSentAt: Instant | undefined;
  private observation: Observation | undefined;
  private tickTimer: NodeJS.Timeout | undefined;
  private expiryTimer: NodeJS.Timeout | undefined;
  private ticking: Promise<void> | undefined;
  private leaderEpoch = 0;
  /** The current holder as last observed ("" = none); set once the Lease has been read. */
  holder: string | undefined;

  constructor(o: LeaderElectionOptions) {
    this.o = o;
    this.timing = { ...DEFAULT_TIMING, ...o.timing };
    const problem = timingProblem(this.timing);
    if (problem) throw new Error(`leader election: ${problem}`);
    this.now = o.now ?? systemNow;
    // Every request of the elector carries a deadline: while leading, the end of leadership; else renewDeadline.
    this.api = withRequestDeadline(o.kc, () => this.requestBudgetMs()).makeApiClient(CoordinationV1Api);
  }

  get leading(): boolean {
    return this.state === "leading";
  }

  /** Leadership is known: we lead, or we have seen who does. */
  get known(): boolean {
    return this.holder !== undefined;
  }

  get epoch(): number {
    return this.leaderEpoch;
  }

  /** Milliseconds of leadership left (≤ 0 when not leading). */
  remainingMs(): number {
    return this.state === "leading" && this.renewSentAt ? leadershipLeftMs(this.renewSentAt, this.now(), this.timing) : 0;
  }

  assertLeading(action: string): void {
    const lease = `${this.o.namespace}/${this.o.name}`;
    if (this.state !== "leading" || !this.renewSentAt)
      throw new NotLeaderError(`${this.o.identity} does not hold the leader Lease ${lease} (${this.state}): not going to ${action}`);
    const left = leadershipLeftMs(this.renewSentAt, this.now(), this.timing);
    if (left <= actMarginMs(this.timing))
      throw new NotLeaderError(
        `${this.o.identity} has not renewed the leader Lease ${lease} for ${((this.timing.renewDeadlineMs - left) / 1000).toFixed(1)} s: not going to ${action}`,
      );
  }

  start(): void {
    if (this.state !== "following" || this.tickTimer || this.ticking) return;
    this.schedule(0);
  }

  /**
   * Steps down after the work in flight is done: stops renewing, waits for a renewal in flight, and
   * gives the Lease up (holder cleared) so a successor need not wait for it to expire.
   */
  async release(): Promise<void> {
    // Not after leadership was lost: work started before the loss may still be running; let the Lease expire.
    const active = this.state === "leading" || this.state === "following";
    await this.halt();
    // Also when an acquisition answered while we were stopping: the record names us either way.
    if (!active || this.holder !== this.o.identity) return;
    try {
      const lease = await this.read();
      if (lease?.spec?.holderIdentity === this.o.identity) {
        lease.spec.holderIdentity = undefined;
        lease.spec.renewTime = undefined;
        lease.spec.leaseDurationSeconds = 1;
        await this.api.replaceNamespacedLease({ name: this.o.name, namespace: this.o.namespace, body: lease });
        this.o.log.info({ identity: this.o.identity, epoch: this.leaderEpoch }, "released the leader Lease");
      }
    } catch (err) {
      this.o.log.warn({ identity: this.o.identity }, `could not release the leader Lease (it expires on its own): ${errorMessage(err)}`);
    }
  }

  /** Stops renewing without giving the Lease up (work may still be in flight): it expires on its own. */
  async abandon(): Promise<void> {
    await this.halt();
  }

  /** Stops the loop and leadership (assertLeading refuses from now on) and waits for a request in flight. */
  private async halt(): Promise<void> {
    if (this.state === "following" || this.state === "leading") this.state = "stopped";
    clearTimeout(this.tickTimer);
    clearTimeout(this.expiryTimer);
    this.tickTimer = undefined;
    await this.ticking;
  }

  private requestBudgetMs(): number {
    if (this.state === "leading" && this.renewSentAt) return leadershipLeftMs(this.renewSentAt, this.now(), this.timing);
    return this.timing.renewDeadlineMs;
  }

  private schedule(ms: number): void {
    this.tickTimer = setTimeout(() => {
      this.tickTimer = undefined;
      this.ticking = this.tick().finally(() => {
        this.ticking = undefined;
        if (this.state === "following" || this.state === "leading") this.schedule(this.timing.retryPeriodMs);
      });
    }, ms);
  }

  private async tick(): Promise<void> {
    try {
      await this.tryAcquireOrRenew();
    } catch (err) {
      if (this.state !== "following" && this.state !== "leading") return;
      this.o.onAnswer?.(false, `leader election: ${errorMessage(err)}`);
      const why = isNotFound(err)
        ? `namespace ${this.o.namespace} does not exist: create it (kubectl create namespace ${this.o.namespace}) or pass --leader-election-namespace`
        : errorMessage(err);
      this.o.log.warn(
        { lease: `${this.o.namespace}/${this.o.name}`, leaderForMs: Math.round(this.remainingMs()) },
        `leader election: cannot ${this.leading ? "renew" : "take"} the Lease: ${why}`,
      );
    }
  }

  private async read(): Promise<V1Lease | undefined> {
    try {
      return await this.api.readNamespacedLease({ name: this.o.name, namespace: this.o.namespace });
    } catch (err) {
      if (isNotFound(err)) return undefined;
      throw err;
    }
  }

  private async tryAcquireOrRenew(): Promise<void> {
    const lease = await this.read();
    if (this.state !== "following" && this.state !== "leading") return;
    this.o.onAnswer?.(true, "");
    // Deleted under us: another replica may be creating it right now.
    if (!lease && this.leading) return this.lose("the Lease was deleted");
    const now = this.now();
    const record = lease ? recordOf(lease) : undefined;
    if (record) {
      this.observation = observe(this.observation, record, now);
      this.holder = record.holder;
    }
    const d = decide({ record, observation: this.observation, identity: this.o.identity, leading: this.leading, now, timing: this.timing });
    if (d.kind === "wait") {
      if (this.leading) this.lose(`the Lease is held by ${d.holder}`);
      return;
    }
    const seconds = Math.ceil(this.timing.leaseDurationMs / 1000);
    const wall = new V1MicroTime(Date.now());
    const sentAt = this.now();
    try {
      if (d.kind === "create") {
        await this.api.createNamespacedLease({
          namespace: this.o.namespace,
          body: {
            metadata: { name: this.o.name, namespace: this.o.namespace },
            spec: {
              holderIdentity: this.o.identity,
              leaseDurationSeconds: seconds,
              acquireTime: wall,
              renewTime: wall,
              leaseTransitions: this.o.minEpoch?.() ?? 0,
            },
          },
        });
        return this.won(sentAt, this.o.minEpoch?.() ?? 0);
      }
      const spec = lease!.spec ?? {};
      const transitions = d.kind === "renew" ? (spec.leaseTransitions ?? 0) : Math.max(d.transitions, this.o.minEpoch?.() ?? 0);
      const body: V1Lease = {
        ...lease,
        spec: {
          ...spec,
          holderIdentity: this.o.identity,
          leaseDurationSeconds: seconds,
          renewTime: wall,
          acquireTime: d.kind === "renew" ? spec.acquireTime : wall,
          leaseTransitions: transitions,
        },
      };
      await this.api.replaceNamespacedLease({ name: this.o.name, namespace: this.o.namespace, body });
      if (d.kind === "renew") this.renewed(sentAt);
      else this.won(sentAt, transitions);
    } catch (err) {
      if (isConflict(err)) return; // someone else wrote first; look again next period
      throw err;
    }
  }

  private renewed(sentAt: Instant): void {
    if (this.state !== "leading") return;
    if (!this.renewSentAt || sentAt.mono > this.renewSentAt.mono) this.renewSentAt = sentAt;
    this.armExpiry();
  }

  private won(sentAt: Instant, epoch: number): void {
    this.holder = this.o.identity;
    if (this.state !== "following") return; // stopped meanwhile: release() gives it back
    // An acquisition that took (almost) the whole renew deadline to answer is not one to act on.
    if (!mayAct(sentAt, this.now(), this.timing)) return;
    this.state = "leading";
    this.renewSentAt = sentAt;
    this.leaderEpoch = epoch;
    this.armExpiry();
    this.o.log.info({ identity: this.o.identity, lease: `${this.o.namespace}/${this.o.name}`, epoch }, "became leader");
    this.o.onStartedLeading();
  }

  /** Drops leadership at S + renewDeadline even while a renewal hangs; re-checked at least every second (wall-clock jumps). */
  private armExpiry(): void {
    clearTimeout(this.expiryTimer);
    const left = this.remainingMs();
    if (left <= 0) return this.lose(`could not renew the Lease within the renew deadline (${this.timing.renewDeadlineMs / 1000} s)`);
    this.expiryTimer = setTimeout(() => this.armExpiry(), Math.min(left, 1_000));
  }

  private lose(why: string): void {
    if (this.state !== "leading") return;
    this.state = "lost";
    clearTimeout(this.tickTimer);
    clearTimeout(this.expiryTimer);
    const since = this.renewSentAt ? elapsedAtLeast(this.renewSentAt, this.now()) : 0;
    this.o.log.error(
      { identity: this.o.identity, epoch: this.leaderEpoch, lastRenewSentMsAgo: Math.round(since) },
      `lost leadership: ${why}`,
    );
    this.o.onStoppedLeading();
  }
}
