// Amazon EC2 through the official SDK (@aws-sdk/client-ec2): off = StopInstances with Force (or TerminateInstances
// when the FenceAgent asks), on = StartInstances, status = DescribeInstances. The instance is the Node's own
// spec.providerID (aws:///<zone>/<instance-id>), which parameters.ts passes as parameter providerID.
//
// Identity: with no credentials Secret the SDK's default chain runs (IRSA's web identity token, EKS Pod Identity's
// container endpoint, the instance profile): nothing long-lived is stored. A Secret may give accessKeyId and
// secretAccessKey (and sessionToken) instead; they never appear in the spec, and every message is redacted.
//
// One try per call, as every driver: the SDK's own retry (standard mode, 3 attempts) absorbs throttling and 5xx
// within that try, its backoff raced against ctx.signal; run.ts retries on top under the operation's deadline.
import type { EC2Client } from "@aws-sdk/client-ec2";
import type * as Ec2Module from "@aws-sdk/client-ec2";
import { AgentError, type AgentContext, type AgentDriver, type ParameterRules, type PowerState, listVerdict } from "./types.ts";
import { credentialProblem } from "./values.ts";
import { redact } from "./redact.ts";
import { MissingInstanceError, isMissingInstance, statusOrGone } from "./cloud.ts";

/** Also the source of the CRD's allow-list (tools/gen-fence-agent-rules.ts). */
export const AWS_PARAMETERS = ["providerID", "region", "offAction", "endpoint", "accessKeyId", "secretAccessKey", "sessionToken"];
export const AWS_CREDENTIALS = ["accessKeyId", "secretAccessKey", "sessionToken"];
/** Never in the spec: a key id alone grants nothing, but it names an identity and belongs with its secret. */
export const AWS_SECRET_ONLY = AWS_CREDENTIALS;
const OFF_ACTIONS = ["stop", "terminate"];
/** The SDK's attempts per call (standard retry mode's default): throttling and 5xx retried with backoff. */
export const AWS_SDK_ATTEMPTS = 3;
/** Per attempt: a TCP connect that does not complete, or a request with no answer, gives up before the deadline does (then the SDK tries again). */
const CONNECT_TIMEOUT_MS = 3000;
const REQUEST_TIMEOUT_MS = 10_000;

// aws:///<availability-zone>/<instance-id>: what the AWS cloud provider and EKS set. Other forms (Fargate's
// fargate-ip-…, an empty zone, a bare id) name no EC2 instance this agent could stop.
const PROVIDER_ID = /^aws:\/\/\/([a-z0-9-]+)\/(i-[0-9a-f]{8}(?:[0-9a-f]{9})?)$/;
// A region (us-east-1, us-gov-west-1, cn-north-1, us-isob-east-1) then a zone letter (us-east-1a) or a Local
// Zone / Wavelength suffix (us-west-2-lax-1a, us-east-1-wl1-bos-wlz-1).
const REGION = /^[a-z]{2}(?:-[a-z]+)+-\d+$/;
const ZONE = /^([a-z]{2}(?:-[a-z]+)+-\d+)(?:[a-z]|-[a-z0-9-]+)$/;

export interface AwsTarget {
  zone: string;
  instanceId: string;
  region: string;
}

/** The instance a providerID names, or why it names none. */
export function parseProviderID(id: string): { zone: string; instanceId: string } | { error: string } {
  const m = PROVIDER_ID.exec(id);
  if (!m)
    return {
      error:
        `providerID ${JSON.stringify(id)} is not an EC2 instance's (aws:///<availability-zone>/i-<8 or 17 hex digits>, ` +
        `e.g. aws:///us-east-1a/i-0123456789abcdef0): the aws agent can fence only EC2 instances (not Fargate pods)`,
    };
  return { zone: m[1]!, instanceId: m[2]! };
}

/** us-east-1a -> us-east-1; undefined when the zone's name does not contain its region. */
export function regionOfZone(zone: string): string | undefined {
  return ZONE.exec(zone)?.[1];
}

