// The admission webhooks, when this replica serves them (cfg.webhookBindAddress): the keeper of their certificates
// and of the configurations' caBundles, the webhook server, and the loop that keeps the two in step.
import { AuthenticationV1Api, type KubeConfig } from "@kubernetes/client-node";
import type { Logger } from "pino";
import { AdmissionServer } from "../admission/server.ts";
import { TlsKeeper } from "../admission/tls-keeper.ts";
import type { Config } from "../config.ts";
import { Kube } from "../kube/api.ts";
import type { Caches } from "../kube/caches.ts";
import type { Metrics } from "../metrics.ts";

/**
 * How often the webhooks' certificates are checked for renewal and the configurations' caBundles against the Secret
 * (three GETs). Both are watched too; this catches what a watch missed. A caBundle reset by a re-apply refuses every
 * guarded pod creation and force delete until it is repaired.
 */
const TLS_CHECK_MS = 60_000;
/** A change to the webhook configurations or their Secret is checked this soon (a rotation changes all three). */
const TLS_CHANGE_DEBOUNCE_MS = 200;

const errorText = (err: unknown) => (err instanceof Error ? err.message : String(err));

export interface WebhookDeps {
  /** The operator's API client: the certificates' Secret and the webhook configurations, and who the operator is. */
  kube: Kube;
  /** Reads only (the request timeout): the webhook server's fresh reads. */
  reads: KubeConfig;
  caches: Caches;
  log: Logger;
  metrics: Metrics;
  /** The operator is stopping: no new attempt. */
  stopping: () => boolean;
}

/** The webhooks of a replica configured to serve them; undefined otherwise. */
export function webhooksFor(cfg: Config, d: WebhookDeps): Webhooks | undefined {
  return cfg.webhookBindAddress ? new Webhooks(cfg, cfg.webhookBindAddress, d) : undefined;
}

export class Webhooks {
  readonly tls: TlsKeeper;
  readonly server: AdmissionServer;
  private served: string | undefined;
  /** A webhook check is running; `again`: something changed meanwhile, check again when it ends. */
  private busy = false;
  private again = false;
  private timer: NodeJS.Timeout | undefined;
  private readonly bind: { host: string; port: number };
  private readonly d: WebhookDeps;

  constructor(cfg: Config, bind: { host: string; port: number }, d: WebhookDeps) {
    this.d = d;
    this.bind = bind;
    this.tls = new TlsKeeper({
      kube: d.kube,
      log: d.log,
      namespace: cfg.leaderElectionNamespace,
      secretName: cfg.webhookSecret,
      hosts: cfg.webhookHosts,
    });
    this.server = new AdmissionServer({ kube: new Kube(d.reads), caches: d.caches, log: d.log, metrics: d.metrics });
  }

  /** Where the webhooks listen (port 0 resolved), once served. */
  get address(): string | undefined {
    return this.served;
  }

  /**
   * Serves the admission webhooks, once certificates are in hand and every webhook configuration carries their CA,
   * and checks both again at every change and every TLS_CHECK_MS. A failure is logged and retried: while the
   * webhooks are unreachable (or not trusted) the apiserver refuses (failurePolicy Fail) the pods they would have gated
   * and the force deletes they would have checked, so nothing starts unprotected; fencing goes on meanwhile.
   */
  async start(): Promise<void> {
    if (this.d.stopping()) return;
    if (this.busy) {
      this.again = true;
      return;
    }
    this.busy = true;
    this.again = false;
    clearTimeout(this.timer);
    let retryMs = TLS_CHECK_MS;
    try {
      // Who this operator is does not change: asked until the apiserver has answered once.
      const [pair, me] = await Promise.all([this.tls.ensure(), this.server.operatorUsers.length ? undefined : this.whoAmI()]);
      if (me) this.server.operatorUsers = [me];
      if (this.served) this.server.reload(pair);
      else {
        this.served = await this.server.listen(this.bind, pair);
        this.d.log.info({ webhooks: this.served, user: this.server.operatorUsers[0] }, `serving the admission webhooks on ${this.served}`);
        this.tls.watch(() => {
          if (this.busy) this.again = true;
          else {
            clearTimeout(this.timer);
            this.timer = setTimeout(() => void this.start(), TLS_CHANGE_DEBOUNCE_MS);
            this.timer.unref();
          }
        });
      }
    } catch (err) {
      retryMs = 30_000;
      this.d.log.error(
        { err: errorText(err) },
        `cannot serve the admission webhooks (retrying in 30 s): ${errorText(err)}; meanwhile the apiserver refuses new pods that use guarded claims and force deletes of guarded pods`,
      );
    } finally {
      this.busy = false;
    }
    if (this.d.stopping()) return;
    if (this.again) {
      this.again = false;
      retryMs = Math.min(retryMs, TLS_CHANGE_DEBOUNCE_MS);
    }
    this.timer = setTimeout(() => void this.start(), retryMs);
    this.timer.unref();
  }

  /** No further check (stopping); the server stays up until close(). */
  stop(): void {
    clearTimeout(this.timer);
    this.tls.stop();
  }

  close(): Promise<void> {
    return this.server.close();
  }

  /** The user this operator acts as (SelfSubjectReview), which the force-delete guard lets through. */
  private async whoAmI(): Promise<string | undefined> {
    try {
      const r = await this.d.kube.kc.makeApiClient(AuthenticationV1Api).createSelfSubjectReview({ body: {} });
      return r.status?.userInfo?.username;
    } catch (err) {
      this.d.log.warn(
        { err: errorText(err) },
        `cannot tell which user this operator is (SelfSubjectReview): its own force deletes after a fence go through the guard's other rules`,
      );
      return undefined;
    }
  }
}
