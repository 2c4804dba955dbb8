// Native Redfish (DMTF DSP0266) over HTTPS. One driver call is one short conversation with the BMC: service
// root, session (or Basic auth), the ComputerSystem, then a PowerState read or a ComputerSystem.Reset, and the
// session deleted at the end. The BMC's certificate is verified (caBundle from the credentials Secret, else the
// host's trusted roots); skipping that takes an explicit insecureSkipVerify: "true", warned about once per BMC.
import { request as httpsRequest, Agent, type RequestOptions } from "node:https";
import { setTimeout as sleep } from "node:timers/promises";
import { AgentError, type AgentContext, type AgentDriver, type ParameterRules, type PowerState, listVerdict } from "./types.ts";
import { credentialProblem, hostProblem, normalizeHost, portProblem, usernameProblem, caBundleProblem } from "./values.ts";
import { excerpt, redact } from "./redact.ts";

/** One request's own limit, so a retry fits in the operation's deadline when a BMC stops answering mid-way. */
export const REQUEST_TIMEOUT_MS = 10_000;
/** Largest answer read from a BMC: a ComputerSystem is a few kB. */
const MAX_BODY = 1 << 20;
/** Task monitor polling: the BMC's Retry-After within these bounds. */
const TASK_POLL_MIN_MS = 200;
const TASK_POLL_MAX_MS = 2_000;

// Also the source of the CRD's redfish allow-list (tools/gen-fence-agent-rules.ts).
/** Every parameter the redfish type takes. */
export const REDFISH_PARAMETERS = ["address", "port", "username", "password", "systemId", "authMethod", "caBundle", "insecureSkipVerify"];
/** What a credentials Secret may supply. caBundle is no secret: the spec may set it too (as for webhook). */
export const REDFISH_CREDENTIALS = ["username", "password", "caBundle"];
/** Never in the spec. */
export const REDFISH_SECRET_ONLY = ["password"];
const AUTH_METHODS = ["session", "basic"];
const DEFAULTS = { port: "443", authMethod: "session" } as const;

interface Target {
  address: string;
  port: string;
  username: string;
  password: string;
  systemId: string;
  authMethod: string;
  caBundle: string;
  insecureSkipVerify: string;
}

function fields(p: Record<string, string>): Target {
  return {
    address: p.address ?? "",
    port: p.port || DEFAULTS.port,
    username: p.username ?? "",
    password: p.password ?? "",
    systemId: p.systemId ?? "",
    authMethod: p.authMethod || DEFAULTS.authMethod,
    caBundle: p.caBundle ?? "",
    insecureSkipVerify: p.insecureSkipVerify || "false",
  };
}

/** Problems with a PEM CA bundle: it must hold at least one certificate and nothing that fails to parse. */

// A Redfish resource Id: what BMCs use ("1", "System.Embedded.1", "437XR1138R2"), never a path or a query.
const SYSTEM_ID = /^[A-Za-z0-9][A-Za-z0-9._:~-]{0,127}$/;

function check(parameters: Record<string, string>): string[] {
  const problems: string[] = [];
  for (const k of Object.keys(parameters))
    if (!REDFISH_PARAMETERS.includes(k))
      problems.push(`parameter ${k} is not a redfish parameter: redfish takes ${REDFISH_PARAMETERS.join(", ")} (docs/api.md)`);
  const t = fields(parameters);
  const bad = (name: string, problem: string | undefined, value: string) => {
    if (problem) problems.push(`parameter ${name} ${problem}, not ${JSON.stringify(value)}`);
  };
  if (!t.address)
    problems.push(
      "parameter address (the BMC's host name or IP) is missing: set it in spec.nodes.<node>.parameters, or in nodeTemplates from a node-restriction.kubernetes.io/ label",
    );
  else bad("address", hostProblem(t.address), t.address);
  bad("port", portProblem(t.port), t.port);
  if (!t.username) problems.push("parameter username is missing: set it in parameters or in the credentials Secret");
  else bad("username", usernameProblem(t.username), t.username);
  if (!t.password) problems.push("parameter password is missing: put a password key in the Secret named by credentialsSecretRef");
  else if (credentialProblem(t.password)) problems.push(`parameter password ${credentialProblem(t.password)}`);
  if (t.systemId)
    bad("systemId", SYSTEM_ID.test(t.systemId) ? undefined : "must be a Redfish resource Id such as 1 or System.Embedded.1", t.systemId);
  if (!AUTH_METHODS.includes(t.authMethod))
    problems.push(`parameter authMethod must be one of ${AUTH_METHODS.join(", ")}, not ${JSON.stringify(t.authMethod)}`);
  if (!["true", "false"].includes(t.insecureSkipVerify))
    problems.push(`parameter insecureSkipVerify must be "true" or "false", not ${JSON.stringify(t.insecureSkipVerify)}`);
  if (t.caBundle) {
    const p = caBundleProblem(t.caBundle);
    if (p) problems.push(`parameter caBundle ${p}: put the PEM of the CA that signed the BMC's certificate there`);
    if (t.insecureSkipVerify === "true")
      problems.push(
        'caBundle and insecureSkipVerify: "true" contradict each other: remove insecureSkipVerify to verify the BMC with the bundle',
      );
  }
  return problems;
}

