import { AgentError, type AgentDriver } from "./types.ts";
import { ipmiDriver } from "./ipmi.ts";
import { FenceAgentDriver } from "./fence-agent.ts";
import { manualDriver } from "./manual.ts";

export const AGENT_TYPES = ["ipmi", "fenceAgent", "manual"] as const;

/** The driver of a FenceAgent's spec.type; `agent` is spec.agent, required for type fenceAgent. */
export function driverFor(type: string, agent?: string): AgentDriver {
  switch (type) {
    case "ipmi":
      return ipmiDriver;
    case "manual":
      return manualDriver;
    case "fenceAgent":
      if (!agent) throw new AgentError("Config", "type fenceAgent needs spec.agent, the fence agent to run (e.g. fence_ipmilan)");
      return new FenceAgentDriver(agent);
    default:
      throw new AgentError("Config", `unknown agent type "${type}": this operator supports ${AGENT_TYPES.join(", ")}`);
  }
}
