// The aws agent's pure parts: which instance a Node's providerID names (strictly), its region, the parameter and
// credential rules, the duplicate-target identity, how EC2 errors and instance states map to error kinds and power
// states (nothing but stopped/terminated is off; a missing instance is never off). The wire is test/lab/ec2-peer.test.ts.
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import type { V1Node } from "@kubernetes/client-node";
import { EC2ServiceException } from "@aws-sdk/client-ec2";
import { awsDriver, awsRules, classifyAwsError, parseProviderID, powerOfState, regionOfZone } from "../../src/agents/aws.ts";
import { resolveParameters, type FenceAgentSpec } from "../../src/agents/parameters.ts";
import { checkUniqueTarget } from "../../src/agents/targets.ts";
import { driverFor, rulesFor } from "../../src/agents/registry.ts";
import { AgentError } from "../../src/agents/types.ts";
import { runOperation } from "../../src/agents/run.ts";

const ID = "i-0123456789abcdef0";
const node = (name: string, providerID?: string): V1Node => ({ metadata: { name }, spec: providerID ? { providerID } : {} });
const spec: FenceAgentSpec = { type: "aws" };

function sdkError(name: string, status: number, fault: "client" | "server" = status >= 500 ? "server" : "client", attempts = 1) {
  return new EC2ServiceException({ name, $fault: fault, $metadata: { httpStatusCode: status, attempts }, message: `${name} happened` });
}

describe("aws providerID", () => {
  test("aws:///<zone>/<instance-id> names an instance; its region comes from the zone", () => {
    assert.deepEqual(parseProviderID(`aws:///us-east-1a/${ID}`), { zone: "us-east-1a", instanceId: ID });
    assert.deepEqual(parseProviderID("aws:///eu-west-3c/i-12345678"), { zone: "eu-west-3c", instanceId: "i-12345678" });
    for (const [zone, region] of [
      ["us-east-1a", "us-east-1"],
      ["us-gov-west-1b", "us-gov-west-1"],
      ["cn-north-1a", "cn-north-1"],
      ["us-isob-east-1a", "us-isob-east-1"],
      ["us-west-2-lax-1a", "us-west-2"],
      ["us-east-1-wl1-bos-wlz-1", "us-east-1"],
      ["ap-southeast-2c", "ap-southeast-2"],
    ])
      assert.equal(regionOfZone(zone!), region, zone);
    assert.equal(regionOfZone("zone-a"), undefined);
    assert.equal(regionOfZone("use1-az1"), undefined);
  });

  test("every other form is refused with the expected form in the message", () => {
    for (const bad of [
      `aws://us-east-1a/${ID}`,
      `aws:////${ID}`,
      `aws:///us-east-1a/fargate-ip-10-0-0-1.ec2.internal`,
      `aws:///us-east-1a/${ID}/extra`,
      `aws:///us-east-1a/i-0123`,
      `aws:///us-east-1a/I-0123456789ABCDEF0`,
      `gce://project/zone/vm`,
      `kwok://node-1`,
      ID,
      "",
    ]) {
      const r = parseProviderID(bad);
      assert.ok("error" in r, bad);
      assert.match(r.error, /aws:\/\/\/<availability-zone>\/i-/);
    }
  });
});

