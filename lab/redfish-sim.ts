// TEST DOUBLE: the lab's own Redfish BMC simulator, one per lab node, written for Stockade's tests (no Redfish
// emulator installs on this machine; the independent Go emulator, tools/redfish-mock/, checks no credentials and
// speaks plain HTTP). Its power IS the lab machine's power: Reset goes through machine.ts setPower, the path the
// lab's IPMI BMCs take (lab/bmc-hook.ts), so ForceOff kills every process of the node.
//
// It speaks the Redfish wire protocol (DSP0266) as far as fencing needs it, checked against Debian's
// fence_redfish, redfishtool and python3-sushy (test/lab/redfish-sim.test.ts): HTTPS with a certificate from
// the lab CA, service root, a Systems collection of one ComputerSystem, SessionService sessions (X-Auth-Token)
// and Basic auth, ComputerSystem.Reset with ResetType@Redfish.AllowableValues, PowerState. Modes a test switches:
//   normal          Reset answers 204; the power changes right after (PowerState PoweringOff until it has).
//   task            Reset answers 202 with a task monitor (Location) that answers 202 until the power changed.
//   task-exception  Reset answers 202; the task ends in TaskState Exception and the power is not touched.
//   wrong-password  every authenticated request (and every login) answers 401, as if the password had changed.
//   hang            the connection is accepted and the request never answered.
//   impostor        (cert) a self-signed certificate for the same address: no CA the lab trusts signed it.
import { createServer, type Server } from "node:https";
import type { IncomingMessage, ServerResponse } from "node:http";
import type { Socket } from "node:net";
import { randomBytes, randomUUID, timingSafeEqual } from "node:crypto";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { machineStatus, setPower } from "./machine.ts";
import { selfSignedCert, signServerCert } from "./pki.ts";
import { paths, type LabState } from "./state.ts";

export type RedfishSimMode = "normal" | "task" | "task-exception" | "wrong-password" | "hang";

export const RESET_TYPES = ["On", "ForceOff", "ForceRestart", "GracefulShutdown", "PushPowerButton", "Nmi"] as const;
const SYSTEM_ID = "1";
const SYS = `/redfish/v1/Systems/${SYSTEM_ID}`;

export interface RedfishRequest {
  method: string;
  path: string;
  status: number | "hung";
  auth: "basic" | "session" | "none";
  resetType?: string;
}

interface Task {
  id: string;
  done: boolean;
  state: "Running" | "Completed" | "Exception";
  message: string;
}

export class RedfishSimulator {
  readonly node: string;
  readonly username = "fence";
  readonly password = randomBytes(12).toString("base64url");
  /** The lab CA's certificate (PEM): what a client verifies this BMC with. */
  readonly caBundle: string;
  mode: RedfishSimMode = "normal";
  readonly requests: RedfishRequest[] = [];
  private readonly s: LabState;
  private readonly server: Server;
  private readonly certs: { lab: { cert: string; key: string }; impostor: { cert: string; key: string } };
  private readonly sessions = new Map<string, string>(); // token -> session id
  private readonly tasks = new Map<string, Task>();
  private readonly sockets = new Set<Socket>();
  private powering: "off" | "on" | undefined;
  private pendingOn = false;
  private chain: Promise<void> = Promise.resolve();
  port = 0;
  /** Where it listens: loopback, or the lab's management address (reachable from pods). */
  readonly address: string;

  private constructor(s: LabState, node: string, host: string) {
    this.s = s;
    this.node = node;
    this.address = host;
    const pki = paths(s.dir).pki;
    this.caBundle = readFileSync(join(pki, "ca.crt"), "utf8");
    // One certificate per address (each is made once): loopback's keeps its old name.
    const stem = host === "127.0.0.1" ? `redfish-${node}` : `redfish-${node}-${host}`;
    const san = `IP:127.0.0.1,DNS:localhost${host === "127.0.0.1" ? "" : `,IP:${host}`}`;
    this.certs = {
      lab: signServerCert(pki, stem, san),
      impostor: selfSignedCert(join(pki, "impostor"), stem, san),
    };
    this.server = createServer(this.tlsOptions("lab"), (req, res) => void this.handle(req, res));
    // A hung BMC holds the request forever: no server-side timeout may answer for it.
    this.server.requestTimeout = 0;
    this.server.headersTimeout = 0;
    this.server.on("connection", (sock: Socket) => {
      this.sockets.add(sock);
      sock.on("close", () => this.sockets.delete(sock));
    });
  }

