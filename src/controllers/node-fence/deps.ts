// What the NodeFence controller is given by the operator.
import type { DateTime } from "luxon";
import type { Logger } from "pino";
import type { Kube } from "../../kube/api.ts";
import type { Caches } from "../../kube/caches.ts";
import type { EventRecorder } from "../../runtime/events.ts";
import type { InFlight } from "../../runtime/in-flight.ts";
import type { Leadership } from "../../runtime/leader.ts";
import type { Metrics } from "../../metrics.ts";
import type { FenceHistory } from "../fence-history.ts";

export interface NodeFenceDeps {
  kube: Kube;
  caches: Caches;
  events: EventRecorder;
  log: Logger;
  clock: () => DateTime;
  metrics?: Metrics;
  leadership?: Leadership;
  /** Background work shutdown waits for before the leader Lease is released (runtime/in-flight.ts). */
  inflight?: InFlight;
  /** How old a read a bookkeeping step may reuse (default VIEW_REUSE_MS; 0: every step reads). */
  viewReuseMs?: number;
  /** Writes each fence's FenceRecord (controllers/fence-history.ts); without it, no history is kept. */
  history?: FenceHistory;
  /**
   * The node agent records' admission policy, read from the apiserver (kube/admission-check.ts RecordPolicyCheck):
   * without it, WatchdogExpired is never taken (the records' authority cannot be told).
   */
  recordPolicy?: { problems(maxAgeMs?: number): Promise<string[]> };
}
