// Any ClusterLabs fence_* agent, through its stdin contract: "key=value" lines (action included), then EOF.
// Exit status is the answer: off/on 0 = done; status 0 = on, 2 = off, 1 = failure. Credentials only ever
// travel on stdin from us, and stdin is never quoted in a message. (What the agent does with them is its
// business: fence_ipmilan 4.12 puts the password on ipmitool's command line, `-P '<password>'`, quoted.)
//
// Which parameters an agent takes comes from the agent itself (`fence_X -o metadata`, read once per
// executable): only those it declares, that the rule in fence-metadata.ts allows, and that this version of
// Stockade reviewed (reviewed-fence-parameters.ts) reach it, each value checked by its declared type.
import { spawnSync } from "node:child_process";
import { accessSync, constants, statSync } from "node:fs";
import { delimiter, join } from "node:path";
import { AgentError, type AgentContext, type AgentDriver, type FencingTarget, type ParameterRules, type PowerState } from "./types.ts";
import { ChildAborted, runChild, type ChildResult } from "./child.ts";
import { excerpt, redact } from "./redact.ts";
import { parseMetadata, unusableAgent, verdictFor, type AgentMetadata, type AgentParameter } from "./fence-metadata.ts";
import { REVIEWED_FENCE_AGENTS_VERSION, REVIEWED_PARAMETERS } from "./reviewed-fence-parameters.ts";
import { credentialProblem, hostProblem, normalizeHost, plainProblem, portProblem, usernameProblem } from "./values.ts";

export const AGENT_NAME = /^fence_[a-z0-9_]+$/;
/** Debian and RHEL install the agents in /usr/sbin, which is often not on a service's PATH. */
const SBIN_DIRS = ["/usr/sbin", "/sbin"];
const PARAM_KEY = /^[A-Za-z0-9][A-Za-z0-9_.-]*$/;

// Python noise some distributions' agents print on every run.
const NOISE = [/DeprecationWarning/, /^from pipes import/];

function searchDirs(path = process.env.PATH ?? ""): string[] {
  return [...new Set([...path.split(delimiter).filter((d) => d.length > 0), ...SBIN_DIRS])];
}

/** The absolute path of agent `name` on PATH plus /usr/sbin and /sbin, or undefined. */
export function resolveAgent(name: string, path = process.env.PATH): string | undefined {
  if (!AGENT_NAME.test(name)) return undefined;
  for (const dir of searchDirs(path)) {
    const file = join(dir, name);
    try {
      if (!statSync(file).isFile()) continue;
      accessSync(file, constants.X_OK);
      return file;
    } catch {
      // not here
    }
  }
  return undefined;
}

function notInstalled(name: string): string {
  return `fence agent ${name} was not found on PATH, /usr/sbin or /sbin of the operator's host: install the fence-agents package (or the one providing ${name})`;
}

// ---- metadata, read once per executable ------------------------------------------------------------------

const METADATA_TIMEOUT_MS = 10_000;

interface Cached {
  /** The file's identity and version when read: a replaced or upgraded agent is read again. */
  stamp: string;
  rules?: ParameterRules;
  error?: string;
}
const cache = new Map<string, Cached>();

function stampOf(file: string): string {
  const st = statSync(file);
  return `${st.dev}:${st.ino}:${st.size}:${st.mtimeMs}`;
}

function fromOutput(name: string, r: { code: number | null; stdout: string; stderr: string }): Omit<Cached, "stamp"> {
  if (r.code !== 0)
    return {
      error: `${name} -o metadata ${r.code === null ? "was killed" : `exited with ${r.code}`}: ${excerpt(r.stderr || r.stdout, 200, NOISE)}`,
    };
  try {
    return { rules: rulesFromMetadata(parseMetadata(r.stdout)) };
  } catch (e) {
    return {
      error: `${name} does not describe itself as a fence agent (${name} -o metadata: ${(e as Error).message}): Stockade runs only agents of the fencing library`,
    };
  }
}

const agentEnv = () => ({ ...process.env, PATH: searchDirs().join(delimiter) });

function cached(name: string): { file: string; stamp: string; hit?: Cached } {
  const file = resolveAgent(name);
  if (file === undefined) throw new AgentError("Config", notInstalled(name));
  const stamp = stampOf(file);
  const hit = cache.get(file);
  return { file, stamp, ...(hit?.stamp === stamp ? { hit } : {}) };
}

function unwrap(c: Cached): ParameterRules {
  if (c.error !== undefined) throw new AgentError("Config", c.error);
  return c.rules!;
}

/**
 * The rules of installed agent `name`, from its metadata; read with a blocking call the first time (an agent
 * prints its metadata in ~0.1 s; loadFenceAgentRules warms the cache without blocking). Throws a Config
 * AgentError when the agent is missing or is not a fence agent.
 */
