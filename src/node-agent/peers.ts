// The peer protocol over HTTP (design: issue 30): a server that answers other agents' signed "do you reach the API,
// and is there a NodeFence for me?" and a client that asks every known peer at once. A request is answered only
// after its signature verifies with the key of a record listed while we had the API, and only from a fresh read
// made after it arrived; everything else is refused with a status, a message in the body and a log line.
import { randomBytes, type KeyObject } from "node:crypto";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import {
  MAX_MESSAGE_BYTES,
  PEER_CHECK_PATH,
  PROTOCOL_VERSION,
  parseAnswer,
  parseRequest,
  signAnswer,
  signRequest,
  verifyAnswer,
  verifyRequest,
  type PeerAnswer,
} from "./protocol.ts";

export interface Peer {
  node: string;
  /** host:port */
  address: string;
  publicKey: string;
}

/** What the server needs from the agent. */
export interface PeerServerDeps {
  node: string;
  privateKey: KeyObject;
  /** The public key of a known peer (a record listed while we had the API), else undefined. */
  peerKey(node: string): string | undefined;
  /**
   * A fresh GET of the NodeFence named `about`, started now (after the request arrived): "fence"/"absent", or
   * "unreachable" when the API did not answer in time.
   */
  freshCheck(about: string): Promise<"fence" | "absent" | "unreachable">;
  /**
   * What we may sign as unreachableForSeconds (decide/isolation.ts unreachableForSeconds: since our last successful
   * check started and our record was last renewed, whichever is later; 0 without a past success).
   */
  unreachableForSeconds(): number;
  /** F: "unreachable" is said only after this long without a successful check. */
  minUnreachableSeconds: number;
  log: { warn(obj: object, msg: string): void; debug?(obj: object, msg: string): void };
  /** A refused request, by reason (the agent's stockade_node_agent_refused_requests_total label). */
  onRefused?(reason: RefusalReason): void;
  onAnswered?(): void;
  /** Requests per second allowed per source address (burst: twice that). */
  ratePerSecond?: number;
  now?: () => number;
}

/**
 * Why a request was refused: bad-request (400/404), unauthorized (401: unsigned, unknown peer, bad signature, replay),
 * rate-limited (429), too-early (503: this agent cannot reach the API either, but for less than F, so it says nothing).
 */
export type RefusalReason = "bad-request" | "unauthorized" | "rate-limited" | "too-early";

const REASON_BY_STATUS: Record<number, RefusalReason> = {
  400: "bad-request",
  404: "bad-request",
  401: "unauthorized",
  429: "rate-limited",
  503: "too-early",
};

const NONCE_MEMORY_MS = 10 * 60_000;
const MAX_NONCES = 100_000;

export class PeerServer {
  readonly #deps: PeerServerDeps;
  readonly #server: Server;
  /** Nonces answered recently: a request seen twice is a replay (its asker never sends one nonce twice). */
  readonly #nonces = new Map<string, number>();
  readonly #buckets = new Map<string, { tokens: number; at: number }>();

  constructor(deps: PeerServerDeps) {
    this.#deps = deps;
    this.#server = createServer((req, res) => void this.#handle(req, res));
    this.#server.requestTimeout = 5000;
    this.#server.headersTimeout = 3000;
  }

