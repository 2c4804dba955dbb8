// `npm start` with no cluster configured says so and names the ways out, instead of an "Invalid URL".
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { kubeconfigSource, SERVICE_ACCOUNT_TOKEN } from "../../src/kube/kubeconfig-source.ts";

const main = join(dirname(fileURLToPath(import.meta.url)), "../../src/main.ts");
const none = () => false;

test("the order: --kubeconfig/KUBECONFIG, the in-cluster service account, ~/.kube/config", () => {
  const all = (_: string) => true;
  const pod = { KUBERNETES_SERVICE_HOST: "10.96.0.1", KUBERNETES_SERVICE_PORT: "443" };
  assert.deepEqual(kubeconfigSource({ kubeconfig: "/k", env: pod, home: "/h", exists: all }), { kind: "file", path: "/k" });
  assert.deepEqual(kubeconfigSource({ kubeconfig: undefined, env: pod, home: "/h", exists: all }), { kind: "in-cluster" });
  assert.deepEqual(kubeconfigSource({ kubeconfig: undefined, env: {}, home: "/h", exists: (p) => p === "/h/.kube/config" }), {
    kind: "file",
    path: "/h/.kube/config",
  });
});

test("no cluster at all: the message names KUBECONFIG, npm run demo and what was looked for", () => {
  const s = kubeconfigSource({ kubeconfig: undefined, env: {}, home: "/h", exists: none });
  assert.equal(s.kind, "none");
  assert.ok(s.kind === "none");
  assert.match(s.message, /^no Kubernetes cluster configured/);
  assert.match(s.message, /KUBECONFIG=\/path\/to\/kubeconfig npm start/);
  assert.match(s.message, /`npm run demo`/);
  assert.match(s.message, /there is no \/h\/\.kube\/config/);
  assert.match(s.message, /not a pod \(no KUBERNETES_SERVICE_HOST\)/);
  assert.doesNotMatch(s.message, /undefined/);
});

test("in a pod without a service account token: says which token is missing and how to run it", () => {
  const s = kubeconfigSource({
    kubeconfig: undefined,
    env: { KUBERNETES_SERVICE_HOST: "10.96.0.1", KUBERNETES_SERVICE_PORT: "443" },
    home: "/",
    exists: (p) => p !== SERVICE_ACCOUNT_TOKEN,
  });
  assert.ok(s.kind === "none");
  assert.match(
    s.message,
    /running in a pod \(KUBERNETES_SERVICE_HOST=10\.96\.0\.1\) without a service account token at \/var\/run\/secrets/,
  );
  assert.match(s.message, /automountServiceAccountToken/);
  assert.match(s.message, /KUBECONFIG/);
});

/** Runs src/main.ts with exactly `env` (plus PATH), never near a cluster. */
async function start(env: Record<string, string>): Promise<{ code: number; err: string }> {
  try {
    const r = await promisify(execFile)(process.execPath, [main, "--health-bind-address", "0", "--metrics-bind-address", "0"], {
      env: { PATH: process.env.PATH ?? "", ...env },
      timeout: 30_000,
    });
    return { code: 0, err: r.stderr };
  } catch (e) {
    const err = e as { code: number; stderr: string };
    return { code: err.code, err: err.stderr };
  }
}

test("src/main.ts with an empty HOME and no KUBECONFIG exits 2 with the message", async () => {
  const home = mkdtempSync(join(tmpdir(), "stockade-home-"));
  const r = await start({ HOME: home });
  assert.equal(r.code, 2);
  assert.equal(
    r.err,
    `stockade: no Kubernetes cluster configured: neither --kubeconfig nor KUBECONFIG is set, there is no ${home}/.kube/config, ` +
      "and this is not a pod (no KUBERNETES_SERVICE_HOST). Point KUBECONFIG at a cluster's kubeconfig " +
      "(KUBECONFIG=/path/to/kubeconfig npm start), or run `npm run demo` for a local lab cluster with Stockade fencing a node in it\n",
  );
  // ~/.kube/config is then used: an empty one has no cluster.
  mkdirSync(join(home, ".kube"));
  writeFileSync(join(home, ".kube", "config"), "apiVersion: v1\nkind: Config\n");
  const found = await start({ HOME: home });
  assert.equal(found.code, 2);
  assert.match(found.err, new RegExp(`cannot load kubeconfig ${home}/\\.kube/config: no cluster in the configuration`));
});

test(
  "src/main.ts in a pod's environment without a service account token exits 2 with the message",
  { skip: existsSync(SERVICE_ACCOUNT_TOKEN) },
  async () => {
    const r = await start({ HOME: "/", KUBERNETES_SERVICE_HOST: "10.96.0.1", KUBERNETES_SERVICE_PORT: "443" });
    assert.equal(r.code, 2);
    assert.match(r.err, /^stockade: running in a pod \(KUBERNETES_SERVICE_HOST=10\.96\.0\.1\) without a service account token/);
  },
);
