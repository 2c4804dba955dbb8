// Agent operations run in the background, not in a work-queue worker: a BMC that hangs for its whole timeout,
// or many of them, never holds the workers that unfence other nodes or release confirmed fences. The
// NodeFence controller starts an operation after writing its attempt InProgress, and records the outcome
// the next time it reconciles the fence (the operation's end enqueues it). Only this process's memory knows
// an operation runs: after a restart an InProgress attempt has no operation here and is Interrupted.
import type { Operation } from "../decide/fence-machine.ts";

export type OperationResult = Extract<Operation, { state: "done" }>;

interface Entry {
  op: Operation;
  abort: AbortController;
  promise: Promise<void>;
}

export class AgentOperations {
  private readonly byFence = new Map<string, Map<number, Entry>>();
  private readonly onDone: (fence: string) => void;

  constructor(onDone: (fence: string) => void) {
    this.onDone = onDone;
  }

  /** Runs `work` for attempt `index` of `fence`; a throw becomes a Failed outcome. Idempotent per attempt. */
  start(fence: string, index: number, work: (signal: AbortSignal) => Promise<Omit<OperationResult, "state">>): void {
    const ops = this.byFence.get(fence) ?? new Map<number, Entry>();
    this.byFence.set(fence, ops);
    if (ops.has(index)) return;
    const abort = new AbortController();
    const entry: Entry = { op: { state: "running" }, abort, promise: Promise.resolve() };
    entry.promise = (async () => {
      let result: Omit<OperationResult, "state">;
      try {
        result = await work(abort.signal);
      } catch (err) {
        result = { outcome: "Failed", message: err instanceof Error ? err.message : String(err) };
      }
      entry.op = { state: "done", ...result };
      this.onDone(fence);
    })();
    ops.set(index, entry);
  }

  /** The operations of one fence, by attempt index. */
  view(fence: string): ReadonlyMap<number, Operation> {
    return new Map([...(this.byFence.get(fence) ?? new Map<number, Entry>())].map(([i, e]) => [i, e.op] as const));
  }

  /** Drops a finished operation once its outcome is in the NodeFence's status. */
  forget(fence: string, index: number): void {
    const ops = this.byFence.get(fence);
    if (ops?.get(index)?.op.state === "done") ops.delete(index);
    if (ops?.size === 0) this.byFence.delete(fence);
  }

  /** Withdraws every running operation of a fence (cancelled, unfenced, deleted): they end Cancelled, at once. */
  abort(fence: string): void {
    for (const e of this.byFence.get(fence)?.values() ?? []) e.abort.abort();
  }

  get running(): number {
    let n = 0;
    for (const ops of this.byFence.values()) for (const e of ops.values()) if (e.op.state === "running") n++;
    return n;
  }

  /** Waits for every running operation to end (each is bounded by its own deadline). */
  async drain(): Promise<void> {
    const all = [...this.byFence.values()].flatMap((ops) => [...ops.values()].map((e) => e.promise));
    await Promise.all(all);
  }
}
