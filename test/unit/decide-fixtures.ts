// Small factories for the pure decision tests (test/unit/decide-*.test.ts): plain objects in the shapes
// the informers deliver, and a fixed clock. No timers, no I/O.
import type {
  V1Lease,
  V1Node,
  V1PersistentVolumeClaim,
  V1Pod,
  V1PodDisruptionBudget,
  V1Taint,
  V1Toleration,
  V1Volume,
  V1VolumeAttachment,
} from "@kubernetes/client-node";
import { DateTime } from "luxon";
import type {
  FenceAgent,
  FencingPolicy,
  FencingPolicySpec,
  NodeFence,
  NodeFenceSpec,
  NodeFenceStatus,
  NodeFenceStatusAttempts,
  NodeFenceStatusEvidence,
} from "../../src/api/v1alpha1.ts";
import { heartbeatOf, snapshotOf } from "../../src/decide/fence-machine.ts";
import { NODE_AGENT_NAMESPACE, RECORD_ANNOTATIONS } from "../../src/decide/node-agent-record.ts";

export const T0 = DateTime.fromISO("2026-01-01T00:00:00Z", { zone: "utc" });
/** T0 plus some seconds. */
export const at = (seconds: number): DateTime => T0.plus({ seconds });
/** The timestamp format the controllers write to status (with milliseconds, UTC). */
export const stamp = (d: DateTime): string => d.toUTC().toISO() ?? "";

export interface NodeOpts {
  /** Status of the Ready condition; null leaves the condition out. Default True. */
  ready?: "True" | "False" | "Unknown" | null;
  /** Ready.lastHeartbeatTime; undefined leaves it out. */
  heartbeat?: DateTime;
  bootID?: string;
  labels?: Record<string, string>;
  taints?: V1Taint[];
}

export function node(name: string, o: NodeOpts = {}): V1Node {
  const ready = o.ready === undefined ? "True" : o.ready;
  return {
    apiVersion: "v1",
    kind: "Node",
    metadata: { name, uid: `uid-node-${name}`, labels: o.labels ?? {} },
    spec: { taints: o.taints ?? [] },
    status: {
      conditions:
        ready === null ? [] : [{ type: "Ready", status: ready, reason: "KubeletReady", lastHeartbeatTime: o.heartbeat?.toJSDate() }],
      nodeInfo: {
        bootID: o.bootID ?? `boot-${name}`,
        architecture: "amd64",
        containerRuntimeVersion: "",
        kernelVersion: "",
        kubeProxyVersion: "",
        kubeletVersion: "",
        machineID: "",
        operatingSystem: "linux",
        osImage: "",
        systemUUID: "",
      },
    },
  };
}

/** A node Lease; 40 s is the kubelet's default duration (the lab's kwok nodes use 8). */
export function lease(name: string, renewTime: DateTime | undefined, durationSeconds = 40): V1Lease {
  return {
    metadata: { name, namespace: "kube-node-lease" },
    spec: { holderIdentity: name, leaseDurationSeconds: durationSeconds, renewTime: renewTime?.toJSDate() },
  };
}

export const leases = (...ls: V1Lease[]): Map<string, V1Lease> => new Map(ls.map((l) => [l.metadata?.name ?? "", l]));

export interface PodOpts {
  node?: string;
  ns?: string;
  uid?: string;
  /** Controlled by a StatefulSet. */
  sts?: boolean;
  /** Names of PersistentVolumeClaims the pod mounts. */
  claims?: string[];
  /** Access modes of an ephemeral volume's claim template. */
  ephemeral?: string[];
  labels?: Record<string, string>;
  priority?: number;
  tolerations?: V1Toleration[];
  phase?: string;
  /** deletionTimestamp: the pod is terminating. */
  deleting?: DateTime;
  conditions?: NonNullable<V1Pod["status"]>["conditions"];
}

export function pod(name: string, o: PodOpts = {}): V1Pod {
  const ns = o.ns ?? "default";
  const volumes: V1Volume[] = [
    ...(o.claims ?? []).map((c) => ({ name: `vol-${c}`, persistentVolumeClaim: { claimName: c } })),
    ...(o.ephemeral
      ? [{ name: "scratch", ephemeral: { volumeClaimTemplate: { spec: { accessModes: o.ephemeral, resources: {} } } } }]
      : []),
  ];
  return {
    apiVersion: "v1",
    kind: "Pod",
    metadata: {
      name,
      namespace: ns,
      uid: o.uid ?? `uid-${ns}-${name}`,
      labels: o.labels ?? {},
      ownerReferences: o.sts ? [{ apiVersion: "apps/v1", kind: "StatefulSet", name: "db", uid: "uid-sts-db", controller: true }] : [],
      deletionTimestamp: o.deleting?.toJSDate(),
    },
    spec: {
      nodeName: o.node ?? "node-1",
      containers: [{ name: "main", image: "busybox" }],
      volumes,
      priority: o.priority,
      tolerations: o.tolerations,
    },
    status: { phase: o.phase ?? "Running", conditions: o.conditions },
  };
}

