// The webhooks' caBundle on a real apiserver (kwok lab, the bundle's webhook configurations pointed at loopback):
//   - a `kubectl replace` of the configurations (what a re-apply, a Helm or an Argo sync does) empties caBundle,
//     and every pod that mounts a claim is refused until it is written again: the operator repairs it at once;
//   - two replicas at a CA rotation: the one that read the Secret before the other rotated the CA never writes the
//     older bundle over the newer (the apiserver refuses its JSON patch's resourceVersion test; it reads again);
//   - a replica whose configurations no longer carry its CA says so (readiness) as soon as its watch sees it.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { join } from "node:path";
import { AdmissionregistrationV1Api, Watch, type V1MutatingWebhookConfiguration } from "@kubernetes/client-node";
import pino from "pino";
import { Bed, SECRETS_NS } from "../../lab/bed.ts";
import { waitFor } from "../../lab/health.ts";
import { MUTATING_WEBHOOK, TlsKeeper, VALIDATING_WEBHOOK } from "../../src/admission/tls-keeper.ts";
import { Kube } from "../../src/kube/api.ts";

const DAY_MS = 86_400_000;
const SECRET = "stockade-webhook-tls";
const b64 = (s: string) => Buffer.from(s).toString("base64");

describe("webhook TLS: the caBundle on a real apiserver", () => {
  let bed: Bed;
  let api: AdmissionregistrationV1Api;

  before(async () => {
    bed = await Bed.up({ nodes: 1, name: "webhook-tls", runtime: "kwok", webhooks: true });
    api = bed.lab.kc.makeApiClient(AdmissionregistrationV1Api);
    await bed.startOperator();
  });
  after(async () => {
    await bed?.killOperator("SIGTERM");
    await bed?.down();
  });

  const bundles = async () => [
    ...((await api.readMutatingWebhookConfiguration({ name: MUTATING_WEBHOOK })).webhooks ?? []).map((w) => w.clientConfig.caBundle ?? ""),
    ...((await api.readValidatingWebhookConfiguration({ name: VALIDATING_WEBHOOK })).webhooks ?? []).map(
      (w) => w.clientConfig.caBundle ?? "",
    ),
  ];
  const resetBundles = () => bed.kubectl("replace", "-f", join(bed.lab.dir, "webhooks.json"));
  /** A pod that mounts a claim: the claim-lock webhook is called for it (and gates it; the claim need not exist). */
  const createPod = (name: string) =>
    bed.lab.core.createNamespacedPod({
      namespace: "default",
      body: {
        metadata: { name },
        spec: {
          containers: [{ name: "c", image: "registry.k8s.io/pause:3.10" }],
          volumes: [{ name: "v", persistentVolumeClaim: { claimName: "tls-data" } }],
        },
      },
    });
  const keeper = (kube: Kube, now = () => new Date()) =>
    new TlsKeeper({ kube, log: pino({ level: "silent" }), namespace: SECRETS_NS, secretName: SECRET, hosts: ["127.0.0.1"], now });

  test("a kubectl replace that empties the caBundle is repaired within seconds, and pods that mount a claim are created again", async () => {
    await waitFor("caBundle written", async () => (await bundles()).every(Boolean) || undefined, { timeoutMs: 30_000, intervalMs: 250 });
    await createPod("before-reset");
    await resetBundles();
    const t0 = performance.now();
    await waitFor("caBundle written again", async () => (await bundles()).every(Boolean) || undefined, {
      timeoutMs: 15_000,
      intervalMs: 100,
    });
    const repairedMs = performance.now() - t0;
    assert.ok(repairedMs < 15_000, `repaired after ${Math.round(repairedMs)} ms`);
    // The apiserver picks the configuration up from its own watch: a create may still be refused for a moment.
    await waitFor("a pod that mounts a claim is created", () => createPod("after-reset").then(() => true), {
      timeoutMs: 15_000,
      intervalMs: 250,
    });
    console.log(`caBundle repaired ${Math.round(repairedMs)} ms after the replace`);
  });

  test("two replicas at a CA rotation: the one that read the Secret before the rotation never writes the older CA over the newer", async () => {
    await bed.killOperator("SIGTERM"); // from here only the two keepers write
    const kube = new Kube(bed.lab.kc);
    // A's Secret reads are held, once armed, until released: A has then read the configurations and the old Secret.
    let held: { readDone: () => void; release: Promise<void> } | undefined;
    const core = new Proxy(kube.core, {
      get(target, prop, receiver) {
        const v = Reflect.get(target, prop, receiver) as unknown;
        if (prop !== "readNamespacedSecret" || typeof v !== "function") return typeof v === "function" ? v.bind(target) : v;
        return async (...args: unknown[]) => {
          const secret = await (v as (...a: unknown[]) => Promise<unknown>).apply(target, args);
          const h = held;
          held = undefined;
          if (h) {
            h.readDone();
            await h.release;
          }
          return secret;
        };
      },
    });
    const a = keeper(Object.create(kube, { core: { value: core } }) as Kube);
    // B's clock is 3,400 days ahead: the 10-year CA has less than a year left there, so B rotates it.
    const b = keeper(kube, () => new Date(Date.now() + 3400 * DAY_MS));
    const old = (await a.ensure()).caBundle;
    await resetBundles();

    // Every caBundle value the mutating configuration takes from here on, in order.
    const seen: string[] = [];
    const watching = await new Watch(bed.lab.kc).watch(
      "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations",
      { fieldSelector: `metadata.name=${MUTATING_WEBHOOK}` },
      (_type: string, o: V1MutatingWebhookConfiguration) => seen.push(o.webhooks?.[0]?.clientConfig.caBundle ?? ""),
      () => {},
    );
    try {
      let readDone!: () => void;
      const read = new Promise<void>((r) => (readDone = r));
      let release!: () => void;
      held = { readDone, release: new Promise<void>((r) => (release = r)) };
      const aCheck = a.ensure();
      await read;
      const rotated = (await b.ensure()).caBundle;
      assert.notEqual(rotated, old, "B rotated the CA");
      release();
      assert.equal((await aCheck).caBundle, rotated, "A, having lost the race, serves what the Secret holds now");
      await waitFor("the watch saw the rotation", () => seen.includes(b64(rotated)) || undefined, { timeoutMs: 10_000, intervalMs: 100 });
      await new Promise((r) => setTimeout(r, 1_000)); // anything A could still have written
      const after = seen.slice(seen.indexOf(b64(rotated)));
      assert.deepEqual(
        after.filter((x) => x !== b64(rotated)),
        [],
        "no bundle but the Secret's current one was written after the rotation",
      );
      assert.ok(!seen.includes(b64(old)), "the older bundle was never written over the emptied one either: A's write failed its test");
      assert.deepEqual(await bundles(), [b64(rotated), b64(rotated)]);
    } finally {
      watching.abort();
    }
  });

  test("a replica's watch says at once that a configuration no longer carries its CA (readiness), and ensure() repairs it", async () => {
    const c = keeper(new Kube(bed.lab.kc));
    await c.ensure();
    assert.equal(c.unanswerable, undefined);
    let changes = 0;
    c.watch(() => changes++);
    try {
      await waitFor("the watches' first lists", () => changes >= 3 || undefined, { timeoutMs: 10_000, intervalMs: 50 });
      await resetBundles();
      const why = await waitFor("not answerable", () => c.unanswerable, { timeoutMs: 10_000, intervalMs: 50 });
      assert.match(why, /caBundle of .* \(empty\)/);
      await c.ensure();
      assert.equal(c.unanswerable, undefined);
      assert.ok((await bundles()).every(Boolean));
    } finally {
      c.stop();
    }
  });
});
