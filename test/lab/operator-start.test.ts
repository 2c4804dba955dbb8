// The operator's front door: clear errors for a missing kubeconfig or missing CRDs, health endpoints
// that mean something, a clean stop on SIGTERM, and configuration mistakes (a missing Secret, a
// missing FenceAgent) reported on the NodeFence instead of acted on.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { execFile, spawn } from "node:child_process";
import { once } from "node:events";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { CustomObjectsApi } from "@kubernetes/client-node";
import { Lab } from "../../lab/lab.ts";
import { repoRoot } from "../../lab/bins.ts";
import { waitFor } from "../../lab/health.ts";
import type { FenceAgent, FencingPolicy, NodeFence } from "../../src/api/v1alpha1.ts";

const run = promisify(execFile);
const main = join(repoRoot, "src/main.ts");

async function operator(args: string[], env: NodeJS.ProcessEnv): Promise<{ code: number | null; out: string }> {
  try {
    const r = await run(process.execPath, [main, ...args], { env, timeout: 30_000 });
    return { code: 0, out: r.stdout + r.stderr };
  } catch (e) {
    const err = e as { code: number; stdout: string; stderr: string };
    return { code: err.code, out: err.stdout + err.stderr };
  }
}

describe("operator start-up and configuration errors", () => {
  let lab: Lab;
  before(async () => {
    lab = await Lab.up({ dir: mkdtempSync(join(tmpdir(), "stockade-start-")), nodes: 1 });
  });
  after(async () => {
    await lab?.down();
  });

  test("bad flags and an unreadable kubeconfig stop it with exit code 2 and a message", async () => {
    const bad = await operator(["--fence-workers", "0"], { ...process.env, KUBECONFIG: lab.kubeconfig });
    assert.equal(bad.code, 2);
    assert.match(bad.out, /stockade: invalid --fence-workers "0"/);
    const missing = await operator(["--kubeconfig", "/nonexistent/kubeconfig"], { ...process.env });
    assert.equal(missing.code, 2);
    assert.match(missing.out, /cannot load kubeconfig \/nonexistent\/kubeconfig/);
  });

  test("without the CRDs it says how to install them", async () => {
    const r = await operator(["--health-bind-address", "0"], { ...process.env, KUBECONFIG: lab.kubeconfig });
    assert.equal(r.code, 1);
    assert.match(r.out, /the Stockade CRDs are not installed in the cluster at https:\/\/127\.0\.0\.1:\d+: kubectl apply -f crds\//);
  });

  test("with the CRDs it serves /healthz and /readyz, reports config mistakes on the NodeFence, and stops on SIGTERM", async () => {
    await run("kubectl", ["apply", "-f", join(repoRoot, "crds")], { env: lab.env });
    await run("kubectl", ["create", "namespace", "stockade-system"], { env: lab.env }); // where the leader Lease lives
    await lab.waitForCrds();
    const child = spawn(
      process.execPath,
      [main, "--health-bind-address", "127.0.0.1:0", "--metrics-bind-address", "127.0.0.1:0", "--webhook-bind-address", "0"],
      {
        env: { ...process.env, KUBECONFIG: lab.kubeconfig },
      },
    );
    let out = "";
    child.stdout.on("data", (b: Buffer) => (out += b.toString()));
    child.stderr.on("data", (b: Buffer) => (out += b.toString()));
    try {
      const addr = await waitFor("health address in the log", async () => /"address":"([\d.]+:\d+)"/.exec(out)?.[1], { timeoutMs: 20_000 });
      await waitFor("/readyz 200", async () => ((await fetch(`http://${addr}/readyz`)).status === 200 ? true : undefined), {
        timeoutMs: 20_000,
      });
      assert.equal((await fetch(`http://${addr}/healthz`)).status, 200);
      assert.equal((await fetch(`http://${addr}/nope`)).status, 404);
      const maddr = /"metrics":"([\d.]+:\d+)"/.exec(out)?.[1];
      const scrape = async () => await (await fetch(`http://${maddr}/metrics`)).text();
      assert.match(
        await waitFor("leader", async () => (/^stockade_leader 1$/m.test(await scrape()) ? scrape() : undefined)),
        /stockade_workqueue_adds_total\{name="node-health"\} \d+/,
      );

      const custom = lab.kc.makeApiClient(CustomObjectsApi);
      const create = (plural: string, kind: string, body: object) =>
        custom.createClusterCustomObject({
          group: "stockade.io",
          version: "v1alpha1",
          plural,
          body: { apiVersion: "stockade.io/v1alpha1", kind, ...body },
        });
      await create("fenceagents", "FenceAgent", {
        metadata: { name: "no-secret" },
        spec: {
          type: "ipmi",
          parameters: { username: "admin", address: "127.0.0.1" },
          credentialsSecretRef: { namespace: "default", name: "nope" },
        },
      });
      await create("fencingpolicies", "FencingPolicy", {
        metadata: { name: "p" },
        spec: { escalation: [{ agents: [{ name: "no-secret" }] }] },
      });
      await create("fencingpolicies", "FencingPolicy", {
        metadata: { name: "q" },
        spec: { nodeSelector: { matchLabels: { nothing: "x" } }, escalation: [{ agents: [{ name: "not-there" }] }] },
      });
      await create("nodefences", "NodeFence", { metadata: { name: "node-1" }, spec: { nodeName: "node-1" } });
      const get = async (name: string) =>
        (await custom.getClusterCustomObject({ group: "stockade.io", version: "v1alpha1", plural: "nodefences", name })) as NodeFence;
      const failed = await waitFor(
        "NodeFence node-1 Failed",
        async () => ((await get("node-1")).status?.phase === "Failed" ? get("node-1") : undefined),
        {
          timeoutMs: 30_000,
        },
      );
      assert.match(
        failed.status?.attempts?.[0]?.message ?? "",
        /Secret default\/nope named by FenceAgent no-secret does not exist: create it/,
      );
      assert.equal(failed.status?.releases?.length ?? 0, 0);
      assert.equal(lab.machine("node-1").power, "on", "nothing was powered off");
      // Events are written in the background, right after the status that they accompany.
      await waitFor("a FenceFailed Event", async () => {
        const ev = await lab.core.listNamespacedEvent({
          namespace: "default",
          fieldSelector: "involvedObject.name=node-1,reason=FenceFailed",
        });
        return ev.items.length >= 1 || undefined;
      });

      const agent = (await custom.getClusterCustomObject({
        group: "stockade.io",
        version: "v1alpha1",
        plural: "fenceagents",
        name: "no-secret",
      })) as FenceAgent;
      const ready = agent.status?.conditions?.find((c) => c.type === "Ready");
      assert.equal(ready?.status, "False");
      assert.equal(ready?.reason, "SecretNotFound");
      assert.match(ready?.message ?? "", /Secret default\/nope does not exist/);
      const q = await waitFor("policy q not Ready", async () => {
        const p = (await custom.getClusterCustomObject({
          group: "stockade.io",
          version: "v1alpha1",
          plural: "fencingpolicies",
          name: "q",
        })) as FencingPolicy;
        return p.status?.conditions?.find((c) => c.type === "Ready" && c.status === "False");
      });
      assert.equal(q.reason, "AgentNotFound");

      await custom.deleteClusterCustomObject({ group: "stockade.io", version: "v1alpha1", plural: "nodefences", name: "node-1" });
      // The finalizer runs (nothing to clean here), then the object is gone.
      await waitFor("NodeFence node-1 gone", async () => ((await get("node-1").catch(() => undefined)) ? undefined : true));
      // A NodeFence may not pick a policy that does not select its node: it waits, saying why.
      await create("nodefences", "NodeFence", { metadata: { name: "node-1" }, spec: { nodeName: "node-1", policy: "q" } });
      const refused = await waitFor("NodeFence node-1 refusing policy q", async () => {
        const f = await get("node-1");
        return f.status?.conditions?.find((c) => c.type === "Fenced" && c.reason === "PolicyDoesNotSelectNode") ? f : undefined;
      });
      assert.equal(refused.status?.phase, undefined, "never started");
      await waitFor("a PolicyDoesNotSelectNode Event", async () => {
        const warned = await lab.core.listNamespacedEvent({
          namespace: "default",
          fieldSelector: "involvedObject.name=node-1,reason=PolicyDoesNotSelectNode",
        });
        return warned.items.length >= 1 || undefined;
      });
      // Once the node is selected it starts; the FenceAgent policy q names does not exist: the round fails (and
      // will be retried: nothing missing is final).
      await run("kubectl", ["label", "node", "node-1", "nothing=x"], { env: lab.env });
      const noAgent = await waitFor("NodeFence node-1 Failed again", async () => {
        const f = await get("node-1");
        return f.status?.phase === "Failed" ? f : undefined;
      });
      const cond = noAgent.status?.conditions?.find((c) => c.type === "Failed");
      assert.equal(cond?.reason, "FencingFailed");
      assert.match(cond?.message ?? "", /FenceAgent not-there does not exist/);
      assert.ok(noAgent.status?.nextRetryTime, "a retry is scheduled");
      const metrics = await scrape();
      assert.match(metrics, /^stockade_fences_total\{outcome="Failed",agent=""\} 2$/m);
      assert.match(metrics, /^stockade_fence_attempts_total\{agent="no-secret",type="ipmi",operation="off",outcome="Failed"\} 1$/m);
    } finally {
      const exited = once(child, "exit");
      child.kill("SIGTERM");
      const [code] = await exited;
      assert.equal(code, 0, `clean exit on SIGTERM:\n${out.slice(-2000)}`);
    }
  });
});
