// The one interface every fencing method implements. Drivers do a single try; retries, deadlines and
// confirmation live in run.ts so every method gets the same semantics.

export type PowerState = "on" | "off" | "unknown";

export interface AgentContext {
  /** Node name. */
  node: string;
  /** Fully resolved parameters, credentials included: never log them (see redact.ts). */
  parameters: Record<string, string>;
  /** The NodeFence's annotations (the manual agent reads its confirmation here). */
  annotations: Record<string, string>;
  /** Aborted on timeout: drivers kill their child processes at once. */
  signal: AbortSignal;
}

export type AgentType = "ipmi" | "redfish" | "fenceAgent" | "manual" | "webhook" | "aws" | "gcp" | "azure";

export interface AgentDriver {
  readonly type: AgentType;
  /** Problems with the resolved parameters (missing required ones...), as actionable messages; [] when fine. */
  validate(parameters: Record<string, string>): string[];
  power(ctx: AgentContext, action: "off" | "on"): Promise<void>;
  status(ctx: AgentContext): Promise<PowerState>;
}

/**
 * - Unreachable: the device did not answer (network, frozen BMC); may fix itself.
 * - AuthFailed: the device answered and refused the credentials or privilege; retrying will not help.
 * - BadOutput: the device or agent answered something we cannot interpret.
 * - Failed: any other failure of the operation.
 * - TimedOut: the operation's deadline passed.
 * - Config: the FenceAgent or the host is misconfigured (unknown type, agent not installed...); retrying will not help.
 * - Cancelled: the operation must not go on (the node heartbeats again, leadership lost, the fence was withdrawn).
 */
export type AgentErrorKind = "Unreachable" | "AuthFailed" | "BadOutput" | "Failed" | "TimedOut" | "Config" | "Cancelled";

export class AgentError extends Error {
  readonly kind: AgentErrorKind;
  constructor(kind: AgentErrorKind, message: string, options?: ErrorOptions) {
    super(message, options);
    this.name = "AgentError";
    this.kind = kind;
  }
}

/** Errors that will not go away by trying again. */
export function isPermanent(e: unknown): boolean {
  return e instanceof AgentError && (e.kind === "Config" || e.kind === "AuthFailed" || e.kind === "Cancelled");
}

/**
 * The machine a node's parameters point an agent at: a device (BMC, PDU, hypervisor...) and, for devices that
 * control several machines, the outlets or plugs. Two nodes that share one fence each other's machine.
 */
export interface FencingTarget {
  /** Normalised device identity, e.g. "10.0.0.7:623" or "pdu-a.example.com:23 switch=2". */
  device: string;
  /** Outlets, plugs or machine ids on the device; empty when the device is the machine itself. */
  outlets: string[];
}

/**
 * Which parameters an agent type takes and how each may be set; every check here is pure (a fence agent's
 * rules are built from its metadata, read once per executable).
 */
export interface ParameterRules {
  /** "ipmi" or the fence agent's name, for messages. */
  readonly subject: string;
  /** How parameter `name` may be set; undefined when the agent does not take it. */
  verdict(name: string): ParameterVerdict | undefined;
  /** The credentials a Secret may supply (for messages). */
  readonly credentials: readonly string[];
  /** Problems with fully resolved parameters (names, values by type, required ones), as actionable messages. */
  check(parameters: Record<string, string>): string[];
  /**
   * The machine these parameters fence, or undefined when they do not say (then no duplicate check applies).
   * `node` is the node's name, for devices that tell machines apart by it (the webhook agent's default machine).
   */
  target(parameters: Record<string, string>, node?: string): FencingTarget | undefined;
}

/** allowed: the spec may set it; credential: a Secret may supply it (secretOnly: never the spec); refused: never. */
export type ParameterVerdict = { kind: "allowed" } | { kind: "credential"; secretOnly: boolean } | { kind: "refused"; reason: string };
