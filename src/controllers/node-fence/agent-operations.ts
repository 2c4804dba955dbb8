// Agent operations run in the background, not in a work-queue worker: a BMC that hangs for its whole timeout,
// or many of them, never holds the workers that unfence other nodes or release confirmed fences. The
// NodeFence controller starts an operation after writing its attempt InProgress, and records the outcome
// the next time it reconciles the fence (the operation's end enqueues it). Only this process's memory knows
// an operation runs: after a restart an InProgress attempt has no operation here and is Interrupted.
//
// Operations are keyed by the NodeFence's uid and the attempt's index: a NodeFence deleted and created again
// under the same name can never pick up an outcome of its predecessor's operation.
import type { Operation } from "../../decide/fence-machine.ts";

export type OperationResult = Extract<Operation, { state: "done" }>;

interface Entry {
  op: Operation;
  abort: AbortController;
  done: Promise<void>;
}

export class AgentOperations {
  private readonly byFence = new Map<string, Map<number, Entry>>();
  /** Withdrawn operations still ending (a storage fence's write on its way), by NodeFence uid. */
  private readonly settling = new Map<string, Set<Promise<void>>>();
  private readonly onDone: (name: string) => void;
  private readonly onStart: (work: Promise<void>) => void;

  /** onDone: an operation ended (by fence name); onStart: every operation's promise, for shutdown to wait for (runtime/in-flight.ts). */
  constructor(onDone: (name: string) => void, onStart: (work: Promise<void>) => void = () => {}) {
    this.onDone = onDone;
    this.onStart = onStart;
  }

  /** Runs `work` for attempt `index` of the NodeFence `uid` (named `name`); a throw becomes Failed. Idempotent per attempt. */
  start(uid: string, name: string, index: number, work: (signal: AbortSignal) => Promise<Omit<OperationResult, "state">>): void {
    const ops = this.byFence.get(uid) ?? new Map<number, Entry>();
    this.byFence.set(uid, ops);
    if (ops.has(index)) return;
    const entry: Entry = { op: { state: "running" }, abort: new AbortController(), done: Promise.resolve() };
    ops.set(index, entry);
    const p = (async () => {
      let result: Omit<OperationResult, "state">;
      try {
        result = await work(entry.abort.signal);
      } catch (err) {
        result = { outcome: "Failed", message: err instanceof Error ? err.message : String(err) };
      }
      entry.op = { state: "done", ...result };
      this.onDone(name);
    })();
    entry.done = p;
    this.onStart(p);
  }

  /** The operations of one NodeFence, by attempt index. */
  view(uid: string): ReadonlyMap<number, Operation> {
    return new Map([...(this.byFence.get(uid) ?? new Map<number, Entry>())].map(([i, e]) => [i, e.op] as const));
  }

  /** Drops a finished operation once its outcome is in the NodeFence's status. */
  forget(uid: string, index: number): void {
    const ops = this.byFence.get(uid);
    if (ops?.get(index)?.op.state === "done") ops.delete(index);
    if (ops?.size === 0) this.byFence.delete(uid);
  }

  /** Withdraws every operation of a NodeFence (cancelled, unfenced, deleted): they end at once and are forgotten. */
  abort(uid: string): void {
    for (const e of this.byFence.get(uid)?.values() ?? []) {
      e.abort.abort();
      if (e.op.state !== "running") continue;
      const set = this.settling.get(uid) ?? new Set<Promise<void>>();
      this.settling.set(uid, set);
      set.add(e.done);
      void e.done.finally(() => {
        set.delete(e.done);
        if (!set.size && this.settling.get(uid) === set) this.settling.delete(uid);
      });
    }
    this.byFence.delete(uid);
  }

  /**
   * Resolves once every withdrawn operation of the NodeFence has ended. A withdrawn storage fence ends only after a
   * write it already sent landed or failed (agents/run-storage.ts), so a lift that waits for this runs after it.
   */
  async settled(uid: string): Promise<void> {
    await Promise.all([...(this.settling.get(uid) ?? [])]);
  }
}