/** What the redfish type accepts; its target is the BMC (address and port) and, on a BMC of several systems, the system. */
export const redfishRules: ParameterRules = {
  subject: "redfish",
  verdict: (name) =>
    listVerdict({ parameters: REDFISH_PARAMETERS, credentials: REDFISH_CREDENTIALS, secretOnly: REDFISH_SECRET_ONLY }, name),
  credentials: REDFISH_CREDENTIALS,
  check,
  target: (p) => {
    const t = fields(p);
    if (!t.address || hostProblem(t.address)) return undefined;
    return { device: `${normalizeHost(t.address)}:${Number(t.port) || t.port}`, outlets: t.systemId ? [t.systemId] : [] };
  },
};

// ---- pure: reading Redfish answers ---------------------------------------------------------------------------

type Json = Record<string, unknown>;
const isObject = (x: unknown): x is Json => typeof x === "object" && x !== null && !Array.isArray(x);
const odataId = (x: unknown): string | undefined => (isObject(x) && typeof x["@odata.id"] === "string" ? x["@odata.id"] : undefined);

/** A body as JSON; garbage is BadOutput. Empty bodies are {}. */
export function parseBody(text: string, what: string): Json {
  if (text.trim() === "") return {};
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch {
    throw new AgentError("BadOutput", `${what} is not JSON: ${excerpt(text, 160)}`);
  }
  if (!isObject(v)) throw new AgentError("BadOutput", `${what} is not a JSON object: ${excerpt(text, 160)}`);
  return v;
}

/** The Redfish error's own words: error.message and every @Message.ExtendedInfo Message (with its MessageId). */
export function redfishMessage(body: Json): string | undefined {
  const err = isObject(body.error) ? body.error : body;
  const parts: string[] = [];
  const info = err["@Message.ExtendedInfo"];
  if (Array.isArray(info))
    for (const i of info)
      if (isObject(i) && typeof i.Message === "string")
        parts.push(typeof i.MessageId === "string" ? `${i.Message} (${i.MessageId})` : i.Message);
  if (parts.length === 0 && typeof err.message === "string") parts.push(err.message);
  return parts.length > 0 ? parts.join("; ") : undefined;
}

/** An HTTP error status as an AgentError; `text` is the body, quoted through its Redfish message when it has one. */
export function classifyStatus(status: number, text: string, where: string, what: string, username: string): AgentError {
  let said: string | undefined;
  try {
    said = redfishMessage(parseBody(text, "the error"));
  } catch {
    said = text.trim() ? excerpt(text, 160) : undefined;
  }
  const quoted = said ? `: ${JSON.stringify(said)}` : "";
  if (status === 401)
    return new AgentError(
      "AuthFailed",
      `${where} rejected the credentials of user "${username}" (HTTP 401)${quoted}: check username and password`,
    );
  if (status === 403)
    return new AgentError(
      "AuthFailed",
      `${where} refused ${what} to user "${username}" (HTTP 403)${quoted}: the account needs the ConfigureComponents privilege (an Operator or Administrator role)`,
    );
  if (status >= 300 && status < 400)
    return new AgentError("Config", `${where} redirected ${what} (HTTP ${status}): set address and port to the Redfish service itself`);
  if (status >= 500) return new AgentError("Failed", `${where} failed ${what} (HTTP ${status})${quoted}`);
  return new AgentError("Failed", `${where} refused ${what} (HTTP ${status})${quoted}`);
}

