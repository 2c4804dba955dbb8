// The aws agent's test peer: moto's EC2 endpoint (Debian trixie's python3-moto, tools/moto.sh), an implementation
// of the EC2 API nobody here wrote, run on loopback with IAM authentication on: moto checks every request's SigV4
// signature and access key (a wrong secret is refused with AuthFailure by moto itself) and the calling user's IAM
// policy actions. Not its Resource or Condition parts: moto matches Resource against "*" and ignores Conditions,
// so the fencer user gets the example policy's actions with Resource "*" (the tag condition is not exercised here).
//
// Moto's instances are not lab machines, so the lab puts glue in front of it, Ec2PowerGlue: an HTTP proxy that
// forwards every request unchanged (the signature covers the Host header, which it keeps) and, once moto has
// accepted a StopInstances or TerminateInstances, powers the lab machine off through the lab's own power path
// (machine.ts setPower, as the simulated BMCs do: a real node's processes all die) before answering; after
// StartInstances it powers the machine on. Requests are served one at a time, so a DescribeInstances never sees
// "stopped" while the machine still runs. The glue also injects the faults moto has no switch for: throttling
// (HTTP 503 RequestLimitExceeded, EC2's throttling answer) and an API that never answers.
import { createServer, request as httpRequest, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import { existsSync, mkdirSync } from "node:fs";
import { homedir } from "node:os";
import { join } from "node:path";
import { execFile } from "node:child_process";
import { promisify } from "node:util";
import { DescribeInstancesCommand, EC2Client, RunInstancesCommand } from "@aws-sdk/client-ec2";
import { freeTcpPort } from "./ports.ts";
import { startDetached, stop, type ProcRef } from "./processes.ts";
import { waitFor } from "./health.ts";
import { setPower } from "./machine.ts";
import { repoRoot } from "./bins.ts";
import type { LabState } from "./state.ts";

const run = promisify(execFile);
/** tools/moto.sh's version: the cache directory's key. */
export const MOTO_VERSION = "5.1.1-4";
export const MOTO_DIR = join(process.env.XDG_CACHE_HOME ?? join(homedir(), ".cache"), "stockade", `moto-${MOTO_VERSION}`);
export const MOTO_PYTHONPATH = join(MOTO_DIR, "usr/lib/python3/dist-packages");
/** Debian's Python (bookworm's boto3 and moto's dependencies are installed for it), never a pyenv or venv one. */
export const PYTHON = "/usr/bin/python3";
export const REGION = "us-east-1";
export const ZONE = "us-east-1a";
export const CLUSTER_TAG = "kubernetes.io/cluster/lab";
/** The least-privilege policy the docs give users; moto enforces its actions on the fencer's key. */
export const POLICY_FILE = join(repoRoot, "manifests/examples/cloud-iam/aws-fencing-policy.json");

export interface AwsKey {
  accessKeyId: string;
  secretAccessKey: string;
}

// Moto's IAM checks start after this many unauthenticated actions: the bootstrap below makes exactly these three
// (CreateUser, PutUserPolicy, CreateAccessKey of the admin user); every later request must be signed by a known key.
const BOOTSTRAP_ACTIONS = 3;
const BOOTSTRAP = String.raw`
import boto3, json, sys
url, policy_file = sys.argv[1], sys.argv[2]
def iam(key, secret):
    return boto3.client("iam", region_name="us-east-1", endpoint_url=url, aws_access_key_id=key, aws_secret_access_key=secret)
anon = iam("bootstrap", "bootstrap")
anon.create_user(UserName="lab-admin")
anon.put_user_policy(UserName="lab-admin", PolicyName="all", PolicyDocument=json.dumps(
    {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}))
a = anon.create_access_key(UserName="lab-admin")["AccessKey"]
admin = iam(a["AccessKeyId"], a["SecretAccessKey"])
admin.create_user(UserName="stockade-fencer")
# Moto matches a statement's Resource against "*" and ignores Conditions: the lab keeps the example's actions only.
policy = json.load(open(policy_file))
for s in policy["Statement"]:
    s["Resource"] = "*"
    s.pop("Condition", None)
admin.put_user_policy(UserName="stockade-fencer", PolicyName="fencing", PolicyDocument=json.dumps(policy))
f = admin.create_access_key(UserName="stockade-fencer")["AccessKey"]
print(json.dumps({"admin": {"accessKeyId": a["AccessKeyId"], "secretAccessKey": a["SecretAccessKey"]},
                  "fencer": {"accessKeyId": f["AccessKeyId"], "secretAccessKey": f["SecretAccessKey"]}}))
`;

/** What the glue saw: each EC2 action, the instances it named, and what was answered. */
export interface GlueCall {
  action: string;
  instanceIds: string[];
  status: number;
  /** "moto" when moto answered, else the fault the glue injected. */
  by: "moto" | "throttled" | "hung";
}

/** Moto (the peer) with the glue in front of it. `url` is the glue's: what clients use. */
export class Ec2Peer {
  readonly motoUrl: string;
  readonly url: string;
  readonly admin: AwsKey;
  /** A user holding only the actions of manifests/examples/cloud-iam/aws-fencing-policy.json (Resource "*": see the header). */
  readonly fencer: AwsKey;
  readonly glue: Ec2PowerGlue;
  private readonly moto: ProcRef;

  private constructor(moto: ProcRef, motoUrl: string, keys: { admin: AwsKey; fencer: AwsKey }, glue: Ec2PowerGlue) {
    this.moto = moto;
    this.motoUrl = motoUrl;
    this.admin = keys.admin;
    this.fencer = keys.fencer;
    this.glue = glue;
    this.url = glue.url;
  }

  /**
   * Starts moto (logs in `dir`), bootstraps IAM with Debian's boto3, and the glue in front of it: on loopback, or on
   * `o.host` (e.g. lab.managementAddress, for agents in pods); moto itself stays on loopback behind the glue.
   */
  static async start(dir: string, o: { host?: string } = {}): Promise<Ec2Peer> {
    if (!existsSync(join(MOTO_PYTHONPATH, "moto/__init__.py")))
      throw new Error(`moto ${MOTO_VERSION} is not in ${MOTO_DIR}: run tools/setup.sh (tools/moto.sh)`);
    mkdirSync(dir, { recursive: true });
    const port = await freeTcpPort();
    const motoUrl = `http://127.0.0.1:${port}`;
    const env = {
      PATH: process.env.PATH,
      HOME: process.env.HOME,
      PYTHONPATH: MOTO_PYTHONPATH,
      INITIAL_NO_AUTH_ACTION_COUNT: String(BOOTSTRAP_ACTIONS),
    };
    const moto = startDetached({
      cmd: PYTHON,
      args: ["-s", join(MOTO_DIR, "usr/bin/moto_server"), "-H", "127.0.0.1", "-p", String(port)],
      logFile: join(dir, "moto.log"),
      env,
    });
    try {
      await waitFor(`moto_server on ${motoUrl}`, async () => (await fetch(`${motoUrl}/moto-api/data.json`)).ok, {
        timeoutMs: 30_000,
        intervalMs: 100,
      });
      const { stdout } = await run(PYTHON, ["-s", "-c", BOOTSTRAP, motoUrl, POLICY_FILE], { env: { ...env, PYTHONPATH: "" } });
      const keys = JSON.parse(stdout) as { admin: AwsKey; fencer: AwsKey };
      const glue = await Ec2PowerGlue.start(motoUrl, o.host);
      return new Ec2Peer(moto, motoUrl, keys, glue);
    } catch (e) {
      await stop(moto, 0);
      throw e;
    }
  }

  client(key: AwsKey = this.admin, url = this.url): EC2Client {
    return new EC2Client({ region: REGION, endpoint: url, credentials: { ...key }, maxAttempts: 1 }); // a copy: the SDK marks the object it is given
  }

  /** One running instance per name, tagged as the lab cluster's; resolves to name -> instance id. */
  async runInstances(names: readonly string[]): Promise<Map<string, string>> {
    const c = this.client(this.admin, this.motoUrl);
    try {
      const out = new Map<string, string>();
      for (const name of names) {
        const r = await c.send(
          new RunInstancesCommand({
            ImageId: "ami-12c6146b", // one of moto's built-in AMIs
            MinCount: 1,
            MaxCount: 1,
            InstanceType: "t3.medium",
            Placement: { AvailabilityZone: ZONE },
            TagSpecifications: [
              {
                ResourceType: "instance",
                Tags: [
                  { Key: "Name", Value: name },
                  { Key: CLUSTER_TAG, Value: "owned" },
                ],
              },
            ],
          }),
        );
        out.set(name, r.Instances![0]!.InstanceId!);
      }
      return out;
    } finally {
      c.destroy();
    }
  }

  /** Moto's own answer for an instance's state (straight to moto, not through the glue). */
  async state(instanceId: string): Promise<string | undefined> {
    const c = this.client(this.admin, this.motoUrl);
    try {
      const r = await c.send(new DescribeInstancesCommand({ InstanceIds: [instanceId] }));
      return r.Reservations?.[0]?.Instances?.[0]?.State?.Name;
    } finally {
      c.destroy();
    }
  }

  static providerID(instanceId: string): string {
    return `aws:///${ZONE}/${instanceId}`;
  }

  async stop(): Promise<void> {
    await this.glue.close();
    await stop(this.moto, 2000);
  }
}

/**
 * The glue between moto and the lab's machines (see the header): a forwarding proxy that ties an instance's
 * stop/terminate/start to the lab machine's real power, and injects throttling and hangs. Not a peer of its own.
 */
export class Ec2PowerGlue {
  readonly url: string;
  readonly calls: GlueCall[] = [];
  /** Answer this many further requests with 503 RequestLimitExceeded, as EC2 throttles. */
  throttle = 0;
  /** Never answer (the connection stays open until the client gives up). */
  hang = false;
  private lab: LabState | undefined;
  private readonly machines = new Map<string, string>();
  private queue: Promise<unknown> = Promise.resolve();
  private readonly server: Server;
  private readonly motoUrl: string;
  private readonly hung = new Set<ServerResponse>();

  private constructor(server: Server, url: string, motoUrl: string) {
    this.server = server;
    this.url = url;
    this.motoUrl = motoUrl;
  }

  static async start(motoUrl: string, host = "127.0.0.1"): Promise<Ec2PowerGlue> {
    const server = createServer();
    await new Promise<void>((r) => server.listen(0, host, () => r()));
    const glue = new Ec2PowerGlue(server, `http://${host}:${(server.address() as { port: number }).port}`, motoUrl);
    server.on("request", (req, res) => void glue.handle(req, res));
    return glue;
  }

  /** Ties each instance to the lab machine of that name: from here, stopping the instance powers the machine off. */
  attach(lab: LabState, instances: ReadonlyMap<string, string>): void {
    this.lab = lab;
    for (const [node, id] of instances) this.machines.set(id, node);
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    const body = Buffer.concat(chunks);
    const form = new URLSearchParams(body.toString("utf8"));
    const action = form.get("Action") ?? "";
    const instanceIds = [...form.entries()].filter(([k]) => /^InstanceId\.\d+$/.test(k)).map(([, v]) => v);
    if (this.hang) {
      this.hung.add(res);
      res.on("close", () => this.hung.delete(res));
      this.calls.push({ action, instanceIds, status: 0, by: "hung" });
      return;
    }
    if (this.throttle > 0) {
      this.throttle--;
      this.calls.push({ action, instanceIds, status: 503, by: "throttled" });
      res.writeHead(503, { "content-type": "text/xml" });
      res.end(
        `<?xml version="1.0" encoding="UTF-8"?>\n<Response><Errors><Error><Code>RequestLimitExceeded</Code><Message>Request limit exceeded.</Message></Error></Errors><RequestID>${crypto.randomUUID()}</RequestID></Response>`,
      );
      return;
    }
    // One request at a time: a power change completes before the next request (a DescribeInstances) is answered.
    const turn = this.queue.then(() => this.forward(req, body, action, instanceIds, res));
    this.queue = turn.catch(() => undefined);
    await turn.catch((e) => {
      if (!res.headersSent) res.writeHead(502, { "content-type": "text/plain" });
      res.end(`lab EC2 glue: ${(e as Error).message}`);
    });
  }

  private async forward(req: IncomingMessage, body: Buffer, action: string, ids: string[], res: ServerResponse): Promise<void> {
    const answer = await new Promise<{ status: number; headers: IncomingMessage["headers"]; body: Buffer }>((resolve, reject) => {
      const u = new URL(this.motoUrl);
      const out = httpRequest({ host: u.hostname, port: u.port, method: req.method, path: req.url, headers: req.headers }, (r) => {
        const parts: Buffer[] = [];
        r.on("data", (c: Buffer) => parts.push(c));
        r.on("end", () => resolve({ status: r.statusCode ?? 0, headers: r.headers, body: Buffer.concat(parts) }));
        r.on("error", reject);
      });
      out.on("error", reject);
      out.end(body);
    });
    // Only what moto accepted changes a machine: a refused key never powers anything off.
    if (answer.status === 200 && this.lab) {
      const power = action === "StopInstances" || action === "TerminateInstances" ? "off" : action === "StartInstances" ? "on" : undefined;
      if (power)
        for (const id of ids) {
          const node = this.machines.get(id);
          if (node) await setPower(this.lab, node, power, "ec2");
        }
    }
    this.calls.push({ action, instanceIds: ids, status: answer.status, by: "moto" });
    const headers = { ...answer.headers };
    delete headers["transfer-encoding"];
    headers["content-length"] = String(answer.body.length);
    res.writeHead(answer.status, headers);
    res.end(answer.body);
  }

  async close(): Promise<void> {
    for (const r of this.hung) r.destroy();
    this.server.closeAllConnections();
    await new Promise<void>((r) => this.server.close(() => r()));
  }
}
