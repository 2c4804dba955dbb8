// The operator's view of the cluster: one informer per kind it reads, all synced (first list in the
// cache) before any controller runs. Staleness of the watches that carry heartbeats feeds the storm guard.
// Give it a KubeConfig whose requests have deadlines (kube/deadline.ts): a list must not hang forever.
import { LastSeenNodes } from "./last-seen-nodes.ts";
import {
  CoordinationV1Api,
  CoreV1Api,
  CustomObjectsApi,
  PolicyV1Api,
  StorageV1Api,
  type KubeConfig,
  type KubernetesListObject,
  type KubernetesObject,
  type V1Lease,
  type V1ManagedFieldsEntry,
  type V1Node,
  type V1PersistentVolumeClaim,
  type V1Pod,
  type V1PodDisruptionBudget,
  type V1VolumeAttachment,
} from "@kubernetes/client-node";
import { GROUP, VERSION, type FenceAgent, type FencingPolicy, type NodeFence } from "../api/v1alpha1.ts";
import { Informer } from "../runtime/informer.ts";
import type { GoneNode, PodsByNode } from "../decide/fleet.ts";
import { hasNodeDown } from "../decide/node-down.ts";
import { LeaseObserver } from "./lease-observer.ts";
import { Sight } from "./sight.ts";
import { WatchdogObserver } from "./watchdog-observer.ts";
import { NODE_AGENT_NAMESPACE } from "../decide/node-agent-record.ts";
import { slimNode, slimNodeWriters, slimPod } from "./slim.ts";

export interface CacheOptions {
  staleAfterMs?: number;
  onError?: (what: string, err: unknown, restartInMs: number) => void;
  /** When this replica could see (kube/sight.ts); the heartbeat watches report their gaps to it. */
  sight?: Sight;
}

/** The pods informer's index of pods by spec.nodeName. */
const POD_NODE = "nodeName";
/** Pods that carry a NodeDown condition, by node: the few a healthy node's fleet pass must look at. */
const POD_NODE_DOWN = "nodeDown";
/** Node Leases by name (= the node's name; the informer watches kube-node-lease alone). */
const LEASE_NAME = "name";

export class Caches {
  readonly nodes: Informer<V1Node>;
  /** The Nodes this process saw deleted, as last seen (a fence of a Node that is gone starts on them). */
  readonly lastSeenNodes = new LastSeenNodes();
  readonly leases: Informer<V1Lease>;
  /** When this process saw each node Lease's renewal (monotonic): how long a Lease has been silent, as the node controller measures it. */
  readonly leaseObserver: LeaseObserver;
  /** When this replica could see the heartbeats: silence counts only from the end of its last gap. */
  readonly sight: Sight;
  /**
   * The node agents' records (Leases in stockade-node-agent), for WatchdogExpired only: started on first need
   * (watchAgentRecords), outside the sync every controller waits for — a cluster without the node agent (or without
   * the operator's read access to its namespace) is not held up by them.
   */
  readonly agentRecords: Informer<V1Lease>;
  readonly watchdogObserver: WatchdogObserver;
  readonly pods: Informer<V1Pod>;
  readonly pvcs: Informer<V1PersistentVolumeClaim>;
  readonly pdbs: Informer<V1PodDisruptionBudget>;
  readonly volumeAttachments: Informer<V1VolumeAttachment>;
  readonly policies: Informer<FencingPolicy>;
  readonly agents: Informer<FenceAgent>;
  readonly fences: Informer<NodeFence>;
  private readonly all: [string, Informer<KubernetesObject>][];
  private agentRecordsStarted = false;
  private claims: { revision: number; byKey: ReadonlyMap<string, V1PersistentVolumeClaim> } | undefined;

