// The installed operator's life cycle (issue 27 item 4), as users live it, on real nodes with the ledger and
// process-table checkers on (lab/bed.ts invariant()):
// 1. its pods' real cgroups during a fence, against the Deployment's limits;
// 2. a rolling upgrade to a new image tag (the overlay re-applied, as a user upgrades) while a fence is between power
//    off and release: held there by a second agent of the level, a manual one the test confirms once the old leader
//    is terminating, so the release is the new version's — the fence completes exactly once;
// 3. uninstall by manifests/README.md's steps with a node fenced and guarded pods present (one of them waiting for a
//    claim another holds), a pod with a claim created at every step, then a reinstall that fences again.
import { after, afterEach, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { rmSync, writeFileSync } from "node:fs";
import { join, relative } from "node:path";
import { promisify } from "node:util";
import type { V1Pod } from "@kubernetes/client-node";
import { auditEvents } from "../lab/audit.ts";
import { Bed, NS } from "../lab/bed.ts";
import { waitFor } from "../lab/health.ts";
import {
  deploymentImage,
  manifestsDir,
  overlayKustomization,
  overlayRef,
  splitImage,
  uninstallOperator,
  waitForOperator,
  type OperatorImage,
} from "../lab/operator-install.ts";
import { memoryQuantityBytes } from "../lab/memory-cgroup.ts";
import { coresBetween, podCgroupLimits, podCgroupPath, samplePodCgroup, type PodCgroupSample } from "../lab/pod-cgroup.ts";
import { nodePaths } from "../lab/real/config.ts";
import { CONFIRMED_OFF_ANNOTATION } from "../src/agents/manual.ts";
import type { NodeFence } from "../src/api/v1alpha1.ts";
import { isGated } from "../src/decide/claim-lock.ts";

const run = promisify(execFile);
const s = (ms: number) => `${(ms / 1000).toFixed(1)} s`;
const mib = (b: number) => `${(b / 2 ** 20).toFixed(0)} MiB`;
const OPERATOR_SA = "system:serviceaccount:stockade-system:stockade";
const WORKLOAD = "e2e.stockade.io/workload";

describe("e2e: the in-cluster operator's life cycle (cgroup, upgrade mid-fence, uninstall and reinstall)", () => {
  let bed: Bed;
  let image: OperatorImage;
  /** The node test 2 fenced (uninstall starts with it fenced). */
  let held: string | undefined;

  before(async () => {
    // The image: $STOCKADE_OPERATOR_IMAGE, else built from the Dockerfile (lab/operator-install.ts).
    bed = await Bed.up({ nodes: 3, name: "in-cluster-lifecycle", operator: "in-cluster", log: (m) => console.log(`[bed] ${m}`) });
    image = bed.installed!.image;
    await bed.policy("default", { guards: { maxUnhealthyNodes: 1, maxConcurrentFences: 1 } });
  });
  // The lab directory (~2 GB) is removed once every test that ran passed; kept after a failure, for a look.
  const outcomes = { passed: 0, failed: 0 };
  afterEach((t) => {
    // Node's TestContext has `passed`, @types/node's not yet: without it, a test counts as failed (the directory kept).
    outcomes["passed" in t && t.passed === true ? "passed" : "failed"]++;
  });
  after(async () => {
    const r = await bed?.invariant().catch(() => undefined);
    if (r) console.log(`invariant: ${r.identities} identities, ${r.replacements} replacements, ${r.violations.length} violations`);
    await bed?.down();
    if (bed && outcomes.passed > 0 && outcomes.failed === 0) rmSync(bed.lab.dir, { recursive: true, force: true });
  });

  /** A node no operator pod runs on (the replicas' anti-affinity leaves one of three). */
  const freeNode = async () => {
    const used = new Set((await bed.operatorPods()).map((p) => p.spec?.nodeName));
    const n = bed.lab.nodes().find((x) => !used.has(x));
    assert.ok(n, `a node without an operator pod (replicas on ${[...used].join(", ")})`);
    return n;
  };
  /** A guarded bare pod on `node`: a ledger writer on its own pre-bound RWO claim. */
  const guardedPod = async (name: string, node: string): Promise<V1Pod> => {
    await bed.sanClaim(name);
    await bed.lab.core.createNamespacedPod({
      namespace: NS,
      body: {
        metadata: { name, labels: { app: name } },
        spec: { ...bed.ledgerWriterSpec([name]), nodeName: undefined, nodeSelector: { "kubernetes.io/hostname": node } },
      },
    });
    return await waitFor(
      `${name} Running`,
      async () => {
        const p = await bed.lab.core.readNamespacedPod({ name, namespace: NS });
        return p.status?.phase === "Running" ? p : undefined;
      },
      { timeoutMs: 90_000 },
    );
  };
  const gone = (name: string) =>
    waitFor(
      `${name} gone`,
      async () =>
        (await bed.lab.core.listNamespacedPod({ namespace: NS, fieldSelector: `metadata.name=${name}` })).items.length === 0 || undefined,
      {
        timeoutMs: 60_000,
      },
    );
  /** The operator's force-deletes of a pod of this name, from the apiserver's audit log. */
  const operatorDeletes = async (name: string) => {
    let n = 0;
    for await (const e of auditEvents(bed.lab.dir, (l) => l.includes('"delete"') && l.includes(name)))
      if (
        e.stage === "ResponseComplete" &&
        e.verb === "delete" &&
        e.user.username === OPERATOR_SA &&
        e.objectRef?.resource === "pods" &&
        !e.objectRef.subresource &&
        e.objectRef.name === name &&
        e.responseStatus?.code === 200
      )
        n++;
    return n;
  };

  test("the operator pods' cgroups during a fence: memory and CPU under the Deployment's limits", async () => {
    const node = await freeNode();
    const pod = await guardedPod("cg", node);
    const slot = bed.lab.state.real!.slot;
    const paths = new Map<string, string>();
    const samples = new Map<string, PodCgroupSample[]>();
    let sampling = true;
    const sampler = (async () => {
      while (sampling) {
        for (const p of await bed.operatorPods()) {
          const uid = p.metadata!.uid!;
          const path = paths.get(uid) ?? podCgroupPath(slot, p.spec!.nodeName!, uid);
          if (!path) continue;
          paths.set(uid, path);
          try {
            samples.set(uid, [...(samples.get(uid) ?? []), samplePodCgroup(path)]);
          } catch {
            // the pod went meanwhile
          }
        }
        await new Promise((r) => setTimeout(r, 200));
      }
    })();
    const t0 = Date.now();
    await bed.lab.partition(node);
    const f = await bed.waitForFence(node, (x) => x.status?.phase === "Released", "Released", 120_000);
    const fenceMs = Date.now() - t0;
    sampling = false;
    await sampler;
    assert.deepEqual(
      (f.status?.releases ?? []).filter((r) => r.kind === "Pod").map((r) => r.uid),
      [pod.metadata!.uid],
    );

    const resources = (await bed.operatorPods())[0]!.spec!.containers[0]!.resources!;
    const memLimit = memoryQuantityBytes(String(resources.limits!.memory));
    const cpuLimit = Number(String(resources.limits!.cpu).replace(/m$/, "")) / (String(resources.limits!.cpu).endsWith("m") ? 1000 : 1);
    assert.equal(paths.size, 2, "both replicas' cgroups found under their nodes' cgroups");
    const lines: string[] = [];
    for (const [uid, path] of paths) {
      const xs = samples.get(uid) ?? [];
      assert.ok(xs.length > 5, `sampled ${uid} throughout the fence`);
      const lim = podCgroupLimits(path);
      assert.equal(lim.memoryBytes, memLimit, "the kubelet wrote the Deployment's memory limit to the pod's cgroup");
      assert.equal(lim.cpuCores, cpuLimit, "and its CPU limit (CFS quota)");
      const rssPeak = Math.max(...xs.map((x) => x.rssBytes));
      const memPeak = Math.max(...xs.map((x) => x.memoryBytes));
      const cores = xs.slice(1).map((x, i) => coresBetween(xs[i]!, x));
      const cpuAvg = coresBetween(xs[0]!, xs.at(-1)!);
      assert.ok(
        memPeak < memLimit && lim.peakMemoryBytes < memLimit,
        `memory ${mib(memPeak)} (peak ${mib(lim.peakMemoryBytes)}) under ${mib(memLimit)}`,
      );
      assert.equal(lim.memoryFailcnt, 0, "the memory limit was never hit");
      assert.ok(cpuAvg < cpuLimit, `CPU ${cpuAvg.toFixed(2)} cores on average under ${cpuLimit}`);
      const p = (await bed.operatorPods()).find((x) => x.metadata?.uid === uid);
      const leader = (await bed.leaderPod())?.metadata?.uid === uid;
      assert.equal(p?.status?.containerStatuses?.[0]?.restartCount, 0, "no restart (an OOM kill restarts the container)");
      lines.push(
        `${leader ? "leader " : "standby"}: RSS peak ${mib(rssPeak)}, memory (RSS + cache) peak ${mib(memPeak)}, cgroup max_usage ${mib(lim.peakMemoryBytes)} of ${mib(memLimit)}; CPU ${cpuAvg.toFixed(3)} cores avg, ${Math.max(...cores).toFixed(2)} max over 200 ms, ${lim.throttledPeriods} throttled periods (limit ${cpuLimit})`,
      );
    }
    assert.deepEqual((await bed.invariant()).violations, []);
    console.log(`cgroup during a fence (partition → Released ${s(fenceMs)}):\n  ${lines.join("\n  ")}`);
    // The node back, its NodeFence gone: the next test fences it afresh.
    await bed.unfence(node);
    await bed.kubectl("delete", "nodefence", node, "--wait", "--timeout=60s");
    await gone("cg");
  });

  test("a rolling upgrade to a new image tag while a fence is between power-off and release: the fence completes exactly once", async () => {
    const victim = await freeNode();
    const leader = (await bed.leaderPod())!;
    const other = bed.lab.nodes().find((n) => n !== victim && n !== leader.spec?.nodeName)!;
    // db-0 lands on the victim (the only labelled node), then its replacement has a labelled node to go to.
    await bed.kubectl("label", "node", victim, `${WORKLOAD}=true`);
    const [db0] = await bed.statefulSet("db", 1, { nodeSelector: { [WORKLOAD]: "true" } });
    await bed.kubectl("label", "node", other, `${WORKLOAD}=true`);
    const solo = await guardedPod("solo", victim);
    // A level of two agents, run in order: IPMI powers the machine off, then the manual one waits for the test.
    await bed.create("fenceagents", { metadata: { name: "by-hand" }, spec: { type: "manual", timeoutSeconds: 600 } });
    await bed.kubectl(
      "patch",
      "fencingpolicy",
      "default",
      "--type=merge",
      "-p",
      JSON.stringify({ spec: { escalation: [{ agents: [{ name: "lab-ipmi" }, { name: "by-hand" }] }] } }),
    );

    // The new version imported beforehand, as a user does (the same image under another tag, in every node's containerd).
    const newRef = `${splitImage(overlayRef(image)).name}:upgrade-${Date.now()}`;
    await Promise.all(
      bed.lab
        .nodes()
        .map((n) =>
          run("ctr", [
            "--address",
            nodePaths(bed.lab.machineDir(n)).containerdSocket,
            "--namespace",
            "k8s.io",
            "images",
            "tag",
            overlayRef(image),
            newRef,
          ]),
        ),
    );
    const t0 = Date.now();
    await bed.lab.partition(victim);
    const offs = (f: NodeFence) => (f.status?.attempts ?? []).filter((a) => a.agent === "lab-ipmi" && a.operation === "off");
    await bed.waitForFence(
      victim,
      (f) =>
        offs(f).some((a) => a.outcome === "Succeeded") &&
        (f.status?.attempts ?? []).some((a) => a.agent === "by-hand" && a.outcome === "InProgress"),
      "powered off, waiting for the manual agent",
      120_000,
    );
    assert.equal(bed.lab.machine(victim).power, "off");

    // The upgrade: the overlay re-applied with the new tag.
    const overlay = bed.installed!.overlay;
    writeFileSync(
      join(overlay, "kustomization.yaml"),
      overlayKustomization({ resources: relative(overlay, manifestsDir), image: deploymentImage(), ref: newRef }),
    );
    const tUp = Date.now();
    await run("kubectl", ["apply", "-k", overlay], { env: bed.lab.env });
    // The confirmation comes once the old leader is terminating: the release is left to the new version.
    await waitFor(
      `the old leader ${leader.metadata?.name} terminating`,
      async () => {
        const p = (await bed.operatorPods()).find((x) => x.metadata?.uid === leader.metadata?.uid);
        return !p || p.metadata?.deletionTimestamp ? true : undefined;
      },
      { timeoutMs: 180_000, intervalMs: 100 },
    );
    const tConfirm = Date.now();
    await bed.kubectl("annotate", "nodefence", victim, `${CONFIRMED_OFF_ANNOTATION}=${victim}`);
    const { pods, leader: newLeader } = await waitForOperator(bed.lab);
    const rolloutMs = Date.now() - tUp;
    assert.ok(
      pods.every((p) => p.spec?.containers[0]?.image === newRef),
      "both replicas run the new tag",
    );
    assert.equal(newLeader.spec?.containers[0]?.image, newRef);

    const f = await bed.waitForFence(victim, (x) => x.status?.phase === "Released", "Released", 120_000);
    const releasedMs = Date.now() - tConfirm;
    const replacement = await bed.waitForReplacement("db-0", db0!.metadata!.uid!, 120_000);
    assert.equal(replacement.spec?.nodeName, other);

    const fences = (await bed.custom.listClusterCustomObject({ group: "stockade.io", version: "v1alpha1", plural: "nodefences" })) as {
      items: NodeFence[];
    };
    assert.equal(fences.items.filter((x) => x.spec.nodeName === victim).length, 1, "one NodeFence for the node");
    assert.deepEqual(
      offs(f).map((a) => a.outcome),
      ["Succeeded"],
      "one power-off attempt, which succeeded: the new leader did not power off again",
    );
    const powerOffs = bed.rec
      .timeline()
      .filter((e) => e.source === "lab" && e.kind === "power" && e.node === victim && e.detail.power === "off" && e.t >= t0);
    assert.equal(powerOffs.length, 1, "the BMC powered the machine off once");
    const released = (f.status?.releases ?? []).filter((r) => r.kind === "Pod").map((r) => r.uid);
    assert.deepEqual([...released].sort(), [db0!.metadata!.uid!, solo.metadata!.uid!].sort(), "db-0 and solo released, each once");
    await gone("solo");
    assert.equal(await operatorDeletes("db-0"), 1, "one force delete of db-0 (audit log)");
    assert.equal(await operatorDeletes("solo"), 1, "one force delete of solo (audit log)");
    assert.deepEqual((await bed.invariant()).violations, []);
    held = victim;
    console.log(
      `upgrade mid-fence: apply -k (new tag) → both new replicas Ready and leading ${s(rolloutMs)}; confirmation → Released ${s(releasedMs)}; partition → Released ${s(Date.now() - t0)}`,
    );
  });

  test("uninstall by manifests/README.md with a node fenced and guarded pods present, then reinstall: never refusing pods, nothing left, fences again", async () => {
    assert.ok(held, "the upgrade test left a node fenced");
    await bed.lab.reconnect(held); // mended before the unfence powers it back on
    // Guarded pods: db-0 (Running, holds data-db-0) and a second pod on that claim, gated while db-0 holds it (once no
    // FencingPolicy guards RWO claims, the operator lifts its gate: the first uninstall step unguards every claim).
    const [db0] = await bed.pods("db");
    await bed.lab.core.createNamespacedPod({
      namespace: NS,
      body: {
        metadata: { name: "waiter" },
        spec: {
          containers: [{ name: "c", image: bed.lab.state.real!.pauseImage, imagePullPolicy: "Never" }],
          volumes: [
            {
              name: "data",
              persistentVolumeClaim: {
                claimName: db0!.spec!.volumes!.find((v) => v.persistentVolumeClaim)!.persistentVolumeClaim!.claimName,
              },
            },
          ],
        },
      },
    });
    assert.ok(isGated(await bed.lab.core.readNamespacedPod({ name: "waiter", namespace: NS })), "waiter is gated behind db-0's claim");

    // At every step a pod with a claim of its own is created (not a dry run): admitted each time.
    const probes: string[] = [];
    const probe = async (step: string) => {
      const name = `probe-${probes.length}`;
      await bed.sanClaim(name);
      await bed.lab.core
        .createNamespacedPod({
          namespace: NS,
          body: {
            metadata: { name },
            spec: {
              containers: [{ name: "c", image: bed.lab.state.real!.pauseImage, imagePullPolicy: "Never" }],
              volumes: [{ name: "data", persistentVolumeClaim: { claimName: name } }],
            },
          },
        })
        .catch((err: Error) => assert.fail(`a pod with a claim was refused after "${step}": ${err.message}`));
      probes.push(name);
      const waiter = await bed.lab.core.readNamespacedPod({ name: "waiter", namespace: NS });
      console.log(`[uninstall] ${step}: ${name} admitted; waiter ${isGated(waiter) ? "gated" : "not gated"}`);
    };
    await probe("before");
    const t0 = Date.now();
    await uninstallOperator(bed.lab, { log: (m) => console.log(`[uninstall] ${m}`), timeoutMs: 120_000, after: probe });
    const ms = Date.now() - t0;
    assert.equal(bed.lab.machine(held).power, "on", "unfenced: powered back on");

    // No pod stays Pending behind the gate: every probe, and the waiter, is scheduled and runs.
    await waitFor(
      "every pod in the test namespace Running",
      async () => {
        const ps = (await bed.lab.core.listNamespacedPod({ namespace: NS })).items;
        return ps.every((p) => p.status?.phase === "Running" && !isGated(p)) ? ps : undefined;
      },
      { timeoutMs: 90_000 },
    );
    // Nothing of Stockade is left: every kind the bundle makes, Leases, and the taints it puts on nodes.
    const left = await bed.kubectl(
      "get",
      "crd,namespace,clusterrole,clusterrolebinding,role,rolebinding,mutatingwebhookconfiguration,validatingwebhookconfiguration,validatingadmissionpolicy,validatingadmissionpolicybinding,lease,serviceaccount,deployment,service",
      "-A",
      "-o",
      "name",
    );
    assert.deepEqual(
      left.split("\n").filter((l) => /stockade/.test(l) && !/\/stockade-lab[:-]/.test(l)),
      [],
      "nothing named for Stockade is left (stockade-lab:* are the lab's own)",
    );
    for (const n of bed.lab.nodes()) {
      const taints = (await bed.lab.node(n)).spec?.taints ?? [];
      assert.deepEqual(
        taints.filter((t) => t.key.startsWith("stockade.io/") || t.key === "node.kubernetes.io/out-of-service"),
        [],
        `no Stockade taint on ${n}`,
      );
    }
    console.log(
      `uninstall with a fenced node and a gated pod: ${s(ms)}, ${probes.length} pods with claims created along the way, all admitted and Running`,
    );

    // Reinstall: Ready, and it fences again.
    const t1 = Date.now();
    await bed.reinstall();
    const reinstallMs = Date.now() - t1;
    await bed.policy("default", { guards: { maxUnhealthyNodes: 1, maxConcurrentFences: 1 } });
    const node = await freeNode();
    await bed.lab.waitForNodeReadyStatus(node, "True", 90_000);
    const again = await guardedPod("again", node);
    await bed.lab.partition(node);
    const f = await bed.waitForFence(node, (x) => x.status?.phase === "Released", "Released", 120_000);
    assert.ok(
      (f.status?.releases ?? []).some((r) => r.kind === "Pod" && r.uid === again.metadata!.uid),
      "the reinstalled operator fenced the node and released its guarded pod",
    );
    assert.deepEqual((await bed.invariant()).violations, []);
    console.log(
      `reinstall: ${s(reinstallMs)} to Ready (import ${s(bed.installed!.ms.import)} of it, the same tar again); fenced ${node} again`,
    );
  });
});
