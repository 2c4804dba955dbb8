// The node agent records' admission policy as shipped (manifests/node-agent/03-admission-policy.yaml), for tests.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { loadAllYaml, type V1ValidatingAdmissionPolicy, type V1ValidatingAdmissionPolicyBinding } from "@kubernetes/client-node";

const file = join(import.meta.dirname, "../../manifests/node-agent/03-admission-policy.yaml");

/** A fresh copy of the shipped policy and binding. */
export function shippedRecordPolicy(): { policy: V1ValidatingAdmissionPolicy; binding: V1ValidatingAdmissionPolicyBinding } {
  const [policy, binding] = (loadAllYaml(readFileSync(file, "utf8")) as object[]).filter(Boolean) as [
    V1ValidatingAdmissionPolicy,
    V1ValidatingAdmissionPolicyBinding,
  ];
  return { policy, binding };
}
