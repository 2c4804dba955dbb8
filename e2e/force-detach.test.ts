// Cluster hardening (issue 10, item 6): kube-controller-manager's attach/detach controller force-detaches a
// volume from a node that has been unhealthy for 6 minutes (maxWaitForUnmountDuration, hard-coded), whatever
// any lock says. Two labs side by side, the same story in each: a pod on node-1 holds a CSI volume attached
// by the real attach/detach controller; node-1 goes silent with the volume mounted; a person force-deletes the
// pod; its successor on node-2 needs the volume.
//   - Kubernetes' default: after 6 minutes the controller detaches the volume from the silent node and
//     attaches it to node-2, though nothing proved node-1 stopped writing. That is the two writers.
//   - With --disable-force-detach-on-timeout (the lab's default, as docs/volumes.md asks): node-1's
//     VolumeAttachment stays past the 6 minutes, until Stockade has powered node-1 off and released it.
// Test doubles, since kwok nodes run no CSI driver: the driver's external-attacher (marks each
// VolumeAttachment attached, as the sidecar does once ControllerPublishVolume answers) and the two things a
// kubelet reports about volumes (the controller-managed-attach-detach annotation at registration, and
// status.volumesInUse once mounted).
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { StorageV1Api, type V1VolumeAttachment } from "@kubernetes/client-node";
import { Bed, NS } from "../lab/bed.ts";
import { waitFor } from "../lab/health.ts";

const DRIVER = "attach.lab.stockade.io";
const HANDLE = "lun-7";
const PV = "pv-lun-7";
const CLAIM = "lun-7";
/** The attach/detach controller's name for the volume: what a kubelet puts in status.volumesInUse. */
const UNIQUE_NAME = `kubernetes.io/csi/${DRIVER}^${HANDLE}`;
/** maxWaitForUnmountDuration in kube-controller-manager (pkg/controller/volume/attachdetach). */
const FORCE_DETACH_AFTER_S = 360;

class Story {
  readonly storage: InstanceType<typeof StorageV1Api>;
  private stopAttacher = new AbortController();
  deletedAt = 0;

  readonly bed: Bed;

  constructor(bed: Bed) {
    this.bed = bed;
    this.storage = bed.lab.kc.makeApiClient(StorageV1Api);
  }

  /** Volume attachments of the lab's volume, by node. */
  async attachments(): Promise<Map<string, V1VolumeAttachment>> {
    const all = (await this.storage.listVolumeAttachment()).items.filter((v) => v.spec.source.persistentVolumeName === PV);
    return new Map(all.map((v) => [v.spec.nodeName, v]));
  }

  /** The external-attacher double: every attachment of the driver is reported attached. */
  private async attach(): Promise<void> {
    while (!this.stopAttacher.signal.aborted) {
      for (const va of (await this.storage.listVolumeAttachment().catch(() => ({ items: [] }))).items) {
        if (va.spec.attacher !== DRIVER || va.status?.attached || va.metadata?.deletionTimestamp) continue;
        await this.bed
          .kubectl(
            "patch",
            "volumeattachment",
            va.metadata!.name!,
            "--subresource=status",
            "--type=merge",
            "-p",
            '{"status":{"attached":true}}',
          )
          .catch(() => undefined);
      }
      await sleep(500).catch(() => undefined);
    }
  }

  pod(name: string, node: string) {
    return this.bed.lab.core.createNamespacedPod({
      namespace: NS,
      body: {
        metadata: { name, labels: { app: "lun" } },
        spec: {
          nodeName: node,
          terminationGracePeriodSeconds: 30,
          containers: [{ name: "writer", image: "stockade.lab/writer:1", volumeMounts: [{ name: "data", mountPath: "/data" }] }],
          volumes: [{ name: "data", persistentVolumeClaim: { claimName: CLAIM } }],
        },
      },
    });
  }

  /** Up to the force delete: returns node-1's attachment. */
  async begin(): Promise<V1VolumeAttachment> {
    const { bed } = this;
    void this.attach();
    for (const node of bed.lab.nodes())
      await bed.kubectl("annotate", "node", node, "volumes.kubernetes.io/controller-managed-attach-detach=true", "--overwrite");
    await this.storage.createCSIDriver({ body: { metadata: { name: DRIVER }, spec: { attachRequired: true, podInfoOnMount: false } } });
    await bed.lab.core.createPersistentVolume({
      body: {
        metadata: { name: PV },
        spec: {
          capacity: { storage: "1Gi" },
          accessModes: ["ReadWriteOnce"],
          persistentVolumeReclaimPolicy: "Retain",
          storageClassName: "",
          claimRef: { namespace: NS, name: CLAIM },
          csi: { driver: DRIVER, volumeHandle: HANDLE },
        },
      },
    });
    await bed.lab.core.createNamespacedPersistentVolumeClaim({
      namespace: NS,
      body: {
        metadata: { name: CLAIM },
        spec: { accessModes: ["ReadWriteOnce"], storageClassName: "", volumeName: PV, resources: { requests: { storage: "1Gi" } } },
      },
    });
    await this.pod("writer-1", "node-1");
    const va = await waitFor("the controller to attach the volume to node-1", async () => {
      const v = (await this.attachments()).get("node-1");
      return v?.status?.attached ? v : undefined;
    });
    await waitFor("node-1 to report the volume attached", async () =>
      (await bed.lab.node("node-1")).status?.volumesAttached?.some((v) => v.name === UNIQUE_NAME) ? true : undefined,
    );
    // node-1 goes silent with the volume mounted: its last status says the volume is in use.
    await bed.lab.partition("node-1");
    await bed.kubectl(
      "patch",
      "node",
      "node-1",
      "--subresource=status",
      "--type=merge",
      "-p",
      JSON.stringify({ status: { volumesInUse: [UNIQUE_NAME] } }),
    );
    await bed.lab.waitForNodeReadyStatus("node-1", "Unknown");
    // A person "unsticks" the Terminating pod, and its successor is started on node-2.
    // Taken before the call: the controller's wait starts when it sees the deletion, never before the request.
    this.deletedAt = Date.now();
    await bed.kubectl("delete", "pod", "writer-1", "-n", NS, "--grace-period=0", "--force");
    await this.pod("writer-2", "node-2");
    await waitFor(
      "the controller to refuse node-2 the volume (Multi-Attach)",
      async () =>
        (
          await bed.lab.core.listNamespacedEvent({ namespace: NS, fieldSelector: "involvedObject.name=writer-2,reason=FailedAttachVolume" })
        ).items.find((e) => /Multi-Attach/.test(e.message ?? "")),
      { timeoutMs: 60_000 },
    );
    return va;
  }

