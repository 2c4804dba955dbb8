import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, readdirSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { freeze, isAlive, procState, signal, startDetached, stop } from "../../lab/processes.ts";

test("detached processes can be frozen, thawed and stopped, and a recycled pid is not mistaken for them", async () => {
  const dir = mkdtempSync(join(tmpdir(), "stockade-proc-"));
  const ref = startDetached({ cmd: "sleep", args: ["60"], logFile: join(dir, "log") });
  assert.ok(isAlive(ref));
  assert.equal(isAlive({ pid: ref.pid, start: ref.start + 1 }), false, "same pid, other start time: another process");
  await freeze(ref);
  assert.equal(procState(ref), "T", "freeze resolves once the process is stopped");
  signal(ref, "SIGCONT");
  await stop(ref, 1000);
  assert.equal(isAlive(ref), false);
});

test("freeze resolves only once every process of the group is stopped, children included", async () => {
  const dir = mkdtempSync(join(tmpdir(), "stockade-proc-"));
  // A supervisor shell and its child, like the lab's kwok under its restart loop.
  const ref = startDetached({ cmd: "sh", args: ["-c", "sleep 60 & wait"], logFile: join(dir, "log") });
  try {
    let child: number | undefined;
    for (let i = 0; i < 100 && child === undefined; i++) {
      child = readdirSync("/proc")
        .filter((e) => /^\d+$/.test(e) && Number(e) !== ref.pid)
        .map(Number)
        .find((pid) => {
          try {
            const st = readFileSync(`/proc/${pid}/stat`, "utf8");
            return Number(st.slice(st.lastIndexOf(")") + 2).split(" ")[2]) === ref.pid;
          } catch {
            return false;
          }
        });
      if (child === undefined) await new Promise((r) => setTimeout(r, 20));
    }
    assert.ok(child, "the shell started its child");
    await freeze(ref);
    const st = readFileSync(`/proc/${child}/stat`, "utf8");
    assert.equal(st.slice(st.lastIndexOf(")") + 2).split(" ")[0], "T", "the child is stopped too");
    assert.equal(procState(ref), "T");
  } finally {
    signal(ref, "SIGCONT");
    await stop(ref, 1000);
  }
  await assert.rejects(freeze(ref), /not running/, "a process that is gone cannot be frozen");
});
