// Native IPMI 2.0 through ipmitool. The password travels in the child's environment (-E), never in argv,
// where any local user could read it with ps.
import { AgentError, type AgentContext, type AgentDriver, type ParameterRules, type PowerState, listVerdict } from "./types.ts";
import { credentialProblem, hostProblem, normalizeHost, portProblem, usernameProblem } from "./values.ts";
import { ChildAborted, runChild, type ChildResult } from "./child.ts";
import { excerpt, redact } from "./redact.ts";

/**
 * ipmitool's own retransmission: one retry, 2 s per request. Against a BMC that does not answer this
 * fails in ~4 s (measured against a frozen ipmi_sim) instead of ~20 s with ipmitool's defaults
 * (-R 4 -N 1: its timeout grows with each retry and session setup waits twice). Our runner retries on top.
 */
export const IPMITOOL_RETRIES = 1;
export const IPMITOOL_TIMEOUT_SECONDS = 2;

const DEFAULTS = { port: "623", cipher: "3", interface: "lanplus", privilege: "ADMINISTRATOR" } as const;
// Also the source of the CRD's ipmi allow-list (tools/gen-fence-agent-rules.ts).
/** Every parameter the ipmi type takes; a credentials Secret may supply only username and password. */
export const IPMI_PARAMETERS = ["address", "port", "username", "password", "cipher", "interface", "privilege"];
export const IPMI_CREDENTIALS = ["username", "password"];
/** Never in the spec. */
export const IPMI_SECRET_ONLY = ["password"];
const INTERFACES = ["lan", "lanplus"];
const PRIVILEGES = ["CALLBACK", "USER", "OPERATOR", "ADMINISTRATOR", "OEM"];

// ipmitool -v chatter that says nothing about the failure.
const NOISE = [
  /^Loading IANA PEN Registry/,
  /^Running Get VSO Capabilities/,
  /^Invalid completion code received: Invalid command/,
  /^Discovered IPMB address/,
  /^Get HPM\.x Capabilities request failed/,
];

interface Target {
  address: string;
  port: string;
  username: string;
  password: string;
  cipher: string;
  interface: string;
  privilege: string;
}

function fields(p: Record<string, string>): Target {
  return {
    address: p.address ?? "",
    port: p.port || DEFAULTS.port,
    username: p.username ?? "",
    password: p.password ?? "",
    cipher: p.cipher || DEFAULTS.cipher,
    interface: p.interface || DEFAULTS.interface,
    privilege: (p.privilege || DEFAULTS.privilege).toUpperCase(),
  };
}

function check(parameters: Record<string, string>): string[] {
  const problems: string[] = [];
  for (const k of Object.keys(parameters))
    if (!IPMI_PARAMETERS.includes(k))
      problems.push(`parameter ${k} is not an ipmi parameter: ipmi takes ${IPMI_PARAMETERS.join(", ")} (docs/api.md)`);
  const t = fields(parameters);
  const bad = (name: string, problem: string | undefined, value: string) => {
    if (problem) problems.push(`parameter ${name} ${problem}, not ${JSON.stringify(value)}`);
  };
  if (!t.address)
    problems.push(
      "parameter address (the BMC's host name or IP) is missing: set it in spec.nodes.<node>.parameters, or in nodeTemplates from a node-restriction.kubernetes.io/ label",
    );
  else bad("address", hostProblem(t.address), t.address);
  if (!t.username) problems.push("parameter username is missing: set it in parameters or in the credentials Secret");
  else bad("username", usernameProblem(t.username), t.username);
  if (!t.password) problems.push("parameter password is missing: put a password key in the Secret named by credentialsSecretRef");
  else if (credentialProblem(t.password)) problems.push(`parameter password ${credentialProblem(t.password)}`);
  bad("port", portProblem(t.port), t.port);
  if (!/^\d{1,2}$/.test(t.cipher) || Number(t.cipher) > 17)
    problems.push(`parameter cipher must be an IPMI cipher suite number 0-17, not ${JSON.stringify(t.cipher)}`);
  if (!INTERFACES.includes(t.interface))
    problems.push(`parameter interface must be one of ${INTERFACES.join(", ")}, not ${JSON.stringify(t.interface)}`);
  if (!PRIVILEGES.includes(t.privilege))
    problems.push(`parameter privilege must be one of ${PRIVILEGES.join(", ")}, not ${JSON.stringify(t.privilege)}`);
  return problems;
}

/** What the ipmi type accepts; its target is the BMC (address and port): one BMC controls one machine. */
export const ipmiRules: ParameterRules = {
  subject: "ipmi",
  verdict: (name) => listVerdict({ parameters: IPMI_PARAMETERS, credentials: IPMI_CREDENTIALS, secretOnly: IPMI_SECRET_ONLY }, name),
  credentials: IPMI_CREDENTIALS,
  check,
  target: (p) => {
    const t = fields(p);
    if (!t.address || hostProblem(t.address)) return undefined;
    return { device: `${normalizeHost(t.address)}:${Number(t.port) || t.port}`, outlets: [] };
  },
};

