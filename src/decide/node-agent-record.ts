// The node agent's per-node record: a Lease named after the node in the agent's namespace, renewed by the node's own
// agent while it reaches the API. It is the agent's promise to the operator (armed or not, the watchdog's timeout,
// how long after its last confirmation it goes on feeding) and its identity to its peers (public key, address).
// Read by the operator (watchdog evidence), by peers (who may ask them, and how to check their signatures) and
// written by the agent; parsed here, purely, so all three read it the same way.
import type { V1Lease } from "@kubernetes/client-node";

export const NODE_AGENT_NAMESPACE = "stockade-node-agent";

const P = "node-agent.stockade.io/";
export const RECORD_ANNOTATIONS = {
  /** "true" while the agent holds the watchdog device open and feeds it; "false" otherwise. */
  armed: `${P}armed`,
  /** The watchdog's timeout in seconds, as read from the device (never assumed). */
  watchdogTimeoutSeconds: `${P}watchdog-timeout-seconds`,
  /**
   * The agent's promise: it stops feeding the watchdog at most this many seconds (on its monotonic clock) after the
   * start of the last check that told it no NodeFence exists for its node (its own API read, or a peer's signed
   * answer), unless most of its peers sign that they cannot reach the API either.
   */
  deadlineSeconds: `${P}deadline-seconds`,
  /**
   * F: how long (seconds, on its monotonic clock) the agent must have been without the API before it signs "I cannot
   * reach the API" for a peer's control-plane-down vote. The operator's doubt window uses the smallest F any agent
   * states (decide/watchdog-evidence.ts).
   */
  controlPlaneDownSeconds: `${P}control-plane-down-seconds`,
  /** The agent's Ed25519 public key, base64 of its SPKI DER: peers check its signed requests and answers with it. */
  publicKey: `${P}public-key`,
  /** Where peers reach the agent: host:port on the pod network. */
  peerAddress: `${P}peer-address`,
} as const;

/** Bounds that keep the operator's arithmetic meaningful; a record outside them is refused, never clamped. */
export const MAX_WATCHDOG_TIMEOUT_SECONDS = 600;
export const MAX_DEADLINE_SECONDS = 600;

export interface NodeAgentRecord {
  /** The node the record speaks for (the Lease's name). */
  node: string;
  armed: boolean;
  watchdogTimeoutSeconds: number;
  deadlineSeconds: number;
  controlPlaneDownSeconds: number;
  /** base64 SPKI DER of an Ed25519 key. */
  publicKey: string;
  peerAddress: string;
  /** spec.renewTime as written by the agent (its clock: compared by value, never with ours). */
  renewTime: string;
  /** spec.holderIdentity: the agent pod's name. */
  holder: string;
}

export type ParsedRecord = { ok: true; record: NodeAgentRecord } | { ok: false; node: string; problem: string };

const intIn = (v: string | undefined, min: number, max: number): number | undefined => {
  if (v === undefined || !/^[0-9]{1,6}$/.test(v)) return undefined;
  const n = Number(v);
  return n >= min && n <= max ? n : undefined;
};

/** The record a Lease holds, or why it is not a usable one (a message for people, naming the annotation). */
export function parseNodeAgentRecord(lease: V1Lease): ParsedRecord {
  const node = lease.metadata?.name ?? "";
  const a = lease.metadata?.annotations ?? {};
  const bad = (problem: string): ParsedRecord => ({ ok: false, node, problem });
  if (!node) return bad("the record has no name");
  const armedRaw = a[RECORD_ANNOTATIONS.armed];
  if (armedRaw !== "true" && armedRaw !== "false")
    return bad(`${RECORD_ANNOTATIONS.armed} is ${JSON.stringify(armedRaw ?? null)}, not "true" or "false"`);
  const watchdogTimeoutSeconds = intIn(a[RECORD_ANNOTATIONS.watchdogTimeoutSeconds], 1, MAX_WATCHDOG_TIMEOUT_SECONDS);
  if (armedRaw === "true" && watchdogTimeoutSeconds === undefined)
    return bad(`${RECORD_ANNOTATIONS.watchdogTimeoutSeconds} must be a whole number of seconds, 1-${MAX_WATCHDOG_TIMEOUT_SECONDS}`);
  const deadlineSeconds = intIn(a[RECORD_ANNOTATIONS.deadlineSeconds], 1, MAX_DEADLINE_SECONDS);
  if (deadlineSeconds === undefined)
    return bad(`${RECORD_ANNOTATIONS.deadlineSeconds} must be a whole number of seconds, 1-${MAX_DEADLINE_SECONDS}`);
  const controlPlaneDownSeconds = intIn(a[RECORD_ANNOTATIONS.controlPlaneDownSeconds], 1, MAX_DEADLINE_SECONDS);
  if (controlPlaneDownSeconds === undefined)
    return bad(`${RECORD_ANNOTATIONS.controlPlaneDownSeconds} must be a whole number of seconds, 1-${MAX_DEADLINE_SECONDS}`);
  const publicKey = a[RECORD_ANNOTATIONS.publicKey] ?? "";
  if (!/^[A-Za-z0-9+/]{40,200}={0,2}$/.test(publicKey)) return bad(`${RECORD_ANNOTATIONS.publicKey} is not a base64 public key`);
  const peerAddress = a[RECORD_ANNOTATIONS.peerAddress] ?? "";
  if (!/^[A-Za-z0-9.:[\]-]{1,100}:[0-9]{1,5}$/.test(peerAddress)) return bad(`${RECORD_ANNOTATIONS.peerAddress} is not host:port`);
  const rt = lease.spec?.renewTime as Date | string | undefined;
  const renewTime = rt instanceof Date ? rt.toISOString() : (rt ?? "");
  return {
    ok: true,
    record: {
      node,
      armed: armedRaw === "true",
      watchdogTimeoutSeconds: watchdogTimeoutSeconds ?? 0,
      deadlineSeconds,
      controlPlaneDownSeconds,
      publicKey,
      peerAddress,
      renewTime,
      holder: lease.spec?.holderIdentity ?? "",
    },
  };
}
