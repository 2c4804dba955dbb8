// A memory limit for one lab process, as a container runtime gives one (cgroup v2 memory.max, or v1
// memory.limit_in_bytes). Node.js sizes its JavaScript heap from that limit, so a benchmark of the operator without
// it measures a process that the shipped Deployment (512Mi) never runs: on a 24 GiB host V8 gave the young
// generation 128 MiB, under 512Mi 2 MiB (docs/developer/scale.md).
import { existsSync, mkdirSync, readFileSync, rmdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";

const ROOT = "/sys/fs/cgroup";

export interface MemoryCgroup {
  /** Write a pid here to put the process in the cgroup (its children follow it). */
  procs: string;
  bytes: number;
  /** Peak memory the cgroup was charged, bytes (v1 max_usage_in_bytes, v2 memory.peak), where the kernel says. */
  peakBytes(): number | undefined;
  /** Removes the cgroup once no process is left in it. */
  remove(): void;
}

/** Creates a memory cgroup of `bytes`; throws with the reason where this machine does not allow it. */
export function createMemoryCgroup(name: string, bytes: number): MemoryCgroup {
  const v2 = existsSync(join(ROOT, "cgroup.controllers"));
  const dir = v2 ? join(ROOT, name) : join(ROOT, "memory", name);
  try {
    mkdirSync(dir, { recursive: true });
    writeFileSync(join(dir, v2 ? "memory.max" : "memory.limit_in_bytes"), String(bytes));
  } catch (err) {
    throw new Error(`cannot create a memory cgroup at ${dir} (${(err as Error).message}): run as root on a host with cgroups`, {
      cause: err,
    });
  }
  return {
    procs: join(dir, "cgroup.procs"),
    bytes,
    peakBytes() {
      try {
        return Number(readFileSync(join(dir, v2 ? "memory.peak" : "memory.max_usage_in_bytes"), "utf8").trim());
      } catch {
        return undefined;
      }
    },
    remove() {
      try {
        rmdirSync(dir);
      } catch {
        // still in use or already gone: a leftover empty cgroup is harmless
      }
    },
  };
}

/**
 * The command and arguments that run `command args` inside the cgroup from its first instruction (a shell enters it,
 * then execs): Node.js sizes its heap from the limit it finds at start.
 */
export function execInCgroup(cg: MemoryCgroup, command: string, args: readonly string[]): [string, string[]] {
  return ["/bin/sh", ["-c", 'echo $$ > "$0" && exec "$@"', cg.procs, command, ...args]];
}

/** Bytes of a Kubernetes memory quantity in the forms manifests use (512Mi, 2Gi, 1G, 1000000). */
export function memoryQuantityBytes(q: string): number {
  const m = /^(\d+(?:\.\d+)?)(Ki|Mi|Gi|Ti|k|M|G|T)?$/.exec(q.trim());
  if (!m) throw new Error(`not a memory quantity: ${q} (e.g. 512Mi)`);
  const unit = { Ki: 2 ** 10, Mi: 2 ** 20, Gi: 2 ** 30, Ti: 2 ** 40, k: 1e3, M: 1e6, G: 1e9, T: 1e12 }[m[2] ?? ""] ?? 1;
  return Math.round(Number(m[1]) * unit);
}
