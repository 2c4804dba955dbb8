// test/run.ts starts the suite's files longest first (by test/durations.json), unknown ones first of all.
import { test } from "node:test";
import assert from "node:assert/strict";
import { globSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { ordered } from "../run.ts";

test("files start by their recorded duration, longest first; a file without one first of all; ties by name", () => {
  const durations = { "test/unit/a.test.ts": 1, "e2e/long.test.ts": 500, "test/lab/mid.test.ts": 60, "test/unit/b.test.ts": 1 };
  assert.deepEqual(
    ordered(["test/unit/b.test.ts", "test/unit/a.test.ts", "test/lab/mid.test.ts", "e2e/new.test.ts", "e2e/long.test.ts"], durations),
    ["e2e/new.test.ts", "e2e/long.test.ts", "test/lab/mid.test.ts", "test/unit/a.test.ts", "test/unit/b.test.ts"],
  );
});

test("test/durations.json names only files that exist (a renamed file would start first, as unknown)", () => {
  const root = join(import.meta.dirname, "..", "..");
  const recorded = Object.keys(JSON.parse(readFileSync(join(root, "test", "durations.json"), "utf8")) as Record<string, number>);
  const files = new Set(["test/**/*.test.ts", "e2e/**/*.test.ts"].flatMap((p) => globSync(p, { cwd: root })));
  assert.deepEqual(
    recorded.filter((f) => !files.has(f)),
    [],
  );
});
