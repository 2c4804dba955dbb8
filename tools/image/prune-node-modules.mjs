// Removes from a production node_modules what Node.js never loads on this platform, by rules that follow from
// how Node resolves and loads modules (not from a list of files seen loaded):
// - type declarations, TypeScript sources (Node never strips types under node_modules), source maps, docs;
// - `.proto` sources: the Google client reads its protos as JSON (the agent uses the REST fallback);
// - a package's test/example/benchmark/docs directories;
// - native prebuilds for other platforms;
// - builds only conditions Node never sets select: dist/browser, dist/react-native, dist/workerd of a package
//   with "exports";
// - dist-es / dist-types that no "exports" names: Node ignores "module", so it loads "main" (dist-cjs);
// - @azure/msal-browser: @azure/identity imports it only from its browser build.
// test/lab/operator-image.test.ts proves it: in the built image, every module of the operator is loaded and each
// cloud SDK is driven to a request (test/lab/image-check.mjs).
//
//   node prune-node-modules.mjs NODE_MODULES   (prints the megabytes removed)
import { existsSync, readFileSync, readdirSync, rmSync, statSync } from "node:fs";
import { join } from "node:path";

const root = process.argv[2];
if (!root) throw new Error("usage: prune-node-modules.mjs NODE_MODULES");

const fileRule = /\.(d\.[cm]?ts|[cm]?ts|map|md|markdown|proto)$/i;
const packageDirs = new Set(["test", "tests", "__tests__", "example", "examples", "benchmark", "benchmarks", "docs", ".github"]);
const otherConditionBuilds = new Set(["browser", "react-native", "workerd"]);
const browserOnlyPackages = ["@azure/msal-browser"];
const platform = `${process.platform}-${process.arch}`;
let removed = 0;

const size = (p) => {
  const st = statSync(p);
  if (!st.isDirectory()) return st.size;
  let t = 0;
  for (const e of readdirSync(p)) t += size(join(p, e));
  return t;
};
const remove = (p) => {
  removed += size(p);
  rmSync(p, { recursive: true, force: true });
};

function prunePackage(dir) {
  const pkg = JSON.parse(readFileSync(join(dir, "package.json"), "utf8"));
  const exportsText = pkg.exports === undefined ? undefined : JSON.stringify(pkg.exports);
  for (const d of packageDirs) if (existsSync(join(dir, d))) remove(join(dir, d));
  for (const d of ["dist-es", "dist-types"]) {
    if (existsSync(join(dir, d)) && !(exportsText ?? "").includes(d) && !`${pkg.main ?? ""}`.includes(d)) remove(join(dir, d));
  }
  if (exportsText !== undefined && existsSync(join(dir, "dist"))) {
    for (const d of otherConditionBuilds) if (existsSync(join(dir, "dist", d))) remove(join(dir, "dist", d));
  }
  if (existsSync(join(dir, "prebuilds"))) {
    for (const d of readdirSync(join(dir, "prebuilds"))) if (d !== platform) remove(join(dir, "prebuilds", d));
  }
}

function walk(dir) {
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const p = join(dir, e.name);
    if (e.isDirectory()) {
      if (existsSync(join(p, "package.json"))) prunePackage(p);
      if (existsSync(p)) walk(p);
    } else if (e.isFile() && fileRule.test(e.name) && e.name !== "package.json") {
      remove(p);
    }
  }
}

walk(root);
for (const p of browserOnlyPackages) if (existsSync(join(root, p))) remove(join(root, p));
console.log(`pruned ${(removed / 1e6).toFixed(1)} MB from ${root}`);
