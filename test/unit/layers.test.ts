// The layers (.dependency-cruiser.mjs, docs/developer/README.md "Layers") hold on the real tree, and each rule
// bites: a fixture tree with one wrong import per rule, cruised with the same configuration, fails exactly those.
// The wrong imports live in a temporary directory, not under src/: other tests read src/ (docs.test.ts) and the
// operator image is built from it, and a file there even for a second could be read half-gone.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { copyFileSync, mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { describe, test } from "node:test";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "../..");
const config = join(root, ".dependency-cruiser.mjs");
const bin = join(root, "node_modules/dependency-cruiser/bin/dependency-cruiser.mjs");
const TREES = ["src", "lab", "test", "e2e", "bench", "tools", "demo"];

interface Violation {
  from: string;
  to: string;
  rule: { name: string; severity: string };
}

function depcruise(cwd: string, args: string[]) {
  return spawnSync(process.execPath, [bin, "--config", config, ...args], { cwd, encoding: "utf8", maxBuffer: 256 << 20 });
}

function cruise(cwd: string, dirs: string[]): Violation[] {
  const r = depcruise(cwd, ["--output-type", "json", ...dirs]);
  assert.ok(r.stdout, r.stderr);
  return (JSON.parse(r.stdout) as { summary: { violations: Violation[] } }).summary.violations;
}

/** One wrong import per rule (and a few right ones, which must pass). */
const FIXTURE: Record<string, string> = {
  "src/api/v1alpha1.ts": `import { verdict } from "../decide/verdict.ts";\nexport const GROUP = verdict;\n`,
  "src/decide/verdict.ts": [
    `import { createHash } from "node:crypto";`,
    `import { isDeepStrictEqual } from "node:util";`,
    `import { DateTime } from "luxon";`,
    `import { readFileSync } from "node:fs";`,
    `import { FenceAgentController } from "../controllers/fence-agent.ts";`,
    `export const verdict = [createHash, isDeepStrictEqual, DateTime, readFileSync, FenceAgentController];`,
  ].join("\n"),
  "src/decide/pure.ts": `import { createHash } from "node:crypto";\nimport type { V1Node } from "@kubernetes/client-node";\nexport const pure = (n: V1Node) => [createHash, n];\n`,
  "src/agents/registry.ts": `import { FenceAgentController } from "../controllers/fence-agent.ts";\nexport const driver = FenceAgentController;\n`,
  "src/kube/api.ts": `import { start } from "../operator.ts";\nexport const kube = start;\n`,
  "src/runtime/steps.ts": `import { main } from "../cli/kubectl-stockade.ts";\nexport const steps = main;\n`,
  "src/controllers/fence-agent.ts": `import { keeper } from "../admission/tls-keeper.ts";\nexport const FenceAgentController = keeper;\n`,
  "src/admission/tls-keeper.ts": `import { check } from "../cli/check.ts";\nexport const keeper = check;\n`,
  "src/cli/check.ts": `export const check = "check";\n`,
  "src/cli/kubectl-stockade.ts": `import { keeper } from "../admission/tls-keeper.ts";\nexport const main = keeper;\n`,
  "src/operator.ts": `import { lab } from "../lab/lab.ts";\nimport prettier from "prettier";\nexport const start = [lab, prettier];\n`,
  "src/main.ts": `import { start } from "./operator.ts";\nimport { gone } from "./kube/gone.ts";\nexport const main = [start, gone];\n`,
  "lab/lab.ts": `import { scale } from "./scale.ts";\nimport { helper } from "../test/unit/helper.ts";\nexport const lab = [scale, helper];\n`,
  "lab/scale.ts": `import type { lab } from "./lab.ts";\nexport const scale = (l: typeof lab) => l;\n`,
  "test/unit/helper.ts": `export const helper = () => "helper";\n`,
};

/** rule name: [from, to] of each violation it must report, and no other. */
const EXPECTED: [string, string, string][] = [
  ["api-is-a-leaf", "src/api/v1alpha1.ts", "src/decide/verdict.ts"],
  ["decide-is-pure", "src/decide/verdict.ts", "fs"],
  ["decide-is-pure", "src/decide/verdict.ts", "src/controllers/fence-agent.ts"],
  ["plumbing-not-up", "src/agents/registry.ts", "src/controllers/fence-agent.ts"],
  ["plumbing-not-up", "src/kube/api.ts", "src/operator.ts"],
  ["plumbing-not-up", "src/runtime/steps.ts", "src/cli/kubectl-stockade.ts"],
  ["controllers-not-sideways", "src/controllers/fence-agent.ts", "src/admission/tls-keeper.ts"],
  ["admission-not-sideways", "src/admission/tls-keeper.ts", "src/cli/check.ts"],
  ["cli-is-a-client", "src/cli/kubectl-stockade.ts", "src/admission/tls-keeper.ts"],
  ["src-not-harness", "src/operator.ts", "lab/lab.ts"],
  ["src-no-dev-dependencies", "src/operator.ts", "node_modules/prettier"],
  ["not-to-unresolvable", "src/main.ts", "./kube/gone.ts"],
  ["lab-not-tests", "lab/lab.ts", "test/unit/helper.ts"],
  ["no-circular", "lab/lab.ts", "lab/scale.ts"],
];

describe("layers (dependency-cruiser)", () => {
  test("the real tree breaks no rule", () => {
    const violations = cruise(root, TREES);
    assert.deepEqual(
      violations.map((v) => `${v.rule.name}: ${v.from} → ${v.to}`),
      [],
    );
  });

  test("every rule fails on a wrong import, and only there", () => {
    const dir = mkdtempSync(join(tmpdir(), "stockade-layers-"));
    try {
      for (const [path, text] of Object.entries(FIXTURE)) {
        mkdirSync(dirname(join(dir, path)), { recursive: true });
        writeFileSync(join(dir, path), text);
      }
      // The real package.json (what is a devDependency), tsconfig.json (the .ts imports) and installed packages.
      copyFileSync(join(root, "package.json"), join(dir, "package.json"));
      copyFileSync(join(root, "tsconfig.json"), join(dir, "tsconfig.json"));
      symlinkSync(join(root, "node_modules"), join(dir, "node_modules"));
      const violations = cruise(dir, ["src", "lab", "test"]);
      // A package by its name: which of its files resolves (types, CommonJS) is the package's business.
      const pkg = (to: string) => to.replace(/^node_modules\/((?:@[^/]+\/)?[^/]+)\/.*$/, "node_modules/$1");
      const got = violations.map((v) => [v.rule.name, v.from, pkg(v.to)] as const);
      const key = (v: readonly string[]) => v.join(" ");
      assert.deepEqual(got.map(key).sort(), EXPECTED.map(key).sort());
      assert.ok(violations.every((v) => v.rule.severity === "error"));
      // As npm run lint runs it: the wrong import fails the lint, naming the rule.
      const lint = depcruise(dir, ["src/decide/verdict.ts"]);
      assert.notEqual(lint.status, 0, "depcruise exits non-zero");
      assert.match(lint.stdout, /error decide-is-pure: src\/decide\/verdict\.ts → src\/controllers\/fence-agent\.ts/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