const TLS_VERIFY = new Set([
  "DEPTH_ZERO_SELF_SIGNED_CERT",
  "SELF_SIGNED_CERT_IN_CHAIN",
  "UNABLE_TO_VERIFY_LEAF_SIGNATURE",
  "UNABLE_TO_GET_ISSUER_CERT",
  "UNABLE_TO_GET_ISSUER_CERT_LOCALLY",
  "CERT_HAS_EXPIRED",
  "CERT_NOT_YET_VALID",
  "CERT_SIGNATURE_FAILURE",
  "CERT_UNTRUSTED",
  "CERT_REJECTED",
  "INVALID_CA",
  "ERR_TLS_CERT_ALTNAME_INVALID",
]);
const UNREACHABLE = new Set([
  "ECONNREFUSED",
  "ECONNRESET",
  "EHOSTUNREACH",
  "ENETUNREACH",
  "ETIMEDOUT",
  "EAI_AGAIN",
  "ENOTFOUND",
  "EPIPE",
  "ECONNABORTED",
]);

/** A transport error (no HTTP answer) as an AgentError. */
export function classifyTransport(e: unknown, where: string, hasBundle: boolean): AgentError {
  const err = e as NodeJS.ErrnoException & { reason?: string };
  const code = err.code ?? "";
  if (TLS_VERIFY.has(code)) {
    const trust = hasBundle ? "the caBundle given" : "the operator's trusted root CAs (no caBundle is set)";
    return new AgentError(
      "Config",
      `${where} presented a certificate that does not verify against ${trust} (${code}: ${err.reason ?? err.message}): ` +
        `nothing was sent to it; put the CA that signed the BMC's certificate in caBundle, or check that address names this BMC`,
    );
  }
  if (
    code === "ERR_SSL_WRONG_VERSION_NUMBER" ||
    code === "ERR_SSL_PACKET_LENGTH_TOO_LONG" ||
    /wrong version number/i.test(err.message ?? "")
  )
    return new AgentError("Config", `${where} does not speak HTTPS (${code || err.message}): check the port`);
  if (UNREACHABLE.has(code) || /socket hang up/i.test(err.message ?? ""))
    return new AgentError("Unreachable", `${where} did not answer (${code || err.message}): check the address, port and network`);
  return new AgentError("Failed", `request to ${where} failed: ${code ? `${code}: ` : ""}${err.message}`);
}

export type RedfishPower = { kind: "state"; power: PowerState } | { kind: "error"; error: AgentError };

/** PowerState to our power; PoweringOff is not off (the machine may still write), so it is an error, never "off". */
export function powerFromState(value: unknown, where: string): RedfishPower {
  switch (value) {
    case "On":
    case "PoweringOn":
      return { kind: "state", power: "on" };
    case "Off":
      return { kind: "state", power: "off" };
    case "PoweringOff":
      return { kind: "error", error: new AgentError("Failed", `${where} says PoweringOff: the system is not off yet`) };
    default:
      return {
        kind: "error",
        error: new AgentError("BadOutput", `${where} reports PowerState ${JSON.stringify(value ?? null)}, which is neither On nor Off`),
      };
  }
}

/** The system among the Systems collection's members: the one named by systemId, or the only one. */
export function pickSystem(collection: Json, systemId: string, where: string): string {
  const members = Array.isArray(collection.Members) ? collection.Members.map(odataId).filter((x): x is string => !!x) : undefined;
  if (!members) throw new AgentError("BadOutput", `${where}: the Systems collection has no Members list`);
  const idOf = (path: string) => decodeURIComponent(path.replace(/\/+$/, "").split("/").pop() ?? "");
  const ids = members.map(idOf);
  if (systemId) {
    const i = ids.indexOf(systemId);
    if (i < 0)
      throw new AgentError(
        "Config",
        `${where} has no system ${JSON.stringify(systemId)}: its systems are ${ids.join(", ") || "none"}; fix parameter systemId`,
      );
    return members[i]!;
  }
  if (members.length === 1) return members[0]!;
  if (members.length === 0) throw new AgentError("Failed", `${where} lists no ComputerSystem in its Systems collection`);
  throw new AgentError(
    "Config",
    `${where} manages ${members.length} systems (${ids.join(", ")}): set parameter systemId to the one this node runs on`,
  );
}

export interface ResetAction {
  target: string;
  /** ResetType@Redfish.AllowableValues, or the ActionInfo's; undefined when the BMC lists none. */
  allowed: string[] | undefined;
  actionInfo: string | undefined;
}

