// Scale benchmark (issue 12): one operator replica against a lab of many simulated nodes and pods (lab/scale.ts:
// one kwok process for all of them, Leases of 40 s renewed every 10 s, pods pre-bound, 5% guarded). Prints how
// long the population took, how long the operator took to sync its caches, its memory after the sync and at
// steady state, its CPU share at steady state, and how long one fleet decision (the node-health reconcile) takes.
//   node bench/scale.ts [--nodes N] [--pods M] [--zones Z] [--steady-seconds S] [--operator-log-level L] [--keep]
//                       [--failures F] [--heartbeat-timeout-seconds T] [--memory-limit deployment|none|<quantity>]
//                       [--populate-lease-seconds L]  (Leases while populating, default 100: renewed every 25 s)
//                       [--operator-node-options="<flags>"]  (the operator's NODE_OPTIONS, e.g. "--cpu-prof --cpu-prof-dir=D";
//                       with "=": a value that starts with a dash is otherwise refused as ambiguous)
// --heartbeat-timeout-seconds T sets the policy's detection.heartbeatTimeoutSeconds (default: the shipped 40). Where
// the lab's kwok cannot renew every Lease within it beside the operator (at 5,000 nodes on this 2-core machine until
// 2026-11-26; on time at 40 s since), most nodes look silent and the storm guard holds every fence, so the burst
// cannot be timed; a longer timeout leaves the silenced nodes the only silent ones. Due times follow it.
// --keep leaves the lab's directory (logs, the operator's log) in place after it is stopped.
// Then --failures F nodes (default 50, spread over the zones) are silenced at the same moment, and for each the bench
// prints when its fence became due (its last Lease renewal + heartbeatTimeoutSeconds + fenceAfterSeconds, or, if
// later, when the node became partitioned: its Lease unrenewed for its 40 s, or the node controller's Ready=Unknown
// if sooner — the Lease is the second signal since f75b242), and how long after that its NodeFence appeared, its power-off was
// confirmed and its guarded pods were released (p50/p99/max, each seen by a watch here). The scale nodes have no
// BMC: they are fenced through a test double that answers at once (lab/instant-agent.ts). Over the burst it also prints
// the operator's CPU, GC time, event-loop delay and fleet passes, and the apiserver's own time (from the audit log)
// for the operator's fresh GETs of Nodes and Leases: a round trip far longer than that is the operator's side.
import { parseArgs } from "node:util";
import { setTimeout as sleep } from "node:timers/promises";
import { Bed, NS } from "../lab/bed.ts";
import { waitFor } from "../lab/health.ts";
import {
  addScaleNodes,
  addScalePods,
  confirmSilence,
  retimeScaleKwok,
  SCALE_LABEL,
  SCALE_LEASE_SECONDS,
  silence,
  startScaleKwok,
} from "../lab/scale.ts";
import { INSTANT_AGENT, installInstantAgent } from "../lab/instant-agent.ts";
import { CoordinationV1Api, CustomObjectsApi, type V1Node } from "@kubernetes/client-node";
import { Informer } from "../src/runtime/informer.ts";
import { join } from "node:path";
import type { NodeFence } from "../src/api/v1alpha1.ts";
import { readFileSync } from "node:fs";
import { loadAllYaml, type V1Deployment } from "@kubernetes/client-node";
import { createMemoryCgroup, memoryQuantityBytes, type MemoryCgroup } from "../lab/memory-cgroup.ts";
import { repoRoot } from "../lab/bins.ts";
import { auditEvents } from "../lab/audit.ts";

/** prom-client's kinds of garbage collection (nodejs_gc_duration_seconds). */
const GC_KINDS = ["minor", "major", "incremental", "weakcb"] as const;

