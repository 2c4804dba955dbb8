// Soak benchmark (issue 31): healthy real nodes under load, at Kubernetes' default timings (40 s Leases renewed every
// 10 s, node-monitor grace 50 s) with a FencingPolicy that sets no detection at all (the shipped defaults: a silent
// node's own expired Lease counts), for a long time. Nothing fails on purpose, so every NodeFence is a false positive.
//   node bench/soak.ts [--minutes M] [--burners B] [--churn-seconds S] [--replicas R]
// Load: B processes that each spin one core for the whole soak (default: one per core, at the kubelets' own priority),
// and every S seconds one pod of an R-replica StatefulSet of real writers deleted (its StatefulSet starts it again, so
// the kubelets keep tearing down and starting containers). Prints, from watches and polls here: NodeFences created
// (the false positives), pods given NodeDown, nodes marked Ready=Unknown, each node's longest gap between two Lease
// renewals as seen here (against its leaseDurationSeconds), the operator's verdicts other than Healthy, and the
// invariant over the whole run. Exits 1 on any NodeFence or violation.
import { parseArgs } from "node:util";
import { spawn, type ChildProcess } from "node:child_process";
import { availableParallelism } from "node:os";
import { setTimeout as sleep } from "node:timers/promises";
import { CoordinationV1Api } from "@kubernetes/client-node";
import { Bed, NS } from "../lab/bed.ts";
import type { NodeFence } from "../src/api/v1alpha1.ts";
import { GROUP, VERSION } from "../src/api/v1alpha1.ts";

const { values } = parseArgs({
  options: {
    minutes: { type: "string", default: "30" },
    burners: { type: "string", default: String(availableParallelism()) },
    "churn-seconds": { type: "string", default: "20" },
    replicas: { type: "string", default: "3" },
  },
});
const int = (name: keyof typeof values, min: number, max: number) => {
  const v = Number(values[name]);
  if (!Number.isInteger(v) || v < min || v > max) throw new Error(`--${name} must be an integer ${min}-${max} (got ${values[name]})`);
  return v;
};
const minutes = int("minutes", 1, 600);
const burners = int("burners", 0, 64);
const churnSeconds = int("churn-seconds", 1, 3600);
const replicas = int("replicas", 1, 4);

const bed = await Bed.up({ nodes: 4, name: "soak", kubernetesTimings: true });
const spinning: ChildProcess[] = [];
try {
  await bed.policy("default", { guards: { maxUnhealthyNodes: 2, maxConcurrentFences: 2 } });
  const operator = await bed.startOperator();
  await bed.statefulSet("db", replicas);
  const coordination = bed.lab.kc.makeApiClient(CoordinationV1Api);

  // Each node's Lease: when this process saw its renewTime change (monotonic), and the longest gap between two changes.
  const leases = new Map<string, { renewTime: string; seenAt: number; longestMs: number; duration: number }>();
  const pollLeases = async () => {
    const now = performance.now();
    for (const l of (await coordination.listNamespacedLease({ namespace: "kube-node-lease" })).items) {
      const node = l.metadata?.name ?? "";
      const renewTime = String(l.spec?.renewTime ?? "");
      const s = leases.get(node);
      if (!s) leases.set(node, { renewTime, seenAt: now, longestMs: 0, duration: l.spec?.leaseDurationSeconds ?? 0 });
      else if (s.renewTime !== renewTime) {
        s.longestMs = Math.max(s.longestMs, now - s.seenAt);
        Object.assign(s, { renewTime, seenAt: now });
      }
    }
  };
  const fences = new Map<string, NodeFence>();
  const nodeDown = new Set<string>();
  const pollFences = async () => {
    const list = (await bed.custom.listClusterCustomObject({ group: GROUP, version: VERSION, plural: "nodefences" })) as {
      items: NodeFence[];
    };
    for (const f of list.items) if (!fences.has(f.metadata?.name ?? "")) fences.set(f.metadata?.name ?? "", f);
    for (const p of (await bed.lab.core.listNamespacedPod({ namespace: NS })).items)
      if (p.status?.conditions?.some((c) => c.type === "NodeDown" && c.status === "True")) nodeDown.add(p.metadata?.uid ?? "");
  };

  for (let i = 0; i < burners; i++) spinning.push(spawn(process.execPath, ["-e", "for (;;) {}"], { stdio: "ignore" }));
  const start = Date.now();
  const t0 = performance.now();
  const end = t0 + minutes * 60_000;
  console.log(`soak: ${minutes} min, ${burners} spinning processes, one of ${replicas} pods deleted every ${churnSeconds} s`);
  let nextChurn = t0 + churnSeconds * 1000;
  let churned = 0;
  let lastReport = t0;
  while (performance.now() < end) {
    await Promise.all([pollLeases(), pollFences()]);
    if (performance.now() >= nextChurn) {
      nextChurn += churnSeconds * 1000;
      const pods = (await bed.pods("db")).filter((p) => p.status?.phase === "Running" && !p.metadata?.deletionTimestamp);
      const victim = pods[churned % Math.max(1, pods.length)];
      if (victim) {
        await bed.lab.core.deleteNamespacedPod({ namespace: NS, name: victim.metadata!.name! });
        churned++;
      }
    }
    if (performance.now() - lastReport >= 60_000) {
      lastReport = performance.now();
      const worst = Math.max(0, ...[...leases.values()].map((s) => s.longestMs)) / 1000;
      console.log(
        `  ${((lastReport - t0) / 60_000).toFixed(0)} min: NodeFences ${fences.size}, longest Lease gap ${worst.toFixed(1)} s, pods deleted ${churned}`,
      );
    }
    await sleep(1_000);
  }
  for (const c of spinning.splice(0)) c.kill("SIGKILL");

  const unknown = new Set(
    bed.rec
      .timeline()
      .filter((e) => e.t >= start && e.source === "node" && e.ready === "Unknown")
      .map((e) => (e.source === "node" ? e.name : "")),
  );
  const verdicts = bed
    .operatorLog(operator)
    .filter((l) => l.time >= start && typeof l.health === "string" && l.health !== "Healthy")
    .map((l) => `${String(l.node)} ${String(l.health)}`);
  console.log(`false positives (NodeFences created): ${fences.size}${fences.size ? `: ${[...fences.keys()].join(", ")}` : ""}`);
  for (const f of fences.values()) console.log(`  ${f.metadata?.name}: ${f.spec.reason}`);
  console.log(`pods given NodeDown: ${nodeDown.size}; nodes marked Ready=Unknown: ${unknown.size}; pods deleted (churn): ${churned}`);
  for (const [node, s] of [...leases].sort()) {
    console.log(`  ${node}: longest gap between Lease renewals ${(s.longestMs / 1000).toFixed(1)} s (leaseDurationSeconds ${s.duration})`);
  }
  console.log(
    `operator verdicts other than Healthy during the soak: ${verdicts.length}${verdicts.length ? ` (${verdicts.join("; ")})` : ""}`,
  );
  const inv = await bed.invariant();
  console.log(`invariant: ${inv.violations.length} violations`);
  if (fences.size || inv.violations.length) process.exitCode = 1;
} finally {
  for (const c of spinning) c.kill("SIGKILL");
  await bed.down();
}
