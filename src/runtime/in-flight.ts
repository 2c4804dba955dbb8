// Work running outside a reconcile (e.g. an agent operation a controller started in the background)
// that shutdown must wait for before the leader Lease is released: a successor must not start while
// this replica may still power a machine off or write a step.
//
// Controllers get it as `deps.inflight`: `deps.inflight.track(promise)` registers the work; once
// `stopping` is true they should start nothing new. The operator's stop() waits for every tracked
// promise (and every reconcile in progress), bounded by --shutdown-grace-seconds, while still renewing
// the Lease; it releases the Lease only if all of it finished.

export class InFlight {
  private readonly pending = new Set<Promise<unknown>>();
  private closing = false;

  /** Registers work to wait for on shutdown; returns the same promise. */
  track<T>(work: Promise<T>): Promise<T> {
    const p: Promise<unknown> = work.then(
      () => undefined,
      () => undefined,
    );
    this.pending.add(p);
    void p.then(() => this.pending.delete(p));
    return work;
  }

  /** Work still running. */
  get size(): number {
    return this.pending.size;
  }

  /** Shutdown has begun: start no new background work. */
  get stopping(): boolean {
    return this.closing;
  }

  /** Marks shutdown and resolves once every tracked piece of work (including any tracked meanwhile) has ended. */
  async drain(): Promise<void> {
    this.closing = true;
    while (this.pending.size) await Promise.all([...this.pending]);
  }
}
