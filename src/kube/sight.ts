// When this replica could see the cluster: the span of time over which a node's silence may be counted
// (docs/safety.md §4, "Silence needs a seeing observer").
//
// A Lease that was not renewed proves the node silent only while the observer could have seen a renewal. During an
// apiserver or etcd outage every kubelet misses its renewals, and so does the observer's view: counting that time
// as the node's silence powers off healthy machines once the control plane is back (issue 41: etcd down 45 s, a
// kubelet a moment slow to re-renew, a one-node policy fences it). So silence counts from the later of the node's
// last renewal seen and `seeingSince()`: the instant from which this replica has seen without a gap. It moves
// forward at:
// - the first sync of the heartbeat caches;
// - the end of every gap of a heartbeat watch (a failed or stale watch, a relist) — the `lost`/`regained` of a source;
// - the end of every gap of the apiserver's answers, as the leader elector sees them (a failed request, or none
//   answered for longer than `maxQuietMs`): etcd down leaves the watches open and silent, but not the elector's reads
//   and writes;
// - a change of leadership (`restart`): a replica that takes over counts nothing from before it led.
// While any source is lost, nothing is silent (`seeingSince()` is undefined).
//
// It only ever moves forward: a gap makes every silence start again, it never makes one longer. The cost is time: a
// node that dies during an outage is fenced one Lease duration after the outage ends, not before.

export type SightEvent = { kind: "lost"; source: string; why: string } | { kind: "regained"; source: string; blindMs: number; why: string };

export interface SightOptions {
  /** The operator's monotonic clock (ms). */
  mono?: () => number;
  /** Answers of the apiserver (`answered`) further apart than this are a gap. Default 10 s. */
  maxQuietMs?: number;
  /** Told of every gap, for the log and metrics. */
  onChange?: (e: SightEvent) => void;
}

export class Sight {
  private readonly mono: () => number;
  private readonly maxQuietMs: number;
  private readonly onChange: ((e: SightEvent) => void) | undefined;
  /** Undefined until the heartbeat caches have synced. */
  private since: number | undefined;
  /** The sources that cannot see now, with when each was lost (monotonic ms). */
  private readonly lostAt = new Map<string, { at: number; why: string }>();
  private lastAnswer: number | undefined;
  /** How many times silence was made to start again (gaps ended, leadership changes). */
  restarts = 0;

  constructor(o: SightOptions = {}) {
    this.mono = o.mono ?? (() => performance.now());
    this.maxQuietMs = o.maxQuietMs ?? 10_000;
    this.onChange = o.onChange;
  }

  /** The heartbeat caches have their first list: silence counts from now. */
  synced(): void {
    this.since ??= this.mono();
  }

  /**
   * Monotonic ms from which this replica has seen without a gap; undefined before the first sync and while any
   * source cannot see. A silence counts only from here.
   */
  seeingSince(): number | undefined {
    if (this.lostAt.size) return undefined;
    // A request of the elector (or the probe) hanging, or this process paused: no answer for longer than maxQuietMs is
    // blindness now, not only once the next answer comes.
    if (this.lastAnswer !== undefined && this.mono() - this.lastAnswer > this.maxQuietMs) return undefined;
    return this.since;
  }

  /** Whether this replica can see now (synced, no source lost). */
  get seeing(): boolean {
    return this.seeingSince() !== undefined;
  }

  /** A source stopped seeing (a watch failed, a request to the apiserver failed). */
  lost(source: string, why: string): void {
    if (this.lostAt.has(source)) return;
    this.lostAt.set(source, { at: this.mono(), why });
    this.onChange?.({ kind: "lost", source, why });
  }

  /** A source sees again (a list or a watch answered, a request answered): silence counts from now. */
  regained(source: string, why: string): void {
    const lost = this.lostAt.get(source);
    if (lost === undefined) return;
    this.lostAt.delete(source);
    const now = this.mono();
    this.moveTo(now);
    this.onChange?.({ kind: "regained", source, blindMs: Math.round(now - lost.at), why });
  }

  /** Silence counts from now whatever was seen before (this replica just became the leader). */
  restart(why: string): void {
    this.moveTo(this.mono());
    this.onChange?.({ kind: "regained", source: "leadership", blindMs: 0, why });
  }

  /**
   * The apiserver answered (ok) or failed a request of the leader elector, which asks every retry period: a
   * failure is a gap until the next answer, and so are answers further apart than maxQuietMs.
   */
  answered(ok: boolean, why = ""): void {
    const source = "apiserver";
    if (!ok) return this.lost(source, why || "a request to the apiserver failed");
    const now = this.mono();
    const quiet = this.lastAnswer === undefined ? 0 : now - this.lastAnswer;
    this.lastAnswer = now;
    if (this.lostAt.has(source)) return this.regained(source, "the apiserver answers again");
    if (quiet > this.maxQuietMs) {
      this.moveTo(now);
      this.onChange?.({
        kind: "regained",
        source,
        blindMs: Math.round(quiet),
        why: `no answer of the apiserver for ${Math.round(quiet)} ms`,
      });
    }
  }

  private moveTo(at: number): void {
    if (this.since === undefined) return; // not synced: the sync sets it
    if (at > this.since) this.since = at;
    this.restarts++;
  }
}
