// Turns a FenceAgent spec into the parameters for one node. Pure given the agent's rules (rulesFor reads a fence
// agent's metadata once per executable); the caller fetches the Secrets.
//
// Who decides which machine is fenced: only administrators. The spec's layers, lowest precedence first, are
// spec.parameters, spec.nodeTemplates rendered over the Node, spec.nodes[node].parameters. A template may read
// only what a node's own kubelet cannot write: the Node's name, its providerID (immutable once set) and labels
// under node-restriction.kubernetes.io/ (NodeRestriction refuses them from kubelets) — never annotations or
// other labels, which a compromised node can set to point Stockade at another machine. The credentials Secret
// then adds credentials only, and never overrides a value the spec set.
import type { V1Node } from "@kubernetes/client-node";
import type { ParameterRules } from "./types.ts";
import { rulesFor } from "./registry.ts";

export interface SecretRef {
  namespace: string;
  name: string;
}

// Minimal local shape of FenceAgent.spec; the generated API type is assignable to it.
export interface FenceAgentSpec {
  type: string;
  agent?: string;
  parameters?: Record<string, string>;
  nodeTemplates?: Record<string, string>;
  nodes?: Record<string, { parameters?: Record<string, string>; credentialsSecretRef?: SecretRef }>;
  credentialsSecretRef?: SecretRef;
  timeoutSeconds?: number;
  retries?: number;
  retryBackoffSeconds?: number;
}

export type ResolveResult = { parameters: Record<string, string> } | { errors: string[] };

export const secretKey = (ref: SecretRef): string => `${ref.namespace}/${ref.name}`;

/** The Secret the node's credentials come from: its own entry's, else the shared one. */
export function credentialsRefFor(spec: FenceAgentSpec, nodeName: string): SecretRef | undefined {
  return spec.nodes?.[nodeName]?.credentialsSecretRef ?? spec.credentialsSecretRef;
}

/** The Secrets resolveParameters needs for this node (to fetch before calling it). */
export function secretRefsFor(spec: FenceAgentSpec, nodeName: string): SecretRef[] {
  const ref = credentialsRefFor(spec, nodeName);
  return ref ? [ref] : [];
}

/** Label keys a kubelet may not set on its own Node (NodeRestriction): node-restriction.kubernetes.io/ and subdomains. */
export const PROTECTED_LABEL = /^(?:[a-z0-9](?:[-a-z0-9]*[a-z0-9])?\.)*node-restriction\.kubernetes\.io\//;

