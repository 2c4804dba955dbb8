import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { isAlive, procState, signal, startDetached, stop } from "../../lab/processes.ts";

test("detached processes can be frozen, thawed and stopped, and a recycled pid is not mistaken for them", async () => {
  const dir = mkdtempSync(join(tmpdir(), "stockade-proc-"));
  const ref = startDetached({ cmd: "sleep", args: ["60"], logFile: join(dir, "log") });
  assert.ok(isAlive(ref));
  assert.equal(isAlive({ pid: ref.pid, start: ref.start + 1 }), false, "same pid, other start time: another process");
  signal(ref, "SIGSTOP");
  await new Promise((r) => setTimeout(r, 50));
  assert.equal(procState(ref), "T");
  signal(ref, "SIGCONT");
  await stop(ref, 1000);
  assert.equal(isAlive(ref), false);
});
