// The etcd workload: a 3-member etcd StatefulSet as a real quorum system on the lab's nodes. Members find
// each other by their StatefulSet DNS names (<pod>.<svc>.<ns>.svc.<domain>, published by a headless
// Service even before they are ready), so a member replaced on another node keeps its peer URL; its data
// lives on a ReadWriteOnce "SAN" volume (a pre-bound hostPath PV under <labDir>/san/, reachable from every
// node), so it keeps its member ID too: etcd finds its data dir and ignores the --initial-cluster* flags.
// A member whose volume lost its data refuses to start ("member ... has already been bootstrapped": etcd
// asks its peers first), instead of rejoining with an empty log; that needs an operator, as in production.
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import {
  AppsV1Api,
  CoreV1Api,
  type KubeConfig,
  type V1PersistentVolume,
  type V1Service,
  type V1StatefulSet,
  type V1Toleration,
} from "@kubernetes/client-node";

export const ETCD_CLIENT_PORT = 2379;
export const ETCD_PEER_PORT = 2380;
const DATA_MOUNT = "/var/lib/etcd";

/** One member's etcd command line; shared by the StatefulSet and by tests that run members on loopback. */
export interface EtcdMemberConfig {
  name: string;
  dataDir: string;
  /** The URL peers reach this member at (a DNS name in the StatefulSet). */
  peerUrl: string;
  /** The URL this member advertises to clients. */
  clientUrl: string;
  listenPeerUrl: string;
  listenClientUrl: string;
  /** name=peerUrl of every initial member, comma separated. */
  initialCluster: string;
  /** Distinct per cluster, so a member can never join another cluster by mistake. */
  clusterToken: string;
  /** Skip fsync (fine when only processes die, never the machine's kernel). Default false. */
  unsafeNoFsync?: boolean;
  /** Raft timings, ms (defaults 200 / 2000: a loaded 2-core machine must not see spurious elections). */
  heartbeatMs?: number;
  electionMs?: number;
}

export function etcdMemberArgs(m: EtcdMemberConfig): string[] {
  return [
    `--name=${m.name}`,
    `--data-dir=${m.dataDir}`,
    `--listen-peer-urls=${m.listenPeerUrl}`,
    `--listen-client-urls=${m.listenClientUrl}`,
    `--initial-advertise-peer-urls=${m.peerUrl}`,
    `--advertise-client-urls=${m.clientUrl}`,
    `--initial-cluster=${m.initialCluster}`,
    `--initial-cluster-token=${m.clusterToken}`,
    // Only read on the very first start: a member with a data dir restarts from it, whatever this says.
    "--initial-cluster-state=new",
    `--heartbeat-interval=${m.heartbeatMs ?? 200}`,
    `--election-timeout=${m.electionMs ?? 2000}`,
    ...(m.unsafeNoFsync ? ["--unsafe-no-fsync"] : []),
  ];
}

export interface EtcdWorkloadOptions {
  namespace: string;
  /** An image with /usr/local/bin/etcd (e.g. stockade.lab/etcd:<hash>); never pulled. */
  image: string;
  /** The lab's directory: the members' volumes are <labDir>/san/<namespace>/data-<name>-<i>. */
  labDir: string;
  tolerations?: V1Toleration[];
  /** StatefulSet and Service name (default "etcd"). */
  name?: string;
  /** Members (default 3). */
  members?: number;
  clusterDomain?: string;
  storageClassName?: string;
  storage?: string;
  unsafeNoFsync?: boolean;
}

export interface EtcdWorkload {
  namespace: string;
  name: string;
  service: V1Service;
  statefulSet: V1StatefulSet;
  /** Pre-bound to the StatefulSet's claims data-<name>-<i>. */
  volumes: V1PersistentVolume[];
  /** Pod names, member i first. */
  pods: string[];
  /** Host directories behind the volumes. */
  hostDirs: string[];
}

/** The stable DNS name of member i. */
export function etcdMemberHost(o: { name?: string; namespace: string; clusterDomain?: string }, pod: string): string {
  return `${pod}.${o.name ?? "etcd"}.${o.namespace}.svc.${o.clusterDomain ?? "cluster.local"}`;
}

/** A pre-bound hostPath PV standing in for a SAN LUN: every node reaches the same directory. */
export function sanVolume(o: { labDir: string; namespace: string; claim: string; storageClassName?: string; storage?: string }): {
  volume: V1PersistentVolume;
  hostDir: string;
} {
  const hostDir = join(o.labDir, "san", o.namespace, o.claim);
  return {
    hostDir,
    volume: {
      apiVersion: "v1",
      kind: "PersistentVolume",
      metadata: { name: `san-${o.namespace}-${o.claim}`, labels: { "stockade.lab/san": "true" } },
      spec: {
        storageClassName: o.storageClassName ?? "lab-san",
        capacity: { storage: o.storage ?? "1Gi" },
        accessModes: ["ReadWriteOnce"],
        persistentVolumeReclaimPolicy: "Retain",
        volumeMode: "Filesystem",
        claimRef: { apiVersion: "v1", kind: "PersistentVolumeClaim", namespace: o.namespace, name: o.claim },
        hostPath: { path: hostDir, type: "DirectoryOrCreate" },
      },
    },
  };
}