/** The ComputerSystem.Reset action of a system. */
export function resetAction(system: Json, where: string): ResetAction {
  const actions = isObject(system.Actions) ? system.Actions : {};
  const reset = actions["#ComputerSystem.Reset"];
  if (!isObject(reset) || typeof reset.target !== "string")
    throw new AgentError(
      "Failed",
      `${where}: the system offers no #ComputerSystem.Reset action, so its power cannot be controlled through Redfish`,
    );
  const list = reset["ResetType@Redfish.AllowableValues"];
  return {
    target: reset.target,
    allowed: Array.isArray(list) ? list.filter((x): x is string => typeof x === "string") : undefined,
    actionInfo: typeof reset["@Redfish.ActionInfo"] === "string" ? reset["@Redfish.ActionInfo"] : undefined,
  };
}

/** ResetType's AllowableValues from an ActionInfo resource; undefined when it does not say. */
export function allowedFromActionInfo(info: Json): string[] | undefined {
  const params = Array.isArray(info.Parameters) ? info.Parameters : [];
  const p = params.find((x) => isObject(x) && x.Name === "ResetType");
  return isObject(p) && Array.isArray(p.AllowableValues) ? p.AllowableValues.filter((x): x is string => typeof x === "string") : undefined;
}

/** The ResetType for an action: ForceOff (never a graceful Off, which may take minutes or never happen), On (else ForceOn). */
export function chooseResetType(action: "off" | "on", allowed: string[] | undefined, where: string): string {
  const wanted = action === "off" ? ["ForceOff"] : ["On", "ForceOn"];
  if (!allowed) return wanted[0]!;
  const pick = wanted.find((w) => allowed.includes(w));
  if (pick) return pick;
  throw new AgentError(
    "Config",
    `${where} does not allow ResetType ${wanted.join(" or ")} (it allows ${allowed.join(", ") || "none"}): Stockade powers ${action} with ${wanted.join(" or ")} only`,
  );
}

const TASK_RUNNING = new Set(["New", "Starting", "Running", "Pending", "Suspended", "Stopping", "Cancelling", "Service"]);
const TASK_FAILED = new Set(["Exception", "Killed", "Cancelled", "Interrupted"]);

export type TaskStep = { kind: "running"; afterMs: number } | { kind: "done" } | { kind: "failed"; error: AgentError };

/** One answer of a task monitor: still running, finished, or failed. */
export function taskStep(status: number, body: Json, retryAfter: string | undefined, where: string): TaskStep {
  const wait = () => {
    const s = Number(retryAfter);
    return Math.min(TASK_POLL_MAX_MS, Math.max(TASK_POLL_MIN_MS, Number.isFinite(s) && s > 0 ? s * 1000 : 500));
  };
  if (status === 202) return { kind: "running", afterMs: wait() };
  const state = typeof body.TaskState === "string" ? body.TaskState : undefined;
  if (state && TASK_RUNNING.has(state)) return { kind: "running", afterMs: wait() };
  if (state && TASK_FAILED.has(state)) {
    const said = redfishMessage({ "@Message.ExtendedInfo": body.Messages }) ?? "no message";
    return { kind: "failed", error: new AgentError("Failed", `${where}: the reset task ended ${state}: ${JSON.stringify(said)}`) };
  }
  if (state === "Completed" && body.TaskStatus === "Critical") {
    const said = redfishMessage({ "@Message.ExtendedInfo": body.Messages }) ?? "no message";
    return {
      kind: "failed",
      error: new AgentError("Failed", `${where}: the reset task completed with TaskStatus Critical: ${JSON.stringify(said)}`),
    };
  }
  if (state && state !== "Completed")
    return {
      kind: "failed",
      error: new AgentError("BadOutput", `${where}: the reset task is in unknown TaskState ${JSON.stringify(state)}`),
    };
  return { kind: "done" };
}

// ---- shell: the conversation with one BMC ------------------------------------------------------------------------

interface Answer {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  text: string;
}

const warnedInsecure = new Set<string>();

/** One driver call's connection to a BMC: a keep-alive agent, the auth header, and every request bound to ctx.signal. */
class Conversation {
  readonly where: string;
  readonly t: Target;
  private readonly agent: Agent;
  private readonly signal: AbortSignal;
  private auth: Record<string, string> = {};
  private session: string | undefined;

