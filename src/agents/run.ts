// How the controller uses a driver: one operation under one deadline, retried with exponential backoff,
// every message scrubbed of credentials. fenceOff only reports success once a status query saw "off".
import pRetry from "p-retry";
import { setTimeout as sleep } from "node:timers/promises";
import { AgentError, isPermanent, type AgentContext, type AgentDriver, type AgentErrorKind, type PowerState } from "./types.ts";
import { redact } from "./redact.ts";
import { CONFIRMED_OFF_ANNOTATION } from "./manual.ts";

export { redact } from "./redact.ts";

export type Operation = "off" | "on" | "status";
export type Outcome = "Succeeded" | "Failed" | "TimedOut" | "Cancelled";
export type RunContext = Omit<AgentContext, "signal">;

export interface AttemptReport {
  op: Operation;
  /** 1-based count of driver calls in this run. */
  attempt: number;
  ok: boolean;
  /** Redacted. */
  message: string;
  kind?: AgentErrorKind;
  power?: PowerState;
}

export interface RunOptions {
  /** Overall deadline across every try (and, for fenceOff, the status polling). */
  timeoutMs: number;
  /** Extra tries after the first failure; Config and AuthFailed errors are never retried. */
  retries: number;
  /** Delay before the first retry, doubled for each further one. */
  backoffMs: number;
  /** fenceOff: interval between status queries (default 1 s). */
  pollMs?: number;
  onAttempt?: (a: AttemptReport) => void;
  /**
   * Called right before every power command, retries included (never before a status query): the caller's last
   * word (leadership, the node still partitioned). Throwing an AgentError of kind Cancelled ends the run Cancelled.
   */
  beforeTry?: (op: "off" | "on") => Promise<void>;
  /** Aborts the run from outside (the fence was withdrawn): it ends Cancelled, its child processes killed. */
  signal?: AbortSignal;
  /**
   * fenceOff: one status query before any power command; "off" already confirms it, and no command is sent (a machine
   * that may not be powered off automatically, e.g. one whose Node is gone, can still be found off).
   */
  queryFirst?: boolean;
}

export interface OperationResult {
  outcome: Outcome;
  /** Redacted. */
  message: string;
  power?: PowerState;
  /** Driver calls made (power commands and status queries). */
  tries: number;
}

const secs = (ms: number) => `${ms / 1000} s`;
const describe = (op: Operation, node: string) => (op === "status" ? `status query of ${node}` : `power ${op} of ${node}`);

function asAgentError(e: unknown): AgentError {
  if (e instanceof AgentError) return e;
  return new AgentError("Failed", e instanceof Error ? e.message : String(e));
}

class Deadline extends Error {}

/** Rejects when the signal aborts, so a driver that ignores the signal cannot hold the runner past its deadline. */
function untilAbort<T>(p: Promise<T>, signal: AbortSignal): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    if (signal.aborted) return reject(signal.reason);
    const onAbort = () => reject(signal.reason);
    signal.addEventListener("abort", onAbort, { once: true });
    p.then(resolve, reject).finally(() => signal.removeEventListener("abort", onAbort));
  });
}

/** State shared by the tries of one run, so a timeout can report what was seen last. */
class Run {
  tries = 0;
  last: AgentError | undefined;
  readonly driver: AgentDriver;
  readonly ctx: AgentContext;
  readonly opts: RunOptions;

  constructor(driver: AgentDriver, ctx: AgentContext, opts: RunOptions) {
    this.driver = driver;
    this.ctx = ctx;
    this.opts = opts;
  }

  redact(s: string): string {
    return redact(s, this.ctx.parameters);
  }

  /** One driver call, reported to onAttempt; errors come back as redacted AgentErrors. */
  async call(op: Operation): Promise<PowerState | undefined> {
    const attempt = ++this.tries;
    try {
      if (op !== "status") await untilAbort(this.opts.beforeTry?.(op) ?? Promise.resolve(), this.ctx.signal);
      const p: Promise<PowerState | void> = op === "status" ? this.driver.status(this.ctx) : this.driver.power(this.ctx, op);
      const power = (await untilAbort(p, this.ctx.signal)) ?? undefined;
      const message = op === "status" ? `status query: power is ${power}` : `power ${op} command accepted`;
      this.opts.onAttempt?.({ op, attempt, ok: true, message, ...(power ? { power } : {}) });
      return power;
    } catch (e) {
      if (e instanceof Deadline) throw e;
      const err = asAgentError(e);
      const scrubbed = new AgentError(err.kind, this.redact(err.message));
      this.last = scrubbed;
      this.opts.onAttempt?.({ op, attempt, ok: false, message: scrubbed.message, kind: scrubbed.kind });
      throw scrubbed;
    }
  }

  /** The call retried with exponential backoff; permanent errors stop at once. */
  retrying(op: Operation): Promise<PowerState | undefined> {
    return pRetry(() => this.call(op), {
      retries: this.opts.retries,
      factor: 2,
      minTimeout: this.opts.backoffMs,
      randomize: false,
      signal: this.ctx.signal,
      shouldRetry: ({ error }) => !isPermanent(error),
    });
  }

