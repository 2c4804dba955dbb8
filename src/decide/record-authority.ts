// Who may write a node agent's record, and whether the operator may believe it (docs/safety.md §2 and §8). RBAC gives
// every agent `update` on every record in the namespace: only the admission policy stockade-node-agent-record
// (manifests/node-agent/03-admission-policy.yaml; Kubernetes 1.30+, which puts the node in a pod-bound token) narrows
// an agent to its own node's record. Without it, root on one node writes a silent peer's record as armed with D = T = 1
// and WatchdogExpired holds ~7 s into the fence: the peer's pods are released while it may still run them. So a record
// is evidence only while (a) that policy and its binding are installed and enforcing, as read now (a read that fails
// counts as not in force), and (b) its holder is the node agent's pod on that node, read fresh: a pod of the
// stockade-node-agent DaemonSet, bound to the node the record is named after. Pure; the reads are the shell's.
import type { V1Pod, V1ValidatingAdmissionPolicy, V1ValidatingAdmissionPolicyBinding } from "@kubernetes/client-node";
import { NODE_AGENT_NAMESPACE } from "./node-agent-record.ts";

/** The ValidatingAdmissionPolicy and its binding, as manifests/node-agent/03-admission-policy.yaml names them. */
export const RECORD_POLICY = "stockade-node-agent-record";
export const RECORD_BINDING = "stockade-node-agent-record";
/** The node agent's DaemonSet (manifests/node-agent/02-daemonset.yaml): a record's holder must be one of its pods. */
export const NODE_AGENT_DAEMONSET = "stockade-node-agent";
/** The user the policy's matchCondition selects: the agent's ServiceAccount. */
export const NODE_AGENT_USER = `system:serviceaccount:${NODE_AGENT_NAMESPACE}:stockade-node-agent`;
/** The pod-bound token's claim the policy compares with the record's name (Kubernetes 1.30+). */
export const NODE_NAME_EXTRA = "authentication.kubernetes.io/node-name";

const INSTALL = "kubectl apply -f manifests/node-agent/03-admission-policy.yaml (Kubernetes 1.30 or newer)";
const RISK =
  "without it, any node agent (root on any node) may write another node's record, say armed with a tiny timeout, " +
  "and make WatchdogExpired hold for a node that may still run its pods";

/** What the operator checked of a node's record's authority: [] / undefined when in force. */
export interface RecordAuthority {
  /** What keeps the record policy from being in force (recordPolicyProblems, or why it could not be read); [] in force. */
  policy: readonly string[];
  /** Why the record's holder is not the node agent's pod on that node (holderProblem); undefined when it is. */
  holder?: string;
}

/**
 * A rule's resource pattern against "resource[/subresource]": "*" is every resource but no subresource, "pods/*" every
 * subresource of pods, "*\/status" every status subresource, "*\/*" everything.
 */
export function resourceMatches(pattern: string, resource: string): boolean {
  if (pattern === "*/*") return true;
  const [pr, ps = ""] = pattern.split("/");
  const [rr, rs = ""] = resource.split("/");
  return (pr === "*" || pr === rr) && (ps === "*" ? rs !== "" : ps === rs);
}

/** Names and words of one of Stockade's admission policies, for bindingProblems. */
export interface PolicyNames {
  policy: string;
  binding: string;
  /** What goes wrong without it. */
  risk: string;
  /** The command that installs it. */
  install: string;
  /** What a binding without Deny lets through, as a clause ("violations are let through"). */
  letThrough: string;
}

/**
 * What every one of Stockade's admission policies needs, one actionable sentence each: the policy and its binding
 * installed, the binding naming the policy, and denying. The callers add what is particular to theirs.
 */
