// What the operator's caches keep of an object. At 150,000 pods the cache is most of the operator's memory, and a
// pod's containers (images, commands, env, probes, mounts) are most of a pod, yet no decision reads them. A cached
// pod keeps its whole metadata and only the spec and status fields that the decisions (src/decide) and the
// controllers read; a controller that needs more reads the pod from the apiserver. No write ever sends a cached pod
// back whole (status and gates change by patch), so nothing dropped here can be written away.
import type { V1Pod, V1PodSpec } from "@kubernetes/client-node";
import { NODE_DOWN } from "../decide/node-down.ts";

export function slimPod(p: V1Pod): V1Pod {
  const spec = p.spec;
  const status = p.status;
  return {
    apiVersion: p.apiVersion,
    kind: p.kind,
    metadata: p.metadata,
    ...(spec && {
      spec: {
        nodeName: spec.nodeName,
        priority: spec.priority,
        tolerations: spec.tolerations,
        schedulingGates: spec.schedulingGates,
        // Claims decide whether a pod is guarded and which locks it holds; other volumes (config, secrets,
        // projected tokens) say nothing about that.
        volumes: spec.volumes?.filter((v) => v.persistentVolumeClaim || v.ephemeral),
      } as V1PodSpec,
    }),
    // Of the conditions, decisions read only their own NodeDown; a running pod's five others (each with its times)
    // were almost half of what a slim pod kept (1,340 instead of 2,400 bytes a pod, 30,000 pods).
    ...(status && { status: { phase: status.phase, conditions: status.conditions?.filter((c) => c.type === NODE_DOWN) } }),
  };
}