  async listen(port: number, host = "0.0.0.0"): Promise<number> {
    await new Promise<void>((resolve, reject) => {
      this.#server.once("error", reject);
      this.#server.listen(port, host, () => resolve());
    });
    return (this.#server.address() as AddressInfo).port;
  }

  close(): Promise<void> {
    this.#server.closeAllConnections();
    return new Promise((resolve) => this.#server.close(() => resolve()));
  }

  #now = () => (this.#deps.now ?? performance.now.bind(performance))();

  #refuse(res: ServerResponse, status: number, source: string, message: string): void {
    this.#deps.log.warn({ source, status, reason: message }, "peer request refused");
    this.#deps.onRefused?.(REASON_BY_STATUS[status] ?? "bad-request");
    res.writeHead(status, { "content-type": "text/plain; charset=utf-8", connection: "close" }).end(`${message}\n`);
  }

  #allow(source: string): boolean {
    const rate = this.#deps.ratePerSecond ?? 5;
    const now = this.#now();
    const b = this.#buckets.get(source) ?? { tokens: 2 * rate, at: now };
    b.tokens = Math.min(2 * rate, b.tokens + ((now - b.at) / 1000) * rate);
    b.at = now;
    this.#buckets.set(source, b);
    if (this.#buckets.size > 10_000) this.#buckets.delete(this.#buckets.keys().next().value as string);
    if (b.tokens < 1) return false;
    b.tokens -= 1;
    return true;
  }

  async #handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const source = req.socket.remoteAddress ?? "unknown";
    if (req.url !== PEER_CHECK_PATH || req.method !== "POST")
      return this.#refuse(res, 404, source, `only POST ${PEER_CHECK_PATH} is served here`);
    if (!this.#allow(source)) return this.#refuse(res, 429, source, "too many requests from this address");
    const body = await readBody(req);
    if (body === undefined) return this.#refuse(res, 400, source, `the request is larger than ${MAX_MESSAGE_BYTES} bytes`);
    let json: unknown;
    try {
      json = JSON.parse(body);
    } catch {
      return this.#refuse(res, 400, source, "the body is not JSON");
    }
    const parsed = parseRequest(json);
    if (!parsed.ok) return this.#refuse(res, parsed.problem === "the request is unsigned" ? 401 : 400, source, parsed.problem);
    const r = parsed.request;
    const key = this.#deps.peerKey(r.from);
    if (key === undefined)
      return this.#refuse(res, 401, source, `${r.from} is not a known peer (no record of it listed while this agent reached the API)`);
    if (!verifyRequest(r, key)) return this.#refuse(res, 401, source, `the signature does not verify with ${r.from}'s public key`);
    if (!this.#remember(r.nonce)) return this.#refuse(res, 401, source, "this nonce was already answered (a replayed request)");
    const answer = await this.#answer(r.from, r.nonce);
    if (!answer) return this.#refuse(res, 503, source, `cannot reach the API, but for less than ${this.#deps.minUnreachableSeconds} s`);
    this.#deps.onAnswered?.();
    res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify(answer));
  }

  #remember(nonce: string): boolean {
    const now = this.#now();
    for (const [n, t] of this.#nonces) {
      if (now - t < NONCE_MEMORY_MS && this.#nonces.size < MAX_NONCES) break;
      this.#nonces.delete(n);
    }
    if (this.#nonces.has(nonce)) return false;
    this.#nonces.set(nonce, now);
    return true;
  }

  async #answer(about: string, nonce: string): Promise<PeerAnswer | undefined> {
    const d = this.#deps;
    const seen = await d.freshCheck(about).catch(() => "unreachable" as const);
    const base = { version: PROTOCOL_VERSION, from: d.node, about, nonce } as const;
    if (seen !== "unreachable") return signAnswer({ ...base, api: "reachable", nodeFence: seen, unreachableForSeconds: 0 }, d.privateKey);
    const s = d.unreachableForSeconds();
    if (!(s >= d.minUnreachableSeconds)) return undefined;
    const unreachableForSeconds = Number.isFinite(s) ? Math.floor(s) : 999_999;
    return signAnswer({ ...base, api: "unreachable", nodeFence: "unknown", unreachableForSeconds }, d.privateKey);
  }
}

/** The body, or undefined if it is larger than the limit (reading stops there). */
function readBody(req: IncomingMessage): Promise<string | undefined> {
  const declared = Number(req.headers["content-length"] ?? 0);
  if (declared > MAX_MESSAGE_BYTES) return Promise.resolve(undefined);
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    req.on("data", (c: Buffer) => {
      size += c.length;
      if (size > MAX_MESSAGE_BYTES) {
        resolve(undefined);
        req.destroy();
      } else chunks.push(c);
    });
    req.on("end", () => resolve(Buffer.concat(chunks).toString("utf8")));
    req.on("error", reject);
  });
}

export interface AskResult {
  /** Answers that verified: signed by the named peer, echoing our nonce, about us. */
  answers: PeerAnswer[];
  /** Peers whose answer was missing, late, refused or did not verify, with why. */
  dropped: { node: string; why: string }[];
}

/** Asks every peer at once (one fresh nonce each); waits at most timeoutMs for each. */
export async function askPeers(self: string, privateKey: KeyObject, peers: Peer[], timeoutMs: number): Promise<AskResult> {
  const results = await Promise.all(peers.map((p) => askOne(self, privateKey, p, timeoutMs)));
  const out: AskResult = { answers: [], dropped: [] };
  results.forEach((r, i) => (typeof r === "string" ? out.dropped.push({ node: peers[i]!.node, why: r }) : out.answers.push(r)));
  return out;
}

async function askOne(self: string, privateKey: KeyObject, peer: Peer, timeoutMs: number): Promise<PeerAnswer | string> {
  const nonce = randomBytes(16).toString("base64");
  const request = signRequest({ version: PROTOCOL_VERSION, from: self, nonce }, privateKey);
  let text: string;
  try {
    const res = await fetch(`http://${peer.address}${PEER_CHECK_PATH}`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify(request),
      signal: AbortSignal.timeout(timeoutMs),
    });
    text = await res.text();
    if (res.status !== 200) return `answered ${res.status}: ${text.trim().slice(0, 200)}`;
  } catch (err) {
    return `no answer: ${(err as Error).message}`;
  }
  return checkAnswer(text, self, peer, nonce);
}

/** The answer if it is the one we asked for: from the named peer, signed with its key, about us, our nonce. */
export function checkAnswer(text: string, self: string, peer: Peer, nonce: string): PeerAnswer | string {
  if (text.length > MAX_MESSAGE_BYTES) return "the answer is too large";
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    return "the answer is not JSON";
  }
  const a = parseAnswer(json);
  if (!a) return "the answer is malformed";
  if (a.from !== peer.node) return `the answer names ${a.from}, not ${peer.node}`;
  if (a.about !== self) return `the answer is about ${a.about}, not ${self}`;
  if (a.nonce !== nonce) return "the answer does not echo our nonce";
  if (!verifyAnswer(a, peer.publicKey)) return `the answer's signature does not verify with ${peer.node}'s public key`;
  return a;
}
