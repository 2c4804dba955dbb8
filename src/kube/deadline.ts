// Deadlines for API requests, so no reconcile or leader-election tick can hang on a silent connection.
// @kubernetes/client-node 2.x builds every generated-API request in a RequestContext, passes it through
// KubeConfig.applySecurityAuthentication() right before sending, and hands the context's AbortSignal to
// undici's fetch, which honours it for the whole exchange (connect, headers and body). A KubeConfig
// whose applySecurityAuthentication() also sets a signal therefore gives every request made through
// clients it creates (kc.makeApiClient) a deadline, with no change in the callers.
// Watches are not affected: client-node's Watch runs its own fetch with its own AbortController and an
// inactivity timeout, and ignores the context's signal (the informer's watchdog handles watches).
// Its requests also share connections (connections.ts).
import type { KubeConfig, RequestContext } from "@kubernetes/client-node";
import { PooledKubeConfig } from "./connections.ts";

/** A request that got no complete answer before its deadline (the signal's abort reason, so fetch rejects with it). */
export class RequestTimeoutError extends Error {
  readonly timeoutMs: number;
  constructor(what: string, timeoutMs: number) {
    super(`no answer from the Kubernetes API within ${+(timeoutMs / 1000).toFixed(1)} s (${what})`);
    this.name = "RequestTimeoutError";
    this.timeoutMs = timeoutMs;
  }
}

/** Method and path of a request, for messages (no query: it may carry selectors, never secrets, but stays short). */
function describeRequest(ctx: RequestContext): string {
  try {
    return `${ctx.getHttpMethod()} ${new URL(ctx.getUrl()).pathname}`;
  } catch {
    return String(ctx.getHttpMethod());
  }
}

/** An AbortSignal that aborts after ms with `reason()`; its timer never keeps the process alive. */
function deadlineSignal(ms: number, reason: () => Error): AbortSignal {
  const c = new AbortController();
  setTimeout(() => c.abort(reason()), Math.max(0, ms)).unref();
  return c.signal;
}

/** A copy of a KubeConfig whose API requests carry the signal `signalFor` returns (none: no deadline). */
export class DeadlineKubeConfig extends PooledKubeConfig {
  private readonly signalFor: (ctx: RequestContext) => AbortSignal | undefined;

  constructor(from: KubeConfig, signalFor: (ctx: RequestContext) => AbortSignal | undefined) {
    super(from);
    this.signalFor = signalFor;
  }

  override async applySecurityAuthentication(ctx: RequestContext): Promise<void> {
    await super.applySecurityAuthentication(ctx);
    if (ctx.getSignal()) return;
    const signal = this.signalFor(ctx);
    if (signal) ctx.setSignal(signal);
  }
}

/** A copy of kc in which every API request (not watches) fails with RequestTimeoutError after msFor(request) ms. */
export function withRequestDeadline(kc: KubeConfig, msFor: (ctx: RequestContext) => number): KubeConfig {
  return new DeadlineKubeConfig(kc, (ctx) => {
    const ms = Math.max(0, msFor(ctx));
    return deadlineSignal(ms, () => new RequestTimeoutError(describeRequest(ctx), ms));
  });
}

/** A copy of kc in which every API request (not watches) fails with RequestTimeoutError after ms. */
export function withRequestTimeout(kc: KubeConfig, ms: number): KubeConfig {
  return withRequestDeadline(kc, () => ms);
}
