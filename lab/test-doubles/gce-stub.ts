// TEST DOUBLE, NOT A REAL PEER. No Compute Engine emulator installs here (docs: /work/shared/notes), so this is
// a loopback stub of the parts of the public Compute Engine v1 REST reference the gcp agent uses, driven only
// through the official SDK (@google-cloud/compute):
//   GET  /compute/v1/projects/{p}/zones/{z}/instances/{i}              → Instance (status RUNNING/STOPPING/TERMINATED...)
//   POST /compute/v1/projects/{p}/zones/{z}/instances/{i}/stop|start   → zonal Operation (RUNNING, later DONE)
//   GET  /compute/v1/projects/{p}/zones/{z}/operations/{op}            → Operation
// errors as Google APIs send them ({"error": {"code", "message", "errors": [{"reason"...}]}}), and the two ways
// the SDK authenticates: a service-account key's self-signed JWT (RS256, aud https://compute.googleapis.com/,
// verified against the key's public half), and a metadata server (GCE_METADATA_HOST, what GKE Workload
// Identity's gke-metadata-server answers) whose access tokens the API accepts. An instance's power is a
// machine's power (lab/test-doubles/power.ts): stop powers the lab node off through its BMC.
// Not reproduced: IAM (any valid identity may do anything), quotas, the real latency of a stop (tens of seconds),
// operation errors inside a 200, local-SSD refusals, etags, and every other field of an Instance.
import { createServer as createHttps, type Server as HttpsServer } from "node:https";
import { createServer as createHttp, type Server as HttpServer, type IncomingMessage, type ServerResponse } from "node:http";
import { generateKeyPairSync, randomBytes, verify, type KeyObject } from "node:crypto";
import { readFileSync } from "node:fs";
import { json, newFaults, readBody, type Faults, type Logged, type PowerBackend } from "./power.ts";

export interface GceStubOptions {
  /** TLS serving certificate (valid for 127.0.0.1) and key, e.g. the lab PKI's apiserver pair. */
  cert: string;
  key: string;
  power: PowerBackend;
}

interface Op {
  id: string;
  name: string;
  project: string;
  zone: string;
  type: "stop" | "start";
  target: string;
  done: boolean;
  insertTime: string;
}

const b64url = (s: string) => Buffer.from(s, "base64url");

export class GceStub {
  readonly faults: Faults = newFaults();
  readonly log: Logged[] = [];
  private throttled = 0;
  /** gce instance key project/zone/name → machine. */
  private readonly instances = new Map<string, string>();
  private readonly busy = new Map<string, "stop" | "start">();
  private readonly ops = new Map<string, Op>();
  private readonly keys = new Map<string, KeyObject>(); // client_email → public key
  private readonly tokens = new Set<string>(); // metadata-server access tokens
  private api!: HttpsServer;
  private metadata!: HttpServer;
  private readonly opts: GceStubOptions;
  endpoint = "";
  /** host:port for GCE_METADATA_HOST. */
  metadataHost = "";

  constructor(opts: GceStubOptions) {
    this.opts = opts;
  }

  async start(): Promise<this> {
    this.api = createHttps(
      { cert: readFileSync(this.opts.cert), key: readFileSync(this.opts.key) },
      (req, res) => void this.serve(req, res),
    );
    this.metadata = createHttp((req, res) => this.serveMetadata(req, res));
    await Promise.all([
      new Promise<void>((r) => this.api.listen(0, "127.0.0.1", r)),
      new Promise<void>((r) => this.metadata.listen(0, "127.0.0.1", r)),
    ]);
    this.endpoint = `https://127.0.0.1:${(this.api.address() as { port: number }).port}`;
    this.metadataHost = `127.0.0.1:${(this.metadata.address() as { port: number }).port}`;
    return this;
  }

  async stop(): Promise<void> {
    this.api.closeAllConnections();
    this.metadata.closeAllConnections();
    await Promise.all([new Promise((r) => this.api.close(r)), new Promise((r) => this.metadata.close(r))]);
  }

  addInstance(project: string, zone: string, name: string, machine: string): string {
    this.instances.set(`${project}/${zone}/${name}`, machine);
    return `gce://${project}/${zone}/${name}`;
  }

