// Runs an agent's helper program: no shell, input on stdin, output collected with a cap, and the whole
// process group SIGKILLed when the operation's signal aborts (fence_* agents run ipmitool, ssh... as children).
import { spawn } from "node:child_process";

export interface ChildResult {
  code: number | null;
  /** The signal that ended the child, when it did not exit on its own. */
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
}

export interface ChildOptions {
  env?: NodeJS.ProcessEnv;
  /** Written to stdin, which is then closed; without it stdin is closed at once (nothing can prompt). */
  input?: string;
  signal: AbortSignal;
}

/** Output beyond this is dropped from the front: the end of a tool's output is where its error is. */
const MAX_OUTPUT = 64 * 1024;

export class ChildAborted extends Error {
  constructor() {
    super("the operation was aborted and the process killed");
    this.name = "ChildAborted";
  }
}

/** Resolves with the child's exit; rejects with the spawn error (e.g. ENOENT) or ChildAborted. */
export function runChild(file: string, args: string[], opts: ChildOptions): Promise<ChildResult> {
  return new Promise((resolve, reject) => {
    if (opts.signal.aborted) return reject(new ChildAborted());
    // detached: its own process group, so one kill reaches the grandchildren too.
    const child = spawn(file, args, { env: opts.env ?? process.env, stdio: ["pipe", "pipe", "pipe"], detached: true, shell: false });
    let stdout = "";
    let stderr = "";
    const cap = (s: string) => (s.length > MAX_OUTPUT ? s.slice(-MAX_OUTPUT) : s);
    child.stdout.setEncoding("utf8").on("data", (d: string) => (stdout = cap(stdout + d)));
    child.stderr.setEncoding("utf8").on("data", (d: string) => (stderr = cap(stderr + d)));
    // A child that exits without reading its stdin makes our write fail with EPIPE; its exit status is what counts.
    child.stdin.on("error", () => {});
    child.stdin.end(opts.input ?? "");

    let settled = false;
    const finish = (fn: () => void) => {
      if (settled) return;
      settled = true;
      opts.signal.removeEventListener("abort", onAbort);
      fn();
    };
    const onAbort = () => {
      if (child.pid !== undefined) {
        try {
          process.kill(-child.pid, "SIGKILL");
        } catch {
          // already gone
        }
      }
      // Do not wait for 'close': a grandchild that escaped the group could hold the pipes open.
      finish(() => reject(new ChildAborted()));
    };
    opts.signal.addEventListener("abort", onAbort, { once: true });
    child.on("error", (e) => finish(() => reject(e)));
    child.on("close", (code, signal) => finish(() => resolve({ code, signal, stdout, stderr })));
  });
}
