// The operator's event loop held by something for longer than a fence can wait: said in the log with when it
// happened, so a slow fence can be matched to it (issue 12: NodeFence creations of a burst waited up to 2 s with
// nothing logged, while the apiserver answered in tens of milliseconds). The histogram of event-loop delay in
// /metrics says how often; this says when.
import { performance } from "node:perf_hooks";

export interface LoopStallOptions {
  /** How often the loop is sampled. Default 100 ms. */
  intervalMs?: number;
  /** A sample this much later than due is a stall. Default 500 ms. */
  thresholdMs?: number;
  /** Called with how long the loop was held past the sample's due time. */
  onStall: (blockedMs: number) => void;
}

export class LoopStallWatch {
  private timer: NodeJS.Timeout | undefined;
  private readonly o: LoopStallOptions;

  constructor(o: LoopStallOptions) {
    this.o = o;
  }

  start(): void {
    if (this.timer) return;
    const every = this.o.intervalMs ?? 100;
    const threshold = this.o.thresholdMs ?? 500;
    let due = performance.now() + every;
    this.timer = setInterval(() => {
      const t = performance.now();
      const late = t - due;
      if (late >= threshold) this.o.onStall(Math.round(late));
      due = t + every;
    }, every);
    this.timer.unref();
  }

  stop(): void {
    clearInterval(this.timer);
    this.timer = undefined;
  }
}
