// The users' docs give commands that run without a cluster; these run them as written, offline: the README's kustomize
// overlay (also in docs/getting-started.md), beside a copy of the repository named `stockade` as its `resources:`
// line assumes, docs/configuration.md's overlay that adds a flag (with the lab's kubectl), and every kubectl stockade
// command and flag the users' pages show (against the plugin's own help).
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { cpSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { loadAllYaml } from "@kubernetes/client-node";
import { ensureBins, repoRoot } from "../../lab/bins.ts";
import { parseConfig } from "../../src/config.ts";

const run = promisify(execFile);
const offline = { ...process.env, KUBECONFIG: "/dev/null" };
type Container = { name: string; image: string; args?: string[] };
type Obj = { kind: string; metadata: { name: string; namespace?: string }; spec?: { template?: { spec?: { containers?: Container[] } } } };

/** The first ```yaml block of a page that is a Kustomization. */
function overlay(page: string): string {
  const md = readFileSync(join(repoRoot, page), "utf8");
  const yaml = /```yaml\n(apiVersion: kustomize\.config\.k8s\.io[\s\S]*?)```/.exec(md)?.[1];
  assert.ok(yaml, `${page} has a kustomization.yaml`);
  return yaml;
}

/** `kubectl kustomize my-stockade/` in a directory that holds `stockade/manifests` (a copy of the bundle) and `my-stockade/`. */
async function build(kustomization: string): Promise<Obj[]> {
  const dir = mkdtempSync(join(tmpdir(), "stockade-docs-"));
  cpSync(join(repoRoot, "manifests"), join(dir, "stockade/manifests"), { recursive: true });
  mkdirSync(join(dir, "my-stockade"));
  writeFileSync(join(dir, "my-stockade/kustomization.yaml"), kustomization);
  const { stdout } = await run(ensureBins().kubectl, ["kustomize", "my-stockade/"], { cwd: dir, env: offline, maxBuffer: 64 << 20 });
  return (loadAllYaml(stdout) as Obj[]).filter(Boolean);
}

const operator = (objs: Obj[]) => {
  const d = objs.find((o) => o.kind === "Deployment" && o.metadata.name === "stockade");
  assert.ok(d, "the overlay yields the Deployment stockade");
  return d.spec!.template!.spec!.containers!.find((c) => c.name === "operator")!;
};

test("the README's overlay, as written: `kubectl kustomize my-stockade/` is the bundle with the README's image", async () => {
  const text = overlay("README.md");
  assert.equal(overlay("docs/getting-started.md"), text, "getting started gives the README's overlay");
  const [objs, base] = await Promise.all([
    build(text),
    run(ensureBins().kubectl, ["kustomize", join(repoRoot, "manifests")], { env: offline, maxBuffer: 64 << 20 }),
  ]);
  const key = (o: Obj) => `${o.kind} ${o.metadata.namespace ?? ""}/${o.metadata.name}`;
  const bundle = (loadAllYaml(base.stdout) as Obj[]).filter(Boolean);
  assert.deepEqual(objs.map(key).sort(), bundle.map(key).sort(), "the overlay installs the whole bundle");
  assert.equal(operator(objs).image, "registry.example.com/stockade:0.1.0");
  assert.equal(operator(bundle).image, "ghcr.io/stockade-io/stockade:0.1.0", "the overlay's images: name is the bundle's image");
});

test("docs/configuration.md's overlay adds its flag to the operator's args, and the operator accepts them", async () => {
  const objs = await build(overlay("docs/configuration.md"));
  const args = operator(objs).args ?? [];
  assert.equal(args.at(-1), "--fence-workers=16");
  assert.equal(operator(objs).image, "registry.example.com/stockade:0.1.0");
  const config = parseConfig(args, {});
  assert.equal(config?.fenceWorkers, 16);
  assert.equal(config?.leaderElect, true);
});

test("every `kubectl stockade COMMAND --flag` on a users' page is a command and flag of the plugin", async () => {
  const pages = [
    "README.md",
    ...readdirSync(join(repoRoot, "docs"))
      .filter((f) => f.endsWith(".md"))
      .map((f) => `docs/${f}`),
  ];
  const used = new Map<string, Set<string>>();
  for (const page of pages)
    for (const m of readFileSync(join(repoRoot, page), "utf8").matchAll(/kubectl stockade ([a-z]+)([^\n#`]*)/g)) {
      const flags = used.get(m[1]!) ?? new Set<string>();
      for (const f of m[2]!.matchAll(/(?<![\w-])--[a-z][a-z-]*/g)) flags.add(f[0]);
      used.set(m[1]!, flags);
    }
  assert.ok(used.get("fence")?.has("--dry-run"), "the docs show fence --dry-run");
  const plugin = join(repoRoot, "bin/kubectl-stockade.js");
  const helps = await Promise.all(
    [...used.keys()].map(async (command) => (await run(process.execPath, [plugin, command, "--help"])).stdout),
  );
  for (const [i, [command, flags]] of [...used].entries()) {
    assert.match(helps[i]!, new RegExp(`^Usage: kubectl stockade ${command}\\b`, "m"), `${command} is a command of the plugin`);
    for (const flag of flags) assert.ok(helps[i]!.includes(flag), `kubectl stockade ${command} has no flag ${flag}`);
  }
});
