// A keyed work queue in the spirit of client-go's workqueue: a key waits at most once (adds coalesce),
// a key is never handed to two workers at once (an add while it is processed marks it dirty and it is
// queued again on done), delayed adds keep the earliest deadline, and failed keys back off per key
// (exponential) and overall (token bucket), whichever is slower, like client-go's default controller
// rate limiter.

export type QueueMetric = "adds" | "depth" | "retries" | "queueLatencyMs" | "workDurationMs";

export interface WorkQueueOptions {
  /** Clock in ms; defaults to Date.now. */
  now?: () => number;
  /** Timer functions; the default uses setTimeout and unrefs, so delayed keys never keep the process up. */
  setTimer?: (fn: () => void, ms: number) => unknown;
  clearTimer?: (handle: unknown) => void;
  /** Per-key backoff: first delay and cap. Defaults 5 ms and 60 s. */
  baseDelayMs?: number;
  maxDelayMs?: number;
  /** Overall token bucket shared by all keys. Defaults 10 qps, burst 100. */
  qps?: number;
  burst?: number;
  /** Called for every metric event: counters ("adds", "retries") carry an increment, "depth" the current
   * depth, the latencies one observation (time from add to get, and from get to done). */
  onMetric?: (metric: QueueMetric, value: number) => void;
}

export interface WorkQueueStats {
  depth: number;
  processing: number;
  delayed: number;
  adds: number;
  retries: number;
  queueLatencyCount: number;
  queueLatencySumMs: number;
  queueLatencyMaxMs: number;
  workCount: number;
  workSumMs: number;
  workMaxMs: number;
}

type Waiter = (key: string | undefined) => void;

export class WorkQueue {
  private readonly now: () => number;
  private readonly setTimer: (fn: () => void, ms: number) => unknown;
  private readonly clearTimer: (handle: unknown) => void;
  private readonly o: Required<Pick<WorkQueueOptions, "baseDelayMs" | "maxDelayMs" | "qps" | "burst">>;
  private readonly onMetric: WorkQueueOptions["onMetric"];

  private readonly queue: string[] = [];
  /** Keys that need processing: queued, or being processed and added again meanwhile. */
  private readonly dirty = new Set<string>();
  private readonly processing = new Set<string>();
  private readonly addedAt = new Map<string, number>();
  private readonly startedAt = new Map<string, number>();
  private readonly waiters: Waiter[] = [];
  private readonly delayed = new Map<string, { at: number; handle: unknown }>();
  private readonly failures = new Map<string, number>();
  private tokens: number;
  private refilledAt: number;
  private shuttingDown = false;
  private adds = 0;
  private retried = 0;
  private readonly latency = { count: 0, sumMs: 0, maxMs: 0 };
  private readonly work = { count: 0, sumMs: 0, maxMs: 0 };

  constructor(o: WorkQueueOptions = {}) {
    this.now = o.now ?? Date.now;
    // Late-bound so node:test mock timers installed after construction still apply.
    this.setTimer =
      o.setTimer ??
      ((fn, ms) => {
        const t = setTimeout(fn, ms);
        t.unref();
        return t;
      });
    this.clearTimer = o.clearTimer ?? ((h) => clearTimeout(h as NodeJS.Timeout));
    this.o = { baseDelayMs: o.baseDelayMs ?? 5, maxDelayMs: o.maxDelayMs ?? 60_000, qps: o.qps ?? 10, burst: o.burst ?? 100 };
    this.onMetric = o.onMetric;
    this.tokens = this.o.burst;
    this.refilledAt = this.now();
  }

  add(key: string): void {
    if (this.shuttingDown) return;
    this.adds++;
    this.onMetric?.("adds", 1);
    if (this.dirty.has(key)) return;
    this.dirty.add(key);
    this.addedAt.set(key, this.now());
    if (!this.processing.has(key)) this.enqueue(key);
  }

  /** Adds the key after ms; if it is already scheduled earlier, the earlier deadline wins. */
  addAfter(key: string, ms: number): void {
    if (this.shuttingDown) return;
    if (ms <= 0) return this.add(key);
    const at = this.now() + ms;
    const pending = this.delayed.get(key);
    if (pending && pending.at <= at) return;
    if (pending) this.clearTimer(pending.handle);
    const handle = this.setTimer(() => {
      this.delayed.delete(key);
      this.add(key);
    }, ms);
    this.delayed.set(key, { at, handle });
  }