  failed(what: string, e: unknown): OperationResult {
    const err = asAgentError(e);
    const n = this.tries === 1 ? "1 try" : `${this.tries} tries`;
    if (err.kind === "Cancelled")
      return { outcome: "Cancelled", message: this.redact(`${what} cancelled: ${err.message}`), tries: this.tries };
    return { outcome: "Failed", message: this.redact(`${what} failed after ${n} (${err.kind}): ${err.message}`), tries: this.tries };
  }

  timedOut(what: string): OperationResult {
    const last = this.last ? `last error (${this.last.kind}): ${this.last.message}` : "no answer before the deadline";
    const n = this.tries === 1 ? "1 try" : `${this.tries} tries`;
    return {
      outcome: "TimedOut",
      message: this.redact(`${what} timed out after ${secs(this.opts.timeoutMs)} (${n}); ${last}`),
      tries: this.tries,
    };
  }
}

/** Validates, then runs `body` with a signal that aborts at the deadline; any throw becomes a Failed or TimedOut result. */
async function withDeadline(
  driver: AgentDriver,
  ctx: RunContext,
  opts: RunOptions,
  body: (run: Run) => Promise<OperationResult>,
  what: string,
): Promise<OperationResult> {
  const problems = driver.validate(ctx.parameters);
  if (problems.length > 0) {
    return {
      outcome: "Failed",
      message: redact(`${what} not attempted: the ${driver.type} agent is misconfigured: ${problems.join("; ")}`, ctx.parameters),
      tries: 0,
    };
  }
  const ac = new AbortController();
  const timer = setTimeout(() => ac.abort(new Deadline("deadline")), opts.timeoutMs);
  const withdraw = () => ac.abort(new AgentError("Cancelled", "the operation was withdrawn"));
  if (opts.signal?.aborted) withdraw();
  opts.signal?.addEventListener("abort", withdraw, { once: true });
  const run = new Run(driver, { ...ctx, signal: ac.signal }, opts);
  try {
    return await body(run);
  } catch (e) {
    if (ac.signal.aborted) return ac.signal.reason instanceof Deadline ? run.timedOut(what) : run.failed(what, ac.signal.reason);
    return run.failed(what, e);
  } finally {
    clearTimeout(timer);
    opts.signal?.removeEventListener("abort", withdraw);
  }
}

/** One operation (off, on or status) with retries under an overall deadline. */
export function runOperation(driver: AgentDriver, ctx: RunContext, op: Operation, opts: RunOptions): Promise<OperationResult> {
  const what = describe(op, ctx.node);
  return withDeadline(
    driver,
    ctx,
    opts,
    async (run) => {
      const power = await run.retrying(op);
      const message = op === "status" ? `${what}: power is ${power}` : `${what}: command accepted`;
      return { outcome: "Succeeded", message, ...(power ? { power } : {}), tries: run.tries };
    },
    what,
  );
}

/**
 * Powers the node off and polls status until it reports "off"; the command's own success proves nothing.
 * For the manual agent there is no command: it waits for the administrator's confirmation.
 */
export function fenceOff(driver: AgentDriver, ctx: RunContext, opts: RunOptions): Promise<OperationResult> {
  const manual = driver.type === "manual";
  const what = manual ? `manual fencing of ${ctx.node}` : `power off of ${ctx.node}`;
  const pollMs = opts.pollMs ?? 1000;
  let observed: string | undefined;
  return withDeadline(
    driver,
    ctx,
    opts,
    async (run) => {
      if (!manual && opts.queryFirst) {
        try {
          if ((await run.call("status")) === "off")
            return {
              outcome: "Succeeded",
              message: `${ctx.node} found off by status query before any power command`,
              power: "off",
              tries: run.tries,
            };
        } catch (e) {
          if (run.ctx.signal.aborted || isPermanent(e)) throw e;
        }
      }
      if (!manual) await run.retrying("off");
      while (true) {
        try {
          const power = await run.call("status");
          if (power === "off") {
            const notes = run.ctx.notes?.length ? `: ${run.ctx.notes.join("; ")}` : "";
            const message = manual
              ? `${ctx.node} confirmed off by the administrator (annotation ${CONFIRMED_OFF_ANNOTATION})`
              : `power off of ${ctx.node} confirmed by status query${notes}`;
            return { outcome: "Succeeded", message, power: "off", tries: run.tries };
          }
          observed = `last status query said ${power}`;
        } catch (e) {
          if (run.ctx.signal.aborted || isPermanent(e)) throw e;
          observed = `last status query failed (${asAgentError(e).kind}): ${asAgentError(e).message}`;
        }
        await sleep(pollMs, undefined, { signal: run.ctx.signal });
      }
    },
    what,
  ).then((r) => {
    if (r.outcome !== "TimedOut" || !observed) return r;
    const hint = manual ? `; power the machine off, then annotate the NodeFence ${CONFIRMED_OFF_ANNOTATION}=${ctx.node}` : "";
    return {
      ...r,
      message: redact(`${what} not confirmed within ${secs(opts.timeoutMs)} (${r.tries} tries); ${observed}${hint}`, ctx.parameters),
    };
  });
}
