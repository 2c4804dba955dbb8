// Azure virtual machines (and scale-set instances, as AKS nodes are) through the official SDK
// (@azure/arm-compute with @azure/identity): off is powerOff with skipShutdown (or deallocate when asked), on is
// start, and only the instance view's PowerState says whether it is off. The instance is the Node's
// spec.providerID. Credentials: DefaultAzureCredential (Azure Workload Identity on AKS) unless the Secret holds a
// service principal's tenantId, clientId and clientSecret.
import { createHash } from "node:crypto";
import type { ComputeManagementClient } from "@azure/arm-compute";
import type { TokenCredential } from "@azure/identity";
import type * as ArmComputeModule from "@azure/arm-compute";
import type * as IdentityModule from "@azure/identity";
import { AgentError, type AgentContext, type AgentDriver, type ParameterRules, type PowerState, listVerdict } from "./types.ts";
import {
  brief,
  endpointProblem,
  instanceNotFound,
  isMissingInstance,
  isNetworkError,
  MissingInstanceError,
  PROVIDER_ID,
  statusOrGone,
} from "./cloud.ts";
import { redact } from "./redact.ts";

export const AZURE_PARAMETERS = [PROVIDER_ID, "offAction", "endpoint", "authorityHost", "tenantId", "clientId", "clientSecret"];
export const AZURE_CREDENTIALS = ["tenantId", "clientId", "clientSecret"];
export const AZURE_SECRET_ONLY = ["clientSecret"];
const OFF_ACTIONS = ["powerOff", "deallocate"];

export type AzureVmRef =
  | { kind: "vm"; subscription: string; resourceGroup: string; name: string }
  | { kind: "vmss"; subscription: string; resourceGroup: string; scaleSet: string; instanceId: string };

const GUID = /^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$/;
// Resource group: 1-90 letters, digits, '_', '-', '.', '(', ')', not ending with '.'. VM names: 1-64, no '/'.
const RG = /^[-\w.()]{0,89}[-\w()]$/;
const NAME = /^[A-Za-z0-9][-\w.]{0,63}$/;

/**
 * azure:///subscriptions/<sub>/resourceGroups/<rg>/providers/Microsoft.Compute/virtualMachines/<name>, or a
 * scale-set instance .../virtualMachineScaleSets/<ss>/virtualMachines/<instance id>. Segment names are
 * case-insensitive in ARM (the cloud provider writes resourceGroups in varying case).
 */
export function parseAzureProviderID(id: string): AzureVmRef | { error: string } {
  const forms =
    "azure:///subscriptions/<subscription>/resourceGroups/<group>/providers/Microsoft.Compute/virtualMachines/<name> " +
    "(or .../virtualMachineScaleSets/<scale set>/virtualMachines/<instance id>)";
  const vm = /^azure:\/\/\/subscriptions\/([^/]+)\/resourcegroups\/([^/]+)\/providers\/microsoft\.compute\/virtualmachines\/([^/]+)$/i.exec(
    id,
  );
  const ss =
    /^azure:\/\/\/subscriptions\/([^/]+)\/resourcegroups\/([^/]+)\/providers\/microsoft\.compute\/virtualmachinescalesets\/([^/]+)\/virtualmachines\/([^/]+)$/i.exec(
      id,
    );
  const m = vm ?? ss;
  if (!m) return { error: `is not an Azure VM providerID of the form ${forms}: ${JSON.stringify(id)}` };
  const [, subscription, resourceGroup, name, instanceId] = m as unknown as [string, string, string, string, string | undefined];
  if (!GUID.test(subscription))
    return { error: `names subscription ${JSON.stringify(subscription)}, which is not a subscription id (a GUID)` };
  if (!RG.test(resourceGroup))
    return { error: `names resource group ${JSON.stringify(resourceGroup)}, which is not a resource group name` };
  if (!NAME.test(name))
    return { error: `names ${ss ? "scale set" : "virtual machine"} ${JSON.stringify(name)}, which is not a valid name` };
  if (ss) {
    if (!/^\d{1,9}$/.test(instanceId!))
      return { error: `names scale-set instance ${JSON.stringify(instanceId)}, which is not an instance id (a number)` };
    return { kind: "vmss", subscription: subscription.toLowerCase(), resourceGroup, scaleSet: name, instanceId: instanceId! };
  }
  return { kind: "vm", subscription: subscription.toLowerCase(), resourceGroup, name };
}