  kcmLog(): string {
    return readFileSync(join(this.bed.lab.dir, "logs", "kube-controller-manager.log"), "utf8");
  }

  stop(): void {
    this.stopAttacher.abort();
  }
}

describe("e2e: force detach after 6 minutes, with and without --disable-force-detach-on-timeout", { concurrency: 2 }, () => {
  let hardened: Story;
  let stock: Story;
  before(async () => {
    const [a, b] = await Promise.all([
      Bed.up({ nodes: 2, name: "detach-hardened", runtime: "kwok" }),
      Bed.up({ nodes: 2, name: "detach-stock", runtime: "kwok", timings: { forceDetachOnTimeout: true } }),
    ]);
    hardened = new Story(a);
    stock = new Story(b);
    await hardened.bed.policy("default", {});
  });
  after(async () => {
    hardened?.stop();
    stock?.stop();
    await Promise.all([hardened?.bed.down(), stock?.bed.down()]);
  });

  test("Kubernetes' default: 6 minutes after the pod was deleted, the volume leaves the silent node for node-2 (the failure the flag prevents)", async () => {
    const old = await stock.begin();
    await waitFor(
      "the controller to force-detach the volume from node-1",
      async () => ((await stock.attachments()).has("node-1") ? undefined : true),
      {
        timeoutMs: (FORCE_DETACH_AFTER_S + 120) * 1000,
        intervalMs: 1000,
      },
    );
    const after = (Date.now() - stock.deletedAt) / 1000;
    assert.ok(after >= FORCE_DETACH_AFTER_S, `detached after ${after.toFixed(0)} s: the timeout, not anything else`);
    const next = await waitFor(
      "the volume to be attached to node-2",
      async () => (await stock.attachments()).get("node-2")?.status?.attached || undefined,
      {
        timeoutMs: 120_000,
      },
    );
    assert.ok(next);
    assert.equal(stock.bed.lab.machine("node-1").power, "on", "node-1 was never powered off: it may still be writing");
    assert.match(stock.kcmLog(), /maxWaitForUnmountDuration expired, force detaching/);
    assert.notEqual((await stock.attachments()).get("node-1")?.metadata?.uid, old.metadata?.uid);
    console.log(`stock controller-manager: force-detached from the silent node ${after.toFixed(0)} s after the pod was deleted`);
  });

  test("with --disable-force-detach-on-timeout: node-1's VolumeAttachment stays past the 6 minutes, until Stockade fences node-1 and releases it", async () => {
    const va = await hardened.begin();
    const until = hardened.deletedAt + (FORCE_DETACH_AFTER_S + 60) * 1000;
    while (Date.now() < until) {
      const now = await hardened.attachments();
      assert.equal(now.get("node-1")?.metadata?.uid, va.metadata?.uid, "node-1's attachment stays");
      assert.ok(!now.get("node-2")?.status?.attached, "the volume is never attached to node-2 meanwhile");
      await sleep(5000);
    }
    assert.doesNotMatch(hardened.kcmLog(), /force detaching/);
    const { bed } = hardened;
    await bed.startOperator();
    await bed.create("nodefences", { metadata: { name: "node-1" }, spec: { nodeName: "node-1", reason: "silent with lun-7 attached" } });
    const f = await bed.waitForFence("node-1", (x) => x.status?.phase === "Released", "Released");
    assert.equal(f.status?.evidence?.method, "PowerOffConfirmed");
    assert.equal(bed.lab.machine("node-1").power, "off");
    assert.deepEqual(
      f.status?.releases?.filter((r) => r.kind === "VolumeAttachment").map((r) => r.uid),
      [va.metadata?.uid],
    );
    assert.equal((await hardened.attachments()).get("node-1"), undefined);
    await waitFor(
      "the volume to be attached to node-2 once node-1 is off",
      async () => (await hardened.attachments()).get("node-2")?.status?.attached || undefined,
      {
        timeoutMs: 150_000,
      },
    );
  });
});
