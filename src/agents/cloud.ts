// What the cloud agents (gcp, azure) share: the instance comes from the Node's spec.providerID (parameter
// providerID, defaulted from it by parameters.ts), an optional API endpoint for tests and private endpoints,
// and the rules that keep a cloud's answer from ever being read as "off" when it is not. Pure.
import { AgentError } from "./types.ts";

/** The parameter naming the instance, defaulted from the Node's spec.providerID for these types (parameters.ts). */
export const PROVIDER_ID = "providerID";
/** Agent types whose providerID parameter defaults to the Node's spec.providerID. */
export const PROVIDER_ID_TYPES: readonly string[] = ["aws", "gcp", "azure"];

/** "true"/"false" (case-insensitive); undefined for anything else. */
export function parseBool(value: string): boolean | undefined {
  const v = value.toLowerCase();
  return v === "true" ? true : v === "false" ? false : undefined;
}

/**
 * An API endpoint override: an https URL with a host and maybe a port, nothing else (no path, query or user info),
 * so that a typo cannot send credentials somewhere unexpected in a form that looks right.
 */
export function endpointProblem(value: string): string | undefined {
  let u: URL;
  try {
    u = new URL(value);
  } catch {
    return "must be an https URL such as https://compute.example.internal:8443";
  }
  if (u.protocol !== "https:") return "must be an https URL: the SDKs send bearer tokens, which must not travel in clear text";
  if (u.username || u.password) return "must not contain user information";
  if ((u.pathname !== "/" && u.pathname !== "") || u.search || u.hash)
    return "must be only scheme, host and port (no path, query or fragment)";
  return undefined;
}

/** Host and port of a checked endpoint. */
export function endpointParts(value: string): { host: string; port: number; origin: string } {
  const u = new URL(value);
  return { host: u.hostname.replace(/^\[|\]$/g, ""), port: Number(u.port || 443), origin: u.origin };
}

/** Missing-instance errors: Config, because an instance that does not exist proves nothing about the machine. */
export function instanceNotFound(what: string, detail: string): AgentError {
  return new AgentError(
    "Config",
    `instance not found: ${what} (${detail}): a missing instance is not proof it is off; check the providerID, and the project or subscription the credentials belong to`,
  );
}

/** Network-level failures (no HTTP answer): DNS, refused, reset, TLS. */
export function isNetworkError(e: unknown): boolean {
  const codes = new Set([
    "ECONNREFUSED",
    "ECONNRESET",
    "ENOTFOUND",
    "EAI_AGAIN",
    "EHOSTUNREACH",
    "ENETUNREACH",
    "ETIMEDOUT",
    "EPIPE",
    "UND_ERR_SOCKET",
    "UND_ERR_CONNECT_TIMEOUT",
    "REQUEST_SEND_ERROR",
  ]);
  for (let x: unknown = e, depth = 0; x && depth < 5; x = (x as { cause?: unknown }).cause, depth++) {
    const code = (x as { code?: unknown }).code;
    if (typeof code === "string" && codes.has(code)) return true;
    if (/certificate|self[- ]signed|ECONNREFUSED|socket hang up|fetch failed/i.test((x as Error).message ?? "")) return true;
  }
  return false;
}

/** One line of an SDK's error message, bounded (callers redact). */
export function brief(e: unknown, max = 300): string {
  const m = (e instanceof Error ? e.message : String(e)).replace(/\s+/g, " ").trim();
  return m.length <= max ? m : `${m.slice(0, max - 1)}…`;
}
