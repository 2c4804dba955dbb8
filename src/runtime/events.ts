// Best-effort core/v1 Events, like client-go's EventRecorder: repeats of the same event on the same
// object are folded into one Event (count and lastTimestamp patched); past MAX_SIMILAR different messages
// of one reason on one object within the window, the others are folded into one "(combined from similar
// events)" Event, as client-go's EventAggregator does — a fence that loops or fails for days, whose messages
// name rounds and times, makes a bounded number of Events. No failure ever reaches the caller, because an
// Event must never be the reason a reconcile fails.
import { hostname } from "node:os";
import { CoreV1Api, V1MicroTime, type CoreV1Event, type KubeConfig } from "@kubernetes/client-node";
import type { Log } from "./controller.ts";

export interface InvolvedObject {
  apiVersion: string;
  kind: string;
  name: string;
  /** Absent for cluster-scoped objects; their Events go to namespace "default", where kubectl describe finds them. */
  namespace?: string;
  uid?: string;
}

export type EventType = "Normal" | "Warning";

/** The InvolvedObject of a core/v1 object (a Pod, a PersistentVolumeClaim …). */
export function objectRef(kind: string, o: { metadata?: { name?: string; namespace?: string; uid?: string } }): InvolvedObject {
  return { apiVersion: "v1", kind, name: o.metadata?.name ?? "", namespace: o.metadata?.namespace, uid: o.metadata?.uid };
}

export interface RecordOutcome {
  event: CoreV1Event;
  action: "create" | "patch";
  error?: unknown;
}

export interface EventRecorderOptions {
  kc: KubeConfig;
  log: Log;
  /** reportingInstance; defaults to the hostname (the pod name in a cluster). */
  instance?: string;
  /** Repeats within this window of the last occurrence are aggregated. Default 10 minutes. */
  aggregateWindowMs?: number;
  /** Remembered (object, reason, message) combinations. Default 4096. */
  cacheSize?: number;
  now?: () => number;
  /** Called after every API call, successful or not (for tests). */
  onRecord?: (outcome: RecordOutcome) => void;
}

const COMPONENT = "stockade";
const MESSAGE_LIMIT = 1024; // bytes, the apiserver's limit
/** Different messages of one (object, type, reason) within the window before the rest are combined (client-go: 10). */
export const MAX_SIMILAR = 10;
export const COMBINED_PREFIX = "(combined from similar events): ";

interface Seen {
  namespace: string;
  name: string;
  count: number;
  lastMs: number;
}

export class EventRecorder {
  private readonly core: CoreV1Api;
  private readonly o: EventRecorderOptions;
  private readonly instance: string;
  private readonly windowMs: number;
  private readonly cacheSize: number;
  private readonly now: () => number;
  /** LRU (Map keeps insertion order) of the last Event per combination; a promise so that records of the
   * same combination run one after the other and a repeat patches rather than races a create. */
  private readonly seen = new Map<string, Promise<Seen | undefined>>();
  /** Per (object, type, reason): the different messages seen since the window began (LRU like seen). */
  private readonly similar = new Map<string, { sinceMs: number; messages: Set<string> }>();
  private seq = 0;

  constructor(o: EventRecorderOptions) {
    this.o = o;
    this.core = o.kc.makeApiClient(CoreV1Api);
    this.instance = (o.instance ?? hostname()).slice(0, 128);
    this.windowMs = o.aggregateWindowMs ?? 10 * 60_000;
    this.cacheSize = o.cacheSize ?? 4096;
    this.now = o.now ?? Date.now;
  }

  /** Records an Event; reason is UpperCamelCase (e.g. FenceSucceeded). Never throws. */
  record(obj: InvolvedObject, type: EventType, reason: string, message: string): Promise<void> {
    const id = obj.uid ?? `${obj.kind}/${obj.namespace ?? ""}/${obj.name}`;
    const combined = this.combine(JSON.stringify([id, type, reason]), truncate(message));
    message = combined ? truncate(COMBINED_PREFIX + message) : truncate(message);
    // All combined messages of one reason share one Event: its count and message are patched.
    const key = JSON.stringify([id, type, reason, combined ? COMBINED_PREFIX : message]);
    const previous = this.seen.get(key) ?? Promise.resolve(undefined);
    const next = previous.then((seen) => this.write(seen, obj, type, reason, message)).catch(() => undefined);
    this.seen.delete(key);
    this.seen.set(key, next);
    for (const oldest of this.seen.keys()) {
      if (this.seen.size <= this.cacheSize) break;
      this.seen.delete(oldest);
    }
    return next.then(() => undefined);
  }

