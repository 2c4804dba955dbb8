import { AgentError, type AgentDriver, type ParameterRules } from "./types.ts";
import { ipmiDriver, ipmiRules } from "./ipmi.ts";
import { redfishDriver, redfishRules } from "./redfish.ts";
import { FenceAgentDriver, fenceAgentRules, loadFenceAgentRules } from "./fence-agent.ts";
import { manualDriver } from "./manual.ts";
import { watchdogDriver } from "./watchdog.ts";
import { webhookDriver, webhookRules } from "./webhook.ts";
import { gcpDriver, gcpRules } from "./gcp.ts";
import { azureDriver, azureRules } from "./azure.ts";
import { awsDriver, awsRules } from "./aws.ts";
import { networkFenceDriver, networkFenceRules } from "./csi-addons-network-fence.ts";
import { isStorageFence, STORAGE_FENCE_TYPES, type StorageFenceDriver } from "./types.ts";

export const AGENT_TYPES = [
  "ipmi",
  "redfish",
  "fenceAgent",
  "manual",
  "webhook",
  "aws",
  "gcp",
  "azure",
  "csiAddonsNetworkFence",
  "watchdog",
] as const;

export { isStorageFence, STORAGE_FENCE_TYPES };

/** The driver of a storage fence type, or undefined for a power type. */
export function storageDriverFor(type: string): StorageFenceDriver | undefined {
  return type === "csiAddonsNetworkFence" ? networkFenceDriver : undefined;
}

/** The driver of a FenceAgent's spec.type; `agent` is spec.agent, required for type fenceAgent. */
export function driverFor(type: string, agent?: string): AgentDriver {
  switch (type) {
    case "ipmi":
      return ipmiDriver;
    case "redfish":
      return redfishDriver;
    case "manual":
      return manualDriver;
    case "watchdog":
      return watchdogDriver;
    case "webhook":
      return webhookDriver;
    case "gcp":
      return gcpDriver;
    case "azure":
      return azureDriver;
    case "aws":
      return awsDriver;
    case "csiAddonsNetworkFence":
      throw new AgentError("Config", "type csiAddonsNetworkFence fences storage: it has no power state (use storageDriverFor)");
    case "fenceAgent":
      if (!agent) throw new AgentError("Config", "type fenceAgent needs spec.agent, the fence agent to run (e.g. fence_ipmilan)");
      return new FenceAgentDriver(agent);
    default:
      throw new AgentError("Config", `unknown agent type "${type}": this operator supports ${AGENT_TYPES.join(", ")}`);
  }
}

/**
 * Which parameters a FenceAgent's type takes and from where; undefined for manual and watchdog (which take none that matter).
 * For fenceAgent it reads the installed agent's metadata (cached per executable). Throws a Config AgentError when
 * the type is unknown or the agent missing.
 */
export function rulesFor(spec: { type: string; agent?: string }): ParameterRules | undefined {
  switch (spec.type) {
    case "ipmi":
      return ipmiRules;
    case "redfish":
      return redfishRules;
    case "manual":
    case "watchdog":
      return undefined;
    case "webhook":
      return webhookRules;
    case "gcp":
      return gcpRules;
    case "azure":
      return azureRules;
    case "aws":
      return awsRules;
    case "csiAddonsNetworkFence":
      return networkFenceRules;
    case "fenceAgent":
      driverFor(spec.type, spec.agent); // name checks
      return fenceAgentRules(spec.agent!);
    default:
      throw new AgentError("Config", `unknown agent type "${spec.type}": this operator supports ${AGENT_TYPES.join(", ")}`);
  }
}

/** rulesFor without blocking: reads a fence agent's metadata asynchronously (then rulesFor hits the cache). */
export async function loadRules(spec: { type: string; agent?: string }): Promise<ParameterRules | undefined> {
  if (spec.type !== "fenceAgent") return rulesFor(spec);
  driverFor(spec.type, spec.agent);
  return loadFenceAgentRules(spec.agent!);
}
