// Issue 26, item 1, with the real pod GC controller on real nodes: an administrator follows the upstream
// non-graceful shutdown procedure and taints a partitioned node node.kubernetes.io/out-of-service by hand, with no
// NodeFence. The taint manager deletes the node's pods; the pod GC controller writes phase Failed on them and
// force-deletes them (pkg/controller/podgc gcTerminating). The Failed phase on a node that does not heartbeat is no
// proof: the claim is not granted to the replacement, and the pod GC controller's grace-0 delete is refused by the
// guard (it retries). Once a NodeFence confirms the machine off, the retry goes through and the replacement starts.
// Writers are the lab's ledger (each record carries the writer's token): the ledger checker sees two writers at once.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import type { V1Pod } from "@kubernetes/client-node";
import { auditEvents, type AuditEvent } from "../lab/audit.ts";
import { Bed, NS } from "../lab/bed.ts";
import { failoverTimeline } from "../lab/failover-timing.ts";
import { waitFor } from "../lab/health.ts";
import { TOKEN_ANNOTATION, isGated } from "../src/decide/claim-lock.ts";

const OUT_OF_SERVICE = "node.kubernetes.io/out-of-service";

describe("e2e: out-of-service taint added by hand to a partitioned node Stockade has not fenced", () => {
  let bed: Bed;

  before(async () => {
    bed = await Bed.up({ nodes: 3, name: "oos-hand", webhooks: true });
    // Paused: Stockade fences nothing on its own; the claim lock and the force-delete guard work all the same.
    await bed.policy("default", { paused: true, guards: { maxUnhealthyNodes: 1 } });
    await bed.startOperator();
  });
  after(async () => {
    const r = await bed?.invariant().catch(() => undefined);
    if (r) console.log(`invariant: ${r.identities} identities, ${r.replacements} replacements, ${r.violations.length} violations`);
    await bed?.down();
  });

  test("the pod GC controller's Failed phase is no proof: claim not granted, its force delete refused until a fence confirms", async () => {
    // A pre-bound SAN volume (no storage-side lock) and its ReadWriteOnce claim.
    await bed.sanClaim("hand");
    // A Deployment at scale 1: its ReplicaSet creates the replacement as soon as the old pod is terminating.
    await bed.apps.createNamespacedDeployment({
      namespace: NS,
      body: {
        metadata: { name: "hand" },
        spec: {
          replicas: 1,
          selector: { matchLabels: { app: "hand" } },
          template: {
            metadata: { labels: { app: "hand" } },
            spec: bed.ledgerWriterSpec(["hand"]),
          },
        },
      },
    });
    const podsOf = async () => (await bed.lab.core.listNamespacedPod({ namespace: NS, labelSelector: "app=hand" })).items;
    const first = await waitFor("hand Running", async () => (await podsOf()).find((p) => p.status?.phase === "Running"), {
      timeoutMs: 90_000,
    });
    const node = first.spec!.nodeName!;
    const token = Number(first.metadata?.annotations?.[TOKEN_ANNOTATION]);
    assert.ok(token >= 1, "granted its claim");

    // The node is cut off (its kubelet and the writer keep running), the node controller turns it Ready=Unknown.
    const t0 = Date.now();
    await bed.lab.partition(node);
    await bed.lab.waitForNodeReadyStatus(node, "Unknown", 90_000);
    // The administrator's step of the upstream procedure, by hand.
    await bed.kubectl("taint", "node", node, `${OUT_OF_SERVICE}=nodeshutdown:NoExecute`);

    // The pod GC controller marks the terminating pod Failed and force-deletes it: refused.
    const isOld = (p: V1Pod) => p.metadata?.uid === first.metadata?.uid;
    const failed = await waitFor(
      "the pod GC controller to mark the old pod Failed",
      async () => (await podsOf()).find((p) => isOld(p) && p.status?.phase === "Failed"),
      { timeoutMs: 120_000, intervalMs: 500 },
    );
    assert.ok(failed.metadata?.deletionTimestamp, "terminating (the taint manager's delete)");
    assert.ok(
      failed.status?.containerStatuses?.some((s) => s.state?.running),
      "the kubelet's last report of a running container is untouched by the pod GC controller",
    );
    const refusedGc = await waitFor(
      "the pod GC controller's grace-0 delete refused by the guard (audit log)",
      async () => {
        for await (const e of auditEvents(bed.lab.dir, (l) => l.includes('"delete"') && l.includes(first.metadata!.name!)))
          if (
            e.verb === "delete" &&
            e.objectRef?.name === first.metadata?.name &&
            e.responseStatus?.code === 403 &&
            e.stage === "ResponseComplete"
          )
            return e as AuditEvent & { annotations?: Record<string, string> };
        return undefined;
      },
      { timeoutMs: 60_000, intervalMs: 1000 },
    );
    console.log(
      `pod GC's delete refused, as ${refusedGc.user.username}: ${refusedGc.annotations?.["force-delete.stockade.io/reason"] ?? ""}`,
    );
    assert.equal(refusedGc.annotations?.["force-delete.stockade.io/decision"], "refused");
    assert.match(
      refusedGc.annotations?.["force-delete.stockade.io/reason"] ?? "",
      /phase Failed proves nothing while node \S+ does not heartbeat/,
    );

    // Over the pod GC controller's next passes (every 20 s): the old pod stays, the replacement stays gated.
    const until = Date.now() + 45_000;
    let replacement: V1Pod | undefined;
    while (Date.now() < until) {
      const ps = await podsOf();
      assert.ok(ps.some(isOld), "the old pod object is still there (its containers may run)");
      replacement = ps.find((p) => !isOld(p));
      if (replacement) assert.ok(isGated(replacement), `the replacement ${replacement.metadata?.name} is not granted the claim`);
      await new Promise((r) => setTimeout(r, 1000));
    }
    assert.ok(replacement, "the ReplicaSet created a replacement");
    const waiting = (
      await bed.lab.core.listNamespacedEvent({
        namespace: NS,
        fieldSelector: `involvedObject.name=${replacement.metadata?.name},reason=WaitingForClaim`,
      })
    ).items;
    assert.match(waiting.at(-1)?.message ?? "", /phase Failed proves nothing while node/);

    // A person fences the node: once the power-off is confirmed, the pod GC controller's retry goes through.
    await bed.create("nodefences", { metadata: { name: node }, spec: { nodeName: node, reason: "e2e: out-of-service by hand" } });
    const next = await waitFor(
      "the replacement Running",
      async () => {
        const ps = await podsOf();
        return ps.some(isOld) ? undefined : ps.find((p) => p.status?.phase === "Running");
      },
      { timeoutMs: 180_000, intervalMs: 500 },
    );
    assert.equal(next.metadata?.annotations?.[TOKEN_ANNOTATION], String(token + 1));
    const fence = await bed.getFence(node);
    assert.ok(fence?.status?.evidence, "the old pod went only after the fence's evidence");
    const { off, gone } = failoverTimeline(bed.rec, { node, oldUid: first.metadata!.uid!, since: t0 });
    assert.ok(off && gone && off < gone, `power off before the old pod was gone\n${bed.rec.format(t0)}`);
    assert.deepEqual((await bed.invariant()).violations, []);
  });
});