async function ipmitool(ctx: AgentContext, command: string[]): Promise<ChildResult & { where: string }> {
  const problems = check(ctx.parameters);
  if (problems.length > 0) throw new AgentError("Config", problems.join("; "));
  const t = fields(ctx.parameters);
  const where = `BMC ${t.address}:${t.port}`;
  // prettier-ignore
  const args = [
    "-I", t.interface, "-H", t.address, "-p", t.port, "-U", t.username, "-C", t.cipher, "-L", t.privilege,
    "-E", "-R", String(IPMITOOL_RETRIES), "-N", String(IPMITOOL_TIMEOUT_SECONDS),
    "-v", // without it ipmitool says "Unable to establish session" for a wrong password and a dead BMC alike
    ...command,
  ];
  try {
    const r = await runChild("ipmitool", args, { env: { ...process.env, IPMI_PASSWORD: t.password }, signal: ctx.signal });
    return { ...r, where };
  } catch (e) {
    if (e instanceof ChildAborted)
      throw new AgentError("TimedOut", `ipmitool ${command.join(" ")} against ${where} was killed at the deadline`);
    if ((e as NodeJS.ErrnoException).code === "ENOENT")
      throw new AgentError("Config", "ipmitool is not installed on the operator's host: install the ipmitool package");
    throw new AgentError("Failed", `could not run ipmitool: ${(e as Error).message}`);
  }
}

/** Maps ipmitool's complaints (as printed with -v, checked against ipmi_sim) to an error kind and a clear message. */
export function classifyIpmitoolFailure(
  r: ChildResult,
  where: string,
  t: { username: string; cipher: string; privilege: string },
): AgentError {
  const out = `${r.stderr}\n${r.stdout}`;
  const detail = excerpt(out, 240, NOISE);
  if (/RAKP 2 HMAC is invalid|unauthorized name|Unable to read password|invalid user name|password/i.test(out)) {
    return new AgentError(
      "AuthFailed",
      `${where} rejected the credentials of user "${t.username}": check username and password (ipmitool: ${detail})`,
    );
  }
  if (/Insufficient privilege|privilege level/i.test(out)) {
    return new AgentError(
      "AuthFailed",
      `user "${t.username}" may not control power at privilege ${t.privilege} on ${where} (ipmitool: ${detail})`,
    );
  }
  if (/invalid (authentication|integrity|confidentiality) algorithm|cipher suite/i.test(out)) {
    return new AgentError(
      "Config",
      `${where} does not accept cipher suite ${t.cipher}: set parameter cipher to one it supports (ipmitool: ${detail})`,
    );
  }
  // A request that got no answer at all: "Get Auth Capabilities error" with no reason after it.
  if (/Get Auth Capabilities error\s*$|No response|Address lookup .* failed|timed? ?out/im.test(out)) {
    const tries = IPMITOOL_RETRIES + 1;
    return new AgentError(
      "Unreachable",
      `${where} did not answer (${tries} tries of ${IPMITOOL_TIMEOUT_SECONDS} s each): check the address, port and network (ipmitool: ${detail})`,
    );
  }
  return new AgentError("Failed", `ipmitool failed against ${where} (exit ${r.code ?? r.signal}): ${detail}`);
}

async function run(ctx: AgentContext, command: string[], ok: RegExp): Promise<RegExpExecArray> {
  const r = await ipmitool(ctx, command);
  const t = fields(ctx.parameters);
  const scrub = (e: AgentError) => new AgentError(e.kind, redact(e.message, ctx.parameters));
  if (r.code !== 0) throw scrub(classifyIpmitoolFailure(r, r.where, t));
  const m = ok.exec(r.stdout);
  if (!m)
    throw scrub(
      new AgentError(
        "BadOutput",
        `unexpected answer to ipmitool ${command.join(" ")} from ${r.where}: ${excerpt(r.stdout || r.stderr, 240, NOISE)}`,
      ),
    );
  return m;
}

export const ipmiDriver: AgentDriver = {
  type: "ipmi",
  validate: check,
  async power(ctx, action) {
    await run(ctx, ["chassis", "power", action], action === "off" ? /Chassis Power Control: Down\/Off/i : /Chassis Power Control: Up\/On/i);
  },
  async status(ctx): Promise<PowerState> {
    const m = await run(ctx, ["chassis", "power", "status"], /Chassis Power is (on|off)\b/i);
    return m[1]!.toLowerCase() as PowerState;
  },
};
