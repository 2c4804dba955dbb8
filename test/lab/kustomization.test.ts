// manifests/Kustomization makes the bundle a kustomize base (`kubectl apply -k`, or a user's overlay listing the
// directory) without changing what `kubectl apply -f manifests/` applies. Runs the lab's kubectl offline: no cluster.
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { promisify } from "node:util";
import { loadAllYaml } from "@kubernetes/client-node";
import { ensureBins, repoRoot } from "../../lab/bins.ts";

const run = promisify(execFile);
const manifests = join(repoRoot, "manifests");
type Obj = { apiVersion: string; kind: string; metadata: { name: string; namespace?: string } };
const key = (o: Obj) => `${o.apiVersion} ${o.kind} ${o.metadata.namespace ?? ""}/${o.metadata.name}`;
const byKey = (objs: Obj[]) => new Map(objs.map((o) => [key(o), o]));
// kubectl must not find a cluster: both commands are meant to work without one.
const offline = { ...process.env, KUBECONFIG: "/dev/null" };

/** The files `kubectl apply -f manifests/` reads: every .yaml/.yml/.json file in the directory (not examples/). */
const appliedFiles = () =>
  readdirSync(manifests, { withFileTypes: true })
    .filter((e) => e.isFile() && /\.(ya?ml|json)$/.test(e.name))
    .map((e) => e.name)
    .sort();

test("manifests/Kustomization lists exactly the files `kubectl apply -f manifests/` applies, in their order", () => {
  const k = loadAllYaml(readFileSync(join(manifests, "Kustomization"), "utf8"))[0] as { kind: string; resources: string[] };
  assert.equal(k.kind, "Kustomization");
  assert.deepEqual(k.resources, appliedFiles(), "a manifest file is missing from manifests/Kustomization's resources (or listed but gone)");
});

test("`kubectl kustomize manifests/` yields the objects of the 00…08 files, unchanged", async () => {
  const { stdout } = await run(ensureBins().kubectl, ["kustomize", manifests], { env: offline, maxBuffer: 64 << 20 });
  const built = byKey((loadAllYaml(stdout) as Obj[]).filter(Boolean));
  const files = byKey(appliedFiles().flatMap((f) => (loadAllYaml(readFileSync(join(manifests, f), "utf8")) as Obj[]).filter(Boolean)));
  assert.deepEqual([...built.keys()].sort(), [...files.keys()].sort());
  for (const [k, o] of files) assert.deepEqual(built.get(k), o, `${k} differs after kustomize`);
});

test("`kubectl … -f manifests/` does not read Kustomization (it has apiVersion and kind, so it would be applied)", async () => {
  // `annotate --local` reads the directory with the same file visitor as `apply -f`, and needs no server.
  const { stdout } = await run(ensureBins().kubectl, ["annotate", "--local", "-f", manifests, "stockade.io/probe=1", "-o", "yaml"], {
    env: offline,
    maxBuffer: 64 << 20,
  });
  const objs = (loadAllYaml(stdout) as Obj[]).filter(Boolean);
  assert.ok(!objs.some((o) => o.kind === "Kustomization"), "kubectl -f read manifests/Kustomization");
  const files = appliedFiles().flatMap((f) => (loadAllYaml(readFileSync(join(manifests, f), "utf8")) as Obj[]).filter(Boolean));
  assert.deepEqual(objs.map(key).sort(), files.map(key).sort());
});
