// Controllers act on what the caches show, so none runs before every cache has synced: an operator that
// may not list one kind (RBAC) serves /readyz 503 naming that cache and leaves a NodeFence untouched;
// once the list is allowed the cache syncs and the controllers start.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { execFile, spawn } from "node:child_process";
import { once } from "node:events";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { setTimeout as sleep } from "node:timers/promises";
import { CustomObjectsApi, RbacAuthorizationV1Api } from "@kubernetes/client-node";
import { Lab } from "../../lab/lab.ts";
import { repoRoot } from "../../lab/bins.ts";
import { waitFor } from "../../lab/health.ts";
import { createPki, writeKubeconfig } from "../../lab/pki.ts";
import { paths } from "../../lab/state.ts";
import type { NodeFence } from "../../src/api/v1alpha1.ts";

const run = promisify(execFile);
const USER = "stockade-no-pdbs";

let lab: Lab;
before(async () => {
  lab = await Lab.up({ dir: mkdtempSync(join(tmpdir(), "stockade-sync-")), nodes: 1 });
  await run("kubectl", ["apply", "-f", join(repoRoot, "crds")], { env: lab.env });
  await lab.waitForCrds();
});
after(async () => {
  await lab?.down();
});

test("no controller runs until every cache has synced; /readyz names the caches that have not", async () => {
  const rbac = lab.kc.makeApiClient(RbacAuthorizationV1Api);
  const bind = async (name: string, apiGroups: string[]) => {
    await rbac.createClusterRole({ body: { metadata: { name }, rules: [{ apiGroups, resources: ["*"], verbs: ["*"] }] } });
    await rbac.createClusterRoleBinding({
      body: {
        metadata: { name },
        roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "ClusterRole", name },
        subjects: [{ apiGroup: "rbac.authorization.k8s.io", kind: "User", name: USER }],
      },
    });
  };
  // Everything the operator reads and writes, except PodDisruptionBudgets (group policy).
  await bind("all-but-pdbs", ["", "coordination.k8s.io", "storage.k8s.io", "stockade.io", "events.k8s.io"]);
  const pki = createPki(paths(lab.dir).pki, [{ name: USER, cn: USER, groups: [] }]);
  const kubeconfig = join(lab.dir, `${USER}.kubeconfig`);
  writeKubeconfig(kubeconfig, { server: lab.state.apiserverUrl, caCert: pki.caCert, ...pki.client(USER), user: USER });

  const custom = lab.kc.makeApiClient(CustomObjectsApi);
  await custom.createClusterCustomObject({
    group: "stockade.io",
    version: "v1alpha1",
    plural: "nodefences",
    body: { apiVersion: "stockade.io/v1alpha1", kind: "NodeFence", metadata: { name: "node-1" }, spec: { nodeName: "node-1" } },
  });
  const fence = async () =>
    (await custom.getClusterCustomObject({ group: "stockade.io", version: "v1alpha1", plural: "nodefences", name: "node-1" })) as NodeFence;

  const child = spawn(
    process.execPath,
    [
      join(repoRoot, "src/main.ts"),
      "--leader-elect=false",
      "--health-bind-address",
      "127.0.0.1:0",
      "--metrics-bind-address",
      "0",
      "--webhook-bind-address",
      "0",
    ],
    { env: { ...process.env, KUBECONFIG: kubeconfig } },
  );
  let out = "";
  child.stdout.on("data", (b: Buffer) => (out += b.toString()));
  child.stderr.on("data", (b: Buffer) => (out += b.toString()));
  try {
    const addr = await waitFor("health address in the log", async () => /"address":"([\d.]+:\d+)"/.exec(out)?.[1], { timeoutMs: 20_000 });
    const readyz = async () => {
      const r = await fetch(`http://${addr}/readyz`);
      return { status: r.status, body: await r.text() };
    };
    await waitFor("the PDB list to be refused", () => /watch on \/apis\/policy\/v1\/poddisruptionbudgets failed/.test(out), {
      timeoutMs: 20_000,
    });
    await sleep(5_000);
    assert.deepEqual(await readyz(), { status: 503, body: "caches not synced: poddisruptionbudgets\n" });
    assert.doesNotMatch(out, /controllers running/);
    assert.equal((await fence()).status, undefined, "the NodeFence was not touched");

    await bind("pdbs", ["policy"]);
    await waitFor("controllers running", () => /controllers running/.test(out), { timeoutMs: 45_000 });
    await waitFor("/readyz 200", async () => ((await readyz()).status === 200 ? true : undefined), { timeoutMs: 10_000 });
    // No FencingPolicy here: the fence says so (a retryable wait, not a failure) once the controllers run.
    await waitFor(
      "the NodeFence worked on",
      async () => ((await fence()).status?.conditions?.some((c) => c.reason === "NoPolicy") ? true : undefined),
      {
        timeoutMs: 30_000,
      },
    );
  } finally {
    const exited = once(child, "exit");
    child.kill("SIGTERM");
    const [code] = await exited;
    assert.equal(code, 0, `clean exit on SIGTERM:\n${out.slice(-2000)}`);
  }
});