export function etcdWorkload(o: EtcdWorkloadOptions): EtcdWorkload {
  const name = o.name ?? "etcd";
  const n = o.members ?? 3;
  if (!Number.isInteger(n) || n < 1 || n > 9) throw new Error(`etcd members must be an integer from 1 to 9 (got ${o.members})`);
  if (!o.image) throw new Error("etcd workload: an image is required");
  const labels = { app: name, "stockade.lab/workload": "etcd" };
  const pods = Array.from({ length: n }, (_, i) => `${name}-${i}`);
  const host = (pod: string) => etcdMemberHost({ name, namespace: o.namespace, clusterDomain: o.clusterDomain }, pod);
  const initialCluster = pods.map((p) => `${p}=http://${host(p)}:${ETCD_PEER_PORT}`).join(",");
  // $(POD_NAME) is expanded by the kubelet from the container's environment: no shell in the image needed.
  const self = etcdMemberArgs({
    name: "$(POD_NAME)",
    dataDir: `${DATA_MOUNT}/data`,
    peerUrl: `http://${host("$(POD_NAME)")}:${ETCD_PEER_PORT}`,
    clientUrl: `http://${host("$(POD_NAME)")}:${ETCD_CLIENT_PORT}`,
    listenPeerUrl: `http://0.0.0.0:${ETCD_PEER_PORT}`,
    listenClientUrl: `http://0.0.0.0:${ETCD_CLIENT_PORT}`,
    initialCluster,
    clusterToken: `${o.namespace}-${name}`,
    unsafeNoFsync: o.unsafeNoFsync,
  });
  const sans = pods.map((p) =>
    sanVolume({ labDir: o.labDir, namespace: o.namespace, claim: `data-${p}`, storageClassName: o.storageClassName, storage: o.storage }),
  );
  return {
    namespace: o.namespace,
    name,
    pods,
    hostDirs: sans.map((s) => s.hostDir),
    volumes: sans.map((s) => s.volume),
    service: {
      apiVersion: "v1",
      kind: "Service",
      metadata: { name, namespace: o.namespace, labels },
      spec: {
        clusterIP: "None",
        // Peers must find each other before any member is ready (no quorum, no readiness).
        publishNotReadyAddresses: true,
        selector: labels,
        ports: [
          { name: "client", port: ETCD_CLIENT_PORT, targetPort: ETCD_CLIENT_PORT },
          { name: "peer", port: ETCD_PEER_PORT, targetPort: ETCD_PEER_PORT },
        ],
      },
    },
    statefulSet: {
      apiVersion: "apps/v1",
      kind: "StatefulSet",
      metadata: { name, namespace: o.namespace, labels },
      spec: {
        serviceName: name,
        replicas: n,
        // A quorum system cannot bootstrap one member at a time (OrderedReady would wait for etcd-0's readiness).
        podManagementPolicy: "Parallel",
        selector: { matchLabels: labels },
        template: {
          metadata: { labels },
          spec: {
            tolerations: o.tolerations,
            automountServiceAccountToken: false,
            enableServiceLinks: false,
            terminationGracePeriodSeconds: 10,
            affinity: {
              podAntiAffinity: {
                preferredDuringSchedulingIgnoredDuringExecution: [
                  { weight: 100, podAffinityTerm: { topologyKey: "kubernetes.io/hostname", labelSelector: { matchLabels: labels } } },
                ],
              },
            },
            containers: [
              {
                name: "etcd",
                image: o.image,
                imagePullPolicy: "Never",
                command: ["/usr/local/bin/etcd"],
                args: self,
                env: [{ name: "POD_NAME", valueFrom: { fieldRef: { fieldPath: "metadata.name" } } }],
                ports: [
                  { name: "client", containerPort: ETCD_CLIENT_PORT },
                  { name: "peer", containerPort: ETCD_PEER_PORT },
                ],
                // Readiness only (DNS does not depend on it). No liveness probe: a kubelet restarting a member
                // during a partition would blur what the faults did.
                readinessProbe: { httpGet: { path: "/readyz", port: ETCD_CLIENT_PORT }, periodSeconds: 2, failureThreshold: 2 },
                volumeMounts: [{ name: "data", mountPath: DATA_MOUNT }],
              },
            ],
          },
        },
        volumeClaimTemplates: [
          {
            metadata: { name: "data" },
            spec: {
              storageClassName: o.storageClassName ?? "lab-san",
              accessModes: ["ReadWriteOnce"],
              resources: { requests: { storage: o.storage ?? "1Gi" } },
            },
          },
        ],
      },
    },
  };
}

/** Creates the workload: its host directories, PVs, the headless Service and the StatefulSet. */
export async function createEtcdWorkload(kc: KubeConfig, w: EtcdWorkload): Promise<void> {
  const core = kc.makeApiClient(CoreV1Api);
  const apps = kc.makeApiClient(AppsV1Api);
  for (const d of w.hostDirs) mkdirSync(d, { recursive: true, mode: 0o700 });
  for (const pv of w.volumes) await core.createPersistentVolume({ body: pv });
  await core.createNamespacedService({ namespace: w.namespace, body: w.service });
  await apps.createNamespacedStatefulSet({ namespace: w.namespace, body: w.statefulSet });
}

/** The members' client endpoints by pod IP (http://<podIP>:2379), for a checker on the host; members without an IP are left out. */
export async function etcdPodEndpoints(kc: KubeConfig, w: Pick<EtcdWorkload, "namespace" | "pods">): Promise<string[]> {
  const core = kc.makeApiClient(CoreV1Api);
  const out: string[] = [];
  for (const name of w.pods) {
    const p = await core.readNamespacedPod({ name, namespace: w.namespace }).catch(() => undefined);
    const ip = p?.status?.podIP;
    if (ip) out.push(`http://${ip.includes(":") ? `[${ip}]` : ip}:${ETCD_CLIENT_PORT}`);
  }
  return out;
}
