// A shared informer that keeps going and knows how fresh it is: list, then watch from the list's
// resourceVersion (with bookmarks), keeping a cache and calling handlers for every add, update and
// delete; re-watch when a watch ends, relist on 410 Gone, and back off on errors.
//
// Its own loop rather than client-node's ListWatch, which emits `connect` at the *start* of every
// attempt (so "activity" never stopped and the backoff never grew: ~4 restarts a second per informer
// against a refused watch), stops for good on errors, and cannot abort a watch whose connect hangs.
//
// Freshness (`staleForMs`, which feeds the storm guard): only proof that the view is current counts —
// a successful list, an event (bookmarks included) delivered by the watch, or the apiserver answering
// a watch request with 200 (from then on it streams everything after our resourceVersion). A request
// sent, refused or hanging is no proof, so a dead watch makes the staleness grow. A watch silent for
// staleAfterMs (a half-open connection) is abandoned and the informer relists.
//
// Backoff after failures: initialMs, doubled each failure up to maxMs; reset only once the watch has
// proven healthy (an event delivered, or a watch that stayed up HEALTHY_AFTER_MS). A successful list
// alone does not reset it: RBAC that allows list but not watch must not become a relist storm.
//
// The first list may instead be streamed (`streamingList`, Kubernetes' WatchList): one watch that sends the
// current state as ADDED events, a bookmark marked k8s.io/initial-events-end, then the changes. Nothing of it
// reaches the cache or the handlers before that bookmark, so a stream cut halfway is like a failed list. No pages
// held whole in memory and no gzip of each page by the apiserver (docs/developer/scale.md: 150,000 pods streamed in 99 s /
// 370 MiB, paged in 128 s / 448 MiB). A server that refuses it (400/422: the gate is off, as in 1.33) or ends the
// stream without the bookmark (one that ignores the parameter) makes the informer list in pages from then on.
import { performance } from "node:perf_hooks";
import {
  Watch,
  type KubeConfig,
  type KubernetesListObject,
  type KubernetesObject,
  type V1ManagedFieldsEntry,
} from "@kubernetes/client-node";

export interface InformerOptions<T extends KubernetesObject> {
  kc: KubeConfig;
  /** API path of the collection, e.g. /api/v1/pods or /apis/stockade.io/v1alpha1/nodefences. */
  path: string;
  /**
   * One page of the collection. The informer asks for pages of LIST_PAGE_SIZE and follows `_continue`, so that a
   * first list of 150,000 pods is never one response held whole in memory; a list that ignores the arguments is
   * read as one page.
   */
  list: (page: { limit: number; _continue?: string }) => Promise<KubernetesListObject<T>>;
  labelSelector?: string;
  fieldSelector?: string;
  /** Time without proof of freshness after which the watch is abandoned and the informer relists. Default 120 s. */
  staleAfterMs?: number;
  /** Backoff of restarts after errors: first delay and cap. Defaults 250 ms and 30 s. */
  backoff?: { initialMs: number; maxMs: number };
  onError?: (err: unknown, restartInMs: number) => void;
  /** What the cache keeps of each object (e.g. only the fields the decisions read); handlers see the result too. */
  transform?: (o: T) => T;
  /**
   * What the cache keeps of metadata.managedFields (who wrote which field), from the object as listed or watched;
   * default nothing. Given before `transform` runs.
   */
  managedFields?: (entries: V1ManagedFieldsEntry[]) => V1ManagedFieldsEntry[] | undefined;
  /** Stream the first list (sendInitialEvents) instead of paging it; `list` stays the fallback. Default false. */
  streamingList?: boolean;
  /**
   * Told when the view stops being current (a list or watch failed, a watch went stale, 410 Gone) and when it is
   * again (the next proof: a list, or a watch answered). A watch that ends normally and is taken up again from its
   * resourceVersion is no gap: it misses nothing. Heartbeat silence counts only over time seen (kube/sight.ts).
   */
  onSight?: (seeing: boolean, why: string) => void;
}

type Verb = "add" | "update" | "delete";
/** `old`: on an update, the object the cache held before. */
type Handler<T> = (obj: T, old?: T) => void;
type WatchEnd = { kind: "closed" } | { kind: "gone" } | { kind: "failed"; err: unknown; streamUnsupported?: boolean };

