// The installed operator (issue 27) loses the node its own leader runs on. Its replicas are pods of the
// Deployment in manifests/, on the very nodes they fence; the ledger and process-table checkers are on.
// 1. The leader's node is cut off (partition): the standby takes over and fences that very node, the guarded pod
//    on it is replaced; the cut-off leader, still running and still on the BMC network, makes no power, delete or
//    taint call after its deadline (its last successful renewal + the renew deadline) — read from the BMCs' own
//    logs (source address = its pod IP) and the apiserver's audit log (its ServiceAccount token names its pod).
// 2. The leader's node is powered off: the standby takes over, fences it, the guarded pod is replaced.
// 3. Both replicas' nodes are lost: nothing is released, guarded pods are refused (failurePolicy Fail) with the
//    apiserver's message, and everything recovers once one of them returns.
// One lab for all three; each node is brought back (unfence) before the next scenario.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { CoordinationV1Api, type V1Pod } from "@kubernetes/client-node";
import { Bed, NS } from "../lab/bed.ts";
import { failoverTimeline } from "../lab/failover-timing.ts";
import { waitFor } from "../lab/health.ts";
import { auditEvents } from "../lab/audit.ts";
import { isPowerCommand, type ChassisRequest } from "../lab/bmc-log.ts";
import { OPERATOR_NS, waitForOperator } from "../lab/operator-install.ts";
import { LEADER_LEASE } from "../src/operator.ts";

/** manifests/README.md "The Deployment": a leader that cannot renew for 10 s after its last successful renewal exits. */
const RENEW_DEADLINE_MS = 10_000;
const POD_NAME = "authentication.kubernetes.io/pod-name";
const WRITES = ["create", "update", "patch", "delete", "deletecollection"];
const s = (ms: number) => `${(ms / 1000).toFixed(1)} s`;
const iso = (t: number) => new Date(t).toISOString();

/** Every Lease state seen (polled every 200 ms): who held it and the renewTime its holder wrote (its own clock, this machine's). */
class LeaseLog {
  readonly seen: { at: number; holder: string; renew: number }[] = [];
  private timer: NodeJS.Timeout | undefined;
  private stopped = false;
  private readonly bed: Bed;
  constructor(bed: Bed) {
    this.bed = bed;
  }
  start(): this {
    const api = this.bed.lab.kc.makeApiClient(CoordinationV1Api);
    const poll = async () => {
      const l = await api.readNamespacedLease({ namespace: OPERATOR_NS, name: LEADER_LEASE }).catch(() => undefined);
      const holder = l?.spec?.holderIdentity ?? "";
      const renew = l?.spec?.renewTime ? new Date(l.spec.renewTime as unknown as string).getTime() : 0;
      const last = this.seen.at(-1);
      if (!last || last.holder !== holder || last.renew !== renew) this.seen.push({ at: Date.now(), holder, renew });
      if (!this.stopped) this.timer = setTimeout(() => void poll(), 200);
    };
    void poll();
    return this;
  }
  stop(): void {
    this.stopped = true;
    clearTimeout(this.timer);
  }
  /** The last renewal written while `pod` held the Lease. */
  lastRenewal(pod: string): number | undefined {
    return this.seen.filter((x) => x.holder.startsWith(`${pod}_`)).at(-1)?.renew;
  }
  /** When a holder other than `pod` was first seen after `since`. */
  takeover(pod: string, since: number): { at: number; holder: string } | undefined {
    return this.seen.find((x) => x.at >= since && x.holder && !x.holder.startsWith(`${pod}_`));
  }
}

