// The admission policy of the bundle (manifests/06-admission-policy.yaml) agrees with the code and the RBAC,
// and the operator's check of it (src/kube/admission-check.ts) finds the shipped policy in force and says what
// is wrong with a missing or weakened one. The policy's behaviour on a real apiserver: test/lab/admission.test.ts.
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import {
  loadAllYaml,
  type V1ClusterRole,
  type V1ClusterRoleBinding,
  type V1ValidatingAdmissionPolicy,
  type V1ValidatingAdmissionPolicyBinding,
} from "@kubernetes/client-node";
import { CONFIRMED_OFF_ANNOTATION } from "../../src/agents/manual.ts";
import { GROUP } from "../../src/api/v1alpha1.ts";
import { ADMISSION_BINDING, ADMISSION_POLICY, admissionPolicyProblems, ATTEST_VERB, CONFIRM_VERB } from "../../src/kube/admission-check.ts";

const manifests = join(import.meta.dirname, "../../manifests");
const load = <T>(file: string) => (loadAllYaml(readFileSync(join(manifests, file), "utf8")) as T[]).filter(Boolean);
const [policy, binding] = load<V1ValidatingAdmissionPolicy & V1ValidatingAdmissionPolicyBinding>("06-admission-policy.yaml") as [
  V1ValidatingAdmissionPolicy,
  V1ValidatingAdmissionPolicyBinding,
];
const copy = <T>(o: T): T => structuredClone(o);

describe("manifests/06-admission-policy.yaml", () => {
  test("names the objects, the annotation and the verbs the code uses", () => {
    assert.equal(policy.kind, "ValidatingAdmissionPolicy");
    assert.equal(policy.metadata?.name, ADMISSION_POLICY);
    assert.equal(binding.kind, "ValidatingAdmissionPolicyBinding");
    assert.equal(binding.metadata?.name, ADMISSION_BINDING);
    assert.equal(binding.spec?.policyName, ADMISSION_POLICY);
    const cel = JSON.stringify(policy.spec);
    // The manual agent reads this annotation: a policy guarding another key would guard nothing.
    assert.equal(CONFIRMED_OFF_ANNOTATION, "stockade.io/confirmed-off");
    assert.ok(cel.includes(`'${CONFIRMED_OFF_ANNOTATION}'`));
    for (const verb of [ATTEST_VERB, CONFIRM_VERB]) {
      assert.ok(cel.includes(`authorizer.group('${GROUP}').resource('nodefences').name(object.metadata.name).check('${verb}')`), verb);
      assert.ok(cel.includes(`needs the RBAC verb \\"${verb}\\"`), `the message names the verb ${verb}`);
    }
  });

  test("the operator's check finds the shipped policy in force", () => {
    assert.deepEqual(admissionPolicyProblems(policy, binding), []);
  });
});

describe("RBAC: who gets the custom verbs", () => {
  const objects = [...load<V1ClusterRole & V1ClusterRoleBinding>("02-rbac.yaml"), ...load<V1ClusterRole>("07-user-roles.yaml")];
  const roles = objects.filter((o) => o.kind === "ClusterRole") as V1ClusterRole[];
  const holders = (verb: string) =>
    roles
      .filter((r) => r.rules?.some((x) => x.apiGroups?.includes(GROUP) && x.resources?.includes("nodefences") && x.verbs.includes(verb)))
      .map((r) => r.metadata?.name);

  test("attest: only the operator's ClusterRole, bound to its ServiceAccount and nothing else", () => {
    assert.deepEqual(holders(ATTEST_VERB), ["stockade"]);
    const bindings = objects.filter((o) => o.kind === "ClusterRoleBinding" && (o as V1ClusterRoleBinding).roleRef.name === "stockade");
    assert.deepEqual(
      bindings.flatMap((b) => (b as V1ClusterRoleBinding).subjects ?? []).map((s) => `${s.kind} ${s.namespace}/${s.name}`),
      ["ServiceAccount stockade-system/stockade"],
    );
  });

  test("confirm: only the role for people who confirm manual fences; the fence admin role asks for fences without it", () => {
    assert.deepEqual(holders(CONFIRM_VERB), ["stockade-fence-confirmer"]);
    const admin = roles.find((r) => r.metadata?.name === "stockade-fence-admin");
    const nodefenceVerbs = admin?.rules?.filter((r) => r.resources?.includes("nodefences")).flatMap((r) => r.verbs);
    assert.ok(nodefenceVerbs?.includes("create") && nodefenceVerbs.includes("patch"), "may request a fence and unfence");
    // Not aggregated into admin/edit/view: a namespace admin must not gain power over every machine's power.
    assert.ok(roles.every((r) => !r.metadata?.labels || !Object.keys(r.metadata.labels).some((k) => k.includes("aggregate-to"))));
  });
});