/** The annotation of the bookmark that ends a streamed list's initial state. */
export const INITIAL_EVENTS_END = "k8s.io/initial-events-end";

/** Objects per page of a list (client-go's pager uses 500 too). */
export const LIST_PAGE_SIZE = 500;

/** A watch that stayed up this long has proven healthy: the next failure starts the backoff over. */
const HEALTHY_AFTER_MS = 10_000;

const now = () => performance.now();
const keyOf = (o: KubernetesObject) => `${o.metadata?.namespace ?? ""}/${o.metadata?.name ?? ""}`;
const statusOf = (err: unknown) =>
  (err as { statusCode?: number; code?: number } | undefined)?.statusCode ?? (err as { code?: unknown })?.code;

export class Informer<T extends KubernetesObject> {
  readonly path: string;
  private readonly o: Required<Pick<InformerOptions<T>, "staleAfterMs" | "backoff">> & InformerOptions<T>;
  private readonly watcher: Watch;
  private readonly objects = new Map<string, T>();
  private readonly handlers: Record<Verb, Handler<T>[]> = { add: [], update: [], delete: [] };
  /** Secondary indexes (client-go's Indexer): name → value → cache key → object, kept with the cache. */
  private readonly indexes = new Map<string, { of: (o: T) => string | undefined; byValue: Map<string, Map<string, T>> }>();
  private rev = 0;
  private resourceVersion = "";
  /** Generation of the loop; stop() and a forced relist bump it, and every callback of an older one is ignored. */
  private gen = 0;
  private running = false;
  private phase: "listing" | "watching" | "waiting" = "waiting";
  private current: AbortController | undefined;
  private wake: (() => void) | undefined;
  private delayMs = 0;
  private lastProof = now();
  private lastKick = now();
  private watchdog: NodeJS.Timeout | undefined;
  private synced = false;
  /** Why the view is not current since the last failure (undefined: no gap since the last proof). */
  private blind: string | undefined;
  private syncWaiters: (() => void)[] = [];
  /** How many times the informer was restarted after an error or a stale watch. */
  restarts = 0;
  /** Whether the next first list is streamed; false once the server has shown it cannot. */
  streaming: boolean;

  constructor(o: InformerOptions<T>) {
    this.o = { staleAfterMs: 120_000, backoff: { initialMs: 250, maxMs: 30_000 }, ...o };
    this.path = o.path;
    this.streaming = o.streamingList ?? false;
    this.watcher = new Watch(o.kc);
  }

  on(verb: Verb, fn: Handler<T>): void {
    this.handlers[verb].push(fn);
  }

  /** Milliseconds since the last proof that this informer's view was current (monotonic clock). */
  staleForMs(): number {
    return now() - this.lastProof;
  }

  /** The first list has completed: the cache holds the whole collection. */
  get hasSynced(): boolean {
    return this.synced;
  }

  /** Starts listing and watching; resolves once the first list is in the cache (or the informer is stopped). */
  start(): Promise<void> {
    if (!this.running) {
      this.running = true;
      this.lastProof = this.lastKick = now();
      this.watchdog = setInterval(() => this.checkStale(), Math.min(this.o.staleAfterMs / 4, 5_000));
      this.watchdog.unref();
      void this.loop(++this.gen);
    }
    return this.waitForSync();
  }

  waitForSync(): Promise<void> {
    return this.synced || !this.running ? Promise.resolve() : new Promise((resolve) => this.syncWaiters.push(resolve));
  }

  stop(): void {
    this.running = false;
    this.gen++;
    clearInterval(this.watchdog);
    this.watchdog = undefined;
    this.current?.abort();
    this.current = undefined;
    this.wake?.();
    for (const w of this.syncWaiters.splice(0)) w();
  }

  list(namespace?: string): readonly T[] {
    const all = [...this.objects.values()];
    return namespace === undefined ? all : all.filter((o) => (o.metadata?.namespace ?? "") === namespace);
  }

  get(name: string, namespace?: string): T | undefined {
    return this.objects.get(`${namespace ?? ""}/${name}`);
  }

