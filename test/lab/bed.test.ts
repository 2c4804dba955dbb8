// Proves the lab is a real Kubernetes with real failure semantics: the StatefulSet problem Stockade
// exists to solve shows up exactly as it does on a real cluster.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { setTimeout as sleep } from "node:timers/promises";
import { AppsV1Api, CoordinationV1Api, type V1Pod } from "@kubernetes/client-node";
import { Lab } from "../../lab/lab.ts";
import { Recorder } from "../../lab/recorder.ts";
import { waitFor } from "../../lab/health.ts";

const run = promisify(execFile);
const NS = "default";

describe("lab: a real control plane with simulated nodes and BMCs", () => {
  let lab: Lab;
  let rec: Recorder;
  let apps: AppsV1Api;

  before(async () => {
    lab = await Lab.up({ dir: mkdtempSync(join(tmpdir(), "stockade-lab-")), nodes: 3 });
    apps = lab.kc.makeApiClient(AppsV1Api);
    rec = await new Recorder(lab).start();
  });
  after(async () => {
    rec?.stop();
    await lab?.down();
  });

  const pods = async (): Promise<V1Pod[]> => (await lab.core.listNamespacedPod({ namespace: NS, labelSelector: "app=web" })).items;
  const podOn = async (node: string) => (await pods()).find((p) => p.spec?.nodeName === node);
  const leaseRenewTime = async (node: string) =>
    (await lab.kc.makeApiClient(CoordinationV1Api).readNamespacedLease({ name: node, namespace: "kube-node-lease" })).spec?.renewTime;

  test("a 3-replica StatefulSet schedules onto the 3 nodes and every pod reaches Running", async () => {
    await apps.createNamespacedStatefulSet({
      namespace: NS,
      body: {
        metadata: { name: "web" },
        spec: {
          serviceName: "web",
          replicas: 3,
          selector: { matchLabels: { app: "web" } },
          template: {
            metadata: { labels: { app: "web" } },
            spec: {
              affinity: {
                podAntiAffinity: {
                  requiredDuringSchedulingIgnoredDuringExecution: [
                    { labelSelector: { matchLabels: { app: "web" } }, topologyKey: "kubernetes.io/hostname" },
                  ],
                },
              },
              containers: [{ name: "web", image: "registry.k8s.io/pause:3.10" }],
            },
          },
        },
      },
    });
    const running = await waitFor(
      "3 Running web pods",
      async () => {
        const ps = await pods();
        return ps.length === 3 && ps.every((p) => p.status?.phase === "Running") ? ps : undefined;
      },
      { timeoutMs: 90_000 },
    );
    assert.deepEqual(new Set(running.map((p) => p.spec?.nodeName)), new Set(lab.nodes()));
  });

  test("a crashed node goes Unknown, is tainted, and its StatefulSet pod stays Terminating with no replacement", async () => {
    const victim = await podOn("node-2");
    assert.ok(victim?.metadata?.uid, "a web pod runs on node-2");
    const t0 = Date.now();
    await lab.crash("node-2");
    assert.equal(lab.machine("node-2").power, "on", "a crash leaves the power on");

    const node = await lab.waitForNodeReadyStatus("node-2", "Unknown", 40_000);
    await waitFor(
      "unreachable NoExecute taint",
      async () => {
        const n = await lab.node("node-2");
        return n.spec?.taints?.some((t) => t.key === "node.kubernetes.io/unreachable" && t.effect === "NoExecute");
      },
      { timeoutMs: 20_000 },
    );
    assert.equal(node.status?.nodeInfo?.bootID, lab.machine("node-2").bootID);

    // Taint-based eviction starts a graceful delete after the 5 s default toleration ...
    const deleting = await waitFor(
      "graceful delete of the victim",
      async () => {
        const p = await podOn("node-2");
        return p?.metadata?.deletionTimestamp ? p : undefined;
      },
      { timeoutMs: 40_000 },
    );
    assert.equal(deleting.metadata?.uid, victim.metadata.uid);
    assert.ok((deleting.metadata?.deletionGracePeriodSeconds ?? 0) > 0, "the delete is graceful, not forced");

    // ... which nobody can complete: the pod stays Terminating and the StatefulSet waits forever.
    await sleep(20_000);
    const still = (await pods()).find((p) => p.metadata?.name === victim.metadata?.name);
    assert.equal(still?.metadata?.uid, victim.metadata.uid, "the same pod object is still there");
    assert.ok(still?.metadata?.deletionTimestamp, "and still Terminating");
    const replacement = rec.first(
      (e) => e.source === "pod" && e.type === "add" && e.t > t0 && e.name === victim.metadata?.name && e.uid !== victim.metadata?.uid,
    );
    assert.equal(replacement, undefined, `no replacement pod was created:\n${rec.format(t0)}`);
    assert.equal((await pods()).filter((p) => !p.metadata?.deletionTimestamp && p.status?.phase === "Running").length, 2);
  });

  test("healing the crashed node reboots it: Ready with a new bootID, and the StatefulSet recovers", async () => {
    const before = lab.machine("node-2").bootID;
    const t0 = Date.now();
    await lab.heal("node-2");
    const n = await lab.waitForNodeReady("node-2", { timeoutMs: 40_000 });
    assert.notEqual(n.status?.nodeInfo?.bootID, before);
    await waitFor(
      "3 Running web pods again",
      async () => {
        const ps = await pods();
        return ps.length === 3 && ps.every((p) => p.status?.phase === "Running" && !p.metadata?.deletionTimestamp);
      },
      // The rebooted node's kwok deletes the Terminating pod at once (lab/boot-kick.ts sees to it), then the
      // StatefulSet controller and the scheduler take a few seconds at most.
      { timeoutMs: 120_000, onTimeout: () => `; timeline since the heal:\n${rec.format(t0)}` },
    );
  });

  test("ipmitool powers a node off through its BMC: heartbeats stop; power on brings it back with a new bootID", async () => {
    const bmc = lab.bmcEndpoint("node-1");
    const ipmi = (...a: string[]) =>
      run("ipmitool", [
        "-I",
        "lanplus",
        "-C",
        "3",
        "-H",
        bmc.address,
        "-p",
        String(bmc.port),
        "-U",
        bmc.username,
        "-f",
        bmc.passwordFile,
        ...a,
      ]);
    const bootBefore = lab.machine("node-1").bootID;
    assert.match((await ipmi("chassis", "power", "status")).stdout, /Chassis Power is on/);

    const t0 = Date.now();
    await ipmi("chassis", "power", "off");
    // Acknowledged at once, like a real BMC; the status says off once every process of the machine is dead.
    await waitFor("the BMC's status says off", async () => /Chassis Power is off/.test((await ipmi("chassis", "power", "status")).stdout), {
      timeoutMs: 30_000,
      intervalMs: 200,
    });
    assert.equal(lab.machine("node-1").kubelet, "stopped", "power off killed the node's kubelet");
    const renew = await leaseRenewTime("node-1");
    await sleep(4_000);
    assert.deepEqual(await leaseRenewTime("node-1"), renew, "the node lease is no longer renewed");
    await lab.waitForNodeReadyStatus("node-1", "Unknown", 30_000);
    const off = rec.first((e) => e.source === "lab" && e.kind === "power" && e.node === "node-1" && e.detail.power === "off");
    assert.ok(off && off.t >= t0, "the power-off is on the timeline");
    // The BMC's own record of it: one power-off request, sent from where ipmitool ran (loopback here).
    const sets = lab.bmcRequests("node-1").chassis.filter((r) => r.op === "set" && r.t >= t0);
    assert.deepEqual(
      sets.map((r) => [r.args, r.from?.address]),
      [["power 0", "127.0.0.1"]],
      "the BMC logged the power-off and who sent it",
    );

    await ipmi("chassis", "power", "on");
    assert.match((await ipmi("chassis", "power", "status")).stdout, /Chassis Power is on/);
    const n = await lab.waitForNodeReady("node-1", { timeoutMs: 40_000 });
    assert.ok(n.status?.nodeInfo?.bootID && n.status.nodeInfo.bootID !== bootBefore, "a new boot ID after power on");
  });

  test("fence_ipmilan (ClusterLabs, stdin contract) powers a node off and on", async () => {
    const bmc = lab.bmcEndpoint("node-3");
    const fence = (action: string) =>
      new Promise<{ code: number; stdout: string }>((resolve) => {
        const child = execFile("fence_ipmilan", [], (err, stdout) => resolve({ code: err ? Number(err.code ?? 1) : 0, stdout }));
        child.stdin!.end(
          [
            `ip=${bmc.address}`,
            `ipport=${bmc.port}`,
            `username=${bmc.username}`,
            `password=${readFileSync(bmc.passwordFile, "utf8")}`,
            "lanplus=1",
            "cipher=3",
            `action=${action}`,
            "",
          ].join("\n"),
        );
      });
    const bootBefore = lab.machine("node-3").bootID;
    assert.deepEqual(await fence("status"), { code: 0, stdout: "Status: ON\n" });
    const off = await fence("off");
    assert.equal(off.code, 0, off.stdout);
    assert.match(off.stdout, /Success: Powered OFF/);
    assert.deepEqual(await fence("status"), { code: 2, stdout: "Status: OFF\n" }, "status exit code 2 means off");
    assert.equal(lab.machine("node-3").kubelet, "stopped");
    await lab.waitForNodeReadyStatus("node-3", "Unknown", 30_000);
    const on = await fence("on");
    assert.equal(on.code, 0, on.stdout);
    const n = await lab.waitForNodeReady("node-3", { timeoutMs: 40_000 });
    assert.notEqual(n.status?.nodeInfo?.bootID, bootBefore);
  });

  test("a partitioned node goes Unknown and heals back to Ready with the same bootID", async () => {
    const bootBefore = (await lab.node("node-1")).status?.nodeInfo?.bootID;
    await lab.partition("node-1");
    assert.equal(lab.machine("node-1").kubelet, "frozen");
    await lab.waitForNodeReadyStatus("node-1", "Unknown", 40_000);
    assert.equal(await lab.bmc("node-1", "status"), "on", "a partitioned machine is still powered");
    await lab.heal("node-1");
    const n = await lab.waitForNodeReadyStatus("node-1", "True", 40_000);
    assert.equal(n.status?.nodeInfo?.bootID, bootBefore, "no reboot happened");
  });

  test("power off reaches a frozen node's kubelet; an unreachable BMC does not answer", async () => {
    await lab.partition("node-3");
    assert.equal(await lab.bmc("node-3", "off"), "off");
    assert.equal(lab.machine("node-3").kubelet, "stopped", "power off killed the frozen kubelet");
    await lab.setBmcReachable("node-3", false);
    await assert.rejects(lab.bmc("node-3", "status"), /failed/);
    await lab.setBmcReachable("node-3", true);
    assert.equal(await lab.bmc("node-3", "on"), "on");
    await lab.waitForNodeReady("node-3", { timeoutMs: 40_000 });
  });
});
