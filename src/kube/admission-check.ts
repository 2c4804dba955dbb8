// Is the admission policy that guards NodeFences in force? Without it RBAC alone decides, and `update` on
// nodefences/status (forge a fence's evidence) or `patch` on nodefences (confirm a manual fence) is enough to
// make Stockade force-delete the pods of a node that may still run them. The operator cannot enforce this
// itself — the apiserver does (manifests/06-admission-policy.yaml) — but it can say loudly when it is missing.
// Pure part: admissionPolicyProblems. Imperative part: checkAdmissionPolicy (two GETs).
// The node agent records' policy (decide/record-authority.ts) is read the same way, by RecordPolicyCheck: there the
// operator does enforce it, by refusing WatchdogExpired while it is not in force.
import {
  AdmissionregistrationV1Api,
  type KubeConfig,
  type V1ValidatingAdmissionPolicy,
  type V1ValidatingAdmissionPolicyBinding,
} from "@kubernetes/client-node";
import { GROUP } from "../api/v1alpha1.ts";
import { RECORD_BINDING, RECORD_POLICY, bindingProblems, recordPolicyProblems, resourceMatches } from "../decide/record-authority.ts";
import { errorMessage, isNotFound, statusCode } from "./api.ts";

/** The ValidatingAdmissionPolicy and its binding, as manifests/06-admission-policy.yaml names them. */
export const ADMISSION_POLICY = "stockade-nodefence-authority";
export const ADMISSION_BINDING = "stockade-nodefence-authority";
/** Custom RBAC verbs on nodefences.stockade.io that the policy asks the authorizer for. */
export const ATTEST_VERB = "attest";
export const CONFIRM_VERB = "confirm";

const INSTALL = "kubectl apply -f manifests/06-admission-policy.yaml (Kubernetes 1.30 or newer)";
const RISK =
  "without it, whoever may update nodefences/status can forge a fence's evidence and whoever may patch nodefences can " +
  "confirm a manual fence, and either makes Stockade force-delete the pods of a node that may still run them";

/**
 * What keeps the installed policy and binding from guarding NodeFences as the bundle intends, one actionable
 * sentence each; [] when they are in force. undefined = not found.
 */
export function admissionPolicyProblems(
  policy: V1ValidatingAdmissionPolicy | undefined,
  binding: V1ValidatingAdmissionPolicyBinding | undefined,
): string[] {
  const out = bindingProblems(
    { policy: ADMISSION_POLICY, binding: ADMISSION_BINDING, risk: RISK, install: INSTALL, letThrough: "violations are let through" },
    policy,
    binding,
  );
  if (binding) {
    const spec = binding.spec ?? {};
    const m = spec.matchResources;
    if (m && (m.excludeResourceRules?.length || m.objectSelector?.matchLabels || m.objectSelector?.matchExpressions?.length))
      out.push(`ValidatingAdmissionPolicyBinding ${ADMISSION_BINDING} narrows what the policy applies to (matchResources): ${INSTALL}`);
  }
  if (policy) {
    const spec = policy.spec ?? {};
    if (spec.failurePolicy === "Ignore")
      out.push(
        `ValidatingAdmissionPolicy ${ADMISSION_POLICY} has failurePolicy Ignore: an error evaluating it lets a write through: ${INSTALL}`,
      );
    const rules = spec.matchConstraints?.resourceRules ?? [];
    // A NodeFence may carry the confirmation from its CREATE on; its status is only ever written by UPDATE.
    const needed: [string, string][] = [
      ["nodefences", "CREATE"],
      ["nodefences", "UPDATE"],
      ["nodefences/status", "UPDATE"],
    ];
    for (const [resource, op] of needed) {
      const covered = rules.some(
        (r) =>
          (r.apiGroups ?? []).some((g) => g === GROUP || g === "*") &&
          (r.resources ?? []).some((x) => resourceMatches(x, resource)) &&
          (r.operations ?? []).some((o) => o === op || o === "*"),
      );
      if (!covered) out.push(`ValidatingAdmissionPolicy ${ADMISSION_POLICY} does not match ${op} of ${resource}.${GROUP}: ${INSTALL}`);
    }
    const expressions = (spec.validations ?? []).map((v) => v.expression).join("\n");
    for (const verb of [ATTEST_VERB, CONFIRM_VERB])
      if (!expressions.includes(`check('${verb}')`))
        out.push(
          `ValidatingAdmissionPolicy ${ADMISSION_POLICY} does not check the RBAC verb "${verb}": it is not the bundle's policy: ${INSTALL}`,
        );
    const warnings = policy.status?.typeChecking?.expressionWarnings ?? [];
    for (const w of warnings)
      out.push(`ValidatingAdmissionPolicy ${ADMISSION_POLICY}: the apiserver's type check warns at ${w.fieldRef}: ${w.warning}`);
  }
  return out;
}