  /**
   * Indexes the cache by `of` (e.g. a pod's node), so that `byIndex` finds the objects with one value without a scan of
   * the whole cache: 150,000 pods scanned for one node's took 21 ms, each time a NodeFence was decided (issue 12).
   */
  addIndex(name: string, of: (o: T) => string | undefined): void {
    if (this.indexes.has(name)) throw new Error(`informer ${this.path} already has an index ${name}`);
    this.indexes.set(name, { of, byValue: new Map() });
    for (const [k, o] of this.objects) this.index(k, o);
  }

  /** The cached objects whose index `name` has this value. */
  byIndex(name: string, value: string): T[] {
    return [...(this.bucket(name, value)?.values() ?? [])];
  }

  /** The values the index `name` has objects for. */
  indexValues(name: string): string[] {
    const ix = this.indexes.get(name);
    if (!ix) throw new Error(`informer ${this.path} has no index ${name}`);
    return [...ix.byValue.keys()];
  }

  /** How many cached objects the index `name` has with this value, without making an array of them. */
  countByIndex(name: string, value: string): number {
    return this.bucket(name, value)?.size ?? 0;
  }

  /**
   * One cached object whose index `name` has this value (the first indexed), for an index with one object per value:
   * no array is made. The fleet pass looks up every node's Lease on each pass, 5,000 a pass at 5,000 nodes; by the
   * node's own name string (whose hash V8 keeps) it costs a fifth of `get`, which builds and hashes a new key each time.
   */
  oneByIndex(name: string, value: string): T | undefined {
    return this.bucket(name, value)?.values().next().value;
  }

  private bucket(name: string, value: string): Map<string, T> | undefined {
    const ix = this.indexes.get(name);
    if (!ix) throw new Error(`informer ${this.path} has no index ${name}`);
    return ix.byValue.get(value);
  }

  /** Changes whenever the cache does: what was computed from it at one revision holds until the next. */
  get revision(): number {
    return this.rev;
  }

  private index(k: string, o: T): void {
    for (const ix of this.indexes.values()) {
      const v = ix.of(o);
      if (v === undefined) continue;
      let bucket = ix.byValue.get(v);
      if (!bucket) ix.byValue.set(v, (bucket = new Map()));
      bucket.set(k, o);
    }
  }

  private unindex(k: string, o: T): void {
    for (const ix of this.indexes.values()) {
      const v = ix.of(o);
      if (v === undefined) continue;
      const bucket = ix.byValue.get(v);
      if (bucket?.delete(k) && bucket.size === 0) ix.byValue.delete(v);
    }
  }

  /** Removes an object from the cache (and its indexes); returns what the cache held. */
  private remove(k: string): T | undefined {
    const old = this.objects.get(k);
    if (!old) return undefined;
    this.objects.delete(k);
    this.unindex(k, old);
    this.rev++;
    return old;
  }

  private proof(): void {
    this.lastProof = now();
    if (this.blind !== undefined) {
      const why = this.blind;
      this.blind = undefined;
      this.o.onSight?.(true, `${this.path} current again after: ${why}`);
    }
  }

  /** The view is not current from now until the next proof. */
  private lost(why: string): void {
    if (this.blind !== undefined) return;
    this.blind = why;
    this.o.onSight?.(false, why);
  }

  private async loop(gen: number): Promise<void> {
    while (gen === this.gen) {
      let failure: unknown;
      let failed = false;
      const streamed = !this.resourceVersion && this.streaming;
      if (!this.resourceVersion && !streamed) {
        this.phase = "listing";
        try {
          const items: T[] = [];
          let cont: string | undefined;
          let resourceVersion = "";
          do {
            const page = await this.o.list({ limit: LIST_PAGE_SIZE, ...(cont ? { _continue: cont } : {}) });
            if (gen !== this.gen) return;
            for (const o of page.items ?? []) items.push(this.keep(o));
            // Every page of one list is the same snapshot and carries its resourceVersion.
            resourceVersion = page.metadata?.resourceVersion ?? resourceVersion;
            cont = page.metadata?._continue || undefined;
          } while (cont);
          this.replace(items, resourceVersion);
        } catch (err) {
          [failure, failed] = [err, true];
        }
      }
      if (!failed) {
        if (gen !== this.gen) return;
        this.phase = streamed ? "listing" : "watching";
        const end = await this.watchOnce(gen, streamed);
        if (gen !== this.gen) return;
        if (end.kind === "gone") {
          // Too old: relist at once. Said, because a list slower than the apiserver's watch history is this, over and
          // over (a paged list of 150,000 pods took 163 s).
          const gone = new Error(`watch on ${this.path} from resourceVersion ${this.resourceVersion || "(none)"}: 410 Gone, relisting`);
          this.lost(gone.message);
          this.o.onError?.(gone, 0);
          this.resourceVersion = "";
        }
        if (end.kind === "failed" && end.streamUnsupported) {
          this.streaming = false;
          this.o.onError?.(end.err, 0);
          continue; // list in pages at once: nothing failed that waiting would mend
        }
        if (end.kind !== "failed") continue;
        failure = end.err;
      }
      if (gen !== this.gen) return;
      this.phase = "waiting";
      this.delayMs = this.delayMs ? Math.min(this.delayMs * 2, this.o.backoff.maxMs) : this.o.backoff.initialMs;
      this.lost(`${this.path}: ${(failure as Error | undefined)?.message ?? String(failure)}`);
      this.o.onError?.(failure, this.delayMs);
      await new Promise<void>((resolve) => {
        const t = setTimeout(resolve, this.delayMs);
        this.wake = () => (clearTimeout(t), resolve());
      });
      this.wake = undefined;
      if (gen === this.gen) this.restarts++;
    }
  }