const { values } = parseArgs({
  options: {
    nodes: { type: "string", default: "1000" },
    pods: { type: "string", default: "30000" },
    zones: { type: "string", default: "3" },
    "steady-seconds": { type: "string", default: "60" },
    "operator-log-level": { type: "string", default: "info" },
    failures: { type: "string", default: "50" },
    "heartbeat-timeout-seconds": { type: "string" },
    "populate-lease-seconds": { type: "string", default: "100" },
    keep: { type: "boolean", default: false },
    // "deployment": the memory limit of manifests/03-deployment.yaml, as a container gets it; "none"; or e.g. 2Gi.
    "memory-limit": { type: "string", default: "deployment" },
    // V8 flags for the operator's Node.js (NODE_OPTIONS), e.g. "--max-semi-space-size=16"; stated beside the figures.
    "operator-node-options": { type: "string", default: "" },
  },
});
const int = (name: string, v: string | undefined, min: number, max: number) => {
  const n = Number(v);
  if (!Number.isInteger(n) || n < min || n > max) throw new Error(`--${name} must be a whole number from ${min} to ${max} (got ${v})`);
  return n;
};
const nodes = int("nodes", values.nodes, 1, 10_000);
const pods = int("pods", values.pods, 0, 300_000);
const zones = Array.from({ length: int("zones", values.zones, 1, 26) }, (_, i) => `zone-${String.fromCharCode(97 + i)}`);
const steadyS = int("steady-seconds", values["steady-seconds"], 10, 3600);
const failures = int("failures", values.failures, 0, Math.min(100, nodes));
// While the pods are created and started, kwok renews the scale Leases less often (every 25 s by default): at 2,000
// nodes the kubelet's 10 s were 200 writes a second, most of what kept the apiserver from creating and starting pods.
// Nothing is measured then; kwok is restarted on the kubelet's timing before the operator starts.
const populateLeaseS = int("populate-lease-seconds", values["populate-lease-seconds"], SCALE_LEASE_SECONDS, 160);
/** The operator's memory limit in bytes (undefined: none), and where it comes from. */
function memoryLimit(v: string): { bytes?: number; source: string } {
  if (v === "none") return { source: "none" };
  if (v !== "deployment") return { bytes: memoryQuantityBytes(v), source: `--memory-limit ${v}` };
  const docs = loadAllYaml(readFileSync(join(repoRoot, "manifests/03-deployment.yaml"), "utf8")) as V1Deployment[];
  const q = docs.find((d) => d?.kind === "Deployment")?.spec?.template.spec?.containers[0]?.resources?.limits?.memory;
  if (!q) throw new Error("manifests/03-deployment.yaml has no memory limit: pass --memory-limit none or a quantity");
  return { bytes: memoryQuantityBytes(String(q)), source: `the Deployment's limit, ${String(q)}` };
}
const limit = memoryLimit(values["memory-limit"]!);
// The shipped defaults (crds/): what the bench's policy leaves unset, but for the heartbeat timeout when asked.
// DEFAULT_HEARTBEAT_TIMEOUT_SECONDS (src/decide/node-health.ts): 40 until f75b242, 30 since (the bench still said 40).
const SHIPPED_TIMEOUT_S = 30;
const askedTimeout = values["heartbeat-timeout-seconds"];
const TIMEOUT_S = askedTimeout === undefined ? SHIPPED_TIMEOUT_S : int("heartbeat-timeout-seconds", askedTimeout, 10, 600);
const FENCE_AFTER_S = 10;

/** The operator's /metrics, parsed into "name{labels}" → value. */
async function scrape(addr: string): Promise<Map<string, number>> {
  const text = await (await fetch(`http://${addr}/metrics`)).text();
  const m = new Map<string, number>();
  for (const line of text.split("\n")) {
    if (!line || line.startsWith("#")) continue;
    const i = line.lastIndexOf(" ");
    m.set(line.slice(0, i), Number(line.slice(i + 1)));
  }
  return m;
}
const mib = (b: number | undefined) => `${((b ?? NaN) / 2 ** 20).toFixed(0)} MiB`;
const secs = (ms: number) => `${(ms / 1000).toFixed(1)} s`;

