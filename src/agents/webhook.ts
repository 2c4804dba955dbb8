// The webhook agent: a signed JSON POST to a site's own power-control service (docs/webhook-agent.md is the
// contract). Requests and 2xx answers are both signed with HMAC-SHA256 over "<timestamp>.<body>", and an answer
// must echo the request's id: a misrouted URL, a man in the middle or a replayed old answer cannot "confirm off".
// Plain node:https (no fetch): the CA bundle, redirects (refused) and the answer's size are under our control.
import { request as httpRequest, type IncomingMessage } from "node:http";
import { request as httpsRequest } from "node:https";
import { createHmac, randomUUID, timingSafeEqual } from "node:crypto";
import { isIP } from "node:net";
import {
  AgentError,
  type AgentContext,
  type AgentDriver,
  type FencingTarget,
  type ParameterRules,
  type PowerState,
  listVerdict,
} from "./types.ts";
import { credentialProblem, plainProblem, caBundleProblem } from "./values.ts";
import { excerpt, redact } from "./redact.ts";

export const WEBHOOK_VERSION = "stockade.io/webhook-agent/v1";
export const SIGNATURE_HEADER = "x-stockade-signature";
export const TIMESTAMP_HEADER = "x-stockade-timestamp";
/** Receivers refuse requests older (or newer) than this; the driver does not check answers' age: the request id binds them. */
export const REPLAY_WINDOW_SECONDS = 300;
/** Also the source of the CRD's webhook allow-list (tools/gen-fence-agent-rules.ts). */
export const WEBHOOK_PARAMETERS = ["url", "machine", "providerID", "caBundle", "allowInsecureHttp", "hmacKey"];
/** A Secret may supply the key and the CA bundle (a PEM does not fit a spec parameter's no-whitespace rule). */
export const WEBHOOK_CREDENTIALS = ["hmacKey", "caBundle"];
export const WEBHOOK_SECRET_ONLY = ["hmacKey"];
/** Parameters named x_<something> are the site's own: sent in the request's "parameters", never interpreted. */
export const EXTRA_PREFIX = "x_";
export const MIN_KEY_LENGTH = 32;
const MAX_ANSWER_BYTES = 64 * 1024;
const POWER: readonly string[] = ["on", "off", "unknown"];

export type WebhookAction = "off" | "on" | "status";

/** "v1=<hex HMAC-SHA256 of `<timestamp>.<body>`>" with the key's UTF-8 bytes. */
export function sign(key: string, timestamp: string, body: string | Buffer): string {
  return `v1=${createHmac("sha256", key).update(`${timestamp}.`).update(body).digest("hex")}`;
}

/** Whether any "v1=" entry of a (comma-separated) signature header matches; constant-time per entry. */
export function verify(key: string, timestamp: string, body: string | Buffer, header: string | undefined): boolean {
  if (!header || !/^\d{1,12}$/.test(timestamp)) return false;
  const want = Buffer.from(sign(key, timestamp, body));
  return header
    .split(",")
    .map((s) => Buffer.from(s.trim()))
    .some((got) => got.length === want.length && timingSafeEqual(got, want));
}

export const isExtra = (name: string) => name.startsWith(EXTRA_PREFIX) && /^x_[A-Za-z0-9_]+$/.test(name);

/** The request body, exactly the bytes that are signed and sent. */
export function requestBody(
  action: WebhookAction,
  node: string,
  parameters: Record<string, string>,
  requestId: string,
  timestamp: number,
): string {
  const extra = Object.fromEntries(Object.entries(parameters).filter(([k]) => isExtra(k)));
  return JSON.stringify({
    version: WEBHOOK_VERSION,
    action,
    node,
    machine: parameters.machine || node,
    ...(parameters.providerID ? { providerID: parameters.providerID } : {}),
    ...(Object.keys(extra).length > 0 ? { parameters: extra } : {}),
    requestId,
    timestamp,
  });
}

const LOOPBACK_NAMES = ["localhost", "localhost."];
function isLoopback(host: string): boolean {
  const bare = host.startsWith("[") ? host.slice(1, -1) : host;
  if (LOOPBACK_NAMES.includes(bare.toLowerCase())) return true;
  if (isIP(bare) === 4) return bare.startsWith("127.");
  return isIP(bare) === 6 && (bare === "::1" || bare === "0:0:0:0:0:0:0:1");
}