describe("admissionPolicyProblems", () => {
  const problems = (p: V1ValidatingAdmissionPolicy | undefined, b: V1ValidatingAdmissionPolicyBinding | undefined) =>
    admissionPolicyProblems(p, b).join("\n");

  test("missing policy or binding: says what it allows and how to install it", () => {
    const both = admissionPolicyProblems(undefined, undefined);
    assert.equal(both.length, 2);
    assert.match(both[0]!, new RegExp(`ValidatingAdmissionPolicy ${ADMISSION_POLICY} is not installed: .*forge a fence's evidence`));
    assert.match(
      both[1]!,
      new RegExp(`ValidatingAdmissionPolicyBinding ${ADMISSION_BINDING} is not installed, so the policy is not enforced`),
    );
    for (const m of both) assert.match(m, /kubectl apply -f manifests\/06-admission-policy\.yaml/);
    assert.match(problems(policy, undefined), /Binding .* is not installed/);
    assert.doesNotMatch(problems(policy, undefined), /Policy stockade-nodefence-authority is not installed/);
  });

  test("a binding that does not deny, binds another policy or narrows the match", () => {
    const warnOnly = copy(binding);
    warnOnly.spec!.validationActions = ["Warn", "Audit"];
    assert.match(problems(policy, warnOnly), /validationActions \[Warn, Audit\] without Deny/);
    const other = copy(binding);
    other.spec!.policyName = "something-else";
    assert.match(problems(policy, other), /binds policy "something-else"/);
    const narrowed = copy(binding);
    narrowed.spec!.matchResources = { objectSelector: { matchLabels: { guarded: "yes" } } };
    assert.match(problems(policy, narrowed), /narrows what the policy applies to/);
  });

  test("a policy that fails open, misses a resource or operation, lacks a verb check, or fails its type check", () => {
    const open = copy(policy);
    open.spec!.failurePolicy = "Ignore";
    assert.match(problems(open, binding), /failurePolicy Ignore/);

    const noStatus = copy(policy);
    noStatus.spec!.matchConstraints!.resourceRules![0]!.resources = ["nodefences"];
    assert.equal(
      problems(noStatus, binding),
      `ValidatingAdmissionPolicy ${ADMISSION_POLICY} does not match UPDATE of nodefences/status.stockade.io: kubectl apply -f manifests/06-admission-policy.yaml (Kubernetes 1.30 or newer)`,
    );
    const noCreate = copy(policy);
    noCreate.spec!.matchConstraints!.resourceRules![0]!.operations = ["UPDATE"];
    assert.match(problems(noCreate, binding), /does not match CREATE of nodefences\.stockade\.io/);
    const wildcard = copy(policy);
    wildcard.spec!.matchConstraints!.resourceRules = [{ apiGroups: ["*"], apiVersions: ["*"], operations: ["*"], resources: ["*/*"] }];
    assert.doesNotMatch(problems(wildcard, binding), /does not match/);
    // "*" is every resource but no subresource; "nodefences/*" every subresource of nodefences.
    wildcard.spec!.matchConstraints!.resourceRules = [{ apiGroups: [GROUP], apiVersions: ["*"], operations: ["*"], resources: ["*"] }];
    assert.match(problems(wildcard, binding), /does not match UPDATE of nodefences\/status/);
    wildcard.spec!.matchConstraints!.resourceRules![0]!.resources = ["*", "nodefences/*"];
    assert.doesNotMatch(problems(wildcard, binding), /does not match/);

    const noConfirm = copy(policy);
    noConfirm.spec!.validations = noConfirm.spec!.validations!.filter((v) => !v.expression.includes(`check('${CONFIRM_VERB}')`));
    assert.match(problems(noConfirm, binding), /does not check the RBAC verb "confirm"/);
    assert.doesNotMatch(problems(noConfirm, binding), /"attest"/);

    const warned = copy(policy);
    warned.status = {
      typeChecking: { expressionWarnings: [{ fieldRef: "spec.validations[0].expression", warning: "undefined field 'x'" }] },
    };
    assert.match(problems(warned, binding), /type check warns at spec\.validations\[0\]\.expression: undefined field 'x'/);
  });
});
