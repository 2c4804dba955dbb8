import { AgentError, type AgentDriver, type ParameterRules } from "./types.ts";
import { ipmiDriver, ipmiRules } from "./ipmi.ts";
import { FenceAgentDriver, fenceAgentRules, loadFenceAgentRules } from "./fence-agent.ts";
import { manualDriver } from "./manual.ts";
import { networkFenceDriver, networkFenceRules } from "./csi-addons-network-fence.ts";
import { isStorageFence, STORAGE_FENCE_TYPES, type StorageFenceDriver } from "./types.ts";

export { isStorageFence, STORAGE_FENCE_TYPES };

export const AGENT_TYPES = ["ipmi", "fenceAgent", "manual", "csiAddonsNetworkFence"] as const;

/** The driver of a storage fence type, or undefined for a power type. */
export function storageDriverFor(type: string): StorageFenceDriver | undefined {
  return type === "csiAddonsNetworkFence" ? networkFenceDriver : undefined;
}

/** The driver of a FenceAgent's spec.type; `agent` is spec.agent, required for type fenceAgent. */
export function driverFor(type: string, agent?: string): AgentDriver {
  switch (type) {
    case "ipmi":
      return ipmiDriver;
    case "manual":
      return manualDriver;
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
 * Which parameters a FenceAgent's type takes and from where; undefined for manual (which takes none that matter).
 * For fenceAgent it reads the installed agent's metadata (cached per executable). Throws a Config AgentError when
 * the type is unknown or the agent missing.
 */
export function rulesFor(spec: { type: string; agent?: string }): ParameterRules | undefined {
  switch (spec.type) {
    case "ipmi":
      return ipmiRules;
    case "manual":
      return undefined;
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
