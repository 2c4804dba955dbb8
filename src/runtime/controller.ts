// Worker loops around a WorkQueue, the way controller-runtime runs a Reconciler: a failed reconcile is
// retried with backoff, a successful one resets the backoff and may ask to be run again later.
import { isDeepStrictEqual } from "node:util";
import type { KubernetesObject } from "@kubernetes/client-node";
import type { Informer } from "./informer.ts";
import { WorkQueue } from "./work-queue.ts";

export interface ReconcileResult {
  /** Reconcile this key again after this many ms (e.g. to re-check a deadline). */
  requeueAfterMs?: number;
}

/** The part of pino's Logger the runtime uses; a pino Logger fits as is. */
export interface Log {
  info(obj: object, msg: string): void;
  warn(obj: object, msg: string): void;
  error(obj: object, msg: string): void;
  debug(obj: object, msg: string): void;
}

export interface ControllerOptions {
  name: string;
  /** Concurrent reconciles; one key is never reconciled by two workers at once. Default 1. */
  workers?: number;
  queue?: WorkQueue;
  reconcile: (key: string) => Promise<ReconcileResult | void>;
  log: Log;
  /**
   * How long a worker rests after each reconcile before it takes its next key (read after the reconcile). Keys added
   * meanwhile wait and are taken as one. For a reconcile that holds the event loop for long (the fleet pass: ~0.5 s at
   * 5,000 nodes, run back to back during a burst of failures) so that everything else — every NodeFence's round
   * trips — still gets its turn. A rest ends sooner at the reconcile's own requeueAfterMs (a deadline it named) and
   * at `hurry()`.
   */
  restMs?: () => number;
}

export class Controller {
  readonly name: string;
  readonly queue: WorkQueue;
  private readonly o: ControllerOptions;
  private loops: Promise<void>[] = [];
  private readonly resting = new Set<() => void>();
  private skipRest = false;

  constructor(o: ControllerOptions) {
    this.o = o;
    this.name = o.name;
    this.queue = o.queue ?? new WorkQueue();
  }

  start(): void {
    if (this.loops.length) return;
    const workers = Math.max(1, this.o.workers ?? 1);
    for (let i = 0; i < workers; i++) this.loops.push(this.work());
  }

  /**
   * Ends the workers' rests now: for an event that may make something due at once (a node's Ready condition turning
   * Unknown makes its fence due), which must not wait behind a rest of up to a second. With no worker resting (a
   * reconcile under way, which may have read the cache before the event), the next rest is skipped instead: nodes
   * turn Unknown in batches, and the rest of a batch arrived during the pass the first one hurried, then waited out
   * its rest (0.4 s at 5,000 nodes; issue 12).
   */
  hurry(): void {
    if (this.resting.size === 0) this.skipRest = true;
    for (const wake of [...this.resting]) wake();
  }

  /** Shuts the queue down and waits for the reconciles in flight to finish. */
  async stop(): Promise<void> {
    this.queue.shutDown();
    this.hurry();
    await Promise.all(this.loops);
  }

  private async work(): Promise<void> {
    for (;;) {
      const key = await this.queue.get();
      if (key === undefined) return;
      let rest = Infinity;
      try {
        const result = await this.o.reconcile(key);
        this.queue.forget(key);
        if (result?.requeueAfterMs !== undefined) {
          this.queue.addAfter(key, result.requeueAfterMs);
          rest = result.requeueAfterMs;
        }
      } catch (err) {
        const message = err instanceof Error ? err.message : String(err);
        this.o.log.error(
          { err, controller: this.name, key, retries: this.queue.retries(key) },
          `${this.name}: reconcile of ${key} failed: ${message}`,
        );
        this.queue.addRateLimited(key);
      } finally {
        this.queue.done(key);
      }
      rest = Math.min(rest, this.o.restMs?.() ?? 0);
      if (this.skipRest) [this.skipRest, rest] = [false, 0];
      if (rest > 0) await this.rest(rest);
    }
  }

  private rest(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const wake = () => {
        clearTimeout(timer);
        this.resting.delete(wake);
        resolve();
      };
      const timer = setTimeout(wake, ms);
      this.resting.add(wake);
    });
  }
}

type Keys = string | readonly string[] | undefined;

/** Queues keyFn(obj) for every add, update and delete the informer sees. */
export function enqueueFrom<T extends KubernetesObject>(
  informer: Pick<Informer<T>, "on">,
  queue: WorkQueue,
  keyFn: (obj: T, old?: T) => Keys,
): void {
  const enqueue = (obj: T, old?: T) => {
    const keys = keyFn(obj, old);
    if (typeof keys === "string") queue.add(keys);
    else for (const key of keys ?? []) queue.add(key);
  };
  for (const verb of ["add", "update", "delete"] as const) informer.on(verb, enqueue);
}

/**
 * Whether an update changed more than the object's status (a new object, a deleted one, and any change of spec or
 * metadata other than resourceVersion count). A controller whose decisions never read another kind's status uses it
 * to ignore that kind's status writes.
 */
export function changedBeyondStatus(obj: KubernetesObject & { spec?: unknown }, old?: KubernetesObject & { spec?: unknown }): boolean {
  if (!old) return true;
  const meta = (o: KubernetesObject) => ({ ...o.metadata, resourceVersion: undefined, managedFields: undefined });
  return !isDeepStrictEqual(meta(obj), meta(old)) || !isDeepStrictEqual(obj.spec, old.spec);
}
