// Volume safety (issue 10) on real nodes with the bundle's webhooks: the claim lock (gate, compare-and-swap
// grant, fencing token), its release by a NodeFence, and the guard on force deletes. Writers are the lab's
// ledger (each record carries the writer's token), so the ledger checker sees any two writers at once.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { AdmissionregistrationV1Api, type V1Pod, type V1PodSpec } from "@kubernetes/client-node";
import { auditEvents, type AuditEvent } from "../lab/audit.ts";
import { Bed, NS } from "../lab/bed.ts";
import { waitFor } from "../lab/health.ts";
import { refusal } from "../lab/refusal.ts";
import { FORCE_DELETE_ANNOTATION } from "../src/admission/force-delete.ts";
import type { NodeFence } from "../src/api/v1alpha1.ts";
import { LOCK_ANNOTATION, TOKEN_ANNOTATION, TOKENS_ANNOTATION, isGated, parseLock } from "../src/decide/claim-lock.ts";

const released = (f: NodeFence) => f.status?.phase === "Released";

describe("e2e: volume safety (claim lock, fencing token, force-delete guard)", () => {
  let bed: Bed;
  let images: Record<string, string>;

  before(async () => {
    bed = await Bed.up({ nodes: 4, name: "volumes", webhooks: true });
    images = bed.lab.state.real!.images;
    await bed.policy("default", { guards: { maxUnhealthyNodes: 2, maxConcurrentFences: 2 } });
    await bed.startOperator();
  });
  after(async () => {
    const r = await bed?.invariant().catch(() => undefined);
    if (r) console.log(`invariant: ${r.identities} identities, ${r.replacements} replacements, ${r.violations.length} violations`);
    await bed?.down();
  });

  /** A pre-bound SAN volume and its claim (no storage-side lock, like an iSCSI LUN). */
  const claim = (name: string, accessModes = ["ReadWriteOnce"]) => bed.sanClaim(name, accessModes);
  /** A ledger writer's pod spec on the given claims; its identity is the first claim (Bed.ledgerWriterSpec). */
  const writerSpec = (claims: string[]): V1PodSpec => bed.ledgerWriterSpec(claims);

  const pod = (name: string) => bed.lab.core.readNamespacedPod({ name, namespace: NS });
  const podsOf = async (app: string) => (await bed.lab.core.listNamespacedPod({ namespace: NS, labelSelector: `app=${app}` })).items;
  const lockOf = async (c: string) => {
    const p = parseLock(await bed.lab.core.readNamespacedPersistentVolumeClaim({ name: c, namespace: NS }));
    assert.ok(p.ok, "the lock record parses");
    return p.lock;
  };
  const events = async (name: string, reason: string) =>
    (await bed.lab.core.listNamespacedEvent({ namespace: NS, fieldSelector: `involvedObject.name=${name},reason=${reason}` })).items;

  /** The apiserver's audit event of a DELETE of this pod answered with `code`, with the webhook's annotations. */
  const auditedDelete = (name: string, code: number) =>
    waitFor(
      `the audit log's DELETE of ${name} (${code})`,
      async () => {
        for await (const e of auditEvents(bed.lab.dir, (l) => l.includes('"delete"') && l.includes(name)))
          if (e.stage === "ResponseComplete" && e.verb === "delete" && e.objectRef?.name === name && e.responseStatus?.code === code)
            return e as AuditEvent & { annotations?: Record<string, string> };
        return undefined;
      },
      { timeoutMs: 30_000, intervalMs: 1000 },
    );

  const running = (p: V1Pod | undefined) => p?.status?.phase === "Running";
  const runningPod = (name: string) =>
    waitFor(
      `${name} Running`,
      async () => {
        const p = await pod(name);
        return running(p) ? p : undefined;
      },
      { timeoutMs: 60_000 },
    );

  test("a pod on a guarded claim is created gated, granted token 1, then runs; a shared claim is never gated", async () => {
    await claim("solo");
    await claim("shared", ["ReadWriteMany"]);
    const created = await bed.lab.core.createNamespacedPod({
      namespace: NS,
      body: { metadata: { name: "solo-a", labels: { app: "solo" } }, spec: writerSpec(["solo"]) },
    });
    assert.ok(isGated(created), "the webhook added the gate at creation");
    const shared = await bed.lab.core.createNamespacedPod({
      namespace: NS,
      body: { metadata: { name: "shared-a", labels: { app: "shared" } }, spec: writerSpec(["shared"]) },
    });
    assert.ok(!isGated(shared), "ReadWriteMany: no gate");
    const p = await runningPod("solo-a");
    assert.equal(p.metadata?.annotations?.[TOKEN_ANNOTATION], "1");
    assert.deepEqual(JSON.parse(p.metadata?.annotations?.[TOKENS_ANNOTATION] ?? "{}"), { solo: 1 });
    assert.deepEqual((await lockOf("solo"))?.holder, { pod: "solo-a", uid: p.metadata?.uid });
    assert.ok((await events("solo-a", "ClaimLockGranted")).length > 0, "an Event says who got the claim");
    await bed.lab.core.deleteNamespacedPod({ name: "shared-a", namespace: NS });
  });

  test("two pods racing for one claim: exactly one is granted; the other starts with token + 1 once the first is gone", async () => {
    await claim("race");
    const spec = writerSpec(["race"]);
    await Promise.all(
      ["race-a", "race-b"].map((name) =>
        bed.lab.core.createNamespacedPod({ namespace: NS, body: { metadata: { name, labels: { app: "race" } }, spec } }),
      ),
    );
    const winner = await waitFor("one racer Running", async () => (await podsOf("race")).find(running), { timeoutMs: 60_000 });
    await new Promise((r) => setTimeout(r, 3000));
    const all = await podsOf("race");
    assert.equal(all.filter((p) => !isGated(p)).length, 1, "exactly one racer lost its gate");
    const loser = all.find((p) => p.metadata?.uid !== winner.metadata?.uid)!;
    assert.equal(loser.status?.phase, "Pending");
    const waiting = await events(loser.metadata!.name!, "WaitingForClaim");
    // Named as the holder, or (when the claim in the operator's cache did not show the grant yet) as a user on its
    // node or, not scheduled yet, as granted by the token its gate lift wrote.
    assert.match(
      waiting[0]?.message ?? "",
      new RegExp(`${winner.metadata?.name} (holds it \\(token 1\\)|uses it on node |was granted it \\(token 1\\))`),
    );
    assert.equal(winner.metadata?.annotations?.[TOKEN_ANNOTATION], "1");
    // Graceful delete: the kubelet confirms, the pod object goes, the loser is granted.
    await bed.lab.core.deleteNamespacedPod({ name: winner.metadata!.name!, namespace: NS });
    const next = await runningPod(loser.metadata!.name!);
    assert.equal(next.metadata?.annotations?.[TOKEN_ANNOTATION], "2");
    await bed.lab.core.deleteNamespacedPod({ name: loser.metadata!.name!, namespace: NS });
  });

  /**
   * Polls the app's pods until one other than `first` runs. Meanwhile, whenever `first` still exists and
   * `oldMayRun` (called after the pods were read) says it may still run, every other pod seen without the gate is
   * a sample of two holders. Returns the running pod, those samples and whether another pod was seen gated.
   */
  async function followReplacement(
    app: string,
    first: V1Pod,
    oldMayRun: (old: V1Pod) => boolean | Promise<boolean>,
    why: string,
    o: { timeoutMs: number; intervalMs: number },
  ): Promise<{ second: V1Pod; samples: string[]; gatedSeen: boolean }> {
    const samples: string[] = [];
    let gatedSeen = false;
    const second = await waitFor(
      `a new ${app} pod Running`,
      async () => {
        const ps = await podsOf(app);
        const old = ps.find((p) => p.metadata?.uid === first.metadata?.uid);
        const others = ps.filter((p) => p.metadata?.uid !== first.metadata?.uid);
        if (old && others.some((x) => isGated(x))) gatedSeen = true;
        if (old && (await oldMayRun(old)))
          for (const x of others)
            if (!isGated(x)) samples.push(`${x.metadata?.name} ungated while ${old.metadata?.name} ${why} (${old.status?.phase})`);
        return others.find(running);
      },
      o,
    );
    return { second, samples, gatedSeen };
  }

  test("Deployment at scale 1 with a ReadWriteOnce claim: on rollout the new pod stays gated until the old one is gone", async () => {
    await claim("deploy-data");
    await bed.apps.createNamespacedDeployment({
      namespace: NS,
      body: {
        metadata: { name: "deploy" },
        spec: {
          replicas: 1,
          // Surge and unavailability both allowed: the new pod is created while the old one is still terminating.
          strategy: { type: "RollingUpdate", rollingUpdate: { maxSurge: 1, maxUnavailable: 1 } },
          selector: { matchLabels: { app: "deploy" } },
          template: { metadata: { labels: { app: "deploy" } }, spec: writerSpec(["deploy-data"]) },
        },
      },
    });
    const first = await waitFor("deploy Running", async () => (await podsOf("deploy")).find(running), { timeoutMs: 60_000 });
    await bed.apps.patchNamespacedDeployment({
      name: "deploy",
      namespace: NS,
      body: [{ op: "add", path: "/spec/template/metadata/annotations", value: { rollout: "2" } }],
    });
    // Sample until the new pod runs: while the old pod may still run (it exists and its kubelet has not yet
    // reported it Succeeded/Failed, which it does only once every container stopped), no other pod may be ungated.
    const { second, samples, gatedSeen } = await followReplacement(
      "deploy",
      first,
      (old) => old.status?.phase !== "Succeeded" && old.status?.phase !== "Failed",
      "may still run",
      { timeoutMs: 90_000, intervalMs: 50 },
    );
    assert.deepEqual(samples, [], "never two holders");
    assert.ok(gatedSeen, "the new pod was seen gated while the old one ran");
    assert.equal(second.metadata?.annotations?.[TOKEN_ANNOTATION], "2");
  });

  test("StatefulSet pod on a crashed node: the lock is broken by the fence and the replacement starts with token + 1", async () => {
    const pods = await bed.statefulSet("db", 2);
    const victim = pods.find((p) => p.metadata?.name === "db-0")!;
    const node = victim.spec!.nodeName!;
    const token = Number(victim.metadata?.annotations?.[TOKEN_ANNOTATION]);
    assert.ok(token >= 1, "the StatefulSet pod was granted its claim");
    const t0 = Date.now();
    await bed.lab.crash(node);
    const replacement = await bed.waitForReplacement("db-0", victim.metadata!.uid!);
    console.log(`failover with the claim lock: ${((Date.now() - t0) / 1000).toFixed(1)} s`);
    assert.equal(replacement.metadata?.annotations?.[TOKEN_ANNOTATION], String(token + 1));
    const f = await bed.waitForFence(node, released, "Released");
    const rel = f.status?.releases ?? [];
    const broken = rel.findIndex((r) => r.kind === "ClaimLock" && r.name === "data-db-0" && r.action === "Broken");
    const deleted = rel.findIndex((r) => r.kind === "Pod" && r.name === "db-0");
    assert.ok(broken >= 0 && broken < deleted, `the lock is broken before the pod is released: ${JSON.stringify(rel)}`);
    assert.deepEqual((await lockOf("data-db-0"))?.holder, { pod: "db-0", uid: replacement.metadata?.uid });
    await bed.unfence(node);
  });

  test("Deployment at scale 1 on a crashed node: the ReplicaSet's new pod stays gated until the node is fenced, then starts with token + 1", async () => {
    await claim("dcrash-data");
    // Evicted as soon as its node is unreachable: the ReplicaSet then creates the new pod while the old one is still
    // Terminating on the dead node, the proposal's case of a second writer next to a merely terminating first one.
    const evictAtOnce = ["node.kubernetes.io/unreachable", "node.kubernetes.io/not-ready"].map((key) => ({
      key,
      operator: "Exists",
      effect: "NoExecute",
      tolerationSeconds: 0,
    }));
    await bed.apps.createNamespacedDeployment({
      namespace: NS,
      body: {
        metadata: { name: "dcrash" },
        spec: {
          replicas: 1,
          selector: { matchLabels: { app: "dcrash" } },
          template: { metadata: { labels: { app: "dcrash" } }, spec: { ...writerSpec(["dcrash-data"]), tolerations: evictAtOnce } },
        },
      },
    });
    const first = await waitFor("dcrash Running", async () => (await podsOf("dcrash")).find(running), { timeoutMs: 60_000 });
    const node = first.spec!.nodeName!;
    const token = Number(first.metadata?.annotations?.[TOKEN_ANNOTATION]);
    assert.ok(token >= 1, "the Deployment's pod was granted its claim");
    await bed.lab.crash(node);
    // The fence is read after the pods: a pod seen ungated before a fence with evidence existed was granted without it.
    const { second, samples, gatedSeen } = await followReplacement(
      "dcrash",
      first,
      async () => !(await bed.getFence(node))?.status?.evidence,
      `is on unfenced ${node}`,
      { timeoutMs: 150_000, intervalMs: 100 },
    );
    assert.deepEqual(samples, [], "never two holders");
    assert.ok(gatedSeen, "the new pod was seen gated while the old one was still on the dead node");
    assert.equal(second.metadata?.annotations?.[TOKEN_ANNOTATION], String(token + 1));
    assert.notEqual(second.spec?.nodeName, node);
    await bed.waitForFence(node, released, "Released");
    await bed.apps.deleteNamespacedDeployment({ name: "dcrash", namespace: NS });
    await bed.unfence(node);
  });

  test("kubectl delete --force of a guarded pod on a partitioned, unfenced node is refused; Stockade's own release goes through", async () => {
    const victim = (await podsOf("db")).find((p) => p.metadata?.name === "db-1")!;
    const node = victim.spec!.nodeName!;
    await bed.lab.partition(node);
    const out = await bed.kubectl("delete", "pod", "db-1", "--force", "--grace-period=0", "--wait=false").then(
      () => "",
      (e: { stderr?: string }) => e.stderr ?? String(e),
    );
    assert.match(out, /refusing to force-delete pod default\/db-1/);
    assert.match(out, new RegExp(`kubectl stockade fence ${node}`));
    assert.ok((await pod("db-1")).metadata?.uid === victim.metadata?.uid, "the pod is still there");
    // Recorded by the apiserver, not by the webhook (which writes nothing: anyone can reach it).
    const audit = await auditedDelete("db-1", 403);
    assert.equal(audit.annotations?.["force-delete.stockade.io/decision"], "refused");
    assert.equal((await events("db-1", "ForceDeleteRefused")).length, 0, "no Event written on a caller's behalf");
    const replacement = await bed.waitForReplacement("db-1", victim.metadata!.uid!);
    assert.equal(
      Number(replacement.metadata?.annotations?.[TOKEN_ANNOTATION]),
      Number(victim.metadata?.annotations?.[TOKEN_ANNOTATION]) + 1,
    );
    await bed.waitForFence(node, released, "Released");
    await bed.unfence(node);
  });

  test("the override annotation lets a person force-delete, and the apiserver's audit log records it", async () => {
    await claim("override");
    await bed.lab.core.createNamespacedPod({
      namespace: NS,
      body: {
        metadata: { name: "override-a", labels: { app: "override" } },
        spec: {
          containers: [{ name: "c", image: images.pause!, imagePullPolicy: "Never" }],
          volumes: [{ name: "v", persistentVolumeClaim: { claimName: "override" } }],
        },
      },
    });
    await runningPod("override-a");
    const refused = await refusal(bed.lab.core.deleteNamespacedPod({ name: "override-a", namespace: NS, gracePeriodSeconds: 0 }));
    assert.equal(refused?.code, 403, "a guarded pod on a healthy node: refused too");
    await bed.lab.core.patchNamespacedPod({
      name: "override-a",
      namespace: NS,
      body: [{ op: "add", path: `/metadata/annotations`, value: { [FORCE_DELETE_ANNOTATION]: "e2e: checked by hand" } }],
    });
    await bed.lab.core.deleteNamespacedPod({ name: "override-a", namespace: NS, gracePeriodSeconds: 0 });
    const audit = await auditedDelete("override-a", 200);
    assert.equal(audit.annotations?.["force-delete.stockade.io/decision"], "acknowledged");
    assert.equal(audit.annotations?.["force-delete.stockade.io/acknowledged"], "e2e: checked by hand");
    assert.equal((await events("override-a", "ForceDeleteAcknowledged")).length, 0, "no Event written on a caller's behalf");
  });

  test("operator down: a new pod on a guarded claim is refused (none starts unprotected); once it is back, it is gated and granted", async () => {
    await claim("down");
    await bed.killOperator();
    const body = { metadata: { name: "down-a", labels: { app: "down" } }, spec: writerSpec(["down"]) };
    const r = await refusal(bed.lab.core.createNamespacedPod({ namespace: NS, body }));
    assert.ok(r, "refused while no replica serves the webhook");
    assert.match(r.message, /claim-lock\.stockade\.io/);
    await bed.startOperator();
    await bed.lab.core.createNamespacedPod({ namespace: NS, body });
    const p = await runningPod("down-a");
    assert.equal(p.metadata?.annotations?.[TOKEN_ANNOTATION], "1");
  });

  test("operator killed between the grant and lifting the gate: the next operator finishes with the same token, none reused", async () => {
    await claim("crash");
    const admission = bed.lab.kc.makeApiClient(AdmissionregistrationV1Api);
    // Holds the operator's pod updates back, so that it dies with the claim granted and the gate still on.
    await admission.createValidatingAdmissionPolicy({
      body: {
        metadata: { name: "e2e-hold-gate" },
        spec: {
          failurePolicy: "Fail",
          matchConstraints: { resourceRules: [{ apiGroups: [""], apiVersions: ["v1"], operations: ["UPDATE"], resources: ["pods"] }] },
          validations: [
            {
              expression: "request.userInfo.username != 'stockade-operator' || object.metadata.name != 'crash-a'",
              message: "held by the test",
            },
          ],
        },
      },
    });
    await admission.createValidatingAdmissionPolicyBinding({
      body: { metadata: { name: "e2e-hold-gate" }, spec: { policyName: "e2e-hold-gate", validationActions: ["Deny"] } },
    });
    await new Promise((r) => setTimeout(r, 3000)); // a new policy takes a moment to reach admission
    await bed.lab.core.createNamespacedPod({
      namespace: NS,
      body: { metadata: { name: "crash-a", labels: { app: "crash" } }, spec: writerSpec(["crash"]) },
    });
    const granted = await waitFor("crash claim granted", async () => (await lockOf("crash"))?.holder, { timeoutMs: 30_000 });
    await new Promise((r) => setTimeout(r, 1000));
    assert.ok(isGated(await pod("crash-a")), "the gate is still on");
    await bed.killOperator();
    await admission.deleteValidatingAdmissionPolicyBinding({ name: "e2e-hold-gate" });
    await admission.deleteValidatingAdmissionPolicy({ name: "e2e-hold-gate" });
    await bed.startOperator();
    const p = await runningPod("crash-a");
    assert.equal(granted.pod, "crash-a");
    assert.equal(p.metadata?.annotations?.[TOKEN_ANNOTATION], "1", "the token granted before the crash");
    assert.equal((await lockOf("crash"))?.token, 1, "no token handed out twice");
  });

  test("bad input: a nonsense lock record is never trusted; a pod with two guarded claims gets both; a pod bound by nodeName is refused", async () => {
    await claim("bad");
    await bed.lab.core.patchNamespacedPersistentVolumeClaim({
      name: "bad",
      namespace: NS,
      body: [{ op: "add", path: "/metadata/annotations", value: { [LOCK_ANNOTATION]: '{"v":1,"token":"lots"}' } }],
    });
    await bed.lab.core.createNamespacedPod({
      namespace: NS,
      body: { metadata: { name: "bad-a", labels: { app: "bad" } }, spec: writerSpec(["bad"]) },
    });
    const ev = await waitFor("ClaimLockInvalid", async () => (await events("bad-a", "ClaimLockInvalid"))[0], { timeoutMs: 30_000 });
    assert.match(ev.message ?? "", /not one Stockade writes/);
    assert.ok(isGated(await pod("bad-a")), "still gated");

    await claim("two-a");
    await claim("two-b");
    await bed.lab.core.createNamespacedPod({
      namespace: NS,
      body: { metadata: { name: "two", labels: { app: "two" } }, spec: writerSpec(["two-a", "two-b"]) },
    });
    const two = await runningPod("two");
    assert.deepEqual(JSON.parse(two.metadata?.annotations?.[TOKENS_ANNOTATION] ?? "{}"), { "two-a": 1, "two-b": 1 });
    assert.equal(two.metadata?.annotations?.[TOKEN_ANNOTATION], undefined, "no single token for a pod with two claims");

    // A claim deleted while a pod waits for it: the waiting pod is never granted a claim on its way out.
    await claim("gone");
    await bed.lab.core.createNamespacedPod({
      namespace: NS,
      body: { metadata: { name: "gone-a", labels: { app: "gone" } }, spec: writerSpec(["gone"]) },
    });
    await runningPod("gone-a");
    await bed.lab.core.createNamespacedPod({
      namespace: NS,
      body: { metadata: { name: "gone-b", labels: { app: "gone" } }, spec: writerSpec(["gone"]) },
    });
    await waitFor("gone-b waiting", async () => (await events("gone-b", "WaitingForClaim"))[0], { timeoutMs: 30_000 });
    await bed.lab.core.deleteNamespacedPersistentVolumeClaim({ name: "gone", namespace: NS });
    await bed.lab.core.deleteNamespacedPod({ name: "gone-a", namespace: NS });
    await waitFor(
      "gone-b told the claim is being deleted",
      async () => (await events("gone-b", "WaitingForClaim")).find((e) => /claim gone is being deleted/.test(e.message ?? "")),
      { timeoutMs: 60_000 },
    );
    assert.ok(isGated(await pod("gone-b")), "never granted a claim being deleted");

    const node = bed.lab.nodes()[0]!;
    const r = await refusal(
      bed.lab.core.createNamespacedPod({
        namespace: NS,
        body: { metadata: { name: "bound" }, spec: { ...writerSpec(["bad"]), nodeName: node } },
      }),
    );
    assert.match(r?.message ?? "", /sets spec\.nodeName/);
    assert.ok(!(await bed.lab.core.listNamespacedPod({ namespace: NS })).items.some((p) => p.metadata?.name === "bound"));
  });

  test("the invariant over the whole run: one instance per pod and per claim at a time, tokens rising, ledgers without two writers", async () => {
    const r = await bed.invariant();
    assert.deepEqual(r.violations, []);
    assert.ok(r.identities > 0);
  });
});
