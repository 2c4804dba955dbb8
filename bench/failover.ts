// Failover benchmark: on a 4-node lab with the default e2e policy (heartbeat timeout 6 s, fence after
// 4 s, native IPMI), crash the node of a StatefulSet pod N times and print, per run and summarised,
// heartbeat lost (the crash) → power off confirmed → old pod released → replacement Running.
//   node bench/failover.ts [--runs N] [--mode crash|partition] [--agent ipmi|webhook] [--claim-lock] [--kubernetes-timings]
//                          [--detection lease|node-controller|both] [--watchdog [--watchdog-timeout T] [--agent-timings c,N,F,D,P]]
// --agent webhook fences through the webhook agent and the lab's power service (lab/webhook-power-service.ts).
// --claim-lock installs the webhooks: the replacement is gated until it is granted the claim (docs/volumes.md).
// --kubernetes-timings: what a stock cluster gets with Stockade's shipped defaults: the lab on Kubernetes' own
// timings (node-monitor grace 50 s checked every 5 s, 40 s Leases renewed every 10 s, the injected 300 s
// tolerations) and a FencingPolicy with no detection settings at all.
// --detection: lease (the policy's default: a silent node's expired Lease or Ready=Unknown, whichever first),
// node-controller (detection.waitForNodeController: true), or both: the runs alternate between the two, N of each, in
// one lab, and each mode is summarised on its own.
// --watchdog: fencing on watchdog evidence (WatchdogExpired): the node agent installed (manifests/node-agent/, the lab's
// overlay), a FenceAgent of type watchdog alone in the escalation and allowWatchdogEvidence. The agent's c/N/F/D are the
// lab's fast ones (LAB_AGENT_TIMINGS), or with --kubernetes-timings the manifest's shipped defaults; every node's
// watchdog timeout T is --watchdog-timeout (default: the lab's); --agent-timings sets c, N, F, D and the peer timeout P
// instead (seconds and a count, checked as the agent checks them). No power-off happens: the runs print cut → NodeFence →
// the watchdog's reset → release → Running instead, and where the time went between them.
import { parseArgs } from "node:util";
import { randomBytes } from "node:crypto";
import { Bed, NS } from "../lab/bed.ts";
import { failoverTimeline } from "../lab/failover-timing.ts";
import { installLabWebhook } from "../lab/webhook-power-service.ts";
import { installNodeAgent, LAB_AGENT_TIMINGS, waitForArmedAgents, type AgentTimings } from "../lab/node-agent-install.ts";
import { DEFAULT_WATCHDOG_TIMEOUT_SECONDS } from "../lab/watchdog.ts";
import { checkAgentConfig } from "../src/decide/isolation.ts";

const { values } = parseArgs({
  options: {
    runs: { type: "string", default: "5" },
    mode: { type: "string", default: "crash" },
    agent: { type: "string", default: "ipmi" },
    "claim-lock": { type: "boolean", default: false },
    "kubernetes-timings": { type: "boolean", default: false },
    detection: { type: "string", default: "lease" },
    watchdog: { type: "boolean", default: false },
    "watchdog-timeout": { type: "string", default: String(DEFAULT_WATCHDOG_TIMEOUT_SECONDS) },
    "agent-timings": { type: "string" },
  },
});
const runs = Number(values.runs);
const mode = values.mode;
if (!Number.isInteger(runs) || runs < 1 || runs > 50) throw new Error(`--runs must be 1-50 (got ${values.runs})`);
if (mode !== "crash" && mode !== "partition") throw new Error(`--mode must be crash or partition (got ${mode})`);
const agent = values.agent;
if (agent !== "ipmi" && agent !== "webhook") throw new Error(`--agent must be ipmi or webhook (got ${agent})`);

