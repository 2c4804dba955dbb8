// Storage fencing as an escalation step (issue 11 item 4) on real nodes: level 1 is the node's IPMI BMC, which
// does not answer; level 2 a csiAddonsNetworkFence, answered by the lab's test double of csi-addons' controller
// (lab/test-doubles/csi-addons-network-fence.ts). After a crash the evidence is StorageFenced: the claim lock of a
// Deployment-at-scale-1's ReadWriteOnce claim is broken and its gated replacement starts elsewhere with token + 1,
// while a StatefulSet pod on the same node is NOT force-deleted and no out-of-service taint is set. The machine then
// boots again (a new bootID, which its kubelet could write at will): the storage fence stays, since the StatefulSet
// pod runs again in the new boot (issue 26 item 6); only the administrator's unfence lifts it.
// Then (issue 26) two storage backends, each its own csiAddonsNetworkFence agent, on the nodes still up, with manual
// NodeFences: each agent its own NetworkFence (one backend's answer never confirms another's), and every fence that
// may have gone out lifted — on an unfence while it is in flight, and before a deleted NodeFence's finalizer goes.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { setTimeout as sleep } from "node:timers/promises";
import type { V1Pod } from "@kubernetes/client-node";
import { Bed, NETWORK_FENCES, NS } from "../lab/bed.ts";
import { waitFor } from "../lab/health.ts";
import { SAN_STORAGE_CLASS } from "../lab/ledger.ts";
import { NetworkFenceDouble } from "../lab/test-doubles/csi-addons-network-fence.ts";
import type { NodeFence } from "../src/api/v1alpha1.ts";
import type { NetworkFence } from "../src/agents/types.ts";
import { networkFenceName } from "../src/agents/csi-addons-network-fence.ts";
import { STORAGE_FENCE_HELD_CONDITION } from "../src/decide/fence-machine.ts";
import { TOKEN_ANNOTATION, isGated, parseLock } from "../src/decide/claim-lock.ts";
import { OUT_OF_SERVICE_TAINT } from "../src/decide/fence-machine.ts";

const nf = NETWORK_FENCES;

