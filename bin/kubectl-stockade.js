#!/usr/bin/env node
// Entry point of the kubectl plugin (package.json "bin": kubectl-stockade). A checkout runs its TypeScript
// source directly (Node 24 strips types); an installed package runs the build (npm run build → dist/),
// since Node does not strip types under node_modules.
import { existsSync } from "node:fs";
import { fileURLToPath } from "node:url";

const source = new URL("../src/cli/kubectl-stockade.ts", import.meta.url);
const built = new URL("../dist/cli/kubectl-stockade.js", import.meta.url);
const inNodeModules = fileURLToPath(import.meta.url)
  .split(/[\\/]/)
  .includes("node_modules");
const entry = !inNodeModules && existsSync(source) ? source : built;
if (!existsSync(entry)) {
  process.stderr.write(`kubectl-stockade: ${fileURLToPath(entry)} is missing: run "npm run build" in the Stockade repository\n`);
  process.exit(1);
}
const { main } = await import(entry.href);
const code = await main(process.argv.slice(2));
// Exit now rather than when the API client's idle keep-alive connections time out.
process.stdout.write("", () => process.exit(code));
