// A shared informer that keeps going: client-node's ListWatch (list, then watch from the list's
// resourceVersion; relist on 410; re-watch after its 30 s inactivity timeout) stops for good on any
// other error, e.g. while the apiserver restarts. This restarts it with capped exponential backoff and
// a watchdog that forces a relist when the watch has been silent for too long (a half-open connection).
import { ListWatch, Watch, type KubeConfig, type KubernetesListObject, type KubernetesObject } from "@kubernetes/client-node";

export interface InformerOptions<T extends KubernetesObject> {
  kc: KubeConfig;
  /** API path of the collection, e.g. /api/v1/pods or /apis/stockade.io/v1alpha1/nodefences. */
  path: string;
  list: () => Promise<KubernetesListObject<T>>;
  labelSelector?: string;
  fieldSelector?: string;
  /** Silence (no event, no reconnect) after which the watch is torn down and relisted. Default 120 s. */
  staleAfterMs?: number;
  /** Backoff of restarts after errors: first delay and cap. Defaults 250 ms and 30 s. */
  backoff?: { initialMs: number; maxMs: number };
  onError?: (err: unknown, restartInMs: number) => void;
}

type Handler<T> = (obj: T) => void;

export class Informer<T extends KubernetesObject> {
  private readonly lw: ListWatch<T>;
  private readonly o: Required<Pick<InformerOptions<T>, "staleAfterMs" | "backoff">> & InformerOptions<T>;
  private stopped = true;
  private delayMs = 0;
  private restartTimer: NodeJS.Timeout | undefined;
  private watchdog: NodeJS.Timeout | undefined;
  private lastActivity = Date.now();
  private synced = false;
  /** How many times the informer was restarted after an error or a stale watch. */
  restarts = 0;

  constructor(o: InformerOptions<T>) {
    this.o = { staleAfterMs: 120_000, backoff: { initialMs: 250, maxMs: 30_000 }, ...o };
    this.lw = new ListWatch<T>(o.path, new Watch(o.kc), o.list, false, o.labelSelector, o.fieldSelector);
    const touch = () => (this.lastActivity = Date.now());
    this.lw.on("connect", () => {
      touch();
      this.delayMs = 0;
    });
    for (const verb of ["add", "update", "delete"] as const) this.lw.on(verb, touch);
    this.lw.on("error", (err) => this.scheduleRestart(err));
  }

  on(verb: "add" | "update" | "delete", fn: Handler<T>): void {
    this.lw.on(verb, fn);
  }

  /** Milliseconds since this informer last saw an event or (re)connected; how stale its view may be. */
  staleForMs(now = Date.now()): number {
    return now - this.lastActivity;
  }

  get hasSynced(): boolean {
    return this.synced;
  }

  /** Starts listing and watching; resolves once the first list is in the cache. */
  async start(): Promise<void> {
    this.stopped = false;
    this.watchdog ??= setInterval(() => this.checkStale(), Math.min(this.o.staleAfterMs / 4, 10_000));
    this.watchdog.unref();
    await this.run();
  }

  stop(): void {
    this.stopped = true;
    clearTimeout(this.restartTimer);
    clearInterval(this.watchdog);
    this.watchdog = undefined;
    void this.lw.stop();
  }

  list(namespace?: string): readonly T[] {
    return this.lw.list(namespace);
  }

  get(name: string, namespace?: string): T | undefined {
    return this.lw.get(name, namespace);
  }

  private async run(): Promise<void> {
    try {
      await this.lw.start();
      this.lastActivity = Date.now();
      // ListWatch reports a failed list through the error callback and still resolves.
      if (!this.restartTimer) this.synced = true;
    } catch (err) {
      this.scheduleRestart(err);
    }
  }

  private scheduleRestart(err: unknown): void {
    if (this.stopped || this.restartTimer) return;
    this.delayMs = this.delayMs ? Math.min(this.delayMs * 2, this.o.backoff.maxMs) : this.o.backoff.initialMs;
    this.o.onError?.(err, this.delayMs);
    this.restartTimer = setTimeout(() => {
      this.restartTimer = undefined;
      if (this.stopped) return;
      this.restarts++;
      void this.run();
    }, this.delayMs);
  }

  private checkStale(): void {
    if (this.stopped || this.restartTimer) return;
    if (Date.now() - this.lastActivity > this.o.staleAfterMs) {
      this.lastActivity = Date.now();
      void this.lw.stop().then(() => {
        this.scheduleRestart(new Error(`watch on ${this.o.path} silent for ${this.o.staleAfterMs} ms`));
      });
    }
  }
}
