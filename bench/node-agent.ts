// What the node agent costs (issue 30): N real `stockade node-agent` processes (one per simulated node) against the
// lab's real apiserver, each with a plain file for its watchdog (T = 60 s) and its peer port on loopback. Phase 1,
// steady: each agent's CPU and RSS from /proc, and its API requests. Phase 2, the control plane down (kube-apiserver
// killed): the peer traffic (signed questions and answers, counted by every agent's /metrics), the agents' CPU, and
// whether every agent kept feeding its watchdog (the majority rule) — then the apiserver again and every record renewed.
//   node bench/node-agent.ts [--agents N] [--steady S] [--down S] [--fast]
// An agent answers at most 5 requests a second per source address (burst 10): agents sharing 127.0.0.1 would exceed it
// beyond 26 agents at c = 5 s (11 at c = 2 s) and be refused (429), which a cluster, where each agent has its own pod
// address, never sees. So each agent has its own loopback address, as its pod IP (127.0.1.k: 127.0.0.0/8 all routes to
// lo), and a preload of the bench's (not of the agent's: the agent is not changed) binds each outgoing connection to
// 127.0.0.0/8 to that address, which the peer server then sees as the source: one rate bucket per agent, as in a
// cluster. The preload also counts the bytes (TCP payload, both ways) of every connection to a peer (127.0.1.0/24)
// and writes the sum to a file every second: the bytes per node come from there; the requests from /metrics.
// --fast: the lab's timings (c=2 N=2 F=6 D=12, peer timeout 1 s); default: the agent's own (c=5 N=2 F=10 D=30, 3 s).
import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { setTimeout as sleep } from "node:timers/promises";
import { tmpdir } from "node:os";
import { CoordinationV1Api } from "@kubernetes/client-node";
import { Lab } from "../lab/lab.ts";
import { repoRoot } from "../lab/bins.ts";
import { waitFor } from "../lab/health.ts";
import { LAB_AGENT_TIMINGS } from "../lab/node-agent-install.ts";
import { freeTcpPorts } from "../lab/ports.ts";
import { NODE_AGENT_NAMESPACE, parseNodeAgentRecord } from "../src/decide/node-agent-record.ts";

const { values } = parseArgs({
  options: {
    agents: { type: "string", default: "20" },
    steady: { type: "string", default: "60" },
    down: { type: "string", default: "60" },
    fast: { type: "boolean", default: false },
  },
});
const n = Number(values.agents);
const PEER_PREFIX = "127.0.1.";
const addressOf = (i: number) => `${PEER_PREFIX}${i + 1}`;
const steadyS = Number(values.steady);
const downS = Number(values.down);
if (!Number.isInteger(n) || n < 2 || n > 200) throw new Error(`--agents must be a whole number from 2 to 200 (got ${values.agents})`);

/** Plain JavaScript (no type stripping in the measured processes): source address and peer bytes, see above. */
const PRELOAD = `
import net from "node:net";
import { writeFileSync } from "node:fs";
const local = process.env.BENCH_LOCAL_ADDRESS, prefix = process.env.BENCH_PEER_PREFIX, out = process.env.BENCH_BYTES_FILE;
const live = new Set();
let closed = 0;
const connect = net.Socket.prototype.connect;
net.Socket.prototype.connect = function (...args) {
  const o = Array.isArray(args[0]) ? args[0][0] : args[0];
  if (o && typeof o === "object" && typeof o.host === "string" && o.host.startsWith("127.")) {
    if (!o.localAddress) o.localAddress = local;
    if (o.host.startsWith(prefix) && !live.has(this)) {
      live.add(this);
      this.once("close", () => { closed += this.bytesRead + this.bytesWritten; live.delete(this); });
    }
  }
  return connect.apply(this, args);
};
setInterval(() => {
  let sum = closed;
  for (const s of live) sum += s.bytesRead + s.bytesWritten;
  writeFileSync(out + ".tmp", String(sum));
  writeFileSync(out, String(sum));
}, 1000).unref();
`;
if (!(steadyS >= 10) || !(downS >= 10)) throw new Error("--steady and --down are at least 10 seconds");

