// Issue 31 on a real control plane (apiserver, kube-controller-manager): the operator measures a node Lease's expiry on
// its own monotonic clock from when it saw the renewal, as the node controller does, never from renewTime's value.
// Two Nodes and their Leases are made by hand. "skew"'s test-double kubelet renews its Lease every 2 s with the clock
// of a node 120 s behind (renewTime = now − 120 s): it is never fenced over several Lease durations. "silent" beside
// it never renews: it is fenced by its Lease, before the node controller's Ready=Unknown.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { CoordinationV1Api, PatchStrategy, setHeaderOptions, type V1Lease } from "@kubernetes/client-node";
import { setTimeout as sleep } from "node:timers/promises";
import { Bed, NS } from "../../lab/bed.ts";
import { GUARDED_LABEL } from "../../src/decide/guarded-pods.ts";

const LEASE_SECONDS = 8;
const SKEW_MS = 120_000;
const LABEL = "lab.stockade.io/lease-skew";
/** The node controller's grace, far beyond the Lease: Ready stays True on "silent" while it is fenced by its Lease. */
const GRACE_SECONDS = 120;
/** A Lease's renewTime as the kubelet writes it (MicroTime), on a clock `offsetMs` off. */
const micro = (offsetMs: number) => new Date(Date.now() + offsetMs).toISOString().replace("Z", "000Z");

describe("lab: a Lease's expiry on the operator's clock (issue 31)", { timeout: 300_000 }, () => {
  let bed: Bed;
  let renewer: NodeJS.Timeout | undefined;
  before(async () => {
    bed = await Bed.up({ nodes: 1, name: "lease-skew", runtime: "kwok", timings: { nodeMonitorGraceSeconds: GRACE_SECONDS } });
  });
  after(async () => {
    clearInterval(renewer);
    await bed?.down();
  });

  test("a node 120 s behind renewing every 2 s is never fenced; a silent one beside it is, by its Lease", async () => {
    const leases = bed.lab.kc.makeApiClient(CoordinationV1Api);
    const core = bed.lab.core;
    const lease = (name: string): V1Lease => ({
      metadata: { name, namespace: "kube-node-lease" },
      spec: { holderIdentity: name, leaseDurationSeconds: LEASE_SECONDS, renewTime: micro(-SKEW_MS) as never },
    });
    for (const name of ["skew", "silent"]) {
      await core.createNode({ body: { metadata: { name, labels: { [LABEL]: "on" } } } });
      const beat = new Date(Date.now() - SKEW_MS).toISOString();
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
      await leases.createNamespacedLease({ namespace: "kube-node-lease", body: lease(name) });
      await core.createNamespacedPod({
        namespace: NS,
        body: {
          metadata: { name: `db-${name}`, labels: { [GUARDED_LABEL]: "true" } },
          spec: { nodeName: name, automountServiceAccountToken: false, containers: [{ name: "c", image: "pause" }] },
        },
      });
    }
    // skew's kubelet: every 2 s (a quarter of its Lease), renewTime from its clock, 120 s behind the operator's.
    let renewals = 0;
    renewer = setInterval(() => {
      void leases
        .patchNamespacedLease(
          { name: "skew", namespace: "kube-node-lease", body: { spec: { renewTime: micro(-SKEW_MS) } } },
          setHeaderOptions("Content-Type", PatchStrategy.MergePatch),
        )
        .then(() => renewals++);
    }, 2_000);
    await bed.create("fenceagents", { metadata: { name: "by-hand" }, spec: { type: "manual", timeoutSeconds: 600 } });
    await bed.policy("skew", {
      nodeSelector: { matchLabels: { [LABEL]: "on" } },
      detection: { heartbeatTimeoutSeconds: 6, fenceAfterSeconds: 2, honorPodTolerations: false },
      escalation: [{ agents: [{ name: "by-hand" }] }],
      guards: { maxUnhealthyNodes: 2, maxConcurrentFences: 2 },
    });
    const t0 = Date.now();
    await bed.startOperator();

    const fence = await bed.waitForFence("silent", () => true, "created", 60_000);
    const fencedAfterMs = Date.now() - t0;
    assert.match(
      fence.spec.reason ?? "",
      new RegExp(
        `\\(Ready=True\\); partitioned because its Lease was not renewed for its leaseDurationSeconds ${LEASE_SECONDS}, as this operator observed`,
      ),
    );
    assert.equal(
      (await bed.lab.node("silent")).status?.conditions?.find((c) => c.type === "Ready")?.status,
      "True",
      "before Ready=Unknown",
    );
    // skew: several Lease durations more, renewing all along with renewTimes that look 120 s old: never a fence.
    const watchUntil = Date.now() + 3 * LEASE_SECONDS * 1000;
    while (Date.now() < watchUntil) {
      assert.equal(await bed.getFence("skew"), undefined, "skew is renewing: never fenced");
      await sleep(500);
    }
    const skewReady = (await bed.lab.node("skew")).status?.conditions?.find((c) => c.type === "Ready")?.status;
    assert.equal(skewReady, "True", "the node controller also holds skew for alive");
    assert.ok(renewals >= 10, `skew's kubelet renewed ${renewals} times`);
    console.log(
      `# silent fenced ${(fencedAfterMs / 1000).toFixed(1)} s after the operator started; skew (renewTime 120 s behind) renewed ${renewals} times over ${((Date.now() - t0) / 1000).toFixed(0)} s, never fenced`,
    );
    clearInterval(renewer);
  });
});
