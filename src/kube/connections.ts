// API requests that share their connections. client-node 2.0 builds a new undici Agent, and so opens a new TCP
// connection and TLS handshake, for every request (createDispatcher is called from applySecurityAuthentication and
// not cached, unlike the https.Agent of its watch path). Under load, on a machine whose CPU the apiserver needs,
// that handshake cost more than the request (issue 12: a GET answered in 0.15 s by the apiserver took 1.8 s).
// A PooledKubeConfig keeps one Agent (one keep-alive pool) per TLS identity, on HTTP/1.1: undici 8 negotiates
// HTTP/2 by default, and a shared HTTP/2 session broken by a network fault (a TLS "bad record mac" after bytes were
// dropped) stayed in the pool and failed every later request with "The session has been destroyed" — minutes
// after the network was back (test/lab/informer.test.ts, the half-open connection). A broken HTTP/1.1 socket is
// dropped and the next request opens another. Idle pooled sockets do not keep a process alive.
// Each pool's connections share one TLS context: tls.connect otherwise builds one per connection, parsing the CA
// bundle and the key each time, and a burst of writes opens dozens of connections (issue 12: 0.46 s of the
// operator's CPU in one burst of 50 fences at 5,000 nodes).
import { createHash } from "node:crypto";
import tls from "node:tls";
import { KubeConfig, bufferFromFileOrString, type RequestContext } from "@kubernetes/client-node";
import { Agent } from "undici";

/** A copy of a KubeConfig whose API requests reuse connections. */
export class PooledKubeConfig extends KubeConfig {
  private pool: { key: string; dispatcher: Agent } | undefined;

  constructor(from: KubeConfig) {
    super();
    this.loadFromOptions({ clusters: from.clusters, contexts: from.contexts, users: from.users, currentContext: from.currentContext });
  }

  override async applySecurityAuthentication(ctx: RequestContext): Promise<void> {
    await super.applySecurityAuthentication(ctx);
    // Only where client-node made a plain Agent (TLS to the server): through a proxy, its own dispatcher stays.
    const pool = ctx.getDispatcher() ? this.shared() : undefined;
    if (pool) ctx.setDispatcher(pool);
  }

  /**
   * The pool for the current TLS material (the server, its CA, the client certificate and key, read as client-node
   * reads them, files included, so a rotated certificate gets a new pool; the old one is closed gracefully).
   */
  private shared(): Agent | undefined {
    const cluster = this.getCurrentCluster();
    const user = this.getCurrentUser();
    const material = {
      ca: bufferFromFileOrString(cluster?.caFile, cluster?.caData) ?? undefined,
      cert: bufferFromFileOrString(user?.certFile, user?.certData) ?? undefined,
      key: bufferFromFileOrString(user?.keyFile, user?.keyData) ?? undefined,
      ...(cluster?.skipTLSVerify ? { rejectUnauthorized: false } : {}),
      ...(cluster?.tlsServerName ? { servername: cluster.tlsServerName } : {}),
    };
    const o = this.createDispatcherOptions(cluster, material);
    if (o.type !== "agent") return undefined;
    const h = createHash("sha256").update(cluster?.server ?? "");
    for (const part of [material.ca, material.cert, material.key, String(cluster?.skipTLSVerify ?? ""), cluster?.tlsServerName])
      h.update("\0").update(part ?? "");
    const key = h.digest("hex");
    if (this.pool?.key === key) return this.pool.dispatcher;
    const old = this.pool;
    // Verification is unchanged: the CA is the context's, and rejectUnauthorized and servername stay in `connect`.
    const secureContext = tls.createSecureContext({ ca: material.ca, cert: material.cert, key: material.key });
    this.pool = { key, dispatcher: new Agent({ connect: { ...o.connect, secureContext }, allowH2: false }) };
    old?.dispatcher.close().catch(() => undefined);
    return this.pool.dispatcher;
  }
}

/** kc's settings, with API requests that reuse connections. */
export function pooled(kc: KubeConfig): KubeConfig {
  return new PooledKubeConfig(kc);
}
