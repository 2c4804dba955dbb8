// Issue 41 item 1 on a real control plane: silence counts only over time in which the operator could see.
// etcd is cut off from kube-apiserver (connections left open: the watches stay up and silent) for longer than the
// operator's renew deadline, so the leader exits inside the outage and the standby leads once etcd is back. "db"'s
// test-double kubelet cannot renew during the outage and is a moment slow to re-renew after it (6 s after etcd is
// back, within its 10 s Lease, with room for a slow request). Before the fix the standby counted the outage as db's silence (its observations from before it) and fenced
// a node that was Ready and renewing. "dead" beside it never renews: it is still fenced after the outage, once the
// new leader has seen it silent for its Lease. The cluster-wide storm guard is set out of the way (100 %): it would
// hold here too, and this test is about the observer's own gaps.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { CoordinationV1Api, PatchStrategy, setHeaderOptions, type V1Lease } from "@kubernetes/client-node";
import { setTimeout as sleep } from "node:timers/promises";
import { Bed, NS, SECRETS_NS } from "../../lab/bed.ts";
import { GUARDED_LABEL } from "../../src/decide/guarded-pods.ts";
import { LEADER_LEASE } from "../../src/operator/leadership.ts";

const LEASE_SECONDS = 10;
const OUTAGE_MS = 25_000;
/** How long db's kubelet takes to renew once etcd is back: a real kubelet retries with backoff. */
const SLOW_MS = 6_000;
/**
 * The operator's leader election, short (Lease 4 s, renew deadline 3 s, retry 1 s) so that the standby leads within
 * a few seconds of etcd's return, before db's kubelet has re-renewed: the "the standby leads at once".
 */
const ELECTION = [
  "--leader-elect-lease-duration-seconds",
  "4",
  "--leader-elect-renew-deadline-seconds",
  "3",
  "--leader-elect-retry-period-seconds",
  "1",
];
const LABEL = "lab.stockade.io/outage";
/** The node controller's grace, far beyond the test: Ready stays True, only the Leases speak. */
const GRACE_SECONDS = 300;
const micro = () => new Date().toISOString().replace("Z", "000Z");