  removeInstance(project: string, zone: string, name: string): void {
    this.instances.delete(`${project}/${zone}/${name}`);
  }

  /** A new service account whose key the API accepts: the JSON a user would put in the Secret. */
  serviceAccountKey(email = `fencer-${randomBytes(3).toString("hex")}@lab-project.iam.gserviceaccount.com`): string {
    const { publicKey, privateKey } = generateKeyPairSync("rsa", { modulusLength: 2048 });
    this.keys.set(email, publicKey);
    return JSON.stringify({
      type: "service_account",
      project_id: "lab-project",
      private_key_id: randomBytes(20).toString("hex"),
      private_key: privateKey.export({ type: "pkcs8", format: "pem" }),
      client_email: email,
      client_id: String(Date.now()),
      token_uri: "https://oauth2.googleapis.com/token",
    });
  }

  /** A key the API has never heard of: a wrong credential. */
  static unknownServiceAccountKey(): string {
    const { privateKey } = generateKeyPairSync("rsa", { modulusLength: 2048 });
    return JSON.stringify({
      type: "service_account",
      project_id: "lab-project",
      private_key_id: "0000",
      private_key: privateKey.export({ type: "pkcs8", format: "pem" }),
      client_email: "stranger@lab-project.iam.gserviceaccount.com",
    });
  }

  status(project: string, zone: string, name: string): string | undefined {
    const k = `${project}/${zone}/${name}`;
    const m = this.instances.get(k);
    if (m === undefined) return undefined;
    const b = this.busy.get(k);
    if (b) return b === "stop" ? "STOPPING" : "STAGING";
    const p = this.opts.power.power(m);
    return p === "off" ? "TERMINATED" : p === "on" ? "RUNNING" : undefined;
  }

  private authorized(req: IncomingMessage): boolean {
    const h = req.headers.authorization ?? "";
    const token = /^Bearer (.+)$/.exec(h)?.[1];
    if (!token) return false;
    if (this.tokens.has(token)) return true;
    const [head, payload, sig] = token.split(".");
    if (!head || !payload || !sig) return false;
    try {
      const claims = JSON.parse(b64url(payload).toString()) as { iss?: string; aud?: string; exp?: number; scope?: string };
      const key = this.keys.get(claims.iss ?? "");
      if (!key) return false;
      if (!verify("RSA-SHA256", Buffer.from(`${head}.${payload}`), key, b64url(sig))) return false;
      if (!claims.exp || claims.exp * 1000 < Date.now()) return false;
      return claims.aud === "https://compute.googleapis.com/" || /cloud-platform|compute/.test(claims.scope ?? "");
    } catch {
      return false;
    }
  }

  private error(res: ServerResponse, code: number, reason: string, message: string, headers: Record<string, string> = {}) {
    json(res, code, { error: { code, message, errors: [{ message, domain: "global", reason }] } }, headers);
  }

