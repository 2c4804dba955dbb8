// Runs INSIDE the operator image (mounted at /app/image-check.mjs, so bare imports resolve from /app/node_modules):
// loads every module of the operator (every agent's among them), then drives each cloud SDK the way its agent does up to a real request against a
// closed loopback port. Every module a fence would load is then loaded; a file pruned from the image that a
// fence needs fails here (ERR_MODULE_NOT_FOUND, ENOENT) instead of with the network error this expects.
// Prints one JSON line: { modules, agents, sdk: { <what>: <error seen> }, files? }.
// IMAGE_CHECK_TRACE=1 also lists every file Node.js loaded (tools/image/prune-node-modules.sh was written from it).
import { generateKeyPairSync } from "node:crypto";
import { readdirSync } from "node:fs";
import { registerHooks } from "node:module";

const files = new Set();
if (process.env.IMAGE_CHECK_TRACE === "1") {
  registerHooks({
    load(url, context, next) {
      files.add(url);
      return next(url, context);
    },
  });
}

// Every module of the operator but main.js (the only one that does something when imported): their static
// imports are every dependency the operator loads at start; the agents' SDKs are loaded on first use, below.
const modules = readdirSync("/app/dist", { recursive: true })
  .filter((f) => f.endsWith(".js") && f !== "main.js")
  .sort();
for (const f of modules) await import(`/app/dist/${f}`);
const agents = modules.filter((f) => f.startsWith("agents/"));

// Nothing listens on port 9 (discard) in the container: each request must fail to connect, and nothing else.
const closed = "https://127.0.0.1:9";
const sdk = {};
const chain = (e) => {
  const parts = [];
  for (let x = e, i = 0; x && i < 8; x = x.cause ?? x.errors?.[0], i++) parts.push(`${x.name ?? ""} ${x.code ?? ""} ${x.message ?? x}`);
  return parts.join(" <- ").replace(/\s+/g, " ");
};
async function expectFailure(what, promise, pattern) {
  try {
    await promise;
  } catch (e) {
    const seen = chain(e);
    if (/ERR_MODULE_NOT_FOUND|MODULE_NOT_FOUND|Cannot find (module|package)|ENOENT/.test(seen) || !pattern.test(seen)) {
      throw new Error(`${what}: unexpected error: ${seen}`, { cause: e });
    }
    sdk[what] = seen.slice(0, 300);
    return;
  }
  throw new Error(`${what}: a request to ${closed} succeeded`);
}
const refused = /ECONNREFUSED|connect|fetch failed|network/i;

// AWS: the agent's client, with keys (a request) and without (the default credential chain's providers).
const ec2 = await import("@aws-sdk/client-ec2");
const keys = { accessKeyId: "AKIDEXAMPLE", secretAccessKey: "secret" };
const aws = new ec2.EC2Client({ region: "us-east-1", endpoint: closed, maxAttempts: 1, credentials: keys });
await expectFailure("ec2.DescribeInstances", aws.send(new ec2.DescribeInstancesCommand({ InstanceIds: ["i-0"] })), refused);
process.env.AWS_EC2_METADATA_DISABLED = "true";
const awsChain = new ec2.EC2Client({ region: "us-east-1", endpoint: closed, maxAttempts: 1 });
await expectFailure("ec2.defaultCredentialChain", awsChain.send(new ec2.StopInstancesCommand({ InstanceIds: ["i-0"] })), /credential/i);

// Azure: compute + identity, a client secret against a custom authority (as the agent), and the default chain.
const [{ ComputeManagementClient }, identity] = await Promise.all([import("@azure/arm-compute"), import("@azure/identity")]);
const authority = { authorityHost: closed, disableInstanceDiscovery: true };
const secret = new identity.ClientSecretCredential("tenant", "client", "secret", authority);
const azure = new ComputeManagementClient(secret, "subscription", { endpoint: closed, retryOptions: { maxRetries: 0 } });
// MSAL reports the refused authority metadata request as endpoints_resolution_error.
await expectFailure("azure.virtualMachines.get", azure.virtualMachines.get("rg", "vm"), /endpoints_resolution_error|ECONNREFUSED/);
const azureDefault = new ComputeManagementClient(new identity.DefaultAzureCredential(authority), "subscription", {
  endpoint: closed,
  retryOptions: { maxRetries: 0 },
});
await expectFailure("azure.defaultCredential", azureDefault.virtualMachines.get("rg", "vm"), /credential|authenticat/i);

// Google: the REST (fallback) InstancesClient with a service-account key signing its own JWT, as the agent.
const { InstancesClient } = await import("@google-cloud/compute");
const { privateKey } = generateKeyPairSync("rsa", {
  modulusLength: 2048,
  privateKeyEncoding: { type: "pkcs8", format: "pem" },
  publicKeyEncoding: { type: "spki", format: "pem" },
});
const gcp = new InstancesClient({
  fallback: true,
  projectId: "project",
  apiEndpoint: "127.0.0.1",
  port: 9,
  credentials: { client_email: "fencer@project.iam.gserviceaccount.com", private_key: privateKey },
  scopes: [],
});
await expectFailure(
  "gcp.instances.get",
  gcp.get({ project: "project", zone: "zone", instance: "vm" }, { timeout: 5000, maxRetries: 0 }),
  refused,
);

console.log(JSON.stringify({ modules: modules.length, agents, sdk, ...(files.size ? { files: [...files].sort() } : {}) }));
