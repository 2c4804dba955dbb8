// The aws agent against moto's EC2 endpoint (Debian trixie's python3-moto, IAM authentication on), with the lab's
// glue tying each instance to a lab machine's real power (lab/ec2-peer.ts). Two independent clients drive the same
// endpoint: the operator's driver (@aws-sdk/client-ec2) and Debian's boto3. Also: moto itself refuses a wrong
// secret; the example IAM policy is enough for the agent and no more; throttling is retried inside one try; a hung
// API is a timeout with the machine untouched; a missing instance is a Config error, never "off".
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { RunInstancesCommand } from "@aws-sdk/client-ec2";
import { Lab } from "../../lab/lab.ts";
import { Ec2Peer, PYTHON, REGION } from "../../lab/ec2-peer.ts";
import { awsDriver } from "../../src/agents/aws.ts";
import { resolveParameters, type FenceAgentSpec } from "../../src/agents/parameters.ts";
import { fenceOff, runOperation, type RunContext, type RunOptions } from "../../src/agents/run.ts";

const run = promisify(execFile);
const opts: RunOptions = { timeoutMs: 20_000, retries: 1, backoffMs: 200, pollMs: 200 };
const log = (m: string) => console.log(`# ${m}`);
const NODES = ["node-1", "node-2"];

/** boto3 (Debian's, bookworm 1.26) against the glue: prints the JSON the script prints. */
async function boto3(peer: Ec2Peer, key: { accessKeyId: string; secretAccessKey: string }, script: string): Promise<unknown> {
  const prog = `import boto3, json, sys\nc = boto3.client("ec2", region_name="${REGION}", endpoint_url=sys.argv[1], aws_access_key_id=sys.argv[2], aws_secret_access_key=sys.argv[3])\n${script}`;
  const { stdout } = await run(PYTHON, ["-s", "-c", prog, peer.url, key.accessKeyId, key.secretAccessKey], {
    env: { PATH: process.env.PATH },
  });
  return JSON.parse(stdout);
}

