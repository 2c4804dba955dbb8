// API requests that share their connections. client-node 2.0 builds a new undici Agent, and so opens a new TCP
// connection and TLS handshake, for every request (createDispatcher is called from applySecurityAuthentication and
// not cached, unlike the https.Agent of its watch path). Under load, on a machine whose CPU the apiserver needs,
// that handshake cost more than the request (issue 12: a GET answered in 0.15 s by the apiserver took 1.8 s).
// A PooledKubeConfig keeps one Agent (one keep-alive pool) per TLS identity. Idle pooled sockets do not keep a
// process alive.
import { createHash } from "node:crypto";
import { KubeConfig, bufferFromFileOrString, type RequestContext } from "@kubernetes/client-node";

type Dispatcher = NonNullable<ReturnType<RequestContext["getDispatcher"]>>;

/** A copy of a KubeConfig whose API requests reuse connections. */
export class PooledKubeConfig extends KubeConfig {
  private pool: { key: string; dispatcher: Dispatcher } | undefined;

  constructor(from: KubeConfig) {
    super();
    this.loadFromOptions({ clusters: from.clusters, contexts: from.contexts, users: from.users, currentContext: from.currentContext });
  }

  override async applySecurityAuthentication(ctx: RequestContext): Promise<void> {
    await super.applySecurityAuthentication(ctx);
    const made = ctx.getDispatcher();
    if (made) ctx.setDispatcher(this.shared(made));
  }

  /**
   * The pool for the current TLS material (the server, its CA, the client certificate and key, read as client-node
   * reads them, files included, so a rotated certificate gets a new pool). The Agent client-node just made for this
   * request has opened nothing yet: it is dropped, or becomes the pool when the material changed (the old pool is
   * closed gracefully: its requests under way finish).
   */
  private shared(made: Dispatcher): Dispatcher {
    const cluster = this.getCurrentCluster();
    const user = this.getCurrentUser();
    const h = createHash("sha256");
    for (const part of [
      cluster?.server,
      String(cluster?.skipTLSVerify ?? ""),
      cluster?.tlsServerName,
      bufferFromFileOrString(cluster?.caFile, cluster?.caData),
      bufferFromFileOrString(user?.certFile, user?.certData),
      bufferFromFileOrString(user?.keyFile, user?.keyData),
    ])
      h.update(part ?? "").update("\0");
    const key = h.digest("hex");
    if (this.pool?.key === key) return this.pool.dispatcher;
    const old = this.pool;
    this.pool = { key, dispatcher: made };
    old?.dispatcher.close().catch(() => undefined);
    return made;
  }
}

/** kc's settings, with API requests that reuse connections. */
export function pooled(kc: KubeConfig): KubeConfig {
  return new PooledKubeConfig(kc);
}