/** PEM certificates: each block must parse; problems as messages. */

function parseUrl(raw: string | undefined): { url: URL } | { problem: string } {
  if (!raw) return { problem: "parameter url (the power service's https:// address) is missing: set it in spec.parameters" };
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    return { problem: `parameter url must be an absolute https:// URL, not ${JSON.stringify(raw)}` };
  }
  if (url.protocol !== "https:" && url.protocol !== "http:")
    return { problem: `parameter url must be an https:// URL, not ${JSON.stringify(raw)}` };
  if (url.username || url.password)
    return { problem: "parameter url must not carry a user or password: the request is signed with hmacKey" };
  if (url.hash) return { problem: `parameter url must not have a #fragment, not ${JSON.stringify(raw)}` };
  return { url };
}

function check(parameters: Record<string, string>): string[] {
  const problems: string[] = [];
  for (const k of Object.keys(parameters))
    if (!WEBHOOK_PARAMETERS.includes(k) && !isExtra(k))
      problems.push(
        `parameter ${k} is not a webhook parameter: webhook takes ${WEBHOOK_PARAMETERS.join(", ")} and the service's own x_<name> parameters (docs/webhook-agent.md)`,
      );
  const insecure = parameters.allowInsecureHttp ?? "false";
  if (insecure !== "true" && insecure !== "false")
    problems.push(`parameter allowInsecureHttp must be "true" or "false", not ${JSON.stringify(insecure)}`);
  const u = parseUrl(parameters.url);
  if ("problem" in u) problems.push(u.problem);
  else if (u.url.protocol === "http:") {
    if (insecure !== "true")
      problems.push(`parameter url must be https:// (plain http lets anyone on the path read and delay power commands), not ${u.url.href}`);
    else if (!isLoopback(u.url.hostname))
      problems.push(`allowInsecureHttp allows plain http only to a loopback address (127.0.0.0/8, ::1, localhost), not ${u.url.hostname}`);
  }
  const key = parameters.hmacKey;
  if (!key)
    problems.push(
      "parameter hmacKey is missing: put an hmacKey key (at least 32 characters, e.g. `openssl rand -hex 32`) in the Secret named by credentialsSecretRef",
    );
  else if (credentialProblem(key)) problems.push(`parameter hmacKey ${credentialProblem(key)}`);
  else if (key.length < MIN_KEY_LENGTH)
    problems.push(
      `parameter hmacKey is too short (${key.length} characters): use at least ${MIN_KEY_LENGTH}, e.g. \`openssl rand -hex 32\``,
    );
  if (parameters.caBundle !== undefined) {
    const why = caBundleProblem(parameters.caBundle);
    if (why) problems.push(`parameter caBundle ${why}`);
  }
  for (const name of ["machine", "providerID"]) {
    const v = parameters[name];
    if (v === undefined) continue;
    const why = plainProblem(v) ?? (v.length > 256 ? "is longer than 256 characters" : undefined);
    if (why) problems.push(`parameter ${name} ${why}, not ${JSON.stringify(v)}`);
  }
  for (const [k, v] of Object.entries(parameters))
    // eslint-disable-next-line no-control-regex
    if (isExtra(k) && /[\u0000-\u001f\u007f]/.test(v)) problems.push(`parameter ${k} contains a control character`);
  return problems;
}

/**
 * What the webhook type accepts. One service drives many machines: its target is the URL (scheme, host, port,
 * path, query) and the machine it is asked about (parameter machine, else the node's name), so two nodes that
 * name the same URL and machine are the same target.
 */
export const webhookRules: ParameterRules = {
  subject: "webhook",
  verdict: (name) =>
    isExtra(name)
      ? { kind: "allowed" }
      : listVerdict({ parameters: WEBHOOK_PARAMETERS, credentials: WEBHOOK_CREDENTIALS, secretOnly: WEBHOOK_SECRET_ONLY }, name),
  credentials: WEBHOOK_CREDENTIALS,
  check,
  target: (p, node): FencingTarget | undefined => {
    const u = parseUrl(p.url);
    const machine = p.machine || node;
    if ("problem" in u || !machine) return undefined;
    return { device: `${u.url.protocol}//${u.url.host}${u.url.pathname}${u.url.search}`, outlets: [machine] };
  },
};

export interface Answer {
  status: number;
  signature: string | undefined;
  timestamp: string | undefined;
  body: Buffer;
}

