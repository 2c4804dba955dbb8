// docs/volumes.md, "Recovering a cluster whose operator cannot come back", followed literally on a real apiserver:
// the bundle's webhooks installed (failurePolicy Fail), no operator serving them. First what fails closed — a new
// pod on a claim, a force delete of a guarded pod, an eviction — then the documented way out: the namespace label
// takes that namespace out of both webhooks; deleting the two configurations frees the rest; a gate lifted by hand.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import type { V1Pod } from "@kubernetes/client-node";
import { Bed } from "../../lab/bed.ts";
import { waitFor } from "../../lab/health.ts";
import { refusal } from "../../lab/refusal.ts";
import { CLAIM_GATE } from "../../src/decide/claim-lock.ts";

describe("webhooks fail closed with the operator gone; the documented recovery works", () => {
  let bed: Bed;
  let node: string;
  before(async () => {
    bed = await Bed.up({ nodes: 1, name: "webhook-recovery", runtime: "kwok", webhooks: true });
    node = bed.lab.nodes()[0]!;
  });
  after(async () => {
    await bed?.down();
  });

  const core = () => bed.lab.core;
  const claimPod = (name: string, gated = false): V1Pod => ({
    metadata: { name },
    spec: {
      ...(gated ? { schedulingGates: [{ name: CLAIM_GATE }] } : {}),
      containers: [{ name: "c", image: "registry.k8s.io/pause:3.10" }],
      volumes: [{ name: "v", persistentVolumeClaim: { claimName: "data" } }],
    },
  });
  /** A guarded pod without a claim (not seen by the claim-lock webhook), bound to the kwok node. */
  const guardedPod = (name: string): V1Pod => ({
    metadata: { name, labels: { "stockade.io/guarded": "true" } },
    spec: { nodeName: node, containers: [{ name: "c", image: "registry.k8s.io/pause:3.10" }] },
  });
  const claim = (namespace: string) =>
    core().createNamespacedPersistentVolumeClaim({
      namespace,
      body: { metadata: { name: "data" }, spec: { accessModes: ["ReadWriteOnce"], resources: { requests: { storage: "1Mi" } } } },
    });
  const forceDelete = (namespace: string, name: string) =>
    bed.kubectl("delete", "pod", "-n", namespace, name, "--force", "--grace-period=0");
  const failed = (p: Promise<unknown>) =>
    p.then(
      () => "",
      (e: { stderr?: string; message?: string }) => e.stderr ?? e.message ?? String(e),
    );

  test("fail closed, then `kubectl label namespace <ns> stockade.io/webhooks=disabled` frees that namespace from both webhooks", async () => {
    for (const ns of ["app", "other"]) {
      await core().createNamespace({ body: { metadata: { name: ns } } });
      await claim(ns);
      await core().createNamespacedPod({ namespace: ns, body: guardedPod("db-0") });
    }
    // No replica answers: the apiserver refuses what the webhooks would have checked.
    const created = await refusal(core().createNamespacedPod({ namespace: "app", body: claimPod("writer") }));
    assert.match(created?.message ?? "allowed", /claim-lock\.stockade\.io/);
    assert.match(await failed(forceDelete("app", "db-0")), /force-delete\.stockade\.io/);
    const evicted = await refusal(
      core().createNamespacedPodEviction({ name: "db-0", namespace: "app", body: { metadata: { name: "db-0", namespace: "app" } } }),
    );
    assert.match(evicted?.message ?? "allowed", /force-delete\.stockade\.io/);

    // The documented step, literally.
    await bed.kubectl("label", "namespace", "app", "stockade.io/webhooks=disabled");
    const seen = await waitFor(
      "the label to take effect",
      async () => {
        const r = await refusal(core().createNamespacedPod({ namespace: "app", body: claimPod("writer") }));
        return r ? undefined : true;
      },
      { timeoutMs: 30_000, intervalMs: 500 },
    );
    assert.ok(seen);
    assert.ok(!(await core().readNamespacedPod({ name: "writer", namespace: "app" })).spec?.schedulingGates?.length, "created ungated");
    assert.equal(await failed(forceDelete("app", "db-0")), "", "the force delete goes through in the labelled namespace");
    // Only that namespace: the other one is still protected.
    assert.match(await failed(forceDelete("other", "db-0")), /force-delete\.stockade\.io/);
  });

  test("deleting the two configurations frees the rest; a gated pod's gate is lifted by hand", async () => {
    // A pod gated before (here: created with the gate, in the labelled namespace the webhook no longer sees).
    await core().createNamespacedPod({ namespace: "app", body: claimPod("gated", true) });
    await bed.kubectl("delete", "mutatingwebhookconfiguration", "stockade-claim-lock");
    await bed.kubectl("delete", "validatingwebhookconfiguration", "stockade-force-delete");
    await waitFor(
      "the other namespace's force delete to go through",
      async () => ((await failed(forceDelete("other", "db-0"))) === "" ? true : undefined),
      {
        timeoutMs: 30_000,
        intervalMs: 500,
      },
    );
    await core().createNamespacedPod({ namespace: "other", body: claimPod("writer") });
    await bed.kubectl("patch", "pod", "-n", "app", "gated", "--type=json", "-p", '[{"op":"remove","path":"/spec/schedulingGates/0"}]');
    assert.deepEqual((await core().readNamespacedPod({ name: "gated", namespace: "app" })).spec?.schedulingGates ?? [], []);
  });
});
