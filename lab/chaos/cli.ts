// npm run chaos -- [--watchdog | --outages] [--schedules N] [--seed S] [--first K] [--no-etcd]: randomized fault schedules on a
// real-node lab; prints the table and exits non-zero on any violation (each with its replay command). --watchdog: the
// node agent on every node and a watchdog-only policy (docs/developer/chaos.md, "The watchdog mode"); --outages: a long
// control-plane outage in every schedule, Nodes deleted, a one-node policy beside ("The outages mode").
import { parseArgs } from "node:util";
import { formatSummary, runChaos } from "./runner.ts";

const { values } = parseArgs({
  options: {
    schedules: { type: "string", default: "3" },
    seed: { type: "string", default: "1" },
    first: { type: "string", default: "0" },
    "no-etcd": { type: "boolean", default: false },
    watchdog: { type: "boolean", default: false },
    outages: { type: "boolean", default: false },
  },
});
const num = (name: string, v: string) => {
  const n = Number(v);
  if (!Number.isInteger(n) || n < 0) throw new Error(`--${name} must be a non-negative integer (got "${v}")`);
  return n;
};
if (values.watchdog && values.outages) throw new Error("--watchdog and --outages are two modes: pick one");
const t0 = Date.now();
const summary = await runChaos({
  seed: num("seed", values.seed),
  schedules: num("schedules", values.schedules),
  first: num("first", values.first),
  etcd: !values["no-etcd"],
  mode: values.watchdog ? "watchdog" : values.outages ? "outages" : "normal",
  log: (m) => console.log(`[${((Date.now() - t0) / 1000).toFixed(0).padStart(5)} s] ${m}`),
});
console.log(`\n${formatSummary(summary)}\ntotal ${((Date.now() - t0) / 1000).toFixed(0)} s`);
const bad = summary.results.some((r) => r.violations.length) || (summary.etcd && (summary.etcd.lost || summary.etcd.problems.length));
process.exitCode = bad ? 1 : 0;