const TRANSIENT = new Set([408, 429, 502, 503, 504]);
const MALFORMED = new Set([400, 405, 410, 411, 413, 414, 415, 422]);

/**
 * Turns the service's answer into a power state (status), nothing (off/on accepted) or an AgentError; pure.
 * Only a 200/202 JSON object with a valid signature over its body and the request's id counts; nothing here
 * ever says "off" that the signed body did not say.
 */
export function interpretAnswer(action: WebhookAction, a: Answer, key: string, requestId: string, where: string): PowerState | undefined {
  const said = () => excerpt(a.body.toString("utf8"), 200);
  if (a.status >= 300 && a.status < 400)
    throw new AgentError(
      "Config",
      `${where} answered a redirect (${a.status}): set url to the final address; a signed request is never forwarded`,
    );
  if (a.status === 401 || a.status === 403)
    throw new AgentError(
      "AuthFailed",
      `${where} refused the request (${a.status}): check that hmacKey matches the service's key and both clocks (±${REPLAY_WINDOW_SECONDS / 60} min); service said: ${said()}`,
    );
  if (a.status === 404) throw new AgentError("Config", `${where} answered 404: check parameter url (service said: ${said()})`);
  if (TRANSIENT.has(a.status)) throw new AgentError("Unreachable", `${where} is unavailable (${a.status}): ${said()}`);
  if (MALFORMED.has(a.status))
    throw new AgentError(
      "Config",
      `${where} refused the request as malformed (${a.status}): does it implement ${WEBHOOK_VERSION}? service said: ${said()}`,
    );
  if (a.status !== 200 && a.status !== 202) throw new AgentError("Failed", `${where} answered ${a.status}: ${said()}`);
  if (action === "status" && a.status !== 200)
    throw new AgentError("BadOutput", `${where} answered ${a.status} to a status query: it must answer 200 with the power state`);
  let parsed: unknown;
  try {
    parsed = JSON.parse(a.body.toString("utf8"));
  } catch {
    throw new AgentError("BadOutput", `${where} answered something that is not JSON: ${said()}`);
  }
  if (typeof parsed !== "object" || parsed === null || Array.isArray(parsed))
    throw new AgentError("BadOutput", `${where} answered JSON that is not an object: ${said()}`);
  // Parsed before the signature is checked so that garbage reads as garbage; nothing in it is used unless signed.
  if (!a.signature || !a.timestamp)
    throw new AgentError(
      "AuthFailed",
      `${where} answered without the ${SIGNATURE_HEADER} and ${TIMESTAMP_HEADER} headers: the service must sign its answers (docs/webhook-agent.md)`,
    );
  if (!verify(key, a.timestamp, a.body, a.signature))
    throw new AgentError(
      "AuthFailed",
      `the answer from ${where} is not signed with hmacKey: the service has another key, or something else answered`,
    );
  const o = parsed as Record<string, unknown>;
  if (o.requestId !== requestId)
    throw new AgentError(
      "BadOutput",
      `${where} answered for request ${JSON.stringify(o.requestId)}, not ${requestId}: a replayed or misrouted answer`,
    );
  if (o.power !== undefined && (typeof o.power !== "string" || !POWER.includes(o.power)))
    throw new AgentError("BadOutput", `${where} answered power ${JSON.stringify(o.power)}: it must be "on", "off" or "unknown"`);
  if (action !== "status") return undefined;
  if (o.power === undefined) throw new AgentError("BadOutput", `${where} answered a status query without "power"`);
  return o.power as PowerState;
}

// Certificate refusals: misconfiguration (or an impostor), never fixed by retrying.
const TLS_CODES = /CERT|SELF_SIGNED|UNABLE_TO_(GET|VERIFY)|ALTNAME|ERR_TLS|ERR_SSL|EPROTO/;
const NETWORK_CODES = new Set([
  "ECONNREFUSED",
  "ECONNRESET",
  "EHOSTUNREACH",
  "ENETUNREACH",
  "ETIMEDOUT",
  "ENOTFOUND",
  "EAI_AGAIN",
  "EPIPE",
  "ECONNABORTED",
]);

