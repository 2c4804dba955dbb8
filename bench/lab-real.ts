// Real-node lab benchmark: how long a real-node lab takes to come up and go down, and what an idle node costs.
// Up is timed from the call to every node Ready (control plane, network, BMCs, containerd and kubelet per node,
// the lab's images imported); memory is the RSS of every process in a node's cgroup subtree (init, containerd,
// kubelet), read --settle seconds after up. Root only, like real nodes.
//   node bench/lab-real.ts [--nodes N] [--settle S]
import { mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { parseArgs } from "node:util";
import { Lab } from "../lab/lab.ts";
import { realNodeImages } from "../lab/images.ts";
import { nodeCgroup, nodePids } from "../lab/real/node.ts";

const { values } = parseArgs({ options: { nodes: { type: "string", default: "4" }, settle: { type: "string", default: "20" } } });
const nodes = Number(values.nodes);
const settle = Number(values.settle);
if (!Number.isInteger(nodes) || nodes < 1 || nodes > 50) throw new Error(`--nodes must be 1-50 (got ${values.nodes})`);
if (!Number.isFinite(settle) || settle < 0) throw new Error(`--settle must be a number of seconds (got ${values.settle})`);

/** Resident memory of a process in KiB (VmRSS), 0 for one that has exited meanwhile. */
function rssKiB(pid: number): number {
  try {
    const m = /^VmRSS:\s+(\d+) kB/m.exec(readFileSync(`/proc/${pid}/status`, "utf8"));
    return m ? Number(m[1]) : 0;
  } catch {
    return 0;
  }
}

const images = await realNodeImages(); // built once and cached: not part of the lab's start-up
const dir = mkdtempSync(join(tmpdir(), "stockade-bench-lab-"));
const t0 = performance.now();
const lab = await Lab.up({ dir, nodes, runtime: "real", images });
const upSeconds = (performance.now() - t0) / 1000;
let downSeconds: number;
const perNode: { node: string; processes: number; mib: number }[] = [];
try {
  await sleep(settle * 1000);
  const slot = lab.state.real!.slot;
  for (const n of lab.nodes()) {
    const pids = nodePids(nodeCgroup(slot, n));
    perNode.push({ node: n, processes: pids.length, mib: pids.reduce((a, p) => a + rssKiB(p), 0) / 1024 });
  }
} finally {
  const t1 = performance.now();
  await lab.down();
  downSeconds = (performance.now() - t1) / 1000;
}

console.log(`real-node lab, ${nodes} node(s)`);
console.log(`  up (control plane + network + nodes Ready, images imported): ${upSeconds.toFixed(1)} s`);
for (const p of perNode) console.log(`  ${p.node}: ${p.processes} processes, RSS ${p.mib.toFixed(0)} MiB (${settle} s after up)`);
const mibs = perNode.map((p) => p.mib);
console.log(`  memory per idle node: ${Math.min(...mibs).toFixed(0)}–${Math.max(...mibs).toFixed(0)} MiB`);
console.log(`  down: ${downSeconds.toFixed(1)} s`);