describe("e2e: the installed operator loses its leader's node", () => {
  let bed: Bed;
  let leases: LeaseLog;
  before(async () => {
    const log = (m: string) => console.log(`[bed] ${m}`);
    bed = await Bed.up({ nodes: 3, name: "in-cluster-leader", operator: "in-cluster", log });
    await bed.policy("default", { guards: { maxUnhealthyNodes: 1, maxConcurrentFences: 1 } });
    leases = new LeaseLog(bed).start();
  });
  after(async () => {
    leases?.stop();
    const r = await bed?.invariant().catch(() => undefined);
    if (r) console.log(`invariant: ${r.identities} identities, ${r.replacements} replacements, ${r.violations.length} violations`);
    await bed?.down();
  });

  /** The leader and the standby (both Ready), the standby on another node. */
  const replicas = async (): Promise<{ leader: V1Pod; standby: V1Pod }> => {
    const { pods, leader } = await waitForOperator(bed.lab);
    const standby = pods.find((p) => p.metadata?.name !== leader.metadata?.name);
    assert.ok(standby, "two replicas");
    assert.notEqual(standby.spec?.nodeName, leader.spec?.nodeName, "the replicas run on different nodes");
    return { leader, standby };
  };

  /**
   * A guarded StatefulSet pod (one replica, a claim on the lab's SAN) started on `node`; afterwards every node may take
   * its replacement (the fenced one is tainted).
   */
  const guardedOn = async (name: string, node: string): Promise<V1Pod> => {
    const label = `e2e.stockade.io/${name}`;
    await bed.kubectl("label", "node", node, `${label}=true`);
    const [pod] = await bed.statefulSet(name, 1, { nodeSelector: { [label]: "true" } });
    assert.equal(pod!.spec?.nodeName, node);
    for (const n of bed.lab.nodes().filter((x) => x !== node)) await bed.kubectl("label", "node", n, `${label}=true`, "--overwrite");
    return pod!;
  };

  /** The uids of the guarded pods (they mount a claim) on `node`, sorted. */
  const guardedPodsOn = async (node: string): Promise<string[]> =>
    (await bed.lab.core.listNamespacedPod({ namespace: NS, fieldSelector: `spec.nodeName=${node}` })).items
      .filter((p) => !p.metadata?.deletionTimestamp && p.spec?.volumes?.some((v) => v.persistentVolumeClaim))
      .map((p) => p.metadata!.uid!)
      .sort();

  /** Every chassis request any BMC received since `t0`, with its node. */
  const chassisSince = (t0: number): (ChassisRequest & { node: string })[] =>
    bed.lab.nodes().flatMap((node) =>
      bed.lab
        .bmcRequests(node)
        .chassis.filter((r) => r.t >= t0)
        .map((r) => ({ ...r, node })),
    );

  /** The apiserver's audit events of requests made with `pod`'s ServiceAccount token. */
  const auditByPod = async (pod: string) => {
    const out = [];
    for await (const e of auditEvents(bed.lab.dir, (l) => l.includes(`"${pod}"`)))
      if (e.user.extra?.[POD_NAME]?.includes(pod) && e.stage === "ResponseComplete")
        out.push({ ...e, t: Date.parse(e.requestReceivedTimestamp), ok: (e.responseStatus?.code ?? 0) < 300 });
    return out.sort((a, b) => a.t - b.t);
  };

  /** Breakdown of a failover from t0 to the replacement Running, from the timeline. */
  const breakdown = (t0: number, node: string, oldUid: string, replacement: V1Pod, takeover: number | undefined, fenceCreated: number) => {
    const { off: powerOff, gone, running } = failoverTimeline(bed.rec, { node, oldUid, newUid: replacement.metadata?.uid, since: t0 });
    assert.ok(gone && running && gone <= running, bed.rec.format(t0));
    return {
      powerOff,
      gone,
      running,
      text: [
        takeover ? `new leader ${s(takeover - t0)}` : undefined,
        `NodeFence created ~${s(fenceCreated - t0)} (whole seconds)`,
        powerOff ? `power off ${s(powerOff - t0)}` : undefined,
        `old pod released ${s(gone - t0)}`,
        `replacement Running ${s(running - t0)}`,
      ]
        .filter(Boolean)
        .join(", "),
    };
  };

  test("the leader's node is cut off: the standby fences that very node; the cut-off leader makes no power, delete or taint call after its deadline", async () => {
    const { leader, standby } = await replicas();
    const node = leader.spec!.nodeName!;
    const oldPod = leader.metadata!.name!;
    const oldIp = leader.status!.podIP!;
    const newIp = standby.status!.podIP!;
    const victim = await guardedOn("lead", node);
    const uid = victim.metadata!.uid!;
    // Attribution works at all: the leader's renewals so far are in the audit log under its pod's name.
    assert.ok(
      (await auditByPod(oldPod)).some((e) => e.verb === "update" && e.objectRef?.name === LEADER_LEASE && e.ok),
      `the audit log names the leader's pod (${POD_NAME}) on its Lease renewals`,
    );

    const guarded = await guardedPodsOn(node);
    const t0 = Date.now();
    await bed.lab.partition(node);
    const replacement = await bed.waitForReplacement("lead-0", uid, 180_000);
    const f = await bed.waitForFence(node, (x) => x.status?.phase === "Released", "Released");
    assert.deepEqual(
      (f.status?.releases ?? [])
        .filter((r) => r.kind === "Pod")
        .map((r) => r.uid)
        .sort(),
      guarded,
      "every guarded pod of the node released once (an earlier scenario's replacement may be there too)",
    );
    const takeover = leases.takeover(oldPod, t0);
    assert.ok(takeover?.holder.startsWith(`${standby.metadata!.name}_`), `the standby took the Lease (${takeover?.holder})`);
    assert.notEqual(replacement.spec?.nodeName, node);

    // The deadline: the last renewal the cut-off leader got through, plus the renew deadline.
    const lastRenewal = leases.lastRenewal(oldPod);
    assert.ok(
      lastRenewal && lastRenewal <= t0 + 1000,
      `the old leader's last renewal (${lastRenewal && iso(lastRenewal)}) is before the cut`,
    );
    const deadline = lastRenewal + RENEW_DEADLINE_MS;
    const byOld = await auditByPod(oldPod);
    const lastAudited = byOld.filter((e) => e.verb === "update" && e.objectRef?.name === LEADER_LEASE && e.ok).at(-1)!;
    assert.ok(lastAudited.t >= lastRenewal - 50 && lastAudited.t <= deadline, "the audit log shows that renewal before the deadline");

    // The apiserver's side: nothing written with the old leader's token after its deadline.
    const late = byOld.filter((e) => e.t > deadline && WRITES.includes(e.verb));
    assert.deepEqual(
      late.map((e) => `${e.requestReceivedTimestamp} ${e.verb} ${e.objectRef?.resource}/${e.objectRef?.name}`),
      [],
      "no write by the old leader's pod after its deadline (audit log)",
    );
    // The BMCs' side: no power request from the old leader's pod IP after its deadline; the fence's power-off of its
    // node came from the new leader's pod IP, after that deadline.
    const chassis = chassisSince(t0 - 60_000);
    const lateFromOld = chassis.filter((r) => r.from?.address === oldIp && r.t > deadline);
    assert.deepEqual(
      lateFromOld.filter(isPowerCommand).map((r) => `${iso(r.t)} ${r.node} ${r.args}`),
      [],
      "no power command from the old leader's pod IP after its deadline (BMC logs)",
    );
    const fenceOff = chassis.find((r) => r.node === node && r.t >= t0 && r.op === "set" && r.args === "power 0");
    assert.ok(fenceOff, `${node}'s BMC received the fence's power-off`);
    assert.equal(fenceOff.from?.address, newIp, "sent from the new leader's pod IP");
    assert.ok(fenceOff.t > deadline, "after the old leader's deadline");
    const datagramsFromOld = bed.lab
      .nodes()
      .flatMap((n) => bed.lab.bmcRequests(n).datagrams.filter((d) => d.address === oldIp && d.t > deadline));

    assert.deepEqual((await bed.invariant()).violations, []);
    const b = breakdown(t0, node, uid, replacement, takeover?.at, Date.parse(String(f.metadata?.creationTimestamp)));
    console.log(
      `leader-node partition → replacement Running ${s(b.running - t0)} (${b.text}); old leader's deadline ${s(deadline - t0)} after the cut, ` +
        `fence power-off ${s(fenceOff.t - deadline)} after it; after it, from the old pod: ${late.length} writes (audit), ` +
        `${datagramsFromOld.length} datagrams to any BMC; ${byOld.filter((e) => e.t > t0).length} requests of it reached the apiserver after the cut`,
    );
    await bed.unfence(node);
  });

  test("the leader's node is powered off: the standby fences it, the guarded pod is replaced", async () => {
    const { leader, standby } = await replicas();
    const node = leader.spec!.nodeName!;
    const oldPod = leader.metadata!.name!;
    const victim = await guardedOn("lead2", node);
    const uid = victim.metadata!.uid!;

    const guarded = await guardedPodsOn(node);
    const t0 = Date.now();
    assert.equal(await bed.lab.bmc(node, "off"), "off");
    const replacement = await bed.waitForReplacement("lead2-0", uid, 180_000);
    const f = await bed.waitForFence(node, (x) => x.status?.phase === "Released", "Released");
    assert.deepEqual(
      (f.status?.releases ?? [])
        .filter((r) => r.kind === "Pod")
        .map((r) => r.uid)
        .sort(),
      guarded,
      "every guarded pod of the node released once (an earlier scenario's replacement may be there too)",
    );
    const takeover = leases.takeover(oldPod, t0);
    assert.ok(takeover?.holder.startsWith(`${standby.metadata!.name}_`), `the standby took the Lease (${takeover?.holder})`);
    // Every power request since: the lab's own power-off (ipmitool on the host) and the new leader's, no other.
    const host = [bed.lab.state.real!.hostIp, bed.lab.managementAddress];
    const power = chassisSince(t0).filter(isPowerCommand);
    assert.deepEqual(
      power.filter((r) => host.includes(r.from?.address ?? "")).map((r) => `${r.node} ${r.args}`),
      [`${node} power 0`],
      "the lab's power-off",
    );
    assert.deepEqual(
      [...new Set(power.filter((r) => !host.includes(r.from?.address ?? "")).map((r) => r.from?.address))],
      [standby.status!.podIP!],
      "every other power command came from the new leader's pod IP",
    );
    assert.deepEqual((await bed.invariant()).violations, []);
    const b = breakdown(t0, node, uid, replacement, takeover?.at, Date.parse(String(f.metadata?.creationTimestamp)));
    console.log(`leader-node power-off → replacement Running ${s(b.running - t0)} (${b.text})`);
    await bed.unfence(node);
  });

  test("both replicas' nodes are lost: nothing is released, guarded pods are refused, everything recovers when one node returns", async () => {
    const { leader, standby } = await replicas();
    const [x, y] = [leader.spec!.nodeName!, standby.spec!.nodeName!];
    const z = bed.lab.nodes().find((n) => n !== x && n !== y)!;
    const victim = await guardedOn("lead3", x);
    const uid = victim.metadata!.uid!;
    // No other node may take the operator: what is tested is the cluster with no replica at all.
    await bed.kubectl("cordon", z);

    const guarded = await guardedPodsOn(x);
    const lostPods = [...guarded, ...(await guardedPodsOn(y))];
    assert.ok(guarded.includes(uid));
    const t0 = Date.now();
    await bed.lab.partition(x);
    await bed.lab.partition(y);
    const refusals: { t: number; message: string }[] = [];
    await waitFor(
      "the claim-lock webhook refusing with no endpoints",
      async () => {
        const m = await bed.webhookRefusal();
        if (m && refusals.at(-1)?.message !== m) refusals.push({ t: Date.now(), message: m });
        return m?.includes("no endpoints available") ? true : undefined;
      },
      { timeoutMs: 120_000, intervalMs: 1000 },
    );
    // The Deployment replaces its pods after their 30 s toleration: nowhere to run them.
    await waitFor(
      "an operator pod Pending",
      async () =>
        (await bed.operatorPods()).some((p) => !p.metadata?.deletionTimestamp && p.status?.phase === "Pending") ? true : undefined,
      { timeoutMs: 120_000, intervalMs: 1000 },
    );
    const outage = Date.now();
    assert.deepEqual(
      lostPods.filter((u) => bed.rec.first((e) => e.source === "pod" && e.type === "delete" && e.uid === u)),
      [],
      "no guarded pod on a lost node is released",
    );
    for (const n of [x, y]) {
      const f = await bed.getFence(n);
      assert.ok(
        !f || !["Fenced", "Releasing", "Released"].includes(f.status?.phase ?? ""),
        `no fence of ${n} progressed (${f?.status?.phase})`,
      );
    }
    const refused = await bed.webhookRefusal();
    assert.match(refused ?? "", /claim-lock\.stockade\.io.*no endpoints available for service "stockade-webhook"/s);

    const t1 = Date.now();
    await bed.lab.heal(y);
    // The Lease still names the lost leader until a replica takes it: wait for a leader on the node that returned.
    const back = await waitFor(
      `a leader on ${y}`,
      async () => {
        const p = await bed.leaderPod();
        return p && !p.metadata?.deletionTimestamp && p.spec?.nodeName === y ? p : undefined;
      },
      { timeoutMs: 180_000, intervalMs: 250 },
    );
    const leaderAt = Date.now();
    await waitForOperator(bed.lab, 180_000); // and both replicas Ready (the lost node's were evicted: both on ${y})
    assert.ok(back.metadata?.name, "the operator leads again");
    const replacement = await bed.waitForReplacement("lead3-0", uid, 180_000);
    const f = await bed.waitForFence(x, (v) => v.status?.phase === "Released", "Released");
    assert.deepEqual(
      (f.status?.releases ?? [])
        .filter((r) => r.kind === "Pod")
        .map((r) => r.uid)
        .sort(),
      guarded,
      "every guarded pod of the node released once (an earlier scenario's replacement may be there too)",
    );
    assert.equal(await bed.webhookRefusal(), undefined, "guarded pods admitted again");
    assert.deepEqual((await bed.invariant()).violations, []);
    const running = bed.when((e) => e.source === "pod" && e.uid === replacement.metadata?.uid && e.phase === "Running")!;
    console.log(
      `both operator nodes lost: refusals ${refusals.map((r) => `at ${s(r.t - t0)}: ${r.message}`).join(" | ")}; outage held ${s(outage - t0)} with nothing released; ` +
        `one node back → operator Ready with a leader ${s(leaderAt - t1)}, → the lost node's guarded pod replaced ${s(running - t1)}`,
    );
    await bed.kubectl("uncordon", z);
  });
});
