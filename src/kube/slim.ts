// What the operator's caches keep of an object. At 150,000 pods the cache is most of the operator's memory, and a
// pod's containers (images, commands, env, probes, mounts) are most of a pod, yet no decision reads them. A cached
// pod keeps its whole metadata and only the spec and status fields that the decisions (src/decide) and the
// controllers read; a controller that needs more reads the pod from the apiserver. No write ever sends a cached pod
// back whole (status and gates change by patch), so nothing dropped here can be written away.
import type { V1ManagedFieldsEntry, V1Node, V1Pod, V1PodSpec } from "@kubernetes/client-node";
import { conditionOwnership } from "../decide/condition-writers.ts";
import { NODE_DOWN } from "../decide/node-down.ts";

/**
 * Shares equal values between cached objects: most pods of a cluster carry the same tolerations (the two that
 * admission injects), the labels and owner of their ReplicaSet, and one of a few thousand node names, and each parsed
 * copy cost its own objects and strings (1,500 bytes a slim pod, 840 shared so; 95 MiB at 150,000 pods). A shared
 * value is frozen: code that tried to change one cached pod's part would otherwise change every pod sharing it, and
 * instead throws. Bounded: when full it starts again (values already shared stay shared).
 */
export class Interner {
  private readonly values = new Map<string, unknown>();
  private readonly strings = new Map<string, string>();
  private readonly max: number;

  constructor(max = 100_000) {
    this.max = max;
  }

  value<T>(v: T): T {
    if (v === undefined || v === null) return v;
    const key = JSON.stringify(v);
    const seen = this.values.get(key);
    if (seen !== undefined) return seen as T;
    if (this.values.size >= this.max) this.values.clear();
    this.values.set(key, deepFreeze(v));
    return v;
  }

  string<T extends string | undefined>(s: T): T {
    if (s === undefined) return s;
    const seen = this.strings.get(s);
    if (seen !== undefined) return seen as T;
    if (this.strings.size >= this.max) this.strings.clear();
    this.strings.set(s, s);
    return s;
  }
}

function deepFreeze<T>(v: T): T {
  if (v && typeof v === "object" && !Object.isFrozen(v)) {
    Object.freeze(v);
    for (const x of Object.values(v)) deepFreeze(x);
  }
  return v;
}

const shared = new Interner();

export function slimPod(p: V1Pod, intern: Interner = shared): V1Pod {
  const spec = p.spec;
  const status = p.status;
  const meta = p.metadata;
  if (meta) {
    // Replaced in place (the cache owns the object): deleting or adding properties would make V8 store it slower.
    if (meta.namespace) meta.namespace = intern.string(meta.namespace);
    if (meta.generateName) meta.generateName = intern.string(meta.generateName);
    if (typeof meta.creationTimestamp === "string") meta.creationTimestamp = intern.string(meta.creationTimestamp) as never;
    if (meta.labels) meta.labels = intern.value(meta.labels);
    if (meta.ownerReferences) meta.ownerReferences = intern.value(meta.ownerReferences);
  }
  return {
    apiVersion: p.apiVersion,
    kind: p.kind,
    metadata: meta,
    ...(spec && {
      spec: {
        nodeName: intern.string(spec.nodeName),
        priority: spec.priority,
        tolerations: intern.value(spec.tolerations),
        schedulingGates: spec.schedulingGates,
        // Claims decide whether a pod is guarded and which locks it holds; other volumes (config, secrets,
        // projected tokens) say nothing about that.
        volumes: spec.volumes?.filter((v) => v.persistentVolumeClaim || v.ephemeral),
      } as V1PodSpec,
    }),
    // Of the conditions, decisions read only their own NodeDown; a running pod's five others (each with its times)
    // were almost half of what a slim pod kept (1,340 instead of 2,400 bytes a pod, 30,000 pods).
    ...(status && { status: { phase: intern.string(status.phase), conditions: status.conditions?.filter((c) => c.type === NODE_DOWN) } }),
  };
}

/**
 * A cached node without `status.images`: a real kubelet reports up to 50 images, each with its names and size (10-20 KB
 * a node, 75 MiB at 5,000 nodes), and no decision reads them. Everything else stays: addresses, providerID, labels and
 * the boot ID feed fence targets and evidence. Nodes are only ever patched, never written back whole.
 */
export function slimNode(n: V1Node): V1Node {
  if (n.status?.images) n.status.images = undefined;
  return n;
}

/**
 * What a cached Node keeps of its managedFields: who owns each condition's status, which condition triggers must know
 * (decide/condition-writers.ts); nothing else. Shared: most nodes' owners are the same few entries (their kubelet's,
 * node-problem-detector's).
 */
export function slimNodeWriters(entries: V1ManagedFieldsEntry[], intern: Interner = shared): V1ManagedFieldsEntry[] | undefined {
  return intern.value(conditionOwnership(entries));
}
