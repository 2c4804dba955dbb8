// What the cloud agents (gcp, azure) share: the instance comes from the Node's spec.providerID (parameter
// providerID, defaulted from it by parameters.ts), an optional API endpoint for tests and private endpoints,
// and the rules that keep a cloud's answer from ever being read as "off" when it is not. Pure.
import type { V1Node } from "@kubernetes/client-node";
import { AgentError, type AgentContext, type PowerState } from "./types.ts";

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

/**
 * The cloud API answered that this very instance does not exist (not its project, zone, resource group or scale set,
 * not a malformed id). Config: on its own it proves nothing — wrong credentials, region or project answer the same —
 * unless statusOrGone's witness shows the same parameters see the cluster's instances (docs/safety.md §3).
 */
export class MissingInstanceError extends AgentError {
  readonly missingInstance = true;
  constructor(message: string) {
    super("Config", message);
  }
}

export const isMissingInstance = (e: unknown): boolean => e instanceof MissingInstanceError;

/** Missing-instance errors: Config, because an instance that does not exist proves nothing about the machine by itself. */
export function instanceNotFound(what: string, detail: string): AgentError {
  return new MissingInstanceError(
    `instance not found: ${what} (${detail}): a missing instance is not proof it is off; check the providerID, and the project or subscription the credentials belong to`,
  );
}

/** What an instance lives in (region; project and zone; resource group or scale set): its target without its last part. */
export const instanceScope = (device: string): string => device.slice(0, Math.max(0, device.lastIndexOf("/")));

/** The instance queried instead, to show that the agent's parameters see the cluster's instances. */
export interface Witness {
  node: string;
  parameters: Record<string, string>;
}

/**
 * The witness that lets "this instance does not exist" count as off, or why there is none. Both must hold:
 * - the instance is the Node's own: the agent's providerID is the fenced Node's spec.providerID (as read, or as last
 *   seen before the Node was deleted), never one set in the FenceAgent's spec;
 * - another Node of the cluster, in the same scope (region; project and zone; resource group or scale set), resolves
 *   through this agent to the very same parameters but its own providerID: its instance, queried with them, answers.
 *   Then the credentials, region, project and endpoint are those of the cluster's instances, and the missing one is
 *   gone. Pure: `resolve` gives a Node's resolved parameters, `device` their target.
 */
export function missingInstanceWitness(x: {
  type: string;
  parameters: Record<string, string>;
  target: V1Node;
  nodes: readonly V1Node[];
  resolve: (n: V1Node) => Record<string, string> | undefined;
  device: (p: Record<string, string>) => string | undefined;
}): Witness | { refused: string } {
  if (!PROVIDER_ID_TYPES.includes(x.type)) return { refused: `a ${x.type} agent's "not found" is never evidence` };
  const own = x.target.spec?.providerID ?? "";
  if (!own || x.parameters[PROVIDER_ID] !== own)
    return { refused: "its providerID is not the Node's own spec.providerID (set in the FenceAgent, or the Node had none)" };
  const mine = x.device(x.parameters);
  if (!mine) return { refused: "its parameters name no instance" };
  const scope = instanceScope(mine);
  const same = (p: Record<string, string>) => {
    const keys = new Set([...Object.keys(p), ...Object.keys(x.parameters)]);
    keys.delete(PROVIDER_ID);
    return [...keys].every((k) => p[k] === x.parameters[k]);
  };
  const name = x.target.metadata?.name;
  const others = [...x.nodes].sort((a, b) => (a.metadata?.name ?? "").localeCompare(b.metadata?.name ?? ""));
  for (const n of others) {
    const id = n.spec?.providerID ?? "";
    if (n.metadata?.name === name || !id || id === own) continue;
    const p = x.resolve(n);
    if (!p || p[PROVIDER_ID] !== id || !same(p)) continue;
    const device = x.device(p);
    if (device && device !== mine && instanceScope(device) === scope) return { node: n.metadata?.name ?? "", parameters: p };
  }
  return {
    refused: `no other Node's instance in ${scope} resolves through this agent to the same credentials and settings, to show they see the cluster's instances`,
  };
}

/**
 * A status query in which "this instance does not exist" counts as off when the context carries a witness
 * (missingInstanceWitness) and the same query, with the witness's parameters, answers; otherwise the missing-instance
 * error stands (Config: no proof).
 */
export async function statusOrGone(
  ctx: AgentContext,
  query: (parameters: Record<string, string>) => Promise<PowerState>,
): Promise<PowerState> {
  try {
    return await query(ctx.parameters);
  } catch (e) {
    if (!isMissingInstance(e)) throw e;
    const w = ctx.missingInstance;
    if (!w || "refused" in w) throw new AgentError("Config", `${(e as Error).message}${w ? `; not taken as off: ${w.refused}` : ""}`);
    try {
      await query(w.parameters);
    } catch (we) {
      throw new AgentError(
        "Config",
        `${(e as Error).message}; not taken as off: with the same parameters node ${w.node}'s instance could not be seen either (${brief(we)}): the credentials, region or project may be wrong`,
      );
    }
    ctx.notes?.push(
      `the cloud API says the instance does not exist, and with the same credentials and settings it answers for node ${w.node}'s instance: an instance that no longer exists runs nothing`,
    );
    return "off";
  }
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
