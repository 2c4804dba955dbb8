// The ledger's manifests (lab/ledger.ts) against a real control plane (kwok nodes: no process runs, but
// the apiserver, the PersistentVolume binder, the StatefulSet controller and the scheduler are real):
// every object is accepted, each ordinal's claim binds to the volume pre-bound for it and no other, the
// pods spread over nodes with the downward-API settings the writer needs, and a replacement pod gets
// the same claim, hence the same SAN directory as the instance it replaces.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { existsSync, mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { AppsV1Api, StorageV1Api, type V1Pod } from "@kubernetes/client-node";
import { Lab } from "../../lab/lab.ts";
import { waitFor } from "../../lab/health.ts";
import { deployLedger, ledgerClaimName, ledgerVolumeName, sanDir, SAN_STORAGE_CLASS } from "../../lab/ledger.ts";

const NS = "default";

describe("ledger workload on a real control plane", () => {
  let lab: Lab;
  before(async () => {
    lab = await Lab.up({ dir: mkdtempSync(join(tmpdir(), "stockade-ledger-")), nodes: 3 });
    await lab.waitForDefaultServiceAccount(NS);
  });
  after(async () => {
    await lab?.down();
  });

  const pods = async () => (await lab.core.listNamespacedPod({ namespace: NS, labelSelector: "app=ledger" })).items;
  const running = (n: number) =>
    waitFor(
      `${n} Running ledger pods`,
      async () => {
        const ps = await pods();
        return ps.length === n && ps.every((p) => p.status?.phase === "Running") ? ps : undefined;
      },
      { timeoutMs: 90_000 },
    );

  test("each ordinal's claim binds to its own SAN volume, the pods run on different nodes with their identity", async () => {
    const san = sanDir(lab.dir);
    // A free volume of the class that fits a ledger claim better than the ledger's own (smaller): the binder
    // would pick it for any claim not pre-bound.
    await lab.core.createPersistentVolume({
      body: {
        metadata: { name: "decoy" },
        spec: {
          capacity: { storage: "16Mi" },
          accessModes: ["ReadWriteOnce"],
          storageClassName: SAN_STORAGE_CLASS,
          hostPath: { path: join(lab.dir, "decoy") },
        },
      },
    });
    const m = await deployLedger(lab.kc, {
      namespace: NS,
      replicas: 2,
      image: "stockade.lab/ledger:test",
      san,
      tokenAnnotation: "stockade.io/token",
    });
    for (let i = 0; i < 2; i++)
      assert.ok(existsSync(join(san, ledgerVolumeName(NS, "ledger", i))), "the SAN directory exists before any node needs it");

    const sc = await lab.kc.makeApiClient(StorageV1Api).readStorageClass({ name: SAN_STORAGE_CLASS });
    assert.equal(sc.volumeBindingMode, "Immediate");
    // A second ledger in the same lab shares the StorageClass.
    await deployLedger(lab.kc, { name: "other", namespace: NS, replicas: 1, image: "stockade.lab/ledger:test", san });

    const ps: V1Pod[] = await running(2);
    for (let i = 0; i < 2; i++) {
      const claim = await waitFor(
        `${ledgerClaimName("ledger", i)} Bound`,
        async () => {
          const c = await lab.core.readNamespacedPersistentVolumeClaim({ namespace: NS, name: ledgerClaimName("ledger", i) });
          return c.status?.phase === "Bound" ? c : undefined;
        },
        { timeoutMs: 30_000 },
      );
      assert.equal(claim.spec?.volumeName, ledgerVolumeName(NS, "ledger", i), `ordinal ${i} bound to its own volume`);
      const pv = await lab.core.readPersistentVolume({ name: ledgerVolumeName(NS, "ledger", i) });
      assert.equal(pv.spec?.hostPath?.path, join(san, ledgerVolumeName(NS, "ledger", i)));
      assert.equal(pv.spec?.claimRef?.uid, claim.metadata?.uid);
      assert.equal(pv.spec?.persistentVolumeReclaimPolicy, "Retain");
    }
    await waitFor(
      "other-0's claim Bound",
      async () =>
        (await lab.core.readNamespacedPersistentVolumeClaim({ namespace: NS, name: ledgerClaimName("other", 0) })).status?.phase ===
        "Bound",
      { timeoutMs: 30_000 },
    );
    assert.equal((await lab.core.readPersistentVolume({ name: "decoy" })).status?.phase, "Available", "no claim took the decoy");
    assert.equal(new Set(ps.map((p) => p.spec?.nodeName)).size, 2, "one ledger pod per node");
    const c = ps[0]!.spec!.containers[0]!;
    assert.equal(c.imagePullPolicy, "Never");
    const env = Object.fromEntries((c.env ?? []).map((e) => [e.name, e.value ?? e.valueFrom?.fieldRef?.fieldPath]));
    assert.deepEqual(env, {
      LEDGER_DIR: "/ledger",
      INTERVAL_MS: "100",
      IDENTITY: "metadata.name",
      POD_UID: "metadata.uid",
      NODE_NAME: "spec.nodeName",
      TOKEN_FILE: "/etc/ledger-token/token",
    });
    assert.equal(m.statefulSet.spec?.podManagementPolicy, "Parallel");
    const sts = await lab.kc.makeApiClient(AppsV1Api).readNamespacedStatefulSet({ namespace: NS, name: "ledger" });
    assert.equal(sts.spec?.template.spec?.terminationGracePeriodSeconds, 2);
  });

  test("a replacement pod of an ordinal uses the same claim, so it writes to the same SAN directory", async () => {
    const old = (await pods()).find((p) => p.metadata?.name === "ledger-0")!;
    await lab.core.deleteNamespacedPod({ namespace: NS, name: "ledger-0", gracePeriodSeconds: 0 });
    const repl = await waitFor(
      "a new ledger-0 Running",
      async () =>
        (await pods()).find(
          (p) => p.metadata?.name === "ledger-0" && p.metadata.uid !== old.metadata?.uid && p.status?.phase === "Running",
        ),
      { timeoutMs: 60_000 },
    );
    const claimOf = (p: V1Pod) => p.spec?.volumes?.find((v) => v.name === "data")?.persistentVolumeClaim?.claimName;
    assert.equal(claimOf(repl), ledgerClaimName("ledger", 0));
    assert.equal(claimOf(repl), claimOf(old));
  });
});
