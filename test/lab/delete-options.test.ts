// Issue 10 asked: can a ValidatingAdmissionPolicy see a DELETE's options (is this a force delete)? On the real
// apiserver, yes: CEL's request.options carries the DeleteOptions, and the webhook's matchConditions (the same
// CEL environment) use it to call Stockade only for gracePeriodSeconds 0. What a policy cannot do is read the
// pod's Node or NodeFence, so the force-delete guard itself is a webhook (src/admission/force-delete.ts).
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import {
  AdmissionregistrationV1Api,
  ApiException,
  PatchStrategy,
  loadAllYaml,
  setHeaderOptions,
  type V1MatchCondition,
  type V1RuleWithOperations,
} from "@kubernetes/client-node";
import { Lab } from "../../lab/lab.ts";
import { repoRoot } from "../../lab/bins.ts";
import { waitFor } from "../../lab/health.ts";
import { refusal } from "../../lab/refusal.ts";

let lab: Lab;
before(async () => {
  lab = await Lab.up({ dir: mkdtempSync(join(tmpdir(), "stockade-delete-options-")), nodes: 1 });
});
after(async () => {
  await lab?.down();
});

test("a ValidatingAdmissionPolicy sees request.options.gracePeriodSeconds of a pod DELETE", async () => {
  const api = lab.kc.makeApiClient(AdmissionregistrationV1Api);
  await api.createValidatingAdmissionPolicy({
    body: {
      metadata: { name: "no-force-delete" },
      spec: {
        failurePolicy: "Fail",
        matchConstraints: { resourceRules: [{ apiGroups: [""], apiVersions: ["v1"], operations: ["DELETE"], resources: ["pods"] }] },
        validations: [
          {
            expression:
              "!(has(request.options) && request.options != null && has(request.options.gracePeriodSeconds) && request.options.gracePeriodSeconds == 0)",
            message: "force delete seen",
          },
        ],
      },
    },
  });
  await api.createValidatingAdmissionPolicyBinding({
    body: {
      metadata: { name: "no-force-delete" },
      spec: { policyName: "no-force-delete", validationActions: ["Deny"], matchResources: { namespaceSelector: {} } },
    },
  });
  const mk = (name: string) =>
    lab.core.createNamespacedPod({ namespace: "default", body: { metadata: { name }, spec: { containers: [{ name: "c", image: "x" }] } } });
  await mk("probe");
  // Policies reach the apiserver's admission a moment after they are created.
  const refused = await waitFor(
    "the policy to refuse a grace-0 delete",
    async () => {
      try {
        await lab.core.deleteNamespacedPod({ name: "probe", namespace: "default", gracePeriodSeconds: 0, dryRun: "All" });
        return undefined;
      } catch (e) {
        return e instanceof ApiException ? e : undefined;
      }
    },
    { timeoutMs: 30_000, intervalMs: 250 },
  );
  assert.equal(refused.code, 422);
  assert.match(String(refused.body), /force delete seen/);
  // A graceful delete (no options, or a grace period) passes the same policy.
  await lab.core.deleteNamespacedPod({ name: "probe", namespace: "default", gracePeriodSeconds: 30, dryRun: "All" });
  await lab.core.deleteNamespacedPod({ name: "probe", namespace: "default", dryRun: "All" });
});

