// Compute Engine instances through the official SDK (@google-cloud/compute, REST transport): off is
// instances.stop, on is instances.start, and only the instance's status says whether it is off. The instance is
// the Node's spec.providerID, gce://<project>/<zone>/<instance>. Credentials: Application Default Credentials
// (GKE Workload Identity: the GKE metadata server) unless the Secret holds a service-account JSON key.
import { createHash } from "node:crypto";
import type { InstancesClient } from "@google-cloud/compute";
import type * as ComputeModule from "@google-cloud/compute";
import { AgentError, type AgentContext, type AgentDriver, type ParameterRules, type PowerState, listVerdict } from "./types.ts";
import {
  brief,
  endpointParts,
  endpointProblem,
  instanceNotFound,
  isMissingInstance,
  isNetworkError,
  MissingInstanceError,
  parseBool,
  PROVIDER_ID,
  statusOrGone,
} from "./cloud.ts";
import { redact } from "./redact.ts";

export const GCP_PARAMETERS = [PROVIDER_ID, "discardLocalSsd", "endpoint", "serviceAccountKey"];
export const GCP_CREDENTIALS = ["serviceAccountKey"];
export const GCP_SECRET_ONLY = ["serviceAccountKey"];

export interface GceInstanceRef {
  project: string;
  zone: string;
  instance: string;
}

