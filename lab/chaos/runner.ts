// The chaos suite: fault schedules drawn from a seed (lab/chaos/schedule.ts), run one after another on
// one real-node bed with two operator replicas (leader election), a ledger StatefulSet (single writers
// on a shared SAN, no storage-side lock) and a 3-member etcd StatefulSet with a writer recording every
// acknowledged put. After each schedule the bed is brought back (cables mended, fenced nodes unfenced,
// components and replicas restarted) and everything is checked: the timeline invariant, the ledger
// files, the process tables captured at each power change, and etcd (no lost key, members intact).
//
// The watchdog mode (--watchdog): the node agent installed on every node (lab/node-agent-install.ts, the lab's overlay of
// manifests/node-agent/), all armed before schedule 0, and the policy's escalation a FenceAgent of type watchdog alone
// with allowWatchdogEvidence: the only way to release is WatchdogExpired. The faults add the agent's (kill-agent,
// watchdog-disabled, control-plane-down) and drop bmc-unreachable; the checks add lab/chaos/watchdog-checks.ts.
//
// The outages mode (--outages, issue 41 item 7): every schedule has a control-plane outage of 20–60 s (kube-apiserver
// stopped, or cut from etcd) that every kubelet misses renewals in and the leader replica exits inside (at its renew
// deadline; the runner starts replicas again once it is over), beside normal faults and Node objects deleted while their
// machines run; a one-node FencingPolicy beside the many-node one. The check added (in the normal mode too) is
// lab/chaos/silence-checks.ts: no power-off of a node that was not silent while the operator could see.
import { CoordinationV1Api, CustomObjectsApi } from "@kubernetes/client-node";
import { setTimeout as sleep } from "node:timers/promises";
import { Bed, NS, SECRETS_NS } from "../bed.ts";
import { waitFor } from "../health.ts";
import { Lab } from "../lab.ts";
import { GROUP, VERSION, type NodeFence } from "../../src/api/v1alpha1.ts";
import { createEtcdWorkload, etcdPodEndpoints, etcdWorkload, type EtcdWorkload } from "../etcd-workload.ts";
import { EtcdWriter, etcdBaseline, verifyEtcd, type EtcdMember } from "../etcd-checker.ts";
import { installNodeAgent, nodeAgentRecords, waitForArmedAgents } from "../node-agent-install.ts";
import { appendEvent, readEvents } from "../state.ts";
import { auditEvents, type AuditEvent } from "../audit.ts";
import { watchdogResets } from "../watchdog.ts";
import { NODE_AGENT_NAMESPACE } from "../../src/decide/node-agent-record.ts";
import {
  describeFault,
  drawSchedule,
  FAULT_KINDS,
  NODE_LOSS,
  OUTAGES_FAULT_KINDS,
  WATCHDOG_FAULT_KINDS,
  type ChaosMode,
  type Fault,
  type FaultKind,
  type Schedule,
} from "./schedule.ts";
import { watchdogViolations, type FenceSeen } from "./watchdog-checks.ts";
import { outagesFrom, renewalsFrom, silenceViolations } from "./silence-checks.ts";

export interface ChaosOptions {
  seed: number;
  schedules: number;
  /** Index of the first schedule (to replay one: --first K --schedules 1). */
  first?: number;
  nodes?: number;
  etcd?: boolean;
  /** "normal" (default): IPMI BMCs fence; "watchdog": node agents, a watchdog FenceAgent alone, WatchdogExpired;
   * "outages": the normal bed with a one-node policy beside, and a long control-plane outage in every schedule. */
  mode?: ChaosMode;
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
  mode: ChaosMode;
  results: ScheduleResult[];
  faults: Record<FaultKind, number>;
  etcd?: { acked: number; lost: number; problems: string[] };
  /** The bed's lab directory (logs, SAN, process-table captures), left in place for a look. */
  dir: string;
}

const LEDGER_REPLICAS = 2;

/** The outages mode's one-node policy selects the node with this label (the lab's last node); the default one the rest. */
export const DEDICATED_LABEL = "chaos.stockade.io/dedicated";