/** The lower-cased ARM resource id: the identity duplicate detection compares. */
export function azureResourceId(r: AzureVmRef): string {
  const base = `/subscriptions/${r.subscription}/resourcegroups/${r.resourceGroup}/providers/microsoft.compute`;
  return (
    r.kind === "vm" ? `${base}/virtualmachines/${r.name}` : `${base}/virtualmachinescalesets/${r.scaleSet}/virtualmachines/${r.instanceId}`
  ).toLowerCase();
}

export const azureTarget = (r: AzureVmRef) => `azure:${azureResourceId(r)}`;

function check(parameters: Record<string, string>): string[] {
  const problems: string[] = [];
  for (const k of Object.keys(parameters))
    if (!AZURE_PARAMETERS.includes(k))
      problems.push(`parameter ${k} is not an azure parameter: azure takes ${AZURE_PARAMETERS.join(", ")} (docs/api.md)`);
  const id = parameters[PROVIDER_ID];
  if (!id)
    problems.push(
      "parameter providerID is missing: the Node has no spec.providerID (azure:///subscriptions/.../virtualMachines/<name>); set providerID in spec.nodes.<node>.parameters",
    );
  else {
    const r = parseAzureProviderID(id);
    if ("error" in r) problems.push(`parameter providerID ${r.error}`);
  }
  const off = parameters.offAction;
  if (off !== undefined && !OFF_ACTIONS.includes(off))
    problems.push(`parameter offAction must be one of ${OFF_ACTIONS.join(", ")}, not ${JSON.stringify(off)}`);
  for (const k of ["endpoint", "authorityHost"]) {
    const v = parameters[k];
    if (v !== undefined && endpointProblem(v)) problems.push(`parameter ${k} ${endpointProblem(v)}, not ${JSON.stringify(v)}`);
  }
  const { tenantId, clientId, clientSecret } = parameters;
  if (clientSecret !== undefined) {
    if (!tenantId || !clientId)
      problems.push("the Secret has clientSecret but tenantId or clientId is missing: a service principal needs all three");
  } else if (tenantId !== undefined || clientId !== undefined)
    problems.push(
      "tenantId and clientId are used only with clientSecret (a service principal in the Secret); for Workload Identity, leave them out: the pod's AZURE_TENANT_ID and AZURE_CLIENT_ID say them",
    );
  if (tenantId !== undefined && !GUID.test(tenantId) && !/^[a-z0-9][-a-z0-9.]*\.[a-z]{2,}$/i.test(tenantId))
    problems.push(`parameter tenantId must be a tenant id (a GUID) or a tenant domain, not ${JSON.stringify(tenantId)}`);
  if (clientId !== undefined && !GUID.test(clientId))
    problems.push(`parameter clientId must be an application (client) id, a GUID, not ${JSON.stringify(clientId)}`);
  return problems;
}

/** What the azure type accepts; its target is the VM's resource id. */
export const azureRules: ParameterRules = {
  subject: "azure",
  verdict: (name) => listVerdict({ parameters: AZURE_PARAMETERS, credentials: AZURE_CREDENTIALS, secretOnly: AZURE_SECRET_ONLY }, name),
  credentials: AZURE_CREDENTIALS,
  check,
  target: (p) => {
    const r = p[PROVIDER_ID] ? parseAzureProviderID(p[PROVIDER_ID]) : undefined;
    if (!r || "error" in r) return undefined;
    return { device: azureTarget(r), outlets: [] };
  },
};

/**
 * Instance view statuses → power. PowerState/stopped (powered off, still allocated) and PowerState/deallocated
 * are off; running is on; starting, stopping and deallocating are "unknown" (fenceOff keeps polling). No
 * PowerState, or two, is garbage: never off.
 */
