// Keeps the webhooks' certificates current: reads the Secret, renews what certificates.ts says must be
// renewed (create or replace with a resourceVersion precondition, so two replicas never both win), and
// writes the CA into every webhook of the two configurations. Every replica runs it: the Secret is
// the one copy they all serve from.
//
// What the apiserver holds is compared at every check, never what this replica wrote last: a `kubectl replace`
// or `apply` of manifests/08-webhooks.yaml, or a Helm or Argo sync, resets caBundle to empty, and until it is
// written again every guarded pod creation and every force delete (Stockade's own too) is refused. The
// configurations and the Secret are watched (a change is repaired at once) and checked every minute anyway.
//
// Two replicas at a CA rotation: A read the Secret before B rotated it. A caBundle is written only by a JSON
// patch whose first op tests the configuration's resourceVersion, read *before* the Secret: a write by B after
// A's read of the configuration fails A's test (A reads both again), and if B's write came before, A's read of
// the Secret, made after it, shows B's CA. So no replica ever replaces a bundle with one that is not the Secret's
// current CA as of after that bundle was written.
import {
  AdmissionregistrationV1Api,
  CoreV1Api,
  type KubernetesListObject,
  type KubernetesObject,
  type V1MutatingWebhookConfiguration,
  type V1Secret,
  type V1ValidatingWebhookConfiguration,
} from "@kubernetes/client-node";
import type { Logger } from "pino";
import { isConflict, isNotFound, statusCode, type Kube } from "../kube/api.ts";
import { Informer } from "../runtime/informer.ts";
import { caBundleOf, certificateExpiries, readTlsSecret, renew, renewalNeeded } from "./certificates.ts";
import { MUTATING_WEBHOOK, VALIDATING_WEBHOOK } from "../kube/webhook-names.ts";

export { MUTATING_WEBHOOK, VALIDATING_WEBHOOK };

/** Tries of one check: a renewal or a caBundle write that lost a race reads everything again. */
const MAX_TRIES = 5;

export interface TlsKeeperOptions {
  kube: Kube;
  log: Logger;
  namespace: string;
  secretName: string;
  /** Names the serving certificate must carry (the Service's DNS names, and any address the apiserver dials). */
  hosts: string[];
  now?: () => Date;
}

type Configuration = V1MutatingWebhookConfiguration | V1ValidatingWebhookConfiguration;
type Kind = "MutatingWebhookConfiguration" | "ValidatingWebhookConfiguration";
const CONFIGURATIONS: readonly [Kind, string][] = [
  ["MutatingWebhookConfiguration", MUTATING_WEBHOOK],
  ["ValidatingWebhookConfiguration", VALIDATING_WEBHOOK],
];

/** Why the configuration's webhooks do not all carry `b64`, or undefined when they do. */
function mismatch(kind: Kind, c: Configuration, b64: string | undefined): string | undefined {
  const off = (c.webhooks ?? []).filter((w) => w.clientConfig.caBundle !== b64);
  if (!off.length) return undefined;
  const what = off.map((w) => `${w.name} (${w.clientConfig.caBundle ? "another CA" : "empty"})`).join(", ");
  return `${kind} ${c.metadata?.name}: the caBundle of ${what} is not the CA this replica's certificate is signed by`;
}

export class TlsKeeper {
  private readonly o: TlsKeeperOptions;
  private readonly api: AdmissionregistrationV1Api;
  /** The caBundle (base64) of the pair handed out last, i.e. what the webhook server serves under. */
  private served: string | undefined;
  /** Why the apiserver cannot trust this replica's certificate now (as last seen), or undefined when it can. */
  private problem: string | undefined = "the webhook certificate is not loaded yet";
  private missing = "";
  private expiries: { ca?: number; serving?: number } = {};
  private informers: Informer<KubernetesObject>[] = [];

  constructor(o: TlsKeeperOptions) {
    this.o = o;
    this.api = o.kube.kc.makeApiClient(AdmissionregistrationV1Api);
  }

  /**
   * Why this replica cannot answer the apiserver correctly (its certificate not loaded, or a webhook configuration
   * whose caBundle is not the CA it serves under), or undefined when it can. Readiness: a replica that cannot answer
   * must not get the Service's traffic.
   */
  get unanswerable(): string | undefined {
    return this.problem;
  }

  /** When the CA and the serving certificate handed out last expire (ms since the epoch): exported for alerts. */
  get expiry(): { ca?: number; serving?: number } {
    return this.expiries;
  }

