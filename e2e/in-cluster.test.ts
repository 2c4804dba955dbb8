// The operator installed the way users install it (issue 27): its image imported into every real node, an overlay
// of manifests/ applied with `kubectl apply -k`, two replicas as pods. The install itself is checked (replicas on
// different nodes, a leader among them, the webhooks answering through their Service, no Pod Security warning),
// then a node that is not the leader's is cut off and the installed operator fences it and its guarded pod is
// replaced, with the ledger and process-table checkers on (lab/bed.ts invariant()).
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { CoordinationV1Api, type V1Pod } from "@kubernetes/client-node";
import { Bed, NS } from "../lab/bed.ts";
import { assertFailover } from "../lab/failover-timing.ts";
import { waitFor } from "../lab/health.ts";
import { OPERATOR_NS, uninstallOperator } from "../lab/operator-install.ts";
import { LEADER_LEASE } from "../src/operator.ts";
import { TOKEN_ANNOTATION, isGated } from "../src/decide/claim-lock.ts";

const ready = (p: V1Pod) => p.status?.conditions?.some((c) => c.type === "Ready" && c.status === "True") ?? false;
const s = (ms: number) => `${(ms / 1000).toFixed(1)} s`;

describe("e2e: the operator installed in-cluster from manifests/", () => {
  let bed: Bed;
  /** The node the failover test fenced. */
  let fenced: string | undefined;
  before(async () => {
    bed = await Bed.up({ nodes: 3, name: "in-cluster", operator: "in-cluster", log: (m) => console.log(`[bed] ${m}`) });
    await bed.policy("default", { guards: { maxUnhealthyNodes: 1, maxConcurrentFences: 1 } });
  });
  after(async () => {
    const r = await bed?.invariant().catch(() => undefined);
    if (r) console.log(`invariant: ${r.identities} identities, ${r.replacements} replacements, ${r.violations.length} violations`);
    await bed?.down();
  });

  test("apply -k: both replicas Ready on different nodes, one holds the Lease, no warning from kubectl", async () => {
    const installed = bed.installed!;
    assert.deepEqual(installed.warnings, [], "kubectl apply printed no Warning: (Pod Security restricted, deprecations)");
    const pods = (await bed.operatorPods()).filter((p) => !p.metadata?.deletionTimestamp);
    assert.equal(pods.length, 2);
    assert.ok(pods.every(ready), "both replicas Ready");
    assert.notEqual(pods[0]!.spec?.nodeName, pods[1]!.spec?.nodeName, "anti-affinity spread the replicas");
    const lease = await bed.lab.kc.makeApiClient(CoordinationV1Api).readNamespacedLease({ namespace: OPERATOR_NS, name: LEADER_LEASE });
    const holder = lease.spec?.holderIdentity ?? "";
    assert.ok(
      pods.some((p) => holder.startsWith(`${p.metadata?.name}_`)),
      `the Lease holder ${holder} is one of the pods`,
    );
    console.log(
      `install: image import ${s(installed.ms.import)} (3 nodes in parallel), apply ${s(installed.ms.apply)}, apply → Ready ${s(installed.ms.apply + installed.ms.ready)}`,
    );
  });

  test("the agent monitor runs in the leader's pod: every node's BMC reachable and authenticated, asked from the pod's address, status only", async () => {
    const nodes = bed.lab.nodes();
    // A node never queried is due within the monitor's first minute; the bed's agent keeps the default interval.
    const agent = await waitFor(
      "FenceAgent lab-ipmi Reachable for every node",
      async () => {
        const a = await bed.agent("lab-ipmi");
        const reachable = a.status?.conditions?.find((c) => c.type === "Reachable");
        return reachable?.status === "True" && a.status?.monitor?.reachable === nodes.length ? a : undefined;
      },
      { timeoutMs: 120_000, intervalMs: 1_000 },
    );
    assert.equal(agent.status?.conditions?.find((c) => c.type === "Ready")?.status, "True", "Ready: configured, reachable, authenticated");
    assert.equal(agent.status?.monitor?.failing, 0);
    const leader = (await bed.leaderPod())!;
    const ip = leader.status!.podIP!;
    for (const node of nodes) {
      const fromPod = bed.lab.bmcRequests(node).chassis.filter((r) => r.from?.address === ip);
      assert.ok(
        fromPod.some((r) => r.op === "get"),
        `${node}'s BMC answered a power-status query from the leader pod ${leader.metadata?.name} (${ip})`,
      );
      assert.deepEqual(
        fromPod.filter((r) => r.op === "set"),
        [],
        `the monitor never powers ${node} off or on`,
      );
    }
  });

  test("the webhooks answer through their Service: a pod on a guarded claim is created gated, then granted and Running", async () => {
    assert.equal(await bed.webhookRefusal(), undefined, "a server-side dry-run of a pod with a claim is admitted");
    await bed.sanClaim("solo");
    const created = await bed.lab.core.createNamespacedPod({
      namespace: NS,
      body: { metadata: { name: "solo-a", labels: { app: "solo" } }, spec: bed.ledgerWriterSpec(["solo"]) },
    });
    assert.ok(isGated(created), "the claim-lock webhook added the gate at creation");
    const p = await waitFor(
      "solo-a Running",
      async () => {
        const x = await bed.lab.core.readNamespacedPod({ name: "solo-a", namespace: NS });
        return x.status?.phase === "Running" ? x : undefined;
      },
      { timeoutMs: 60_000 },
    );
    assert.equal(p.metadata?.annotations?.[TOKEN_ANNOTATION], "1", "the operator lifted the gate and wrote token 1");
    await bed.lab.core.deleteNamespacedPod({ name: "solo-a", namespace: NS });
    // Gone before the next test cuts a node off: a pod still terminating there would be released by that fence too.
    await waitFor(
      "solo-a gone",
      async () =>
        (await bed.lab.core.listNamespacedPod({ namespace: NS, fieldSelector: "metadata.name=solo-a" })).items.length === 0 || undefined,
      { timeoutMs: 60_000 },
    );
  });

  test("a node that is not the leader's is cut off: the installed operator fences it, the guarded pod is replaced", async () => {
    const leaderNode = await bed.leaderNode();
    for (const n of bed.lab.nodes().filter((x) => x !== leaderNode)) await bed.kubectl("label", "node", n, "e2e.stockade.io/workload=true");
    // One replica (the StatefulSet's anti-affinity is required): the other labelled node is where its replacement goes.
    const pods = await bed.statefulSet("db", 1, { nodeSelector: { "e2e.stockade.io/workload": "true" } });
    assert.ok(
      pods.every((p) => p.metadata?.annotations?.[TOKEN_ANNOTATION]),
      "the guarded StatefulSet pod ran with its token (gated, then ungated by the operator)",
    );
    const victim = pods.find((p) => p.metadata?.name === "db-0")!;
    const node = victim.spec!.nodeName!;
    const uid = victim.metadata!.uid!;
    assert.notEqual(node, leaderNode);

    const t0 = Date.now();
    await bed.lab.partition(node);
    const replacement = await bed.waitForReplacement("db-0", uid, 180_000);
    const f = await bed.waitForFence(node, (x) => x.status?.phase === "Released", "Released");
    assert.deepEqual(
      (f.status?.releases ?? []).filter((r) => r.kind === "Pod").map((r) => r.uid),
      [uid],
      "db-0 released once",
    );
    assert.equal(await bed.leaderNode(), leaderNode, "the leader stayed where it was");
    const fenceCreated = Date.parse(String(f.metadata?.creationTimestamp)); // whole seconds
    const { off: powerOff, running } = assertFailover(bed.rec, { node, oldUid: uid, newUid: replacement.metadata!.uid!, since: t0 });
    assert.deepEqual((await bed.invariant()).violations, []);
    fenced = node;
    console.log(
      `in-cluster failover: cut → replacement Running ${s(running - t0)}, NodeFence created → replacement Running ~${s(running - fenceCreated)}, power off → Running ${s(running - powerOff)}`,
    );
  });

  test("uninstall by manifests/README.md's steps, a node still fenced: the fence is lifted, nothing is left, pods are never refused", async () => {
    assert.ok(fenced, "the failover test fenced a node");
    await bed.lab.reconnect(fenced); // the cut cable mended before the unfence powers the machine back on
    assert.deepEqual((await bed.invariant()).violations, []);
    let probing = true;
    const refusals: string[] = [];
    const probes = (async () => {
      let n = 0;
      for (; probing; n++) {
        const r = await bed.webhookRefusal();
        if (r) refusals.push(r);
      }
      return n;
    })();
    const t0 = Date.now();
    await uninstallOperator(bed.lab, { log: (m) => console.log(`[uninstall] ${m}`) });
    const ms = Date.now() - t0;
    probing = false;
    const n = await probes;
    assert.deepEqual(refusals, [], "no pod with a claim was refused while uninstalling");
    assert.ok(n > 1, "pods were probed throughout");
    assert.equal(bed.lab.machine(fenced).power, "on", "unfenced: powered back on");
    const node = await bed.lab.node(fenced);
    assert.ok(!(node.spec?.taints ?? []).some((t) => t.key.startsWith("stockade.io/")), "no stockade.io taint left on the fenced node");
    const left = await bed.kubectl(
      "get",
      "crd,namespace,clusterrole,clusterrolebinding,mutatingwebhookconfiguration,validatingwebhookconfiguration,validatingadmissionpolicy",
      "-o",
      "name",
    );
    assert.deepEqual(
      left.split("\n").filter((l) => /stockade\.io|\/stockade($|-(system|fence-|nodefence-|claim-|node-leases))/.test(l)),
      [],
      "nothing of the bundle is left",
    );
    console.log(`uninstall with one fenced node: ${s(ms)} (${n} server-side dry-runs of a pod with a claim, all admitted)`);
  });
});