/** Quantile of a Prometheus histogram as the upper bound of the bucket it falls in. */
function histogramQuantile(m: Map<string, number>, name: string, label: string, q: number): string {
  const buckets = [...m]
    .filter(([k]) => k.startsWith(`${name}_bucket{`) && k.includes(label))
    .map(([k, v]) => ({ le: k.match(/le="([^"]+)"/)?.[1] ?? "", v }))
    .sort((a, b) => a.v - b.v);
  const total = buckets.at(-1)?.v ?? 0;
  if (!total) return "no samples";
  const hit = buckets.find((b) => b.v >= q * total);
  return hit?.le === "+Inf" ? "> largest bucket" : `≤ ${Number(hit?.le) * 1000} ms`;
}

let cgroup: MemoryCgroup | undefined;
const t0 = performance.now();
// Kubernetes' own timings: with the lab's fast ones (node-monitor grace 10 s) the node controller would take nodes
// renewing every 10 s for dead between two renewals, taint them and evict their pods all through the run.
const bed = await Bed.up({ nodes: 3, name: "scale", runtime: "kwok", kubernetesTimings: true });
try {
  const lab = bed.lab;
  const tNodes = performance.now();
  const names = await addScaleNodes(lab, nodes, zones);
  startScaleKwok(lab, populateLeaseS);
  await waitFor(
    `${nodes} scale nodes Ready`,
    async () => {
      const list = await lab.core.listNode({ labelSelector: "lab.stockade.io/scale=on" });
      return list.items.filter((n) => n.status?.conditions?.some((c) => c.type === "Ready" && c.status === "True")).length >= nodes;
    },
    { timeoutMs: 600_000, intervalMs: 2000 },
  );
  const nodesMs = performance.now() - tNodes;
  console.log(`${nodes} nodes created and Ready in ${secs(nodesMs)} (lab up in ${secs(tNodes - t0)})`);

  const tPods = performance.now();
  const made = await addScalePods(lab, { count: pods, nodes: names, namespace: NS });
  const createdMs = performance.now() - tPods;
  console.log(
    `${pods} pods created (pre-bound, ${made.guarded.length} guarded) in ${secs(createdMs)}: ${(pods / (createdMs / 1000)).toFixed(0)} pods/s`,
  );
  await waitFor(
    `${pods} pods Running`,
    async () => {
      // One is enough to go on waiting: listing every pod not Running (85,000 at 150,000 pods), every 5 s, took
      // much of the apiserver's CPU from kwok starting them.
      const list = await lab.core.listNamespacedPod({ namespace: NS, fieldSelector: "status.phase!=Running", limit: 1 });
      return list.items.length === 0;
    },
    // kwok marked ~42 pods a second Running at 2,000 nodes (the apiserver busy with their Leases): 15 minutes
    // were not enough for 60,000.
    { timeoutMs: Math.max(900_000, pods * 50), intervalMs: 5000 },
  );
  console.log(`all pods Running ${secs(performance.now() - tPods)} after the first create`);
  if (populateLeaseS !== SCALE_LEASE_SECONDS) {
    const ms = await retimeScaleKwok(lab, names, SCALE_LEASE_SECONDS);
    console.log(
      `populated with ${populateLeaseS} s Leases; kwok restarted on the kubelet's (${SCALE_LEASE_SECONDS} s, renewed every ${SCALE_LEASE_SECONDS / 4} s): every Lease renewed so within ${secs(ms)}`,
    );
  }

  // The scale nodes only, on the shipped detection defaults, fenced through the instant test double; enough fence
  // slots for every failure at once (the shipped default is 1).
  const doubleBin = join(lab.dir, "test-double-bin");
  installInstantAgent(doubleBin, join(lab.dir, "test-double-power"));
  await bed.create("fenceagents", {
    metadata: { name: "instant-test-double" },
    spec: { type: "fenceAgent", agent: INSTANT_AGENT, nodeTemplates: { plug: "{{ name }}" }, timeoutSeconds: 10 },
  });
  await bed.policy("default", {
    nodeSelector: { matchExpressions: [{ key: SCALE_LABEL, operator: "Exists" }] },
    detection: TIMEOUT_S === SHIPPED_TIMEOUT_S ? {} : { heartbeatTimeoutSeconds: TIMEOUT_S },
    escalation: [{ agents: [{ name: "instant-test-double" }] }],
    guards: { maxUnhealthyNodes: "50%", maxConcurrentFences: Math.max(1, failures) },
  });
  if (TIMEOUT_S !== SHIPPED_TIMEOUT_S)
    console.log(`policy: heartbeatTimeoutSeconds ${TIMEOUT_S} (the shipped default is ${SHIPPED_TIMEOUT_S})`);
  if (limit.bytes) {
    try {
      cgroup = createMemoryCgroup(`stockade-bench-${process.pid}`, limit.bytes);
      console.log(`operator in a memory cgroup of ${mib(limit.bytes)} (${limit.source}): Node.js sizes its heap from it`);
    } catch (err) {
      console.log(`operator WITHOUT a memory limit: ${(err as Error).message}; its RSS is not what a container shows`);
    }
  } else console.log("operator without a memory limit (--memory-limit none): V8 sizes its heap from the host's memory");
  const tOp = Date.now();
  const op = await bed.startOperator({
    cgroup,
    // One worker per simultaneous failure: a worker waits on its agent (the shipped default, 4, would take the 50 four
    // at a time).
    extraArgs: ["--log-level", values["operator-log-level"]!, "--fence-workers", String(Math.min(64, Math.max(4, failures)))],
    env: {
      PATH: `${doubleBin}:${bed.lab.env.PATH ?? ""}`,
      ...(values["operator-node-options"] ? { NODE_OPTIONS: values["operator-node-options"] } : {}),
    },
    // The sync is a figure here (goal ≤ 60 s), not a precondition: a slow one is printed, not a crash.
    readyTimeoutMs: 600_000,
  });
  const log = bed.operatorLog(op);
  const synced = log.find((l) => l.msg === "caches synced");
  const addr = log.find((l) => l.msg === "serving /metrics")?.metrics as string;
  console.log(`operator: caches synced ${secs((synced?.time ?? NaN) - tOp)} after its start`);
  const after = await scrape(addr);
  // Whether the sync waited on the operator (parsing and slimming the stream) or on the apiserver sending it.
  const syncS = ((synced?.time ?? NaN) - tOp) / 1000;
  const cpuS = after.get("process_cpu_seconds_total") ?? NaN;
  const gcS = GC_KINDS.reduce((a, k) => a + (after.get(`nodejs_gc_duration_seconds_sum{kind="${k}"}`) ?? 0), 0);
  console.log(
    `  the operator's CPU until then: ${cpuS.toFixed(1)} s (${((cpuS / syncS) * 100).toFixed(0)}% of one core), GC ${gcS.toFixed(1)} s`,
  );
  console.log(
    `after sync: RSS ${mib(after.get("process_resident_memory_bytes"))}, JS heap used ${mib(after.get("nodejs_heap_size_used_bytes"))} of ${mib(after.get("nodejs_heap_size_total_bytes"))}, external ${mib(after.get("nodejs_external_memory_bytes"))}`,
  );

  const cpu0 = after.get("process_cpu_seconds_total") ?? NaN;
  const w0 = performance.now();
  await sleep(steadyS * 1000);
  const steady = await scrape(addr);
  const share = ((steady.get("process_cpu_seconds_total") ?? NaN) - cpu0) / ((performance.now() - w0) / 1000);
  console.log(
    `steady state (${steadyS} s): CPU ${(share * 100).toFixed(1)}% of one core, RSS ${mib(steady.get("process_resident_memory_bytes"))}, JS heap used ${mib(steady.get("nodejs_heap_size_used_bytes"))} of ${mib(steady.get("nodejs_heap_size_total_bytes"))}, external ${mib(steady.get("nodejs_external_memory_bytes"))}`,
  );
  const n = steady.get('stockade_workqueue_work_duration_seconds_count{name="node-health"}') ?? 0;
  const sum = steady.get('stockade_workqueue_work_duration_seconds_sum{name="node-health"}') ?? NaN;
  console.log(
    `fleet decision (node-health reconcile): ${n} runs, mean ${((sum / n) * 1000).toFixed(1)} ms, p50 ${histogramQuantile(steady, "stockade_workqueue_work_duration_seconds", 'name="node-health"', 0.5)}, p99 ${histogramQuantile(steady, "stockade_workqueue_work_duration_seconds", 'name="node-health"', 0.99)}`,
  );

  if (failures > 0) await measureFailures(names, addr);
} finally {
  await bed.down();
  const peak = cgroup?.peakBytes();
  if (peak) console.log(`operator's cgroup: peak ${mib(peak)} charged of ${mib(cgroup!.bytes)}`);
  cgroup?.remove();
  if (values.keep) console.log(`logs kept in ${bed.lab.dir}`);
}

/**
 * What made a burst's figures measure something else: the storm guard holding (the lab let more nodes go silent than
 * the 50 silenced: its kwok could not keep their Leases renewed) or the operator dying. Said in the output, so that a
 * spoiled run is never read as the operator's figure.
 */
function spoiledBy(): void {
  const log = bed.operators.length ? bed.operatorLog(bed.operators[0]!) : [];
  const holds = log.filter((l) => typeof l.msg === "string" && l.msg.startsWith("storm guard holds"));
  if (holds.length)
    console.log(
      `SPOILED: the storm guard held ${holds.length} time(s) during the run (first: ${String(holds[0]!.msg).slice(0, 160)}…): more nodes than the silenced ones went unhealthy, so creation times measure the lab, not the operator`,
    );
  if (bed.operators.some((c) => c.exitCode !== null || c.signalCode !== null))
    console.log("SPOILED: the operator exited during the run (its log ends with why)");
}

/**
 * Where the burst's time went, operator side against apiserver side: the operator's CPU, GC and event-loop delay
 * over the burst, its fleet passes, and how long the apiserver itself took to answer the operator's fresh reads
 * (from the audit log's timestamps) — to tell a slow apiserver from a busy operator.
 */
async function burstLoad(a: Map<string, number>, b: Map<string, number>, t0: number, t1: number): Promise<void> {
  const d = (k: string) => (b.get(k) ?? 0) - (a.get(k) ?? 0);
  const wall = (t1 - t0) / 1000;
  const gc = GC_KINDS.map(
    (kind) =>
      `${kind} ${d(`nodejs_gc_duration_seconds_count{kind="${kind}"}`)} × ${d(`nodejs_gc_duration_seconds_sum{kind="${kind}"}`).toFixed(2)} s`,
  ).join(", ");
  const passes = d('stockade_workqueue_work_duration_seconds_count{name="node-health"}');
  const passSum = d('stockade_workqueue_work_duration_seconds_sum{name="node-health"}');
  const lag = (q: string) => `${((b.get(`nodejs_eventloop_lag_${q}_seconds`) ?? NaN) * 1000).toFixed(0)} ms`;
  console.log(`during the burst (${wall.toFixed(0)} s, silencing to the last release), the operator:`);
  console.log(`  CPU ${((d("process_cpu_seconds_total") / wall) * 100).toFixed(1)}% of one core; GC ${gc}`);
  console.log(`  event-loop delay mean ${lag("mean")}, p99 ${lag("p99")}, max ${lag("max")}`);
  console.log(
    `  fleet passes (node-health reconcile): ${passes}, mean ${((passSum / passes) * 1000).toFixed(0)} ms, ${passSum.toFixed(1)} s in all`,
  );
  const took = new Map<string, number[]>();
  const operatorGets = (l: string) => l.includes('"verb":"get"') && l.includes('"userAgent":"kubernetes-client-javascript');
  for await (const e of auditEvents(bed.lab.dir, operatorGets)) {
    const at = Date.parse(e.requestReceivedTimestamp);
    const what = e.objectRef?.resource ?? "";
    if (at < t0 || at > t1 || (what !== "nodes" && what !== "leases")) continue;
    (took.get(what) ?? took.set(what, []).get(what)!).push(Date.parse(e.stageTimestamp) - at);
  }
  for (const [what, xs] of took) {
    xs.sort((x, y) => x - y);
    const mean = xs.reduce((x, y) => x + y, 0) / xs.length;
    console.log(
      `  apiserver time of its GETs of ${what} (audit log): ${xs.length} × mean ${mean.toFixed(0)} ms, p50 ${xs[Math.floor(xs.length / 2)]} ms, max ${xs.at(-1)} ms`,
    );
  }
}

/**
 * Silences `failures` nodes at once (spread evenly over the list, hence over the zones) and times, per node, from
 * its fence becoming due to its NodeFence appearing, its power-off confirmed (Fenced=True) and its guarded pods
 * released (Released=True). Times are when this process's watches saw each change.
 */
async function measureFailures(all: readonly string[], addr: string): Promise<void> {
  const lab = bed.lab;
  const step = Math.floor(all.length / failures);
  const victims = all.filter((_, i) => i % step === 0).slice(0, failures);
  const seen = new Map<string, { unknown?: number; created?: number; fenced?: number; released?: number }>(victims.map((v) => [v, {}]));
  // The operator's own informer (it re-watches; a bare client-node watch ends after 30 s without events).
  const cond = (f: NodeFence, type: string) => f.status?.conditions?.some((c) => c.type === type && c.status === "True");
  const custom = lab.kc.makeApiClient(CustomObjectsApi);
  const fences = new Informer<NodeFence>({
    kc: lab.kc,
    path: "/apis/stockade.io/v1alpha1/nodefences",
    list: async (page) =>
      (await custom.listClusterCustomObject({ group: "stockade.io", version: "v1alpha1", plural: "nodefences", ...page })) as never,
  });
  const onFence = (f: NodeFence) => {
    const s = seen.get(f.metadata?.name ?? "");
    if (!s) return;
    const now = Date.now();
    s.created ??= now;
    if (cond(f, "Fenced")) s.fenced ??= now;
    if (cond(f, "Released")) s.released ??= now;
  };
  fences.on("add", onFence);
  fences.on("update", onFence);
  const selector = `${SCALE_LABEL}=silent`;
  const silentNodes = new Informer<V1Node>({
    kc: lab.kc,
    path: "/api/v1/nodes",
    labelSelector: selector,
    list: (page) => lab.core.listNode({ labelSelector: selector, ...page }),
  });
  const onNode = (n: V1Node) => {
    const s = seen.get(n.metadata?.name ?? "");
    if (s && n.status?.conditions?.some((c) => c.type === "Ready" && c.status === "Unknown")) s.unknown ??= Date.now();
  };
  silentNodes.on("add", onNode);
  silentNodes.on("update", onNode);
  await Promise.all([fences.start(), silentNodes.start()]);
  const before = await scrape(addr); // also starts the event-loop delay histogram over (prom-client resets it)
  const tSilence = Date.now();
  await silence(lab, victims);
  console.log(`${victims.length} nodes silenced at once (${secs(Date.now() - tSilence)} to relabel them all)`);
  // Side by side with the burst: a victim kwok goes on renewing (its watch missed the relabel) is relabeled again.
  const confirming = confirmSilence(lab, victims, tSilence).then(
    ({ relabeled, stillRenewed }) => {
      if (relabeled.length)
        console.log(
          `kwok went on renewing ${relabeled.length} of them after the relabel (${relabeled.join(", ")}): relabeled on and silent again` +
            (stillRenewed.length ? `; still renewed after that: ${stillRenewed.join(", ")}` : ""),
        );
    },
    (err: unknown) =>
      console.log(`checking that the silenced nodes went silent failed: ${err instanceof Error ? err.message : String(err)}`),
  );
  try {
    await waitFor(`${victims.length} NodeFences Released`, async () => [...seen.values()].every((s) => s.released), {
      timeoutMs: (TIMEOUT_S + FENCE_AFTER_S + 240) * 1000,
      intervalMs: 1000,
    });
  } finally {
    fences.stop();
    silentNodes.stop();
  }
  const tDone = Date.now();
  await confirming;
  await burstLoad(before, await scrape(addr), tSilence, tDone);
  const coordination = lab.kc.makeApiClient(CoordinationV1Api);
  const rows: { due: number; created: number; fenced: number; released: number; unknown: number | undefined }[] = [];
  for (const v of victims) {
    const lease = await coordination.readNamespacedLease({ name: v, namespace: "kube-node-lease" });
    const renewed = new Date(lease.spec?.renewTime ?? 0).getTime();
    const s = seen.get(v)!;
    const partitioned = Math.min(renewed + SCALE_LEASE_SECONDS * 1000, s.unknown ?? Infinity);
    const due = Math.max(renewed + (TIMEOUT_S + FENCE_AFTER_S) * 1000, partitioned);
    const unknown = s.unknown === undefined ? undefined : s.created! - s.unknown;
    rows.push({ due, created: s.created! - due, fenced: s.fenced! - due, released: s.released! - due, unknown });
  }
  const q = (xs: number[], p: number) => {
    const sorted = [...xs].sort((a, b) => a - b);
    return sorted[Math.min(sorted.length - 1, Math.ceil(p * sorted.length) - 1)]!;
  };
  const ms = (x: number) => `${(x / 1000).toFixed(2)} s`;
  const line = (what: string, xs: number[]) =>
    console.log(`  ${what}: p50 ${ms(q(xs, 0.5))}, p99 ${ms(q(xs, 0.99))}, max ${ms(Math.max(...xs))}`);
  console.log(
    `${victims.length} simultaneous failures, from each fence becoming due (due times spread over ${ms(Math.max(...rows.map((r) => r.due)) - Math.min(...rows.map((r) => r.due)))}):`,
  );
  line(
    "NodeFence created",
    rows.map((r) => r.created),
  );
  line(
    "power-off confirmed (Fenced)",
    rows.map((r) => r.fenced),
  );
  line(
    "guarded pods released (Released)",
    rows.map((r) => r.released),
  );
  // Negative: created before the node controller marked the node Unknown (the Lease was the second signal).
  const unknown = rows.flatMap((r) => (r.unknown === undefined ? [] : [r.unknown]));
  if (unknown.length) line(`NodeFence created, from Ready=Unknown seen here (${unknown.length} nodes)`, unknown);
  spoiledBy();
  // Where the time went: the operator's own histograms of each NodeFence step (bucket bounds) and their means.
  let m: Map<string, number>;
  try {
    m = await scrape(addr);
  } catch (err) {
    console.log(
      `the operator's /metrics did not answer after the burst (${err instanceof Error ? err.message : String(err)}): see its log`,
    );
    return;
  }
  const mean = (name: string, label: string) => {
    const sum = m.get(`${name}_sum{${label}}`) ?? NaN;
    const count = m.get(`${name}_count{${label}}`) ?? 0;
    return count ? `${count} × mean ${((sum / count) * 1000).toFixed(0)} ms` : "none";
  };
  const hist = (what: string, name: string, label: string) =>
    console.log(
      `  ${what}: ${mean(name, label)}, p50 ${histogramQuantile(m, name, label, 0.5)}, p99 ${histogramQuantile(m, name, label, 0.99)}`,
    );
  console.log("NodeFence steps (stockade_fence_step_duration_seconds) since the operator started:");
  for (const step of [
    "read",
    "start",
    "begin",
    "runAgent",
    "agent",
    "recordOutcome",
    "confirmed",
    "markNode",
    "release",
    "released",
    "wait",
  ])
    hist(step, "stockade_fence_step_duration_seconds", `step="${step}"`);
  hist("node-fence queue wait", "stockade_workqueue_queue_duration_seconds", 'name="node-fence"');
}