  /** Replaces the cache with a list's items, calling handlers for what changed. */
  private replace(items: readonly T[], resourceVersion: string): void {
    const fresh = new Map(items.map((o) => [keyOf(o), o] as const));
    for (const k of this.objects.keys()) {
      if (fresh.has(k)) continue; // deleting the entry a Map iterator is on is safe
      this.emit("delete", this.remove(k)!);
    }
    for (const o of fresh.values()) this.upsert(o);
    this.resourceVersion = resourceVersion;
    this.proof();
    if (!this.synced) {
      this.synced = true;
      for (const w of this.syncWaiters.splice(0)) w();
    }
  }

  /** What the cache keeps of an object fresh from a list or a watch event (which the cache owns). */
  private keep(raw: T): T {
    // Who wrote which field: a large part of every object (issue 12: memory at 150,000 pods), and only the writers of
    // Node conditions are read (decide/condition-writers.ts). Set to undefined, not deleted: a delete turns the
    // metadata into a dictionary-mode object, 55 MiB more at 150,000 pods (`npm run bench:cache-heap`: 138 → 83 MiB).
    const mf = raw.metadata?.managedFields;
    if (mf) raw.metadata!.managedFields = this.o.managedFields?.(mf);
    return this.o.transform ? this.o.transform(raw) : raw;
  }

  private upsert(o: T): void {
    const k = keyOf(o);
    const old = this.objects.get(k);
    if (old) this.unindex(k, old);
    this.objects.set(k, o);
    this.index(k, o);
    this.rev++;
    if (!old) this.emit("add", o);
    else if (old.metadata?.resourceVersion !== o.metadata?.resourceVersion) this.emit("update", o, old);
  }

  private emit(verb: Verb, o: T, old?: T): void {
    for (const fn of this.handlers[verb]) fn(o, old);
  }

