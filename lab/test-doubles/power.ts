// Test double plumbing shared by the GCE and ARM stubs (not a real peer): which machines a stub's instances
// are, their power, and the faults a test injects. A stub instance's power is a lab machine's real power
// (LabPower: the node's simulated BMC, as an administrator's ipmitool would drive it) or, for the SDK tests,
// an in-memory machine that takes a moment to change (MemoryPower).
import type { IncomingMessage, ServerResponse } from "node:http";
import type { Lab } from "../lab.ts";

export interface PowerBackend {
  /** undefined: no such machine. */
  power(machine: string): "on" | "off" | undefined;
  set(machine: string, power: "on" | "off"): Promise<void>;
}

/** Power a lab node through its BMC (lab.bmc: ipmitool → ipmi_sim → lab/bmc-hook.ts), the lab's one power path. */
export function labPower(lab: Lab): PowerBackend {
  return {
    power: (m) => (lab.nodes().includes(m) ? lab.machine(m).power : undefined),
    set: async (m, p) => {
      await lab.bmc(m, p);
    },
  };
}

export function memoryPower(machines: string[], delayMs = 150): PowerBackend & { state: Map<string, "on" | "off"> } {
  const state = new Map(machines.map((m) => [m, "on" as "on" | "off"]));
  return {
    state,
    power: (m) => state.get(m),
    set: async (m, p) => {
      await new Promise((r) => setTimeout(r, delayMs));
      state.set(m, p);
    },
  };
}

/** Faults a test switches on; each stub maps them onto its API's own error bodies. */
export interface Faults {
  /** The next n API requests (not token requests) answer 429, then 503, alternating, with Retry-After: 0. */
  throttle: number;
  /** API requests are accepted and never answered. */
  hang: boolean;
}

export const newFaults = (): Faults => ({ throttle: 0, hang: false });

export function readBody(req: IncomingMessage): Promise<string> {
  return new Promise((resolve, reject) => {
    let s = "";
    req.setEncoding("utf8");
    req.on("data", (d) => (s += d));
    req.on("end", () => resolve(s));
    req.on("error", reject);
  });
}

export function json(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  const text = body === undefined ? "" : JSON.stringify(body);
  res.writeHead(status, { ...(text ? { "content-type": "application/json; charset=UTF-8" } : {}), ...headers });
  res.end(text);
}

/** A request log entry, for tests that assert what the SDK sent. */
export interface Logged {
  method: string;
  path: string;
  query: Record<string, string>;
  status: number;
}
