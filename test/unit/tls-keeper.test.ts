// The webhooks' TlsKeeper against a scripted API (the Secret and the two webhook configurations, with
// resourceVersions and JSON patch `test` ops as the apiserver applies them):
//   - a caBundle reset by a re-apply is written again at the next check (it once compared with what it had
//     written itself, and never looked again until the operator restarted);
//   - two replicas at a CA rotation: the one that read the Secret before the other rotated it never writes the
//     older CA over the newer one.
import { test } from "node:test";
import assert from "node:assert/strict";
import { AdmissionregistrationV1Api, ApiException, type V1MutatingWebhookConfiguration, type V1Secret } from "@kubernetes/client-node";
import pino from "pino";
import { MUTATING_WEBHOOK, TlsKeeper, VALIDATING_WEBHOOK } from "../../src/admission/tls-keeper.ts";
import type { Kube } from "../../src/kube/api.ts";

const DAY_MS = 86_400_000;
const log = pino({ level: "silent" });
const clone = <T>(x: T): T => structuredClone(x);

/** One apiserver: the Secret, both configurations, and every caBundle write in order. */
function apiserver() {
  let rv = 100;
  let secret: V1Secret | undefined;
  const configs = new Map<string, V1MutatingWebhookConfiguration>();
  for (const name of [MUTATING_WEBHOOK, VALIDATING_WEBHOOK])
    configs.set(name, {
      metadata: { name, resourceVersion: String(++rv) },
      webhooks: [{ name: `${name}.stockade.io`, clientConfig: {}, sideEffects: "None", admissionReviewVersions: ["v1"] }],
    });
  /** Every caBundle value written, in order (base64). */
  const writes: string[] = [];
  const read = (name: string) => {
    const c = configs.get(name);
    if (!c) throw new ApiException(404, "NotFound", {}, {});
    return clone(c);
  };
  const patch = ({ name, body }: { name: string; body: { op: string; path: string; value: string }[] }) => {
    const c = clone(configs.get(name));
    if (!c) throw new ApiException(404, "NotFound", {}, {});
    for (const op of body) {
      if (op.op === "test") {
        if (op.path !== "/metadata/resourceVersion" || op.value !== c.metadata?.resourceVersion)
          throw new ApiException(422, "Invalid", { message: `testing value ${op.path} failed: test failed` }, {});
        continue;
      }
      const m = /^\/webhooks\/(\d+)\/clientConfig\/caBundle$/.exec(op.path);
      assert.ok(op.op === "replace" && m, `unexpected op ${JSON.stringify(op)}`);
      c.webhooks![Number(m[1])]!.clientConfig.caBundle = op.value;
      writes.push(op.value);
    }
    c.metadata!.resourceVersion = String(++rv);
    configs.set(name, c);
    return clone(c);
  };
  const admission = {
    readMutatingWebhookConfiguration: async ({ name }: { name: string }) => read(name),
    readValidatingWebhookConfiguration: async ({ name }: { name: string }) => read(name),
    patchMutatingWebhookConfiguration: async (a: Parameters<typeof patch>[0]) => patch(a),
    patchValidatingWebhookConfiguration: async (a: Parameters<typeof patch>[0]) => patch(a),
  };
  const core = {
    readNamespacedSecret: async () => {
      if (!secret) throw new ApiException(404, "NotFound", {}, {});
      return clone(secret);
    },
    createNamespacedSecret: async ({ body }: { body: V1Secret }) => {
      if (secret) throw new ApiException(409, "AlreadyExists", {}, {});
      secret = { ...clone(body), metadata: { ...body.metadata, resourceVersion: String(++rv) } };
      return clone(secret);
    },
    replaceNamespacedSecret: async ({ body }: { body: V1Secret }) => {
      if (body.metadata?.resourceVersion !== secret?.metadata?.resourceVersion) throw new ApiException(409, "Conflict", {}, {});
      secret = { ...clone(body), metadata: { ...body.metadata, resourceVersion: String(++rv) } };
      return clone(secret);
    },
  };
  /** A replica's Kube; `hold` delays the answer of its next Secret read until the returned function is called. */
  const replica = (now: () => Date) => {
    let held: Promise<void> | undefined;
    const kube = {
      core: {
        ...core,
        readNamespacedSecret: async () => {
          const s = await core.readNamespacedSecret();
          const h = held;
          held = undefined;
          await h;
          return s;
        },
      },
      kc: {
        makeApiClient: (api: unknown) => {
          assert.equal(api, AdmissionregistrationV1Api);
          return admission;
        },
      },
    } as unknown as Kube;
    const keeper = new TlsKeeper({
      kube,
      log,
      namespace: "stockade-system",
      secretName: "stockade-webhook-tls",
      hosts: ["127.0.0.1"],
      now,
    });
    return {
      keeper,
      hold: () => {
        let release!: () => void;
        held = new Promise<void>((r) => (release = r));
        return release;
      },
    };
  };
  const bundles = () => [...configs.values()].map((c) => c.webhooks![0]!.clientConfig.caBundle ?? "");
  return {
    configs,
    writes,
    replica,
    bundles,
    reset: (name: string) => {
      const c = configs.get(name)!;
      c.webhooks![0]!.clientConfig.caBundle = "";
      c.metadata!.resourceVersion = String(++rv);
    },
  };
}