  /** Re-adds a failed key after max(per-key exponential backoff, overall token bucket delay). */
  addRateLimited(key: string): void {
    if (this.shuttingDown) return;
    this.retried++;
    this.onMetric?.("retries", 1);
    this.addAfter(key, Math.max(this.backoff(key), this.bucketDelay()));
  }

  /** Resets the key's backoff; call after it was processed successfully. */
  forget(key: string): void {
    this.failures.delete(key);
  }

  retries(key: string): number {
    return this.failures.get(key) ?? 0;
  }

  /** The next key to process (marking it as processing), or undefined once the queue is shut down. */
  get(): Promise<string | undefined> {
    if (this.shuttingDown) return Promise.resolve(undefined);
    const key = this.queue.shift();
    if (key !== undefined) {
      this.metricDepth();
      return Promise.resolve(this.take(key));
    }
    return new Promise((resolve) => this.waiters.push(resolve));
  }

  /** Marks the key as processed; if it was added meanwhile it is queued again. */
  done(key: string): void {
    if (!this.processing.delete(key)) return;
    const started = this.startedAt.get(key);
    this.startedAt.delete(key);
    if (started !== undefined) this.observe(this.work, "workDurationMs", this.now() - started);
    if (this.dirty.has(key) && !this.shuttingDown) this.enqueue(key);
  }

  /** Keys waiting to be processed (not counting those being processed or delayed). */
  len(): number {
    return this.queue.length;
  }

  get isShuttingDown(): boolean {
    return this.shuttingDown;
  }

  /** Stops handing out keys: pending and future get() resolve undefined; delayed adds are dropped. */
  shutDown(): void {
    this.shuttingDown = true;
    for (const { handle } of this.delayed.values()) this.clearTimer(handle);
    this.delayed.clear();
    for (const w of this.waiters.splice(0)) w(undefined);
  }

  stats(): WorkQueueStats {
    const [l, w] = [this.latency, this.work];
    return {
      depth: this.queue.length,
      processing: this.processing.size,
      delayed: this.delayed.size,
      adds: this.adds,
      retries: this.retried,
      queueLatencyCount: l.count,
      queueLatencySumMs: l.sumMs,
      queueLatencyMaxMs: l.maxMs,
      workCount: w.count,
      workSumMs: w.sumMs,
      workMaxMs: w.maxMs,
    };
  }

  private enqueue(key: string): void {
    const waiter = this.waiters.shift();
    if (waiter) return waiter(this.take(key));
    this.queue.push(key);
    this.metricDepth();
  }

  private take(key: string): string {
    this.dirty.delete(key);
    this.processing.add(key);
    const now = this.now();
    this.observe(this.latency, "queueLatencyMs", now - (this.addedAt.get(key) ?? now));
    this.addedAt.delete(key);
    this.startedAt.set(key, now);
    return key;
  }

  private backoff(key: string): number {
    const n = this.failures.get(key) ?? 0;
    this.failures.set(key, n + 1);
    return Math.min(this.o.baseDelayMs * 2 ** n, this.o.maxDelayMs);
  }

  /** Reserves a token; like golang.org/x/time/rate the balance may go negative, which is the wait. */
  private bucketDelay(): number {
    const now = this.now();
    this.tokens = Math.min(this.o.burst, this.tokens + ((now - this.refilledAt) * this.o.qps) / 1000);
    this.refilledAt = now;
    this.tokens -= 1;
    return this.tokens >= 0 ? 0 : (-this.tokens / this.o.qps) * 1000;
  }

  private observe(h: { count: number; sumMs: number; maxMs: number }, metric: QueueMetric, ms: number): void {
    h.count++;
    h.sumMs += ms;
    h.maxMs = Math.max(h.maxMs, ms);
    this.onMetric?.(metric, ms);
  }

  private metricDepth(): void {
    this.onMetric?.("depth", this.queue.length);
  }
}
