// Real nodes (lab/real/): a containerd and a v1.34 kubelet per node, each in its own network namespace,
// mount namespace and cgroup subtree, running the lab's own images. What the fencing tests rely on:
// every node reports a boot ID of its own, new at every power-on; a node cut from the control plane
// goes Unknown while its pod keeps writing to its volume; a power-off stops every process of the node
// at once (the last write precedes it) and leaves nothing mounted; down puts the machine back as it was.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { existsSync, mkdtempSync, readFileSync } from "node:fs";
import { execFileSync } from "node:child_process";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { type V1Pod } from "@kubernetes/client-node";
import { Lab } from "../../lab/lab.ts";
import { waitFor } from "../../lab/health.ts";
import { realNodeImages } from "../../lab/images.ts";
import { checkLedger, deployLedger, readLedgers, sanDir } from "../../lab/ledger.ts";
import { KUBELET_SYSCTLS, SAVED_FILE } from "../../lab/real/host-settings.ts";
import { nodePids, readSnapshots } from "../../lab/real/node.ts";
import { SLOTS_DIR } from "../../lab/real/net.ts";

const NS = "default";
const sysctls = () => KUBELET_SYSCTLS.map((k) => readFileSync(`/proc/sys/${k}`, "utf8").trim());
/**
 * The machine's own values: those a real-node lab recorded, while one is up (another test file's, run alongside:
 * its kubelets have changed them already), else the current ones (the record is written before any kubelet starts
 * and removed only after the values are put back).
 */
const machineSysctls = () => {
  if (!existsSync(SAVED_FILE)) return sysctls();
  const saved = JSON.parse(readFileSync(SAVED_FILE, "utf8")) as Record<string, string>;
  return KUBELET_SYSCTLS.map((k) => saved[k]);
};
const netnsList = () => execFileSync("ip", ["netns", "list"], { encoding: "utf8" });

/** What a wait that timed out last saw of a pod: enough to tell which step of its replacement stalled. */
function describePod(p: V1Pod | undefined, writes: (uid: string) => number): string {
  if (!p) return "absent";
  const st = p.status;
  const containers = (st?.containerStatuses ?? []).map(
    (c) => `${c.name} ${Object.keys(c.state ?? {}).join("/")} restarts=${c.restartCount}`,
  );
  return JSON.stringify({
    uid: p.metadata?.uid,
    node: p.spec?.nodeName,
    phase: st?.phase,
    deleting: p.metadata?.deletionTimestamp,
    conditions: (st?.conditions ?? []).map((c) => `${c.type}=${c.status}${c.reason ? ` (${c.reason})` : ""}`),
    containers,
    writes: p.metadata?.uid ? writes(p.metadata.uid) : 0,
  });
}

