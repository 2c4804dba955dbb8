// Thin typed calls the reconcilers need, each with optimistic concurrency where it writes: status
// updates carry the resourceVersion they were computed from, so a stale writer gets a 409 and retries
// from fresh state instead of overwriting someone else's step.
import {
  ApiException,
  CoordinationV1Api,
  CoreV1Api,
  CustomObjectsApi,
  HttpMethod,
  IsomorphicFetchHttpLibrary,
  PatchStrategy,
  RequestContext,
  StorageV1Api,
  setHeaderOptions,
  type KubeConfig,
  type V1Lease,
  type V1Node,
  type V1NodeCondition,
  type V1PersistentVolumeClaim,
  type V1Pod,
  type V1Taint,
} from "@kubernetes/client-node";
import type { DateTime } from "luxon";
import { GROUP, VERSION, type FenceAgent, type FenceRecord, type FencingPolicy, type NodeFence } from "../api/v1alpha1.ts";
import { DEFAULT_HEARTBEAT_TIMEOUT_SECONDS } from "../decide/fleet.ts";
import { assessNode, type NodeHealth } from "../decide/node-health.ts";
import { NODE_AGENT_NAMESPACE } from "../decide/node-agent-record.ts";

export type Plural = "nodefences" | "fencingpolicies" | "fenceagents";

export const statusCode = (err: unknown): number | undefined => (err instanceof ApiException ? err.code : undefined);
export const isNotFound = (err: unknown) => statusCode(err) === 404;
export const isConflict = (err: unknown) => statusCode(err) === 409;

/** The apiserver's message from an ApiException body, or the error's own message. */
export function errorMessage(err: unknown): string {
  if (err instanceof ApiException) {
    const body = err.body as unknown;
    try {
      const parsed = typeof body === "string" ? (JSON.parse(body) as { message?: string }) : (body as { message?: string });
      if (parsed?.message) return `${err.code}: ${parsed.message}`;
    } catch {
      /* not JSON */
    }
    return `HTTP ${err.code}`;
  }
  return err instanceof Error ? err.message : String(err);
}

const merge = setHeaderOptions("Content-Type", PatchStrategy.MergePatch);
const strategic = setHeaderOptions("Content-Type", PatchStrategy.StrategicMergePatch);
const jsonPatch = setHeaderOptions("Content-Type", PatchStrategy.JsonPatch);

export class Kube {
  readonly core: CoreV1Api;
  readonly custom: CustomObjectsApi;
  readonly storage: StorageV1Api;
  readonly coordination: CoordinationV1Api;
  readonly kc: KubeConfig;

  constructor(kc: KubeConfig) {
    this.kc = kc;
    this.core = kc.makeApiClient(CoreV1Api);
    this.custom = kc.makeApiClient(CustomObjectsApi);
    this.storage = kc.makeApiClient(StorageV1Api);
    this.coordination = kc.makeApiClient(CoordinationV1Api);
  }

  /**
   * A namespace's pods, read fresh (a quorum-consistent list), parsed as plain JSON: client-node's model
   * deserializer walks every field of every pod and costs more than the request on a busy namespace. Same
   * transport, credentials and deadline as the generated clients; timestamps stay RFC 3339 strings (readers
   * go through `new Date(...)`). Always a consistent read (no resourceVersion): docs/safety.md §1 says why a list
   * "not older than" a version seen before would not do. Fetch offers gzip and the apiserver compresses answers over
   * 128 KiB: measured on 200 pods (bench:claim-gate), asking for no compression saved about 1 ms on loopback, less
   * than the uncompressed answer's bytes (about 570 KiB) cost over a real network, so the offer stays.
   */
  async listPodsFresh(namespace: string): Promise<V1Pod[]> {
    const server = this.kc.getCurrentCluster()?.server ?? "";
    const ctx = new RequestContext(`${server}/api/v1/namespaces/${encodeURIComponent(namespace)}/pods`, HttpMethod.GET);
    ctx.setHeaderParam("Accept", "application/json");
    await this.kc.applySecurityAuthentication(ctx);
    const res = await new IsomorphicFetchHttpLibrary().send(ctx).toPromise();
    const text = await res.body.text();
    if (res.httpStatusCode !== 200) {
      let body: unknown = text;
      try {
        body = JSON.parse(text);
      } catch {
        /* not a Status: keep the text */
      }
      throw new ApiException(res.httpStatusCode, `listing the pods of namespace ${namespace}`, body, res.headers);
    }
    const list = JSON.parse(text) as { items?: V1Pod[] };
    if (!Array.isArray(list.items)) throw new Error(`listing the pods of namespace ${namespace}: the answer is not a PodList`);
    return list.items;
  }