export function bindingProblems(
  n: PolicyNames,
  policy: V1ValidatingAdmissionPolicy | undefined,
  binding: V1ValidatingAdmissionPolicyBinding | undefined,
): string[] {
  const out: string[] = [];
  if (!policy) out.push(`ValidatingAdmissionPolicy ${n.policy} is not installed: ${n.risk}. Install it: ${n.install}`);
  if (!binding)
    out.push(
      `ValidatingAdmissionPolicyBinding ${n.binding} is not installed, so the policy is not enforced: ${n.risk}. Install it: ${n.install}`,
    );
  if (binding) {
    const spec = binding.spec ?? {};
    if (spec.policyName !== n.policy)
      out.push(`ValidatingAdmissionPolicyBinding ${n.binding} binds policy "${spec.policyName ?? ""}", not ${n.policy}: ${n.install}`);
    if (!(spec.validationActions ?? []).includes("Deny"))
      out.push(
        `ValidatingAdmissionPolicyBinding ${n.binding} has validationActions [${(spec.validationActions ?? []).join(", ")}] without Deny: ${n.letThrough}: ${n.install}`,
      );
  }
  return out;
}

/**
 * What keeps the installed record policy and its binding from limiting each node agent to its own node's record, one
 * actionable sentence each; [] when they are in force. undefined = not found (Kubernetes before 1.30 serves no v1
 * ValidatingAdmissionPolicy: not found too).
 */
export function recordPolicyProblems(
  policy: V1ValidatingAdmissionPolicy | undefined,
  binding: V1ValidatingAdmissionPolicyBinding | undefined,
): string[] {
  const out = bindingProblems(
    {
      policy: RECORD_POLICY,
      binding: RECORD_BINDING,
      risk: RISK,
      install: INSTALL,
      letThrough: "a write to another node's record is let through",
    },
    policy,
    binding,
  );
  if (binding) {
    const spec = binding.spec ?? {};
    const m = spec.matchResources;
    if (m?.excludeResourceRules?.length || m?.objectSelector?.matchLabels || m?.objectSelector?.matchExpressions?.length)
      out.push(`ValidatingAdmissionPolicyBinding ${RECORD_BINDING} narrows what the policy applies to (matchResources): ${INSTALL}`);
    // The bundle selects the agent's namespace by its name label; any other selector may leave the records out.
    const ns = m?.namespaceSelector;
    const labels = Object.entries(ns?.matchLabels ?? {});
    const selectsAgentNamespace = labels.every(([k, v]) => k === "kubernetes.io/metadata.name" && v === NODE_AGENT_NAMESPACE);
    if (ns?.matchExpressions?.length || !selectsAgentNamespace)
      out.push(
        `ValidatingAdmissionPolicyBinding ${RECORD_BINDING}'s namespaceSelector may not select namespace ${NODE_AGENT_NAMESPACE}: ${INSTALL}`,
      );
  }
  if (policy) {
    const spec = policy.spec ?? {};
    if (spec.failurePolicy === "Ignore")
      out.push(
        `ValidatingAdmissionPolicy ${RECORD_POLICY} has failurePolicy Ignore: an error evaluating it lets a write through: ${INSTALL}`,
      );
    const rules = spec.matchConstraints?.resourceRules ?? [];
    for (const op of ["CREATE", "UPDATE"]) {
      const covered = rules.some(
        (r) =>
          (r.apiGroups ?? []).some((g) => g === "coordination.k8s.io" || g === "*") &&
          (r.resources ?? []).some((x) => resourceMatches(x, "leases")) &&
          (r.operations ?? []).some((o) => o === op || o === "*"),
      );
      if (!covered) out.push(`ValidatingAdmissionPolicy ${RECORD_POLICY} does not match ${op} of leases.coordination.k8s.io: ${INSTALL}`);
    }
    const m = spec.matchConstraints;
    if (m?.objectSelector?.matchLabels || m?.objectSelector?.matchExpressions?.length || m?.excludeResourceRules?.length)
      out.push(`ValidatingAdmissionPolicy ${RECORD_POLICY} narrows what it applies to (matchConstraints): ${INSTALL}`);
    // A matchCondition decides whom the policy judges at all: any would leave some writer unjudged (an older bundle's
    // judged the agent's ServiceAccount alone, and let every other holder of Lease rights in the namespace forge).
    if ((spec.matchConditions ?? []).length)
      out.push(
        `ValidatingAdmissionPolicy ${RECORD_POLICY} has matchConditions: writers they leave out are not judged at all (another DaemonSet's token with rights on Leases could write any node's record): ${INSTALL}`,
      );
    const expressions = (spec.validations ?? []).map((v) => v.expression ?? "");
    if (!expressions.some((e) => e.includes(NODE_NAME_EXTRA) && e.includes("object.metadata.name") && e.includes(NODE_AGENT_USER)))
      out.push(
        `ValidatingAdmissionPolicy ${RECORD_POLICY} does not require the writer to be the node agent's ServiceAccount bound to the record's node (${NODE_NAME_EXTRA}): it is not the bundle's policy: ${INSTALL}`,
      );
    for (const w of policy.status?.typeChecking?.expressionWarnings ?? [])
      out.push(`ValidatingAdmissionPolicy ${RECORD_POLICY}: the apiserver's type check warns at ${w.fieldRef}: ${w.warning}`);
  }
  return out;
}

