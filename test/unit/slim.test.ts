// What the pod cache keeps: every field a decision reads, so a slimmed pod decides exactly like the whole one, and
// nothing else (containers are most of a pod and no decision reads them); a cached node without its image list.
import { test } from "node:test";
import assert from "node:assert/strict";
import type { V1Node, V1PersistentVolumeClaim, V1Pod } from "@kubernetes/client-node";
import { Interner, slimNode, slimPod } from "../../src/kube/slim.ts";
import { isGuarded, isFinished } from "../../src/decide/guarded-pods.ts";
import { podWaitSeconds } from "../../src/decide/forgiveness.ts";
import { claimNames } from "../../src/decide/claim-lock.ts";
import { podPriority } from "../../src/decide/priority.ts";
import { nodeDownChange } from "../../src/decide/node-down.ts";

const full: V1Pod = {
  apiVersion: "v1",
  kind: "Pod",
  metadata: {
    name: "db-0",
    namespace: "prod",
    uid: "u1",
    resourceVersion: "42",
    labels: { app: "db" },
    annotations: { "stockade.io/claim-token": "7" },
    ownerReferences: [{ apiVersion: "apps/v1", kind: "StatefulSet", name: "db", uid: "s1", controller: true }],
    deletionTimestamp: new Date("2026-11-23T10:00:00Z"),
  },
  spec: {
    nodeName: "node-1",
    priority: 1000,
    tolerations: [{ key: "node.kubernetes.io/unreachable", operator: "Exists", effect: "NoExecute", tolerationSeconds: 30 }],
    schedulingGates: [{ name: "stockade.io/claim-lock" }],
    containers: [{ name: "db", image: "postgres:17", env: [{ name: "PGDATA", value: "/data" }], command: ["postgres"] }],
    volumes: [
      { name: "data", persistentVolumeClaim: { claimName: "data-db-0" } },
      { name: "scratch", ephemeral: { volumeClaimTemplate: { spec: { accessModes: ["ReadWriteOnce"], resources: {} } } } },
      { name: "config", configMap: { name: "db-config" } },
      { name: "token", projected: { sources: [] } },
    ],
  },
  status: {
    phase: "Running",
    conditions: [
      { type: "PodScheduled", status: "True" },
      { type: "NodeDown", status: "True", reason: "NodePartitioned", message: "m" },
      { type: "Ready", status: "True", lastTransitionTime: new Date("2026-11-23T09:00:00Z") },
    ],
    containerStatuses: [{ name: "db", image: "postgres:17", imageID: "x", ready: true, restartCount: 0 }],
    podIP: "10.0.0.1",
  },
};

test("a slimmed pod keeps what the decisions read and decides like the whole pod", () => {
  const slim = slimPod(structuredClone(full));
  const pvcs = new Map<string, V1PersistentVolumeClaim>([
    ["prod/data-db-0", { metadata: { name: "data-db-0", namespace: "prod" }, spec: { accessModes: ["ReadWriteOnce"] } }],
  ]);
  for (const policy of [
    undefined,
    { statefulSets: false, readWriteOnceVolumes: true },
    { statefulSets: false, readWriteOnceVolumes: false },
  ])
    assert.deepEqual(isGuarded(slim, policy, pvcs), isGuarded(full, policy, pvcs));
  const detection = { heartbeatTimeoutSeconds: 40, fenceAfterSeconds: 10, honorPodTolerations: true };
  assert.equal(podWaitSeconds(slim, detection), podWaitSeconds(full, detection));
  assert.deepEqual(claimNames(slim), claimNames(full));
  assert.equal(podPriority(slim), podPriority(full));
  assert.equal(isFinished(slim), isFinished(full));
  assert.deepEqual(slim.metadata, full.metadata);
  for (const want of [
    null,
    { status: "True" as const, reason: "NodePartitioned", message: "m" },
    { status: "True" as const, reason: "NodeFenced", message: "x" },
  ])
    assert.deepEqual(nodeDownChange(slim, want), nodeDownChange(full, want));
  assert.deepEqual(slim.status, { phase: "Running", conditions: [full.status!.conditions![1]] }, "of the conditions, only NodeDown");
  assert.deepEqual(slim.spec?.schedulingGates, full.spec!.schedulingGates);
  assert.deepEqual(
    slim.spec?.volumes?.map((v) => v.name),
    ["data", "scratch"],
  );
  assert.equal(slim.spec?.containers, undefined, "containers are not kept");
});