export function azurePower(statuses: unknown): PowerState | { error: string } {
  if (!Array.isArray(statuses)) return { error: "the instance view has no statuses" };
  const power = statuses
    .map((s) => (s as { code?: unknown })?.code)
    .filter((c): c is string => typeof c === "string" && /^PowerState\//i.test(c))
    .map((c) => c.slice("PowerState/".length).toLowerCase());
  if (power.length !== 1) return { error: `the instance view has ${power.length} PowerState statuses (${power.join(", ") || "none"})` };
  switch (power[0]) {
    case "stopped":
    case "deallocated":
      return "off";
    case "running":
      return "on";
    case "starting":
    case "stopping":
    case "deallocating":
      return "unknown";
    default:
      return { error: `unexpected power state PowerState/${power[0]}` };
  }
}

/** An SDK or identity error → the agent's error kinds. */
export function classifyAzureError(e: unknown, what: string): AgentError {
  if (e instanceof AgentError) return e;
  const err = e as { name?: string; statusCode?: number; code?: string; errors?: unknown[] };
  const msg = brief(e);
  if (err.name === "AbortError") return new AgentError("TimedOut", `the request for ${what} was aborted at the deadline`);
  if (err.name === "AuthenticationError")
    return typeof err.statusCode === "number" && err.statusCode >= 500
      ? new AgentError("Unreachable", `Microsoft Entra ID failed to issue a token for ${what}: ${msg}`)
      : new AgentError("AuthFailed", `Microsoft Entra ID refused the credentials for ${what}: ${msg}`);
  // MSAL's refusal (wrong secret, unknown client, bad assertion) surfaces as AuthenticationRequiredError with the
  // token endpoint's answer in the cause (AADSTS codes); a network failure underneath is not a refusal.
  if (err.name === "AuthenticationRequiredError" || /AADSTS\d+|invalid_client|unauthorized_client|invalid_grant/.test(msg)) {
    const cause = (e as { cause?: unknown }).cause;
    if (isNetworkError(cause ?? e)) return new AgentError("Unreachable", `could not reach Microsoft Entra ID for ${what}: ${msg}`);
    const detail = cause instanceof Error ? brief(cause) : msg;
    return new AgentError("AuthFailed", `Microsoft Entra ID refused the credentials for ${what}: ${detail}`);
  }
  if (err.name === "CredentialUnavailableError")
    return new AgentError(
      "Config",
      `no Azure credential is available for ${what}: set up Azure Workload Identity for the operator's service account, or a Secret with tenantId, clientId and clientSecret: ${msg}`,
    );
  if (err.name === "AggregateAuthenticationError") {
    const inner = (err.errors ?? []) as { name?: string }[];
    if (inner.some((x) => x.name === "AuthenticationError"))
      return classifyAzureError(
        inner.find((x) => x.name === "AuthenticationError"),
        what,
      );
    return new AgentError(
      "Config",
      `no Azure credential is available for ${what} (DefaultAzureCredential tried them all): set up Azure Workload Identity, or a Secret with tenantId, clientId and clientSecret: ${msg}`,
    );
  }
  const status = err.statusCode;
  if (status === 401) return new AgentError("AuthFailed", `Azure Resource Manager refused the token for ${what}: ${msg}`);
  if (status === 403)
    return new AgentError("AuthFailed", `the identity may not do this on ${what} (see the role in manifests/examples/): ${msg}`);
  // Only the VM itself missing (ResourceNotFound, NotFound for a scale set's instance) is "it does not exist"; a
  // missing resource group, scale set or subscription is answered 404 too, under its own code: no such claim.
  if (status === 404)
    return err.code === "ResourceNotFound" || err.code === "NotFound"
      ? instanceNotFound(what, msg)
      : new AgentError(
          "Config",
          `Azure Resource Manager found no such resource for ${what} (${err.code ?? "404"}: ${msg}): not proof it is off; check the providerID, and the subscription the credentials belong to`,
        );
  if (status === 400) return new AgentError("Config", `Azure Resource Manager refused the request for ${what}: ${msg}`);
  if (status === 429)
    return new AgentError("Failed", `Azure Resource Manager is throttling requests (429) for ${what}, still after retries: ${msg}`);
  if (typeof status === "number" && status >= 500)
    return new AgentError("Unreachable", `Azure Resource Manager failed (${status}) for ${what}: ${msg}`);
  if (err.code === "PARSE_ERROR" || /JSON|Unexpected token/i.test(msg))
    return new AgentError("BadOutput", `Azure answered something that is not an API response for ${what}: ${msg}`);
  if (isNetworkError(e)) return new AgentError("Unreachable", `could not reach Azure for ${what}: ${msg}`);
  return new AgentError("Failed", `Azure request for ${what} failed: ${msg}`);
}

// One client per subscription, endpoint and identity: the credential caches its token between calls.
// Loaded on first use: the operator's start and every other agent type should not pay for the SDKs.
let sdk: Promise<[typeof ArmComputeModule, typeof IdentityModule]> | undefined;
const loadSdk = () => (sdk ??= Promise.all([import("@azure/arm-compute"), import("@azure/identity")]));

const clients = new Map<string, ComputeManagementClient>();

async function clientFor(p: Record<string, string>, subscription: string): Promise<ComputeManagementClient> {
  const id = [
    subscription,
    p.endpoint,
    p.authorityHost,
    p.tenantId,
    p.clientId,
    p.clientSecret && createHash("sha256").update(p.clientSecret).digest("hex"),
  ].join("|");
  let c = clients.get(id);
  if (c) return c;
  // A custom authority (tests, sovereign clouds) is not in MSAL's list: skip instance discovery, which would ask login.microsoftonline.com.
  const [{ ComputeManagementClient }, { ClientSecretCredential, DefaultAzureCredential }] = await loadSdk();
  const authority = p.authorityHost ? { authorityHost: p.authorityHost, disableInstanceDiscovery: true } : {};
  const credential: TokenCredential = p.clientSecret
    ? new ClientSecretCredential(p.tenantId!, p.clientId!, p.clientSecret, authority)
    : new DefaultAzureCredential(authority);
  // The SDK retries 429 (after Retry-After) and 5xx; these bounds keep the retries inside a fence's deadline,
  // which aborts them sooner through the signal.
  c = new ComputeManagementClient(credential, subscription, {
    ...(p.endpoint ? { endpoint: p.endpoint } : {}),
    retryOptions: { maxRetries: 4, retryDelayInMs: 250, maxRetryDelayInMs: 4000 },
  });
  if (clients.size >= 16) clients.delete(clients.keys().next().value!);
  clients.set(id, c);
  return c;
}

function target(ctx: AgentContext): AzureVmRef {
  const problems = check(ctx.parameters);
  if (problems.length > 0) throw new AgentError("Config", redact(problems.join("; "), ctx.parameters));
  return parseAzureProviderID(ctx.parameters[PROVIDER_ID]!) as AzureVmRef;
}

async function guarded<T>(ctx: AgentContext, what: string, fn: () => Promise<T>): Promise<T> {
  try {
    return await fn();
  } catch (e) {
    if (ctx.signal.aborted) throw new AgentError("TimedOut", `the request for ${what} was aborted at the deadline`);
    const c = classifyAzureError(e, what);
    const message = redact(c.message, ctx.parameters);
    throw isMissingInstance(c) ? new MissingInstanceError(message) : new AgentError(c.kind, message);
  }
}

export const azureDriver: AgentDriver = {
  type: "azure",
  validate: check,
  async power(ctx, action) {
    const r = target(ctx);
    const what = `virtual machine ${azureResourceId(r)}`;
    const client = await clientFor(ctx.parameters, r.subscription);
    const abortSignal = ctx.signal;
    const deallocate = ctx.parameters.offAction === "deallocate";
    // An instance that does not exist cannot be powered off: the status query that follows says whether that is proof.
    const gone = (e: unknown) => {
      if (action === "off" && isMissingInstance(e)) return;
      throw e;
    };
    await guarded(ctx, what, async () => {
      // Submitted = the long-running operation was accepted; the instance view, not the operation, proves off.
      if (r.kind === "vm") {
        const vms = client.virtualMachines;
        const poller =
          action === "on"
            ? vms.start(r.resourceGroup, r.name, { abortSignal })
            : deallocate
              ? vms.deallocate(r.resourceGroup, r.name, { abortSignal })
              : vms.powerOff(r.resourceGroup, r.name, { abortSignal, skipShutdown: true });
        await poller.submitted();
      } else {
        const vms = client.virtualMachineScaleSetVMs;
        const poller =
          action === "on"
            ? vms.start(r.resourceGroup, r.scaleSet, r.instanceId, { abortSignal })
            : deallocate
              ? vms.deallocate(r.resourceGroup, r.scaleSet, r.instanceId, { abortSignal })
              : vms.powerOff(r.resourceGroup, r.scaleSet, r.instanceId, { abortSignal, skipShutdown: true });
        await poller.submitted();
      }
    }).catch(gone);
  },
  async status(ctx): Promise<PowerState> {
    return statusOrGone(ctx, async (parameters) => {
      const c = { ...ctx, parameters };
      const r = target(c);
      const what = `virtual machine ${azureResourceId(r)}`;
      const client = await clientFor(parameters, r.subscription);
      const view = await guarded(c, what, () =>
        r.kind === "vm"
          ? client.virtualMachines.instanceView(r.resourceGroup, r.name, { abortSignal: ctx.signal })
          : client.virtualMachineScaleSetVMs.getInstanceView(r.resourceGroup, r.scaleSet, r.instanceId, { abortSignal: ctx.signal }),
      );
      const p = azurePower((view as { statuses?: unknown } | undefined)?.statuses);
      if (typeof p === "object") throw new AgentError("BadOutput", `${p.error} for ${what}`);
      return p;
    });
  },
};