const watchdog = values.watchdog;
const T = Number(values["watchdog-timeout"]);
if (!Number.isInteger(T) || T < 1 || T > 600) throw new Error(`--watchdog-timeout must be 1-600 s (got ${values["watchdog-timeout"]})`);
if (watchdog && agent !== "ipmi") throw new Error("--watchdog fences on the watchdog alone: no --agent with it");
/** The node agent's defaults as manifests/node-agent/ ships them (no timing flags: src/node-agent/config.ts). */
const SHIPPED_AGENT_TIMINGS: AgentTimings = {
  checkIntervalSeconds: 5,
  failedChecksBeforePeers: 2,
  controlPlaneDownSeconds: 10,
  deadlineSeconds: 30,
  peerTimeoutSeconds: 3,
};

function parseAgentTimings(raw: string): AgentTimings {
  if (!watchdog) throw new Error("--agent-timings goes with --watchdog");
  const v = raw.split(",").map(Number);
  if (v.length !== 5) throw new Error(`--agent-timings is c,N,F,D,P (got ${raw})`);
  const [c, n, f, d, p] = v as [number, number, number, number, number];
  const problems = checkAgentConfig(c, n, d, f, p);
  if (problems.length) throw new Error(`--agent-timings ${raw}: ${problems.join("; ")}`);
  return { checkIntervalSeconds: c, failedChecksBeforePeers: n, controlPlaneDownSeconds: f, deadlineSeconds: d, peerTimeoutSeconds: p };
}

const detection = values.detection;
if (detection !== "lease" && detection !== "node-controller" && detection !== "both")
  throw new Error(`--detection must be lease, node-controller or both (got ${detection})`);
type Detection = "lease" | "node-controller";
const modes: Detection[] = detection === "both" ? ["lease", "node-controller"] : [detection];