  async getNodeFence(name: string): Promise<NodeFence | undefined> {
    try {
      return (await this.custom.getClusterCustomObject({ group: GROUP, version: VERSION, plural: "nodefences", name })) as NodeFence;
    } catch (err) {
      if (isNotFound(err)) return undefined;
      throw err;
    }
  }

  async createNodeFence(f: NodeFence): Promise<NodeFence> {
    return (await this.custom.createClusterCustomObject({ group: GROUP, version: VERSION, plural: "nodefences", body: f })) as NodeFence;
  }

  /** Deletes exactly this object (uid precondition), never a successor with the same name. */
  async deleteNodeFence(f: NodeFence): Promise<void> {
    await this.custom.deleteClusterCustomObject({
      group: GROUP,
      version: VERSION,
      plural: "nodefences",
      name: f.metadata?.name ?? "",
      body: { preconditions: { uid: f.metadata?.uid, resourceVersion: f.metadata?.resourceVersion } },
    });
  }

  /**
   * Sets a NodeFence's finalizers and/or annotations (null removes one), guarded by its resourceVersion.
   * Returns the stored object.
   */
  async patchNodeFenceMetadata(
    f: NodeFence,
    change: { finalizers?: string[]; annotations?: Record<string, string | null> },
  ): Promise<NodeFence> {
    return (await this.custom.patchClusterCustomObject(
      {
        group: GROUP,
        version: VERSION,
        plural: "nodefences",
        name: f.metadata?.name ?? "",
        body: { metadata: { resourceVersion: f.metadata?.resourceVersion, ...change } },
      },
      merge,
    )) as NodeFence;
  }

  /** Replaces status; the object's resourceVersion is the precondition. */
  async replaceStatus<T extends NodeFence | FencingPolicy | FenceAgent>(plural: Plural, obj: T): Promise<T> {
    return (await this.custom.replaceClusterCustomObjectStatus({
      group: GROUP,
      version: VERSION,
      plural,
      name: obj.metadata?.name ?? "",
      body: obj,
    })) as T;
  }

  /** Creates a fence episode's record (controllers/fence-history.ts); 409 when it exists. */
  async createFenceRecord(r: FenceRecord): Promise<FenceRecord> {
    return (await this.custom.createClusterCustomObject({
      group: GROUP,
      version: VERSION,
      plural: "fencerecords",
      body: r,
    })) as FenceRecord;
  }

  /**
   * Replaces a record's labels, spec and status with a JSON patch that first tests that it is the record of the same
   * NodeFence (uid): a record of another episode is never overwritten (the patch fails, 422).
   */
  async replaceFenceRecord(r: FenceRecord): Promise<FenceRecord> {
    return (await this.custom.patchClusterCustomObject(
      {
        group: GROUP,
        version: VERSION,
        plural: "fencerecords",
        name: r.metadata?.name ?? "",
        body: [
          { op: "test", path: "/spec/nodeFence/uid", value: r.spec.nodeFence.uid },
          { op: "add", path: "/metadata/labels", value: r.metadata?.labels ?? {} },
          { op: "add", path: "/spec", value: r.spec },
          { op: "add", path: "/status", value: r.status ?? {} },
        ],
      },
      jsonPatch,
    )) as FenceRecord;
  }