describe("real nodes", () => {
  let lab: Lab;
  const before0 = machineSysctls();
  before(async () => {
    lab = await Lab.up({ dir: mkdtempSync(join(tmpdir(), "stockade-real-")), nodes: 3, runtime: "real", images: await realNodeImages() });
    await lab.waitForDefaultServiceAccount(NS);
  });
  after(async () => {
    await lab?.down();
  });

  const pods = async () => (await lab.core.listNamespacedPod({ namespace: NS, labelSelector: "app=ledger" })).items;
  const writes = (uid: string) => checkLedger(readLedgers(sanDir(lab.dir))).instances.find((i) => i.podUID === uid)?.records ?? 0;

  test("every node is Ready with a boot ID of its own, not the machine's", async () => {
    const machine = readFileSync("/proc/sys/kernel/random/boot_id", "utf8").trim();
    const ids = await Promise.all(lab.nodes().map(async (n) => (await lab.node(n)).status?.nodeInfo?.bootID));
    assert.equal(new Set(ids).size, 3, `distinct: ${ids.join(", ")}`);
    assert.ok(!ids.includes(machine));
    assert.deepEqual(
      ids,
      lab.nodes().map((n) => lab.machine(n).bootID),
    );
    const n1 = await lab.node("node-1");
    assert.equal(n1.status?.nodeInfo?.containerRuntimeVersion, "containerd://1.6.20");
    assert.match(n1.status?.nodeInfo?.kubeletVersion ?? "", /^v1\.34\./);
  });

  let writer: V1Pod;
  test("a pod of the lab's own image runs and writes its ledger on the shared volume", async () => {
    await deployLedger(lab.kc, { namespace: NS, replicas: 2, image: lab.state.real!.images.ledger!, san: sanDir(lab.dir) });
    const ps = await waitFor(
      "2 ledger pods writing",
      async () => {
        const ps = await pods();
        return ps.length === 2 && ps.every((p) => p.status?.phase === "Running" && writes(p.metadata!.uid!) > 3) ? ps : undefined;
      },
      { timeoutMs: 120_000 },
    );
    writer = ps.find((p) => p.metadata!.name === "ledger-0")!;
  });

  test("a node cut from the control plane goes Unknown while its pod keeps writing; heal brings it back", async () => {
    const node = writer.spec!.nodeName!;
    await lab.partition(node);
    await lab.waitForNodeReadyStatus(node, "Unknown", 60_000);
    const atUnknown = writes(writer.metadata!.uid!);
    await new Promise((r) => setTimeout(r, 3000));
    const later = writes(writer.metadata!.uid!);
    assert.ok(later >= atUnknown + 10, `the cut-off pod kept writing (${atUnknown} -> ${later} records in 3 s)`);
    assert.equal(lab.machine(node).kubelet, "running");
    // The lab's 5 s default tolerations evict it (the node controller taints the node unreachable, then deletes the
    // pod). Healed before that, the node would keep its pod and nothing below would happen: CI once healed 3 s after
    // Unknown, before the eviction, and waited 180 s for a replacement that had no reason to come.
    await waitFor(
      "ledger-0 evicted from the cut-off node",
      async () => !!(await pods()).find((x) => x.metadata!.uid === writer.metadata!.uid)?.metadata?.deletionTimestamp,
      { timeoutMs: 60_000 },
    );
    await lab.heal(node);
    await lab.waitForNodeReadyStatus(node, "True", 60_000);
    // Its kubelet, back, stops it; a new ledger-0 starts.
    let seen = "";
    writer = await waitFor(
      "ledger-0 replaced and writing",
      async () => {
        const p = (await pods()).find((x) => x.metadata!.name === "ledger-0");
        seen = describePod(p, (uid) => writes(uid));
        return p && p.metadata!.uid !== writer.metadata!.uid && p.status?.phase === "Running" && writes(p.metadata!.uid!) > 3
          ? p
          : undefined;
      },
      { timeoutMs: 180_000, onTimeout: () => `; ledger-0 last seen: ${seen}` },
    );
  });

  test("power off through the BMC stops every process of the node at once; power on boots it anew", async () => {
    const node = writer.spec!.nodeName!;
    const cgroup = `/stockade-lab/${lab.state.real!.slot}-${node}`;
    const bootBefore = lab.machine(node).bootID;
    assert.ok(nodePids(cgroup).length >= 4, `kubelet, containerd, shims and containers run: ${nodePids(cgroup).join(" ")} in ${cgroup}`);
    assert.equal(await lab.bmc(node, "off"), "off");
    const offAt = Date.now();
    assert.deepEqual(nodePids(cgroup), [], "no process of the node is left");
    const last = writes(writer.metadata!.uid!);
    await new Promise((r) => setTimeout(r, 1500));
    assert.equal(writes(writer.metadata!.uid!), last, "nothing written after the power-off");
    const inst = checkLedger(readLedgers(sanDir(lab.dir))).instances.find((i) => i.podUID === writer.metadata!.uid)!;
    assert.ok(inst.latest.timeMs <= offAt, "the last record precedes the power-off");
    const snaps = readSnapshots(lab.machineDir(node));
    const [beforeKill, afterKill] = snaps.slice(-2);
    assert.match(beforeKill!.reason, /power off: before kill/);
    assert.ok(
      beforeKill!.processes.some((p) => p.podUID === writer.metadata!.uid),
      "the power-off snapshot shows the writer's processes with their pod",
    );
    assert.match(afterKill!.reason, /power off: after kill/);
    assert.deepEqual(afterKill!.processes, [], "and the one after the kill shows nothing left");
    const mounts = readFileSync("/proc/self/mounts", "utf8");
    assert.ok(!mounts.includes(lab.machineDir(node)), "nothing of the node is mounted on the host");

    assert.equal(await lab.bmc(node, "on"), "on");
    const n = await lab.waitForNodeReady(node, { timeoutMs: 60_000 });
    assert.notEqual(n.status?.nodeInfo?.bootID, bootBefore, "a new boot");
  });

  test("down removes the network, cgroups and slot and restores the machine's kernel settings", async () => {
    const slot = lab.state.real!.slot;
    await lab.down();
    assert.ok(!netnsList().includes(`stockade-${slot}-`));
    assert.throws(() => readFileSync(join(SLOTS_DIR, String(slot), "owner")));
    for (const n of lab.nodes()) assert.deepEqual(nodePids(`/stockade-lab/${slot}-${n}`), []);
    if (!execFileSync("ls", [SLOTS_DIR], { encoding: "utf8" }).trim()) assert.deepEqual(sysctls(), before0);
  });
});