describe("e2e: a NetworkFence as the second escalation level releases volumes only", () => {
  let bed: Bed;
  let double: NetworkFenceDouble;
  const ips = new Map<string, string>();

  before(async () => {
    bed = await Bed.up({ nodes: 3, name: "fence-storage", webhooks: true });
    await bed.installNetworkFenceCrd();
    for (const n of bed.lab.nodes()) {
      const ip = (await bed.lab.node(n)).status?.addresses?.find((a) => a.type === "InternalIP")?.address;
      assert.ok(ip, `node ${n} has an InternalIP`);
      ips.set(n, ip);
    }
    double = new NetworkFenceDouble(bed.lab.kc, bed.lab.dir, (cidr) => [...ips].find(([, ip]) => cidr === `${ip}/32`)?.[0]).start();
    // The administrator sets each node's address (never the kubelet-reported one: docs/safety.md).
    await bed.create("fenceagents", {
      metadata: { name: "lab-netfence" },
      spec: {
        type: "csiAddonsNetworkFence",
        parameters: { networkFenceClassName: "lab-san", storageClasses: SAN_STORAGE_CLASS },
        nodes: Object.fromEntries([...ips].map(([n, ip]) => [n, { parameters: { cidrs: ip } }])),
        timeoutSeconds: 15,
        retries: 1,
      },
    });
    await bed.policy("default", {
      escalation: [{ agents: [{ name: "lab-ipmi" }], timeoutSeconds: 6 }, { agents: [{ name: "lab-netfence" }] }],
      // Asked for, and still never done on StorageFenced evidence.
      release: { forceDeletePods: true, deleteVolumeAttachments: true, outOfServiceTaint: true },
      guards: { maxUnhealthyNodes: 2, maxConcurrentFences: 2 },
    });
    await bed.startOperator();
  });
  after(async () => {
    double?.stop();
    const r = await bed?.invariant().catch(() => undefined);
    if (r)
      console.log(`invariant: ${r.identities} identities, ${r.replacements} replacements, violations: ${JSON.stringify(r.violations)}`);
    await bed?.down();
  });

  const podsOf = async (app: string) => (await bed.lab.core.listNamespacedPod({ namespace: NS, labelSelector: `app=${app}` })).items;
  const running = (p: V1Pod | undefined) => p?.status?.phase === "Running";

  test("crash: IPMI unreachable, NetworkFence Fenced → StorageFenced; the Deployment's claim moves with token + 1, the StatefulSet pod stays", async () => {
    // A pre-bound SAN volume and its claim, and a ledger writer Deployment at scale 1 evicted as soon as its node is unreachable.
    await bed.sanClaim("app-data");
    const evictAtOnce = ["node.kubernetes.io/unreachable", "node.kubernetes.io/not-ready"].map((key) => ({
      key,
      operator: "Exists",
      effect: "NoExecute",
      tolerationSeconds: 0,
    }));
    await bed.apps.createNamespacedDeployment({
      namespace: NS,
      body: {
        metadata: { name: "app" },
        spec: {
          replicas: 1,
          selector: { matchLabels: { app: "app" } },
          template: {
            metadata: { labels: { app: "app" } },
            spec: { ...bed.ledgerWriterSpec(["app-data"]), tolerations: evictAtOnce },
          },
        },
      },
    });
    const first = await waitFor("app Running", async () => (await podsOf("app")).find(running), { timeoutMs: 90_000 });
    const node = first.spec!.nodeName!;
    const token = Number(first.metadata?.annotations?.[TOKEN_ANNOTATION]);
    assert.ok(token >= 1, "the Deployment's pod was granted its claim");
    // A StatefulSet pod on the same node.
    const [db0] = await bed.statefulSet("db", 1, { nodeSelector: { "kubernetes.io/hostname": node } });
    assert.equal(db0!.spec?.nodeName, node);

    await bed.lab.setBmcReachable(node, false);
    const t0 = Date.now();
    await bed.lab.crash(node);
    // Until the fence has evidence, the replacement may not run ungated.
    const samples: string[] = [];
    let gatedSeen = false;
    const second = await waitFor(
      "a new app pod Running",
      async () => {
        const ps = await podsOf("app");
        const others = ps.filter((p) => p.metadata?.uid !== first.metadata?.uid);
        if (others.some(isGated)) gatedSeen = true;
        if (!(await bed.getFence(node))?.status?.evidence)
          for (const x of others) if (!isGated(x)) samples.push(`${x.metadata?.name} ungated before ${node} was fenced`);
        return others.find(running);
      },
      { timeoutMs: 150_000, intervalMs: 100 },
    );
    console.log(`failover through the storage fence (crash → replacement Running): ${((Date.now() - t0) / 1000).toFixed(1)} s`);
    assert.deepEqual(samples, [], "never two holders");
    assert.ok(gatedSeen, "the replacement was seen gated while the old pod was on the unfenced node");
    assert.equal(second.metadata?.annotations?.[TOKEN_ANNOTATION], String(token + 1));
    assert.notEqual(second.spec?.nodeName, node);

    const f = await bed.waitForFence(node, (x: NodeFence) => x.status?.phase === "Released", "Released", 60_000);
    assert.equal(f.status?.evidence?.method, "StorageFenced");
    assert.deepEqual(f.status?.evidence?.storageClasses, [SAN_STORAGE_CLASS]);
    const attempts = (f.status?.attempts ?? []).map((a) => `L${a.level} ${a.agent} ${a.operation} ${a.outcome}`);
    assert.ok(
      attempts.some((a) => /^L0 lab-ipmi off (Failed|TimedOut)$/.test(a)),
      attempts.join("; "),
    );
    assert.ok(attempts.includes("L1 lab-netfence off Succeeded"), attempts.join("; "));
    const rel = f.status?.releases ?? [];
    // The replacement may be granted app-data before the release step reaches it (the node counts as fenced for SAN
    // claims from the evidence on); db-0's lock, which nobody else asks for, is broken by the release.
    assert.ok(
      rel.some((r) => r.kind === "ClaimLock" && r.name === "data-db-0" && r.action === "Broken"),
      JSON.stringify(rel),
    );
    assert.deepEqual(
      rel.filter((r) => r.kind === "Pod" || r.kind === "Taint"),
      [],
      "no pod force-deleted, no out-of-service taint",
    );
    const cond = f.status?.conditions?.find((x) => x.type === "Released");
    assert.equal(cond?.reason, "VolumesReleased");
    assert.match(cond?.message ?? "", /pods NOT force-deleted/);
    // The StatefulSet pod is still there, the same instance; the node carries no out-of-service taint.
    const still = (await podsOf("db")).find((p) => p.metadata?.name === "db-0");
    assert.equal(still?.metadata?.uid, db0!.metadata?.uid, "db-0 was not force-deleted (no replacement)");
    assert.ok(!((await bed.lab.node(node)).spec?.taints ?? []).some((x) => x.key === OUT_OF_SERVICE_TAINT));
    const lock = parseLock(await bed.lab.core.readNamespacedPersistentVolumeClaim({ name: "app-data", namespace: NS }));
    assert.deepEqual(lock.ok && lock.lock?.holder, { pod: second.metadata?.name, uid: second.metadata?.uid });
    // The NetworkFence Stockade made (its own for this agent and node), as csi-addons sees it.
    const nfName = networkFenceName("lab-netfence", node);
    const fence = (await bed.custom.getClusterCustomObject({ ...nf, name: nfName })) as NetworkFence;
    assert.equal(fence.spec.fenceState, "Fenced");
    assert.deepEqual(fence.spec.cidrs, [`${ips.get(node)}/32`]);
    assert.equal(fence.status?.result, "Succeeded");

    // The crashed machine boots again: a new bootID, its kubelet back, db-0 (never force-deleted) running again. A new
    // bootID lifts nothing: the NodeFence stays Released, the NetworkFence Fenced, no storage unfence is tried.
    const bootBefore = (await bed.lab.node(node)).status?.nodeInfo?.bootID;
    await bed.lab.heal(node);
    const rebooted = await bed.lab.waitForNodeReady(node, { timeoutMs: 90_000 });
    assert.notEqual(rebooted.status?.nodeInfo?.bootID, bootBefore, "the node really rebooted");
    await sleep(10_000); // the operator sees the Node change and reconciles the fence
    const later = await bed.getFence(node);
    assert.equal(later?.status?.phase, "Released");
    assert.ok(!(later?.status?.attempts ?? []).some((a) => a.operation === "on"), "no storage unfence was tried");
    const held = (await bed.custom.getClusterCustomObject({ ...nf, name: nfName })) as NetworkFence;
    assert.equal(held.spec.fenceState, "Fenced", "the storage fence is still up after the reboot");
    assert.ok(!double.answers.some((a) => a.name === nfName && a.fenceState === "Unfenced"));

    // An administrator's unfence lifts it the documented way: Unfenced (answered), then deleted.
    await bed.kubectl("patch", "nodefence", node, "--type=merge", "-p", '{"spec":{"unfence":true}}');
    await bed.waitForFence(node, (x) => x.status?.phase === "Unfenced", "Unfenced", 60_000);
    await waitFor(
      `NetworkFence ${nfName} deleted`,
      async () =>
        (await bed.custom.getClusterCustomObject({ ...nf, name: nfName }).then(
          () => false,
          () => true,
        )) || undefined,
      { timeoutMs: 30_000 },
    );
    assert.ok(double.answers.some((a) => a.name === nfName && a.fenceState === "Unfenced" && a.result === "Succeeded"));

    const inv = await bed.invariant();
    assert.deepEqual(inv.violations, []);
  });

  // ---- Issue 26: two storage backends; lifting every fence that may have gone out --------------------------------

  const SAN_B = "lab-san-b";
  const getNf = async (name: string) =>
    (await bed.custom.getClusterCustomObject({ ...nf, name }).then(
      (x) => x as NetworkFence,
      () => undefined,
    )) ?? undefined;
  /** Nodes Ready now with no NodeFence left by an earlier test (the first crashed one, rebooted it and unfenced it). */
  const readyNodes = async () => {
    const out: string[] = [];
    for (const n of bed.lab.nodes())
      if ((await bed.lab.node(n)).status?.conditions?.find((c) => c.type === "Ready")?.status === "True" && !(await bed.getFence(n)))
        out.push(n);
    return out;
  };
  let backends = false;
  /** Two storage agents, one per backend (NetworkFenceClass); backend B's csi-addons does not answer until told. */
  async function twoBackends(): Promise<void> {
    double.classModes.set("lab-san-b", "silent");
    if (backends) return;
    backends = true;
    for (const [name, cls, sc] of [
      ["nf-a", "lab-san", SAN_STORAGE_CLASS],
      ["nf-b", "lab-san-b", SAN_B],
    ] as const)
      await bed.create("fenceagents", {
        metadata: { name },
        spec: {
          type: "csiAddonsNetworkFence",
          parameters: { networkFenceClassName: cls, storageClasses: sc },
          nodes: Object.fromEntries([...ips].map(([n, ip]) => [n, { parameters: { cidrs: ip } }])),
          timeoutSeconds: 8,
          retries: 1,
        },
      });
  }
  const manualFence = (node: string, policy: string) =>
    bed.create("nodefences", { metadata: { name: node }, spec: { nodeName: node, policy, reason: "issue 26 e2e" } });
  const attemptsOf = (f: NodeFence | undefined) => (f?.status?.attempts ?? []).map((a) => `${a.agent} ${a.operation} ${a.outcome}`);

  test("two storage agents in one level: two NetworkFences, each its backend's; B's silence keeps the fence unconfirmed; deleting the NodeFence lifts both before its finalizer goes", async () => {
    await twoBackends();
    const node = (await readyNodes())[0]!;
    await bed.policy("two-backends", {
      nodeSelector: { matchLabels: { "kubernetes.io/hostname": node } },
      escalation: [{ agents: [{ name: "nf-a" }, { name: "nf-b" }] }],
    });
    await manualFence(node, "two-backends");
    const a = networkFenceName("nf-a", node);
    const b = networkFenceName("nf-b", node);
    await waitFor(
      "both NetworkFences made",
      async () => ((await getNf(a))?.status?.result === "Succeeded" && (await getNf(b)) ? true : undefined),
      { timeoutMs: 30_000 },
    );
    assert.equal((await getNf(a))?.spec.networkFenceClassName, "lab-san");
    assert.equal((await getNf(b))?.spec.networkFenceClassName, "lab-san-b");
    assert.ok(!(await getNf(`stockade-${node}`)), "no shared stockade-<node>");
    // B's backend never answered: its fence is not confirmed by A's answer, so nothing is fenced or released.
    await new Promise((r) => setTimeout(r, 3_000));
    const f = await bed.getFence(node);
    assert.equal(f?.status?.evidence, undefined, JSON.stringify(f?.status?.evidence));
    assert.ok(attemptsOf(f).includes("nf-a off Succeeded"), attemptsOf(f).join("; "));
    assert.ok(!attemptsOf(f).includes("nf-b off Succeeded"), attemptsOf(f).join("; "));
    assert.deepEqual(f?.status?.releases ?? [], []);

    // Deleted while B still does not answer: A is lifted, B's lift fails and is retried; the finalizer stays and says why.
    await bed.kubectl("delete", "nodefence", node, "--wait=false");
    await waitFor(`NetworkFence ${a} lifted`, async () => ((await getNf(a)) ? undefined : true), { timeoutMs: 30_000 });
    const held = await bed.waitForFence(node, (x) => attemptsOf(x).includes("nf-b on TimedOut"), "with a failed lift of nf-b", 60_000);
    assert.ok(held.metadata?.deletionTimestamp, "still there: its finalizer waits for the lift");
    const cond = held.status?.conditions?.find((c) => c.type === STORAGE_FENCE_HELD_CONDITION);
    assert.equal(cond?.status, "True", JSON.stringify(held.status?.conditions));
    assert.match(cond?.message ?? "", new RegExp(b));
    assert.equal((await getNf(b))?.spec.fenceState, "Unfenced", "asked to unfence, not deleted before csi-addons confirmed");
    // The Event is written after the status that says the same (seen late on a loaded machine): wait for it.
    await waitFor(
      "a Warning Event that says the storage fence is not lifted",
      async () =>
        (await bed.lab.core.listEventForAllNamespaces({ fieldSelector: `involvedObject.name=${node},reason=StorageFenceNotLifted` })).items
          .length > 0 || undefined,
      { timeoutMs: 15_000 },
    );
    // B's backend answers again: the retry lifts it, then the NodeFence goes.
    double.classModes.set("lab-san-b", "succeed");
    await waitFor(`NodeFence ${node} gone`, async () => ((await bed.getFence(node)) ? undefined : true), { timeoutMs: 60_000 });
    assert.equal(await getNf(b), undefined);
    assert.ok(double.answers.some((x) => x.name === b && x.fenceState === "Unfenced" && x.result === "Succeeded"));
  });

  test("two levels, then an unfence: evidence names A's StorageClasses only; B's timed-out fence (its create went out) is lifted with A's before Unfenced", async () => {
    await twoBackends();
    const node = (await readyNodes())[0]!;
    await bed.kubectl("delete", "fencingpolicy", "two-backends", "--ignore-not-found");
    await bed.policy("two-levels", {
      nodeSelector: { matchLabels: { "kubernetes.io/hostname": node } },
      escalation: [{ agents: [{ name: "nf-b" }], timeoutSeconds: 4 }, { agents: [{ name: "nf-a" }] }],
    });
    await manualFence(node, "two-levels");
    const a = networkFenceName("nf-a", node);
    const b = networkFenceName("nf-b", node);
    const fenced = await bed.waitForFence(node, (x) => !!x.status?.evidence, "confirmed", 60_000);
    assert.equal(fenced.status?.evidence?.method, "StorageFenced");
    assert.deepEqual(fenced.status?.evidence?.storageClasses, [SAN_STORAGE_CLASS], "B's timed-out fence proves nothing");
    assert.equal((await getNf(b))?.spec.networkFenceClassName, "lab-san-b");
    assert.equal((await getNf(a))?.status?.result, "Succeeded");

    // The node heartbeats (a manual fence of a healthy node): StorageFenced does not need it silent (a heartbeat does not
    // undo a storage cut), so the fence is Released and stays, one round (issue 26 item 5).
    const released = await bed.waitForFence(node, (x) => x.status?.phase === "Released", "Released", 60_000);
    assert.equal(released.status?.round ?? 0, 0, attemptsOf(released).join("; "));
    // The administrator unfences while B's backend still does not answer: B's fence, never confirmed, may be up.
    await bed.kubectl("patch", "nodefence", node, "--type=merge", "-p", '{"spec":{"unfence":true}}');
    await bed.waitForFence(node, (x) => x.status?.phase === "Unfencing" || x.status?.phase === "Unfenced", "unfencing");
    double.classModes.set("lab-san-b", "succeed");
    const done = await bed.waitForFence(node, (x) => x.status?.phase === "Unfenced", "Unfenced", 90_000);
    // Nothing it may have put up is left: B's NetworkFence (made, never confirmed) is gone with A's.
    assert.equal(await getNf(a), undefined);
    assert.equal(await getNf(b), undefined, `B's NetworkFence left behind: ${attemptsOf(done).join("; ")}`);
    assert.equal(done.status?.conditions?.find((c) => c.type === STORAGE_FENCE_HELD_CONDITION)?.status, "False");
    assert.ok(attemptsOf(done).includes("nf-b on Succeeded"), attemptsOf(done).join("; "));
  });

  test("automatic: a partition whose storage fence is in flight when the node comes back is cancelled only after that NetworkFence is lifted", async () => {
    await twoBackends();
    const node = (await readyNodes())[0]!;
    // Only this policy for the node: one level, B's storage fence (no power agent may reach it).
    await bed.kubectl("delete", "fencingpolicy", "default", "two-levels", "--ignore-not-found");
    await bed.policy("auto-b", {
      nodeSelector: { matchLabels: { "kubernetes.io/hostname": node } },
      escalation: [{ agents: [{ name: "nf-b" }] }],
      guards: { maxUnhealthyNodes: 2, maxConcurrentFences: 2 },
    });
    const b = networkFenceName("nf-b", node);
    // A guarded pod on it, so that its partition is fenced (nothing is released here: B never confirms).
    const [pinned] = await bed.statefulSet("auto", 1, { nodeSelector: { "kubernetes.io/hostname": node } });
    assert.equal(pinned?.spec?.nodeName, node);
    await bed.lab.partition(node);
    const inFlight = await bed.waitForFence(
      node,
      (x) => x.spec.origin === "Automatic" && attemptsOf(x).includes("nf-b off InProgress"),
      "an automatic fence with B's fence in flight",
      90_000,
    );
    await waitFor(`NetworkFence ${b} made`, async () => ((await getNf(b)) ? true : undefined), { timeoutMs: 15_000 });
    // The node comes back while csi-addons has not answered: the fence must not end Unfenced with B's fence up.
    await bed.lab.heal(node); // the cable mended: the same boot heartbeats again
    await bed.waitForFence(node, (x) => x.status?.phase === "Unfencing" || x.status?.phase === "Unfenced", "cancelling", 60_000);
    double.classModes.set("lab-san-b", "succeed");
    const done = await bed.waitForFence(
      node,
      (x) => x.metadata?.uid === inFlight.metadata?.uid && x.status?.phase === "Unfenced",
      "Unfenced",
      90_000,
    );
    assert.equal(done.status?.conditions?.find((c) => c.type === "Fenced")?.reason, "NodeRecovered");
    assert.equal(await getNf(b), undefined, `B's NetworkFence left on a healthy node: ${attemptsOf(done).join("; ")}`);
    assert.ok(attemptsOf(done).includes("nf-b on Succeeded"), attemptsOf(done).join("; "));
    assert.deepEqual(done.status?.releases ?? [], []);
  });
});
