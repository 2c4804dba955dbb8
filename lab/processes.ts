// Detached child processes that outlive the command that started them (`lab up` returns while the
// control plane keeps running), identified by pid *and* start time so a recycled pid is never killed.
import { spawn, type SpawnOptions } from "node:child_process";
import { openSync, closeSync, readFileSync, readdirSync, writeFileSync, rmSync, existsSync } from "node:fs";
import { setTimeout as sleep } from "node:timers/promises";

export interface ProcRef {
  pid: number;
  /** Start time in clock ticks since boot (/proc/<pid>/stat field 22). */
  start: number;
}

function statFields(pid: number): string[] | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    // The command name (field 2) may contain spaces and parentheses; everything after the last ')' is fixed.
    return stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  } catch {
    return undefined;
  }
}

export function procStart(pid: number): number | undefined {
  const f = statFields(pid);
  return f ? Number(f[19]) : undefined;
}

/** Process state letter (R, S, T = stopped, Z = zombie, ...) or undefined when gone. */
export function procState(ref: ProcRef): string | undefined {
  const f = statFields(ref.pid);
  if (!f || Number(f[19]) !== ref.start) return undefined;
  return f[0];
}

export function isAlive(ref: ProcRef | undefined): boolean {
  if (!ref) return false;
  const s = procState(ref);
  return s !== undefined && s !== "Z" && s !== "X";
}

export interface StartOptions {
  cmd: string;
  args: string[];
  logFile: string;
  env?: NodeJS.ProcessEnv;
  cwd?: string;
}

/** Starts a process in its own session (so it and its children can be signalled as a group). */
export function startDetached(o: StartOptions): ProcRef {
  const fd = openSync(o.logFile, "a");
  try {
    const opts: SpawnOptions = {
      detached: true,
      stdio: ["ignore", fd, fd],
      env: o.env ?? process.env,
      cwd: o.cwd,
    };
    const child = spawn(o.cmd, o.args, opts);
    if (child.pid === undefined) throw new Error(`could not start ${o.cmd}`);
    child.on("error", () => {}); // reported through the log and the health checks
    child.unref();
    const start = procStart(child.pid);
    if (start === undefined) throw new Error(`${o.cmd} exited immediately; see ${o.logFile}`);
    return { pid: child.pid, start };
  } finally {
    closeSync(fd);
  }
}

export function signal(ref: ProcRef | undefined, sig: NodeJS.Signals): boolean {
  if (!ref || !isAlive(ref)) return false;
  try {
    process.kill(-ref.pid, sig); // the whole process group
  } catch {
    try {
      process.kill(ref.pid, sig);
    } catch {
      return false;
    }
  }
  return true;
}

/** Pids of the process group led by `ref` (the group `signal` sends to). */
function groupPids(ref: ProcRef): number[] {
  const pids: number[] = [];
  for (const e of readdirSync("/proc")) {
    if (!/^\d+$/.test(e)) continue;
    const f = statFields(Number(e));
    if (f && Number(f[2]) === ref.pid) pids.push(Number(e));
  }
  return pids;
}

/**
 * SIGSTOPs the process group and resolves once every process in it is stopped. kill() returns before a
 * sleeping process has run its stop (seen under load: the state still S right after), so a caller that reads
 * the state, or relies on the process doing nothing more, waits here.
 */
export async function freeze(ref: ProcRef, timeoutMs = 10_000): Promise<void> {
  if (!signal(ref, "SIGSTOP")) throw new Error(`process ${ref.pid} is not running`);
  const deadline = Date.now() + timeoutMs;
  const stopped = (pid: number) => {
    const st = statFields(pid)?.[0];
    return st === undefined || st === "T" || st === "t" || st === "Z" || st === "X";
  };
  for (;;) {
    const pids = groupPids(ref);
    if (!pids.includes(ref.pid)) pids.push(ref.pid);
    if (pids.every(stopped)) return;
    if (Date.now() > deadline) throw new Error(`process group ${ref.pid} not stopped ${timeoutMs} ms after SIGSTOP`);
    await sleep(10);
  }
}

/** SIGTERM (and SIGCONT, in case it is frozen), then SIGKILL after `graceMs`; resolves once it is gone. */
export async function stop(ref: ProcRef | undefined, graceMs = 5000): Promise<void> {
  if (!ref || !isAlive(ref)) return;
  signal(ref, graceMs > 0 ? "SIGTERM" : "SIGKILL");
  signal(ref, "SIGCONT");
  const deadline = Date.now() + graceMs;
  while (isAlive(ref) && Date.now() < deadline) await sleep(50);
  if (isAlive(ref)) signal(ref, "SIGKILL");
  const hard = Date.now() + 5000;
  while (isAlive(ref) && Date.now() < hard) await sleep(20);
  if (isAlive(ref)) throw new Error(`process ${ref.pid} did not exit after SIGKILL`);
}

export function readRef(file: string): ProcRef | undefined {
  if (!existsSync(file)) return undefined;
  try {
    const ref = JSON.parse(readFileSync(file, "utf8")) as ProcRef;
    return typeof ref.pid === "number" ? ref : undefined;
  } catch {
    return undefined;
  }
}

export function writeRef(file: string, ref: ProcRef): void {
  writeFileSync(file, JSON.stringify(ref));
}

export function clearRef(file: string): void {
  rmSync(file, { force: true });
}