/** The instance and region, or the problems with the parameters that name them. */
function locate(p: Record<string, string>): AwsTarget | { problems: string[] } {
  const problems: string[] = [];
  if (!p.providerID) {
    problems.push(
      "parameter providerID is missing: it defaults to the Node's spec.providerID (aws:///<zone>/<instance-id>), which this node does not have; set it in spec.nodes.<node>.parameters",
    );
    return { problems };
  }
  const id = parseProviderID(p.providerID);
  if ("error" in id) return { problems: [`parameter ${id.error}`] };
  const fromZone = regionOfZone(id.zone);
  if (p.region !== undefined && !REGION.test(p.region))
    problems.push(`parameter region must be an AWS region such as us-east-1, not ${JSON.stringify(p.region)}`);
  else if (p.region && fromZone && p.region !== fromZone)
    problems.push(
      `parameter region ${p.region} disagrees with the providerID's zone ${id.zone} (region ${fromZone}): remove region or fix it`,
    );
  const region = p.region || fromZone;
  if (!region) problems.push(`cannot tell the region from zone ${JSON.stringify(id.zone)}: set parameter region`);
  return problems.length > 0 || !region ? { problems } : { ...id, region };
}

function endpointProblem(v: string): string | undefined {
  let u: URL;
  try {
    u = new URL(v);
  } catch {
    return `parameter endpoint must be a URL such as https://ec2.us-east-1.amazonaws.com, not ${JSON.stringify(v)}`;
  }
  if (u.protocol !== "https:" && u.protocol !== "http:") return `parameter endpoint must be an http(s) URL, not ${JSON.stringify(v)}`;
  if (u.username || u.password || u.search || u.hash) return "parameter endpoint must not contain credentials, a query or a fragment";
  return undefined;
}

function check(p: Record<string, string>): string[] {
  const problems: string[] = [];
  for (const k of Object.keys(p))
    if (!AWS_PARAMETERS.includes(k))
      problems.push(`parameter ${k} is not an aws parameter: aws takes ${AWS_PARAMETERS.join(", ")} (docs/api.md)`);
  const where = locate(p);
  if ("problems" in where) problems.push(...where.problems);
  if (p.offAction !== undefined && !OFF_ACTIONS.includes(p.offAction))
    problems.push(`parameter offAction must be one of ${OFF_ACTIONS.join(", ")}, not ${JSON.stringify(p.offAction)}`);
  if (p.endpoint !== undefined) {
    const e = endpointProblem(p.endpoint);
    if (e) problems.push(e);
  }
  const keyId = p.accessKeyId !== undefined;
  if (keyId !== (p.secretAccessKey !== undefined))
    problems.push(
      "the credentials Secret must hold both accessKeyId and secretAccessKey, or neither (then the SDK's default chain runs: IRSA, EKS Pod Identity, instance profile)",
    );
  if (p.sessionToken !== undefined && !keyId) problems.push("sessionToken needs accessKeyId and secretAccessKey in the same Secret");
  for (const k of AWS_CREDENTIALS) {
    const v = p[k];
    const bad = v === undefined ? undefined : credentialProblem(v);
    if (bad) problems.push(`credential ${k} ${bad}`);
  }
  return problems;
}

/** What the aws type accepts; its target is the instance in its region: one instance is one machine. */
export const awsRules: ParameterRules = {
  subject: "aws",
  verdict: (name) => listVerdict({ parameters: AWS_PARAMETERS, credentials: AWS_CREDENTIALS, secretOnly: AWS_SECRET_ONLY }, name),
  credentials: AWS_CREDENTIALS,
  check,
  target: (p) => {
    const t = locate(p);
    return "problems" in t ? undefined : { device: `aws:${t.region}/${t.instanceId}`, outlets: [] };
  },
  // The instance comes from the Node itself unless the spec says otherwise (parameters.ts renders it).
};

// Error codes of the EC2 API (docs.aws.amazon.com/AWSEC2/latest/APIReference/errors-overview.html).
const AUTH = new Set([
  "AuthFailure",
  "UnauthorizedOperation",
  "InvalidClientTokenId",
  "SignatureDoesNotMatch",
  "ExpiredToken",
  "RequestExpired",
  "AccessDenied",
  "AccessDeniedException",
  "OptInRequired",
  "Blocked",
]);
// InvalidInstanceID.NotFound is this instance missing (cloud.ts MissingInstanceError); Malformed, a bad id.
const NOT_FOUND = new Set(["InvalidInstanceID.NotFound", "InvalidInstanceID.Malformed"]);
const THROTTLED = new Set(["RequestLimitExceeded", "Throttling", "ThrottlingException", "TooManyRequestsException"]);
const NETWORK = new Set(["ECONNREFUSED", "ECONNRESET", "ENOTFOUND", "EAI_AGAIN", "ETIMEDOUT", "EHOSTUNREACH", "ENETUNREACH", "EPIPE"]);

