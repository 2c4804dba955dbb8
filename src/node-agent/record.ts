// The agent's record (a Lease named after its node, decide/node-agent-record.ts) and its reads of the API: the
// NodeFence named after a node, read fresh (never from a cache), and the other agents' records (the membership).
// Every request has a deadline shorter than the check interval (kube/deadline.ts), so a hung request ends as a
// failed check, never as a stalled loop.
import { V1MicroTime, type KubeConfig, type V1Lease } from "@kubernetes/client-node";
import { GROUP, VERSION, type NodeFence } from "../api/v1alpha1.ts";
import { nodeFenceVerdict } from "../decide/isolation.ts";
import { NODE_AGENT_NAMESPACE, parseNodeAgentRecord, RECORD_ANNOTATIONS, type NodeAgentRecord } from "../decide/node-agent-record.ts";
import { isConflict, isNotFound, Kube } from "../kube/api.ts";
import { withRequestTimeout } from "../kube/deadline.ts";

export interface RecordFields {
  armed: boolean;
  watchdogTimeoutSeconds: number;
  deadlineSeconds: number;
  controlPlaneDownSeconds: number;
  publicKey: string;
  peerAddress: string;
}

export class RecordClient {
  readonly #kube: Kube;
  readonly #node: string;
  readonly #holder: string;
  readonly #namespace: string;

  constructor(kc: KubeConfig, opts: { node: string; holder: string; namespace?: string; requestTimeoutMs: number }) {
    this.#kube = new Kube(withRequestTimeout(kc, opts.requestTimeoutMs));
    this.#node = opts.node;
    this.#holder = opts.holder;
    this.#namespace = opts.namespace ?? NODE_AGENT_NAMESPACE;
  }

  /** A fresh GET of the NodeFence named `node`: "fence" if the operator acts on it, "absent" otherwise. Throws if the API does not answer. */
  async nodeFence(node: string): Promise<"fence" | "absent"> {
    try {
      const f = (await this.#kube.custom.getClusterCustomObject({
        group: GROUP,
        version: VERSION,
        plural: "nodefences",
        name: node,
      })) as NodeFence;
      return nodeFenceVerdict(f);
    } catch (err) {
      if (isNotFound(err)) return "absent";
      throw err;
    }
  }

  /** Renews (or creates) our record; on a conflict, reads it again and retries once. */
  async renew(fields: RecordFields, now: Date = new Date()): Promise<void> {
    const coordination = this.#kube.coordination;
    const name = this.#node;
    const namespace = this.#namespace;
    for (let attempt = 0; attempt < 2; attempt++) {
      let current: V1Lease | undefined;
      try {
        current = await coordination.readNamespacedLease({ name, namespace });
      } catch (err) {
        if (!isNotFound(err)) throw err;
      }
      const body = this.#lease(fields, now, current);
      try {
        if (current) await coordination.replaceNamespacedLease({ name, namespace, body });
        else await coordination.createNamespacedLease({ namespace, body });
        return;
      } catch (err) {
        if (!isConflict(err) || attempt === 1) throw err;
      }
    }
  }

  #lease(f: RecordFields, now: Date, current: V1Lease | undefined): V1Lease {
    const annotations = {
      ...(current?.metadata?.annotations ?? {}),
      [RECORD_ANNOTATIONS.armed]: String(f.armed),
      [RECORD_ANNOTATIONS.watchdogTimeoutSeconds]: String(f.watchdogTimeoutSeconds),
      [RECORD_ANNOTATIONS.deadlineSeconds]: String(f.deadlineSeconds),
      [RECORD_ANNOTATIONS.controlPlaneDownSeconds]: String(f.controlPlaneDownSeconds),
      [RECORD_ANNOTATIONS.publicKey]: f.publicKey,
      [RECORD_ANNOTATIONS.peerAddress]: f.peerAddress,
    };
    const fresh = current?.spec?.holderIdentity !== this.#holder;
    // MicroTime fields go back as V1MicroTime (a plain Date serializes with milliseconds, which the apiserver refuses).
    const micro = (d: Date | undefined) => (d ? new V1MicroTime(new Date(d).getTime()) : undefined);
    return {
      apiVersion: "coordination.k8s.io/v1",
      kind: "Lease",
      metadata: { ...(current?.metadata ?? {}), name: this.#node, namespace: this.#namespace, annotations },
      spec: {
        ...(current?.spec ?? {}),
        holderIdentity: this.#holder,
        leaseDurationSeconds: f.deadlineSeconds,
        renewTime: micro(now),
        acquireTime: fresh ? micro(now) : micro(current?.spec?.acquireTime),
        ...(fresh ? { leaseTransitions: (current?.spec?.leaseTransitions ?? -1) + 1 } : {}),
      },
    };
  }

  /** The other agents' usable records (ours left out) and the problems of the unusable ones. */
  async others(): Promise<{ records: NodeAgentRecord[]; problems: string[] }> {
    const list = await this.#kube.coordination.listNamespacedLease({ namespace: this.#namespace });
    const records: NodeAgentRecord[] = [];
    const problems: string[] = [];
    for (const lease of list.items) {
      if (lease.metadata?.name === this.#node) continue;
      const p = parseNodeAgentRecord(lease);
      if (p.ok) records.push(p.record);
      else problems.push(`${p.node}: ${p.problem}`);
    }
    return { records, problems };
  }
}
