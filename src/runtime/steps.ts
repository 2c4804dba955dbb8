// Work written as a generator that yields between steps (e.g. the FenceAgent check, every 250 nodes): run at once by
// pure callers, or in turns by the operator so that its event loop is never held for the whole of it.
import { setImmediate } from "node:timers/promises";

/** Runs work in steps to its end, without yielding. */
export function runSteps<T>(steps: Generator<void, T>): T {
  for (;;) {
    const r = steps.next();
    if (r.done) return r.value;
  }
}

/** Runs work in steps, letting the event loop run everything waiting between two steps. */
export async function inTurns<T>(steps: Generator<void, T>): Promise<T> {
  for (;;) {
    const r = steps.next();
    if (r.done) return r.value;
    await setImmediate();
  }
}