  /**
   * One watch request, from resourceVersion until it ends; resolves how it ended. `streamed`: no resourceVersion
   * yet, the server sends the current state first and the cache takes it whole at the bookmark that ends it.
   */
  private watchOnce(gen: number, streamed = false): Promise<WatchEnd> {
    return new Promise((resolve) => {
      let ended = false;
      // The initial state while it streams; undefined once it is in the cache (or for a watch from a resourceVersion).
      let initial: Map<string, T> | undefined = streamed ? new Map() : undefined;
      let establishedAt: number | undefined;
      let events = 0;
      let errorEvent: { code?: number; message?: string } | undefined;
      const done = (err: unknown) => {
        if (ended) return;
        ended = true;
        if (gen === this.gen) this.current = undefined;
        const upFor = establishedAt === undefined ? 0 : now() - establishedAt;
        if (initial) {
          // Ended before the whole state came: as a failed list, nothing of it was kept.
          const code = errorEvent ? errorEvent.code : statusOf(err); // after an ERROR event, err is our own abort
          if (code === 410) return resolve({ kind: "gone" });
          const refused = code === 400 || code === 422; // sendInitialEvents rejected: the WatchList gate is off
          const ignored = establishedAt !== undefined && !errorEvent && (!err || (err as Error).name === "TimeoutError");
          const why = errorEvent?.message ?? (err as Error | undefined)?.message ?? "ended";
          return resolve({
            kind: "failed",
            err: new Error(
              refused || ignored
                ? `streamed list of ${this.path} ${refused ? `refused (${why})` : `ended without its ${INITIAL_EVENTS_END} bookmark`}: listing in pages from now on`
                : `streamed list of ${this.path} failed before its end: ${why}`,
            ),
            streamUnsupported: refused || ignored,
          });
        }
        if (upFor >= HEALTHY_AFTER_MS) this.delayMs = 0;
        if (errorEvent?.code === 410 || statusOf(err) === 410) return resolve({ kind: "gone" });
        if (errorEvent)
          return resolve({ kind: "failed", err: new Error(`watch on ${this.path}: ${errorEvent.message ?? `error ${errorEvent.code}`}`) });
        // Closed by the server, or client-node's 30 s inactivity timeout on an established watch: re-watch.
        // A watch that never got a 200, or was closed at once without a single event, is a failure.
        const quietTimeout = (err as Error | undefined)?.name === "TimeoutError";
        if (establishedAt !== undefined && (!err || quietTimeout) && (events > 0 || upFor >= 1_000)) return resolve({ kind: "closed" });
        resolve({ kind: "failed", err: err ?? new Error(`watch on ${this.path} closed at once`) });
      };
      const onEvent = (type: string, obj: T & { code?: number; message?: string }) => {
        if (gen !== this.gen || ended) return;
        if (type === "ERROR") {
          errorEvent = obj;
          this.current?.abort();
          return;
        }
        if (initial) {
          if (type === "ADDED" || type === "MODIFIED") initial.set(keyOf(obj), this.keep(obj));
          else if (type === "DELETED") initial.delete(keyOf(obj));
          else if (type === "BOOKMARK" && obj.metadata?.annotations?.[INITIAL_EVENTS_END] === "true") {
            const items = [...initial.values()];
            initial = undefined;
            this.replace(items, obj.metadata.resourceVersion ?? "");
            this.phase = "watching";
            events++;
            this.delayMs = 0;
          }
          return;
        }
        if (type === "ADDED" || type === "MODIFIED") this.upsert(this.keep(obj));
        else if (type === "DELETED") {
          this.remove(keyOf(obj));
          this.emit("delete", obj);
        }
        this.resourceVersion = obj.metadata?.resourceVersion || this.resourceVersion;
        events++;
        this.delayMs = 0;
        this.proof();
      };
      const params = {
        // Streamed: no resourceVersion and NotOlderThan is a consistent read, as a list without one is.
        ...(streamed ? { sendInitialEvents: true, resourceVersionMatch: "NotOlderThan" } : { resourceVersion: this.resourceVersion }),
        allowWatchBookmarks: true,
        labelSelector: this.o.labelSelector,
        fieldSelector: this.o.fieldSelector,
      };
      this.watcher.watch(this.path, params, onEvent, done).then(
        (ctl) => {
          if (gen !== this.gen) return ctl.abort(); // abandoned (stopped, or relisted by the watchdog) while connecting
          if (ended) return;
          this.current = ctl;
          establishedAt = now(); // the apiserver answered 200: from here it streams everything after our resourceVersion
          if (!initial) this.proof(); // a streamed list proves nothing until its state is whole
        },
        (err: unknown) => done(err),
      );
    });
  }

  /**
   * The watchdog: a watch (connecting or established) without proof of freshness for staleAfterMs is
   * abandoned and the informer relists. Not while listing or backing off: those already know the view is
   * not current, and a list has its own deadline (the caches' clients give every request one).
   */
  private checkStale(): void {
    if (!this.running || this.phase !== "watching") return;
    const t = now();
    if (t - this.lastProof <= this.o.staleAfterMs || t - this.lastKick <= this.o.staleAfterMs) return;
    this.lastKick = t;
    const err = new Error(`watch on ${this.path} silent for ${Math.round((t - this.lastProof) / 1000)} s; relisting`);
    this.current?.abort();
    this.current = undefined;
    this.resourceVersion = "";
    this.restarts++;
    this.lost(err.message);
    this.o.onError?.(err, 0);
    void this.loop(++this.gen);
  }
}
