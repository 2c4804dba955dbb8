// The chaos suite: fault schedules drawn from a seed (lab/chaos/schedule.ts), run one after another on
// one real-node bed with two operator replicas (leader election), a ledger StatefulSet (single writers
// on a shared SAN, no storage-side lock) and a 3-member etcd StatefulSet with a writer recording every
// acknowledged put. After each schedule the bed is brought back (cables mended, fenced nodes unfenced,
// components and replicas restarted) and everything is checked: the timeline invariant, the ledger
// files, the process tables captured at each power change, and etcd (no lost key, members intact).
import { CoordinationV1Api, CustomObjectsApi } from "@kubernetes/client-node";
import { setTimeout as sleep } from "node:timers/promises";
import { Bed, NS, SECRETS_NS } from "../bed.ts";
import { waitFor } from "../health.ts";
import { Lab } from "../lab.ts";
import { GROUP, VERSION, type NodeFence } from "../../src/api/v1alpha1.ts";
import { createEtcdWorkload, etcdPodEndpoints, etcdWorkload, type EtcdWorkload } from "../etcd-workload.ts";
import { EtcdWriter, etcdBaseline, verifyEtcd, type EtcdMember } from "../etcd-checker.ts";
import { describeFault, drawSchedule, FAULT_KINDS, NODE_LOSS, type Fault, type FaultKind, type Schedule } from "./schedule.ts";

export interface ChaosOptions {
  seed: number;
  schedules: number;
  /** Index of the first schedule (to replay one: --first K --schedules 1). */
  first?: number;
  nodes?: number;
  etcd?: boolean;
  log?: (msg: string) => void;
}

export interface ScheduleResult {
  schedule: Schedule;
  fences: number;
  releases: number;
  violations: string[];
  /** The bed needed a second try to come back after this schedule (reported, not a violation). */
  recoveryProblems: string[];
  seconds: number;
}

export interface ChaosSummary {
  seed: number;
  results: ScheduleResult[];
  faults: Record<FaultKind, number>;
  etcd?: { acked: number; lost: number; problems: string[] };
  /** The bed's lab directory (logs, SAN, process-table captures), left in place for a look. */
  dir: string;
}

const LEDGER_REPLICAS = 2;

export async function runChaos(o: ChaosOptions): Promise<ChaosSummary> {
  const log = o.log ?? (() => {});
  const bed = await Bed.up({ nodes: o.nodes ?? 4, name: "chaos", runtime: "real", log });
  const results: ScheduleResult[] = [];
  const faults = Object.fromEntries(FAULT_KINDS.map((k) => [k, 0])) as Record<FaultKind, number>;
  let writer: EtcdWriter | undefined;
  let etcd: { w: EtcdWorkload; members: EtcdMember[] } | undefined;
  try {
    await bed.policy("default", { guards: { maxUnhealthyNodes: "50%", maxConcurrentFences: 2 } });
    await bed.startOperator({ leaderElect: true });
    await bed.startOperator({ leaderElect: true });
    await bed.statefulSet("ledger", LEDGER_REPLICAS);
    if (o.etcd !== false) {
      const w = etcdWorkload({ namespace: NS, image: bed.lab.state.real!.images.etcd!, labDir: bed.lab.dir });
      await createEtcdWorkload(bed.lab.kc, w);
      const endpoints = () => etcdPodEndpoints(bed.lab.kc, w);
      const members = await etcdBaseline(endpoints, { members: 3, timeoutMs: 120_000 });
      writer = new EtcdWriter({ endpoints }).start();
      etcd = { w, members };
    }
    for (let i = o.first ?? 0; i < (o.first ?? 0) + o.schedules; i++) {
      const schedule = drawSchedule(o.seed, i, { nodes: bed.lab.nodes() });
      for (const f of schedule.faults) faults[f.kind]++;
      log(`schedule ${i} (seed ${o.seed}): ${schedule.faults.map(describeFault).join(", ")}`);
      const t0 = Date.now();
      const before = (await bed.invariant()).violations.length;
      await runSchedule(bed, schedule, log);
      // A bed that cannot be brought back is reported (it is not a safety violation, but it is not fine
      // either); one more try, then the run stops rather than blame the next schedule for this one's mess.
      let counts = { fences: 0, releases: 0 };
      const recoveryProblems: string[] = [];
      for (let attempt = 1; ; attempt++) {
        try {
          counts = await recover(bed, schedule, log);
          break;
        } catch (e) {
          recoveryProblems.push(`recovery attempt ${attempt} failed: ${(e as Error).message.split("\n")[0]}`);
          log(`  ${recoveryProblems.at(-1)}`);
          if (attempt === 2)
            throw new Error(
              `schedule ${i} (seed ${o.seed}): the bed could not be brought back; replay: npm run chaos -- --seed ${o.seed} --first ${i} --schedules 1`,
              { cause: e },
            );
        }
      }
      const violations = (await bed.invariant()).violations.slice(before);
      results.push({
        schedule,
        ...counts,
        violations,
        recoveryProblems,
        seconds: (Date.now() - t0) / 1000,
      });
      log(
        `schedule ${i} done in ${((Date.now() - t0) / 1000).toFixed(0)} s: fences ${counts.fences}, releases ${counts.releases}, violations ${violations.length}${recoveryProblems.length ? `, recovery retried` : ""}`,
      );
      if (violations.length) {
        log(`VIOLATION in schedule ${i}: replay with: npm run chaos -- --seed ${o.seed} --first ${i} --schedules 1`);
        for (const v of violations) log(`  ${v}`);
        log(bed.rec.format(t0));
      }
    }
    let etcdResult: ChaosSummary["etcd"];
    if (writer && etcd) {
      const wlog = await writer.stop();
      const verdict = await verifyEtcd({ endpoints: () => etcdPodEndpoints(bed.lab.kc, etcd!.w), log: wlog, members: etcd.members });
      etcdResult = { acked: verdict.acked, lost: verdict.lost.length, problems: verdict.problems };
    }
    return { seed: o.seed, results, faults, ...(etcdResult ? { etcd: etcdResult } : {}), dir: bed.lab.dir };
  } finally {
    await writer?.stop().catch(() => undefined);
    await bed.down();
  }
}

