// Leader election on a coordination.k8s.io Lease, after client-go's leaderelection: only the leader
// runs controllers; a leader that cannot renew within renewDeadline stops leading (and the process
// exits, so it can never act on a view it no longer owns). Expiry is judged by when *we* last saw the
// Lease change, not by the holder's timestamps, so clock skew between replicas cannot shorten it.
import { CoordinationV1Api, V1MicroTime, type KubeConfig, type V1Lease } from "@kubernetes/client-node";
import { errorMessage, isConflict, isNotFound } from "../kube/api.ts";
import type { Log } from "./controller.ts";

export class NotLeaderError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "NotLeaderError";
  }
}

export interface Leadership {
  /** Throws NotLeaderError unless this replica surely holds the Lease right now. Called right before every destructive call. */
  assertLeading(action: string): void;
  /** The leader epoch: the Lease's leaseTransitions when this replica acquired it (0 without leader election). */
  readonly epoch: number;
}

/** Without leader election: the one replica leads while it runs. */
export const SOLE_LEADER: Leadership = { assertLeading: () => {}, epoch: 0 };

export interface LeaderElectionOptions {
  kc: KubeConfig;
  namespace: string;
  name: string;
  identity: string;
  leaseDurationMs?: number;
  renewDeadlineMs?: number;
  retryPeriodMs?: number;
  log: Log;
  onStartedLeading: () => void;
  onStoppedLeading: () => void;
}

export class LeaderElector {
  private readonly api: CoordinationV1Api;
  private readonly o: Required<Omit<LeaderElectionOptions, "kc">>;
  private observed: { record: string; at: number } | undefined;
  private timer: NodeJS.Timeout | undefined;
  private lastRenew = 0;
  private stopped = false;
  leading = false;
  /** The current holder as last observed ("" = none); set once the Lease has been read. */
  holder: string | undefined;

  constructor(o: LeaderElectionOptions) {
    this.api = o.kc.makeApiClient(CoordinationV1Api);
    this.o = { leaseDurationMs: 15_000, renewDeadlineMs: 10_000, retryPeriodMs: 2_000, ...o };
  }

  /** Leadership is known: we lead, or we have seen who does. */
  get known(): boolean {
    return this.holder !== undefined;
  }

  start(): void {
    const tick = async () => {
      if (this.stopped) return;
      try {
        await this.tryAcquireOrRenew();
      } catch (err) {
        const why = isNotFound(err)
          ? `namespace ${this.o.namespace} does not exist: create it (kubectl create namespace ${this.o.namespace}) or pass --leader-election-namespace`
          : errorMessage(err);
        this.o.log.warn({ lease: `${this.o.namespace}/${this.o.name}` }, `leader election: cannot take or renew the Lease: ${why}`);
      }
      if (this.leading && Date.now() - this.lastRenew > this.o.renewDeadlineMs) this.lose("could not renew the leader Lease in time");
      if (!this.stopped) this.timer = setTimeout(tick, this.o.retryPeriodMs);
    };
    void tick();
  }

  /** Steps down: releases the Lease (so a successor need not wait for it to expire) if we hold it. */
  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.timer);
    if (!this.leading) return;
    this.leading = false;
    try {
      const lease = await this.read();
      if (lease?.spec?.holderIdentity === this.o.identity) {
        lease.spec.holderIdentity = undefined;
        lease.spec.renewTime = undefined;
        lease.spec.leaseDurationSeconds = 1;
        await this.api.replaceNamespacedLease({ name: this.o.name, namespace: this.o.namespace, body: lease });
      }
    } catch {
      /* the Lease expires on its own */
    }
  }

  private lose(why: string): void {
    if (!this.leading) return;
    this.leading = false;
    this.o.log.error({ identity: this.o.identity }, `lost leadership: ${why}`);
    this.o.onStoppedLeading();
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
    const now = new V1MicroTime(Date.now());
    const seconds = Math.ceil(this.o.leaseDurationMs / 1000);
    const lease = await this.read();
    if (!lease) {
      try {
        await this.api.createNamespacedLease({
          namespace: this.o.namespace,
          body: {
            metadata: { name: this.o.name, namespace: this.o.namespace },
            spec: { holderIdentity: this.o.identity, leaseDurationSeconds: seconds, acquireTime: now, renewTime: now, leaseTransitions: 0 },
          },
        });
        this.acquired();
      } catch (err) {
        if (!isConflict(err)) throw err;
      }
      return;
    }
    const spec = lease.spec ?? {};
    const holder = spec.holderIdentity ?? "";
    const record = `${holder}|${spec.renewTime?.toISOString?.() ?? String(spec.renewTime)}|${lease.metadata?.resourceVersion}`;
    if (this.observed?.record !== record) this.observed = { record, at: Date.now() };
    this.holder = holder;
    const duration = (spec.leaseDurationSeconds ?? seconds) * 1000;
    const mine = holder === this.o.identity;
    if (holder && !mine && Date.now() - this.observed.at < duration) {
      if (this.leading) this.lose(`the Lease is held by ${holder}`);
      return;
    }
    const body: V1Lease = {
      ...lease,
      spec: {
        ...spec,
        holderIdentity: this.o.identity,
        leaseDurationSeconds: seconds,
        renewTime: now,
        acquireTime: mine ? spec.acquireTime : now,
        leaseTransitions: mine ? spec.leaseTransitions : (spec.leaseTransitions ?? 0) + 1,
      },
    };
    try {
      await this.api.replaceNamespacedLease({ name: this.o.name, namespace: this.o.namespace, body });
    } catch (err) {
      if (isConflict(err)) return; // someone else wrote first; look again next period
      throw err;
    }
    if (mine && this.leading) this.lastRenew = Date.now();
    else this.acquired();
  }

  private acquired(): void {
    this.holder = this.o.identity;
    this.lastRenew = Date.now();
    if (this.leading) return;
    this.leading = true;
    this.o.log.info({ identity: this.o.identity, lease: `${this.o.namespace}/${this.o.name}` }, "became leader");
    this.o.onStartedLeading();
  }
}