// The image runs the compiled JavaScript (Dockerfile: tsc -p tsconfig.build.json): so does the bench, since running
// the TypeScript sources adds Node's type stripping (~25 MiB of RSS per process) to what it measures.
const dist = mkdtempSync(join(tmpdir(), "stockade-bench-node-agent-dist-"));
const tsc = spawnSync(
  process.execPath,
  [join(repoRoot, "node_modules/typescript/bin/tsc"), "-p", join(repoRoot, "tsconfig.build.json"), "--outDir", dist],
  {
    stdio: "inherit",
  },
);
if (tsc.status !== 0) throw new Error(`tsc -p tsconfig.build.json exited ${tsc.status}`);
// dist/ beside a node_modules, as in the image.
symlinkSync(join(repoRoot, "node_modules"), join(dist, "node_modules"));
const preload = join(dist, "bench-source-address.mjs");
writeFileSync(preload, PRELOAD);
const lab = await Lab.up({ dir: mkdtempSync(join(tmpdir(), "stockade-bench-node-agent-")), nodes: 1, runtime: "kwok" });
const agents: { node: string; proc: ChildProcess; device: string; health: number; bytes: string }[] = [];
try {
  await lab.core.createNamespace({ body: { metadata: { name: NODE_AGENT_NAMESPACE } } });
  await new Promise<void>((resolve, reject) => {
    const p = spawn("kubectl", ["apply", "-f", join(repoRoot, "manifests/01-crds.yaml")], { env: lab.env, stdio: "ignore" });
    p.once("exit", (code) => (code === 0 ? resolve() : reject(new Error(`kubectl apply of the CRDs exited ${code}`))));
  });
  await lab.waitForCrds(["nodefences"]);
  const ports = await freeTcpPorts(2 * n);
  const t = values.fast ? LAB_AGENT_TIMINGS : undefined;
  for (let i = 0; i < n; i++) {
    const node = `agent-${i}`;
    const dir = join(lab.dir, "agents", node);
    mkdirSync(dir, { recursive: true });
    const device = join(dir, "watchdog");
    writeFileSync(device, "");
    writeFileSync(join(dir, "timeout"), "60\n");
    const bytes = join(dir, "peer-bytes");
    const args = [
      `--import=${preload}`,
      join(dist, "main.js"),
      "node-agent",
      `--kubeconfig=${lab.kubeconfig}`,
      `--pod-ip=${addressOf(i)}`,
      `--pod-name=${node}-pod`,
      `--watchdog-device=${device}`,
      `--watchdog-timeout-file=${join(dir, "timeout")}`,
      `--peer-port=${ports[2 * i]}`,
      `--health-bind-address=127.0.0.1:${ports[2 * i + 1]}`,
      ...(t
        ? [
            `--check-interval-seconds=${t.checkIntervalSeconds}`,
            `--failed-checks-before-peers=${t.failedChecksBeforePeers}`,
            `--control-plane-down-seconds=${t.controlPlaneDownSeconds}`,
            `--deadline-seconds=${t.deadlineSeconds}`,
            `--peer-timeout-seconds=${t.peerTimeoutSeconds}`,
          ]
        : []),
    ];
    const env = {
      ...process.env,
      NODE_NAME: node,
      BENCH_LOCAL_ADDRESS: addressOf(i),
      BENCH_PEER_PREFIX: PEER_PREFIX,
      BENCH_BYTES_FILE: bytes,
    };
    const proc = spawn(process.execPath, args, { env, stdio: ["ignore", "ignore", "inherit"] });
    agents.push({ node, proc, device, health: ports[2 * i + 1]!, bytes });
  }
  const leases = lab.kc.makeApiClient(CoordinationV1Api);
  const armed = async () => {
    const list = await leases.listNamespacedLease({ namespace: NODE_AGENT_NAMESPACE });
    return list.items.map(parseNodeAgentRecord).filter((r) => r.ok && r.record.armed).length;
  };
  const t0 = Date.now();
  await waitFor(`${n} agents armed`, async () => ((await armed()) >= n ? true : undefined), { timeoutMs: 180_000, intervalMs: 1000 });
  console.log(`${n} agents armed ${((Date.now() - t0) / 1000).toFixed(1)} s after they were started`);
  // Every agent has listed every other's record only after its next renewal: one more check interval, twice.
  await sleep(2 * (t?.checkIntervalSeconds ?? 5) * 1000 + 2000);

  /** One agent's /metrics; 3 tries of 15 s: at 50 agents on 2 shared cores (load 40+) one took over 5 s once. */
  const scrape = async (port: number): Promise<string> => {
    for (let i = 1; ; i++) {
      try {
        return await fetch(`http://127.0.0.1:${port}/metrics`, { signal: AbortSignal.timeout(15_000) }).then((r) => r.text());
      } catch (err) {
        if (i >= 3) throw err;
      }
    }
  };
  /**
   * Every agent's counters, one scrape each, all at once, each stamped with when its answer came: a phase's counts
   * are per-agent differences over that agent's own window (at load 40+ scraping 50 agents one after another took a
   * minute, which serial sums counted into the window).
   */
  type Snapshot = { at: number; text: string }[];
  const snapshot = (): Promise<Snapshot> => Promise.all(agents.map(async (a) => ({ text: await scrape(a.health), at: Date.now() })));
  const value = (text: string, name: string, label = "") => {
    let sum = 0;
    for (const line of text.split("\n"))
      if (line.startsWith(name) && line.includes(label)) sum += Number(line.slice(line.lastIndexOf(" ") + 1));
    return sum;
  };
  /** Over every agent: the sum of a counter's increase between two snapshots, and its mean rate per agent (per s). */
  const delta = (from: Snapshot, to: Snapshot, name: string, label = "") => {
    let total = 0;
    let rate = 0;
    to.forEach((t, i) => {
      const d = value(t.text, name, label) - value(from[i]!.text, name, label);
      total += d;
      rate += d / ((t.at - from[i]!.at) / 1000);
    });
    return { total, perAgentPerSecond: rate / to.length };
  };
  /** Peer bytes (both ways, as the askers' sockets counted them) summed over every agent. */
  const peerBytes = () =>
    agents.reduce((sum, a) => {
      try {
        return sum + Number(readFileSync(a.bytes, "utf8"));
      } catch {
        return sum;
      }
    }, 0);
  const cpuTicks = (pid: number) => {
    const f = readFileSync(`/proc/${pid}/stat`, "utf8");
    const s = f.slice(f.lastIndexOf(")") + 2).split(" ");
    return Number(s[11]) + Number(s[12]);
  };
  const rssMiB = (pid: number) => (Number(readFileSync(`/proc/${pid}/statm`, "utf8").split(" ")[1]) * 4096) / 2 ** 20;
  const pct = (xs: number[], q: number) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(q * xs.length))]!;
  const fmt = (xs: number[], d = 1) =>
    `mean ${(xs.reduce((a, b) => a + b, 0) / xs.length).toFixed(d)}, p50 ${pct(xs, 0.5).toFixed(d)}, max ${Math.max(...xs).toFixed(d)}`;

  async function phase(seconds: number) {
    const c0 = agents.map((a) => cpuTicks(a.proc.pid!));
    const bytes0 = peerBytes();
    const first = await snapshot();
    const w0 = Date.now();
    await sleep(seconds * 1000);
    const sec = (Date.now() - w0) / 1000;
    await sleep(1100); // every agent's byte file written once more after the window
    const bytes = peerBytes() - bytes0;
    const cpu = agents.map((a, i) => ((cpuTicks(a.proc.pid!) - c0[i]!) / 100 / sec) * 100);
    const rss = agents.map((a) => rssMiB(a.proc.pid!));
    const fedLast10s = agents.filter((a) => Date.now() - statSync(a.device).mtimeMs < 10_000).length;
    const last = await snapshot();
    return { sec, cpu, rss, fedLast10s, w0, bytes, first, last };
  }

  const load = () => readFileSync("/proc/loadavg", "utf8").split(" ").slice(0, 3).join(" ");
  console.log(`steady, ${steadyS} s (load ${load()}):`);
  const st = await phase(steadyS);
  const checks = delta(st.first, st.last, "stockade_node_agent_checks_total");
  console.log(`  CPU per agent, % of a core: ${fmt(st.cpu, 2)}`);
  console.log(`  RSS per agent, MiB: ${fmt(st.rss)}`);
  console.log(
    `  own checks: one every ${(1 / checks.perAgentPerSecond).toFixed(1)} s per agent; every agent fed in the last 10 s: ${st.fedLast10s}/${n}`,
  );
  const inS = delta(st.first, st.last, "stockade_node_agent_peer_requests_in_total");
  console.log(`  peer requests answered: ${inS.total} (${(inS.perAgentPerSecond * 60).toFixed(1)} per node per minute)`);
  console.log(`  peer bytes: ${st.bytes} (${((st.bytes / st.sec / n) * 60).toFixed(0)} B per node per minute)`);

  await lab.killComponent("kube-apiserver");
  console.log(`control plane down (kube-apiserver killed), ${downS} s (load ${load()}):`);
  const dn = await phase(downS);
  const inN = delta(dn.first, dn.last, "stockade_node_agent_peer_requests_in_total");
  const outN = delta(dn.first, dn.last, "stockade_node_agent_peer_requests_out_total", "answered");
  const dropped = delta(dn.first, dn.last, "stockade_node_agent_peer_requests_out_total", "dropped");
  console.log(`  CPU per agent, % of a core: ${fmt(dn.cpu, 2)}`);
  console.log(`  RSS per agent, MiB: ${fmt(dn.rss)}`);
  console.log(
    `  peer requests answered: ${inN.total} (${inN.perAgentPerSecond.toFixed(1)}/s each); answers received ${outN.total}, dropped ${dropped.total} (late, refused or not verifying)`,
  );
  console.log(
    `  per node per minute: ${(inN.perAgentPerSecond * 60).toFixed(0)} peer requests answered, ${(((dn.bytes / dn.sec / n) * 60) / 1024).toFixed(1)} KiB of peer traffic (both ways, ${dn.bytes} B in all)`,
  );
  const reasons = ["too-early", "rate-limited", "unauthorized", "bad-request"].map(
    (r) => `${r} ${delta(dn.first, dn.last, "stockade_node_agent_refused_requests_total", `reason="${r}"`).total}`,
  );
  console.log(
    `  peer requests refused: ${delta(dn.first, dn.last, "stockade_node_agent_refused_requests_total").total} (${reasons.join(", ")})`,
  );
  // Every round asks all n − 1 peers, and the next check starts c after this one ended (its read and its round
  // included): the time between an agent's rounds says how long a round took beyond c.
  const asked = outN.perAgentPerSecond + dropped.perAgentPerSecond;
  console.log(
    `  questions asked: ${asked.toFixed(1)}/s each, a round every ${((n - 1) / asked).toFixed(1)} s per agent (c = ${t?.checkIntervalSeconds ?? 5} s, ${n - 1} peers)`,
  );
  const checksDown = delta(dn.first, dn.last, "stockade_node_agent_checks_total");
  console.log(`  own checks: one every ${(1 / checksDown.perAgentPerSecond).toFixed(1)} s per agent`);
  console.log(`  every agent still fed (written in the last 10 s): ${dn.fedLast10s}/${n}`);
  await lab.startComponent("kube-apiserver");
  const back = Date.now();
  await waitFor(
    "every record renewed after the control plane came back",
    async () => {
      const list = await leases.listNamespacedLease({ namespace: NODE_AGENT_NAMESPACE }).catch(() => undefined);
      return list && list.items.filter((l) => Date.parse(String(l.spec?.renewTime)) >= back - 1000).length >= n ? true : undefined;
    },
    { timeoutMs: 120_000, intervalMs: 1000 },
  );
  console.log(`every record renewed ${((Date.now() - back) / 1000).toFixed(1)} s after the apiserver was started again`);
  if (dn.fedLast10s < n) process.exitCode = 1;
} finally {
  for (const a of agents) a.proc.kill("SIGKILL");
  await lab.down();
  rmSync(dist, { recursive: true, force: true });
}