/** A name the apiserver could hold for a pod (a DNS subdomain): anything else is not looked up. */
export const isPodName = (s: string) => s.length <= 253 && /^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$/.test(s);

/**
 * Why the record of `node`, naming `holder`, is not vouched for by the node agent running on that node; undefined when
 * it is. `pod` is the pod named `holder` in the agent's namespace, read fresh from the apiserver (undefined: none).
 */
export function holderProblem(node: string, holder: string, pod: V1Pod | undefined): string | undefined {
  const fix = `only the node agent's own pod on ${node} may vouch for it (check the DaemonSet ${NODE_AGENT_NAMESPACE}/${NODE_AGENT_DAEMONSET} runs there; a record written by anyone else is not evidence)`;
  if (!holder) return `node ${node}'s agent record names no holder: ${fix}`;
  if (!pod)
    return `node ${node}'s agent record names holder "${holder}", and no such pod exists in namespace ${NODE_AGENT_NAMESPACE}: ${fix}`;
  if (pod.metadata?.name !== holder) return `the pod read for holder "${holder}" is named "${pod.metadata?.name ?? ""}": ${fix}`;
  if ((pod.metadata?.namespace ?? NODE_AGENT_NAMESPACE) !== NODE_AGENT_NAMESPACE)
    return `node ${node}'s agent record's holder ${holder} is a pod of namespace ${pod.metadata?.namespace}, not ${NODE_AGENT_NAMESPACE}: ${fix}`;
  const owner = (pod.metadata?.ownerReferences ?? []).find((r) => r.controller);
  if (!owner || owner.kind !== "DaemonSet" || !owner.apiVersion?.startsWith("apps/") || owner.name !== NODE_AGENT_DAEMONSET)
    return `node ${node}'s agent record's holder ${holder} is not a pod of the DaemonSet ${NODE_AGENT_DAEMONSET} (its controller: ${owner ? `${owner.kind} ${owner.name}` : "none"}): ${fix}`;
  if (pod.spec?.nodeName !== node)
    return `node ${node}'s agent record's holder ${holder} runs on ${pod.spec?.nodeName ? `node ${pod.spec.nodeName}` : "no node"}, not on ${node}: ${fix}`;
  return undefined;
}

/**
 * Why WatchdogExpired is refused for `node` on its record's authority, in words a person can act on; undefined when the
 * record's authority is in force. Not checked (undefined) is not in force.
 */
export function authorityRefusal(node: string, a: RecordAuthority | undefined): string | undefined {
  if (!a)
    return `WatchdogExpired is refused: the authority of node ${node}'s agent record was not checked (the admission policy ${RECORD_POLICY} and the record's holder): a record not known to be written by the node's own agent is not evidence`;
  if (a.policy.length)
    return `WatchdogExpired is refused while the admission policy ${RECORD_POLICY} is not in force: ${a.policy.join("; ")}`;
  if (a.holder !== undefined) return `WatchdogExpired is refused: ${a.holder}`;
  return undefined;
}