/** The labels the runner gives a node beyond the lab's own (set again when its Node is re-created). */
function runnerLabels(bed: Bed, mode: ChaosMode, node: string): Record<string, string> {
  return mode === "outages" && node === bed.lab.nodes().at(-1) ? { [DEDICATED_LABEL]: "true" } : {};
}

/** Every Lease renewal the kubelets got committed, from the apiserver's audit log (the silence check's input). */
async function kubeletRenewals(bed: Bed) {
  const audit: AuditEvent[] = [];
  for await (const a of auditEvents(bed.lab.dir, (l) => l.includes("kube-node-lease") && l.includes("system:node:"))) audit.push(a);
  return renewalsFrom(audit);
}

export async function runChaos(o: ChaosOptions): Promise<ChaosSummary> {
  const log = o.log ?? (() => {});
  const mode = o.mode ?? "normal";
  const bed = await Bed.up({ nodes: o.nodes ?? 4, name: mode === "normal" ? "chaos" : `chaos-${mode}`, runtime: "real", log });
  const results: ScheduleResult[] = [];
  const kinds = mode === "watchdog" ? WATCHDOG_FAULT_KINDS : mode === "outages" ? OUTAGES_FAULT_KINDS : FAULT_KINDS;
  const faults = Object.fromEntries(kinds.map((k) => [k, 0])) as Record<FaultKind, number>;
  let writer: EtcdWriter | undefined;
  let etcd: { w: EtcdWorkload; members: EtcdMember[] } | undefined;
  try {
    const guards = { maxUnhealthyNodes: "50%", maxConcurrentFences: 2 };
    if (mode === "watchdog") {
      // The operator replicas stay host processes (admin credentials: they read the agents' records like the in-cluster
      // one, whose read the node agent's RBAC grants), so kill-operator and the recovery work as in the normal mode.
      await installNodeAgent(bed.lab, { log });
      await bed.create("fenceagents", { metadata: { name: "node-watchdog" }, spec: { type: "watchdog" } });
      await bed.policy("default", { escalation: [{ agents: [{ name: "node-watchdog" }] }], allowWatchdogEvidence: true, guards });
    } else if (mode === "outages") {
      // A one-node policy (a dedicated database node) beside the many-node one, which must not select that node too.
      const dedicated = bed.lab.nodes().at(-1)!;
      await bed.lab.labelNode(dedicated, runnerLabels(bed, mode, dedicated));
      await bed.policy("default", { guards, nodeSelector: { matchExpressions: [{ key: DEDICATED_LABEL, operator: "DoesNotExist" }] } });
      await bed.policy("dedicated", { guards, nodeSelector: { matchLabels: { [DEDICATED_LABEL]: "true" } } });
      log(`policies: default selects every node but ${dedicated}; dedicated selects ${dedicated} alone`);
    } else await bed.policy("default", { guards });
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
      const schedule = drawSchedule(o.seed, i, { nodes: bed.lab.nodes(), mode });
      for (const f of schedule.faults) faults[f.kind]++;
      log(`schedule ${i} (seed ${o.seed}): ${schedule.faults.map(describeFault).join(", ")}`);
      const t0 = Date.now();
      const before = (await bed.invariant()).violations.length;
      await runSchedule(bed, schedule, mode, log);
      // A bed that cannot be brought back is reported (it is not a safety violation, but it is not fine
      // either); one more try, then the run stops rather than blame the next schedule for this one's mess.
      let counts: Recovered = { fences: 0, releases: 0, seen: [] };
      const recoveryProblems: string[] = [];
      for (let attempt = 1; ; attempt++) {
        try {
          counts = await recover(bed, schedule, { mode, since: t0 }, log);
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
      if (mode === "watchdog") violations.push(...watchdogViolations(counts.seen, readEvents(bed.lab.dir), t0));
      // The operator's power-offs go through the BMCs in the other modes (the watchdog mode's resets are its checks').
      else
        violations.push(
          ...silenceViolations(readEvents(bed.lab.dir), await kubeletRenewals(bed), bed.lab.state.nodeLeaseSeconds * 1000, t0),
        );
      results.push({
        schedule,
        fences: counts.fences,
        releases: counts.releases,
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
    return { seed: o.seed, mode, results, faults, ...(etcdResult ? { etcd: etcdResult } : {}), dir: bed.lab.dir };
  } finally {
    await writer?.stop().catch(() => undefined);
    await bed.down();
  }
}

/** Starts every fault at its moment; bounded faults are undone after their duration. */
async function runSchedule(bed: Bed, s: Schedule, mode: ChaosMode, log: (m: string) => void): Promise<void> {
  const t0 = Date.now();
  await Promise.all(
    s.faults.map(async (f) => {
      await sleep(Math.max(0, t0 + f.at - Date.now()));
      await inject(bed, f, mode, log).catch((e: Error) => log(`  fault ${describeFault(f)} could not be injected: ${e.message}`));
    }),
  );
}

/** Replica restarts of one bed, one at a time (two outages' ends, or an outage's end and the recovery, may overlap). */
const restarting = new WeakMap<Bed, Promise<void>>();

/**
 * After a control-plane outage: the replicas that exited in it (the leader at its renew deadline) started again, so the
 * rest of the schedule has a standby, as a Deployment's restart would give.
 */
function restoreReplicas(bed: Bed, log: (m: string) => void): Promise<void> {
  const next = (restarting.get(bed) ?? Promise.resolve()).then(async () => {
    const exited = bed.operators.filter((c) => c.exitCode !== null || c.signalCode !== null).length;
    const alive = bed.operators.length - exited;
    for (let k = alive; k < 2; k++) await bed.startOperator({ leaderElect: true });
    if (alive < 2) log(`  ${2 - alive} operator replica(s) had exited in the outage; started again`);
  });
  restarting.set(
    bed,
    next.catch((e: Error) => log(`  operator replicas could not be started again: ${e.message.split("\n")[0]}`)),
  );
  return restarting.get(bed)!;
}

/** Cuts in force on a bed's apiserver↔etcd link: a short cut inside a long one must not mend the long one early. */
const etcdCuts = new WeakMap<Bed, number>();

async function cutEtcd(bed: Bed, ms: number): Promise<void> {
  etcdCuts.set(bed, (etcdCuts.get(bed) ?? 0) + 1);
  await bed.lab.partitionEtcd(true);
  await sleep(ms);
  const left = etcdCuts.get(bed)! - 1;
  etcdCuts.set(bed, left);
  if (left === 0) await bed.lab.partitionEtcd(false);
}

/** The node-deleted fault: the Node deleted; the kubelet restarted if it has not re-created it in f.durationMs. */
async function deleteNode(bed: Bed, f: Fault, mode: ChaosMode, log: (m: string) => void): Promise<void> {
  const lab = bed.lab;
  const node = f.node!;
  // The API may be down (an outage at the same time): retried until it answers.
  const api = { timeoutMs: 120_000, intervalMs: 500 };
  const old = await waitFor(`${node}'s Node`, async () => (await lab.node(node)).metadata?.uid, api);
  await waitFor(
    `${node}'s Node deleted`,
    () =>
      lab.deleteNode(node).then(
        () => true,
        (e: { code?: number }) => (e.code === 404 ? true : Promise.reject(e)), // an earlier try's delete went through
      ),
    api,
  );
  const recreated = async () => {
    const n = await lab.node(node).catch(() => undefined);
    return (n && n.metadata?.uid !== old && !n.metadata?.deletionTimestamp) || undefined;
  };
  const byItself = await waitFor(`${node}'s Node re-created`, recreated, { timeoutMs: f.durationMs, intervalMs: 500 }).catch(() => false);
  if (byItself) log(`  ${node}: its kubelet re-created its Node by itself`);
  else {
    // A real kubelet registers its Node once per start: a deleted one stays gone until the kubelet restarts.
    log(`  ${node}: Node still gone after ${(f.durationMs / 1000).toFixed(1)} s; restarting its kubelet`);
    if (lab.machine(node).kubelet === "running") await lab.killKubelet(node);
    await lab.heal(node);
    await waitFor(`${node}'s Node re-created by its restarted kubelet`, recreated, api);
  }
  await waitFor(`${node}'s labels`, () => lab.labelNode(node, runnerLabels(bed, mode, node)).then(() => true), api);
}

async function inject(bed: Bed, f: Fault, mode: ChaosMode, log: (m: string) => void): Promise<void> {
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
      // Recorded, so that the silence check tells this power-off (someone at the BMC) from the operator's.
      appendEvent(lab.dir, { kind: "fault", node, detail: { fault: "power-cycle" } });
      await lab.bmc(node, "off");
      await sleep(f.durationMs);
      await lab.bmc(node, "on");
      return;
    case "etcd-partition":
      return cutEtcd(bed, f.durationMs);
    case "kill-controller-manager":
      await lab.killComponent("kube-controller-manager");
      await sleep(f.durationMs);
      return lab.startComponent("kube-controller-manager");
    case "kill-agent":
      log(`  killed ${node}'s node agent (pids ${(await lab.killNodeAgent(node)).join(", ")})`);
      return;
    case "watchdog-disabled":
      await disableWatchdog(bed, node, log);
      return lab.partition(node);
    case "control-plane-down":
      await lab.killComponent("kube-apiserver");
      await sleep(f.durationMs);
      return lab.startComponent("kube-apiserver");
    case "apiserver-down":
      await lab.stopComponent("kube-apiserver");
      await sleep(f.durationMs);
      await lab.startComponent("kube-apiserver");
      return restoreReplicas(bed, log);
    case "etcd-down":
      await cutEtcd(bed, f.durationMs);
      return restoreReplicas(bed, log);
    case "node-deleted":
      return deleteNode(bed, f, mode, log);
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

/** The node agent's pod on a node (the DaemonSet's), if any. */
async function agentPod(bed: Bed, node: string): Promise<string | undefined> {
  const pods = await bed.lab.core.listNamespacedPod({ namespace: NODE_AGENT_NAMESPACE, fieldSelector: `spec.nodeName=${node}` });
  return pods.items.find((p) => !p.metadata?.deletionTimestamp)?.metadata?.name;
}

/** The watchdog-disabled fault: the device goes, the node's agent is restarted, and its new record says armed=false. */
async function disableWatchdog(bed: Bed, node: string, log: (m: string) => void): Promise<void> {
  const lab = bed.lab;
  await lab.disableWatchdog(node);
  // The API may be down (a control-plane-down fault at the same time): retried until it answers.
  const api = { timeoutMs: 120_000, intervalMs: 500 };
  const old = await waitFor(`${node}'s agent pod`, async () => ({ name: await agentPod(bed, node) }), api);
  if (old.name) {
    const name = old.name;
    await waitFor(
      `${name} deleted`,
      async () =>
        lab.core.deleteNamespacedPod({ namespace: NODE_AGENT_NAMESPACE, name }).then(
          () => true,
          (e: { code?: number }) => (e.code === 404 ? true : Promise.reject(e)), // gone: an earlier try's delete went through
        ),
      api,
    );
  }
  await waitFor(
    `${node}'s agent restarted, unarmed`,
    async () => {
      const r = (await nodeAgentRecords(lab)).records.get(node);
      return (r && r.holder !== old.name && !r.armed) || undefined;
    },
    api,
  );
  log(`  ${node}: watchdog disabled, its agent runs unarmed; cutting it off`);
}

interface Recovered {
  fences: number;
  releases: number;
  /** The NodeFences as they were before the recovery deleted them (the watchdog checks read them). */
  seen: FenceSeen[];
}

const fenceSeen = (f: NodeFence): FenceSeen => ({
  node: f.spec?.nodeName ?? f.metadata!.name!,
  createdMs: Date.parse(String(f.metadata?.creationTimestamp)),
  evidence: f.status?.evidence?.method,
  releases: (f.status?.releases ?? []).map((r) => ({
    kind: r.kind,
    name: String((r as { name?: string }).name ?? (r as { uid?: string }).uid ?? ""),
    timeMs: Date.parse(String(r.time)),
  })),
});

/** When the schedule's lost node went (seen Unknown; for kill-agent, its watchdog's reset), ms. */
async function lostSince(bed: Bed, lost: Fault, t0: number): Promise<number> {
  const lab = bed.lab;
  if (lost.kind === "kill-agent") {
    const reset = await waitFor(`${lost.node}'s watchdog to reset it`, () => watchdogResets(lab.dir, { node: lost.node, sinceMs: t0 })[0], {
      timeoutMs: 60_000,
      intervalMs: 250,
    }).catch(() => undefined);
    return reset ? Date.parse(reset.time) : Date.now();
  }
  return await waitFor(
    `${lost.node} to be seen down`,
    async () => (Lab.readyStatus(await lab.node(lost.node!)) === "True" ? undefined : Date.now()),
    { timeoutMs: 40_000, intervalMs: 250 },
  ).catch(() => Date.now());
}

/** The watchdog mode's last steps: every watchdog enabled again (its agent restarted), killed agents let live, all armed. */
async function rearm(bed: Bed, schedule: Schedule, log: (m: string) => void): Promise<void> {
  const lab = bed.lab;
  for (const n of lab.nodes()) {
    if (lab.watchdog(n).enabled) continue;
    await lab.enableWatchdog(n);
    const pod = await agentPod(bed, n);
    if (pod) await lab.core.deleteNamespacedPod({ namespace: NODE_AGENT_NAMESPACE, name: pod }).catch(() => undefined);
    log(`  ${n}: watchdog enabled again, its agent restarted`);
  }
  for (const f of schedule.faults.filter((x) => x.kind === "kill-agent")) if (lab.machine(f.node!).power === "on") await lab.heal(f.node!); // the agent let live (a reset did it already)
  await waitForArmedAgents(lab, lab.nodes(), 180_000);
}

/** Brings the bed back: every cable mended, every fence undone, every machine and component up. */
async function recover(
  bed: Bed,
  schedule: Schedule,
  { mode, since: t0 }: { mode: ChaosMode; since: number },
  log: (m: string) => void,
): Promise<Recovered> {
  const lab = bed.lab;
  const custom = lab.kc.makeApiClient(CustomObjectsApi);
  await lab.startComponent("kube-apiserver");
  await lab.partitionEtcd(false);
  await lab.startComponent("kube-controller-manager");
  for (const n of lab.nodes()) await lab.setBmcReachable(n, true);
  await restarting.get(bed);
  const alive = bed.operators.filter((c) => c.exitCode === null && c.signalCode === null).length;
  for (let k = alive; k < 2; k++) await bed.startOperator({ leaderElect: true });
  // The node a schedule took away from the control plane: first let the fault take effect (the node goes
  // Unknown), then wait for its fence to release it and unfence it; a node Stockade rightly leaves alone
  // (nothing to protect on it) is healed once no NodeFence appeared 25 s after it went Unknown. After a control-plane
  // outage the clock starts when the outage ended, and runs 60 s: a new leader takes over (up to the 15 s election
  // Lease), relists, and counts every node's silence again from when it could see (the smoke run's first try healed a
  // hung node 25 s after the outage, while the new leader was still counting).
  // Every NodeFence the schedule left, by uid: read before any unfence too, because the operator deletes an automatic
  // NodeFence once it is unfenced (the smoke run's first watchdog-disabled fence was gone by the final list).
  const fences = new Map<string, NodeFence>();
  const listFences = async () => {
    // An apiserver just started again answers 429 "storage is (re)initializing" for a moment (outages mode): retried.
    let l: { items: NodeFence[] } | undefined;
    for (let attempt = 0; l === undefined; attempt++) {
      try {
        l = (await custom.listClusterCustomObject({ group: GROUP, version: VERSION, plural: "nodefences" })) as { items: NodeFence[] };
      } catch (err) {
        const code = (err as { code?: number }).code;
        if (attempt >= 30 || (code !== 429 && code !== 503)) throw err;
        await sleep(1_000);
      }
    }
    for (const f of l.items) fences.set(f.metadata!.uid!, f); // the later read has every release the earlier had
    return l.items;
  };
  const lostFault = schedule.faults.find((f) => NODE_LOSS.has(f.kind));
  const lost = lostFault?.node;
  let unfenceAfterHeal = false;
  if (lostFault && lost) {
    const seenDown = await lostSince(bed, lostFault, t0);
    const outageEnds =
      mode === "outages"
        ? outagesFrom(readEvents(lab.dir))
            .filter((x) => x.startMs >= t0)
            .map((x) => x.endMs ?? Date.now())
        : [];
    const unknownAt = Math.max(seenDown, ...outageEnds);
    const grace = outageEnds.length ? 60_000 : 25_000;
    // A node whose watchdog is disabled is never released on watchdog evidence: wait past the arithmetic's wait (28 s at
    // the lab's D and T) plus a margin, not the 120 s a fence that should end gets.
    const disabled = lostFault.kind === "watchdog-disabled";
    const outcome = await waitFor(
      `${lost}'s fence to release it`,
      async () => {
        const f = await bed.getFence(lost);
        if (f?.status?.phase === "Released") return "released";
        if (!f && Date.now() - unknownAt > grace) return "not fenced";
        return undefined;
      },
      { timeoutMs: disabled ? 60_000 : 120_000, intervalMs: 250 },
    ).catch(() => `still fencing after ${disabled ? 60 : 120} s`);
    await listFences();
    if (outcome === "released") {
      await bed.unfence(lost);
      log(`  ${lost} fenced and released; unfenced`);
    } else {
      log(`  ${lost}: ${outcome} (${(await bed.getFence(lost))?.status?.phase ?? "no NodeFence"}); healed`);
      unfenceAfterHeal = mode === "watchdog";
    }
  }
  for (const n of lab.nodes()) {
    await lab.reconnect(n);
    const m = lab.machine(n);
    if (m.power === "off") await lab.bmc(n, "on");
    else if (m.kubelet !== "running") await lab.heal(n);
  }
  // The watchdog mode: a fence that never released (a disabled watchdog, a node back before the wait was over) is
  // unfenced by the administrator once its cable is mended, as the docs say: until then the agent of a node that was
  // reset (or healed from a hang) stops feeding again at once, seeing the NodeFence.
  await listFences();
  if (unfenceAfterHeal && lost && (await bed.getFence(lost))) {
    await bed.kubectl("patch", "nodefence", lost, "--type=merge", "-p", '{"spec":{"unfence":true}}');
    await bed.waitForFence(lost, (f) => f.status?.phase === "Unfenced", "Unfenced");
    log(`  ${lost} unfenced`);
  }
  // A Node still deleted (the fault could not finish): its kubelet restarted, as an administrator would.
  if (mode === "outages")
    for (const n of lab.nodes()) {
      const gone = await lab.node(n).then(
        () => false,
        (e: { code?: number }) => e.code === 404,
      );
      if (!gone || lab.machine(n).power === "off") continue;
      if (lab.machine(n).kubelet === "running") await lab.killKubelet(n);
      await lab.heal(n);
      log(`  ${n}: its Node was still gone; kubelet restarted`);
    }
  await Promise.all(lab.nodes().map((n) => lab.waitForNodeReadyStatus(n, "True", 120_000)));
  // A Node re-created by its kubelet lost the labels only an administrator sets (where its BMC answers, the policies').
  if (mode === "outages") for (const n of lab.nodes()) await lab.labelNode(n, runnerLabels(bed, mode, n));
  // Unfenced NodeFences are done with: delete them so the next schedule starts from none.
  const list = { items: await listFences() };
  const all = [...fences.values()];
  const counts: Recovered = {
    fences: all.length,
    releases: all.reduce((n, f) => n + (f.status?.releases?.length ?? 0), 0),
    seen: all.map(fenceSeen),
  };
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
  if (mode === "watchdog") await rearm(bed, schedule, log);
  return counts;
}

/** The closing table: schedules, faults of each kind, fences, releases, violations (with replay commands). */
export function formatSummary(s: ChaosSummary): string {
  const first = s.results[0]?.schedule.index ?? 0;
  const sum = (f: (r: ScheduleResult) => number) => s.results.reduce((n, r) => n + f(r), 0);
  const rows: [string, string | number][] = [
    ["mode", s.mode],
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