interface SdkError {
  name?: string;
  code?: string;
  message?: string;
  $fault?: "client" | "server";
  $metadata?: { httpStatusCode?: number; attempts?: number };
  cause?: unknown;
}

/** Maps what the SDK threw (after its own retries) to an error kind and a clear message. Pure. */
export function classifyAwsError(e: unknown, where: string, what: string): AgentError {
  const err = (e ?? {}) as SdkError;
  const name = err.name ?? "Error";
  const status = err.$metadata?.httpStatusCode;
  const attempts = err.$metadata?.attempts;
  const tries = attempts && attempts > 1 ? ` after ${attempts} attempts` : "";
  const detail = `${name}${status ? ` (HTTP ${status})` : ""}: ${(err.message ?? String(e)).slice(0, 240)}`;
  const code = err.code ?? (err.cause as SdkError | undefined)?.code;
  if (name === "AbortError") return new AgentError("TimedOut", `${what} on ${where} was aborted at the deadline`);
  if (name === "CredentialsProviderError")
    return new AgentError(
      "Config",
      `no AWS credentials for ${what} on ${where}: give the operator's ServiceAccount an IAM role (IRSA or EKS Pod Identity), or reference a Secret with accessKeyId and secretAccessKey (${detail})`,
    );
  if (AUTH.has(name))
    return new AgentError(
      "AuthFailed",
      `${where} refused ${what}: the credentials are wrong or lack the permission (ec2:StopInstances, ec2:StartInstances, ec2:DescribeInstances${name === "UnauthorizedOperation" ? "; a policy condition may exclude this instance" : ""}) (${detail})`,
    );
  if (NOT_FOUND.has(name)) {
    const message = `${where} does not exist (${name}): check the Node's providerID and the region; a missing instance is not evidence that the machine is off (${detail})`;
    return name === "InvalidInstanceID.NotFound" ? new MissingInstanceError(message) : new AgentError("Config", message);
  }
  if (name === "UnsupportedOperation")
    return new AgentError(
      "Config",
      `${where} does not support ${what} (an instance-store root cannot be stopped: set offAction: terminate) (${detail})`,
    );
  if (THROTTLED.has(name) || status === 429)
    return new AgentError("Failed", `the EC2 API throttled ${what} on ${where}${tries} (${detail})`);
  if (err.$fault === "server" || (status !== undefined && status >= 500))
    return new AgentError("Unreachable", `the EC2 API failed ${what} on ${where}${tries} (${detail})`);
  if (
    (code && NETWORK.has(code)) ||
    name === "TimeoutError" ||
    name === "RequestTimeout" ||
    /socket hang up|ECONNREFUSED|getaddrinfo/i.test(err.message ?? "")
  )
    return new AgentError(
      "Unreachable",
      `the EC2 API did not answer ${what} on ${where}${tries}: check the network and the endpoint (${detail})`,
    );
  if (status === undefined && (name === "SyntaxError" || /deserializ|parse|Unexpected/i.test(err.message ?? "")))
    return new AgentError("BadOutput", `the EC2 API answered ${what} on ${where} with something that is not an EC2 response (${detail})`);
  return new AgentError("Failed", `${what} failed on ${where} (${detail})`);
}

/** An instance state as a power state: only stopped and terminated are off; in-between states are errors, never off. */
export function powerOfState(state: string | undefined, where: string): PowerState {
  switch (state) {
    case "stopped":
    case "terminated":
      return "off";
    case "running":
    case "pending": // starting: it may already run code
      return "on";
    case "stopping":
    case "shutting-down":
      throw new AgentError("Failed", `${where} is still ${state}: not off yet`);
    default:
      throw new AgentError("BadOutput", `${where} reported state ${JSON.stringify(state)}, not an EC2 instance state`);
  }
}

// Loaded on first use: the operator's start and every other agent type should not pay for the SDK.
type Ec2Sdk = typeof Ec2Module;
let sdk: Promise<Ec2Sdk> | undefined;
const loadSdk = () => (sdk ??= import("@aws-sdk/client-ec2"));

interface Call {
  ec2: Ec2Sdk;
  client: EC2Client;
  target: AwsTarget;
  where: string;
}