describe("aws parameters", () => {
  const p = { providerID: `aws:///us-east-1a/${ID}` };

  test("the providerID defaults to the Node's spec.providerID; a spec value wins over it", () => {
    const r = resolveParameters(spec, node("n1", `aws:///us-east-1a/${ID}`), new Map(), awsRules);
    assert.deepEqual(r, { parameters: { providerID: `aws:///us-east-1a/${ID}` } });
    const own = `aws:///us-east-1b/i-11111111`;
    const r2 = resolveParameters({ type: "aws", nodes: { n1: { parameters: { providerID: own } } } }, node("n1"), new Map(), awsRules);
    assert.deepEqual(r2, { parameters: { providerID: own } });
  });

  test("a Node without providerID: a clear error naming the node and the way out", () => {
    const r = resolveParameters(spec, node("n1"), new Map(), awsRules);
    assert.ok("errors" in r);
    assert.match(r.errors.join(), /node n1 has no spec\.providerID, which type aws uses to find its instance.*spec\.nodes\.n1\.parameters/);
  });

  test("credentials come from a Secret only, both halves or neither", () => {
    const secret = { namespace: "s", name: "aws" };
    const withSecret = { type: "aws", credentialsSecretRef: secret };
    const data = new Map([["s/aws", { accessKeyId: "AKIAEXAMPLE", secretAccessKey: "wJalr/EXAMPLEKEY\n" }]]);
    const r = resolveParameters(withSecret, node("n1", `aws:///us-east-1a/${ID}`), data, awsRules);
    assert.ok("parameters" in r);
    assert.equal(r.parameters.secretAccessKey, "wJalr/EXAMPLEKEY");
    assert.deepEqual(awsDriver.validate(r.parameters), []);
    const inSpec = resolveParameters({ type: "aws", parameters: { secretAccessKey: "x" } }, node("n1", p.providerID), new Map(), awsRules);
    assert.ok("errors" in inSpec && /a credential: put it in the Secret/.test(inSpec.errors.join()));
    assert.match(awsDriver.validate({ ...p, accessKeyId: "AKIAEXAMPLE" }).join(), /both accessKeyId and secretAccessKey, or neither/);
    assert.match(awsDriver.validate({ ...p, sessionToken: "t" }).join(), /sessionToken needs accessKeyId/);
    const stray = resolveParameters(withSecret, node("n1", p.providerID), new Map([["s/aws", { region: "us-east-1" }]]), awsRules);
    assert.ok("errors" in stray && /not a credential of aws/.test(stray.errors.join()));
  });

  test("values are checked with actionable messages", () => {
    assert.deepEqual(awsDriver.validate(p), []);
    assert.deepEqual(awsDriver.validate({ ...p, region: "us-east-1", offAction: "terminate", endpoint: "http://127.0.0.1:5000" }), []);
    const msg = (q: Record<string, string>) => awsDriver.validate(q).join("; ");
    assert.match(msg({ ...p, region: "us-west-2" }), /region us-west-2 disagrees with the providerID's zone us-east-1a/);
    assert.match(msg({ ...p, region: "US East" }), /must be an AWS region/);
    assert.match(msg({ ...p, offAction: "hibernate" }), /offAction must be one of stop, terminate/);
    assert.match(msg({ ...p, endpoint: "ec2.local" }), /endpoint must be a URL/);
    assert.match(msg({ ...p, endpoint: "ftp://x" }), /http\(s\) URL/);
    assert.match(msg({ ...p, endpoint: "https://u:pw@x" }), /must not contain credentials/);
    assert.match(msg({ ...p, address: "10.0.0.1" }), /address is not an aws parameter/);
    assert.match(msg({ providerID: `aws:///zone-a/${ID}` }), /cannot tell the region from zone "zone-a": set parameter region/);
    assert.deepEqual(awsDriver.validate({ providerID: `aws:///zone-a/${ID}`, region: "eu-west-1" }), []);
    assert.match(msg({ providerID: "kwok://n1" }), /not an EC2 instance's/);
    assert.match(msg({}), /providerID is missing/);
  });

  test("the registry knows the type; two nodes on one instance are refused", () => {
    assert.equal(driverFor("aws"), awsDriver);
    assert.equal(rulesFor({ type: "aws" }), awsRules);
    assert.deepEqual(awsRules.target({ providerID: `aws:///us-east-1a/${ID}` }), { device: `aws:us-east-1/${ID}`, outlets: [] });
    const a = node("a", `aws:///us-east-1a/${ID}`);
    const b = node("b", `aws:///us-east-1a/${ID}`);
    const c = node("c", `aws:///us-east-1a/i-22222222`);
    assert.equal(checkUniqueTarget("ec2", spec, a, [a, c], awsRules).ok, true);
    const dup = checkUniqueTarget("ec2", spec, a, [a, b, c], awsRules);
    assert.ok(!dup.ok && dup.nodes.join() === "b" && dup.message.includes(`aws:us-east-1/${ID}`));
    // The same instance id in another region is another machine.
    const d = node("d", `aws:///eu-west-1a/${ID}`);
    assert.equal(checkUniqueTarget("ec2", spec, a, [a, d], awsRules).ok, true);
  });
});

describe("aws answers", () => {
  const where = `EC2 instance ${ID} in us-east-1`;
  test("instance states: only stopped and terminated are off; stopping is an error to poll past, never off", () => {
    assert.equal(powerOfState("stopped", where), "off");
    assert.equal(powerOfState("terminated", where), "off");
    assert.equal(powerOfState("running", where), "on");
    assert.equal(powerOfState("pending", where), "on");
    for (const s of ["stopping", "shutting-down"])
      assert.throws(
        () => powerOfState(s, where),
        (e: unknown) => e instanceof AgentError && e.kind === "Failed" && e.message.includes(`still ${s}`),
      );
    assert.throws(
      () => powerOfState(undefined, where),
      (e: unknown) => e instanceof AgentError && e.kind === "BadOutput",
    );
    assert.throws(
      () => powerOfState("hibernated", where),
      (e: unknown) => e instanceof AgentError && e.kind === "BadOutput",
    );
  });

  test("EC2 errors map to kinds; a missing instance is a Config error that says it is no evidence of off", () => {
    const kind = (e: unknown) => classifyAwsError(e, where, "StopInstances");
    for (const n of ["AuthFailure", "UnauthorizedOperation", "SignatureDoesNotMatch", "InvalidClientTokenId"])
      assert.equal(kind(sdkError(n, n === "UnauthorizedOperation" ? 403 : 401)).kind, "AuthFailed", n);
    const nf = kind(sdkError("InvalidInstanceID.NotFound", 400));
    assert.equal(nf.kind, "Config");
    assert.match(nf.message, /does not exist.*not evidence that the machine is off/);
    assert.equal(kind(sdkError("InvalidInstanceID.Malformed", 400)).kind, "Config");
    const thr = kind(sdkError("RequestLimitExceeded", 503, "client", 3));
    assert.equal(thr.kind, "Failed");
    assert.match(thr.message, /throttled StopInstances .* after 3 attempts/);
    assert.equal(kind(sdkError("InternalError", 500, "server", 3)).kind, "Unreachable");
    assert.equal(kind(sdkError("Unavailable", 503, "server")).kind, "Unreachable");
    assert.equal(kind(Object.assign(new Error("connect ECONNREFUSED 127.0.0.1:1"), { code: "ECONNREFUSED" })).kind, "Unreachable");
    assert.equal(kind(Object.assign(new Error("timed out"), { name: "TimeoutError" })).kind, "Unreachable");
    assert.equal(kind(Object.assign(new Error("Request aborted"), { name: "AbortError" })).kind, "TimedOut");
    assert.equal(kind(Object.assign(new Error("Could not load credentials"), { name: "CredentialsProviderError" })).kind, "Config");
    assert.equal(kind(sdkError("UnsupportedOperation", 400)).kind, "Config");
    assert.equal(kind(sdkError("InvalidParameterCombination", 400)).kind, "Failed");
  });

  test("no Secret and no identity: the default chain fails fast as a Config error naming IRSA and the Secret", async () => {
    // The instance metadata service is off and no environment, profile or web identity is set: the chain has nothing.
    for (const k of Object.keys(process.env)) if (k.startsWith("AWS_")) delete process.env[k];
    Object.assign(process.env, {
      AWS_EC2_METADATA_DISABLED: "true",
      AWS_CONFIG_FILE: "/nonexistent",
      AWS_SHARED_CREDENTIALS_FILE: "/nonexistent",
    });
    const r = await runOperation(
      awsDriver,
      { node: "n1", parameters: { providerID: `aws:///us-east-1a/${ID}`, endpoint: "http://127.0.0.1:1" }, annotations: {} },
      "status",
      { timeoutMs: 10_000, retries: 2, backoffMs: 10 },
    );
    assert.equal(r.outcome, "Failed");
    assert.equal(r.tries, 1, "a Config error is not retried");
    assert.match(r.message, /\(Config\): no AWS credentials .*IRSA or EKS Pod Identity.*accessKeyId and secretAccessKey/);
  });

  test("credentials never reach a message", async () => {
    const secret = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";
    const r = await runOperation(
      awsDriver,
      {
        node: "n1",
        parameters: {
          providerID: `aws:///us-east-1a/${ID}`,
          endpoint: "http://127.0.0.1:1",
          accessKeyId: "AKIAIOSFODNN7EXAMPLE",
          secretAccessKey: secret,
        },
        annotations: {},
      },
      "status",
      { timeoutMs: 10_000, retries: 0, backoffMs: 10 },
    );
    assert.equal(r.outcome, "Failed");
    assert.match(r.message, /\(Unreachable\): the EC2 API did not answer DescribeInstances/);
    assert.ok(!r.message.includes(secret) && !r.message.includes("AKIAIOSFODNN7EXAMPLE"));
  });
});