const stock = values["kubernetes-timings"];
/** When the node's NodeFence was first seen (polled every 250 ms; its creationTimestamp has 1 s resolution). */
async function firstFence(node: string): Promise<number> {
  for (const end = Date.now() + 600_000; Date.now() < end;) {
    if (await bed.getFence(node)) return Date.now();
    await new Promise((r) => setTimeout(r, 250));
  }
  return NaN;
}
const bed = await Bed.up({ nodes: 4, name: "bench", webhooks: values["claim-lock"], kubernetesTimings: stock });
const service = agent === "webhook" ? await installLabWebhook(bed, randomBytes(32).toString("hex")) : undefined;
const timings = values["agent-timings"] ? parseAgentTimings(values["agent-timings"]) : stock ? SHIPPED_AGENT_TIMINGS : LAB_AGENT_TIMINGS;
try {
  if (watchdog) {
    for (const n of bed.lab.nodes()) bed.lab.setWatchdogTimeout(n, T);
    await installNodeAgent(bed.lab, { timings, log: (m) => console.log(m) });
    await bed.create("fenceagents", { metadata: { name: "node-watchdog" }, spec: { type: "watchdog" } });
    console.log(
      `node agent: c ${timings.checkIntervalSeconds} s, N ${timings.failedChecksBeforePeers}, F ${timings.controlPlaneDownSeconds} s, D ${timings.deadlineSeconds} s; watchdog T ${T} s`,
    );
  }
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
    ...(watchdog ? { escalation: [{ agents: [{ name: "node-watchdog" }] }], allowWatchdogEvidence: true } : {}),
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
    const boot = bed.lab.machine(node).bootID;
    const t0 = Date.now();
    await (mode === "crash" ? bed.lab.crash(node) : bed.lab.partition(node));
    const fenceSeen = firstFence(node);
    const r = await bed.waitForReplacement("db-0", uid, watchdog ? 600_000 : undefined);
    const { off, gone, running } = failoverTimeline(bed.rec, { node, oldUid: uid, newUid: r.metadata?.uid, since: t0 });
    const reset = bed.rec.first(
      (e) => e.source === "lab" && e.kind === "watchdog" && e.node === node && e.detail.action === "reset" && e.detail.bootID === boot,
    )?.t;
    const created = await fenceSeen;
    // Watchdog: no power-off; its place in the row is the watchdog's reset, and the NodeFence is timed too.
    const row = [watchdog ? reset! - t0 : off! - t0, gone! - t0, running! - t0, created - t0].map((ms) => ms / 1000);
    rows.get(current)!.push(row);
    if (watchdog)
      console.log(
        `run ${i}: cut → NodeFence ${row[3]!.toFixed(1)} s → reset ${(row[0]! - row[3]!).toFixed(1)} s → released ${(row[1]! - row[0]!).toFixed(1)} s → Running ${(row[2]! - row[1]!).toFixed(1)} s`,
      );
    const unknown = bed.rec.first((e) => e.source === "node" && e.name === node && e.ready === "Unknown" && e.t >= t0)?.t;
    const fence = await bed.getFence(node);
    // Where the time between release and Running went: the replacement's creation and binding, as the watch saw them.
    const mine = bed.rec.timeline().filter((e) => e.source === "pod" && e.uid === r.metadata?.uid);
    const made = mine[0]?.t;
    const bound = mine.find((e) => e.source === "pod" && e.node);
    const replacement = `replacement created ${made ? ((made - t0) / 1000).toFixed(1) : "?"} s, bound ${bound ? `${((bound.t - t0) / 1000).toFixed(1)} s to ${bound.source === "pod" ? bound.node : "?"}` : "?"}`;
    const by = /partitioned because (its Lease was not renewed|the node controller)/.exec(fence?.spec.reason ?? "")?.[1] ?? "?";
    console.log(
      `run ${i} (${current}): ${node}: ${watchdog ? "watchdog reset" : "power off"} ${row[0]!.toFixed(1)} s, released ${row[1]!.toFixed(1)} s, replacement Running ${row[2]!.toFixed(1)} s; Ready=Unknown ${unknown === undefined ? "not yet" : `${((unknown - t0) / 1000).toFixed(1)} s`}; ${by === "its Lease was not renewed" ? "partitioned by its Lease" : by === "the node controller" ? "partitioned by the node controller" : "reason ?"}; ${replacement}`,
    );
    await bed.unfence(node);
    if (watchdog) await waitForArmedAgents(bed.lab, [node], 300_000); // the next run's victim may be this node
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
    if (watchdog) {
      // Each segment's own spread, run by run (not differences of the medians).
      const seg = (a: number | undefined, b: number) =>
        rows
          .get(m)!
          .map((r) => r[b]! - (a === undefined ? 0 : r[a]!))
          .sort((x, y) => x - y);
      console.log(`[${label}] cut → NodeFence:         ${fmt(seg(undefined, 3))}`);
      console.log(`[${label}] NodeFence → reset:       ${fmt(seg(3, 0))}`);
      console.log(`[${label}] reset → released:        ${fmt(seg(0, 1))}`);
      console.log(`[${label}] released → Running:      ${fmt(seg(1, 2))}`);
    }
    console.log(`[${label}] ${watchdog ? "watchdog reset:      " : "power off confirmed: "} ${fmt(col(0))}`);
    console.log(`[${label}] pod released:         ${fmt(col(1))}`);
    console.log(
      `[${label}] failover (${mode} → replacement Running, ${runs} runs, ${watchdog ? "watchdog" : agent}${values["claim-lock"] ? ", with the claim lock" : ""}${stock ? ", Kubernetes' timings and the policy's defaults" : ""}${watchdog ? `, watchdog evidence: T ${T} s, agent c/N/F/D ${timings.checkIntervalSeconds}/${timings.failedChecksBeforePeers}/${timings.controlPlaneDownSeconds}/${timings.deadlineSeconds} s` : ""}): ${fmt(col(2))}`,
    );
  }
  const inv = await bed.invariant();
  console.log(`invariant: ${inv.fencedReplacements} replacements after a node failure checked, ${inv.violations.length} violations`);
  if (inv.violations.length) process.exitCode = 1;
} finally {
  await service?.close();
  await bed.down();
}