  async listFenceRecords(labelSelector?: string): Promise<FenceRecord[]> {
    const list = (await this.custom.listClusterCustomObject({ group: GROUP, version: VERSION, plural: "fencerecords", labelSelector })) as {
      items: FenceRecord[];
    };
    return list.items;
  }

  /** Deletes exactly this record (uid precondition); false when it was already gone. */
  async deleteFenceRecord(r: FenceRecord): Promise<boolean> {
    try {
      await this.custom.deleteClusterCustomObject({
        group: GROUP,
        version: VERSION,
        plural: "fencerecords",
        name: r.metadata?.name ?? "",
        body: { preconditions: { uid: r.metadata?.uid } },
      });
      return true;
    } catch (err) {
      if (isNotFound(err) || isConflict(err)) return false;
      throw err;
    }
  }

  async readNode(name: string): Promise<V1Node | undefined> {
    try {
      return await this.core.readNode({ name });
    } catch (err) {
      if (isNotFound(err)) return undefined;
      throw err;
    }
  }

  /**
   * The node agent's record for a node (a Lease in stockade-node-agent), fresh; undefined when there is none, or when
   * the operator may not read it (the node agent's manifests grant that: without them, a policy that allows watchdog
   * evidence must still fence by its other levels, not fail every step on a 403; no record is never evidence).
   */
  async readAgentRecord(node: string): Promise<V1Lease | undefined> {
    try {
      return await this.coordination.readNamespacedLease({ name: node, namespace: NODE_AGENT_NAMESPACE });
    } catch (err) {
      if (isNotFound(err) || statusCode(err) === 403) return undefined;
      throw err;
    }
  }

  /**
   * A pod in the node agent's namespace, fresh (never the cache): the holder a node agent record names, checked before
   * the record is evidence (decide/record-authority.ts). undefined when there is none; any other failure throws (the
   * caller counts "cannot tell" as not the agent).
   */
  async readAgentPod(name: string): Promise<V1Pod | undefined> {
    try {
      return await this.core.readNamespacedPod({ name, namespace: NODE_AGENT_NAMESPACE });
    } catch (err) {
      if (isNotFound(err)) return undefined;
      throw err;
    }
  }

  async readLease(node: string): Promise<V1Lease | undefined> {
    try {
      return await this.coordination.readNamespacedLease({ name: node, namespace: "kube-node-lease" });
    } catch (err) {
      if (isNotFound(err)) return undefined;
      throw err;
    }
  }

  /** Sets the node's taints to `taints`, guarded by the resourceVersion they were computed from. */
  async setTaints(node: V1Node, taints: V1Taint[]): Promise<V1Node> {
    return await this.core.patchNode(
      { name: node.metadata?.name ?? "", body: { metadata: { resourceVersion: node.metadata?.resourceVersion }, spec: { taints } } },
      merge,
    );
  }

  /** Adds, replaces or (condition null) removes one node condition by type. */
  async setNodeCondition(name: string, type: string, condition: V1NodeCondition | null): Promise<void> {
    const item = condition ?? { type, $patch: "delete" };
    await this.core.patchNodeStatus({ name, body: { status: { conditions: [item] } } }, strategic);
  }

  /** Adds, replaces or (condition null) removes one pod condition by type. */
  async setPodCondition(
    namespace: string,
    name: string,
    uid: string,
    type: string,
    condition: { status: string; reason: string; message: string } | null,
  ): Promise<void> {
    const item = condition ? { type, ...condition, lastTransitionTime: new Date().toISOString() } : { type, $patch: "delete" };
    await this.core.patchNamespacedPodStatus({ name, namespace, body: { metadata: { uid }, status: { conditions: [item] } } }, strategic);
  }