/** A guarded pod: controlled by a StatefulSet. */
export const stsPod = (name: string, o: PodOpts = {}): V1Pod => pod(name, { sts: true, ...o });

export function pvc(name: string, accessModes: string[], ns = "default"): V1PersistentVolumeClaim {
  return { metadata: { name, namespace: ns }, spec: { accessModes, resources: {} } };
}

export const pvcMap = (...cs: V1PersistentVolumeClaim[]): Map<string, V1PersistentVolumeClaim> =>
  new Map(cs.map((c) => [`${c.metadata?.namespace}/${c.metadata?.name}`, c]));

export function pdb(name: string, matchLabels: Record<string, string>, disruptionsAllowed: number, ns = "default"): V1PodDisruptionBudget {
  return {
    metadata: { name, namespace: ns },
    spec: { selector: { matchLabels } },
    status: { disruptionsAllowed, currentHealthy: 0, desiredHealthy: 0, expectedPods: 0 },
  };
}

export function policy(name: string, spec: Partial<FencingPolicySpec> = {}): FencingPolicy {
  return {
    apiVersion: "stockade.io/v1alpha1",
    kind: "FencingPolicy",
    metadata: { name },
    spec: { escalation: [{ agents: [{ name: "ipmi" }] }], ...spec },
  };
}

export function agent(name: string, type: FenceAgent["spec"]["type"] = "ipmi"): FenceAgent {
  return { apiVersion: "stockade.io/v1alpha1", kind: "FenceAgent", metadata: { name }, spec: { type } };
}

export const agentMap = (...as: FenceAgent[]): Map<string, FenceAgent> => new Map(as.map((a) => [a.metadata?.name ?? "", a]));

export function fence(name: string, status?: NodeFenceStatus, spec: Partial<NodeFenceSpec> = {}): NodeFence {
  return {
    apiVersion: "stockade.io/v1alpha1",
    kind: "NodeFence",
    metadata: { name, generation: 1 },
    spec: { nodeName: name, origin: "Automatic", ...spec },
    status,
  };
}

export const fenceMap = (...fs: NodeFence[]): Map<string, NodeFence> => new Map(fs.map((f) => [f.metadata?.name ?? "", f]));

export function volumeAttachment(name: string, nodeName: string, uid = `uid-va-${name}`): V1VolumeAttachment {
  return { metadata: { name, uid }, spec: { attacher: "csi.example.com", nodeName, source: { persistentVolumeName: `pv-${name}` } } };
}

// A NodeFence status at each point of the machine (the decision and controller tests share them).

/** A partitioned node: Ready=Unknown, last heartbeat (Lease and Ready) at T0, long before the sim's clock. */
export const partitionedNode = (o: { bootID?: string; labels?: Record<string, string> } = {}) =>
  node("node-1", { ready: "Unknown", bootID: o.bootID ?? "boot-1", heartbeat: T0, labels: o.labels });

/**
 * What the controller records of the fixtures' agents when an attempt starts (fence-machine attemptFacts): "admin" is
 * the manual agent, "netfence" a storage fence of the "san" StorageClass, any other an ipmi agent.
 */
const FACTS: Record<string, Pick<NodeFenceStatusAttempts, "agentType" | "storageClasses">> = {
  admin: { agentType: "manual" },
  netfence: { agentType: "csiAddonsNetworkFence", storageClasses: ["san"] },
};

export const attempt = (
  agentName: string,
  outcome: NodeFenceStatusAttempts["outcome"],
  level = 0,
  operation: NodeFenceStatusAttempts["operation"] = "off",
  startTime = stamp(at(990)),
  round = 0,
): NodeFenceStatusAttempts => ({
  level,
  round,
  agent: agentName,
  ...(FACTS[agentName] ?? { agentType: "ipmi" }),
  operation,
  startTime,
  outcome,
});

/** An attempt as an older version wrote it: without its agent's type. */
export const legacyAttempt = (...args: Parameters<typeof attempt>): NodeFenceStatusAttempts => {
  const a = attempt(...args);
  delete a.agentType;
  delete a.storageClasses;
  return a;
};