// GCE's own naming rules: project ids 6-30 (legacy domain-scoped ids "example.com:proj" too), zones like
// us-central1-a, instance names RFC 1035 labels of at most 63 characters.
const PROJECT = /^(?:[a-z][-a-z0-9.]{0,61}[a-z0-9]:)?[a-z][-a-z0-9]{4,28}[a-z0-9]$/;
const ZONE = /^[a-z]+-[a-z]+[0-9]+-[a-z]$/;
const INSTANCE = /^[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?$/;

/** gce://<project>/<zone>/<instance>, strictly; the error says which part is wrong. */
export function parseGceProviderID(id: string): GceInstanceRef | { error: string } {
  const form = "gce://<project>/<zone>/<instance-name>";
  const m = /^gce:\/\/([^/]*)\/([^/]*)\/([^/]*)$/.exec(id);
  if (!m) return { error: `is not a GCE providerID of the form ${form}: ${JSON.stringify(id)}` };
  const [, project, zone, instance] = m as unknown as [string, string, string, string];
  if (!PROJECT.test(project)) return { error: `names project ${JSON.stringify(project)}, which is not a GCP project id (${form})` };
  if (!ZONE.test(zone)) return { error: `names zone ${JSON.stringify(zone)}, which is not a GCE zone such as us-central1-a (${form})` };
  if (!INSTANCE.test(instance)) return { error: `names instance ${JSON.stringify(instance)}, which is not a GCE instance name (${form})` };
  return { project, zone, instance };
}

/** The fields of a service-account JSON key the SDK needs; an error message when it is not one. */
export function parseServiceAccountKey(
  json: string,
): { client_email: string; private_key: string; private_key_id?: string } | { error: string } {
  let k: unknown;
  try {
    k = JSON.parse(json);
  } catch {
    return {
      error:
        "is not JSON: put the service account's JSON key file in it (kubectl create secret generic ... --from-file=serviceAccountKey=key.json)",
    };
  }
  const o = (k ?? {}) as Record<string, unknown>;
  if (o.type !== "service_account" || typeof o.client_email !== "string" || typeof o.private_key !== "string")
    return { error: 'is not a service-account key: it needs "type": "service_account", "client_email" and "private_key"' };
  if (!o.private_key.includes("PRIVATE KEY")) return { error: "has a private_key that is not a PEM private key" };
  return {
    client_email: o.client_email,
    private_key: o.private_key,
    ...(typeof o.private_key_id === "string" ? { private_key_id: o.private_key_id } : {}),
  };
}

function check(parameters: Record<string, string>): string[] {
  const problems: string[] = [];
  for (const k of Object.keys(parameters))
    if (!GCP_PARAMETERS.includes(k))
      problems.push(`parameter ${k} is not a gcp parameter: gcp takes ${GCP_PARAMETERS.join(", ")} (docs/api.md)`);
  const id = parameters[PROVIDER_ID];
  if (!id)
    problems.push(
      "parameter providerID is missing: the Node has no spec.providerID (gce://<project>/<zone>/<instance>); set providerID in spec.nodes.<node>.parameters",
    );
  else {
    const r = parseGceProviderID(id);
    if ("error" in r) problems.push(`parameter providerID ${r.error}`);
  }
  const discard = parameters.discardLocalSsd;
  if (discard !== undefined && parseBool(discard) === undefined)
    problems.push(`parameter discardLocalSsd must be "true" or "false", not ${JSON.stringify(discard)}`);
  const ep = parameters.endpoint;
  if (ep !== undefined && endpointProblem(ep)) problems.push(`parameter endpoint ${endpointProblem(ep)}, not ${JSON.stringify(ep)}`);
  const key = parameters.serviceAccountKey;
  if (key !== undefined) {
    const r = parseServiceAccountKey(key);
    if ("error" in r) problems.push(`parameter serviceAccountKey (from the Secret) ${r.error}`);
  }
  return problems;
}

/** What the gcp type accepts; its target is the instance: one instance is one machine. */
export const gcpRules: ParameterRules = {
  subject: "gcp",
  verdict: (name) => listVerdict({ parameters: GCP_PARAMETERS, credentials: GCP_CREDENTIALS, secretOnly: GCP_SECRET_ONLY }, name),
  credentials: GCP_CREDENTIALS,
  check,
  target: (p) => {
    const r = p[PROVIDER_ID] ? parseGceProviderID(p[PROVIDER_ID]) : undefined;
    if (!r || "error" in r) return undefined;
    return { device: gceTarget(r), outlets: [] };
  },
};

export const gceTarget = (r: GceInstanceRef) => `gcp:${r.project}/${r.zone}/${r.instance}`;

/**
 * Instance status → power. Only TERMINATED (stopped) and STOPPED say the guest no longer runs. SUSPENDED is not
 * off: a resumed instance continues with its memory, so its old workload would carry on after the release (a
 * stop request turns a suspended instance into TERMINATED). Every transitional status is "unknown", which
 * fenceOff keeps polling until the deadline.
 */
export function gcePower(status: unknown): PowerState | { error: string } {
  switch (status) {
    case "TERMINATED":
    case "STOPPED":
      return "off";
    case "RUNNING":
      return "on";
    case "PROVISIONING":
    case "STAGING":
    case "STOPPING":
    case "SUSPENDING":
    case "SUSPENDED":
    case "REPAIRING":
      return "unknown";
    default:
      return { error: `unexpected instance status ${JSON.stringify(status)}` };
  }
}

// gRPC codes as google-gax maps HTTP statuses (401 → 16, 403 → 7, 404 → 5, 429 → 8, 503 → 14, 504 → 4, other 5xx → 13).
const CODE = {
  CANCELLED: 1,
  INVALID_ARGUMENT: 3,
  DEADLINE_EXCEEDED: 4,
  NOT_FOUND: 5,
  PERMISSION_DENIED: 7,
  RESOURCE_EXHAUSTED: 8,
} as const;
const UNAVAILABLE = 14;
const INTERNAL = 13;
const UNAUTHENTICATED = 16;

/**
 * The SDK's own retries, within one driver call: throttling (429) and unavailability (503/502), and other 5xx,
 * with backoff, for at most 20 s; the runner's deadline aborts them sooner. stop and start are safe to repeat.
 */
export const GCE_RETRY = {
  retryCodes: [UNAVAILABLE, CODE.RESOURCE_EXHAUSTED, INTERNAL, CODE.DEADLINE_EXCEEDED],
  backoffSettings: {
    initialRetryDelayMillis: 250,
    retryDelayMultiplier: 2,
    maxRetryDelayMillis: 4000,
    initialRpcTimeoutMillis: 10_000,
    rpcTimeoutMultiplier: 1,
    maxRpcTimeoutMillis: 10_000,
    totalTimeoutMillis: 20_000,
  },
};

/** An SDK error → the agent's error kinds. */
export function classifyGceError(e: unknown, what: string, ref?: GceInstanceRef): AgentError {
  if (e instanceof AgentError) return e;
  const code = (e as { code?: unknown }).code;
  const msg = brief(e);
  switch (code) {
    case UNAUTHENTICATED:
      return new AgentError("AuthFailed", `Compute Engine refused the credentials for ${what}: ${msg}`);
    case CODE.PERMISSION_DENIED:
      return new AgentError(
        "AuthFailed",
        `the service account may not do this on ${what} (it needs compute.instances.get, stop and start): ${msg}`,
      );
    case CODE.NOT_FOUND:
      // Only an answer naming this instance's own resource is "it does not exist" (a missing project or zone is
      // answered 404 too, naming that): see cloud.ts MissingInstanceError.
      return ref && msg.includes(`projects/${ref.project}/zones/${ref.zone}/instances/${ref.instance}'`)
        ? instanceNotFound(what, msg)
        : new AgentError(
            "Config",
            `Compute Engine found no such resource for ${what} (${msg}): not proof it is off; check the providerID, and the project the credentials belong to`,
          );
    case CODE.INVALID_ARGUMENT:
      return new AgentError("Config", `Compute Engine refused the request for ${what}: ${msg}`);
    case CODE.RESOURCE_EXHAUSTED:
      return new AgentError("Failed", `Compute Engine is throttling requests (429) for ${what}, still after retries: ${msg}`);
    case CODE.DEADLINE_EXCEEDED:
      return new AgentError("Unreachable", `Compute Engine did not answer in time for ${what}: ${msg}`);
    case CODE.CANCELLED:
      return new AgentError("TimedOut", `the request for ${what} was cancelled at the deadline`);
    case UNAVAILABLE:
      return new AgentError("Unreachable", `Compute Engine is unavailable for ${what}: ${msg}`);
  }
  if (isNetworkError(e)) return new AgentError("Unreachable", `could not reach Compute Engine for ${what}: ${msg}`);
  if (/JSON|Unexpected token|parse/i.test(msg))
    return new AgentError("BadOutput", `Compute Engine answered something that is not an API response for ${what}: ${msg}`);
  if (/Could not load the default credentials/i.test(msg))
    return new AgentError(
      "Config",
      `no Google credentials for ${what}: set up GKE Workload Identity for the operator's service account, or put a service-account key in the Secret (serviceAccountKey)`,
    );
  if (/private key|invalid_grant|DECODER routines/i.test(msg))
    return new AgentError("AuthFailed", `no usable Google credentials for ${what}: ${msg}`);
  return new AgentError("Failed", `Compute Engine request for ${what} failed: ${msg}`);
}

// Loaded on first use: the SDK and its protos take seconds to load, which the operator's start and every other
// agent type should not pay.
let sdk: Promise<typeof ComputeModule> | undefined;
const loadSdk = () => (sdk ??= import("@google-cloud/compute"));

// One client per endpoint and key (a client loads its protos and keeps connections): at most a few per operator.
const clients = new Map<string, InstancesClient>();

async function clientFor(p: Record<string, string>, project: string): Promise<InstancesClient> {
  const key = p.serviceAccountKey ? parseServiceAccountKey(p.serviceAccountKey) : undefined;
  if (key && "error" in key) throw new AgentError("Config", `parameter serviceAccountKey ${key.error}`);
  const id = `${project}|${p.endpoint ?? ""}|${p.serviceAccountKey ? createHash("sha256").update(p.serviceAccountKey).digest("hex") : "adc"}`;
  let c = clients.get(id);
  if (c) return c;
  const ep = p.endpoint ? endpointParts(p.endpoint) : undefined;
  const opts: ConstructorParameters<typeof InstancesClient>[0] = {
    fallback: true, // REST: Compute Engine has no gRPC API
    projectId: project, // else ADC looks for a default project (gcloud, metadata server) before the first call
    ...(ep ? { apiEndpoint: ep.host, port: ep.port } : {}),
    // A key signs its own JWT for https://compute.googleapis.com/ (no token endpoint), as the SDK does with the
    // default endpoint; without scopes: [] a custom endpoint would make it fetch a token from oauth2.googleapis.com.
    ...(key ? { credentials: { client_email: key.client_email, private_key: key.private_key }, scopes: [] } : {}),
  };
  const { InstancesClient } = await loadSdk();
  c = new InstancesClient(opts);
  if (clients.size >= 16) clients.delete(clients.keys().next().value!);
  clients.set(id, c);
  return c;
}

type Cancellable<T> = Promise<T> & { cancel?: () => void };
type RawCall = (req: object, opts: object) => Cancellable<[unknown]>;

/** One API call that the signal cancels (the SDK's wrapped methods drop the canceller, so the inner call is used). */
async function call(ctx: AgentContext, method: "get" | "stop" | "start", request: object, what: string): Promise<unknown> {
  const client = await clientFor(ctx.parameters, (request as GceInstanceRef).project);
  const scrub = (e: AgentError) =>
    isMissingInstance(e)
      ? new MissingInstanceError(redact(e.message, ctx.parameters))
      : new AgentError(e.kind, redact(e.message, ctx.parameters));
  try {
    await client.initialize();
    if (ctx.signal.aborted) throw new AgentError("TimedOut", `${what}: deadline passed before the request`);
    const fn = (client.innerApiCalls as Record<string, RawCall>)[method]!;
    const p = fn(request, { retry: GCE_RETRY, timeout: 10_000 });
    const cancel = () => p.cancel?.();
    ctx.signal.addEventListener("abort", cancel, { once: true });
    try {
      return (await p)[0];
    } finally {
      ctx.signal.removeEventListener("abort", cancel);
    }
  } catch (e) {
    if (ctx.signal.aborted) throw new AgentError("TimedOut", `${method} of ${what} was cancelled at the deadline`);
    throw scrub(classifyGceError(e, what, request as GceInstanceRef));
  }
}

function target(ctx: AgentContext): GceInstanceRef {
  const problems = check(ctx.parameters);
  if (problems.length > 0) throw new AgentError("Config", redact(problems.join("; "), ctx.parameters));
  return parseGceProviderID(ctx.parameters[PROVIDER_ID]!) as GceInstanceRef;
}

/** The answer to instances.get → power; anything that is not this instance's record is BadOutput. */
export function powerOfInstance(body: unknown, ref: GceInstanceRef): PowerState {
  const what = `instance ${gceTarget(ref)}`;
  const o = body as { name?: unknown; status?: unknown } | undefined;
  if (!o || typeof o !== "object" || o.name !== ref.instance)
    throw new AgentError("BadOutput", `Compute Engine's answer for ${what} is not that instance (name ${JSON.stringify(o?.name)})`);
  const p = gcePower(o.status);
  if (typeof p === "object") throw new AgentError("BadOutput", `${p.error} for ${what}`);
  return p;
}

/** The operation a stop or start returned: an error in it means the request was refused. */
export function checkOperation(op: unknown, what: string): void {
  const o = op as { error?: { errors?: { code?: string; message?: string }[] }; httpErrorStatusCode?: number } | undefined;
  if (!o || typeof o !== "object") throw new AgentError("BadOutput", `Compute Engine returned no operation for ${what}`);
  const errs = o.error?.errors ?? [];
  if (errs.length > 0) {
    const detail = errs.map((e) => `${e.code ?? "ERROR"}: ${e.message ?? ""}`).join("; ");
    const kind = o.httpErrorStatusCode === 403 ? "AuthFailed" : o.httpErrorStatusCode === 404 ? "Config" : "Failed";
    throw new AgentError(kind, `Compute Engine's operation for ${what} failed: ${detail}`);
  }
}

export const gcpDriver: AgentDriver = {
  type: "gcp",
  validate: check,
  async power(ctx, action) {
    const ref = target(ctx);
    const what = `instance ${gceTarget(ref)}`;
    const discard = parseBool(ctx.parameters.discardLocalSsd ?? "false")!;
    // Waiting for the zonal operation proves nothing more than the status does: fenceOff polls the status.
    let op: unknown;
    try {
      op = await call(ctx, action === "off" ? "stop" : "start", action === "off" ? { ...ref, discardLocalSsd: discard } : ref, what);
    } catch (e) {
      // An instance that does not exist cannot be stopped: the status query that follows says whether that is proof.
      if (action === "off" && isMissingInstance(e)) return;
      throw e;
    }
    checkOperation(op, what);
  },
  async status(ctx): Promise<PowerState> {
    return statusOrGone(ctx, async (parameters) => {
      const c = { ...ctx, parameters };
      const ref = target(c);
      return powerOfInstance(await call(c, "get", ref, `instance ${gceTarget(ref)}`), ref);
    });
  },
};
