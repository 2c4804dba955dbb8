// Turns a FenceAgent spec into the parameters for one node. Pure: the caller fetches the Secrets.
// Precedence, lowest first: spec.parameters, spec.nodeTemplates rendered over the Node,
// spec.nodes[node].parameters, then the keys of the credentials Secret.
import type { V1Node } from "@kubernetes/client-node";

export interface SecretRef {
  namespace: string;
  name: string;
}

// Minimal local shape of FenceAgent.spec; the generated API type replaces it later.
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

const EXPR = /^(?:(name|providerID)|(labels|annotations)\[\s*(?:"([^"]*)"|'([^']*)')\s*\])$/;
const HELP = 'use {{ name }}, {{ providerID }}, {{ labels["key"] }} or {{ annotations["key"] }}';

/** Renders one template over a node; errors name the parameter, the node and what is missing. */
export function renderTemplate(param: string, template: string, node: V1Node): { value: string } | { error: string } {
  const nodeName = node.metadata?.name ?? "(unnamed node)";
  const where = `nodeTemplates.${param} (${JSON.stringify(template)}) for node ${nodeName}`;
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
      const field = m[2] as "labels" | "annotations";
      const key = m[3] ?? m[4] ?? "";
      const v = node.metadata?.[field]?.[key];
      if (v === undefined) return { error: `${where}: node ${nodeName} has no ${field === "labels" ? "label" : "annotation"} "${key}"` };
      value += v;
    }
    rest = rest.slice(end + 2);
  }
  return { value };
}

export function resolveParameters(spec: FenceAgentSpec, node: V1Node, secrets: Map<string, Record<string, string>>): ResolveResult {
  const nodeName = node.metadata?.name;
  if (!nodeName) return { errors: ["the Node has no metadata.name"] };
  const errors: string[] = [];
  const parameters: Record<string, string> = { ...spec.parameters };
  for (const [param, template] of Object.entries(spec.nodeTemplates ?? {})) {
    const r = renderTemplate(param, template, node);
    if ("error" in r) errors.push(r.error);
    else parameters[param] = r.value;
  }
  Object.assign(parameters, spec.nodes?.[nodeName]?.parameters);
  const ref = credentialsRefFor(spec, nodeName);
  if (ref) {
    const data = secrets.get(secretKey(ref));
    const whose = spec.nodes?.[nodeName]?.credentialsSecretRef ? `nodes.${nodeName}.credentialsSecretRef` : "credentialsSecretRef";
    if (data === undefined)
      errors.push(`Secret ${secretKey(ref)} (${whose}, credentials for node ${nodeName}) was not found or could not be read`);
    else if (Object.keys(data).length === 0)
      errors.push(`Secret ${secretKey(ref)} (${whose}, credentials for node ${nodeName}) has no keys`);
    else {
      // `kubectl create secret --from-file` keeps the file's final newline, which no password is meant to end with.
      for (const [k, v] of Object.entries(data)) parameters[k] = v.replace(/\r?\n$/, "");
    }
  }
  return errors.length > 0 ? { errors } : { parameters };
}
