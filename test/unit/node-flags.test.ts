// The operator runs under the same V8 flags in its image, under `npm start` and in the lab (src/runtime/node-flags.ts:
// the young generation that a 512Mi limit would otherwise leave it), so the lab measures what ships.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { OPERATOR_NODE_FLAGS } from "../../src/runtime/node-flags.ts";

const root = join(import.meta.dirname, "../..");

test("the image's ENTRYPOINT and npm start pass the operator's V8 flags", () => {
  const entry = /^ENTRYPOINT\s+(\[.*\])\s*$/m.exec(readFileSync(join(root, "Dockerfile"), "utf8"))?.[1];
  assert.ok(entry, "the Dockerfile has an exec-form ENTRYPOINT");
  assert.deepEqual(JSON.parse(entry), ["node", ...OPERATOR_NODE_FLAGS, "dist/main.js"]);
  const start = (JSON.parse(readFileSync(join(root, "package.json"), "utf8")) as { scripts: Record<string, string> }).scripts.start;
  assert.equal(start, ["node", ...OPERATOR_NODE_FLAGS, "src/main.ts"].join(" "));
  assert.ok(OPERATOR_NODE_FLAGS.includes("--max-semi-space-size=16"));
});

test("the lab starts its operators with them", () => {
  const bed = readFileSync(join(root, "lab/bed.ts"), "utf8");
  assert.match(bed, /\.\.\.OPERATOR_NODE_FLAGS,\s*join\(repoRoot, "src\/main\.ts"\)/);
});
