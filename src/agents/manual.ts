// Manual fencing: an administrator powers the machine off and says so on the NodeFence. The annotation's
// value must be the node's name, so a copy-pasted annotation cannot confirm the wrong node.
import type { AgentContext, AgentDriver, PowerState } from "./types.ts";
import { CONFIRMED_OFF_ANNOTATION } from "../decide/fence-machine.ts";

// The state machine reads the same annotation as evidence, so it is declared there; exported here with the driver.
export { CONFIRMED_OFF_ANNOTATION };

export const manualDriver: AgentDriver = {
  type: "manual",
  validate: () => [],
  // Nothing to do: the administrator is the actuator.
  power: async () => {},
  async status(ctx: AgentContext): Promise<PowerState> {
    return ctx.annotations[CONFIRMED_OFF_ANNOTATION] === ctx.node ? "off" : "unknown";
  },
};
