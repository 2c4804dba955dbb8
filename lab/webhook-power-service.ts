// The reference receiver of the webhook agent's contract (docs/webhook-agent.md), dependency-free: what a site's
// home-grown power service must do. It checks the signature with its own HMAC code (not the driver's), refuses
// requests outside the 5-minute window and replayed request ids, and signs its answers. In the lab its power is
// the lab machine's real power, through the same path as the simulated BMCs (lab/machine.ts setPower).
//
// Faults for tests: "garbage" (200 with an HTML page), "hang" (reads the request, never answers),
// "unavailable" (503 for the next `unavailableFor` requests, then normal). A wrong key is a key change.
import { createHmac, timingSafeEqual } from "node:crypto";
import { createServer as createHttpServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import { createServer as createHttpsServer } from "node:https";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import type { AddressInfo } from "node:net";
import { setPower } from "./machine.ts";
import { paths, readState, readText } from "./state.ts";
import { createPki, signServerCert } from "./pki.ts";
import { SECRETS_NS, type Bed } from "./bed.ts";

export type Power = "on" | "off";

/** Where the power comes from and goes to; `machines` are the names the service answers for. */
export interface PowerBackend {
  machines(): string[];
  get(machine: string): Power;
  set(machine: string, action: Power): Promise<void>;
}

export type Fault = "none" | "garbage" | "hang" | "unavailable";

export interface ServiceRequest {
  time: number;
  status: number;
  action?: string;
  machine?: string;
  requestId?: string;
  /** Why the request was refused, or the power answered. */
  note: string;
}

const WINDOW_SECONDS = 300;
const VERSION = "stockade.io/webhook-agent/v1";

function hmacHex(key: string, timestamp: string, body: Buffer | string): string {
  return createHmac("sha256", key).update(`${timestamp}.`).update(body).digest("hex");
}

/** The key whose "v1=" signature the header carries, if any. */
function keyThatSigned(keys: readonly string[], timestamp: string, body: Buffer, header: string): string | undefined {
  const given = header.split(",").map((s) => s.trim());
  for (const key of keys) {
    const want = Buffer.from(`v1=${hmacHex(key, timestamp, body)}`);
    if (given.some((g) => Buffer.from(g).length === want.length && timingSafeEqual(Buffer.from(g), want))) return key;
  }
  return undefined;
}

export class WebhookPowerService {
  /** Keys accepted; during a rotation both the old and the new one. */
  keys: string[];
  fault: Fault = "none";
  unavailableFor = 0;
  readonly requests: ServiceRequest[] = [];
  private readonly seen = new Map<string, number>(); // requestId -> expiry (s)
  private readonly queues = new Map<string, Promise<void>>(); // one power change at a time per machine
  private readonly server: Server;
  private readonly now: () => number;
  private readonly backend: PowerBackend;
  private readonly scheme: string;
  private host = "127.0.0.1";

  constructor(o: { keys: string[]; backend: PowerBackend; tls?: { cert: string; key: string }; now?: () => number }) {
    this.keys = o.keys;
    this.backend = o.backend;
    this.now = o.now ?? (() => Date.now() / 1000);
    const handler = (req: IncomingMessage, res: ServerResponse) => void this.handle(req, res);
    this.server = o.tls ? createHttpsServer({ cert: o.tls.cert, key: o.tls.key }, handler) : createHttpServer(handler);
    this.scheme = o.tls ? "https" : "http";
  }

  /** `host`: loopback, or the lab's management address (lab.managementAddress) for agents running in pods. */
  async listen(port = 0, host = "127.0.0.1"): Promise<string> {
    await new Promise<void>((r) => this.server.listen(port, host, () => r()));
    this.host = host;
    return this.url;
  }

  get url(): string {
    const a = this.server.address() as AddressInfo;
    return `${this.scheme}://${this.host}:${a.port}/power`;
  }

  async close(): Promise<void> {
    this.server.closeAllConnections();
    await new Promise<void>((r) => this.server.close(() => r()));
    await Promise.all(this.queues.values());
  }

  private log(r: Omit<ServiceRequest, "time">): void {
    this.requests.push({ time: Date.now(), ...r });
  }

  private answer(res: ServerResponse, status: number, body: object, key?: string): void {
    const text = JSON.stringify(body);
    const ts = String(Math.floor(this.now()));
    const headers: Record<string, string> = { "content-type": "application/json" };
    if (key) Object.assign(headers, { "x-stockade-timestamp": ts, "x-stockade-signature": `v1=${hmacHex(key, ts, text)}` });
    res.writeHead(status, headers).end(text);
  }

  private refuse(res: ServerResponse, status: number, note: string, extra: Partial<ServiceRequest> = {}): void {
    this.log({ status, note, ...extra });
    this.answer(res, status, { error: note });
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    const body = Buffer.concat(chunks);
    if (this.fault === "hang") return this.log({ status: 0, note: "hang: no answer" }); // the socket stays open
    if (this.fault === "unavailable" && this.unavailableFor > 0) {
      this.unavailableFor--;
      return this.refuse(res, 503, "unavailable (fault)");
    }
    if (this.fault === "garbage") {
      this.log({ status: 200, note: "garbage (fault)" });
      res.writeHead(200, { "content-type": "text/html" }).end("<html><body>Power portal: please log in</body></html>");
      return;
    }
    if (req.method !== "POST") return this.refuse(res, 405, "POST only");
    const ts = String(req.headers["x-stockade-timestamp"] ?? "");
    const sig = String(req.headers["x-stockade-signature"] ?? "");
    if (!/^\d{1,12}$/.test(ts) || !sig) return this.refuse(res, 401, "unsigned request");
    if (Math.abs(this.now() - Number(ts)) > WINDOW_SECONDS) return this.refuse(res, 401, "timestamp outside the 5-minute window");
    const key = keyThatSigned(this.keys, ts, body, sig);
    if (!key) return this.refuse(res, 401, "bad signature");
    let msg: { version?: unknown; action?: unknown; machine?: unknown; requestId?: unknown; timestamp?: unknown };
    try {
      msg = JSON.parse(body.toString("utf8"));
    } catch {
      return this.refuse(res, 400, "body is not JSON");
    }
    const { action, machine, requestId } = msg;
    if (msg.version !== VERSION) return this.refuse(res, 400, `unsupported version ${JSON.stringify(msg.version)}`);
    if (String(msg.timestamp) !== ts) return this.refuse(res, 400, "body timestamp differs from the header");
    if (typeof requestId !== "string" || requestId.length < 16) return this.refuse(res, 400, "requestId missing or too short");
    const now = this.now();
    for (const [id, exp] of this.seen) if (exp < now) this.seen.delete(id);
    if (this.seen.has(requestId)) return this.refuse(res, 401, "replayed requestId", { requestId });
    this.seen.set(requestId, Number(ts) + WINDOW_SECONDS);
    if (typeof machine !== "string" || !this.backend.machines().includes(machine))
      return this.refuse(res, 422, `unknown machine ${JSON.stringify(machine)}`, { requestId });
    const base = { action: String(action), machine, requestId };
    if (action === "status") {
      const power = this.backend.get(machine);
      this.log({ ...base, status: 200, note: `power ${power}` });
      return this.answer(res, 200, { requestId, power }, key);
    }
    if (action !== "off" && action !== "on") return this.refuse(res, 400, `unknown action ${JSON.stringify(action)}`, base);
    // Accepted now, done in the background, like a BMC: the caller confirms with status.
    const prev = this.queues.get(machine) ?? Promise.resolve();
    const next = prev.then(() => this.backend.set(machine, action)).catch(() => undefined);
    this.queues.set(machine, next);
    this.log({ ...base, status: 202, note: `power ${action} accepted` });
    this.answer(res, 202, { requestId }, key);
  }
}

/** The lab's machines: power read from each node's power file (what its BMC reports), set through setPower. */
export function labPower(dir: string): PowerBackend {
  const s = readState(dir);
  return {
    machines: () => s.nodes.map((n) => n.name),
    get: (m) => (readText(paths(dir).node(m).power) === "0" ? "off" : "on"),
    set: (m, action) => setPower(s, m, action, "webhook"),
  };
}

/** A CA and a serving certificate for 127.0.0.1 (and `host`, when another), of the service's own (not the control plane's). */
export function serviceTls(dir: string, host = "127.0.0.1"): { caBundle: string; cert: string; key: string } {
  const pki = createPki(join(dir, "webhook-pki"), []);
  const server =
    host === "127.0.0.1"
      ? { cert: pki.serverCert, key: pki.serverKey }
      : signServerCert(pki.dir, `power-service-${host}`, `IP:${host},IP:127.0.0.1,DNS:localhost`);
  return {
    caBundle: readFileSync(pki.caCert, "utf8"),
    cert: readFileSync(server.cert, "utf8"),
    key: readFileSync(server.key, "utf8"),
  };
}

/**
 * The lab's power service for an e2e bed: listening on loopback (or `host`, e.g. lab.managementAddress) with its
 * own CA, the Secret power-service (hmacKey, caBundle) and the FenceAgent lab-webhook pointing at it (machine =
 * the node's name).
 */
export async function installLabWebhook(bed: Bed, key: string, timeoutSeconds = 10, host = "127.0.0.1"): Promise<WebhookPowerService> {
  const tls = serviceTls(bed.lab.dir, host);
  const service = new WebhookPowerService({ keys: [key], backend: labPower(bed.lab.dir), tls: { cert: tls.cert, key: tls.key } });
  await service.listen(0, host);
  await bed.lab.core.createNamespacedSecret({
    namespace: SECRETS_NS,
    body: { metadata: { name: "power-service" }, stringData: { hmacKey: key, caBundle: tls.caBundle } },
  });
  await bed.create("fenceagents", {
    metadata: { name: "lab-webhook" },
    spec: {
      type: "webhook",
      parameters: { url: service.url, x_site: "lab" },
      credentialsSecretRef: { namespace: SECRETS_NS, name: "power-service" },
      timeoutSeconds,
      retries: 1,
    },
  });
  return service;
}
