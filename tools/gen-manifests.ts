// Generates manifests/01-crds.yaml from crds/*.yaml (npm run gen:manifests), so that `kubectl apply -f manifests/`
// installs the CRDs with the rest of the bundle. crds/ stays the source of truth; test/unit/manifests.test.ts fails
// when the committed bundle no longer matches what this produces.
import { readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { loadAllYaml } from "@kubernetes/client-node";
import { format, resolveConfig } from "prettier";

const repoRoot = resolve(import.meta.dirname, "..");
export const CRD_DIR = join(repoRoot, "crds");
export const OUTPUT = join(repoRoot, "manifests/01-crds.yaml");

/** crds/*.yaml in name order (the order kubectl applies a directory in). */
export function crdFiles(): string[] {
  return readdirSync(CRD_DIR)
    .filter((f) => f.endsWith(".yaml"))
    .sort();
}

/** The contents of manifests/01-crds.yaml, formatted with the repository's prettier config. */
export async function generate(): Promise<string> {
  const docs: string[] = [];
  for (const f of crdFiles()) {
    const text = readFileSync(join(CRD_DIR, f), "utf8").trim();
    // A file here that is not one CRD would silently change what the bundle installs.
    const objs = (loadAllYaml(text) as { kind?: string }[]).filter(Boolean);
    if (objs.length !== 1 || objs[0]?.kind !== "CustomResourceDefinition")
      throw new Error(`crds/${f}: expected exactly one CustomResourceDefinition, found ${objs.map((o) => o.kind).join(", ") || "none"}`);
    docs.push(`# from crds/${f}\n${text.replace(/^---\n/, "")}`);
  }
  const head = "# generated from crds/ by tools/gen-manifests.ts (npm run gen:manifests): edit crds/*.yaml, not this file.";
  const source = `${head}\n${docs.map((d) => `---\n${d}\n`).join("")}`;
  return format(source, { ...(await resolveConfig(OUTPUT)), parser: "yaml", filepath: OUTPUT });
}

if (import.meta.main) {
  writeFileSync(OUTPUT, await generate());
  console.log(`wrote ${OUTPUT}`);
}