  constructor(kc: KubeConfig, o: CacheOptions = {}) {
    const core = kc.makeApiClient(CoreV1Api);
    const custom = kc.makeApiClient(CustomObjectsApi);
    type Page = { limit: number; _continue?: string };
    this.sight = o.sight ?? new Sight();
    const sight = this.sight;
    const mk = <T extends KubernetesObject>(
      path: string,
      list: (page: Page) => Promise<KubernetesListObject<T>>,
      transform?: (o: T) => T,
      managedFields?: (entries: V1ManagedFieldsEntry[]) => V1ManagedFieldsEntry[] | undefined,
      heartbeats = false,
    ) =>
      new Informer<T>({
        kc,
        path,
        list,
        transform,
        managedFields,
        // One stream per collection rather than pages (150,000 pods: 99 s and 370 MiB instead of 128 s and 448 MiB);
        // paged where the server cannot (Kubernetes 1.33, or before 1.32 without the gate).
        streamingList: true,
        staleAfterMs: o.staleAfterMs,
        onError: (err, ms) => o.onError?.(path, err, ms),
        // The watches that carry heartbeats: while either has a gap, no node's silence counts.
        ...(heartbeats ? { onSight: (seeing: boolean, why: string) => (seeing ? sight.regained(path, why) : sight.lost(path, why)) } : {}),
      });
    const crd = <T extends KubernetesObject>(plural: string) =>
      mk<T>(
        `/apis/${GROUP}/${VERSION}/${plural}`,
        async (page) =>
          (await custom.listClusterCustomObject({ group: GROUP, version: VERSION, plural, ...page })) as KubernetesListObject<T>,
      );
    this.nodes = mk("/api/v1/nodes", (page) => core.listNode(page), slimNode, slimNodeWriters, true);
    this.nodes.on("delete", (n) => this.lastSeenNodes.deleted(n));
    this.nodes.on("add", (n) => this.lastSeenNodes.present(n));
    const coordination = kc.makeApiClient(CoordinationV1Api);
    this.leases = mk(
      "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases",
      (page) => coordination.listNamespacedLease({ namespace: "kube-node-lease", ...page }),
      undefined,
      undefined,
      true,
    );
    this.leases.addIndex(LEASE_NAME, (l) => l.metadata?.name);
    this.leaseObserver = new LeaseObserver(undefined, sight);
    for (const verb of ["add", "update"] as const) this.leases.on(verb, (l) => this.leaseObserver.observe(l));
    this.leases.on("delete", (l) => {
      this.leaseObserver.forget(l);
      // Collected with its Node, or deleted later: either way the last sign of the machine is no earlier than this.
      if (l.metadata?.name) this.lastSeenNodes.leaseDeleted(l.metadata.name);
    });
    this.agentRecords = mk(`/apis/coordination.k8s.io/v1/namespaces/${NODE_AGENT_NAMESPACE}/leases`, (page) =>
      coordination.listNamespacedLease({ namespace: NODE_AGENT_NAMESPACE, ...page }),
    );
    this.watchdogObserver = new WatchdogObserver(undefined, undefined, sight);
    for (const verb of ["add", "update"] as const) this.agentRecords.on(verb, (l) => this.watchdogObserver.observe(l));
    this.agentRecords.on("delete", (l) => this.watchdogObserver.forget(l));
    this.pods = mk("/api/v1/pods", (page) => core.listPodForAllNamespaces(page), slimPod);
    this.pods.addIndex(POD_NODE, (p) => p.spec?.nodeName || undefined);
    this.pods.addIndex(POD_NODE_DOWN, (p) => (hasNodeDown(p) && p.spec?.nodeName) || undefined);
    this.pvcs = mk("/api/v1/persistentvolumeclaims", (page) => core.listPersistentVolumeClaimForAllNamespaces(page));
    const policy = kc.makeApiClient(PolicyV1Api);
    this.pdbs = mk("/apis/policy/v1/poddisruptionbudgets", (page) => policy.listPodDisruptionBudgetForAllNamespaces(page));
    const storage = kc.makeApiClient(StorageV1Api);
    this.volumeAttachments = mk("/apis/storage.k8s.io/v1/volumeattachments", (page) => storage.listVolumeAttachment(page));
    this.policies = crd<FencingPolicy>("fencingpolicies");
    this.agents = crd<FenceAgent>("fenceagents");
    this.fences = crd<NodeFence>("nodefences");
    this.all = Object.entries({
      nodes: this.nodes,
      leases: this.leases,
      pods: this.pods,
      persistentvolumeclaims: this.pvcs,
      poddisruptionbudgets: this.pdbs,
      volumeattachments: this.volumeAttachments,
      fencingpolicies: this.policies,
      fenceagents: this.agents,
      nodefences: this.fences,
    }) as never;
  }

  /** The names of the nodes that cached pods are bound to (some may no longer exist). */
  podNodeNames(): string[] {
    return this.pods.indexValues(POD_NODE);
  }

