// What a ClusterLabs fence agent says about itself (`fence_X -o metadata`), parsed, and the rule that decides
// which of its parameters a FenceAgent may set. The rule is pure and shared by the operator (over the agent
// installed next to it) and tools/gen-fence-agent-rules.ts (over every installed agent, for the CRD).

export type ParameterType = "string" | "integer" | "second" | "boolean" | "select";

export interface AgentParameter {
  name: string;
  type: ParameterType;
  /** The choices of a select parameter. */
  options: string[];
  default?: string;
  required: boolean;
  /** A deprecated alias, kept by the agent for old configurations. */
  deprecated: boolean;
  /** The deprecated alias this name replaces (metadata's `obsoletes`). */
  obsoletes?: string;
  /** The getopt text, e.g. "-a, --ip=[ip]". */
  getopt: string;
  /** The getopt argument placeholder, e.g. "path" for "--ssh-path=[path]"; "" for a flag. */
  placeholder: string;
  description: string;
}

export interface AgentMetadata {
  /** The name the agent reports (fence_ilo3 for the fence_ipmilan symlink fence_ilo3). */
  name: string;
  parameters: ReadonlyMap<string, AgentParameter>;
  actions: ReadonlySet<string>;
}

const ENTITIES: Record<string, string> = { lt: "<", gt: ">", amp: "&", quot: '"', apos: "'" };
const decode = (s: string) =>
  s.replace(/&(lt|gt|amp|quot|apos|#\d+|#x[0-9a-f]+);/gi, (_m, e: string) =>
    e.startsWith("#") ? String.fromCodePoint(e[1] === "x" || e[1] === "X" ? parseInt(e.slice(2), 16) : Number(e.slice(1))) : ENTITIES[e]!,
  );

function attributes(text: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const m of text.matchAll(/([A-Za-z_:][-A-Za-z0-9_:.]*)\s*=\s*"([^"]*)"/g)) out[m[1]!] = decode(m[2]!);
  return out;
}

const TYPES = new Set<ParameterType>(["string", "integer", "second", "boolean", "select"]);

/**
 * Parses the resource-agent XML every fencing.py agent prints for `-o metadata`. The format is machine-made and
 * flat, so a tag scanner is enough; anything unexpected is an error rather than a guess.
 */
export function parseMetadata(xml: string): AgentMetadata {
  const root = /<resource-agent\s([^>]*)>/.exec(xml);
  const name = root ? attributes(root[1]!).name : undefined;
  if (!name) throw new Error("no <resource-agent name=...> element: this is not fence agent metadata");
  const parameters = new Map<string, AgentParameter>();
  for (const m of xml.matchAll(/<parameter\s([^>]*)>([\s\S]*?)<\/parameter>/g)) {
    const a = attributes(m[1]!);
    const body = m[2]!;
    const pname = a.name;
    if (!pname) throw new Error("a <parameter> without a name");
    const getopt = attributes(/<getopt\s([^>]*)\/?>/.exec(body)?.[1] ?? "").mixed ?? "";
    const contentTag = /<content\s([^>]*?)\/?>/.exec(body);
    const content = attributes(contentTag?.[1] ?? "");
    const type = (content.type ?? "string") as ParameterType;
    if (!TYPES.has(type)) throw new Error(`parameter ${pname} has an unknown content type "${content.type}"`);
    const options = [...body.matchAll(/<option\s([^>]*?)\/?>/g)].map((o) => attributes(o[1]!).value ?? "");
    const description = decode(/<shortdesc[^>]*>([\s\S]*?)<\/shortdesc>/.exec(body)?.[1] ?? "")
      .replace(/\s+/g, " ")
      .trim();
    const placeholder = /=\s*\[?([^\]\s]*)\]?/.exec(getopt)?.[1] ?? "";
    parameters.set(pname, {
      name: pname,
      type,
      options,
      ...(content.default !== undefined && content.default !== "" ? { default: content.default } : {}),
      required: a.required === "1",
      deprecated: a.deprecated === "1",
      ...(a.obsoletes ? { obsoletes: a.obsoletes } : {}),
      getopt,
      placeholder,
      description,
    });
  }
  if (parameters.size === 0) throw new Error(`agent ${name} declares no parameters`);
  const actions = new Set([...xml.matchAll(/<action\s([^>]*?)\/?>/g)].map((x) => attributes(x[1]!).name ?? ""));
  return { name, parameters, actions };
}

// ---- the rule ------------------------------------------------------------------------------------------

export type Verdict =
  | { kind: "allowed" }
  /** A credential: may come from the credentials Secret; `secretOnly` ones never from the spec. */
  | { kind: "credential"; secretOnly: boolean }
  | { kind: "refused"; category: RefusalCategory; reason: string };

export type RefusalCategory = "managed" | "exits" | "program" | "file" | "unsafe" | "deprecated";

/**
 * Options that run a program or a command, or name a file, directory or device on the operator's host.
 * Found by reading the metadata of every agent of fence-agents 4.12.1; the patterns also catch the names a
 * later version is likely to add (`*_path`, `*_script`, `*_file`).
 */