export function fenceAgentRules(name: string): ParameterRules {
  const { file, stamp, hit } = cached(name);
  if (hit) return unwrap(hit);
  const r = spawnSync(file, ["-o", "metadata"], {
    input: "",
    env: agentEnv(),
    encoding: "utf8",
    timeout: METADATA_TIMEOUT_MS,
    killSignal: "SIGKILL",
    maxBuffer: 4 << 20,
  });
  const entry: Cached = {
    stamp,
    ...(r.error
      ? { error: `could not run ${file} -o metadata: ${r.error.message}` }
      : fromOutput(name, { code: r.status, stdout: r.stdout, stderr: r.stderr })),
  };
  cache.set(file, entry);
  return unwrap(entry);
}

/** fenceAgentRules without blocking the event loop: the FenceAgent controller calls it before checking an agent. */
export async function loadFenceAgentRules(name: string): Promise<ParameterRules> {
  const { file, stamp, hit } = cached(name);
  if (hit) return unwrap(hit);
  let entry: Cached;
  try {
    const r = await runChild(file, ["-o", "metadata"], { env: agentEnv(), input: "", signal: AbortSignal.timeout(METADATA_TIMEOUT_MS) });
    entry = { stamp, ...fromOutput(name, r) };
  } catch (e) {
    entry = {
      stamp,
      error: `could not run ${file} -o metadata: ${e instanceof ChildAborted ? `no answer within ${METADATA_TIMEOUT_MS / 1000} s` : (e as Error).message}`,
    };
  }
  cache.set(file, entry);
  return unwrap(entry);
}

// ---- the rules of one agent ------------------------------------------------------------------------------

/** String parameters that name the device: a host, a port. */
const HOST_PARAMETERS = new Set(["ip", "proxyhost", "crosscableip"]);
const PORT_PARAMETERS = new Set(["ipport", "proxyport"]);
/**
 * Parameters that select one machine among several behind one address, so that two nodes differing in them are
 * different machines: a PDU's switch, an IPMI bridge target, an HMC's managed system, a cloud's zone...
 */
const TARGET_QUALIFIERS = [
  "switch",
  "target",
  "managed",
  "systems_uri",
  "namespace",
  "zone",
  "region",
  "project",
  "resourceGroup",
  "subscriptionId",
  "vmware_datacenter",
  "crn",
  "instance",
];
const BOOLEAN = /^(1|0|yes|no|on|off|true|false)$/i;

function valueProblem(p: AgentParameter, value: string, credential: boolean): string | undefined {
  if (credential) {
    if (p.name === "username" || p.name === "login") return usernameProblem(value);
    // ipmitool -y takes the Kg key as hex; fence_ipmilan passes it unquoted.
    if (/_kg$/.test(p.name) && !/^[0-9A-Fa-f]{1,40}$/.test(value)) return "must be 1-40 hexadecimal digits";
    return credentialProblem(value);
  }
  if (PORT_PARAMETERS.has(p.name)) return portProblem(value);
  switch (p.type) {
    case "select":
      return p.options.some((o) => o.toLowerCase() === value.toLowerCase()) ? undefined : `must be one of ${p.options.join(", ")}`;
    case "boolean":
      return BOOLEAN.test(value) ? undefined : "must be 1 or 0 (also yes/no, on/off, true/false)";
    case "integer":
    case "second":
      return /^\d{1,9}$/.test(value) ? undefined : `must be a whole number${p.type === "second" ? " of seconds" : ""}`;
    default:
      return HOST_PARAMETERS.has(p.name) ? hostProblem(value) : plainProblem(value);
  }
}