  /**
   * Sets annotations of a PVC (null removes one) by compare-and-swap: a merge patch carrying the resourceVersion
   * it was computed from (409 if the claim changed since). A patch, not a PUT: fields this client's models do
   * not know are left as they are.
   */
  async casAnnotateClaim(pvc: V1PersistentVolumeClaim, annotations: Record<string, string | null>): Promise<V1PersistentVolumeClaim> {
    return await this.core.patchNamespacedPersistentVolumeClaim(
      {
        name: pvc.metadata?.name ?? "",
        namespace: pvc.metadata?.namespace ?? "",
        body: { metadata: { resourceVersion: pvc.metadata?.resourceVersion, annotations } },
      },
      merge,
    );
  }

  /** Sets a pod's annotations and its scheduling gates (the whole list), by compare-and-swap as casAnnotateClaim. */
  async casPatchPod(pod: V1Pod, annotations: Record<string, string | null>, schedulingGates: { name: string }[]): Promise<V1Pod> {
    return await this.core.patchNamespacedPod(
      {
        name: pod.metadata?.name ?? "",
        namespace: pod.metadata?.namespace ?? "",
        body: { metadata: { resourceVersion: pod.metadata?.resourceVersion, annotations }, spec: { schedulingGates } },
      },
      merge,
    );
  }

  /** Force-deletes exactly this pod (uid precondition: a replacement with the same name is never touched). */
  async forceDeletePod(pod: V1Pod): Promise<"deleted" | "gone"> {
    try {
      await this.core.deleteNamespacedPod({
        name: pod.metadata?.name ?? "",
        namespace: pod.metadata?.namespace ?? "",
        gracePeriodSeconds: 0,
        body: { gracePeriodSeconds: 0, preconditions: { uid: pod.metadata?.uid } },
      });
      return "deleted";
    } catch (err) {
      // 404: already gone; 409: the name now belongs to a replacement, so our pod is gone.
      if (isNotFound(err) || isConflict(err)) return "gone";
      throw err;
    }
  }

  async deleteVolumeAttachment(name: string, uid: string): Promise<"deleted" | "gone"> {
    try {
      await this.storage.deleteVolumeAttachment({ name, body: { preconditions: { uid } } });
      return "deleted";
    } catch (err) {
      if (isNotFound(err) || isConflict(err)) return "gone";
      throw err;
    }
  }

  /**
   * The node's health from a fresh read of the Node and its Lease (not the cache): the check right before acting.
   * leaseSilentMs: how long the operator has seen the fresh Lease's renewTime (kube/lease-observer.ts); without it the
   * Lease does not count as expired.
   */
  async freshHealth(
    node: string,
    detection: { heartbeatTimeoutSeconds?: number; waitForNodeController?: boolean } | undefined,
    now: DateTime,
    leaseSilentMs?: (lease: V1Lease) => number,
  ): Promise<{ node: V1Node | undefined; health: NodeHealth | undefined; lease: V1Lease | undefined; leaseSilentMs: number | undefined }> {
    const [n, lease] = await Promise.all([this.readNode(node), this.readLease(node)]);
    const timeout = detection?.heartbeatTimeoutSeconds ?? DEFAULT_HEARTBEAT_TIMEOUT_SECONDS;
    const observed = lease && leaseSilentMs?.(lease);
    return {
      node: n,
      health: n ? assessNode(n, lease, now, timeout, detection?.waitForNodeController ?? false, observed) : undefined,
      // For a Node that is gone, whose kubelet heartbeats through its Lease alone (decide/gone-nodes.ts).
      lease,
      leaseSilentMs: observed,
    };
  }

  async readSecret(namespace: string, name: string): Promise<Record<string, string>> {
    const s = await this.core.readNamespacedSecret({ name, namespace });
    const out: Record<string, string> = {};
    for (const [k, v] of Object.entries(s.data ?? {})) out[k] = Buffer.from(v, "base64").toString("utf8");
    for (const [k, v] of Object.entries(s.stringData ?? {})) out[k] = v;
    return out;
  }
}
