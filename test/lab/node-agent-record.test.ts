// The node agent (`stockade node-agent`, run here as a host process) against the lab's real apiserver, with the
// credentials it has in a cluster: a ServiceAccount token bound to a pod on its node (the token then carries the
// node-name claim the admission policy reads). A plain file stands in for /dev/watchdog.
//   - the agent renews its record (the Lease named after its node) with the annotations the operator reads;
//   - manifests/node-agent/'s ValidatingAdmissionPolicy refuses that token a write to another node's record;
//   - SIGTERM while confirmed records armed=false, then disarms the watchdog (magic close: "V" last).
// The pod the token is bound to is created with spec.nodeName set (no scheduler): the apiserver puts the pod's
// node in the token when it is issued (TokenRequest with a Pod bound object).
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { execFile, spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { CoordinationV1Api, KubeConfig, V1MicroTime, type V1Lease } from "@kubernetes/client-node";
import { Lab } from "../../lab/lab.ts";
import { repoRoot } from "../../lab/bins.ts";
import { waitFor } from "../../lab/health.ts";
import { freeTcpPorts } from "../../lab/ports.ts";
import { NODE_AGENT_NAMESPACE, parseNodeAgentRecord } from "../../src/decide/node-agent-record.ts";

const run = promisify(execFile);
const NS = NODE_AGENT_NAMESPACE;

describe("node agent: its record on a real apiserver, bound to its node", () => {
  let lab: Lab;
  let nodeX: string;
  let nodeY: string;
  let agent: ChildProcess | undefined;
  let agentLog = "";
  let tokenKubeconfig: string;
  const device = () => join(lab.dir, "watchdog");
  const kubectl = async (...args: string[]) => (await run("kubectl", args, { env: lab.env })).stdout;
  let admin: CoordinationV1Api;

  before(async () => {
    lab = await Lab.up({ dir: mkdtempSync(join(tmpdir(), "stockade-node-agent-")), nodes: 2 });
    [nodeX, nodeY] = lab.nodes() as [string, string];
    admin = lab.kc.makeApiClient(CoordinationV1Api);
    await kubectl("apply", "-f", join(repoRoot, "manifests/01-crds.yaml"));
    await kubectl("apply", "-f", join(repoRoot, "manifests/node-agent"));
    await kubectl(
      "run",
      "token-holder",
      "-n",
      NS,
      "--image=registry.invalid/none",
      "--restart=Never",
      `--overrides=${JSON.stringify({ spec: { nodeName: nodeX, serviceAccountName: "stockade-node-agent" } })}`,
    );
    const token = (
      await kubectl("create", "token", "stockade-node-agent", "-n", NS, "--bound-object-kind=Pod", "--bound-object-name=token-holder")
    ).trim();
    const kc = new KubeConfig();
    kc.loadFromFile(lab.kubeconfig);
    const cluster = kc.getCurrentCluster()!;
    tokenKubeconfig = join(lab.dir, "node-agent.kubeconfig");
    writeFileSync(
      tokenKubeconfig,
      JSON.stringify({
        apiVersion: "v1",
        kind: "Config",
        clusters: [
          {
            name: "lab",
            cluster: {
              server: cluster.server,
              "certificate-authority-data": cluster.caData ?? Buffer.from(readFileSync(cluster.caFile!)).toString("base64"),
            },
          },
        ],
        users: [{ name: "agent", user: { token } }],
        contexts: [{ name: "agent", context: { cluster: "lab", user: "agent" } }],
        "current-context": "agent",
      }),
    );
  });

  after(async () => {
    if (agent && agent.exitCode === null) agent.kill("SIGKILL");
    await lab?.down();
  });

  test("the agent renews the Lease named after its node with the record's annotations", async () => {
    writeFileSync(device(), "");
    writeFileSync(join(lab.dir, "timeout"), "60\n");
    const [peerPort, healthPort] = await freeTcpPorts(2);
    agent = spawn(
      process.execPath,
      [
        join(repoRoot, "src/main.ts"),
        "node-agent",
        "--kubeconfig",
        tokenKubeconfig,
        "--pod-ip",
        "127.0.0.1",
        "--pod-name",
        "token-holder",
        "--watchdog-device",
        device(),
        "--watchdog-timeout-file",
        join(lab.dir, "timeout"),
        // c = 2 s with a 1 s peer timeout (the peer timeout must be shorter than c).
        "--check-interval-seconds",
        "2",
        "--peer-timeout-seconds",
        "1",
        "--deadline-seconds",
        "20",
        "--peer-port",
        String(peerPort),
        "--health-bind-address",
        `127.0.0.1:${healthPort}`,
      ],
      { env: { ...process.env, NODE_NAME: nodeX }, stdio: ["ignore", "pipe", "pipe"] },
    );
    agent.stdout!.on("data", (d: Buffer) => (agentLog += d));
    agent.stderr!.on("data", (d: Buffer) => (agentLog += d));
    const read = () => admin.readNamespacedLease({ name: nodeX, namespace: NS });
    const first = await waitFor(
      "the record, armed",
      async () => {
        const l = await read().catch(() => undefined);
        return l?.metadata?.annotations?.["node-agent.stockade.io/armed"] === "true" ? l : undefined;
      },
      { timeoutMs: 60_000, intervalMs: 250 },
    ).catch((e: Error) => assert.fail(`${e.message}\nagent log:\n${agentLog}`));
    const parsed = parseNodeAgentRecord(first as V1Lease);
    assert.ok(parsed.ok, JSON.stringify(parsed));
    assert.equal(parsed.record.watchdogTimeoutSeconds, 60);
    assert.equal(parsed.record.deadlineSeconds, 20);
    assert.equal(parsed.record.peerAddress, `127.0.0.1:${peerPort}`);
    assert.equal(parsed.record.holder, "token-holder");
    assert.equal(first!.spec?.leaseDurationSeconds, 20);
    const renewed = await waitFor(
      "a later renewal",
      async () => {
        const l = await read();
        return String(l.spec?.renewTime) !== String(first!.spec?.renewTime) ? l : undefined;
      },
      { timeoutMs: 15_000, intervalMs: 250 },
    );
    assert.ok(new Date(renewed.spec!.renewTime!).getTime() > new Date(first!.spec!.renewTime!).getTime());
    assert.ok(readFileSync(device(), "latin1").length >= 1, "the watchdog was fed");
  });

  test("the admission policy refuses the agent's token a write to another node's record", async () => {
    const kc = new KubeConfig();
    kc.loadFromFile(tokenKubeconfig);
    const asAgent = kc.makeApiClient(CoordinationV1Api);
    const body = (name: string): V1Lease => ({
      metadata: { name, namespace: NS },
      spec: { holderIdentity: "forger", leaseDurationSeconds: 20 },
    });
    const err = await asAgent.createNamespacedLease({ namespace: NS, body: body(nodeY) }).then(
      () => undefined,
      (e: { code?: number; body?: string }) => e,
    );
    assert.ok(err, `the agent of ${nodeX} created ${nodeY}'s record`);
    assert.equal(err.code, 422, String(err.body)); // a ValidatingAdmissionPolicy denial: reason Invalid
    assert.match(String(err.body), /only the record named after its own node/);
    assert.ok(String(err.body).includes(`(node ${nodeX}), not ${nodeY}`), String(err.body));
    // Its own record: allowed (the same token, the same verb).
    const own = await asAgent.readNamespacedLease({ name: nodeX, namespace: NS });
    own.spec!.renewTime = new V1MicroTime(Date.now());
    own.spec!.acquireTime = new V1MicroTime(new Date(own.spec!.acquireTime!).getTime());
    await asAgent.replaceNamespacedLease({ name: nodeX, namespace: NS, body: own });
    // Any other writer is refused too, whatever its RBAC: here the lab's admin (system:masters), as another DaemonSet's
    // token with rights on Leases would be.
    const byAdmin = await admin.createNamespacedLease({ namespace: NS, body: body(nodeY) }).then(
      () => undefined,
      (e: { code?: number; body?: string }) => e,
    );
    assert.ok(byAdmin, "the lab's admin created a node agent record");
    assert.match(String(byAdmin.body), /only the node agent's ServiceAccount may write node agent records/);
    // Without the policy's binding, RBAC alone lets the same token write another node's record: the policy is what refuses.
    await kubectl("delete", "validatingadmissionpolicybinding", "stockade-node-agent-record");
    await waitFor(
      "the write to go through without the policy",
      () =>
        asAgent.createNamespacedLease({ namespace: NS, body: body(nodeY) }).then(
          () => true,
          () => undefined,
        ),
      { timeoutMs: 30_000, intervalMs: 500 },
    );
  });

  test("SIGTERM while confirmed records armed=false, then disarms the watchdog: V written last", async () => {
    const exited = new Promise<number | null>((resolve) => agent!.once("exit", resolve));
    agent!.kill("SIGTERM");
    assert.equal(await exited, 0, agentLog);
    const written = readFileSync(device(), "latin1");
    assert.ok(written.endsWith("V"), `device content ends with ${JSON.stringify(written.slice(-3))}`);
    // A record still saying "armed" over a disarmed watchdog would let the operator count a reset that never comes.
    const record = await admin.readNamespacedLease({ name: nodeX, namespace: NS });
    assert.equal(record.metadata?.annotations?.["node-agent.stockade.io/armed"], "false");
  });
});