describe("aws agent against moto, instances tied to lab machines", { timeout: 240_000 }, () => {
  let lab: Lab;
  let peer: Ec2Peer;
  let ids: Map<string, string>;
  const ctx: Record<string, RunContext> = {};

  before(async () => {
    const dir = mkdtempSync(join(tmpdir(), "stockade-ec2-"));
    peer = await Ec2Peer.start(join(dir, "ec2"));
    ids = await peer.runInstances(NODES);
    lab = await Lab.up({ dir, nodes: NODES.length, providerID: (n) => Ec2Peer.providerID(ids.get(n.name)!) });
    peer.glue.attach(lab.state, ids);
    // As the operator resolves them: the instance from the real Node's spec.providerID, the fencer's key from a Secret.
    const spec: FenceAgentSpec = { type: "aws", parameters: { endpoint: peer.url }, credentialsSecretRef: { namespace: "s", name: "aws" } };
    const secret = new Map([["s/aws", { ...peer.fencer }]]);
    for (const n of NODES) {
      const r = resolveParameters(spec, await lab.node(n), secret);
      assert.ok("parameters" in r, JSON.stringify(r));
      assert.equal(r.parameters.providerID, `aws:///us-east-1a/${ids.get(n)}`);
      ctx[n] = { node: n, parameters: r.parameters, annotations: {} };
    }
  });
  after(async () => {
    await peer?.stop();
    await lab?.down();
  });

  test("@aws-sdk/client-ec2: status on → fence off (StopInstances Force, confirmed stopped; the machine is off) → on", async () => {
    assert.equal((await runOperation(awsDriver, ctx["node-1"]!, "status", opts)).power, "on");
    const t0 = Date.now();
    const off = await fenceOff(awsDriver, ctx["node-1"]!, opts);
    log(`fence off through moto: ${Date.now() - t0} ms: ${off.message}`);
    assert.equal(off.outcome, "Succeeded", off.message);
    assert.equal(lab.machine("node-1").power, "off");
    assert.equal(lab.machine("node-1").kubelet, "stopped");
    assert.equal(await peer.state(ids.get("node-1")!), "stopped");
    const stops = peer.glue.calls.filter((c) => c.action === "StopInstances");
    assert.deepEqual(
      stops.map((c) => [c.instanceIds, c.status]),
      [[[ids.get("node-1")], 200]],
    );
    assert.equal((await runOperation(awsDriver, ctx["node-1"]!, "status", opts)).power, "off");
    const on = await runOperation(awsDriver, ctx["node-1"]!, "on", opts);
    assert.equal(on.outcome, "Succeeded", on.message);
    assert.equal(lab.machine("node-1").power, "on");
    assert.equal(await peer.state(ids.get("node-1")!), "running");
    assert.equal(lab.machine("node-2").power, "on", "the other machine was never touched");
  });

  test("boto3 drives the same endpoint: stop_instances powers the lab machine off, start_instances on", async () => {
    const id = ids.get("node-2")!;
    const stopped = await boto3(
      peer,
      peer.fencer,
      `i = ${JSON.stringify(id)}\nc.stop_instances(InstanceIds=[i], Force=True)\n` +
        `print(json.dumps(c.describe_instances(InstanceIds=[i])["Reservations"][0]["Instances"][0]["State"]["Name"]))`,
    );
    assert.equal(stopped, "stopped");
    assert.equal(lab.machine("node-2").power, "off");
    assert.equal((await runOperation(awsDriver, ctx["node-2"]!, "status", opts)).power, "off", "the SDK agrees with boto3");
    await boto3(peer, peer.fencer, `c.start_instances(InstanceIds=[${JSON.stringify(id)}])\nprint("1")`);
    assert.equal(lab.machine("node-2").power, "on");
  });

  test("moto refuses a wrong secret (AuthFailure) for both clients, and nothing is powered off", async () => {
    const wrong = { ...peer.fencer, secretAccessKey: "not-the-secret-0000000000000000000000000" };
    const r = await fenceOff(awsDriver, { ...ctx["node-1"]!, parameters: { ...ctx["node-1"]!.parameters, ...wrong } }, opts);
    assert.equal(r.outcome, "Failed");
    assert.equal(r.tries, 1, "AuthFailed is not retried");
    assert.match(r.message, /\(AuthFailed\): .* refused StopInstances \(Force\).*AuthFailure/);
    assert.ok(!r.message.includes(wrong.secretAccessKey) && !r.message.includes(wrong.accessKeyId));
    const py = await boto3(
      peer,
      wrong,
      `import botocore\ntry:\n    c.stop_instances(InstanceIds=[${JSON.stringify(ids.get("node-1"))}], Force=True)\n    print(json.dumps("accepted"))\nexcept botocore.exceptions.ClientError as e:\n    print(json.dumps(e.response["Error"]["Code"]))`,
    );
    assert.equal(py, "AuthFailure");
    assert.equal(lab.machine("node-1").power, "on");
  });

  test("the example IAM policy allows the agent's calls and nothing else (moto checks the actions)", async () => {
    const c = peer.client(peer.fencer);
    try {
      await assert.rejects(
        c.send(new RunInstancesCommand({ ImageId: "ami-12c6146b", MinCount: 1, MaxCount: 1 })),
        (e: Error) => /AccessDenied|UnauthorizedOperation/.test(e.name) && /RunInstances/.test(e.message),
      );
    } finally {
      c.destroy();
    }
  });

  test("throttling: RequestLimitExceeded (503) is retried by the SDK inside one try; a storm fails the try, classified", async () => {
    peer.glue.throttle = 2;
    const r = await runOperation(awsDriver, ctx["node-2"]!, "status", opts);
    assert.equal(r.outcome, "Succeeded", r.message);
    assert.equal(r.tries, 1, "one driver call: the SDK's own retry absorbed the throttling");
    assert.deepEqual(
      peer.glue.calls.slice(-3).map((c) => c.by),
      ["throttled", "throttled", "moto"],
    );
    peer.glue.throttle = 1000;
    const storm = await runOperation(awsDriver, ctx["node-2"]!, "status", { ...opts, retries: 1 });
    peer.glue.throttle = 0;
    assert.equal(storm.outcome, "Failed");
    assert.equal(storm.tries, 2);
    assert.match(storm.message, /\(Failed\): the EC2 API throttled DescribeInstances .* after 3 attempts .*RequestLimitExceeded/);
  });

  test("an API that never answers: the deadline ends the fence TimedOut, the machine untouched", async () => {
    peer.glue.hang = true;
    const t0 = Date.now();
    const r = await fenceOff(awsDriver, ctx["node-2"]!, { ...opts, timeoutMs: 3000 });
    peer.glue.hang = false;
    const took = Date.now() - t0;
    assert.equal(r.outcome, "TimedOut", r.message);
    assert.ok(took < 4500, `the deadline held: ${took} ms`);
    assert.equal(lab.machine("node-2").power, "on");
    assert.equal(await peer.state(ids.get("node-2")!), "running", "no late StopInstances landed");
  });

  test("an API that accepts the connection and never answers: each SDK attempt gives up after 10 s, the try after 3 (Unreachable)", async () => {
    peer.glue.hang = true;
    const before = peer.glue.calls.length;
    const t0 = Date.now();
    const r = await runOperation(awsDriver, ctx["node-2"]!, "status", { ...opts, timeoutMs: 60_000, retries: 0 });
    peer.glue.hang = false;
    const took = Date.now() - t0;
    assert.equal(r.outcome, "Failed", r.message);
    assert.match(r.message, /\(Unreachable\): the EC2 API did not answer DescribeInstances .* after 3 attempts/);
    assert.ok(took >= 29_000 && took < 45_000, `3 attempts of 10 s: ${took} ms`);
    assert.equal(peer.glue.calls.slice(before).filter((c) => c.by === "hung").length, 3);
  });

  test("a missing instance and a providerID of the wrong form: Config errors, never off", async () => {
    const missing = {
      ...ctx["node-2"]!,
      parameters: { ...ctx["node-2"]!.parameters, providerID: "aws:///us-east-1a/i-0000000000000dead" },
    };
    const r = await fenceOff(awsDriver, missing, opts);
    assert.equal(r.outcome, "Failed");
    // The power-off's "does not exist" goes on to the status query, which decides (issue 41 item 6): without a witness
    // instance of the same account and region, it is no evidence.
    assert.equal(r.tries, 2);
    assert.match(
      r.message,
      /\(Config\): EC2 instance i-0000000000000dead in us-east-1 .* does not exist \(InvalidInstanceID\.NotFound\).*not evidence/,
    );
    const s = await runOperation(awsDriver, missing, "status", opts);
    assert.equal(s.outcome, "Failed");
    assert.equal(s.power, undefined);
    const wrong = { ...ctx["node-2"]!, parameters: { ...ctx["node-2"]!.parameters, providerID: "kwok://node-2" } };
    const w = await fenceOff(awsDriver, wrong, opts);
    assert.equal(w.outcome, "Failed");
    assert.equal(w.tries, 0, "not attempted");
    assert.match(w.message, /misconfigured: parameter providerID "kwok:\/\/node-2" is not an EC2 instance's/);
  });

  test("offAction terminate: the example policy does not allow it; with ec2:TerminateInstances it is confirmed by state terminated; on is then refused, clearly", async () => {
    const denied = await fenceOff(
      awsDriver,
      { ...ctx["node-2"]!, parameters: { ...ctx["node-2"]!.parameters, offAction: "terminate" } },
      opts,
    );
    assert.equal(denied.outcome, "Failed");
    assert.match(denied.message, /\(AuthFailed\): .* refused TerminateInstances.*not authorized to perform: ec2:TerminateInstances/);
    assert.equal(lab.machine("node-2").power, "on");
    // The admin key stands for a policy with ec2:TerminateInstances added (docs/fencing.md).
    const t = { ...ctx["node-2"]!, parameters: { ...ctx["node-2"]!.parameters, ...peer.admin, offAction: "terminate" } };
    const off = await fenceOff(awsDriver, t, opts);
    assert.equal(off.outcome, "Succeeded", off.message);
    assert.equal(await peer.state(ids.get("node-2")!), "terminated");
    assert.equal(lab.machine("node-2").power, "off");
    const again = await fenceOff(awsDriver, t, opts);
    assert.equal(again.outcome, "Succeeded", `terminating a terminated instance is off already: ${again.message}`);
    const on = await runOperation(awsDriver, t, "on", opts);
    assert.equal(on.outcome, "Failed");
    assert.match(on.message, /\(Config\): .* is terminated \(offAction terminate cannot be undone\)/);
    assert.equal(lab.machine("node-2").power, "off");
  });
});
