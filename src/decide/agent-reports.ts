// What a fence agent reports: the power state it reads and the kind of error it fails with. Declared at the bottom,
// with the decisions made on them (the monitor's verdicts, evidence); agents/types.ts re-exports them for the drivers.

export type PowerState = "on" | "off" | "unknown";

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
