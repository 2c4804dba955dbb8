// What the pod cache keeps: every field a decision reads, so a slimmed pod decides exactly like the whole one, and
// nothing else (containers are most of a pod and no decision reads them); a cached node without its image list.
import { test } from "node:test";
import assert from "node:assert/strict";
import { KubeConfig, type V1Node, type V1PersistentVolumeClaim, type V1Pod } from "@kubernetes/client-node";
import { Interner, slimNode, slimNodeWriters, slimPod } from "../../src/kube/slim.ts";
import { conditionWriters } from "../../src/decide/condition-writers.ts";
import { Informer } from "../../src/runtime/informer.ts";
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

// managedFields of a Node as the apiserver returns them: the kubelet's status updates, node-problem-detector's,
// kube-controller-manager's and a label set with kubectl.
const managedFields = () => [
  {
    manager: "kubelet",
    operation: "Update",
    apiVersion: "v1",
    time: new Date("2026-11-23T10:00:00Z"),
    fieldsType: "FieldsV1",
    fieldsV1: { "f:metadata": { "f:annotations": { ".": {}, "f:node.alpha.kubernetes.io/ttl": {} } } },
  },
  {
    manager: "kubelet",
    operation: "Update",
    subresource: "status",
    apiVersion: "v1",
    time: new Date("2026-11-23T10:05:00Z"),
    fieldsType: "FieldsV1",
    fieldsV1: {
      "f:status": {
        "f:conditions": {
          'k:{"type":"DiskPressure"}': { "f:lastHeartbeatTime": {} },
          'k:{"type":"MemoryPressure"}': { "f:lastHeartbeatTime": {} },
          'k:{"type":"Ready"}': { "f:lastHeartbeatTime": {}, "f:lastTransitionTime": {}, "f:message": {}, "f:reason": {}, "f:status": {} },
        },
        "f:images": {},
        "f:nodeInfo": { "f:bootID": {} },
      },
    },
  },
  {
    manager: "node-problem-detector",
    operation: "Update",
    subresource: "status",
    apiVersion: "v1",
    time: new Date("2026-11-23T10:04:00Z"),
    fieldsType: "FieldsV1",
    fieldsV1: {
      "f:status": {
        "f:conditions": {
          'k:{"type":"KernelDeadlock"}': {
            ".": {},
            "f:lastHeartbeatTime": {},
            "f:lastTransitionTime": {},
            "f:message": {},
            "f:reason": {},
            "f:status": {},
            "f:type": {},
          },
        },
      },
    },
  },
  {
    manager: "kube-controller-manager",
    operation: "Update",
    apiVersion: "v1",
    time: new Date("2026-11-23T09:00:00Z"),
    fieldsType: "FieldsV1",
    fieldsV1: { "f:spec": { "f:podCIDR": {}, "f:podCIDRs": { ".": {}, 'v:"10.244.1.0/24"': {} } } },
  },
  {
    manager: "kubectl-label",
    operation: "Update",
    apiVersion: "v1",
    time: new Date("2026-11-23T09:30:00Z"),
    fieldsType: "FieldsV1",
    fieldsV1: { "f:metadata": { "f:labels": { "f:role": {} } } },
  },
];

test("a cached node keeps, of managedFields, who owns each condition's status (no times), read like the whole (issue 41 item 4)", () => {
  const intern = new Interner();
  const whole = { metadata: { name: "node-1", managedFields: managedFields() } } as V1Node;
  const kept = slimNodeWriters(managedFields(), intern);
  assert.deepEqual(kept, [
    {
      manager: "kubelet",
      operation: "Update",
      subresource: "status",
      fieldsType: "FieldsV1",
      fieldsV1: { "f:status": { "f:conditions": { 'k:{"type":"Ready"}': { "f:status": {} } } } },
    },
    {
      manager: "node-problem-detector",
      operation: "Update",
      subresource: "status",
      fieldsType: "FieldsV1",
      fieldsV1: { "f:status": { "f:conditions": { 'k:{"type":"KernelDeadlock"}': { "f:status": {} } } } },
    },
  ]);
  const cached = { metadata: { name: "node-1", managedFields: kept } } as V1Node;
  for (const type of ["Ready", "KernelDeadlock", "DiskPressure", "Other"])
    assert.deepEqual(conditionWriters(cached, type), conditionWriters(whole, type), type);
  assert.deepEqual(conditionWriters(whole, "KernelDeadlock"), ["node-problem-detector"]);
  assert.deepEqual(conditionWriters(whole, "DiskPressure"), [], "a heartbeat alone is not the status");
  // The next heartbeat (only times change) keeps the same shared value: no change for the cache to see.
  const later = managedFields().map((e) => ({ ...e, time: new Date("2026-11-23T10:06:00Z") }));
  assert.equal(slimNodeWriters(later, intern), kept);
  assert.equal(slimNodeWriters([managedFields()[0]!], intern), undefined);
  // An entry in a format that cannot be read is kept (it may own any condition's status).
  const unknown = slimNodeWriters([{ manager: "future", operation: "Update", fieldsType: "FieldsV2", time: new Date() }], intern);
  assert.deepEqual(conditionWriters({ metadata: { managedFields: unknown } }, "Ready"), ["future"]);
});

test("the Node informer keeps condition writers; other informers keep no managedFields", () => {
  const make = (o: Partial<ConstructorParameters<typeof Informer<V1Node>>[0]>) =>
    new Informer<V1Node>({ kc: new KubeConfig(), path: "/api/v1/nodes", list: () => Promise.reject(new Error("unused")), ...o });
  const keep = (inf: Informer<V1Node>) =>
    (inf as unknown as { keep(o: V1Node): V1Node }).keep({ metadata: { name: "node-1", managedFields: managedFields() } });
  assert.equal(keep(make({ transform: slimNode })).metadata?.managedFields, undefined);
  const nodes = keep(make({ transform: slimNode, managedFields: slimNodeWriters }));
  assert.deepEqual(conditionWriters(nodes, "KernelDeadlock"), ["node-problem-detector"]);
  assert.deepEqual(conditionWriters(nodes, "Ready"), ["kubelet"]);
});