  private async serve(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const url = new URL(req.url ?? "/", "https://stub");
    await readBody(req);
    const entry: Logged = { method: req.method ?? "", path: url.pathname, query: Object.fromEntries(url.searchParams), status: 0 };
    this.log.push(entry);
    const send = (status: number, f: () => void) => {
      entry.status = status;
      f();
    };
    if (this.faults.hang) return; // accepted, never answered
    if (this.faults.throttle > 0) {
      this.faults.throttle--;
      const n = this.throttled++;
      const [code, reason] = n % 2 === 0 ? [429, "rateLimitExceeded"] : [503, "backendError"];
      return send(code, () =>
        this.error(res, code, reason, code === 429 ? "Rate Limit Exceeded" : "Backend Error", { "retry-after": "0" }),
      );
    }
    if (!this.authorized(req))
      return send(401, () =>
        this.error(
          res,
          401,
          "authError",
          "Request had invalid authentication credentials. Expected OAuth 2 access token, login cookie or other valid authentication credential.",
        ),
      );
    const m = /^\/compute\/v1\/projects\/([^/]+)\/zones\/([^/]+)\/(instances|operations)\/([^/]+)(?:\/(stop|start))?$/.exec(url.pathname);
    if (!m) return send(404, () => this.error(res, 404, "notFound", `The requested URL ${url.pathname} was not found.`));
    const [, project, zone, collection, name, verb] = m as unknown as [string, string, string, string, string, string | undefined];
    const base = `${this.endpoint}/compute/v1/projects/${project}/zones/${zone}`;
    if (collection === "operations") {
      const op = this.ops.get(name);
      if (!op || req.method !== "GET") return send(404, () => this.error(res, 404, "notFound", `The resource '${name}' was not found`));
      return send(200, () => json(res, 200, this.operation(op, base)));
    }
    const key = `${project}/${zone}/${name}`;
    const machine = this.instances.get(key);
    if (machine === undefined)
      return send(404, () =>
        this.error(res, 404, "notFound", `The resource 'projects/${project}/zones/${zone}/instances/${name}' was not found`),
      );
    if (req.method === "GET" && !verb) {
      const status = this.status(project, zone, name);
      return send(200, () =>
        json(res, 200, {
          kind: "compute#instance",
          id: String(hash(key)),
          name,
          zone: `${base}`,
          status,
          selfLink: `${base}/instances/${name}`,
        }),
      );
    }
    if (req.method === "POST" && verb) {
      const op: Op = {
        id: String(Date.now()) + randomBytes(2).toString("hex"),
        name: `operation-${Date.now()}-${randomBytes(6).toString("hex")}`,
        project,
        zone,
        type: verb as "stop" | "start",
        target: `${base}/instances/${name}`,
        done: false,
        insertTime: new Date().toISOString(),
      };
      this.ops.set(op.name, op);
      this.busy.set(key, op.type);
      void this.opts.power
        .set(machine, verb === "stop" ? "off" : "on")
        .catch(() => undefined)
        .finally(() => {
          this.busy.delete(key);
          op.done = true;
        });
      return send(200, () => json(res, 200, this.operation(op, base)));
    }
    return send(400, () => this.error(res, 400, "badRequest", `unsupported ${req.method} ${url.pathname}`));
  }

  private operation(op: Op, base: string) {
    return {
      kind: "compute#operation",
      id: op.id,
      name: op.name,
      zone: base,
      operationType: op.type,
      targetLink: op.target,
      status: op.done ? "DONE" : "RUNNING",
      progress: op.done ? 100 : 0,
      insertTime: op.insertTime,
      selfLink: `${base}/operations/${op.name}`,
    };
  }

  /** The metadata server's few answers ADC needs (plain HTTP, Metadata-Flavor: Google both ways). */
  private serveMetadata(req: IncomingMessage, res: ServerResponse): void {
    const url = new URL(req.url ?? "/", "http://metadata");
    const flavor = { "metadata-flavor": "Google" };
    if (req.headers["metadata-flavor"] !== "Google") {
      res.writeHead(403, flavor);
      return void res.end("Missing Metadata-Flavor:Google header");
    }
    const text = (s: string, type = "application/text") => {
      res.writeHead(200, { ...flavor, "content-type": type });
      res.end(s);
    };
    switch (url.pathname) {
      case "/":
      case "/computeMetadata/v1/instance":
      case "/computeMetadata/v1/instance/":
        return text("attributes/\nhostname\nid\nservice-accounts/\nzone\n");
      case "/computeMetadata/v1/project/project-id":
        return text("lab-project");
      case "/computeMetadata/v1/universe/universe-domain":
        return text("googleapis.com");
      case "/computeMetadata/v1/instance/service-accounts/default/email":
        return text("fencer@lab-project.iam.gserviceaccount.com");
      case "/computeMetadata/v1/instance/service-accounts/default/token": {
        const token = `ya29.stub-${randomBytes(24).toString("base64url")}`;
        this.tokens.add(token);
        return text(JSON.stringify({ access_token: token, expires_in: 3599, token_type: "Bearer" }), "application/json");
      }
    }
    res.writeHead(404, flavor);
    res.end("not found");
  }
}

function hash(s: string): number {
  let h = 7;
  for (const c of s) h = (h * 31 + c.charCodeAt(0)) >>> 0;
  return h;
}
