// Machine-wide kernel settings a kubelet changes at start (seen here: vm.overcommit_memory=1,
// kernel.panic=10, kernel.panic_on_oops=1). The first real-node lab records the machine's values; the
// last one to go down puts them back, so a lab leaves the machine as it found it.
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { dirname } from "node:path";

export const KUBELET_SYSCTLS = ["vm/overcommit_memory", "kernel/panic", "kernel/panic_on_oops"] as const;
export const SAVED_FILE = "/run/stockade-lab/sysctls-before-labs.json";

const read = (key: string) => readFileSync(`/proc/sys/${key}`, "utf8").trim();

/** Records the machine's values unless a lab already did (and has not restored them yet). */
export function recordHostSettings(file = SAVED_FILE): void {
  if (existsSync(file)) return;
  mkdirSync(dirname(file), { recursive: true });
  writeFileSync(file, JSON.stringify(Object.fromEntries(KUBELET_SYSCTLS.map((k) => [k, read(k)]))));
}

/** Writes the recorded values back; returns what differed. */
export function restoreHostSettings(file = SAVED_FILE): string[] {
  if (!existsSync(file)) return [];
  const saved = JSON.parse(readFileSync(file, "utf8")) as Record<string, string>;
  const changed: string[] = [];
  for (const [k, v] of Object.entries(saved)) {
    if (read(k) !== v) {
      writeFileSync(`/proc/sys/${k}`, v);
      changed.push(`${k.replace("/", ".")}=${v}`);
    }
  }
  rmSync(file, { force: true });
  return changed;
}