// Issue 26 (8b): a delete is immediate whenever its *effective* grace period is 0 — the pod's own grace period 0
// with none asked, or a pod in phase Failed/Succeeded whatever was asked (CheckGracefulDelete) — and an eviction
// deletes through the store with no DELETE admission of its own. What does admission see of such a plain delete,
// and do the bundle's matchConditions (manifests/08-webhooks.yaml) send all of these to the force-delete webhook?
test("a plain DELETE's effective grace period as admission sees it, and the bundle's matchConditions on it", async () => {
  const api = lab.kc.makeApiClient(AdmissionregistrationV1Api);
  const bundle = loadAllYaml(readFileSync(join(repoRoot, "manifests/08-webhooks.yaml"), "utf8")) as {
    kind: string;
    webhooks: { name: string; rules: V1RuleWithOperations[]; matchConditions: V1MatchCondition[] }[];
  }[];
  const guard = bundle.find((d) => d.kind === "ValidatingWebhookConfiguration")!.webhooks[0]!;
  const bind = async (name: string) =>
    api.createValidatingAdmissionPolicyBinding({
      body: { metadata: { name }, spec: { policyName: name, validationActions: ["Deny"], matchResources: { namespaceSelector: {} } } },
    });
  // 1. What admission sees: the options as sent, echoed back in the refusal (only for pods labelled echo=true).
  await api.createValidatingAdmissionPolicy({
    body: {
      metadata: { name: "echo-delete-options" },
      spec: {
        failurePolicy: "Fail",
        matchConstraints: {
          resourceRules: [{ apiGroups: [""], apiVersions: ["v1"], operations: ["DELETE"], resources: ["pods"] }],
          objectSelector: { matchLabels: { echo: "true" } },
        },
        validations: [
          {
            expression: "false",
            messageExpression:
              "'grace seen: ' + (has(request.options) && request.options != null && has(request.options.gracePeriodSeconds) ? string(request.options.gracePeriodSeconds) : 'unset')",
          },
        ],
      },
    },
  });
  await bind("echo-delete-options");
  // 2. The bundle's webhook, as a policy with its rules and matchConditions: refuses exactly what would be sent.
  await api.createValidatingAdmissionPolicy({
    body: {
      metadata: { name: "bundle-force-delete-match" },
      spec: {
        failurePolicy: "Fail",
        // Only this test's pods (an objectSelector would not match an eviction: its object is the Eviction).
        matchConstraints: { resourceRules: guard.rules.map((r) => ({ ...r, scope: undefined })) },
        matchConditions: [{ name: "this-test", expression: "request.name.startsWith('m-')" }, ...guard.matchConditions],
        validations: [{ expression: "false", message: "the force-delete webhook would be called" }],
      },
    },
  });
  await bind("bundle-force-delete-match");

  // Bound to a node no kubelet serves: nothing changes their status but this test.
  const mk = async (name: string, labels: Record<string, string>, grace: number, phase?: string) => {
    await lab.core.createNamespacedPod({
      namespace: "default",
      body: {
        metadata: { name, labels: { ...labels, "stockade.io/guarded": "true" } },
        spec: { nodeName: "ghost", terminationGracePeriodSeconds: grace, containers: [{ name: "c", image: "x" }] },
      },
    });
    if (phase)
      await lab.core.patchNamespacedPodStatus(
        { name, namespace: "default", body: { status: { phase } } },
        setHeaderOptions("Content-Type", PatchStrategy.MergePatch),
      );
  };
  await mk("echo-zero", { echo: "true" }, 0);
  await mk("echo-failed", { echo: "true" }, 30, "Failed");
  await mk("echo-running", { echo: "true" }, 30);
  const seen = async (name: string, gracePeriodSeconds?: number) =>
    (await refusal(lab.core.deleteNamespacedPod({ name, namespace: "default", gracePeriodSeconds, dryRun: "All" })))?.message;
  // The first test's policy refuses grace-0 deletes too: out of the way first.
  await api.deleteValidatingAdmissionPolicyBinding({ name: "no-force-delete" });
  await api.deleteValidatingAdmissionPolicy({ name: "no-force-delete" });
  await waitFor(
    "the echo policy in admission, the first test's gone",
    async () => ((await seen("echo-running")) ?? "").includes("grace seen") && ((await seen("echo-zero")) ?? "").includes("grace seen"),
    { timeoutMs: 30_000, intervalMs: 250 },
  );
  const echoes = {
    zeroPlain: await seen("echo-zero"),
    failedPlain: await seen("echo-failed"),
    failed30: await seen("echo-failed", 30),
    runningPlain: await seen("echo-running"),
  };
  console.log(`what admission sees of a DELETE's gracePeriodSeconds: ${JSON.stringify(echoes)}`);
  // Admission runs after the pod strategy defaulted the options (the store's Delete calls rest.BeforeDelete, then
  // the validating admission), so it sees the effective grace period: 0 for a plain delete of a pod whose own is 0,
  // and 0 for a Failed pod whatever was asked. The bundle's matchCondition reads the stored pod as well.
  assert.match(echoes.zeroPlain ?? "", /grace seen: 0$/);
  assert.match(echoes.failedPlain ?? "", /grace seen: 0$/);
  assert.match(echoes.failed30 ?? "", /grace seen: 0$/);
  assert.match(echoes.runningPlain ?? "", /grace seen: 30$/);

  await mk("m-zero", {}, 0);
  await mk("m-failed", {}, 30, "Failed");
  await mk("m-succeeded", {}, 30, "Succeeded");
  await mk("m-running", {}, 30);
  const matched = async (name: string, gracePeriodSeconds?: number) =>
    /would be called/.test(
      (await refusal(lab.core.deleteNamespacedPod({ name, namespace: "default", gracePeriodSeconds, dryRun: "All" })))?.message ?? "",
    );
  await waitFor("the bundle's policy in admission", () => matched("m-running", 0), { timeoutMs: 30_000, intervalMs: 250 });
  assert.equal(await matched("m-zero"), true, "a plain delete of a pod whose own grace period is 0");
  assert.equal(await matched("m-failed"), true, "a plain delete of a Failed pod");
  assert.equal(await matched("m-failed", 30), true, "a Failed pod with grace 30 asked: deleted at once all the same");
  assert.equal(await matched("m-succeeded"), true);
  assert.equal(await matched("m-zero", 10), false, "an explicit grace period wins over the pod's");
  assert.equal(await matched("m-running"), false, "a graceful delete");
  assert.equal(await matched("m-running", 30), false);
  // Every eviction: its effective grace depends on the pod's phase, which the Eviction does not carry.
  for (const deleteOptions of [undefined, { gracePeriodSeconds: 30 }, { gracePeriodSeconds: 0 }]) {
    const r = await refusal(
      lab.core.createNamespacedPodEviction({
        name: "m-running",
        namespace: "default",
        dryRun: "All",
        body: { metadata: { name: "m-running", namespace: "default" }, ...(deleteOptions ? { deleteOptions } : {}) },
      }),
    );
    assert.match(r?.message ?? "", /would be called/, `eviction ${JSON.stringify(deleteOptions)}`);
  }
});
