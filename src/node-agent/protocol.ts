// The peer protocol's messages (design: issue 30): what is signed, how, and how a message is parsed and checked.
// Pure (node:crypto only): the HTTP server and client in peers.ts carry these.
import { createPrivateKey, createPublicKey, generateKeyPairSync, sign, verify, type KeyObject } from "node:crypto";

export const PROTOCOL_VERSION = 1;
export const PEER_CHECK_PATH = "/v1/peer-check";
const REQUEST_DOMAIN = "stockade-node-agent/v1/request";
const ANSWER_DOMAIN = "stockade-node-agent/v1/answer";
/** Requests and answers are small; anything larger is refused before it is parsed. */
export const MAX_MESSAGE_BYTES = 4096;

export interface PeerRequest {
  version: 1;
  from: string;
  nonce: string;
  signature: string;
}

export interface PeerAnswer {
  version: 1;
  /** The answering node. */
  from: string;
  /** The asking node, whose NodeFence the answer speaks about. */
  about: string;
  nonce: string;
  api: "reachable" | "unreachable";
  nodeFence: "absent" | "fence" | "unknown";
  unreachableForSeconds: number;
  signature: string;
}

export interface KeyPair {
  privateKey: KeyObject;
  /** base64 SPKI DER: what the record publishes. */
  publicKeyBase64: string;
}

export function generateKeyPair(): KeyPair {
  const { privateKey, publicKey } = generateKeyPairSync("ed25519");
  return { privateKey, publicKeyBase64: publicKey.export({ type: "spki", format: "der" }).toString("base64") };
}

export const privateKeyFromPem = (pem: string) => createPrivateKey(pem);

function publicKeyFrom(base64: string): KeyObject | undefined {
  try {
    const k = createPublicKey({ key: Buffer.from(base64, "base64"), format: "der", type: "spki" });
    return k.asymmetricKeyType === "ed25519" ? k : undefined;
  } catch {
    return undefined;
  }
}

const requestText = (r: Omit<PeerRequest, "signature">) => [REQUEST_DOMAIN, r.version, r.from, r.nonce].join("\n");
const answerText = (a: Omit<PeerAnswer, "signature">) =>
  [ANSWER_DOMAIN, a.version, a.from, a.about, a.nonce, a.api, a.nodeFence, a.unreachableForSeconds].join("\n");

const signText = (text: string, key: KeyObject) => sign(null, Buffer.from(text, "utf8"), key).toString("base64");

function verifyText(text: string, signature: string, publicKeyBase64: string): boolean {
  const key = publicKeyFrom(publicKeyBase64);
  if (!key || !/^[A-Za-z0-9+/]{86}==$/.test(signature)) return false;
  return verify(null, Buffer.from(text, "utf8"), key, Buffer.from(signature, "base64"));
}

export const signRequest = (r: Omit<PeerRequest, "signature">, key: KeyObject): PeerRequest => ({
  ...r,
  signature: signText(requestText(r), key),
});
export const signAnswer = (a: Omit<PeerAnswer, "signature">, key: KeyObject): PeerAnswer => ({
  ...a,
  signature: signText(answerText(a), key),
});
export const verifyRequest = (r: PeerRequest, publicKeyBase64: string) => verifyText(requestText(r), r.signature, publicKeyBase64);
export const verifyAnswer = (a: PeerAnswer, publicKeyBase64: string) => verifyText(answerText(a), a.signature, publicKeyBase64);

const NODE = /^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$/;
const NONCE = /^[A-Za-z0-9+/]{22}==$/;
const SIGNATURE = /^[A-Za-z0-9+/]{86}==$/;
const isObj = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v);

/** A request as sent, or what is wrong with it (for the 400 body and the log). */
export function parseRequest(v: unknown): { ok: true; request: PeerRequest } | { ok: false; problem: string } {
  if (!isObj(v)) return { ok: false, problem: "the body is not a JSON object" };
  if (v.version !== PROTOCOL_VERSION) return { ok: false, problem: `version must be ${PROTOCOL_VERSION}` };
  if (typeof v.from !== "string" || !NODE.test(v.from)) return { ok: false, problem: "from must be a node name" };
  if (typeof v.nonce !== "string" || !NONCE.test(v.nonce)) return { ok: false, problem: "nonce must be base64 of 16 bytes" };
  if (typeof v.signature !== "string" || !v.signature) return { ok: false, problem: "the request is unsigned" };
  if (!SIGNATURE.test(v.signature)) return { ok: false, problem: "signature must be base64 of 64 bytes" };
  if (Object.keys(v).length !== 4) return { ok: false, problem: "unexpected fields (version, from, nonce, signature only)" };
  return { ok: true, request: { version: 1, from: v.from, nonce: v.nonce, signature: v.signature } };
}

/** An answer as received; undefined unless every field is well formed. */
export function parseAnswer(v: unknown): PeerAnswer | undefined {
  if (!isObj(v) || v.version !== PROTOCOL_VERSION) return undefined;
  const { from, about, nonce, api, nodeFence, unreachableForSeconds, signature } = v;
  if (typeof from !== "string" || !NODE.test(from) || typeof about !== "string" || !NODE.test(about)) return undefined;
  if (typeof nonce !== "string" || !NONCE.test(nonce) || typeof signature !== "string" || !SIGNATURE.test(signature)) return undefined;
  if (api !== "reachable" && api !== "unreachable") return undefined;
  if (nodeFence !== "absent" && nodeFence !== "fence" && nodeFence !== "unknown") return undefined;
  if (typeof unreachableForSeconds !== "number" || !Number.isSafeInteger(unreachableForSeconds) || unreachableForSeconds < 0)
    return undefined;
  return { version: 1, from, about, nonce, api, nodeFence, unreachableForSeconds, signature };
}
