// The lab's pause (lab/programs/pause), built by tools/k8s-bins/build.sh, as PID 1 of its own PID
// namespace: orphans of the namespace are re-parented to it, and it must reap them (else every
// short-lived process of a pod would stay a zombie); SIGTERM and SIGINT stop it with status 0.
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import { readdirSync, readFileSync } from "node:fs";
import { setTimeout as sleep } from "node:timers/promises";
import { ensureLabPrograms } from "../../lab/bins.ts";

const statOf = (pid: number | string): string[] | undefined => {
  try {
    const s = readFileSync(`/proc/${pid}/stat`, "utf8");
    return s.slice(s.lastIndexOf(")") + 2).split(" "); // [state, ppid, ...]
  } catch {
    return undefined; // gone
  }
};
const stateOf = (pid: number) => statOf(pid)?.[0];
/** Processes whose parent is `pid`, zombies included (any of its threads may be the parent: /proc's per-thread "children" would miss some). */
const childrenOf = (pid: number): number[] =>
  readdirSync("/proc")
    .filter((p) => /^\d+$/.test(p) && statOf(p)?.[1] === String(pid))
    .map(Number);

/** Starts pause as PID 1 of a new PID namespace; resolves with its host pid once it is there. */
async function startPause(): Promise<{ unshare: ChildProcess; pid: number; exited: Promise<number | null> }> {
  const pause = ensureLabPrograms().pause;
  assert.ok(pause, "lab/programs/pause is built");
  const unshare = spawn("unshare", ["--pid", "--fork", "--kill-child", pause], { stdio: ["ignore", "ignore", "pipe"] });
  const exited = new Promise<number | null>((resolve) => unshare.on("exit", (code) => resolve(code)));
  for (const deadline = Date.now() + 5000; Date.now() < deadline; await sleep(20)) {
    const [pid] = childrenOf(unshare.pid!);
    if (pid && readFileSync(`/proc/${pid}/cmdline`, "utf8").startsWith(pause)) return { unshare, pid, exited };
  }
  unshare.kill("SIGKILL");
  throw new Error("pause did not start under unshare");
}

test("pause reaps the orphans re-parented to it, then stops on SIGTERM with status 0", { timeout: 30_000 }, async () => {
  const p = await startPause();
  try {
    // 20 background sleeps whose shell exits at once: all of them become pause's children, and their
    // exits come close together (SIGCHLD coalesces, so one signal must reap several).
    execFileSync("nsenter", ["--target", String(p.pid), "--pid", "--", "sh", "-c", "for i in $(seq 20); do sleep 1 & done"], {
      stdio: "ignore",
    });
    const orphans = childrenOf(p.pid);
    assert.equal(orphans.length, 20, `the orphans are pause's children now: ${orphans.join(" ")}`);
    for (const deadline = Date.now() + 10_000; Date.now() < deadline && orphans.some((o) => stateOf(o) !== undefined);) await sleep(50);
    assert.deepEqual(
      orphans.filter((o) => stateOf(o) !== undefined).map((o) => `${o}:${stateOf(o)}`),
      [],
      "every orphan reaped, no zombie left",
    );
    assert.deepEqual(childrenOf(p.pid), []);
    assert.equal(stateOf(p.pid), "S", "pause itself still waits");
    process.kill(p.pid, "SIGTERM");
    assert.equal(await p.exited, 0, "exit status 0 after SIGTERM");
  } finally {
    p.unshare.kill("SIGKILL");
  }
});

test("pause stops on SIGINT with status 0", { timeout: 30_000 }, async () => {
  const p = await startPause();
  try {
    await sleep(200);
    assert.equal(stateOf(p.pid), "S", "running, not exiting on its own");
    process.kill(p.pid, "SIGINT");
    assert.equal(await p.exited, 0);
  } finally {
    p.unshare.kill("SIGKILL");
  }
});
