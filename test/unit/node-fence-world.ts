// A scripted API for the NodeFence controller's unit tests: one NodeFence, the partitioned node-1 and its Lease, the
// given pods; every call the controller makes is logged in order (`calls`), reads and writes included.
import type { V1Lease, V1Node, V1Pod, V1Taint } from "@kubernetes/client-node";
import { ApiException } from "@kubernetes/client-node";
import pino from "pino";
import type { FenceAgent, FenceRecord, FencingPolicy, NodeFence, NodeFenceStatus } from "../../src/api/v1alpha1.ts";
import { FenceHistory } from "../../src/controllers/fence-history.ts";
import { NodeFenceController } from "../../src/controllers/node-fence.ts";
import { FINALIZER } from "../../src/decide/fence-machine.ts";
import type { Kube } from "../../src/kube/api.ts";
import type { Caches } from "../../src/kube/caches.ts";
import type { EventRecorder } from "../../src/runtime/events.ts";
import type { Leadership } from "../../src/runtime/leader.ts";
import type { Metrics } from "../../src/metrics.ts";
import { WatchdogObserver } from "../../src/kube/watchdog-observer.ts";
import { T0, agent, at, lease, partitionedNode, policy, releasing } from "./decide-fixtures.ts";

export function releasingFence(): NodeFence {
  return {
    apiVersion: "stockade.io/v1alpha1",
    kind: "NodeFence",
    metadata: { name: "node-1", uid: "fence-uid", generation: 1, finalizers: [FINALIZER], resourceVersion: "1" },
    spec: { nodeName: "node-1", origin: "Automatic" },
    status: releasing(),
  };
}

export interface WorldOptions {
  /** Pods whose force delete answers 500. */
  fail?: Set<string>;
  leading?: () => boolean;
  metrics?: Metrics;
  initial?: NodeFence;
  /** Milliseconds every status write takes. */
  writeMs?: number;
  viewReuseMs?: number;
  /** The FenceAgents in the cache (default: ipmi). */
  agents?: FenceAgent[];
  /** Keep fence history (FenceRecords, logged as "history <verb>"); `fail`: every record write answers 500 while true. */
  history?: { fail?: () => boolean };
  /** The FencingPolicies in the cache (default: "default", an ipmi level). */
  policies?: FencingPolicy[];
  /** The node agent record a fresh read returns (logged "read agent record"); and the observer of the records. */
  agentRecord?: () => V1Lease | undefined;
  watchdogObserver?: WatchdogObserver;
  /**
   * The pods of the node agent's namespace a fresh read finds (logged "read agent pod <name>"); default: the agent's
   * pod on node-1, stockade-node-agent-node-1 (the holder decide-fixtures' agentRecord names), of its DaemonSet.
   */
  agentPods?: () => V1Pod[];
  /** What a fresh read of the record policy finds wrong (logged "read record policy"); default [] (in force). */
  recordPolicy?: () => string[];
  /** How long this process has seen node-1's kubelet Lease unrenewed (default 0). */
  leaseSilentForMs?: () => number;
}

/** A pod of the node agent's DaemonSet (or the controller given) bound to `node`. */
export function agentPod(
  name: string,
  node: string,
  controller: { kind: string; name: string } = { kind: "DaemonSet", name: "stockade-node-agent" },
): V1Pod {
  return {
    metadata: {
      name,
      namespace: "stockade-node-agent",
      uid: `uid-${name}`,
      ownerReferences: [{ apiVersion: "apps/v1", kind: controller.kind, name: controller.name, uid: "uid-owner", controller: true }],
    },
    spec: { nodeName: node, containers: [{ name: "node-agent", image: "stockade" }] },
  };
}

