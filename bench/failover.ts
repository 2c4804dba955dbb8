// Failover benchmark: on a 4-node lab with the default e2e policy (heartbeat timeout 6 s, fence after
// 4 s, native IPMI), crash the node of a StatefulSet pod N times and print, per run and summarised,
// heartbeat lost (the crash) → power off confirmed → old pod released → replacement Running.
//   node bench/failover.ts [--runs N] [--mode crash|partition] [--agent ipmi|webhook] [--claim-lock] [--kubernetes-timings]
//                          [--detection lease|node-controller|both]
// --agent webhook fences through the webhook agent and the lab's power service (lab/webhook-power-service.ts).
// --claim-lock installs the webhooks: the replacement is gated until it is granted the claim (docs/volumes.md).
// --kubernetes-timings: what a stock cluster gets with Stockade's shipped defaults: the lab on Kubernetes' own
// timings (node-monitor grace 50 s checked every 5 s, 40 s Leases renewed every 10 s, the injected 300 s
// tolerations) and a FencingPolicy with no detection settings at all.
// --detection: lease (the policy's default: a silent node's expired Lease or Ready=Unknown, whichever first),
// node-controller (detection.waitForNodeController: true), or both: the runs alternate between the two, N of each, in
// one lab, and each mode is summarised on its own.
import { parseArgs } from "node:util";
import { randomBytes } from "node:crypto";
import { Bed, NS } from "../lab/bed.ts";
import { failoverTimeline } from "../lab/failover-timing.ts";
import { installLabWebhook } from "../lab/webhook-power-service.ts";

const { values } = parseArgs({
  options: {
    runs: { type: "string", default: "5" },
    mode: { type: "string", default: "crash" },
    agent: { type: "string", default: "ipmi" },
    "claim-lock": { type: "boolean", default: false },
    "kubernetes-timings": { type: "boolean", default: false },
    detection: { type: "string", default: "lease" },
  },
});
const runs = Number(values.runs);
const mode = values.mode;
if (!Number.isInteger(runs) || runs < 1 || runs > 50) throw new Error(`--runs must be 1-50 (got ${values.runs})`);
if (mode !== "crash" && mode !== "partition") throw new Error(`--mode must be crash or partition (got ${mode})`);
const agent = values.agent;
if (agent !== "ipmi" && agent !== "webhook") throw new Error(`--agent must be ipmi or webhook (got ${agent})`);

const detection = values.detection;
if (detection !== "lease" && detection !== "node-controller" && detection !== "both")
  throw new Error(`--detection must be lease, node-controller or both (got ${detection})`);
type Detection = "lease" | "node-controller";
const modes: Detection[] = detection === "both" ? ["lease", "node-controller"] : [detection];