describe("lab: a control-plane outage with a change of leader fences no healthy node (issue 41 item 1)", { timeout: 400_000 }, () => {
  let bed: Bed;
  let renewer: NodeJS.Timeout | undefined;
  before(async () => {
    bed = await Bed.up({ nodes: 1, name: "cp-outage", runtime: "kwok", timings: { nodeMonitorGraceSeconds: GRACE_SECONDS } });
  });
  after(async () => {
    clearInterval(renewer);
    await bed?.lab.partitionEtcd(false).catch(() => {});
    await bed?.down();
  });

  test("etcd cut 25 s, the leader exits inside it: the standby fences the silent node, never the one re-renewing", async () => {
    const leases = bed.lab.kc.makeApiClient(CoordinationV1Api);
    const core = bed.lab.core;
    for (const name of ["db", "dead"]) {
      await core.createNode({ body: { metadata: { name, labels: { [LABEL]: "on" } } } });
      const beat = new Date().toISOString();
      await core.patchNodeStatus(
        {
          name,
          body: {
            status: {
              conditions: [{ type: "Ready", status: "True", reason: "KubeletReady", lastHeartbeatTime: beat, lastTransitionTime: beat }],
              nodeInfo: { bootID: `boot-${name}` },
            },
          },
        },
        setHeaderOptions("Content-Type", PatchStrategy.StrategicMergePatch),
      );
      const body: V1Lease = {
        metadata: { name, namespace: "kube-node-lease" },
        spec: { holderIdentity: name, leaseDurationSeconds: LEASE_SECONDS, renewTime: micro() as never },
      };
      await leases.createNamespacedLease({ namespace: "kube-node-lease", body });
      await core.createNamespacedPod({
        namespace: NS,
        body: {
          metadata: { name: `db-${name}`, labels: { [GUARDED_LABEL]: "true" } },
          spec: { nodeName: name, automountServiceAccountToken: false, containers: [{ name: "c", image: "pause" }] },
        },
      });
    }
    // db's kubelet: every 2 s, except while etcd is cut and for SLOW_MS after (dead's never renews again, from the cut).
    let cut = false;
    let resumeAt = 0;
    let renewals = 0;
    let deadRenews = true;
    const renew = (name: string) =>
      leases
        .patchNamespacedLease(
          { name, namespace: "kube-node-lease", body: { spec: { renewTime: micro() } } },
          setHeaderOptions("Content-Type", PatchStrategy.MergePatch),
        )
        .then(() => name === "db" && renewals++)
        .catch(() => {});
    renewer = setInterval(() => {
      if (cut || Date.now() < resumeAt) return;
      void renew("db");
      if (deadRenews) void renew("dead");
    }, 2_000);
    await bed.create("fenceagents", { metadata: { name: "by-hand" }, spec: { type: "manual", timeoutSeconds: 600 } });
    await bed.policy("outage", {
      nodeSelector: { matchLabels: { [LABEL]: "on" } },
      detection: { heartbeatTimeoutSeconds: 6, fenceAfterSeconds: 2, honorPodTolerations: false },
      escalation: [{ agents: [{ name: "by-hand" }] }],
      guards: { maxUnhealthyNodes: 2, maxConcurrentFences: 2 },
    });
    const args = [...ELECTION, "--cluster-max-unhealthy-nodes", "100%"];
    const first = await bed.startOperator({ leaderElect: true, extraArgs: args });
    const leaderLease = () => leases.readNamespacedLease({ name: LEADER_LEASE, namespace: SECRETS_NS });
    for (let i = 0; i < 60 && !(await leaderLease().catch(() => undefined))?.spec?.holderIdentity?.startsWith("e2e-operator-1"); i++)
      await sleep(500);
    const second = await bed.startOperator({ leaderElect: true, extraArgs: args });
    // Both replicas watch for a while: the standby's history from before the outage is what the fix must not count.
    await sleep(12_000);
    assert.equal(await bed.getFence("db"), undefined);
    assert.equal(await bed.getFence("dead"), undefined);

    const firstExit = new Promise<number | null>((resolve) => first.once("exit", resolve));
    deadRenews = false;
    cut = true;
    await bed.lab.partitionEtcd(true);
    const cutAt = Date.now();
    await sleep(OUTAGE_MS);
    resumeAt = Date.now() + SLOW_MS;
    cut = false;
    await bed.lab.partitionEtcd(false);
    const backAt = Date.now();
    // Its first renewal exactly SLOW_MS after etcd is back, not at the next tick of its 2 s interval.
    setTimeout(() => void renew("db"), Math.max(0, resumeAt - Date.now())).unref();
    assert.notEqual(first.exitCode, null, "the leader exited inside the outage (its renew deadline passed)");
    await firstExit;

    // The standby leads; db re-renews SLOW_MS after etcd is back; dead stays silent.
    const dead = await bed.waitForFence("dead", () => true, "created", 90_000);
    const holder = (await leaderLease()).spec?.holderIdentity ?? "";
    assert.match(holder, /^e2e-operator-2_/, "the standby leads");
    // db: watched for three of its Lease durations after it renewed again; never a NodeFence.
    const until = Date.now() + 3 * LEASE_SECONDS * 1000;
    while (Date.now() < until) {
      assert.equal(await bed.getFence("db"), undefined, "db is Ready and renews again: never fenced");
      await sleep(500);
    }
    assert.ok(renewals > 0 && second.exitCode === null);
    const deadAfterS = (new Date(dead.metadata?.creationTimestamp as never).getTime() - backAt) / 1000;
    assert.ok(
      deadAfterS >= LEASE_SECONDS - 1,
      `dead was fenced ${deadAfterS.toFixed(1)} s after etcd came back: its silence counted only from then (≥ its Lease)`,
    );
    console.log(
      `# etcd cut ${((backAt - cutAt) / 1000).toFixed(1)} s; the leader exited inside it; the standby fenced "dead" ${deadAfterS.toFixed(1)} s after etcd came back and never "db" (renewed again ${SLOW_MS / 1000} s after)`,
    );
  });
});