  /**
   * The serving pair to use now, renewed first if needed, once every webhook of both configurations carries its CA
   * (written where it differs). Call it at every check: it compares with what the apiserver holds.
   */
  async ensure(): Promise<{ cert: string; key: string; caBundle: string }> {
    const { kube, namespace, secretName, hosts, log } = this.o;
    for (let attempt = 1; ; attempt++) {
      const last = attempt >= MAX_TRIES;
      // The configurations first, then the Secret (see the top of this file for why the order matters).
      const configs = await Promise.all(CONFIGURATIONS.map(([kind, name]) => this.read(kind, name)));
      let secret: V1Secret | undefined;
      try {
        secret = await kube.core.readNamespacedSecret({ name: secretName, namespace });
      } catch (err) {
        if (!isNotFound(err)) throw err;
      }
      const data = readTlsSecret(secret);
      const now = this.o.now?.() ?? new Date();
      const need = renewalNeeded(data, hosts, now);
      if (need) {
        if (last) throw new Error(`cannot store the webhook certificates in Secret ${namespace}/${secretName}: it keeps changing`);
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
          if (!isConflict(err)) throw err;
        }
        continue;
      }
      const bundle = caBundleOf(data);
      const b64 = Buffer.from(bundle).toString("base64");
      let raced = false;
      for (const [i, [kind, name]] of CONFIGURATIONS.entries()) {
        const c = configs[i];
        if (!c || !mismatch(kind, c, b64)) continue;
        try {
          await this.patch(kind, name, c, b64);
          log.info({ [kind]: name }, `wrote the webhook CA into the caBundle of ${kind} ${name}`);
        } catch (err) {
          // Changed since it was read (another replica, or a re-apply): read everything again.
          if (!(isConflict(err) || statusCode(err) === 422) || last) throw err;
          raced = true;
        }
      }
      if (raced) continue;
      this.reportMissing(CONFIGURATIONS.filter((_, i) => !configs[i]).map(([kind, name]) => `${kind} ${name}`));
      this.served = b64;
      this.expiries = certificateExpiries(data);
      this.problem = undefined;
      return { cert: data["tls.crt"]!, key: data["tls.key"]!, caBundle: bundle };
    }
  }

  /**
   * Watches the two configurations and the Secret (by name), calling `onChange` at each change so that the caller
   * runs ensure() again. A configuration whose caBundle is not what this replica serves under makes it unanswerable
   * at once, before the repair.
   */
  watch(onChange: () => void): void {
    if (this.informers.length) return;
    const { kube, namespace, secretName, log } = this.o;
    const core = kube.kc.makeApiClient(CoreV1Api);
    const onError = (path: string) => (err: unknown, ms: number) =>
      log.warn(
        { watch: path, err: (err as Error)?.message ?? String(err), restartInMs: ms },
        `watch on ${path} failed; restarting in ${ms} ms`,
      );
    type Page = { limit: number; _continue?: string };
    const by = (name: string) => `metadata.name=${name}`;
    const mk = <T extends KubernetesObject>(
      path: string,
      name: string,
      list: (p: Page & { fieldSelector: string }) => Promise<KubernetesListObject<T>>,
    ) =>
      new Informer<T>({
        kc: kube.kc,
        path,
        fieldSelector: by(name),
        list: (page) => list({ ...page, fieldSelector: by(name) }),
        onError: onError(path),
      });
    const mutating = mk<V1MutatingWebhookConfiguration>(
      "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations",
      MUTATING_WEBHOOK,
      (p) => this.api.listMutatingWebhookConfiguration(p),
    );
    const validating = mk<V1ValidatingWebhookConfiguration>(
      "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations",
      VALIDATING_WEBHOOK,
      (p) => this.api.listValidatingWebhookConfiguration(p),
    );
    const secret = mk<V1Secret>(`/api/v1/namespaces/${namespace}/secrets`, secretName, (p) =>
      core.listNamespacedSecret({ namespace, ...p }),
    );
    const configChanged = (kind: Kind, gone: boolean) => (c: Configuration) => {
      // A deleted configuration sends the apiserver nowhere: nothing this replica could answer wrongly.
      const why = gone || this.served === undefined ? undefined : mismatch(kind, c, this.served);
      if (why && !this.problem) {
        this.problem = why;
        log.warn({ [kind]: c.metadata?.name }, `${why}: not ready until it is repaired`);
      }
      onChange();
    };
    for (const verb of ["add", "update", "delete"] as const) {
      mutating.on(verb, configChanged("MutatingWebhookConfiguration", verb === "delete"));
      validating.on(verb, configChanged("ValidatingWebhookConfiguration", verb === "delete"));
      secret.on(verb, () => onChange());
    }
    this.informers = [mutating, validating, secret] as Informer<KubernetesObject>[];
    for (const i of this.informers) void i.start();
  }

  stop(): void {
    for (const i of this.informers) i.stop();
    this.informers = [];
  }

  private async read(kind: Kind, name: string): Promise<Configuration | undefined> {
    try {
      return kind === "MutatingWebhookConfiguration"
        ? await this.api.readMutatingWebhookConfiguration({ name })
        : await this.api.readValidatingWebhookConfiguration({ name });
    } catch (err) {
      if (isNotFound(err)) return undefined;
      throw err;
    }
  }

  /** Writes `b64` into every webhook of `c` whose caBundle differs, only if `c` is still the version read. */
  private async patch(kind: Kind, name: string, c: Configuration, b64: string): Promise<void> {
    const body = [
      { op: "test", path: "/metadata/resourceVersion", value: c.metadata?.resourceVersion ?? "" },
      ...(c.webhooks ?? []).flatMap((w, i) =>
        w.clientConfig.caBundle === b64 ? [] : [{ op: "replace", path: `/webhooks/${i}/clientConfig/caBundle`, value: b64 }],
      ),
    ];
    if (kind === "MutatingWebhookConfiguration") await this.api.patchMutatingWebhookConfiguration({ name, body });
    else await this.api.patchValidatingWebhookConfiguration({ name, body });
  }

  /** Says, once per change, which configuration is not installed. */
  private reportMissing(missing: string[]): void {
    const text = missing.join(" and ");
    if (text === this.missing) return;
    this.missing = text;
    if (missing.length)
      this.o.log.error(
        { missing },
        `${text} not installed: pods that use guarded claims start without the claim lock and force deletes are not checked (kubectl apply -f manifests/08-webhooks.yaml)`,
      );
    else this.o.log.info("both webhook configurations are installed and carry the webhook CA");
  }
}
