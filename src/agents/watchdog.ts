// The watchdog agent (issue 30, docs/safety.md §8): no actuator. The node's own node agent holds its hardware watchdog
// and stops feeding it once a NodeFence for its node exists; nothing here can power anything off, and nothing here
// can say "off". The evidence, WatchdogExpired, comes from the fence machine's arithmetic over what the operator itself
// observed (decide/watchdog-evidence.ts), never from this driver — and only under a FencingPolicy with
// spec.allowWatchdogEvidence.
import type { AgentDriver, PowerState } from "./types.ts";

export const watchdogDriver: AgentDriver = {
  type: "watchdog",
  validate: () => [],
  // Nothing to do: the node's watchdog is the actuator, and the NodeFence's existence is the command.
  power: async () => {},
  // Never "off": a status query has nothing to ask. The fence machine decides from the node's observed silence.
  status: async (): Promise<PowerState> => "unknown",
};