type Pair =
  { policy: V1ValidatingAdmissionPolicy | undefined; binding: V1ValidatingAdmissionPolicyBinding | undefined } | { failures: string[] };

/**
 * Reads a policy and its binding (undefined: not found), or the failures (other than 404) that keep the operator from
 * telling whether they are installed.
 */
async function readPair(kc: KubeConfig, policyName: string, bindingName: string, rbac: string): Promise<Pair> {
  const api = kc.makeApiClient(AdmissionregistrationV1Api);
  const failures: string[] = [];
  const read = async <T>(kind: string, name: string, get: () => Promise<T>): Promise<T | undefined | null> => {
    try {
      return await get();
    } catch (err) {
      if (isNotFound(err)) return undefined;
      failures.push(
        statusCode(err) === 403
          ? `cannot check that ${kind} ${name} is installed: the operator may not read it (grant get on it; ${rbac})`
          : `cannot check that ${kind} ${name} is installed: ${errorMessage(err)}`,
      );
      return null;
    }
  };
  const policy = await read("ValidatingAdmissionPolicy", policyName, () => api.readValidatingAdmissionPolicy({ name: policyName }));
  const binding = await read("ValidatingAdmissionPolicyBinding", bindingName, () =>
    api.readValidatingAdmissionPolicyBinding({ name: bindingName }),
  );
  if (policy === null || binding === null) return { failures };
  return { policy, binding };
}

/**
 * Reads the policy and its binding and returns admissionPolicyProblems; a read that fails (other than 404)
 * is itself a problem, so the caller always has something to log. Needs `get` on both objects:
 * admissionregistration.k8s.io validatingadmissionpolicies and validatingadmissionpolicybindings, resourceNames
 * [stockade-nodefence-authority].
 */
export async function checkAdmissionPolicy(kc: KubeConfig): Promise<string[]> {
  const pair = await readPair(kc, ADMISSION_POLICY, ADMISSION_BINDING, "manifests/02-rbac.yaml");
  return "failures" in pair ? pair.failures : admissionPolicyProblems(pair.policy, pair.binding);
}

/**
 * Whether the node agent records' policy is in force (recordPolicyProblems: [] when it is), read from the apiserver:
 * a read that fails is a problem (cannot tell is not in force). Results younger than the caller's maxAgeMs are shared
 * (many fences, the agent monitor). Needs `get` on
 * validatingadmissionpolicies and validatingadmissionpolicybindings, resourceNames [stockade-node-agent-record].
 */
export class RecordPolicyCheck {
  readonly #kc: KubeConfig;
  readonly #mono: () => number;
  #last: { atMs: number; problems: string[] } | undefined;
  #inFlight: { startedMs: number; answer: Promise<string[]> } | undefined;

  constructor(kc: KubeConfig, mono: () => number = () => performance.now()) {
    this.#kc = kc;
    this.#mono = mono;
  }

  /** The problems as read by a request begun at most maxAgeMs before this call (0: begun by this call). */
  async problems(maxAgeMs = 0): Promise<string[]> {
    const asked = this.#mono();
    if (this.#last && asked - this.#last.atMs <= maxAgeMs) return this.#last.problems;
    if (this.#inFlight && asked - this.#inFlight.startedMs <= maxAgeMs) return this.#inFlight.answer;
    const startedMs = this.#mono();
    const answer = readPair(this.#kc, RECORD_POLICY, RECORD_BINDING, "manifests/02-rbac.yaml")
      .then((pair) => ("failures" in pair ? pair.failures : recordPolicyProblems(pair.policy, pair.binding)))
      .catch((err: unknown) => [`cannot check the admission policy ${RECORD_POLICY}: ${errorMessage(err)}`]);
    this.#inFlight = { startedMs, answer };
    const problems = await answer;
    if (!this.#last || startedMs >= this.#last.atMs) this.#last = { atMs: startedMs, problems };
    if (this.#inFlight?.answer === answer) this.#inFlight = undefined;
    return problems;
  }

  /** The last answer, for status only (undefined: never read). */
  get last(): readonly string[] | undefined {
    return this.#last?.problems;
  }
}