const EXPR = /^(?:(name|providerID)|(labels|annotations)\[\s*(?:"([^"]*)"|'([^']*)')\s*\])$/;
const HELP = 'use {{ name }}, {{ providerID }} or {{ labels["node-restriction.kubernetes.io/<key>"] }}';
const KUBELET_WRITES = "a node's kubelet may write it on its own Node, so a compromised node could point Stockade at another machine";

/** Renders one template over a node; errors name the parameter, the node and what is missing or not allowed. */
export function renderTemplate(param: string, template: string, node: V1Node): { value: string } | { error: string } {
  const nodeName = node.metadata?.name ?? "(unnamed node)";
  const where = `nodeTemplates.${param} (${JSON.stringify(template)}) for node ${nodeName}`;
  const instead = `set the value in spec.nodes.${nodeName}.parameters, or in a label under node-restriction.kubernetes.io/ (which only administrators can set)`;
  let value = "";
  let rest = template;
  while (rest.length > 0) {
    const open = rest.indexOf("{{");
    const close = rest.indexOf("}}");
    if (open < 0) {
      if (close >= 0) return { error: `${where}: "}}" without a matching "{{"` };
      value += rest;
      break;
    }
    if (close >= 0 && close < open) return { error: `${where}: "}}" without a matching "{{"` };
    const end = rest.indexOf("}}", open + 2);
    if (end < 0) return { error: `${where}: "{{" is never closed with "}}"` };
    value += rest.slice(0, open);
    const expr = rest.slice(open + 2, end).trim();
    const m = EXPR.exec(expr);
    if (!m) return { error: `${where}: unsupported expression "${expr}": ${HELP}` };
    if (m[1] === "name") {
      value += nodeName;
    } else if (m[1] === "providerID") {
      const id = node.spec?.providerID;
      if (!id) return { error: `${where}: node ${nodeName} has no spec.providerID` };
      value += id;
    } else {
      const key = m[3] ?? m[4] ?? "";
      if (m[2] === "annotations")
        return { error: `${where}: annotations cannot be used (NodeRestriction does not restrict them: ${KUBELET_WRITES}): ${instead}` };
      if (!PROTECTED_LABEL.test(key))
        return { error: `${where}: label "${key}" is not under node-restriction.kubernetes.io/ (${KUBELET_WRITES}): ${instead}` };
      const v = node.metadata?.labels?.[key];
      if (v === undefined) return { error: `${where}: node ${nodeName} has no label "${key}"` };
      value += v;
    }
    rest = rest.slice(end + 2);
  }
  return { value };
}

/**
 * The parameters the spec gives one node (no Secret), with where each came from. Credentials a Secret must supply
 * are refused here. Errors are actionable messages.
 */
export function resolveSpecParameters(
  spec: FenceAgentSpec,
  node: V1Node,
  rules: ParameterRules | undefined,
): { parameters: Record<string, string>; sources: Record<string, string>; errors: string[] } {
  const nodeName = node.metadata?.name ?? "";
  const parameters: Record<string, string> = {};
  const sources: Record<string, string> = {};
  const errors: string[] = [];
  const set = (k: string, v: string, source: string) => {
    const verdict = rules?.verdict(k);
    if (verdict?.kind === "credential" && verdict.secretOnly) {
      errors.push(`${source} sets ${k}, a credential: put it in the Secret named by credentialsSecretRef, never in the spec`);
      return;
    }
    parameters[k] = v;
    sources[k] = source;
  };
  for (const [k, v] of Object.entries(spec.parameters ?? {})) set(k, v, "spec.parameters");
  for (const [param, template] of Object.entries(spec.nodeTemplates ?? {})) {
    const r = renderTemplate(param, template, node);
    if ("error" in r) errors.push(r.error);
    else set(param, r.value, `spec.nodeTemplates.${param}`);
  }
  for (const [k, v] of Object.entries(spec.nodes?.[nodeName]?.parameters ?? {})) set(k, v, `spec.nodes.${nodeName}.parameters`);
  // The agent's own defaults over the Node (a cloud agent's instance is the Node's providerID), only where no layer spoke.
  for (const [param, template] of Object.entries(rules?.nodeDefaults ?? {})) {
    if (param in parameters) continue;
    const r = renderTemplate(param, template, node);
    if ("error" in r)
      errors.push(
        `${rules!.subject} reads parameter ${param} from the Node by default (${template}), and that failed: ${r.error.slice(r.error.lastIndexOf(": ") + 2)}; ` +
          `set ${param} in spec.nodes.${nodeName}.parameters`,
      );
    else set(param, r.value, `the Node (default ${template})`);
  }
  return { parameters, sources, errors };
}

/**
 * Every parameter of one node, credentials included. `rules` defaults to rulesFor(spec); pass them to stay pure.
 * Checks the sources (templates, Secret keys); the values are the driver's to check (driver.validate).
 */
export function resolveParameters(
  spec: FenceAgentSpec,
  node: V1Node,
  secrets: ReadonlyMap<string, Record<string, string>>,
  rules?: ParameterRules | null,
): ResolveResult {
  const nodeName = node.metadata?.name;
  if (!nodeName) return { errors: ["the Node has no metadata.name"] };
  let r: ParameterRules | undefined;
  try {
    r = rules === undefined ? rulesFor(spec) : (rules ?? undefined);
  } catch (e) {
    return { errors: [(e as Error).message] };
  }
  const { parameters, sources, errors } = resolveSpecParameters(spec, node, r);
  const ref = credentialsRefFor(spec, nodeName);
  if (ref) {
    const data = secrets.get(secretKey(ref));
    const whose = spec.nodes?.[nodeName]?.credentialsSecretRef ? `nodes.${nodeName}.credentialsSecretRef` : "credentialsSecretRef";
    const secret = `Secret ${secretKey(ref)} (${whose}, credentials for node ${nodeName})`;
    if (data === undefined) errors.push(`${secret} was not found or could not be read`);
    else if (Object.keys(data).length === 0) errors.push(`${secret} has no keys`);
    else {
      for (const [k, raw] of Object.entries(data)) {
        const verdict = r?.verdict(k);
        if (r && verdict?.kind !== "credential") {
          const why = verdict?.kind === "refused" ? `: ${k} ${verdict.reason}` : "";
          errors.push(
            `${secret} has key ${k}, which is not a credential of ${r.subject}${why}: a credentials Secret may hold only ${r.credentials.join(", ") || "nothing for this agent"}; ` +
              `move ${k} to spec.nodes.${nodeName}.parameters (or spec.parameters) and remove it from the Secret`,
          );
          continue;
        }
        if (k in parameters) {
          errors.push(`${k} is set both in ${sources[k]} and in ${secret}: keep it in one place (a Secret never overrides the spec)`);
          continue;
        }
        // `kubectl create secret --from-file` keeps the file's final newline, which no password is meant to end with.
        parameters[k] = raw.replace(/\r?\n$/, "");
      }
    }
  }
  return errors.length > 0 ? { errors } : { parameters };
}