  /** Starts the simulator of `node` on a free port of loopback, or of `o.host` (e.g. lab.managementAddress). */
  static async start(s: LabState, node: string, o: { host?: string } = {}): Promise<RedfishSimulator> {
    const sim = new RedfishSimulator(s, node, o.host ?? "127.0.0.1");
    await new Promise<void>((resolve, reject) => {
      sim.server.once("error", reject);
      sim.server.listen(0, sim.address, () => resolve());
    });
    sim.port = (sim.server.address() as { port: number }).port;
    return sim;
  }

  /** Which certificate new connections get: the lab CA's, or an impostor's. */
  useCertificate(which: "lab" | "impostor"): void {
    this.server.setSecureContext(this.tlsOptions(which));
  }

  /** Power changes finished (the last Reset's effect is complete). */
  settled(): Promise<void> {
    return this.chain;
  }

  async stop(): Promise<void> {
    for (const sock of this.sockets) sock.destroy();
    await new Promise<void>((r) => this.server.close(() => r()));
    await this.chain;
  }

  private tlsOptions(which: "lab" | "impostor") {
    return { cert: readFileSync(this.certs[which].cert), key: readFileSync(this.certs[which].key) };
  }

  private powerState(): string {
    if (this.powering === "off") return "PoweringOff";
    if (this.pendingOn) return "On"; // like the lab's IPMI BMC: on at once after "on", while the machine boots
    return machineStatus(this.s, this.node).power === "off" ? "Off" : "On";
  }

  /** Reset's effect, in order with earlier ones (like a BMC's single power controller). */
  private reset(type: string): Promise<void> {
    const action =
      type === "ForceOff" || type === "GracefulShutdown" ? "off" : type === "ForceRestart" ? "cycle" : type === "Nmi" ? undefined : "on";
    if (!action) return Promise.resolve();
    if (action === "off") this.powering = "off";
    if (action === "on") this.pendingOn = true;
    const next = this.chain.then(async () => {
      try {
        await setPower(this.s, this.node, action, "redfish");
      } finally {
        if (action === "off") this.powering = undefined;
        if (action === "on") this.pendingOn = false;
      }
    });
    this.chain = next.catch(() => undefined);
    return next;
  }

  private authOf(req: IncomingMessage): "basic" | "session" | "none" {
    if (typeof req.headers["x-auth-token"] === "string") return "session";
    if (/^Basic /i.test(req.headers.authorization ?? "")) return "basic";
    return "none";
  }

