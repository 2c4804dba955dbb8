// tools/setup.sh demo prepares only what `npm run demo` uses (real nodes, the operator image): no kwok, no Redfish
// emulator, no moto, none of the test-only Debian packages. Checked with --print, which changes nothing.
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdtempSync, readFileSync, symlinkSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { REAL_NODE_BUILD_TARGETS, repoRoot } from "../../lab/bins.ts";

const setup = join(repoRoot, "tools/setup.sh");

/** tools/setup.sh with `args`, PATH holding only the few programs the script itself runs: every package looks missing. */
async function print(...args: string[]): Promise<{ packages: string[]; runs: string[]; meanwhile: string[] }> {
  const bin = mkdtempSync(join(tmpdir(), "stockade-setup-path-"));
  for (const p of ["dirname", "id", "grep"]) symlinkSync(`/usr/bin/${p}`, join(bin, p));
  const { stdout } = await promisify(execFile)("/bin/bash", [setup, ...args, "--print"], { env: { PATH: bin, HOME: "/nonexistent" } });
  const lines = stdout.split("\n");
  const packages = (/would install Debian packages: (.*)$/m.exec(stdout)?.[1] ?? "").split(" ").filter((p) => p && p !== "none");
  const runs = lines
    .filter((l) => l.startsWith("setup: would run: "))
    .map((l) => l.slice("setup: would run: ".length).replaceAll(repoRoot, "."));
  const meanwhile = lines
    .filter((l) => l.startsWith("setup: would run meanwhile: "))
    .map((l) => l.slice("setup: would run meanwhile: ".length).replaceAll(repoRoot, "."));
  return { packages, runs, meanwhile };
}

test("the demo profile builds a real-node lab's binaries only: no kwok, no Redfish emulator, no moto", async () => {
  const { runs } = await print("demo");
  assert.deepEqual(runs, [`bash ./tools/k8s-bins/build.sh ${REAL_NODE_BUILD_TARGETS.join(" ")}`]);
  assert.ok(!(REAL_NODE_BUILD_TARGETS as readonly string[]).includes("kwok"));
  const all = await print();
  assert.deepEqual(all.runs, ["bash ./tools/moto.sh", "bash ./tools/k8s-bins/build.sh", "bash ./tools/redfish-mock/build.sh"]);
});

test("the demo profile builds the operator image while the Go components build; the full profile does not build it", async () => {
  assert.deepEqual((await print("demo")).meanwhile, ["./node_modules/.bin/node ./tools/image/build.ts"]);
  assert.deepEqual((await print()).meanwhile, []);
});

test("the demo profile installs the real nodes' and BMCs' packages, not the tests' own", async () => {
  const demo = await print("demo");
  const all = await print("all");
  for (const p of ["openssl", "openipmi", "ipmitool", "containerd", "runc", "iptables", "iproute2"]) {
    assert.ok(demo.packages.includes(p), `demo installs ${p}: ${demo.packages.join(" ")}`);
    assert.ok(all.packages.includes(p), `all installs ${p}`);
  }
  assert.ok(all.packages.includes("redfishtool"), all.packages.join(" "));
  assert.ok(!demo.packages.includes("redfishtool"), demo.packages.join(" "));
  assert.deepEqual(
    demo.packages.filter((p) => p === "fence-agents" || p.startsWith("python3-")),
    [],
  );
  assert.deepEqual(
    all.packages
      .filter((p) => !demo.packages.includes(p))
      .filter((p) => !(p === "fence-agents" || p === "redfishtool" || p.startsWith("python3-"))),
    [],
    "the demo leaves out only the tests' packages",
  );
});

test("npm run demo uses the demo profile", () => {
  const pkg = JSON.parse(readFileSync(join(repoRoot, "package.json"), "utf8")) as { scripts: Record<string, string> };
  assert.match(pkg.scripts.demo!, /&& bash tools\/setup\.sh demo && node demo\/run\.ts$/);
  assert.match(pkg.scripts.setup!, /^bash tools\/setup\.sh$/);
});
