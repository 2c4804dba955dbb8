// Detached child processes that outlive the command that started them (`lab up` returns while the
// control plane keeps running), identified by pid *and* start time so a recycled pid is never killed.
import { spawn, type SpawnOptions } from "node:child_process";
import { openSync, closeSync, readFileSync, writeFileSync, rmSync, existsSync } from "node:fs";
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