  constructor(ctx: AgentContext) {
    this.t = fields(ctx.parameters);
    this.where = `Redfish service https://${this.t.address.includes(":") && !this.t.address.startsWith("[") ? `[${this.t.address}]` : this.t.address}:${this.t.port}`;
    this.signal = ctx.signal;
    const insecure = this.t.insecureSkipVerify === "true";
    if (insecure && !warnedInsecure.has(this.where)) {
      warnedInsecure.add(this.where);
      process.emitWarning(
        `${this.where}: insecureSkipVerify is "true": the BMC's certificate is not verified, so anyone on the path can impersonate it`,
        {
          code: "STOCKADE_REDFISH_INSECURE",
        },
      );
    }
    this.agent = new Agent({
      keepAlive: true,
      maxSockets: 1,
      rejectUnauthorized: !insecure,
      ...(this.t.caBundle ? { ca: this.t.caBundle } : {}),
    });
  }

  /** A path or URL the BMC gave, resolved on this BMC; a URL to another host is refused (it would get our credentials). */
  private path(ref: string): string {
    let u: URL;
    try {
      u = new URL(ref, "https://bmc.invalid/");
    } catch {
      throw new AgentError("BadOutput", `${this.where} named the resource ${JSON.stringify(ref)}, which is not a URL`);
    }
    if (u.hostname !== "bmc.invalid" && (normalizeHost(u.hostname) !== normalizeHost(this.t.address) || (u.port || "443") !== this.t.port))
      throw new AgentError("Failed", `${this.where} pointed to ${u.host}, another host than the BMC: not followed`);
    return u.pathname + u.search;
  }

  async send(method: string, ref: string, body?: unknown, o: { timeoutMs?: number; signal?: AbortSignal } = {}): Promise<Answer> {
    const path = this.path(ref);
    const payload = body === undefined ? undefined : Buffer.from(JSON.stringify(body));
    const signal = AbortSignal.any([o.signal ?? this.signal, AbortSignal.timeout(o.timeoutMs ?? REQUEST_TIMEOUT_MS)]);
    const opts: RequestOptions = {
      host: this.t.address.replace(/^\[|\]$/g, ""),
      port: Number(this.t.port),
      method,
      path,
      agent: this.agent,
      signal,
      headers: {
        Accept: "application/json",
        "OData-Version": "4.0",
        ...this.auth,
        ...(payload ? { "Content-Type": "application/json", "Content-Length": String(payload.length) } : {}),
      },
    };
    try {
      return await new Promise<Answer>((resolve, reject) => {
        const req = httpsRequest(opts, (res) => {
          const chunks: Buffer[] = [];
          let size = 0;
          res.on("data", (c: Buffer) => {
            size += c.length;
            if (size > MAX_BODY)
              req.destroy(new AgentError("BadOutput", `${this.where} answered ${method} ${path} with more than ${MAX_BODY} bytes`));
            else chunks.push(c);
          });
          res.on("end", () => resolve({ status: res.statusCode ?? 0, headers: res.headers, text: Buffer.concat(chunks).toString("utf8") }));
          res.on("error", reject);
        });
        req.on("error", reject);
        req.end(payload);
      });
    } catch (e) {
      if (e instanceof AgentError) throw e;
      if (this.signal.aborted || o.signal?.aborted)
        throw new AgentError("TimedOut", `${method} ${path} to ${this.where} was cut off at the deadline`);
      if (signal.aborted)
        throw new AgentError(
          "Unreachable",
          `${this.where} did not answer ${method} ${path} within ${(o.timeoutMs ?? REQUEST_TIMEOUT_MS) / 1000} s`,
        );
      throw classifyTransport(e, this.where, !!this.t.caBundle);
    }
  }

  /** A request whose answer must be 2xx JSON. */
  async json(method: string, ref: string, what: string, body?: unknown): Promise<{ answer: Answer; body: Json }> {
    const answer = await this.send(method, ref, body);
    if (answer.status < 200 || answer.status >= 300) throw classifyStatus(answer.status, answer.text, this.where, what, this.t.username);
    return { answer, body: parseBody(answer.text, `${this.where}'s answer to ${what}`) };
  }

  /** The service root (unauthenticated, as DSP0266 allows) and the login. */
  async open(): Promise<Json> {
    const { body: root } = await this.json("GET", "/redfish/v1/", "the service root");
    if (this.t.authMethod === "basic") {
      this.auth = { Authorization: `Basic ${Buffer.from(`${this.t.username}:${this.t.password}`).toString("base64")}` };
      return root;
    }
    const links = isObject(root.Links) ? root.Links : {};
    const sessions = odataId(links.Sessions) ?? "/redfish/v1/SessionService/Sessions";
    const r = await this.send("POST", sessions, { UserName: this.t.username, Password: this.t.password });
    if (r.status === 404 || r.status === 405)
      throw new AgentError(
        "Config",
        `${this.where} has no session service (HTTP ${r.status} from ${sessions}): set parameter authMethod to basic`,
      );
    if (r.status < 200 || r.status >= 300) throw classifyStatus(r.status, r.text, this.where, "a session login", this.t.username);
    const token = r.headers["x-auth-token"];
    if (typeof token !== "string" || token === "")
      throw new AgentError("Config", `${this.where} created a session but sent no X-Auth-Token: set parameter authMethod to basic`);
    this.auth = { "X-Auth-Token": token };
    const loc = r.headers.location;
    this.session = typeof loc === "string" ? loc : odataId(parseBody(r.text, "the session"));
    return root;
  }

