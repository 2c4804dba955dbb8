// Generates the fence agent parameter allow-list from the installed agents' own metadata (`fence_X -o metadata`
// for every /usr/sbin/fence_*), through the rule in src/agents/fence-metadata.ts:
//   - src/agents/reviewed-fence-parameters.ts, which the operator uses at run time, and
//   - the generated CEL rules in crds/stockade.io_fenceagents.yaml (between the "generated" markers).
// npm run gen:fence-rules; test/unit/agent-allowlist.test.ts fails when the committed files disagree with it.
import { execFile } from "node:child_process";
import { readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { promisify } from "node:util";
import { format, resolveConfig } from "prettier";
import { parseMetadata, unusableAgent, verdictFor, type AgentMetadata } from "../src/agents/fence-metadata.ts";
import { IPMI_PARAMETERS, IPMI_SECRET_ONLY } from "../src/agents/ipmi.ts";
import { REDFISH_PARAMETERS, REDFISH_SECRET_ONLY } from "../src/agents/redfish.ts";
import { EXTRA_PREFIX, WEBHOOK_PARAMETERS, WEBHOOK_SECRET_ONLY } from "../src/agents/webhook.ts";
import { AWS_PARAMETERS, AWS_SECRET_ONLY } from "../src/agents/aws.ts";
import { GCP_PARAMETERS, GCP_SECRET_ONLY } from "../src/agents/gcp.ts";
import { NETWORK_FENCE_PARAMETERS } from "../src/agents/csi-addons-network-fence.ts";
import { AZURE_PARAMETERS, AZURE_SECRET_ONLY } from "../src/agents/azure.ts";

/** The types Stockade implements itself: every parameter each takes, and those only a Secret may supply. */
const NATIVE: Record<string, { parameters: readonly string[]; secretOnly: readonly string[] }> = {
  ipmi: { parameters: IPMI_PARAMETERS, secretOnly: IPMI_SECRET_ONLY },
  redfish: { parameters: REDFISH_PARAMETERS, secretOnly: REDFISH_SECRET_ONLY },
  webhook: { parameters: WEBHOOK_PARAMETERS, secretOnly: WEBHOOK_SECRET_ONLY },
  aws: { parameters: AWS_PARAMETERS, secretOnly: AWS_SECRET_ONLY },
  gcp: { parameters: GCP_PARAMETERS, secretOnly: GCP_SECRET_ONLY },
  azure: { parameters: AZURE_PARAMETERS, secretOnly: AZURE_SECRET_ONLY },
  csiAddonsNetworkFence: { parameters: NETWORK_FENCE_PARAMETERS, secretOnly: [] },
};
const nativeNames = Object.values(NATIVE).flatMap((t) => t.parameters);
const plain = (t: string) => NATIVE[t]!.parameters.filter((p) => !NATIVE[t]!.secretOnly.includes(p));
/** What a type's rule says when a parameter is not its own. */
const nativeMessage = (t: string) => {
  const secret = NATIVE[t]!.secretOnly;
  const extra = t === "webhook" ? ` and ${EXTRA_PREFIX}<name>` : "";
  return `type ${t} takes only the parameters ${plain(t).join(", ")}${extra}${secret.length ? ` (and ${secret.join(" and ")}, from the Secret)` : ""}`;
};

const run = promisify(execFile);
const repoRoot = resolve(import.meta.dirname, "..");
export const AGENT_DIR = "/usr/sbin";
export const REVIEWED_FILE = join(repoRoot, "src/agents/reviewed-fence-parameters.ts");
export const CRD_FILE = join(repoRoot, "crds/stockade.io_fenceagents.yaml");

export interface Review {
  version: string;
  /** Agents whose metadata parsed, by name. */
  agents: Map<string, AgentMetadata>;
  /** Executables that are not fence agents (no metadata), with why. */
  notAgents: Map<string, string>;
}

/** Runs `-o metadata` on every fence_* executable in `dir`. */
export async function review(dir = AGENT_DIR): Promise<Review> {
  const files = readdirSync(dir)
    .filter((f) => /^fence_[a-z0-9_]+$/.test(f))
    .sort();
  const agents = new Map<string, AgentMetadata>();
  const notAgents = new Map<string, string>();
  const env = { ...process.env, PATH: `${dir}:/usr/sbin:/sbin:/usr/bin:/bin` };
  // Two at a time: the machine is shared.
  for (let i = 0; i < files.length; i += 2) {
    await Promise.all(
      files.slice(i, i + 2).map(async (f) => {
        try {
          const { stdout } = await run(join(dir, f), ["-o", "metadata"], { env, timeout: 30_000, maxBuffer: 4 << 20 });
          agents.set(f, parseMetadata(stdout));
        } catch (e) {
          notAgents.set(f, `does not print fence agent metadata (${((e as Error).message.split("\n")[0] ?? "").slice(0, 120)})`);
        }
      }),
    );
  }
  if (!agents.has("fence_ipmilan")) throw new Error(`no fence_ipmilan in ${dir}: install the fence-agents package first`);
  const { stdout } = await run(join(dir, "fence_ipmilan"), ["-V"], { env });
  return { version: stdout.trim(), agents, notAgents };
}

export interface Lists {
  version: string;
  /** Parameter names some reviewed agent takes that neither run programs nor name files, credentials included. */
  allowed: string[];
  /** The subset of `allowed` that only a Secret may supply. */
  secretOnly: string[];
  /** Names refused in every agent, with why (deprecated aliases excluded). */
  refused: Record<string, string>;
  /** Deprecated aliases and what to use instead. */
  deprecated: Record<string, string>;
  /** Agents Stockade cannot use, with why. */
  unusable: Record<string, string>;
  /** Per agent, the names it allows (the CRD's per-agent rule). */
  perAgent: Record<string, string[]>;
  /** Select parameters whose choices contain whitespace ("DRAC CMC"). */
  spacedSelects: string[];
}

const sorted = (xs: Iterable<string>) => [...new Set(xs)].sort();

export function lists(r: Review): Lists {
  const allowed = new Set<string>();
  const secretOnly = new Set<string>();
  const refused: Record<string, string> = {};
  const deprecated: Record<string, string> = {};
  const unusable: Record<string, string> = {};
  const perAgent: Record<string, string[]> = {};
  const spaced = new Set<string>();
  for (const [agent, m] of r.agents) {
    const why = unusableAgent(m);
    if (why) unusable[agent] = why;
    const mine: string[] = [];
    for (const [name, p] of m.parameters) {
      if (p.type === "select" && p.options.some((o) => /\s/.test(o))) spaced.add(name);
      const v = verdictFor(m, name)!;
      if (v.kind === "refused" && v.category === "deprecated") deprecated[name] = v.reason;
      else if (v.kind === "refused") refused[name] = v.reason;
      else {
        allowed.add(name);
        mine.push(name);
        if (v.kind === "credential" && v.secretOnly) secretOnly.add(name);
      }
    }
    if (!why) perAgent[agent] = sorted(mine);
  }
  for (const [agent, why] of r.notAgents) unusable[agent] = `${agent} ${why}`;
  // A name refused in any agent is refused in all: the lists must never be looser than the strictest agent.
  for (const n of [...Object.keys(refused), ...Object.keys(deprecated)]) allowed.delete(n);
  const sortObj = (o: Record<string, string>) => Object.fromEntries(Object.entries(o).sort(([a], [b]) => a.localeCompare(b)));
  return {
    version: r.version,
    allowed: sorted(allowed),
    secretOnly: sorted(secretOnly),
    refused: sortObj(refused),
    deprecated: sortObj(deprecated),
    unusable: sortObj(unusable),
    perAgent: Object.fromEntries(Object.entries(perAgent).sort(([a], [b]) => a.localeCompare(b))),
    spacedSelects: sorted(spaced),
  };
}

// ---- outputs ---------------------------------------------------------------------------------------------

export async function reviewedSource(l: Lists): Promise<string> {
  const json = (x: unknown) => JSON.stringify(x, null, 2);
  const src = `// generated by tools/gen-fence-agent-rules.ts from the metadata of fence-agents ${l.version} (npm run gen:fence-rules) — do not edit
//
// The fence agent parameters this version of Stockade reviewed. At run time a parameter must be declared by the
// installed agent's own metadata, pass the rule in fence-metadata.ts for that agent, and be listed here: a name a
// newer fence-agents adds is refused until it is reviewed.

/** The fence-agents version the lists were made from. */
export const REVIEWED_FENCE_AGENTS_VERSION = ${json(l.version)};

/** Every name some agent takes that neither runs a program nor names a file (credentials included). */
export const REVIEWED_PARAMETERS: ReadonlySet<string> = new Set(${json(l.allowed)});

/** Credentials that only a credentials Secret may supply, never the spec. */
export const SECRET_ONLY_PARAMETERS: ReadonlySet<string> = new Set(${json(l.secretOnly)});

/** Names refused in every agent, with why. */
export const REFUSED_PARAMETERS: Readonly<Record<string, string>> = ${json(l.refused)};

/** Deprecated aliases, refused in favour of their replacement. */
export const DEPRECATED_PARAMETERS: Readonly<Record<string, string>> = ${json(l.deprecated)};

/** Installed fence_* executables Stockade cannot use, with why. */
export const UNUSABLE_AGENTS: Readonly<Record<string, string>> = ${json(l.unusable)};
`;
  return format(src, { ...(await resolveConfig(REVIEWED_FILE)), parser: "typescript", filepath: REVIEWED_FILE });
}

const celList = (xs: readonly string[]) => `[${xs.map((x) => `'${x}'`).join(", ")}]`;
const celSet = (xs: readonly string[]) => `{${xs.map((x) => `'${x}': true`).join(", ")}}`;
const celMap = (o: Record<string, readonly string[]>) =>
  `{${Object.entries(o)
    .map(([k, v]) => `'${k}': ${celList(v)}`)
    .join(", ")}}`;
/** Names a CRD key can hold (spec parameter names are identifiers); dashed or dotted agent options are unreachable. */
const IDENT = /^[A-Za-z][A-Za-z0-9_]*$/;

export interface CelRule {
  rule: string;
  message?: string;
  messageExpression?: string;
  fieldPath?: string;
  reason?: string;
}

/** The options of the brief's issue, named in the refusal message. */
const NAMED = ["passwd_script", "password_script", "ipmitool_path", "ssh_path", "sudo_path", "identity_file", "ssh_options", "debug_file"];
const WHY_DANGEROUS = "they run commands or name files on the operator's host, which runs fence agents with its own privileges";
const KUBELET = "a node's kubelet may write them on its own Node, so a compromised node could point Stockade at another machine";
const INSTEAD =
  "set per-node values in spec.nodes.<node>.parameters, or in labels under node-restriction.kubernetes.io/ (only administrators can set those)";

function names(l: Lists) {
  return {
    allowed: sorted([...new Set([...l.allowed, ...nativeNames])]).filter((n) => IDENT.test(n)),
    secretOnly: sorted([...new Set([...l.secretOnly, ...Object.values(NATIVE).flatMap((t) => t.secretOnly)])]),
    // A native type's own names (ipmi's "port" is fence agents' deprecated alias of plug) are not refused here:
    // per agent and per type, the spec-level rules refuse what each does not take.
    dangerous: Object.keys(l.refused).filter((n) => IDENT.test(n) && !nativeNames.includes(n)),
    deprecated: Object.keys(l.deprecated).filter((n) => IDENT.test(n) && !nativeNames.includes(n)),
  };
}

/** Messages shared by every parameter map. (messageExpression naming the offending keys exceeds its cost budget.) */
function messages(l: Lists, field: string) {
  const n = names(l);
  const first = (xs: string[], k: number) => xs.slice(0, k).join(", ") + (xs.length > k ? ", ..." : "");
  return {
    secret: `${field} must not contain credentials (${n.secretOnly.join(", ")}): put them in the Secret named by credentialsSecretRef`,
    dangerous:
      `${field} must not contain ${NAMED.join(", ")} or any other option that runs a command or names a file ` +
      `(every *_path, *_script and *_file option...; docs/api.md lists them): ${WHY_DANGEROUS}`,
    deprecated: `${field} must not contain deprecated fence agent aliases (${first(n.deprecated, 8)}): use their current names, e.g. ip, plug, username, password`,
    allowed:
      `${field} may contain only parameters Stockade passes to agents: ${Object.keys(NATIVE)
        .map((t) => `${t} takes ${plain(t).join(", ")}`)
        .join("; ")}; fence agents take the options of ` +
      `fence-agents ${l.version} that neither run programs nor name files, by their current names (ip, not ipaddr; plug, not port) (docs/api.md)`,
    values: `${field} values must not start with '-' or contain whitespace: fence agents build command lines from them, and such a value would become extra options`,
  };
}

/** Rules for a top-level parameter map: spec.parameters or spec.nodeTemplates. */
function topRules(l: Lists, field: string, withValues: boolean): CelRule[] {
  const n = names(l);
  const m = messages(l, field);
  const rules: CelRule[] = [
    { rule: `!self.exists(k, k in ${celList(n.secretOnly)})`, message: m.secret },
    { rule: `!self.exists(k, k in ${celList(n.dangerous)})`, message: m.dangerous },
    { rule: `!self.exists(k, k in ${celList(n.deprecated)})`, message: m.deprecated },
    { rule: `self.all(k, k in ${celList(n.allowed)} || k.startsWith('${EXTRA_PREFIX}'))`, message: m.allowed },
  ];
  // Select options may contain spaces ("DRAC CMC"): the operator checks those against the agent's choices.
  // A caBundle is a PEM (starts with '-', has spaces and line breaks): the operator parses it.
  if (withValues)
    rules.push({
      rule: `self.all(k, k in ${celList([...l.spacedSelects, "caBundle"])} || !self[k].matches('^-|\\\\s'))`,
      message: m.values,
    });
  return rules;
}

/** Template sources: only what a node's kubelet cannot write. Not from metadata, generated here to keep escaping in one place. */
function templateRules(): CelRule[] {
  const expr = String.raw`^\{\{\s*(name|providerID|labels\s*\[\s*("[^"]*"|'[^']*')\s*\])\s*\}\}$`;
  const protectedKey = String.raw`^["']([a-z0-9]([-a-z0-9]*[a-z0-9])?\.)*node-restriction\.kubernetes\.io/`;
  const q = (re: string) => `'${re.replaceAll("\\", "\\\\").replaceAll("'", "\\'")}'`;
  return [
    {
      rule: `!self.exists(k, self[k].matches(${q(String.raw`\{\{\s*annotations\s*\[`)}))`,
      message: `spec.nodeTemplates must not read annotations: ${KUBELET.replace("them", "any annotation")} (NodeRestriction does not restrict annotations); ${INSTEAD}`,
    },
    {
      rule: `self.all(k, self[k].findAll(${q(String.raw`labels\s*\[\s*["'][^"']*`)}).all(m, m.find(${q(String.raw`["'].*`)}).matches(${q(protectedKey)})))`,
      message: `spec.nodeTemplates may read only labels under node-restriction.kubernetes.io/: ${KUBELET.replace("them", "other labels")}; ${INSTEAD}`,
    },
    {
      rule: `self.all(k, self[k].findAll(${q(String.raw`\{\{[^}]*\}\}`)}).all(e, e.matches(${q(expr)})))`,
      message: `spec.nodeTemplates may use only {{ name }}, {{ providerID }} and {{ labels["node-restriction.kubernetes.io/<key>"] }}`,
    },
  ];
}

/** Rules for spec.nodes[*].parameters: the union as a set, cheap value checks (the map may repeat 5000 times). */
function nodeRules(l: Lists): CelRule[] {
  const n = names(l);
  const m = messages(l, "spec.nodes[*].parameters");
  return [
    { rule: `!self.exists(k, k in ${celList(n.secretOnly)})`, message: m.secret },
    { rule: `!self.exists(k, k in ${celList(n.dangerous)})`, message: m.dangerous },
    { rule: `self.all(k, k in ${celSet(n.allowed)} || k.startsWith('${EXTRA_PREFIX}'))`, message: m.allowed },
    // A regex over 16 values of 256 characters exceeds the budget: a leading '-' and spaces (the reproduced injection).
    { rule: `self.all(k, !self[k].startsWith('-') && !self[k].contains(' '))`, message: m.values.replace("whitespace", "spaces") },
  ];
}

/** Spec-level rules: what a given type or agent takes. */
function specRules(l: Lists): CelRule[] {
  const agents = celList(Object.keys(l.perAgent));
  const perAgent = celMap(l.perAgent);
  const native = celMap(Object.fromEntries(Object.entries(NATIVE).map(([t, v]) => [t, v.parameters])));
  const nativeTypes = celList(Object.keys(NATIVE));
  const quote = (x: string) => `'${x.replaceAll("\\", "\\\\").replaceAll("'", "\\'")}'`;
  const said = `{${Object.keys(NATIVE)
    .map((t) => `${quote(t)}: ${quote(nativeMessage(t))}`)
    .join(", ")}}`;
  // Only webhook passes the site's own x_<name> parameters on.
  const extra = (k: string) => `(self.type == 'webhook' && ${k}.startsWith('${EXTRA_PREFIX}'))`;
  const unusable = Object.keys(l.unusable);
  return [
    {
      rule: `!has(self.agent) || !(self.agent in ${celList(unusable)})`,
      fieldPath: ".agent",
      messageExpression: `self.agent + ' cannot be used by Stockade: it has no off or status action, or is not a fence agent (${unusable.join(", ")})'`,
    },
    ...(["parameters", "nodeTemplates"] as const).map((f) => ({
      rule: `self.type != 'fenceAgent' || !has(self.${f}) || !(self.agent in ${agents}) || self.${f}.all(k, k in ${perAgent}[self.agent])`,
      fieldPath: `.${f}`,
      messageExpression: `'spec.${f} contains a parameter that ' + self.agent + ' does not take, or that Stockade refuses for it: \`' + self.agent + ' -o metadata\` lists its parameters; docs/api.md says which are refused'`,
    })),
    // One rule for every native type (its cost does not grow with the number of types).
    {
      rule:
        `!(self.type in ${nativeTypes}) || ((!has(self.parameters) || self.parameters.all(k, k in ${native}[self.type] || ${extra("k")})) && ` +
        `(!has(self.nodeTemplates) || self.nodeTemplates.all(k, k in ${native}[self.type] || ${extra("k")})) && ` +
        `(!has(self.nodes) || self.nodes.all(n, !has(self.nodes[n].parameters) || self.nodes[n].parameters.all(k, k in ${native}[self.type] || ${extra("k")}))))`,
      messageExpression: `${said}[self.type]`,
    },
    {
      rule:
        `self.type == 'webhook' || ((!has(self.parameters) || !self.parameters.exists(k, k.startsWith('${EXTRA_PREFIX}'))) && ` +
        `(!has(self.nodeTemplates) || !self.nodeTemplates.exists(k, k.startsWith('${EXTRA_PREFIX}'))))`,
      message: `only type webhook takes ${EXTRA_PREFIX}<name> parameters (the power service's own, passed on in the request)`,
    },
  ];
}

const BEGIN = "# BEGIN generated by tools/gen-fence-agent-rules.ts";
const END = "# END generated";

export function rulesForBlock(l: Lists, block: string): CelRule[] {
  switch (block) {
    case "spec":
      return specRules(l);
    case "spec.parameters":
      return topRules(l, block, true);
    case "spec.nodeTemplates":
      return [...topRules(l, block, false), ...templateRules()];
    case "spec.nodes[*].parameters":
      return nodeRules(l);
    default:
      throw new Error(`unknown generated block "${block}"`);
  }
}

/** The CRD with every generated block replaced; each block's marker says which field it is for. */
export async function crdSource(l: Lists, crd = readFileSync(CRD_FILE, "utf8")): Promise<string> {
  const blocks = [...crd.matchAll(new RegExp(`^( *)${BEGIN}: (\\S+)\\n[\\s\\S]*?^ *${END}$`, "gm"))];
  if (blocks.length === 0) throw new Error(`${CRD_FILE} has no "${BEGIN}: <field>" markers`);
  let out = crd;
  for (const b of blocks.reverse()) {
    const [whole, indent, block] = [b[0], b[1]!, b[2]!];
    const body = rulesForBlock(l, block)
      .map((r) =>
        Object.entries(r)
          .map(([k, v], i) => `${indent}${i === 0 ? "- " : "  "}${k}: ${JSON.stringify(v)}`)
          .join("\n"),
      )
      .join("\n");
    out = out.slice(0, b.index) + `${indent}${BEGIN}: ${block}\n${body}\n${indent}${END}` + out.slice(b.index + whole.length);
  }
  return format(out, { ...(await resolveConfig(CRD_FILE)), parser: "yaml", filepath: CRD_FILE });
}

if (import.meta.main) {
  const l = lists(await review());
  writeFileSync(REVIEWED_FILE, await reviewedSource(l));
  writeFileSync(CRD_FILE, await crdSource(l));
  console.log(
    `fence-agents ${l.version}: ${l.allowed.length} allowed names (${l.secretOnly.length} secret-only), ${Object.keys(l.refused).length} refused, ` +
      `${Object.keys(l.deprecated).length} deprecated aliases, ${Object.keys(l.unusable).length} unusable agents; wrote ${REVIEWED_FILE} and ${CRD_FILE}`,
  );
  console.log("now run npm run gen:api && npm run gen:manifests");
}
