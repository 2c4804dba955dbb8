// The scale lab (lab/scale.ts) on a real control plane: one kwok process simulates every labelled node with the
// kubelet's Lease timing, pre-bound pods run, and silenced nodes stop renewing their Leases while the rest go on.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { CoordinationV1Api, PatchStrategy, setHeaderOptions } from "@kubernetes/client-node";
import { Lab } from "../../lab/lab.ts";
import { KWOK_USER, kubernetesTimings } from "../../lab/control-plane.ts";
import { paths } from "../../lab/state.ts";
import { waitFor } from "../../lab/health.ts";
import {
  SCALE_LABEL,
  SCALE_LEASE_SECONDS,
  addScaleNodes,
  addScalePods,
  retimeScaleKwok,
  confirmSilence,
  silence,
  startScaleKwok,
} from "../../lab/scale.ts";

describe("scale lab", () => {
  let lab: Lab;
  let names: string[];
  before(async () => {
    // Kubernetes' timings: the lab's fast node-monitor grace (10 s) would take nodes renewing every 10 s for dead.
    lab = await Lab.up({
      dir: mkdtempSync(join(tmpdir(), "stockade-scale-lab-")),
      nodes: 1,
      nodeLeaseSeconds: SCALE_LEASE_SECONDS,
      timings: kubernetesTimings,
    });
    names = await addScaleNodes(lab, 20, ["zone-a", "zone-b"]);
    startScaleKwok(lab);
  });
  after(async () => {
    await lab?.down();
  });

  const renewTime = async (name: string) => {
    const l = await lab.kc.makeApiClient(CoordinationV1Api).readNamespacedLease({ name, namespace: "kube-node-lease" });
    return { at: new Date(l.spec?.renewTime ?? 0).getTime(), duration: l.spec?.leaseDurationSeconds };
  };

  test("every labelled node is Ready, spread over the zones, with a 40 s Lease", async () => {
    await waitFor(
      "20 scale nodes Ready",
      async () =>
        (await lab.core.listNode({ labelSelector: `${SCALE_LABEL}=on` })).items.filter((n) =>
          n.status?.conditions?.some((c) => c.type === "Ready" && c.status === "True"),
        ).length === 20,
      { timeoutMs: 60_000 },
    );
    const zones = (await lab.core.listNode({ labelSelector: `${SCALE_LABEL}=on` })).items.map(
      (n) => n.metadata?.labels?.["topology.kubernetes.io/zone"],
    );
    assert.equal(zones.filter((z) => z === "zone-a").length, 10);
    assert.equal(zones.filter((z) => z === "zone-b").length, 10);
    assert.equal((await renewTime(names[0]!)).duration, SCALE_LEASE_SECONDS);
  });

  test("pods are created bound to the nodes, one in twenty guarded, and run", async () => {
    const made = await addScalePods(lab, { count: 100, nodes: names, namespace: "default" });
    assert.equal(made.guarded.length, 5);
    await waitFor(
      "100 pods Running",
      async () => (await lab.core.listNamespacedPod({ namespace: "default", fieldSelector: "status.phase=Running" })).items.length === 100,
      { timeoutMs: 60_000 },
    );
    const pods = (await lab.core.listNamespacedPod({ namespace: "default" })).items;
    const guarded = pods.filter((p) => p.metadata?.labels?.["stockade.io/guarded"] === "true");
    assert.equal(guarded.length, 5);
    assert.equal(new Set(guarded.map((p) => p.spec?.nodeName)).size, 5, "guarded pods on different nodes, not stacked on a few");
    assert.equal(new Set(pods.map((p) => p.spec?.nodeName)).size, 20, "spread over every node");
  });

  test("a running pod marked NotReady (as the node controller does) is Ready again, keeping its one IP", async () => {
    const name = "pod-000007";
    const before = await lab.core.readNamespacedPod({ name, namespace: "default" });
    const ip = before.status?.podIP;
    assert.ok(ip, "the pod has an IP");
    const conditions = (before.status?.conditions ?? []).map((c) =>
      c.type === "Ready" ? { ...c, status: "False", reason: "NodeNotReady" } : c,
    );
    await lab.core.patchNamespacedPodStatus(
      { name, namespace: "default", body: { status: { conditions } } },
      setHeaderOptions("Content-Type", PatchStrategy.StrategicMergePatch),
    );
    await waitFor(
      `${name} Ready again`,
      async () =>
        (await lab.core.readNamespacedPod({ name, namespace: "default" })).status?.conditions?.some(
          (c) => c.type === "Ready" && c.status === "True",
        ) ?? false,
      { timeoutMs: 30_000 },
    );
    const after = await lab.core.readNamespacedPod({ name, namespace: "default" });
    assert.equal(after.status?.podIP, ip);
    assert.deepEqual(
      after.status?.podIPs?.map((x) => x.ip),
      [ip],
    );
  });

  test("the bench's retiming: kwok restarted with other Leases renews every one so, and no node looks rebooted", async () => {
    // bootID and when Ready last changed: a node taken for dead during the restart (Unknown, then Ready again) moves the latter.
    const boots = async () =>
      new Map(
        (await lab.core.listNode({ labelSelector: `${SCALE_LABEL}=on` })).items.map((n) => [
          n.metadata?.name,
          `${n.status?.nodeInfo?.bootID} ${n.status?.conditions?.find((c) => c.type === "Ready")?.lastTransitionTime?.toISOString()}`,
        ]),
      );
    const before = await boots();
    await retimeScaleKwok(lab, names, 100);
    assert.equal((await renewTime(names[3]!)).duration, 100);
    await retimeScaleKwok(lab, names, SCALE_LEASE_SECONDS);
    assert.equal((await renewTime(names[3]!)).duration, SCALE_LEASE_SECONDS);
    await sleep(3000); // a new bootID would have been written by now (kwok's first pass over its nodes)
    assert.deepEqual(await boots(), before, "same bootIDs across two restarts, and Ready throughout");
    const notReady = (await lab.core.listNode({ labelSelector: `${SCALE_LABEL}=on` })).items.filter(
      (n) => !n.status?.conditions?.some((c) => c.type === "Ready" && c.status === "True"),
    );
    assert.deepEqual(
      notReady.map((n) => n.metadata?.name),
      [],
    );
  });

  test("silenced nodes stop renewing their Leases; the others keep renewing every 10 s", async () => {
    const quiet = names.slice(0, 5);
    const loud = names.slice(5, 8);
    await silence(lab, quiet);
    const t0 = Date.now();
    const before = await Promise.all([...quiet, ...loud].map(renewTime));
    await sleep(25_000); // more than two renewal periods
    const later = await Promise.all([...quiet, ...loud].map(renewTime));
    for (let i = 0; i < quiet.length; i++) {
      assert.ok(later[i]!.at <= t0 + 3000, `${quiet[i]} renewed at ${new Date(later[i]!.at).toISOString()}, after it was silenced`);
    }
    for (let i = quiet.length; i < later.length; i++) assert.ok(later[i]!.at > before[i]!.at, `${loud[i - quiet.length]} kept renewing`);
  });

  test("confirmSilence: a node kwok still renews after the silence (here: one never relabeled) is relabeled and goes silent; silent ones are left", async () => {
    const quiet = names.slice(0, 5); // silenced by the test before
    const missed = names[8]!; // kwok renews it, as when its watch missed the relabel
    const since = Date.now();
    const r = await confirmSilence(lab, [...quiet, missed], since);
    assert.deepEqual(r, { relabeled: [missed], stillRenewed: [] });
    const at = (await renewTime(missed)).at;
    await sleep(12_000); // more than a renewal period
    assert.equal((await renewTime(missed)).at, at, `${missed} no longer renewed`);
  });

  test("the audit log leaves out the simulated kubelets' Lease renewals and keeps everyone else's Lease requests", () => {
    type Entry = { verb: string; user?: { username?: string }; objectRef?: { resource?: string; namespace?: string } };
    const entries = readFileSync(paths(lab.dir).audit, "utf8")
      .split("\n")
      .filter(Boolean)
      .map((l) => JSON.parse(l) as Entry);
    const nodeLeases = entries.filter((e) => e.objectRef?.resource === "leases" && e.objectRef.namespace === "kube-node-lease");
    // kwok renewed 20 Leases every 10 s for minutes by now: none of it logged; its other Lease requests (create,
    // delete) are, so the rule matched kwok's identity and nothing broader.
    const kwok = nodeLeases.filter((e) => e.user?.username === KWOK_USER);
    assert.deepEqual(
      kwok.filter((e) => ["get", "update", "patch"].includes(e.verb)).map((e) => e.verb),
      [],
    );
    assert.ok(
      kwok.some((e) => e.verb === "create"),
      "kwok's Lease creations are logged",
    );
    // This test's own reads (renewTime, as the admin) are: an operator's would be too.
    assert.ok(
      nodeLeases.some((e) => e.user?.username === "stockade-lab-admin" && e.verb === "get"),
      "the admin's Lease reads are in the audit log",
    );
  });
});
