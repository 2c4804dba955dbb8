// How far the scale lab keeps its simulated kubelets renewing (issue 12): N scale nodes on the kubelet's Lease timing
// (40 s, renewed every 10 s), no pods and no operator; every 5 s it prints the age of every scale Lease (p50 / p99 /
// max: on time is ≤ ~10.5 s) and each lab process's CPU share since the last sample, from /proc.
//   node bench/lease-renewal.ts [--nodes N] [--samples S]
import { readdirSync, readFileSync } from "node:fs";
import { parseArgs } from "node:util";
import { setTimeout as sleep } from "node:timers/promises";
import { CoordinationV1Api } from "@kubernetes/client-node";
import { Bed } from "../lab/bed.ts";
import { waitFor } from "../lab/health.ts";
import { addScaleNodes, SCALE_LABEL, SCALE_LEASE_SECONDS, startScaleKwok } from "../lab/scale.ts";

const { values } = parseArgs({ options: { nodes: { type: "string", default: "2000" }, samples: { type: "string", default: "24" } } });
const n = Number(values.nodes);
const samples = Number(values.samples);
if (!Number.isInteger(n) || n < 1 || n > 10_000) throw new Error(`--nodes must be a whole number from 1 to 10000 (got ${values.nodes})`);
if (!Number.isInteger(samples) || samples < 1) throw new Error(`--samples must be a whole number ≥ 1 (got ${values.samples})`);

const bed = await Bed.up({ nodes: 1, name: "lease-renewal", runtime: "kwok", kubernetesTimings: true });
const lab = bed.lab;

/** CPU seconds so far of each process of this lab (and its control plane), by program. */
function cpuSeconds(): Map<string, number> {
  const m = new Map<string, number>();
  for (const pid of readdirSync("/proc").filter((p) => /^\d+$/.test(p))) {
    let cmd: string, stat: string;
    try {
      cmd = readFileSync(`/proc/${pid}/cmdline`, "utf8");
      stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    } catch {
      continue; // exited meanwhile
    }
    if (!cmd.includes(lab.dir)) continue;
    const f = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    const name = cmd.includes("scale-kwok") ? "scale kwok" : cmd.split("\0")[0]!.split("/").pop()!;
    m.set(name, (m.get(name) ?? 0) + (Number(f[11]) + Number(f[12])) / 100);
  }
  return m;
}

try {
  const names = new Set(await addScaleNodes(lab, n, ["zone-a", "zone-b", "zone-c"]));
  startScaleKwok(lab, SCALE_LEASE_SECONDS);
  const t0 = Date.now();
  await waitFor(
    `${n} scale nodes Ready`,
    async () =>
      (await lab.core.listNode({ labelSelector: `${SCALE_LABEL}=on` })).items.filter((x) =>
        x.status?.conditions?.some((c) => c.type === "Ready" && c.status === "True"),
      ).length >= n,
    { timeoutMs: 600_000, intervalMs: 2000 },
  );
  console.log(`${n} scale nodes Ready in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
  const coordination = lab.kc.makeApiClient(CoordinationV1Api);
  let cpu0 = cpuSeconds();
  let w0 = Date.now();
  for (let i = 0; i < samples; i++) {
    await sleep(5000);
    const list = await coordination.listNamespacedLease({ namespace: "kube-node-lease" });
    const now = Date.now();
    const ages = list.items
      .filter((l) => names.has(l.metadata?.name ?? ""))
      .map((l) => (now - new Date(l.spec?.renewTime ?? 0).getTime()) / 1000)
      .sort((a, b) => a - b);
    const cpu1 = cpuSeconds();
    const share = [...cpu1]
      .filter(([k]) => cpu1.get(k)! - (cpu0.get(k) ?? 0) > 0.01)
      .map(([k, v]) => `${k} ${(((v - (cpu0.get(k) ?? 0)) / ((now - w0) / 1000)) * 100).toFixed(0)}%`)
      .join(", ");
    [cpu0, w0] = [cpu1, now];
    const q = (p: number) => ages[Math.min(ages.length - 1, Math.floor(p * ages.length))]?.toFixed(1);
    console.log(`${ages.length} Leases: age p50 ${q(0.5)} s, p99 ${q(0.99)} s, max ${ages.at(-1)?.toFixed(1)} s | CPU ${share}`);
  }
} finally {
  await bed.down();
}
