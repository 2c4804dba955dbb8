// The kubectl plugin installed as users install it (README "The kubectl plugin"): the repository packed with
// `npm pack` (whose prepack builds dist/), then `npm install -g --prefix DIR` of the tarball; DIR/bin/kubectl-stockade
// must run from the installed package, with Node.js 24 first on PATH. The pack runs in a copy of what it reads, so
// its build does not write the checkout's dist/ while another test (prod-install) builds or packs it.
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync, spawnSync } from "node:child_process";
import { cpSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, symlinkSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const repo = fileURLToPath(new URL("../..", import.meta.url));
const pkg = JSON.parse(readFileSync(join(repo, "package.json"), "utf8")) as { version: string; bin: Record<string, string> };

test("npm pack + npm install -g puts kubectl-stockade on PATH, and it runs from the installed package", { timeout: 300_000 }, (t) => {
  const tmp = mkdtempSync(join(tmpdir(), "stockade-plugin-"));
  t.after(() => rmSync(tmp, { recursive: true, force: true }));
  const env = {
    ...process.env,
    PATH: `${dirname(process.execPath)}:${process.env.PATH}`,
    npm_config_audit: "false",
    npm_config_fund: "false",
  };
  assert.deepEqual(Object.keys(pkg.bin), ["kubectl-stockade"]);
  const stage = join(tmp, "stage");
  mkdirSync(stage);
  for (const f of [
    "package.json",
    "package-lock.json",
    "tsconfig.json",
    "tsconfig.build.json",
    "README.md",
    "bin",
    "src",
    "crds",
    "manifests",
  ])
    cpSync(join(repo, f), join(stage, f), { recursive: true });
  symlinkSync(join(repo, "node_modules"), join(stage, "node_modules"));
  execFileSync("npm", ["pack", "--pack-destination", tmp], { cwd: stage, env, stdio: "pipe" });
  const tgz = readdirSync(tmp).filter((f) => f.endsWith(".tgz"));
  assert.deepEqual(tgz, [`stockade-${pkg.version}.tgz`]);
  const prefix = join(tmp, "global");
  execFileSync("npm", ["install", "-g", "--prefer-offline", "--prefix", prefix, join(tmp, tgz[0]!)], { cwd: tmp, env, stdio: "pipe" });
  const bin = join(prefix, "bin", "kubectl-stockade");
  const version = spawnSync(bin, ["version"], { cwd: tmp, env, encoding: "utf8" });
  assert.equal(version.status, 0, version.stderr);
  assert.equal(version.stdout, `kubectl-stockade ${pkg.version} (Node.js ${process.versions.node})\n`);
  const help = spawnSync(bin, ["--help"], { cwd: tmp, env, encoding: "utf8" });
  assert.equal(help.status, 0, help.stderr);
  assert.match(help.stdout, /^kubectl stockade: see and steer Stockade/);
  assert.match(help.stdout, /^ {2}version\s/m);
  // It ran the installed build, not this checkout's source.
  const installed = join(prefix, "lib", "node_modules", "stockade");
  assert.ok(readdirSync(join(installed, "dist", "cli")).includes("kubectl-stockade.js"));
  assert.ok(!readdirSync(installed).includes("src"));
});