  private authorized(req: IncomingMessage): boolean {
    if (this.mode === "wrong-password") return false;
    const token = req.headers["x-auth-token"];
    if (typeof token === "string") return this.sessions.has(token);
    const m = /^Basic (.+)$/i.exec(req.headers.authorization ?? "");
    if (!m) return false;
    const [u, ...rest] = Buffer.from(m[1]!, "base64").toString("utf8").split(":");
    return u === this.username && same(rest.join(":"), this.password);
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const url = new URL(req.url ?? "/", "https://bmc");
    const path = url.pathname.replace(/\/+$/, "") || "/";
    const record: RedfishRequest = { method: req.method ?? "", path, status: 0, auth: this.authOf(req) };
    this.requests.push(record);
    if (this.mode === "hang") {
      record.status = "hung";
      return; // the socket stays open; stop() destroys it
    }
    const raw = await readBody(req);
    const send = (status: number, body?: unknown, headers: Record<string, string> = {}) => {
      record.status = status;
      const text = body === undefined ? "" : JSON.stringify(body);
      res.writeHead(status, {
        "OData-Version": "4.0",
        ...(text ? { "Content-Type": "application/json; charset=utf-8" } : {}),
        ...headers,
      });
      res.end(text);
    };
    const error = (status: number, id: string, message: string) =>
      send(status, {
        error: {
          code: `Base.1.8.${id}`,
          message,
          "@Message.ExtendedInfo": [{ MessageId: `Base.1.8.${id}`, Message: message, Severity: "Critical" }],
        },
      });

    // Public: the service root and the $metadata-free odata document (DSP0266 §13.1: no authentication).
    if (req.method === "GET" && (path === "/redfish" || path === "/redfish/v1")) {
      if (path === "/redfish") return send(200, { v1: "/redfish/v1/" });
      return send(200, serviceRoot());
    }
    if (req.method === "POST" && path === "/redfish/v1/SessionService/Sessions") {
      let body: { UserName?: unknown; Password?: unknown };
      try {
        body = JSON.parse(raw) as typeof body;
      } catch {
        return error(
          400,
          "MalformedJSON",
          "The request body submitted was malformed JSON and could not be parsed by the receiving service.",
        );
      }
      if (
        this.mode === "wrong-password" ||
        body.UserName !== this.username ||
        typeof body.Password !== "string" ||
        !same(body.Password, this.password)
      )
        return error(
          401,
          "InsufficientPrivilege",
          "There are insufficient privileges for the account or credentials associated with the current session to perform the requested operation.",
        );
      const id = randomUUID();
      const token = randomBytes(24).toString("hex");
      this.sessions.set(token, id);
      const location = `/redfish/v1/SessionService/Sessions/${id}`;
      return send(201, session(id, this.username), { "X-Auth-Token": token, Location: location });
    }
    if (!this.authorized(req)) {
      res.setHeader("WWW-Authenticate", 'Basic realm="Redfish"');
      return error(
        401,
        "InsufficientPrivilege",
        "There are insufficient privileges for the account or credentials associated with the current session to perform the requested operation.",
      );
    }

    if (req.method === "GET") {
      if (path === "/redfish/v1/Systems")
        return send(
          200,
          collection("/redfish/v1/Systems", "#ComputerSystemCollection.ComputerSystemCollection", "Computer System Collection", [SYS]),
        );
      if (path === SYS) return send(200, system(this.node, this.powerState()));
      if (path === `${SYS}/ResetActionInfo`) return send(200, resetActionInfo());
      if (path === "/redfish/v1/SessionService") return send(200, sessionService());
      if (path === "/redfish/v1/SessionService/Sessions")
        return send(
          200,
          collection(
            "/redfish/v1/SessionService/Sessions",
            "#SessionCollection.SessionCollection",
            "Session Collection",
            [...this.sessions.values()].map((id) => `/redfish/v1/SessionService/Sessions/${id}`),
          ),
        );
      const sm = /^\/redfish\/v1\/SessionService\/Sessions\/([^/]+)$/.exec(path);
      if (sm && [...this.sessions.values()].includes(sm[1]!)) return send(200, session(sm[1]!, this.username));
      const tm = /^\/redfish\/v1\/TaskService\/(TaskMonitors|Tasks)\/([^/]+)$/.exec(path);
      const task = tm ? this.tasks.get(tm[2]!) : undefined;
      if (task) {
        // A task monitor answers 202 while the task runs, then the task (DSP0266 §13.2.3); a task resource always the task.
        if (tm![1] === "TaskMonitors" && !task.done)
          return send(202, taskBody(task), { Location: `/redfish/v1/TaskService/TaskMonitors/${task.id}`, "Retry-After": "1" });
        return send(200, taskBody(task));
      }
      return error(404, "ResourceMissingAtURI", `The resource at the URI ${path} was not found.`);
    }
    if (req.method === "DELETE") {
      const sm = /^\/redfish\/v1\/SessionService\/Sessions\/([^/]+)$/.exec(path);
      const token = [...this.sessions.entries()].find(([, id]) => id === sm?.[1])?.[0];
      if (token) {
        this.sessions.delete(token);
        return send(204);
      }
      return error(404, "ResourceMissingAtURI", `The resource at the URI ${path} was not found.`);
    }
    if (req.method === "POST" && path === `${SYS}/Actions/ComputerSystem.Reset`) {
      let resetType: unknown;
      try {
        resetType = (JSON.parse(raw || "{}") as { ResetType?: unknown }).ResetType;
      } catch {
        return error(
          400,
          "MalformedJSON",
          "The request body submitted was malformed JSON and could not be parsed by the receiving service.",
        );
      }
      if (typeof resetType === "string") record.resetType = resetType;
      if (typeof resetType !== "string" || !(RESET_TYPES as readonly string[]).includes(resetType))
        return error(
          400,
          "ActionParameterValueNotInList",
          `The value ${JSON.stringify(resetType ?? null)} for the parameter ResetType in the action ComputerSystem.Reset is not in the list of acceptable values.`,
        );
      if (this.mode === "task" || this.mode === "task-exception") {
        const task: Task = { id: randomUUID(), done: false, state: "Running", message: "" };
        this.tasks.set(task.id, task);
        if (this.mode === "task-exception") {
          setTimeout(() => Object.assign(task, { done: true, state: "Exception", message: "The power controller did not respond." }), 300);
        } else {
          // A BMC's task takes a while even when the power changes at once: its monitor answers 202 for 1 s at least.
          Promise.all([this.reset(resetType), sleep(1000)]).then(
            () => Object.assign(task, { done: true, state: "Completed", message: `ResetType ${resetType} done.` }),
            (e: Error) => Object.assign(task, { done: true, state: "Exception", message: e.message }),
          );
        }
        return send(202, taskBody(task), { Location: `/redfish/v1/TaskService/TaskMonitors/${task.id}` });
      }
      void this.reset(resetType).catch(() => undefined);
      return send(204);
    }
    return error(405, "ActionNotSupported", `The action ${req.method} ${path} is not supported by the resource.`);
  }
}

