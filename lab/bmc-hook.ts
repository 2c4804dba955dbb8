// Entry point for a simulated BMC's chassis_control program ("set" requests; "get" is answered by the
// shell wrapper). ipmi_sim runs it as: bmc-hook.ts <lab-dir> <node> set power 0|1 [reset 1] [...]
// Output on stdout is an error message for ipmi_sim; success prints nothing and exits 0.
import { setPower } from "./machine.ts";
import { readState } from "./state.ts";

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
  process.stdout.write(`${(e as Error).message}\n`);
  process.exitCode = 1;
}