const stock = values["kubernetes-timings"];
const bed = await Bed.up({ nodes: 4, name: "bench", webhooks: values["claim-lock"], kubernetesTimings: stock });
const service = agent === "webhook" ? await installLabWebhook(bed, randomBytes(32).toString("hex")) : undefined;
try {
  await bed.policy("default", {
    guards: { maxUnhealthyNodes: 2, maxConcurrentFences: 2 },
    // Kubernetes' timings: no detection settings but the switch (the policy's defaults); else the e2e policy's.
    ...(stock || detection === "node-controller"
      ? {
          detection: {
            ...(stock ? {} : { heartbeatTimeoutSeconds: 6, fenceAfterSeconds: 4, honorPodTolerations: false }),
            ...(detection === "node-controller" ? { waitForNodeController: true } : {}),
          },
        }
      : {}),
    ...(service ? { escalation: [{ agents: [{ name: "lab-webhook" }] }] } : {}),
  });
  await bed.startOperator();
  await bed.statefulSet("db", 2);
  const rows = new Map<Detection, number[][]>(modes.map((m) => [m, []]));
  let current: Detection = detection === "node-controller" ? "node-controller" : "lease";
  for (let i = 1; i <= runs * modes.length; i++) {
    const want = modes[(i - 1) % modes.length]!;
    if (want !== current) {
      const patch = { spec: { detection: { waitForNodeController: want === "node-controller" } } };
      await bed.kubectl("patch", "fencingpolicy", "default", "--type=merge", "-p", JSON.stringify(patch));
      current = want;
    }
    const p = (await bed.lab.core.listNamespacedPod({ namespace: NS, fieldSelector: "metadata.name=db-0" })).items[0]!;
    const node = p.spec!.nodeName!;
    const uid = p.metadata!.uid!;
    await bed.kubectl("delete", "nodefence", node, "--ignore-not-found");
    const t0 = Date.now();
    await (mode === "crash" ? bed.lab.crash(node) : bed.lab.partition(node));
    const r = await bed.waitForReplacement("db-0", uid);
    const { off, gone, running } = failoverTimeline(bed.rec, { node, oldUid: uid, newUid: r.metadata?.uid, since: t0 });
    const row = [off! - t0, gone! - t0, running! - t0].map((ms) => ms / 1000);
    rows.get(current)!.push(row);
    const unknown = bed.rec.first((e) => e.source === "node" && e.name === node && e.ready === "Unknown" && e.t >= t0)?.t;
    const fence = await bed.getFence(node);
    // Where the time between release and Running went: the replacement's creation and binding, as the watch saw them.
    const mine = bed.rec.timeline().filter((e) => e.source === "pod" && e.uid === r.metadata?.uid);
    const created = mine[0]?.t;
    const bound = mine.find((e) => e.source === "pod" && e.node);
    const replacement = `replacement created ${created ? ((created - t0) / 1000).toFixed(1) : "?"} s, bound ${bound ? `${((bound.t - t0) / 1000).toFixed(1)} s to ${bound.source === "pod" ? bound.node : "?"}` : "?"}`;
    const by = /partitioned because (its Lease was not renewed|the node controller)/.exec(fence?.spec.reason ?? "")?.[1] ?? "?";
    console.log(
      `run ${i} (${current}): ${node}: power off ${row[0]!.toFixed(1)} s, released ${row[1]!.toFixed(1)} s, replacement Running ${row[2]!.toFixed(1)} s; Ready=Unknown ${unknown === undefined ? "not yet" : `${((unknown - t0) / 1000).toFixed(1)} s`}; ${by === "its Lease was not renewed" ? "partitioned by its Lease" : by === "the node controller" ? "partitioned by the node controller" : "reason ?"}; ${replacement}`,
    );
    await bed.unfence(node);
  }
  // Sorted xs: the median of an even count is the mean of the middle two; p99 by nearest rank (the max under 100 runs).
  const median = (xs: number[]) => (xs[Math.floor((xs.length - 1) / 2)]! + xs[Math.ceil((xs.length - 1) / 2)]!) / 2;
  const p99 = (xs: number[]) => xs[Math.ceil(0.99 * xs.length) - 1]!;
  const fmt = (xs: number[]) =>
    `min ${xs[0]!.toFixed(1)} / median ${median(xs).toFixed(1)} / p99 ${p99(xs).toFixed(1)} / max ${xs.at(-1)!.toFixed(1)} s`;
  for (const m of modes) {
    const col = (j: number) =>
      rows
        .get(m)!
        .map((r) => r[j]!)
        .sort((a, b) => a - b);
    const label = m === "lease" ? "Lease or node controller" : "waitForNodeController";
    console.log(`[${label}] power off confirmed:  ${fmt(col(0))}`);
    console.log(`[${label}] pod released:         ${fmt(col(1))}`);
    console.log(
      `[${label}] failover (${mode} → replacement Running, ${runs} runs, ${agent}${values["claim-lock"] ? ", with the claim lock" : ""}${stock ? ", Kubernetes' timings and the policy's defaults" : ""}): ${fmt(col(2))}`,
    );
  }
  const inv = await bed.invariant();
  console.log(`invariant: ${inv.fencedReplacements} replacements after a node failure checked, ${inv.violations.length} violations`);
  if (inv.violations.length) process.exitCode = 1;
} finally {
  await service?.close();
  await bed.down();
}
