// The one interface every fencing method implements. Drivers do a single try; retries, deadlines and
// confirmation live in run.ts so every method gets the same semantics.

import type { AgentErrorKind, PowerState } from "../decide/agent-reports.ts";
import { isStorageFence, STORAGE_FENCE_TYPES } from "../decide/storage-fence.ts";

// Declared in decide/, where decisions are made on them; exported here with the driver interface.
export type { AgentErrorKind, PowerState };
export { isStorageFence, STORAGE_FENCE_TYPES };

export interface AgentContext {
  /** Node name. */
  node: string;
  /** Fully resolved parameters, credentials included: never log them (see redact.ts). */
  parameters: Record<string, string>;
  /** The NodeFence's annotations (the manual agent reads its confirmation here). */
  annotations: Record<string, string>;
  /** Aborted on timeout: drivers kill their child processes at once. */
  signal: AbortSignal;
  /**
   * Cloud agents only: whether, and against which witness, "this instance does not exist" may count as off
   * (cloud.ts missingInstanceWitness); absent: it never does.
   */
  missingInstance?: { node: string; parameters: Record<string, string> } | { refused: string };
  /** What the driver wants said with a success (fenceOff appends it to the attempt's message). */
  notes?: string[];
}

export type AgentType =
  "ipmi" | "redfish" | "fenceAgent" | "manual" | "webhook" | "aws" | "gcp" | "azure" | "csiAddonsNetworkFence" | "watchdog";

/**
 * What a storage fence says. Deliberately not a PowerState: nothing here can be read as "the machine is off".
 * pending: asked, not answered yet; failed: the storage side refused (its message in the error).
 */
export type StorageFenceState = "fenced" | "unfenced" | "pending" | "failed";

/** A csi-addons NetworkFence (csiaddons.openshift.io/v1alpha1), the fields Stockade reads and writes. */
export interface NetworkFence {
  apiVersion: string;
  kind: "NetworkFence";
  metadata: {
    name: string;
    uid?: string;
    resourceVersion?: string;
    generation?: number;
    labels?: Record<string, string>;
    deletionTimestamp?: string;
  };
  spec: {
    fenceState: "Fenced" | "Unfenced";
    cidrs: string[];
    networkFenceClassName?: string;
    driver?: string;
    secret?: { name?: string; namespace?: string };
    parameters?: Record<string, string>;
  };
  status?: {
    result?: "Succeeded" | "Failed";
    message?: string;
    /** csi-addons declares them (metav1.Condition) but its controller writes none today; honoured if it ever does. */
    conditions?: { type: string; status: string; observedGeneration?: number }[];
  };
}

/**
 * The Kubernetes API a storage fence may use, and nothing more: get, create, replace (spec and status), delete of
 * NetworkFences. Reads end at the signal; writes end at the API request deadline (kube/deadline.ts) even when the
 * signal aborts first, so that a withdrawn fence's write has settled (landed or failed) when its operation ends.
 */
export interface NetworkFenceApi {
  get(name: string, signal: AbortSignal): Promise<NetworkFence | undefined>;
  create(nf: NetworkFence, signal: AbortSignal): Promise<void>;
  /** Replaces spec (resourceVersion precondition from the object passed); returns the stored object. */
  replace(nf: NetworkFence, signal: AbortSignal): Promise<NetworkFence>;
  /** Replaces status through the status subresource (resourceVersion precondition); returns the stored object. */
  replaceStatus(nf: NetworkFence, signal: AbortSignal): Promise<NetworkFence>;
  /** Deletes exactly this object (uid precondition). */
  delete(name: string, uid: string | undefined, signal: AbortSignal): Promise<void>;
}

export interface StorageAgentContext extends AgentContext {
  /** The FenceAgent's name: each agent's storage fence of a node is its own object. */
  agent: string;
  kube?: NetworkFenceApi;
  /** The Node's status.addresses (written by its kubelet): used only where the agent's parameters ask for them. */
  addresses?: { type: string; address: string }[];
}

/** A fence that cuts the node off its storage; one try per call, like AgentDriver. */
export interface StorageFenceDriver {
  readonly type: AgentType;
  readonly fences: "storage";
  validate(parameters: Record<string, string>): string[];
  fence(ctx: StorageAgentContext): Promise<void>;
  unfence(ctx: StorageAgentContext): Promise<void>;
  state(ctx: StorageAgentContext): Promise<StorageFenceState>;
}

export interface AgentDriver {
  readonly type: AgentType;
  /** Problems with the resolved parameters (missing required ones...), as actionable messages; [] when fine. */
  validate(parameters: Record<string, string>): string[];
  power(ctx: AgentContext, action: "off" | "on"): Promise<void>;
  status(ctx: AgentContext): Promise<PowerState>;
}

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

/**
 * How a native type's parameter may be set, from its lists: one of `parameters`, else not taken; a Secret-only
 * credential, a credential either may supply, or plain.
 */
export function listVerdict(
  lists: { parameters: readonly string[]; credentials: readonly string[]; secretOnly: readonly string[] },
  name: string,
): ParameterVerdict | undefined {
  if (!lists.parameters.includes(name)) return undefined;
  if (lists.secretOnly.includes(name)) return { kind: "credential", secretOnly: true };
  if (lists.credentials.includes(name)) return { kind: "credential", secretOnly: false };
  return { kind: "allowed" };
}
