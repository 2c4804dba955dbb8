// The whole suite with Node's test runner, three files at a time, longest first. `node --test` starts files in
// alphabetical order, so the long and mostly idle lab tests (a 320 s watch soak, the 6-minute force detach, the
// informer's backoffs) started last and ran with the machine otherwise idle, while the heavy end-to-end files had
// all run side by side before them. Starting each file by its last measured duration, longest first, lets the light
// long ones overlap the heavy ones and leaves the short unit tests for the end.
//   node test/run.ts [--record] [file ...]
// --record writes the per-file durations of this run into test/durations.json (run on a quiet machine, then commit).
// A file not in test/durations.json counts as long (it starts early): a new end-to-end file is never left for last.
import { globSync, readFileSync, writeFileSync } from "node:fs";
import { join, relative } from "node:path";
import { parseArgs } from "node:util";
import { run } from "node:test";
import { spec } from "node:test/reporters";

const root = join(import.meta.dirname, "..");
const DURATIONS = join(root, "test", "durations.json");
const PATTERNS = ["test/**/*.test.ts", "e2e/**/*.test.ts"];
const CONCURRENCY = 3;
/** Seconds assumed for a file without a recorded duration: long, so that it starts among the first. */
const UNKNOWN_SECONDS = 600;

/** Files in the order they start: longest recorded duration first, unknown ones first of all, then by name. */
export function ordered(files: string[], durations: Record<string, number>): string[] {
  const secs = (f: string) => durations[f] ?? UNKNOWN_SECONDS;
  return [...files].sort((a, b) => secs(b) - secs(a) || a.localeCompare(b));
}

function readDurations(): Record<string, number> {
  try {
    return JSON.parse(readFileSync(DURATIONS, "utf8")) as Record<string, number>;
  } catch {
    return {};
  }
}

if (import.meta.main) {
  const { values, positionals } = parseArgs({ allowPositionals: true, options: { record: { type: "boolean" } } });
  const files = positionals.length
    ? positionals.map((f) => relative(root, join(process.cwd(), f)))
    : PATTERNS.flatMap((p) => globSync(p, { cwd: root }));
  const order = ordered([...new Set(files)], readDurations());
  const seconds: Record<string, number> = {};
  const stream = run({ files: order.map((f) => join(root, f)), concurrency: CONCURRENCY, cwd: root });
  stream.on("test:fail", () => (process.exitCode = 1));
  // Top-level tests of a file run one after another: their durations add up to the file's.
  stream.on("test:pass", (e) => e.nesting === 0 && e.file && add(e.file, e.details.duration_ms));
  stream.on("test:fail", (e) => e.nesting === 0 && e.file && add(e.file, e.details.duration_ms));
  function add(file: string, ms: number): void {
    const f = relative(root, file);
    seconds[f] = (seconds[f] ?? 0) + ms / 1000;
  }
  stream.compose(spec).pipe(process.stdout);
  stream.on("end", () => {
    if (!values.record) return;
    // Merged into what was recorded: a run of some files keeps the others' durations.
    const merged = { ...readDurations(), ...Object.fromEntries(Object.entries(seconds).map(([f, s]) => [f, Math.round(s)])) };
    const out = Object.fromEntries(Object.entries(merged).sort(([a], [b]) => a.localeCompare(b)));
    writeFileSync(DURATIONS, `${JSON.stringify(out, null, 2)}\n`);
  });
}