export function world(pods: V1Pod[], o: WorldOptions = {}) {
  const fail = o.fail ?? new Set<string>();
  const leading = o.leading ?? (() => true);
  let fence = o.initial ?? releasingFence();
  let node: V1Node = partitionedNode();
  const live = new Map(pods.map((p) => [p.metadata?.uid ?? "", p]));
  const calls: string[] = [];
  // Not synced unless given: no watchdog evidence.
  const watchdogObserver = o.watchdogObserver ?? new WatchdogObserver();
  const statusWrites: NodeFenceStatus[] = [];
  let inFlight = 0;
  let maxInFlight = 0;
  const stored = (obj: NodeFence): NodeFence => ({
    ...structuredClone(obj),
    metadata: { ...obj.metadata, resourceVersion: String(Number(obj.metadata?.resourceVersion) + 1) },
  });
  const kube = {
    getNodeFence: async () => structuredClone(fence),
    readNode: async () => {
      calls.push("read node");
      return structuredClone(node);
    },
    readLease: async () => {
      calls.push("read lease");
      return lease("node-1", T0);
    },
    readAgentRecord: async () => {
      calls.push("read agent record");
      return structuredClone(o.agentRecord?.());
    },
    readAgentPod: async (name: string) => {
      calls.push(`read agent pod ${name}`);
      const pods = o.agentPods?.() ?? [agentPod("stockade-node-agent-node-1", "node-1")];
      return structuredClone(pods.find((p) => p.metadata?.name === name));
    },
    forceDeletePod: async (p: V1Pod) => {
      calls.push(`delete ${p.metadata?.name}`);
      inFlight++;
      maxInFlight = Math.max(maxInFlight, inFlight);
      await new Promise((r) => setTimeout(r, 20));
      inFlight--;
      if (fail.has(p.metadata?.name ?? "")) throw new ApiException(500, "Internal Server Error", {}, {});
      live.delete(p.metadata?.uid ?? "");
      return "deleted" as const;
    },
    replaceStatus: async (_plural: string, obj: NodeFence) => {
      calls.push(`status ${obj.status?.phase}`);
      if (o.writeMs) await new Promise((r) => setTimeout(r, o.writeMs));
      statusWrites.push(structuredClone(obj.status ?? {}));
      fence = stored(obj);
      return structuredClone(fence);
    },
    patchNodeFenceMetadata: async (obj: NodeFence, patch: { finalizers?: string[] }) => {
      calls.push("metadata");
      fence = stored({ ...obj, metadata: { ...obj.metadata, ...patch } });
      return structuredClone(fence);
    },
    setTaints: async (_n: V1Node, taints: V1Taint[]) => {
      calls.push("taint");
      node = { ...node, spec: { ...node.spec, taints } };
      return structuredClone(node);
    },
    setNodeCondition: async () => {
      calls.push("node condition");
    },
    readSecret: async () => {
      calls.push("read secret");
      return { password: "x" };
    },
  };
  const list = <T>(xs: () => T[]) => ({
    list: xs,
    get: (n: string) => xs().find((x) => (x as { metadata?: { name?: string } }).metadata?.name === n),
  });
  const caches = {
    policies: list(() => o.policies ?? [policy("default")]),
    watchAgentRecords: () => watchdogObserver,
    agents: list(() => o.agents ?? [agent("ipmi")]),
    pods: list(() => [...live.values()]),
    pvcs: list(() => []),
    podsOn: (n: string) => [...live.values()].filter((p) => p.spec?.nodeName === n),
    // This process saw no Lease go unrenewed for long: only Ready=Unknown makes the node partitioned.
    // Default: no Lease observation, only the node controller's Ready=Unknown counts.
    leaseSilentForMs: o.leaseSilentForMs ?? (() => Infinity),
    pvcsByKey: () => new Map(),
    volumeAttachments: list(() => []),
    nodes: list(() => [node]),
  };
  const recorded: { kind: string; type: string; reason: string; message: string }[] = [];
  const events = {
    record: async (ref: { kind: string }, type: string, reason: string, message: string) => {
      recorded.push({ kind: ref.kind, type, reason, message });
    },
  };
  const leadership = {
    epoch: 1,
    assertLeading: (what: string) => {
      calls.push(`assert ${what}`);
      if (!leading()) throw new Error(`not leading: ${what}`);
    },
  };
  const records = new Map<string, FenceRecord>();
  const failing = () => {
    if (o.history?.fail?.()) throw new ApiException(500, "Internal Server Error", {}, {});
  };
  const recordKube = {
    createFenceRecord: async (r: FenceRecord) => {
      calls.push("history create");
      failing();
      if (records.has(r.metadata?.name ?? "")) throw new ApiException(409, "AlreadyExists", {}, {});
      records.set(r.metadata?.name ?? "", structuredClone(r));
      return r;
    },
    replaceFenceRecord: async (r: FenceRecord) => {
      calls.push("history replace");
      failing();
      records.set(r.metadata?.name ?? "", structuredClone(r));
      return r;
    },
    listFenceRecords: async () => {
      calls.push("history list");
      return [...records.values()];
    },
    deleteFenceRecord: async () => true,
  };
  const history = o.history ? new FenceHistory({ kube: recordKube, log: pino({ level: "silent" }), clock: () => at(1000) }) : undefined;
  const controller = new NodeFenceController({
    kube: kube as unknown as Kube,
    caches: caches as unknown as Caches,
    events: events as unknown as EventRecorder,
    log: pino({ level: "silent" }),
    clock: () => at(1000),
    leadership: leadership as unknown as Leadership,
    metrics: o.metrics,
    viewReuseMs: o.viewReuseMs,
    history,
    recordPolicy: {
      problems: async () => {
        calls.push("read record policy");
        return o.recordPolicy?.() ?? [];
      },
    },
  });
  return { controller, calls, statusWrites, events: recorded, fence: () => fence, maxInFlight: () => maxInFlight, records };
}