const PROGRAM_NAME = /[_-]script$|^(exec|runonfail|runonwarn|openrc|ssh_options|sudo|use_sudo)$/;
const FILE_NAME = /[_-]file$|^(logfile|cacert|tlscacert|tlscert|tlskey|kubeconfig|serviceaccount|serial_port|devices)$/;
/** A path names a program (ipmitool_path, vboxmanage_path...) unless its text says file or directory (store_path). */
const PATH_NAME = /[_-]path$/;
const PROGRAM_PLACEHOLDER = /^(script|command|run_on_fail|run_on_warn|openrc)$/;
const FILE_PLACEHOLDER = /^(path|file|filename|debugfile|cacert|kubeconfig)$/;
// "Path to amttool binary", "Script to run ...", "Command to execute", "Identity file (private key)", "SBD Device".
const PROGRAM_TEXT = /\b(binary|script|command to execute|supplied command is run|sudo)\b/i;
const FILE_TEXT = /\b(file|directory|certificate \(PEM|devices? to use|serial device|SBD Device)\b/i;
/** Reviewed: a match above that names neither a program nor a local file. */
const HARMLESS = new Set([
  "api_path", // "The path part of the API URL"
  "suborg", // "Additional path needed to access suborganization": part of the device's URL
  "tenantId", // "Id of Azure Active Directory tenant"
  "quiet", // mentions --debug-file
  "cmd_prompt", // "regex for command prompt"
  "command_prompt",
  "shell_timeout", // "Wait X seconds for cmd prompt after issuing command"
]);

/** Credentials: the only parameters a credentials Secret may supply. username/login may also be in the spec. */
const CREDENTIAL_NAME = /^(username|login|password|passwd|community|apikey|token)$|_(passwd|password|key|kg)$/;
const USERNAME = /^(username|login)$/;

const SPECIAL: Record<string, { category: RefusalCategory; reason: string }> = {
  action: { category: "managed", reason: "is set by Stockade for each operation (off, on, status)" },
  help: { category: "exits", reason: "makes the agent print its help and exit 0 without fencing, which would read as success" },
  usage: { category: "exits", reason: "makes the agent print its usage and exit 0 without fencing, which would read as success" },
  version: { category: "exits", reason: "makes the agent print its version and exit 0 without fencing, which would read as success" },
  missing_as_off: {
    category: "unsafe",
    reason: "makes the agent report a plug it cannot find as OFF, which Stockade would take as proof that the machine is off",
  },
  port_as_ip: { category: "unsafe", reason: "makes plug the device's address: set ip instead, so that the address is checked" },
  record_only: { category: "unsafe", reason: "only records the node as needing evacuation: it does not fence anything" },
};

const PROGRAM_REASON = "runs a program or a shell command on the operator's host";
const FILE_REASON = "names a file, directory or device on the operator's host";

/** The names that denote the same option: the parameter, the deprecated alias it replaces, and its replacement. */
export function aliasesOf(m: AgentMetadata, name: string): string[] {
  const p = m.parameters.get(name);
  const out = new Set([name]);
  if (p?.obsoletes) out.add(p.obsoletes);
  for (const q of m.parameters.values()) if (q.obsoletes === name) out.add(q.name);
  return [...out];
}

/** The name to use instead of a deprecated alias. */
export function replacementOf(m: AgentMetadata, name: string): string | undefined {
  for (const q of m.parameters.values()) if (q.obsoletes === name) return q.name;
  return undefined;
}

function baseVerdict(p: AgentParameter): Verdict {
  const special = SPECIAL[p.name];
  if (special) return { kind: "refused", ...special };
  if (HARMLESS.has(p.name)) return { kind: "allowed" };
  if (PROGRAM_NAME.test(p.name) || PROGRAM_PLACEHOLDER.test(p.placeholder) || PROGRAM_TEXT.test(p.description))
    return { kind: "refused", category: "program", reason: PROGRAM_REASON };
  if (PATH_NAME.test(p.name))
    return FILE_TEXT.test(p.description)
      ? { kind: "refused", category: "file", reason: FILE_REASON }
      : { kind: "refused", category: "program", reason: PROGRAM_REASON };
  if (FILE_NAME.test(p.name) || FILE_PLACEHOLDER.test(p.placeholder) || FILE_TEXT.test(p.description))
    return { kind: "refused", category: "file", reason: FILE_REASON };
  if (CREDENTIAL_NAME.test(p.name)) return { kind: "credential", secretOnly: !USERNAME.test(p.name) };
  return { kind: "allowed" };
}

/**
 * Whether a FenceAgent may set parameter `name` of this agent. An option and its aliases share a verdict (the
 * strictest of them), so a deprecated alias cannot bypass a rule; a deprecated alias is refused anyway in favour
 * of its replacement, which keeps one name per option (and makes the duplicate-target check exact).
 */
export function verdictFor(m: AgentMetadata, name: string): Verdict | undefined {
  const p = m.parameters.get(name);
  if (!p) return undefined;
  const verdicts = aliasesOf(m, name)
    .map((n) => m.parameters.get(n))
    .filter((x) => x !== undefined)
    .map(baseVerdict);
  const refused = verdicts.find((v) => v.kind === "refused");
  if (refused) return refused;
  if (p.deprecated) {
    const use = replacementOf(m, name);
    return { kind: "refused", category: "deprecated", reason: `is a deprecated alias${use ? `: use ${use}` : ""}` };
  }
  return verdicts.find((v) => v.kind === "credential") ?? { kind: "allowed" };
}

/** Why Stockade cannot use this agent at all (it needs off and status), or undefined. */
export function unusableAgent(m: AgentMetadata): string | undefined {
  const missing = ["off", "status"].filter((a) => !m.actions.has(a));
  if (missing.length === 0) return undefined;
  return `${m.name} has no ${missing.join(" or ")} action (fence agent metadata): Stockade powers a machine off and confirms it with a status query`;
}