export const SNAPSHOT = snapshotOf(policy("default"));
export const fencing = (extra: NodeFenceStatus = {}): NodeFenceStatus => ({
  phase: "Fencing",
  policy: "default",
  policySnapshot: SNAPSHOT,
  bootID: "boot-1",
  currentLevel: 0,
  round: 0,
  levelStartTime: stamp(at(990)),
  ...extra,
});
/** Evidence taken on the default partitioned node and its Lease: the heartbeat as it still is. */
export const evidenceNow = (extra: Partial<NodeFenceStatusEvidence> = {}): NodeFenceStatusEvidence => ({
  method: "PowerOffConfirmed",
  time: stamp(at(995)),
  agents: ["ipmi"],
  detail: "off",
  round: 0,
  heartbeat: { ...heartbeatOf(partitionedNode(), lease("node-1", T0)), silent: true },
  ...extra,
});
export const releasing = (extra: NodeFenceStatus = {}): NodeFenceStatus => ({
  ...fencing(),
  phase: "Releasing",
  fencedTime: stamp(at(995)),
  attempts: [attempt("ipmi", "Succeeded")],
  evidence: evidenceNow(),
  ...extra,
});

/** A node agent's record (decide/node-agent-record.ts) as an agent writes it: armed, T = D = 30 s, F = 10 s unless given. */
export function agentRecord(
  node: string,
  o: { armed?: string; T?: string; D?: string; F?: string | null; resourceVersion?: string; renewTime?: Date; holder?: string } = {},
): V1Lease {
  return {
    metadata: {
      name: node,
      namespace: NODE_AGENT_NAMESPACE,
      ...(o.resourceVersion === undefined ? {} : { resourceVersion: o.resourceVersion }),
      annotations: {
        [RECORD_ANNOTATIONS.armed]: o.armed ?? "true",
        [RECORD_ANNOTATIONS.watchdogTimeoutSeconds]: o.T ?? "30",
        [RECORD_ANNOTATIONS.deadlineSeconds]: o.D ?? "30",
        ...(o.F === null ? {} : { [RECORD_ANNOTATIONS.controlPlaneDownSeconds]: o.F ?? "10" }),
        [RECORD_ANNOTATIONS.publicKey]: "MCowBQYDK2VwAyEA" + "A".repeat(43) + "=",
        [RECORD_ANNOTATIONS.peerAddress]: "10.0.0.1:9443",
      },
    },
    spec: { holderIdentity: o.holder ?? `stockade-node-agent-${node}`, renewTime: o.renewTime ?? new Date(T0.toMillis()) },
  };
}

/** How a writer set a node condition: an Update of nodes/status (the kubelet's, node-problem-detector's) or an Apply. */
export interface WriteOpts {
  operation?: "Update" | "Apply";
  /** Default "status". */
  subresource?: string;
}

/**
 * Records in the Node's metadata.managedFields that `manager` set its condition `type`, shaped as the apiserver writes
 * it (fieldsType FieldsV1; one entry per manager, operation and subresource; the condition keyed `k:{"type":…}`). An
 * Update takes the status from every other owner (it changed the value); an Apply shares it with other appliers.
 */
export function writtenBy(n: V1Node, type: string, manager: string, o: WriteOpts = {}): V1Node {
  const operation = o.operation ?? "Update";
  const subresource = o.subresource ?? "status";
  const key = `k:${JSON.stringify({ type })}`;
  const entries = (n.metadata!.managedFields ??= []);
  if (operation === "Update")
    for (const e of entries) {
      const item = (e.fieldsV1 as { "f:status"?: { "f:conditions"?: Record<string, Record<string, unknown>> } } | undefined)?.[
        "f:status"
      ]?.["f:conditions"]?.[key];
      if (item && (e.manager !== manager || e.operation !== operation)) delete item["f:status"];
    }
  let e = entries.find((x) => x.manager === manager && x.operation === operation && (x.subresource ?? "") === subresource);
  if (!e) {
    e = {
      manager,
      operation,
      apiVersion: "v1",
      time: T0.toJSDate(),
      fieldsType: "FieldsV1",
      fieldsV1: { "f:status": { "f:conditions": { ".": {} } } },
      ...(subresource ? { subresource } : {}),
    };
    entries.push(e);
  }
  const conditions = (e.fieldsV1 as { "f:status": { "f:conditions": Record<string, unknown> } })["f:status"]["f:conditions"];
  conditions[key] = {
    ".": {},
    "f:lastHeartbeatTime": {},
    "f:lastTransitionTime": {},
    "f:message": {},
    "f:reason": {},
    "f:status": {},
    "f:type": {},
  };
  return n;
}
