// Keeps the webhooks' certificates current: reads the Secret, renews what certificates.ts says must be
// renewed (create or replace with a resourceVersion precondition, so two replicas never both win), and
// writes the CA into every webhook of the two configurations. Every replica runs it: the Secret is
// the one copy they all serve from, and a caBundle patch is idempotent.
import { AdmissionregistrationV1Api, type V1Secret } from "@kubernetes/client-node";
import type { Logger } from "pino";
import { isConflict, isNotFound, type Kube } from "../kube/api.ts";
import { caBundleOf, readTlsSecret, renew, renewalNeeded } from "./certificates.ts";

export const MUTATING_WEBHOOK = "stockade-claim-lock";
export const VALIDATING_WEBHOOK = "stockade-force-delete";

export interface TlsKeeperOptions {
  kube: Kube;
  log: Logger;
  namespace: string;
  secretName: string;
  /** Names the serving certificate must carry (the Service's DNS names, and any address the apiserver dials). */
  hosts: string[];
  now?: () => Date;
}

export class TlsKeeper {
  private readonly o: TlsKeeperOptions;
  private bundle = "";

  constructor(o: TlsKeeperOptions) {
    this.o = o;
  }

  /** The serving pair to use now, renewed first if needed. */
  async ensure(): Promise<{ cert: string; key: string; caBundle: string }> {
    const { kube, namespace, secretName, hosts, log } = this.o;
    for (let attempt = 0; ; attempt++) {
      let secret: V1Secret | undefined;
      try {
        secret = await kube.core.readNamespacedSecret({ name: secretName, namespace });
      } catch (err) {
        if (!isNotFound(err)) throw err;
      }
      const data = readTlsSecret(secret);
      const now = this.o.now?.() ?? new Date();
      const need = renewalNeeded(data, hosts, now);
      if (!need) {
        await this.patchCaBundles(caBundleOf(data));
        return { cert: data["tls.crt"]!, key: data["tls.key"]!, caBundle: caBundleOf(data) };
      }
      if (attempt >= 3) throw new Error(`cannot store the webhook certificates in Secret ${namespace}/${secretName}: it keeps changing`);
      log.info(
        { secret: `${namespace}/${secretName}`, renew: need.what, why: need.why },
        `renewing the webhook ${need.what === "ca" ? "CA and serving certificate" : "serving certificate"}: ${need.why}`,
      );
      const next = renew(data, need.what, hosts, now);
      const body: V1Secret = {
        apiVersion: "v1",
        kind: "Secret",
        type: "Opaque",
        metadata: {
          name: secretName,
          namespace,
          labels: { "app.kubernetes.io/name": "stockade", "app.kubernetes.io/component": "webhook-tls" },
          ...(secret ? { resourceVersion: secret.metadata?.resourceVersion } : {}),
        },
        data: Object.fromEntries(Object.entries(next).map(([k, v]) => [k, Buffer.from(v).toString("base64")])),
      };
      try {
        if (secret) await kube.core.replaceNamespacedSecret({ name: secretName, namespace, body });
        else await kube.core.createNamespacedSecret({ namespace, body });
      } catch (err) {
        // Another replica renewed at the same time: use what it stored.
        if (isConflict(err)) continue;
        throw err;
      }
    }
  }

  /** Writes the CA into every webhook of both configurations where it differs; a missing configuration is skipped. */
  private async patchCaBundles(bundle: string): Promise<void> {
    if (bundle === this.bundle) return;
    const api = this.o.kube.kc.makeApiClient(AdmissionregistrationV1Api);
    const b64 = Buffer.from(bundle).toString("base64");
    const missing: string[] = [];
    const patch = (webhooks: { clientConfig: { caBundle?: string } }[] | undefined) =>
      (webhooks ?? []).flatMap((w, i) =>
        w.clientConfig.caBundle === b64 ? [] : [{ op: "replace", path: `/webhooks/${i}/clientConfig/caBundle`, value: b64 }],
      );
    try {
      const m = await api.readMutatingWebhookConfiguration({ name: MUTATING_WEBHOOK });
      const ops = patch(m.webhooks);
      if (ops.length) await api.patchMutatingWebhookConfiguration({ name: MUTATING_WEBHOOK, body: ops });
    } catch (err) {
      if (!isNotFound(err)) throw err;
      missing.push(`MutatingWebhookConfiguration ${MUTATING_WEBHOOK}`);
    }
    try {
      const v = await api.readValidatingWebhookConfiguration({ name: VALIDATING_WEBHOOK });
      const ops = patch(v.webhooks);
      if (ops.length) await api.patchValidatingWebhookConfiguration({ name: VALIDATING_WEBHOOK, body: ops });
    } catch (err) {
      if (!isNotFound(err)) throw err;
      missing.push(`ValidatingWebhookConfiguration ${VALIDATING_WEBHOOK}`);
    }
    if (missing.length)
      this.o.log.error(
        { missing },
        `${missing.join(" and ")} not installed: pods that use guarded claims start without the claim lock and force deletes are not checked (kubectl apply -f manifests/08-webhooks.yaml)`,
      );
    else this.bundle = bundle;
  }
}