const b64 = (s: string) => Buffer.from(s).toString("base64");

test("a caBundle reset by a re-apply is written again at the next check, and the keeper is unanswerable until then", async () => {
  const api = apiserver();
  const { keeper } = api.replica(() => new Date());
  assert.match(keeper.unanswerable ?? "", /not loaded yet/);
  const pair = await keeper.ensure();
  assert.equal(keeper.unanswerable, undefined);
  assert.deepEqual(api.bundles(), [b64(pair.caBundle), b64(pair.caBundle)]);
  // kubectl replace -f manifests/08-webhooks.yaml (or a Helm/Argo sync): caBundle empty again.
  api.reset(MUTATING_WEBHOOK);
  api.reset(VALIDATING_WEBHOOK);
  const again = await keeper.ensure();
  assert.equal(again.caBundle, pair.caBundle, "the same CA: nothing was renewed");
  assert.deepEqual(api.bundles(), [b64(pair.caBundle), b64(pair.caBundle)], "both configurations carry the CA again");
});

test("two replicas at a CA rotation: the one that read the Secret before the rotation never writes the older CA over the newer", async () => {
  const api = apiserver();
  const a = api.replica(() => new Date());
  // B's clock is 3,400 days ahead: the CA (10 years) has less than a year left there, so B rotates it.
  const b = api.replica(() => new Date(Date.now() + 3400 * DAY_MS));
  const old = (await a.keeper.ensure()).caBundle;
  api.reset(MUTATING_WEBHOOK);
  api.reset(VALIDATING_WEBHOOK);
  // A reads the configurations and the Secret (the old CA); its answer is held while B rotates and writes.
  const release = a.hold();
  const aCheck = a.keeper.ensure();
  await new Promise((r) => setTimeout(r, 50));
  const rotated = (await b.keeper.ensure()).caBundle;
  assert.notEqual(rotated, old);
  assert.ok(rotated.includes(old.trim()), "the previous CA stays in the bundle while it is valid");
  const newer = api.writes.indexOf(b64(rotated));
  assert.ok(newer >= 0, "B wrote the new bundle");
  release();
  const aPair = await aCheck;
  assert.equal(aPair.caBundle, rotated, "A, having lost the race, serves what the Secret holds now");
  assert.deepEqual(
    api.writes.slice(newer).filter((w) => w !== b64(rotated)),
    [],
    "no bundle but the Secret's current one was written after B's",
  );
  assert.deepEqual(api.bundles(), [b64(rotated), b64(rotated)]);
});

test("a missing configuration is skipped (nothing sends the apiserver to this replica), the other is written", async () => {
  const api = apiserver();
  api.configs.delete(VALIDATING_WEBHOOK);
  const { keeper } = api.replica(() => new Date());
  const pair = await keeper.ensure();
  assert.equal(keeper.unanswerable, undefined);
  assert.deepEqual(api.bundles(), [b64(pair.caBundle)]);
});

test("the keeper reports when the CA and the serving certificate it hands out expire (for the expiry alert)", async () => {
  const api = apiserver();
  const t0 = new Date("2026-01-01T00:00:00Z");
  const { keeper } = api.replica(() => t0);
  assert.deepEqual(keeper.expiry, {}, "nothing handed out yet");
  await keeper.ensure();
  const day = 86_400_000;
  assert.deepEqual(keeper.expiry, { ca: t0.getTime() + 3650 * day, serving: t0.getTime() + 365 * day });
});