/** The rules of one agent, from its metadata. Pure; `reviewed` is the list this Stockade version checked. */
export function rulesFromMetadata(m: AgentMetadata, reviewed: ReadonlySet<string> = REVIEWED_PARAMETERS): ParameterRules {
  const agent = m.name;
  const verdict: ParameterRules["verdict"] = (name) => {
    const v = verdictFor(m, name);
    if (!v) return undefined;
    if (v.kind === "refused") return { kind: "refused", reason: v.reason };
    if (!reviewed.has(name))
      return {
        kind: "refused",
        reason: `is not among the fence agent parameters this Stockade version reviewed (fence-agents ${REVIEWED_FENCE_AGENTS_VERSION}): it could run a program or name a file`,
      };
    return v;
  };
  const credentials = [...m.parameters.keys()].filter((n) => verdict(n)?.kind === "credential");
  const unusable = unusableAgent(m);
  return {
    subject: agent,
    verdict,
    credentials,
    check(parameters) {
      const problems: string[] = unusable ? [unusable] : [];
      for (const [k, value] of Object.entries(parameters)) {
        if (!PARAM_KEY.test(k)) {
          problems.push(`parameter name ${JSON.stringify(k)} cannot be passed on a fence agent's stdin: use letters, digits, _ . -`);
          continue;
        }
        const v = verdict(k);
        const p = m.parameters.get(k);
        if (!v || !p) problems.push(`parameter ${k} is not a parameter of ${agent}: \`${agent} -o metadata\` lists them`);
        else if (v.kind === "refused") problems.push(`parameter ${k} ${v.reason}: remove it`);
        else {
          const why = valueProblem(p, value, v.kind === "credential");
          // Never quote a credential's value.
          if (why) problems.push(`parameter ${k} ${why}${v.kind === "credential" ? "" : `, not ${JSON.stringify(value)}`}`);
        }
      }
      for (const p of m.parameters.values()) {
        if (!p.required || p.deprecated || p.name === "action" || p.name in parameters) continue;
        if (verdict(p.name)?.kind === "refused") continue;
        problems.push(`${agent} requires parameter ${p.name}${p.description ? ` (${p.description})` : ""}`);
      }
      return problems;
    },
    target(parameters): FencingTarget | undefined {
      if (!m.parameters.has("ip") && !m.parameters.has("plug")) return undefined;
      const ip = parameters.ip;
      if (ip !== undefined && hostProblem(ip)) return undefined;
      const port = parameters.ipport ?? m.parameters.get("ipport")?.default ?? "";
      const parts = [
        ...(ip !== undefined ? [`${normalizeHost(ip)}:${Number(port) || port}`] : []),
        ...TARGET_QUALIFIERS.filter((q) => parameters[q] !== undefined).map((q) => `${q}=${parameters[q]}`),
      ];
      const separator = parameters.plug_separator || m.parameters.get("plug_separator")?.default || ",";
      const outlets = (parameters.plug ?? "")
        .split(separator)
        .map((o) => o.trim())
        .filter((o) => o.length > 0);
      if (parts.length === 0 && outlets.length === 0) return undefined;
      return { device: parts.join(" "), outlets };
    },
  };
}

export class FenceAgentDriver implements AgentDriver {
  readonly type = "fenceAgent" as const;
  readonly agent: string;

  constructor(agent: string) {
    if (!AGENT_NAME.test(agent))
      throw new AgentError("Config", `agent "${agent}" is not a fence agent name: it must match ${AGENT_NAME.source}`);
    this.agent = agent;
  }

  validate(parameters: Record<string, string>): string[] {
    try {
      return fenceAgentRules(this.agent).check(parameters);
    } catch (e) {
      return [(e as Error).message];
    }
  }

  private async invoke(ctx: AgentContext, action: "off" | "on" | "status"): Promise<ChildResult> {
    const problems = this.validate(ctx.parameters);
    if (problems.length > 0) throw new AgentError("Config", redact(problems.join("; "), ctx.parameters));
    const file = resolveAgent(this.agent);
    if (file === undefined) throw new AgentError("Config", notInstalled(this.agent));
    const input = [`action=${action}`, ...Object.entries(ctx.parameters).map(([k, v]) => `${k}=${v}`), ""].join("\n");
    // The agents themselves run ipmitool & co. from sbin directories.
    const env = { ...process.env, PATH: searchDirs().join(delimiter) };
    try {
      return await runChild(file, [], { env, input, signal: ctx.signal });
    } catch (e) {
      if (e instanceof ChildAborted) throw new AgentError("TimedOut", `${this.agent} ${action} was killed at the deadline`);
      const code = (e as NodeJS.ErrnoException).code;
      if (code === "ENOENT") throw new AgentError("Config", notInstalled(this.agent));
      throw new AgentError("Config", `could not run ${file}: ${(e as Error).message}`);
    }
  }

  private failure(ctx: AgentContext, action: string, r: ChildResult, expected: string): AgentError {
    const how = r.code === null ? `was killed by ${r.signal}` : `exited with ${r.code} (${expected})`;
    const detail = excerpt(r.stderr || r.stdout, 240, NOISE);
    const msg = redact(`${this.agent} ${action} ${how}: ${detail}`, ctx.parameters);
    const out = `${r.stderr}\n${r.stdout}`;
    // The fencing library's standard failure messages (fencing.py EC_*).
    let kind: AgentError["kind"] = "Failed";
    // status has a three-valued answer: any other exit code means we cannot tell what the agent saw.
    if (action === "status" && r.code !== null && r.code !== 1) kind = "BadOutput";
    else if (/Connection timed out|Connection lost/i.test(out)) kind = "Unreachable";
    else if (/does not have the correct privileges|Login failed|authentication failed/i.test(out)) kind = "AuthFailed";
    else if (/You have to set login password|Failed: Unrecognised action|required option/i.test(out)) kind = "Config";
    const hint = kind === "Failed" ? "; for details run the agent by hand with the same parameters plus verbose=1" : "";
    return new AgentError(kind, msg + hint);
  }

  async power(ctx: AgentContext, action: "off" | "on"): Promise<void> {
    const r = await this.invoke(ctx, action);
    if (r.code !== 0) throw this.failure(ctx, action, r, "expected 0 = success");
  }

  async status(ctx: AgentContext): Promise<PowerState> {
    const r = await this.invoke(ctx, "status");
    if (r.code === 0) return "on";
    if (r.code === 2) return "off";
    throw this.failure(ctx, "status", r, "expected 0 = on, 2 = off");
  }
}