function same(a: string, b: string): boolean {
  const x = Buffer.from(a);
  const y = Buffer.from(b);
  return x.length === y.length && timingSafeEqual(x, y);
}

function readBody(req: IncomingMessage): Promise<string> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => resolve(Buffer.concat(chunks).toString("utf8")));
    req.on("error", reject);
  });
}

const ref = (id: string) => ({ "@odata.id": id });

function collection(id: string, type: string, name: string, members: string[]) {
  return { "@odata.id": id, "@odata.type": type, Name: name, Members: members.map(ref), "Members@odata.count": members.length };
}

function serviceRoot() {
  return {
    "@odata.id": "/redfish/v1/",
    "@odata.type": "#ServiceRoot.v1_11_0.ServiceRoot",
    Id: "RootService",
    Name: "Stockade lab Redfish simulator (test double)",
    RedfishVersion: "1.11.0",
    UUID: "92384634-2938-2342-8820-489239905423",
    Systems: ref("/redfish/v1/Systems"),
    SessionService: ref("/redfish/v1/SessionService"),
    Links: { Sessions: ref("/redfish/v1/SessionService/Sessions") },
  };
}

function sessionService() {
  return {
    "@odata.id": "/redfish/v1/SessionService",
    "@odata.type": "#SessionService.v1_1_8.SessionService",
    Id: "SessionService",
    Name: "Session Service",
    ServiceEnabled: true,
    SessionTimeout: 600,
    Sessions: ref("/redfish/v1/SessionService/Sessions"),
  };
}

function session(id: string, user: string) {
  return {
    "@odata.id": `/redfish/v1/SessionService/Sessions/${id}`,
    "@odata.type": "#Session.v1_3_0.Session",
    Id: id,
    Name: "User Session",
    UserName: user,
  };
}

function system(node: string, powerState: string) {
  return {
    "@odata.id": SYS,
    "@odata.type": "#ComputerSystem.v1_13_0.ComputerSystem",
    Id: SYSTEM_ID,
    Name: `lab machine of ${node}`,
    SystemType: "Physical",
    Manufacturer: "Stockade lab",
    Model: "redfish-sim",
    SerialNumber: node,
    UUID: "00000000-0000-4000-8000-000000000001",
    PowerState: powerState,
    Status: { State: "Enabled", Health: "OK" },
    Boot: { BootSourceOverrideEnabled: "Disabled", BootSourceOverrideTarget: "None" },
    Actions: {
      "#ComputerSystem.Reset": {
        target: `${SYS}/Actions/ComputerSystem.Reset`,
        "ResetType@Redfish.AllowableValues": [...RESET_TYPES],
        "@Redfish.ActionInfo": `${SYS}/ResetActionInfo`,
      },
    },
  };
}

function resetActionInfo() {
  return {
    "@odata.id": `${SYS}/ResetActionInfo`,
    "@odata.type": "#ActionInfo.v1_1_2.ActionInfo",
    Id: "ResetActionInfo",
    Name: "Reset Action Info",
    Parameters: [{ Name: "ResetType", Required: true, DataType: "String", AllowableValues: [...RESET_TYPES] }],
  };
}

function taskBody(t: Task) {
  return {
    "@odata.id": `/redfish/v1/TaskService/Tasks/${t.id}`,
    "@odata.type": "#Task.v1_4_3.Task",
    Id: t.id,
    Name: "Reset task",
    TaskState: t.state,
    TaskStatus: t.state === "Exception" ? "Critical" : "OK",
    TaskMonitor: `/redfish/v1/TaskService/TaskMonitors/${t.id}`,
    Messages: t.message ? [{ MessageId: t.state === "Exception" ? "Base.1.8.GeneralError" : "Base.1.8.Success", Message: t.message }] : [],
  };
}
