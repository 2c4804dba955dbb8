// TEST DOUBLE, NOT A REAL PEER. No Azure compute emulator installs here (azurite is Storage only), so this is a
// loopback stub of the parts of the public Azure REST reference the azure agent uses, driven only through the
// official SDKs (@azure/arm-compute, @azure/identity):
//   Microsoft Entra ID (as authorityHost): GET /{tenant}/v2.0/.well-known/openid-configuration and
//     POST /{tenant}/oauth2/v2.0/token (client_credentials with client_secret, or with a client_assertion as Azure
//     Workload Identity sends the pod's projected token); wrong secret → 401 invalid_client (AADSTS7000215).
//   ARM: POST .../virtualMachines/{vm}/powerOff|deallocate|start → 202 with Azure-AsyncOperation and Location
//     headers; GET those (operations/{id}: InProgress → Succeeded; operationResults/{id}: 202 → 200);
//     GET .../virtualMachines/{vm}/instanceView → statuses with ProvisioningState/* and PowerState/*; the same
//     under .../virtualMachineScaleSets/{ss}/virtualMachines/{id}; ARM error bodies ({"error": {"code", "message"}}).
// A VM's power is a machine's power (lab/test-doubles/power.ts): powerOff powers the lab node off through its BMC.
// Not reproduced: RBAC (any token may do anything), the real operation latency (tens of seconds), token
// signatures and claims (tokens are opaque strings the stub issued), the Workload Identity token's validation
// (any assertion the test registers is accepted), api-version checks, throttling headers (x-ms-ratelimit-*).
import { createServer, type Server } from "node:https";
import type { IncomingMessage, ServerResponse } from "node:http";
import { randomBytes, randomUUID } from "node:crypto";
import { readFileSync } from "node:fs";
import { json, newFaults, readBody, type Faults, type Logged, type PowerBackend } from "./power.ts";

export interface ArmStubOptions {
  cert: string;
  key: string;
  power: PowerBackend;
}

interface Op {
  id: string;
  done: boolean;
  start: string;
}

const VM =
  /^\/subscriptions\/([^/]+)\/resourcegroups\/([^/]+)\/providers\/microsoft\.compute\/(virtualmachines\/[^/]+|virtualmachinescalesets\/[^/]+\/virtualmachines\/[^/]+)(?:\/(powerOff|deallocate|start|instanceView))?$/i;
const OPS = /^\/subscriptions\/([^/]+)\/providers\/microsoft\.compute\/locations\/([^/]+)\/(operations|operationResults)\/([^/]+)$/i;

export class ArmStub {
  readonly faults: Faults = newFaults();
  readonly log: Logged[] = [];
  private throttled = 0;
  readonly tenant = randomUUID();
  /** lower-cased resource id → machine. */
  private readonly vms = new Map<string, string>();
  private readonly state = new Map<string, { busy?: "stopping" | "deallocating" | "starting"; deallocated?: boolean }>();
  private readonly ops = new Map<string, Op>();
  private readonly secrets = new Map<string, string>(); // clientId → secret
  private readonly assertions = new Map<string, string>(); // clientId → workload identity token
  private readonly tokens = new Set<string>();
  private server!: Server;
  private readonly opts: ArmStubOptions;
  endpoint = "";

  constructor(opts: ArmStubOptions) {
    this.opts = opts;
  }

  async start(): Promise<this> {
    this.server = createServer(
      { cert: readFileSync(this.opts.cert), key: readFileSync(this.opts.key) },
      (req, res) => void this.serve(req, res),
    );
    await new Promise<void>((r) => this.server.listen(0, "127.0.0.1", r));
    this.endpoint = `https://127.0.0.1:${(this.server.address() as { port: number }).port}`;
    return this;
  }

  async stop(): Promise<void> {
    this.server.closeAllConnections();
    await new Promise((r) => this.server.close(r));
  }

  /** Registers a VM (or, with scaleSet, a scale-set instance) and returns its providerID. */
  addVm(subscription: string, resourceGroup: string, name: string, machine: string, scaleSet?: string): string {
    const path = scaleSet
      ? `/subscriptions/${subscription}/resourceGroups/${resourceGroup}/providers/Microsoft.Compute/virtualMachineScaleSets/${scaleSet}/virtualMachines/${name}`
      : `/subscriptions/${subscription}/resourceGroups/${resourceGroup}/providers/Microsoft.Compute/virtualMachines/${name}`;
    this.vms.set(path.toLowerCase(), machine);
    return `azure://${path}`;
  }