  /**
   * The nodes cached pods are bound to whose Node does not exist, with what this process knows of each: the Node as
   * it last saw it, its Lease, and how long it has had no sign of the machine (decide/gone-nodes.ts GoneNode).
   */
  goneNodes(): GoneNode[] {
    const out: GoneNode[] = [];
    const now = performance.now();
    for (const name of this.podNodeNames()) {
      if (!name || this.nodes.get(name)) continue;
      const lastSeen = this.lastSeenNodes.get(name);
      const lease = this.leaseOf(name);
      const leaseSilentMs = lease && this.leaseSilentForMs(name, lease);
      const seeing = this.sight.seeingSince();
      const sign = this.lastSeenNodes.lastSignAt(name);
      // The latest sign: the Node's (or its Lease's) deletion, the Lease's last renewal seen, the end of the last gap.
      const since =
        sign === undefined || seeing === undefined
          ? undefined
          : Math.max(sign, seeing, leaseSilentMs === undefined ? sign : now - leaseSilentMs);
      out.push({
        name,
        ...(lastSeen ? { lastSeen } : {}),
        ...(lease ? { lease, leaseSilentMs } : {}),
        ...(since === undefined ? {} : { quietMs: Math.max(0, now - since) }),
      });
    }
    return out;
  }

  /** The cached pods bound to this node. */
  podsOn(nodeName: string): V1Pod[] {
    // The index is kept with the cache; the filter costs nothing and keeps a wrong bucket from ever counting.
    return this.pods.byIndex(POD_NODE, nodeName).filter((p) => p.spec?.nodeName === nodeName);
  }

  /** The node's cached Lease. */
  leaseOf(nodeName: string): V1Lease | undefined {
    return this.leases.oneByIndex(LEASE_NAME, nodeName);
  }

  /** The cached pods bound to this node that carry a NodeDown condition. */
  podsMarkedOn(nodeName: string): V1Pod[] {
    // Most nodes have none: every fleet pass asks for every node's, and two arrays each were 10,000 a pass at 5,000.
    if (this.pods.countByIndex(POD_NODE_DOWN, nodeName) === 0) return [];
    return this.pods.byIndex(POD_NODE_DOWN, nodeName).filter((p) => p.spec?.nodeName === nodeName && hasNodeDown(p));
  }

  /** The pods by node, for the fleet decision. */
  readonly podsByNode: PodsByNode = { on: (n) => this.podsOn(n), markedOn: (n) => this.podsMarkedOn(n) };

  /** Every cached PVC keyed "namespace/name": a snapshot, built again only after the cache has changed. */
  pvcsByKey(): ReadonlyMap<string, V1PersistentVolumeClaim> {
    const revision = this.pvcs.revision;
    if (this.claims?.revision !== revision)
      this.claims = { revision, byKey: new Map(this.pvcs.list().map((p) => [`${p.metadata?.namespace}/${p.metadata?.name}`, p] as const)) };
    return this.claims.byKey;
  }

  /** Starts every informer; resolves once every one has its first list in the cache (or they are stopped). */
  async start(): Promise<void> {
    const started = this.all.map(([, i]) => i.start());
    // Renewals seen while the first lists filled the caches count from the sync of both heartbeat caches (stop() also
    // resolves them: not synced then).
    const heartbeatsSynced = Promise.all([this.leases.waitForSync(), this.nodes.waitForSync()]).then(
      () => this.leases.hasSynced && this.nodes.hasSynced && this.leaseObserver.synced(),
    );
    await Promise.all([...started, heartbeatsSynced]);
  }

  /** How long the node's Lease has had this renewTime, as this process saw it (see LeaseObserver). */
  leaseSilentForMs(nodeName: string, lease: V1Lease): number {
    return this.leaseObserver.silentForMs(nodeName, lease.spec?.renewTime);
  }

  /**
   * The observer of the node agents' records, their informer started on the first call; its first list marks the
   * observer synced (no window starts before it).
   */
  watchAgentRecords(): WatchdogObserver {
    if (!this.agentRecordsStarted) {
      this.agentRecordsStarted = true;
      void this.agentRecords.start().then(() => this.agentRecords.hasSynced && this.watchdogObserver.synced());
    }
    return this.watchdogObserver;
  }

  stop(): void {
    this.agentRecords.stop();
    for (const [, i] of this.all) i.stop();
  }

  get synced(): boolean {
    return this.all.every(([, i]) => i.hasSynced);
  }

  /** The caches whose first list has not completed yet, by resource (e.g. "pods"). */
  unsynced(): string[] {
    return this.all.filter(([, i]) => !i.hasSynced).map(([name]) => name);
  }

  /** Seconds the heartbeat-carrying watches (Nodes, Leases) may be behind: the time since the later of them last proved current. */
  heartbeatStalenessSeconds(): number {
    return Math.max(this.nodes.staleForMs(), this.leases.staleForMs()) / 1000;
  }

  restarts(): number {
    return this.all.reduce((n, [, i]) => n + i.restarts, 0);
  }
}