  /** Whether this message is one too many different ones for its (object, type, reason) in the window. */
  private combine(key: string, message: string): boolean {
    const nowMs = this.now();
    let s = this.similar.get(key);
    if (!s || nowMs - s.sinceMs >= this.windowMs) s = { sinceMs: nowMs, messages: new Set() };
    this.similar.delete(key);
    this.similar.set(key, s);
    for (const oldest of this.similar.keys()) {
      if (this.similar.size <= this.cacheSize) break;
      this.similar.delete(oldest);
    }
    if (s.messages.has(message)) return false;
    if (s.messages.size >= MAX_SIMILAR) return true;
    s.messages.add(message);
    return false;
  }

  private async write(
    seen: Seen | undefined,
    obj: InvolvedObject,
    type: EventType,
    reason: string,
    message: string,
  ): Promise<Seen | undefined> {
    const nowMs = this.now();
    const now = new Date(nowMs);
    if (seen && nowMs - seen.lastMs < this.windowMs) {
      const count = seen.count + 1;
      const patch = [
        { op: "replace", path: "/count", value: count },
        { op: "replace", path: "/lastTimestamp", value: now.toISOString() },
        // A combined Event says the latest of its messages (identical repeats: the same one).
        { op: "replace", path: "/message", value: message },
      ];
      const event: CoreV1Event = {
        metadata: { name: seen.name, namespace: seen.namespace },
        involvedObject: obj,
        count,
        lastTimestamp: now,
        message,
      };
      try {
        await this.core.patchNamespacedEvent({ name: seen.name, namespace: seen.namespace, body: patch });
        this.o.onRecord?.({ event, action: "patch" });
        return { ...seen, count, lastMs: nowMs };
      } catch (error) {
        // Most likely the Event expired (the apiserver's event TTL is 1 h); start a new one.
        this.o.onRecord?.({ event, action: "patch", error });
        this.o.log.debug({ err: error, event: seen.name }, `patching Event ${seen.namespace}/${seen.name} failed, creating a new one`);
      }
    }
    const namespace = obj.namespace ?? "default";
    // Named like client-go's (<object>.<hex time>), with a counter against two Events in the same ms.
    const name = `${obj.name.slice(0, 230)}.${(nowMs * 1000 + (this.seq++ % 1000)).toString(16)}`;
    const event: CoreV1Event = {
      metadata: { name, namespace },
      involvedObject: { apiVersion: obj.apiVersion, kind: obj.kind, name: obj.name, namespace: obj.namespace, uid: obj.uid },
      type,
      reason,
      message,
      count: 1,
      firstTimestamp: now,
      lastTimestamp: now,
      eventTime: new V1MicroTime(nowMs),
      // Required when eventTime is set; kubectl does not show it, so the reason doubles as the action.
      action: reason,
      source: { component: COMPONENT },
      reportingComponent: COMPONENT,
      reportingInstance: this.instance,
    };
    try {
      const created = await this.core.createNamespacedEvent({ namespace, body: event });
      this.o.onRecord?.({ event, action: "create" });
      return { namespace, name: created.metadata?.name ?? name, count: 1, lastMs: nowMs };
    } catch (error) {
      this.o.onRecord?.({ event, action: "create", error });
      const { kind, name } = obj;
      this.o.log.warn(
        { err: error, kind, name, namespace: obj.namespace, reason },
        `recording Event ${reason} on ${kind} ${name} failed: ${errorMessage(error)}`,
      );
      // Keep what was known: if the old Event is still there, the next repeat patches it.
      return seen;
    }
  }
}

function truncate(message: string): string {
  if (Buffer.byteLength(message) <= MESSAGE_LIMIT) return message;
  let out = "";
  let bytes = 0;
  for (const ch of message) {
    bytes += Buffer.byteLength(ch);
    if (bytes > MESSAGE_LIMIT - 3) break;
    out += ch;
  }
  return out + "...";
}

function errorMessage(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}
