// How the controller uses a storage fence: the request (retried with backoff) under one deadline, then the
// storage side's answer polled until it says fenced (or, to unfence, until the fence is gone). Same outcomes and
// the same beforeTry (leadership, partition re-read) as run.ts; its success message never says "off".
import pRetry from "p-retry";
import { setTimeout as sleep } from "node:timers/promises";
import { AgentError, isPermanent, type StorageAgentContext, type StorageFenceDriver } from "./types.ts";
import { redact } from "./redact.ts";
import type { OperationResult, RunOptions } from "./run.ts";

export type StorageRunContext = Omit<StorageAgentContext, "signal">;

class Deadline extends Error {}

/** Rejects when the signal aborts, so a request that ignores it cannot hold the runner past its deadline. */
function untilAbort<T>(p: Promise<T>, signal: AbortSignal): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    if (signal.aborted) return reject(signal.reason);
    const onAbort = () => reject(signal.reason);
    signal.addEventListener("abort", onAbort, { once: true });
    p.then(resolve, reject).finally(() => signal.removeEventListener("abort", onAbort));
  });
}

const asAgentError = (e: unknown) => (e instanceof AgentError ? e : new AgentError("Failed", e instanceof Error ? e.message : String(e)));

/**
 * Fences (op "off") or unfences (op "on") the node's storage and waits for the storage side to confirm. beforeTry
 * gets the same op names as power commands ("off" before a fence request) so the controller's checks apply as is.
 */
export async function runStorageFence(
  driver: StorageFenceDriver,
  ctx: StorageRunContext,
  op: "off" | "on",
  opts: RunOptions,
): Promise<OperationResult> {
  const what = op === "off" ? `storage fence of ${ctx.node}` : `storage unfence of ${ctx.node}`;
  const scrub = (s: string) => redact(s, ctx.parameters);
  // A lift needs no parameters (it undoes the fence as it was made): only a fence is refused when misconfigured.
  const problems = op === "off" ? driver.validate(ctx.parameters) : [];
  if (problems.length)
    return {
      outcome: "Failed",
      message: scrub(`${what} not attempted: the ${driver.type} agent is misconfigured: ${problems.join("; ")}`),
      tries: 0,
    };
  const ac = new AbortController();
  const timer = setTimeout(() => ac.abort(new Deadline("deadline")), opts.timeoutMs);
  const withdraw = () => ac.abort(new AgentError("Cancelled", "the operation was withdrawn"));
  if (opts.signal?.aborted) withdraw();
  opts.signal?.addEventListener("abort", withdraw, { once: true });
  const c: StorageAgentContext = { ...ctx, signal: ac.signal };
  let tries = 0;
  let last: string | undefined;
  // The driver call under way: its writes end at the API's request deadline, not at the signal (kube/network-fence.ts).
  let pending: Promise<unknown> = Promise.resolve();
  const call = (p: Promise<void>) => {
    pending = p.catch(() => undefined);
    return untilAbort(p, c.signal);
  };
  const request = async () => {
    tries++;
    try {
      await untilAbort(opts.beforeTry?.(op) ?? Promise.resolve(), c.signal);
      await call(op === "off" ? driver.fence(c) : driver.unfence(c));
      opts.onAttempt?.({ op, attempt: tries, ok: true, message: `${what}: request accepted` });
    } catch (e) {
      if (e instanceof Deadline) throw e;
      const err = asAgentError(e);
      last = `${err.kind}: ${scrub(err.message)}`;
      opts.onAttempt?.({ op, attempt: tries, ok: false, message: scrub(err.message), kind: err.kind });
      throw new AgentError(err.kind, scrub(err.message));
    }
  };
  const retrying = () =>
    pRetry(request, {
      retries: opts.retries,
      factor: 2,
      minTimeout: opts.backoffMs,
      randomize: false,
      signal: c.signal,
      shouldRetry: ({ error }) => !isPermanent(error),
    });
  try {
    await retrying();
    const want = op === "off" ? "fenced" : "unfenced";
    while (true) {
      tries++;
      try {
        const s = await untilAbort(driver.state(c), c.signal);
        if (s === want) {
          const message =
            op === "off"
              ? `storage of ${ctx.node} fenced (the storage side confirmed); the machine itself may still run`
              : `storage of ${ctx.node} unfenced (the storage side confirmed)`;
          return { outcome: "Succeeded", message, tries };
        }
        last = `the storage side says ${s}`;
      } catch (e) {
        if (c.signal.aborted) throw e;
        const err = asAgentError(e);
        if (isPermanent(err)) throw err;
        last = `${err.kind}: ${scrub(err.message)}`;
      }
      // Unfencing has two steps (Unfenced, then delete once confirmed): each poll moves it on, idempotently, and
      // each of those writes is checked by beforeTry first (a replica that lost the Lease stops here), like the first.
      if (op === "on") {
        await untilAbort(opts.beforeTry?.(op) ?? Promise.resolve(), c.signal);
        await call(driver.unfence(c)).catch(() => undefined);
      }
      await sleep(opts.pollMs ?? 1000, undefined, { signal: c.signal });
    }
  } catch (e) {
    if (ac.signal.aborted && ac.signal.reason instanceof Deadline)
      return {
        outcome: "TimedOut",
        message: scrub(
          `${what} not confirmed within ${opts.timeoutMs / 1000} s (${tries} tries); ${last ?? "no answer before the deadline"}`,
        ),
        tries,
      };
    const err = ac.signal.aborted ? asAgentError(ac.signal.reason) : asAgentError(e);
    if (err.kind === "Cancelled") {
      // Withdrawn: ended only once a write already sent has landed or failed, so that whatever comes next (the lift
      // of this fence) runs after it, never before a create still on its way.
      await pending;
      return { outcome: "Cancelled", message: scrub(`${what} cancelled: ${err.message}`), tries };
    }
    return { outcome: "Failed", message: scrub(`${what} failed after ${tries} tries (${err.kind}): ${err.message}`), tries };
  } finally {
    clearTimeout(timer);
    opts.signal?.removeEventListener("abort", withdraw);
  }
}
