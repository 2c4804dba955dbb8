// The admission webhooks' parts, when this replica serves them (cfg.webhookBindAddress): the keeper of their
// certificates and of the configurations' caBundles, and the webhook server.
import type { KubeConfig } from "@kubernetes/client-node";
import type { Logger } from "pino";
import { AdmissionServer } from "../admission/server.ts";
import { TlsKeeper } from "../admission/tls-keeper.ts";
import type { Config } from "../config.ts";
import { Kube } from "../kube/api.ts";
import type { Caches } from "../kube/caches.ts";
import type { Metrics } from "../metrics.ts";

export interface Admission {
  tls: TlsKeeper | undefined;
  webhooks: AdmissionServer | undefined;
}

export function admissionFor(cfg: Config, d: { kube: Kube; reads: KubeConfig; caches: Caches; log: Logger; metrics: Metrics }): Admission {
  if (!cfg.webhookBindAddress) return { tls: undefined, webhooks: undefined };
  const tls = new TlsKeeper({
    kube: d.kube,
    log: d.log,
    namespace: cfg.leaderElectionNamespace,
    secretName: cfg.webhookSecret,
    hosts: cfg.webhookHosts,
  });
  const webhooks = new AdmissionServer({ kube: new Kube(d.reads), caches: d.caches, log: d.log, metrics: d.metrics });
  return { tls, webhooks };
}