  removeVm(providerID: string): void {
    this.vms.delete(providerID.replace(/^azure:\/\//, "").toLowerCase());
  }

  /** A service principal the token endpoint accepts. */
  servicePrincipal(): { tenantId: string; clientId: string; clientSecret: string } {
    const clientId = randomUUID();
    const clientSecret = `stub~${randomBytes(18).toString("base64url")}`;
    this.secrets.set(clientId, clientSecret);
    return { tenantId: this.tenant, clientId, clientSecret };
  }

  /** A workload identity: the client id and the (projected service account) token the pod would present. */
  workloadIdentity(): { tenantId: string; clientId: string; token: string } {
    const clientId = randomUUID();
    const token = `eyJ.stub-sa-token.${randomBytes(18).toString("base64url")}`;
    this.assertions.set(clientId, token);
    return { tenantId: this.tenant, clientId, token };
  }

  powerState(id: string): string | undefined {
    const m = this.vms.get(id);
    if (m === undefined) return undefined;
    const s = this.state.get(id) ?? {};
    if (s.busy) return s.busy;
    const p = this.opts.power.power(m);
    return p === "on" ? "running" : p === "off" ? (s.deallocated ? "deallocated" : "stopped") : undefined;
  }

  private armError(res: ServerResponse, status: number, code: string, message: string, headers: Record<string, string> = {}) {
    json(res, status, { error: { code, message } }, { "x-ms-request-id": randomUUID(), ...headers });
  }

  private async serve(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const url = new URL(req.url ?? "/", "https://stub");
    const body = await readBody(req);
    const entry: Logged = { method: req.method ?? "", path: url.pathname, query: Object.fromEntries(url.searchParams), status: 0 };
    this.log.push(entry);
    const send = (status: number, f: () => void) => {
      entry.status = status;
      f();
    };
    // Microsoft Entra ID.
    const aad = /^\/([^/]+)\/(v2\.0\/\.well-known\/openid-configuration|oauth2\/v2\.0\/token)$/.exec(url.pathname);
    if (aad) {
      const [, tenant, what] = aad as unknown as [string, string, string];
      if (tenant !== this.tenant)
        return send(400, () =>
          json(res, 400, {
            error: "invalid_tenant",
            error_description: `AADSTS90002: Tenant '${tenant}' not found.`,
            error_codes: [90002],
          }),
        );
      const base = `${this.endpoint}/${tenant}`;
      if (what.startsWith("v2.0"))
        return send(200, () =>
          json(res, 200, {
            token_endpoint: `${base}/oauth2/v2.0/token`,
            authorization_endpoint: `${base}/oauth2/v2.0/authorize`,
            issuer: `${base}/v2.0`,
            jwks_uri: `${base}/discovery/v2.0/keys`,
            end_session_endpoint: `${base}/oauth2/v2.0/logout`,
            response_types_supported: ["code", "id_token", "code id_token", "id_token token"],
            token_endpoint_auth_methods_supported: ["client_secret_post", "private_key_jwt", "client_secret_basic"],
          }),
        );
      const form = new URLSearchParams(body);
      const clientId = form.get("client_id") ?? "";
      const ok =
        form.get("grant_type") === "client_credentials" &&
        ((this.secrets.has(clientId) && this.secrets.get(clientId) === form.get("client_secret")) ||
          (this.assertions.has(clientId) && this.assertions.get(clientId) === form.get("client_assertion")));
      if (!ok)
        return send(401, () =>
          json(res, 401, {
            error: "invalid_client",
            error_description: `AADSTS7000215: Invalid client secret provided. Ensure the secret being sent in the request is the client secret value, not the client secret ID, for a secret added to app '${clientId}'.`,
            error_codes: [7000215],
          }),
        );
      const token = `stub-arm-${randomBytes(24).toString("base64url")}`;
      this.tokens.add(token);
      return send(200, () => json(res, 200, { token_type: "Bearer", expires_in: 3599, ext_expires_in: 3599, access_token: token }));
    }
    // Azure Resource Manager.
    if (this.faults.hang) return;
    if (this.faults.throttle > 0) {
      this.faults.throttle--;
      const n = this.throttled++;
      return n % 2 === 0
        ? send(429, () => this.armError(res, 429, "TooManyRequests", "The request is being throttled.", { "retry-after": "0" }))
        : send(503, () => this.armError(res, 503, "ServiceUnavailable", "The service is unavailable.", { "retry-after": "0" }));
    }
    const token = /^Bearer (.+)$/.exec(req.headers.authorization ?? "")?.[1];
    if (!token || !this.tokens.has(token))
      return send(401, () =>
        this.armError(res, 401, "InvalidAuthenticationToken", "The access token is invalid.", {
          "www-authenticate": `Bearer authorization_uri="${this.endpoint}/${this.tenant}", error="invalid_token"`,
        }),
      );
    const o = OPS.exec(url.pathname);
    if (o) {
      const [, , , kind, id] = o as unknown as [string, string, string, string, string];
      const op = this.ops.get(id);
      if (!op) return send(404, () => this.armError(res, 404, "NotFound", `operation ${id} not found`));
      if (kind.toLowerCase() === "operations")
        return send(200, () =>
          json(res, 200, {
            name: op.id,
            status: op.done ? "Succeeded" : "InProgress",
            startTime: op.start,
            ...(op.done ? { endTime: new Date().toISOString() } : {}),
          }),
        );
      return op.done
        ? send(200, () => json(res, 200, undefined))
        : send(202, () => json(res, 202, undefined, { "retry-after": "1", location: this.opUrl("operationResults", op.id, url) }));
    }
    const m = VM.exec(url.pathname);
    if (!m) return send(404, () => this.armError(res, 404, "InvalidResourceType", `no route for ${url.pathname}`));
    const [, sub, rg, , action] = m as unknown as [string, string, string, string, string | undefined];
    const id = url.pathname.replace(/\/(powerOff|deallocate|start|instanceView)$/i, "").toLowerCase();
    const machine = this.vms.get(id);
    // ARM names what is missing: the resource group (ResourceGroupNotFound) before the VM in it (ResourceNotFound).
    const group = `/subscriptions/${sub}/resourcegroups/${rg}/`.toLowerCase();
    if (machine === undefined && ![...this.vms.keys()].some((k) => k.startsWith(group)))
      return send(404, () => this.armError(res, 404, "ResourceGroupNotFound", `Resource group '${rg}' could not be found.`));
    if (machine === undefined)
      return send(404, () =>
        this.armError(
          res,
          404,
          "ResourceNotFound",
          `The Resource '${id.split("/providers/")[1]}' under resource group '${rg}' was not found.`,
        ),
      );
    const act = action?.toLowerCase();
    if (req.method === "GET" && act === "instanceview") {
      const p = this.powerState(id);
      return send(200, () =>
        json(res, 200, {
          computerName: machine,
          statuses: [
            { code: "ProvisioningState/succeeded", level: "Info", displayStatus: "Provisioning succeeded" },
            ...(p ? [{ code: `PowerState/${p}`, level: "Info", displayStatus: `VM ${p}` }] : []),
          ],
        }),
      );
    }
    if (req.method === "POST" && act && act !== "instanceview") {
      const s = this.state.get(id) ?? {};
      this.state.set(id, s);
      s.busy = act === "start" ? "starting" : act === "deallocate" ? "deallocating" : "stopping";
      const op: Op = { id: randomUUID(), done: false, start: new Date().toISOString() };
      this.ops.set(op.id, op);
      void this.opts.power
        .set(machine, act === "start" ? "on" : "off")
        .catch(() => undefined)
        .finally(() => {
          s.deallocated = act === "deallocate";
          s.busy = undefined;
          op.done = true;
        });
      void sub;
      return send(202, () =>
        json(res, 202, undefined, {
          "azure-asyncoperation": this.opUrl("operations", op.id, url),
          location: this.opUrl("operationResults", op.id, url),
          "retry-after": "1",
          "x-ms-request-id": randomUUID(),
        }),
      );
    }
    return send(405, () => this.armError(res, 405, "MethodNotAllowed", `unsupported ${req.method} ${url.pathname}`));
  }

  private opUrl(kind: string, id: string, req: URL): string {
    const sub = /^\/subscriptions\/([^/]+)/i.exec(req.pathname)?.[1] ?? "unknown";
    return `${this.endpoint}/subscriptions/${sub}/providers/Microsoft.Compute/locations/westeurope/${kind}/${id}?p=stub&api-version=${req.searchParams.get("api-version") ?? "2025-04-01"}`;
  }
}