async function connect(ctx: AgentContext): Promise<Call> {
  const problems = check(ctx.parameters);
  if (problems.length > 0) throw new AgentError("Config", problems.join("; "));
  const p = ctx.parameters;
  const target = locate(p) as AwsTarget;
  const where = `EC2 instance ${target.instanceId} in ${target.region}${p.endpoint ? ` (endpoint ${p.endpoint})` : ""}`;
  const ec2 = await loadSdk();
  const client = new ec2.EC2Client({
    region: target.region,
    maxAttempts: AWS_SDK_ATTEMPTS,
    requestHandler: { connectionTimeout: CONNECT_TIMEOUT_MS, requestTimeout: REQUEST_TIMEOUT_MS, throwOnRequestTimeout: true },
    ...(p.endpoint ? { endpoint: p.endpoint } : {}),
    ...(p.accessKeyId && p.secretAccessKey
      ? {
          credentials: {
            accessKeyId: p.accessKeyId,
            secretAccessKey: p.secretAccessKey,
            ...(p.sessionToken ? { sessionToken: p.sessionToken } : {}),
          },
        }
      : {}),
  });
  return { ec2, client, target, where };
}

async function send<T>(ctx: AgentContext, what: string, fn: (c: Call) => Promise<T>): Promise<T> {
  const c = await connect(ctx);
  try {
    return await fn(c);
  } catch (e) {
    const err = e instanceof AgentError ? e : classifyAwsError(e, c.where, what);
    const message = redact(err.message, ctx.parameters);
    throw isMissingInstance(err) ? new MissingInstanceError(message) : new AgentError(err.kind, message);
  } finally {
    c.client.destroy();
  }
}

async function describe(c: Call, signal: AbortSignal): Promise<string | undefined> {
  const r = await c.client.send(new c.ec2.DescribeInstancesCommand({ InstanceIds: [c.target.instanceId] }), { abortSignal: signal });
  const found = (r.Reservations ?? []).flatMap((res) => res.Instances ?? []).filter((i) => i.InstanceId === c.target.instanceId);
  if (found.length !== 1)
    throw new AgentError(
      "BadOutput",
      `DescribeInstances answered ${found.length} instances with id ${c.target.instanceId} for ${c.where}: cannot tell its state (a missing instance is not evidence that it is off)`,
    );
  return found[0]!.State?.Name;
}

export const awsDriver: AgentDriver = {
  type: "aws",
  validate: check,
  async power(ctx, action) {
    const terminate = action === "off" && ctx.parameters.offAction === "terminate";
    const what = action === "on" ? "StartInstances" : terminate ? "TerminateInstances" : "StopInstances (Force)";
    // An instance that does not exist cannot be stopped: the status query that follows says whether that is proof.
    await send(ctx, what, async (c) => {
      const ids = [c.target.instanceId];
      const opts = { abortSignal: ctx.signal };
      if (action === "on") {
        const state = await describe(c, ctx.signal);
        if (state === "terminated" || state === "shutting-down")
          throw new AgentError(
            "Config",
            `${c.where} is ${state} (offAction terminate cannot be undone): it cannot be powered on; replace the node`,
          );
      }
      try {
        if (action === "on") await c.client.send(new c.ec2.StartInstancesCommand({ InstanceIds: ids }), opts);
        else if (terminate) await c.client.send(new c.ec2.TerminateInstancesCommand({ InstanceIds: ids }), opts);
        else await c.client.send(new c.ec2.StopInstancesCommand({ InstanceIds: ids, Force: true }), opts);
      } catch (e) {
        if (action === "off" && (e as SdkError).name === "InvalidInstanceID.NotFound") return;
        // Stopping an instance that is already stopped or terminated is refused (IncorrectInstanceState): that is the
        // goal reached, which the status query confirms; any other state (pending...) is a failure to retry.
        if ((e as SdkError).name !== "IncorrectInstanceState" || action !== "off") throw e;
        const state = await describe(c, ctx.signal);
        if (state !== "stopped" && state !== "terminated")
          throw new AgentError("Failed", `${c.where} refused ${what} in state ${state ?? "(none)"}: will retry`);
      }
    });
  },
  async status(ctx): Promise<PowerState> {
    return statusOrGone(ctx, (parameters) =>
      send({ ...ctx, parameters }, "DescribeInstances", async (c) => powerOfState(await describe(c, ctx.signal), c.where)),
    );
  },
};