/** A transport error as an AgentError. */
export function classifyTransport(e: NodeJS.ErrnoException, where: string, aborted: boolean): AgentError {
  if (aborted) return new AgentError("TimedOut", `the request to ${where} was abandoned at the deadline (no complete answer)`);
  const code = e.code ?? "";
  if (TLS_CODES.test(code))
    return new AgentError(
      "Config",
      `${where}'s TLS certificate was refused (${code}: ${e.message}): set caBundle to the CA that signed it, and check the url's host name`,
    );
  if (NETWORK_CODES.has(code)) return new AgentError("Unreachable", `${where} did not answer (${code}): check the url and the network`);
  return new AgentError("Failed", `request to ${where} failed: ${code ? `${code}: ` : ""}${e.message}`);
}

const warned = new Set<string>();

/** One POST; resolves with the answer (any status), rejects with an AgentError. Honours ctx.signal. */
function post(ctx: AgentContext, url: URL, body: string, headers: Record<string, string>): Promise<Answer> {
  const where = `webhook ${url.origin}${url.pathname}`;
  if (url.protocol === "http:" && !warned.has(url.href)) {
    warned.add(url.href);
    process.emitWarning(`webhook agent: plain http to ${url.href} (allowInsecureHttp): requests and answers are not encrypted`, {
      code: "STOCKADE_WEBHOOK_INSECURE_HTTP",
    });
  }
  return new Promise<Answer>((resolve, reject) => {
    if (ctx.signal.aborted) return reject(classifyTransport(new Error("aborted"), where, true));
    const options = {
      method: "POST",
      headers: { ...headers, "content-length": String(Buffer.byteLength(body)) },
      signal: ctx.signal,
      agent: false as const, // one connection per request: no pooled socket outlives the deadline
      ...(ctx.parameters.caBundle ? { ca: ctx.parameters.caBundle } : {}),
    };
    const onAnswer = (res: IncomingMessage) => {
      const chunks: Buffer[] = [];
      let size = 0;
      res.on("data", (c: Buffer) => {
        size += c.length;
        if (size > MAX_ANSWER_BYTES) {
          res.destroy();
          reject(new AgentError("BadOutput", `${where} answered more than ${MAX_ANSWER_BYTES} bytes`));
        } else chunks.push(c);
      });
      res.on("end", () => {
        const h = (n: string) =>
          Array.isArray(res.headers[n]) ? (res.headers[n] as string[]).join(",") : (res.headers[n] as string | undefined);
        resolve({
          status: res.statusCode ?? 0,
          signature: h(SIGNATURE_HEADER),
          timestamp: h(TIMESTAMP_HEADER),
          body: Buffer.concat(chunks),
        });
      });
      res.on("error", (e) => reject(classifyTransport(e, where, ctx.signal.aborted)));
    };
    let req;
    try {
      req = (url.protocol === "https:" ? httpsRequest : httpRequest)(url, options, onAnswer);
    } catch (e) {
      return reject(new AgentError("Config", `cannot send to ${where}: ${(e as Error).message}`));
    }
    req.on("error", (e) => reject(classifyTransport(e, where, ctx.signal.aborted)));
    req.end(body);
  });
}

/** One signed request and its checked answer. */
async function call(ctx: AgentContext, action: WebhookAction): Promise<PowerState | undefined> {
  const problems = check(ctx.parameters);
  if (problems.length > 0) throw new AgentError("Config", problems.join("; "));
  const url = new URL(ctx.parameters.url!);
  const key = ctx.parameters.hmacKey!;
  const requestId = randomUUID();
  const timestamp = Math.floor(Date.now() / 1000);
  const body = requestBody(action, ctx.node, ctx.parameters, requestId, timestamp);
  const headers = {
    "content-type": "application/json",
    "user-agent": "stockade-webhook-agent/v1",
    [TIMESTAMP_HEADER]: String(timestamp),
    [SIGNATURE_HEADER]: sign(key, String(timestamp), body),
  };
  const where = `webhook ${url.origin}${url.pathname}`;
  try {
    return interpretAnswer(action, await post(ctx, url, body, headers), key, requestId, where);
  } catch (e) {
    if (e instanceof AgentError) throw new AgentError(e.kind, redact(e.message, ctx.parameters));
    throw e;
  }
}

export const webhookDriver: AgentDriver = {
  type: "webhook",
  validate: check,
  async power(ctx, action) {
    await call(ctx, action);
  },
  async status(ctx): Promise<PowerState> {
    return (await call(ctx, "status"))!;
  },
};
