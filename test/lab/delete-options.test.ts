// Issue 10 asked: can a ValidatingAdmissionPolicy see a DELETE's options (is this a force delete)? On the real
// apiserver, yes: CEL's request.options carries the DeleteOptions, and the webhook's matchConditions (the same
// CEL environment) use it to call Stockade only for gracePeriodSeconds 0. What a policy cannot do is read the
// pod's Node or NodeFence, so the force-delete guard itself is a webhook (src/admission/force-delete.ts).
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { AdmissionregistrationV1Api, ApiException } from "@kubernetes/client-node";
import { Lab } from "../../lab/lab.ts";
import { waitFor } from "../../lab/health.ts";

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