/** Starts every fault at its moment; bounded faults are undone after their duration. */
async function runSchedule(bed: Bed, s: Schedule, log: (m: string) => void): Promise<void> {
  const t0 = Date.now();
  await Promise.all(
    s.faults.map(async (f) => {
      await sleep(Math.max(0, t0 + f.at - Date.now()));
      await inject(bed, f, log).catch((e: Error) => log(`  fault ${describeFault(f)} could not be injected: ${e.message}`));
    }),
  );
}

async function inject(bed: Bed, f: Fault, log: (m: string) => void): Promise<void> {
  const lab = bed.lab;
  const node = f.node!;
  switch (f.kind) {
    case "crash":
      return lab.crash(node);
    case "partition":
      return lab.partition(node);
    case "kill-kubelet":
      return lab.killKubelet(node);
    case "bmc-unreachable":
      await lab.setBmcReachable(node, false);
      await lab.crash(node);
      await sleep(10_000); // the first fence attempts fail; the policy retries
      return lab.setBmcReachable(node, true);
    case "short-partition":
      await lab.partition(node);
      await sleep(f.durationMs);
      return lab.heal(node);
    case "node-partition":
      await lab.partitionNodes(node, f.peer!);
      await sleep(f.durationMs);
      return lab.reconnect(node);
    case "power-cycle":
      if (lab.machine(node).power === "off") return;
      await lab.bmc(node, "off");
      await sleep(f.durationMs);
      await lab.bmc(node, "on");
      return;
    case "etcd-partition":
      await lab.partitionEtcd(true);
      await sleep(f.durationMs);
      return lab.partitionEtcd(false);
    case "kill-controller-manager":
      await lab.killComponent("kube-controller-manager");
      await sleep(f.durationMs);
      return lab.startComponent("kube-controller-manager");
    case "kill-operator": {
      const holder = (
        await lab.kc.makeApiClient(CoordinationV1Api).readNamespacedLease({ name: "stockade-operator", namespace: SECRETS_NS })
      ).spec?.holderIdentity;
      const m = /e2e-operator-(\d+)/.exec(holder ?? "");
      const leader = m ? bed.operators[Number(m[1]) - 1] : bed.operators.find((c) => c.exitCode === null && c.signalCode === null);
      await bed.killOperator("SIGKILL", leader);
      log(`  killed operator ${holder ?? "(no leader)"}`);
      return;
    }
  }
}

