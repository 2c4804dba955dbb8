// A failover's three instants on the recorder's timeline: the failed node's power off, the old pod's delete (its
// release), the replacement's first Running. The order off < gone <= running is the safety claim every e2e failover
// checks: nothing is released before the power is off, and the replacement runs only once the old pod is gone.
import assert from "node:assert/strict";
import type { Recorder } from "./recorder.ts";

export interface FailoverQuery {
  /** The failed node, whose power-off is looked for. */
  node: string;
  /** The pod that ran there, whose delete is its release. */
  oldUid: string;
  /** Its replacement, whose first Running is looked for (none: `running` stays undefined). */
  newUid?: string;
  /** The replacement's name must match too. */
  name?: string;
  /** Only power-offs at or after this instant (ms): an earlier one was another episode's. Unset: any. */
  since?: number;
  /** Only a power-off the lab reports from this source (`detail.source`: "bmc", "webhook"). */
  offSource?: string;
}

/** When (ms since epoch) each happened; undefined if the timeline does not show it. */
export interface FailoverTimeline {
  off: number | undefined;
  gone: number | undefined;
  running: number | undefined;
}

export function failoverTimeline(rec: Recorder, q: FailoverQuery): FailoverTimeline {
  const when = (pred: Parameters<Recorder["first"]>[0]) => rec.first(pred)?.t;
  return {
    off: when(
      (e) =>
        e.source === "lab" &&
        e.kind === "power" &&
        e.node === q.node &&
        e.detail.power === "off" &&
        (q.since === undefined || e.t >= q.since) &&
        (!q.offSource || e.detail.source === q.offSource),
    ),
    gone: when((e) => e.source === "pod" && e.type === "delete" && e.uid === q.oldUid),
    running:
      q.newUid === undefined
        ? undefined
        : when((e) => e.source === "pod" && e.uid === q.newUid && (q.name === undefined || e.name === q.name) && e.phase === "Running"),
  };
}

/**
 * Looks the failover up and asserts power off < old pod gone <= replacement Running, all three seen; the message
 * is the timeline from `since` (`q.since` unless given: a query may look for a power-off at any time).
 */
export function assertFailover(rec: Recorder, q: FailoverQuery & { newUid: string }, since = q.since ?? 0) {
  const { off, gone, running } = failoverTimeline(rec, q);
  assert.ok(
    off && gone && running && off < gone && gone <= running,
    `power off < pod released < replacement Running\n${rec.format(since)}`,
  );
  return { off, gone, running };
}

/** `power off 4.1 s → pod released 4.3 s → replacement Running 6.0 s`, in seconds from `since`. */
export function failoverSteps(t: { off: number; gone: number; running: number }, since: number): string {
  const s = (n: number) => ((n - since) / 1000).toFixed(1);
  return `power off ${s(t.off)} s → pod released ${s(t.gone)} s → replacement Running ${s(t.running)} s`;
}