test("pods carrying equal tolerations, labels and owners share one frozen copy; a change to it throws, not spreads", () => {
  const intern = new Interner();
  const a = slimPod(JSON.parse(JSON.stringify(full)) as V1Pod, intern);
  const b = slimPod(JSON.parse(JSON.stringify({ ...full, metadata: { ...full.metadata, name: "db-1", uid: "u2" } })) as V1Pod, intern);
  assert.equal(a.spec?.tolerations, b.spec?.tolerations, "one tolerations array");
  assert.equal(a.metadata?.labels, b.metadata?.labels, "one labels object");
  assert.equal(a.metadata?.ownerReferences, b.metadata?.ownerReferences, "one owner list");
  assert.deepEqual(b.metadata?.labels, { app: "db" });
  assert.throws(() => {
    a.metadata!.labels!.app = "other";
  }, TypeError);
  assert.throws(() => a.spec!.tolerations!.push({ key: "x" }), TypeError);
  assert.throws(() => {
    a.spec!.tolerations![0]!.tolerationSeconds = 1;
  }, TypeError);
  assert.equal(b.metadata?.labels?.app, "db");
  // Different values are not shared.
  const c = slimPod(JSON.parse(JSON.stringify({ ...full, metadata: { ...full.metadata, labels: { app: "web" } } })) as V1Pod, intern);
  assert.notEqual(c.metadata?.labels, a.metadata?.labels);
  assert.deepEqual(c.metadata?.labels, { app: "web" });
  // No property appears that the pod did not have (an absent generateName stays absent).
  assert.equal(Object.hasOwn(a.metadata!, "generateName"), false);
});

test("the interner is bounded: past its size it starts again, and values shared before stay intact", () => {
  const intern = new Interner(2);
  const x = intern.value({ k: "1" });
  intern.value({ k: "2" });
  intern.value({ k: "3" }); // full: cleared, then kept
  assert.deepEqual(x, { k: "1" });
  assert.notEqual(intern.value({ k: "1" }), x, "forgotten after the reset, kept anew");
  assert.equal(intern.value({ k: "3" }), intern.value({ k: "3" }));
});

test("a cached node drops only the kubelet's image list: targets, evidence and health keep every field they read", () => {
  const node: V1Node = {
    metadata: { name: "node-1", labels: { "topology.kubernetes.io/zone": "a" }, annotations: { a: "b" } },
    spec: { providerID: "aws:///eu-west-1a/i-0123", taints: [{ key: "k", effect: "NoSchedule" }] },
    status: {
      addresses: [{ type: "InternalIP", address: "10.0.0.1" }],
      conditions: [{ type: "Ready", status: "Unknown", reason: "NodeStatusUnknown" }],
      nodeInfo: { bootID: "b1" } as never,
      images: Array.from({ length: 50 }, (_, i) => ({ names: [`registry.example/app-${i}@sha256:${"0".repeat(64)}`], sizeBytes: 1e8 })),
      volumesAttached: [{ name: "kubernetes.io/csi/x^vol-1", devicePath: "" }],
    },
  };
  const statusWithout = structuredClone(node.status!);
  delete statusWithout.images;
  const slim = slimNode(structuredClone(node));
  assert.equal(slim.status?.images, undefined);
  assert.deepEqual(JSON.parse(JSON.stringify(slim)), JSON.parse(JSON.stringify({ ...node, status: statusWithout })));
});