/** Brings the bed back: every cable mended, every fence undone, every machine and component up. */
async function recover(bed: Bed, schedule: Schedule, log: (m: string) => void): Promise<{ fences: number; releases: number }> {
  const lab = bed.lab;
  const custom = lab.kc.makeApiClient(CustomObjectsApi);
  await lab.partitionEtcd(false);
  await lab.startComponent("kube-controller-manager");
  for (const n of lab.nodes()) await lab.setBmcReachable(n, true);
  const alive = bed.operators.filter((c) => c.exitCode === null && c.signalCode === null).length;
  for (let k = alive; k < 2; k++) await bed.startOperator({ leaderElect: true });
  // The node a schedule took away from the control plane: first let the fault take effect (the node goes
  // Unknown), then wait for its fence to release it and unfence it; a node Stockade rightly leaves alone
  // (nothing to protect on it) is healed once no NodeFence appeared 25 s after it went Unknown.
  const lost = schedule.faults.find((f) => NODE_LOSS.has(f.kind))?.node;
  if (lost) {
    const unknownAt = await waitFor(
      `${lost} to be seen down`,
      async () => (Lab.readyStatus(await lab.node(lost)) === "True" ? undefined : Date.now()),
      {
        timeoutMs: 40_000,
        intervalMs: 250,
      },
    ).catch(() => Date.now());
    const outcome = await waitFor(
      `${lost}'s fence to release it`,
      async () => {
        const f = await bed.getFence(lost);
        if (f?.status?.phase === "Released") return "released";
        if (!f && Date.now() - unknownAt > 25_000) return "not fenced";
        return undefined;
      },
      { timeoutMs: 120_000, intervalMs: 250 },
    ).catch(() => "still fencing after 120 s");
    if (outcome === "released") {
      await bed.unfence(lost);
      log(`  ${lost} fenced and released; unfenced`);
    } else log(`  ${lost}: ${outcome} (${(await bed.getFence(lost))?.status?.phase ?? "no NodeFence"}); healed`);
  }
  for (const n of lab.nodes()) {
    await lab.reconnect(n);
    const m = lab.machine(n);
    if (m.power === "off") await lab.bmc(n, "on");
    else if (m.kubelet !== "running") await lab.heal(n);
  }
  await Promise.all(lab.nodes().map((n) => lab.waitForNodeReadyStatus(n, "True", 120_000)));
  // Unfenced NodeFences are done with: delete them so the next schedule starts from none.
  const list = (await custom.listClusterCustomObject({ group: GROUP, version: VERSION, plural: "nodefences" })) as { items: NodeFence[] };
  const counts = { fences: list.items.length, releases: list.items.reduce((n, f) => n + (f.status?.releases?.length ?? 0), 0) };
  for (const f of list.items) {
    await custom
      .deleteClusterCustomObject({ group: GROUP, version: VERSION, plural: "nodefences", name: f.metadata!.name! })
      .catch(() => undefined);
  }
  await waitFor(
    "no NodeFence left",
    async () =>
      ((await custom.listClusterCustomObject({ group: GROUP, version: VERSION, plural: "nodefences" })) as { items: unknown[] }).items
        .length === 0 || undefined,
    { timeoutMs: 60_000 },
  );
  await waitFor(
    `${LEDGER_REPLICAS} ledger pods Running`,
    async () => {
      const ps = await bed.pods("ledger");
      return (
        (ps.length === LEDGER_REPLICAS && ps.every((p) => p.status?.phase === "Running" && !p.metadata?.deletionTimestamp)) || undefined
      );
    },
    { timeoutMs: 180_000 },
  );
  return counts;
}

/** The closing table: schedules, faults of each kind, fences, releases, violations (with replay commands). */
export function formatSummary(s: ChaosSummary): string {
  const first = s.results[0]?.schedule.index ?? 0;
  const sum = (f: (r: ScheduleResult) => number) => s.results.reduce((n, r) => n + f(r), 0);
  const rows: [string, string | number][] = [
    ["seed", s.seed],
    ["schedules", `${s.results.length} (${first}–${first + s.results.length - 1})`],
    ...Object.entries(s.faults).map(([k, n]) => [`  ${k}`, n] as [string, number]),
    ["fences", sum((r) => r.fences)],
    ["releases", sum((r) => r.releases)],
    ["violations", sum((r) => r.violations.length)],
    ["recoveries retried", s.results.filter((r) => r.recoveryProblems.length).length],
  ];
  const secs = s.results.map((r) => r.seconds).sort((x, y) => x - y);
  if (secs.length)
    rows.push(["s per schedule (median/max)", `${secs[Math.floor(secs.length / 2)]!.toFixed(0)} / ${secs.at(-1)!.toFixed(0)}`]);
  if (s.etcd)
    rows.push(
      ["etcd puts acked / lost", `${s.etcd.acked} / ${s.etcd.lost}`],
      ["etcd problems", s.etcd.problems.length ? s.etcd.problems.join("; ") : "none"],
    );
  const w = Math.max(...rows.map(([k]) => k.length));
  const lines = rows.map(([k, v]) => `${k.padEnd(w)}  ${v}`);
  for (const r of s.results.filter((x) => x.violations.length))
    lines.push(`VIOLATION schedule ${r.schedule.index}: npm run chaos -- --seed ${s.seed} --first ${r.schedule.index} --schedules 1`);
  return lines.join("\n");
}