  /** Deletes the session (best effort, bounded even after the deadline: a BMC has few session slots). */
  async close(): Promise<void> {
    try {
      if (this.session) await this.send("DELETE", this.session, undefined, { timeoutMs: 2000, signal: new AbortController().signal });
    } catch {
      // The session expires on its own; nothing to report for a call that already has its answer.
    } finally {
      this.agent.destroy();
    }
  }

  /** The system this node runs on: its path and resource. */
  async system(root: Json): Promise<{ path: string; body: Json }> {
    const systems = odataId(root.Systems) ?? "/redfish/v1/Systems";
    const { body: collection } = await this.json("GET", systems, "the Systems collection");
    const path = pickSystem(collection, this.t.systemId, this.where);
    const { body } = await this.json("GET", path, `system ${path}`);
    return { path, body };
  }

  /** Follows a task monitor until the task ends; a task that ends in Exception or Killed is a failure. */
  async followTask(monitor: string): Promise<void> {
    while (true) {
      const r = await this.send("GET", monitor);
      if (r.status === 404 || r.status === 410)
        throw new AgentError(
          "Failed",
          `${this.where}: the reset's task monitor ${monitor} disappeared (HTTP ${r.status}) before reporting completion`,
        );
      if (r.status >= 300 && r.status !== 202)
        throw classifyStatus(r.status, r.text, this.where, `task monitor ${monitor}`, this.t.username);
      const retryAfter = r.headers["retry-after"];
      const step = taskStep(
        r.status,
        r.status === 202 && r.text.trim() === "" ? {} : parseBody(r.text, `task monitor ${monitor}`),
        typeof retryAfter === "string" ? retryAfter : undefined,
        this.where,
      );
      if (step.kind === "done") return;
      if (step.kind === "failed") throw step.error;
      await sleep(step.afterMs, undefined, { signal: this.signal }).catch(() => {
        throw new AgentError("TimedOut", `${this.where}: the reset task had not finished at the deadline`);
      });
    }
  }
}

async function converse<T>(ctx: AgentContext, body: (c: Conversation, root: Json) => Promise<T>): Promise<T> {
  const problems = check(ctx.parameters);
  if (problems.length > 0) throw new AgentError("Config", problems.join("; "));
  const c = new Conversation(ctx);
  try {
    return await body(c, await c.open());
  } catch (e) {
    const err = e instanceof AgentError ? e : new AgentError("Failed", (e as Error).message);
    throw new AgentError(err.kind, redact(err.message, ctx.parameters));
  } finally {
    await c.close();
  }
}

export const redfishDriver: AgentDriver = {
  type: "redfish",
  validate: check,
  power(ctx, action) {
    return converse(ctx, async (c, root) => {
      const { path, body: system } = await c.system(root);
      const where = `${c.where} system ${path}`;
      const reset = resetAction(system, where);
      let allowed = reset.allowed;
      if (!allowed && reset.actionInfo)
        allowed = allowedFromActionInfo((await c.json("GET", reset.actionInfo, "the Reset ActionInfo")).body);
      const resetType = chooseResetType(action, allowed, where);
      const r = await c.send("POST", reset.target, { ResetType: resetType });
      if (r.status === 202) {
        const loc = r.headers.location;
        // Without a task monitor the 202 is all the BMC will say; fenceOff's status polling confirms the result.
        if (typeof loc === "string" && loc) await c.followTask(loc);
        return;
      }
      if (r.status < 200 || r.status >= 300) throw classifyStatus(r.status, r.text, c.where, `Reset ${resetType} of ${path}`, c.t.username);
    });
  },
  status(ctx): Promise<PowerState> {
    return converse(ctx, async (c, root) => {
      const { path, body } = await c.system(root);
      const p = powerFromState(body.PowerState, `${c.where} system ${path}`);
      if (p.kind === "error") throw p.error;
      return p.power;
    });
  },
};
