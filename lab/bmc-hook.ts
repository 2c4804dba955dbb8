// What a simulated BMC's "set" requests do to its machine ("get" is answered by the shell wrapper, lab/bmc.ts,
// which has already acknowledged the request and runs this in the background):
//   bmc-hook.ts <lab-dir> <node> set power 0|1 [reset 1] [...]
// A failure is written to the node's bmc-hook log and leaves the power as it was, which the status says.
import { rmSync } from "node:fs";
import { setPower } from "./machine.ts";
import { paths, readState } from "./state.ts";

const [dir, node, op, ...pairs] = process.argv.slice(2);
try {
  if (!dir || !node || op !== "set") throw new Error(`usage: bmc-hook.ts <lab-dir> <node> set <param> <value>...`);
  const s = readState(dir);
  for (let i = 0; i + 1 < pairs.length; i += 2) {
    const [param, value] = [pairs[i], pairs[i + 1]];
    if (param === "power") await setPower(s, node, value === "0" ? "off" : "on", "bmc");
    else if (param === "reset" && value === "1") await setPower(s, node, "cycle", "bmc");
    else if (param === "shutdown" && value === "1")
      await setPower(s, node, "off", "bmc"); // soft-off: the OS halts
    else if (param === "boot" || param === "identify" || param === "reset" || param === "shutdown") continue;
    else throw new Error(`unsupported: ${param} ${value}`);
  }
} catch (e) {
  process.stdout.write(`${new Date().toISOString()} ${pairs.join(" ")}: ${(e as Error).message}\n`);
  process.exitCode = 1;
} finally {
  // The machine is on (or the request failed): from here the power file alone answers.
  if (dir && node) rmSync(paths(dir).node(node).bmcOnRequested, { force: true });
}
