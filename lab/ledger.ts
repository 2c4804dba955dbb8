// The "ledger": a single-writer StatefulSet for real-node labs, and the checkers that read its evidence.
//
// Each ledger pod runs lab/programs/ledger (a Go program) that appends one JSON line per interval,
// fsynced, to `ledger.jsonl` on its ReadWriteOnce claim. The claims are bound to hostPath volumes under
// the lab's "SAN" directory, which every node reaches because all nodes share this machine's filesystem:
// like a SAN LUN, nothing on the storage side stops two nodes from writing at once. Only Stockade stands
// between a partition and two writers, and the file keeps the proof of what happened:
//   - checkLedger: per identity, no instance (pod uid) wrote after its successor's first write — in the
//     file's order (the ground truth of a shared file) and by the writers' clocks — and no write was lost
//     or duplicated (seq), and fencing tokens only move forward;
//   - checkProcessTables: from the node's processes captured at each power change, no process of an old
//     instance was alive when its replacement started.
import { mkdirSync, readFileSync, readdirSync, existsSync, statSync } from "node:fs";
import { join } from "node:path";
import { waitFor } from "./health.ts";
import {
  AppsV1Api,
  CoreV1Api,
  StorageV1Api,
  type KubeConfig,
  type V1PersistentVolume,
  type V1PersistentVolumeClaim,
  type V1Service,
  type V1StatefulSet,
  type V1StorageClass,
  type V1Toleration,
} from "@kubernetes/client-node";

// ---------------------------------------------------------------------------------------------------
// Workload manifests

/** The writer's file inside its volume (lab/programs/ledger FileName). */
export const LEDGER_FILE = "ledger.jsonl";
/** Where the image built from lab/programs/ledger has the writer. */
export const LEDGER_BINARY = "/usr/local/bin/ledger";
/** The StorageClass of the lab's SAN volumes. */
export const SAN_STORAGE_CLASS = "lab-san";
const MOUNT = "/ledger";
const TOKEN_MOUNT = "/etc/ledger-token";
/** What a claim asks for; its volume is larger (any free volume of the class would fit: the pre-binding picks). */
const CLAIM_SIZE = "16Mi";
const VOLUME_SIZE = "64Mi";

/** The lab's SAN: one directory per volume, reachable from every node (they share this filesystem). */
export function sanDir(labDir: string): string {
  return join(labDir, "san");
}

/** The claim the StatefulSet controller creates for an ordinal (volumeClaimTemplate `data`). */
export function ledgerClaimName(name: string, ordinal: number): string {
  return `data-${name}-${ordinal}`;
}

/** The pre-created PersistentVolume for an ordinal; PVs are cluster-scoped, so the namespace is in the name. */
export function ledgerVolumeName(namespace: string, name: string, ordinal: number): string {
  return `san-${namespace}-${ledgerClaimName(name, ordinal)}`;
}

export interface LedgerOptions {
  /** StatefulSet, headless Service and `app` label; default "ledger". */
  name?: string;
  namespace: string;
  replicas: number;
  /** An image built from lab/programs/ledger (stockade.lab/ledger:<hash>), already imported on every node. */
  image: string;
  /** The lab's SAN directory (sanDir(lab.dir)); each volume is a directory in it. */
  san: string;
  /** Between two records; default 100. */
  intervalMs?: number;
  tolerations?: V1Toleration[];
  nodeSelector?: Record<string, string>;
  priorityClassName?: string;
  /** Default 2: a graceful stop of the writer takes milliseconds. */
  terminationGracePeriodSeconds?: number;
  /** One pod per node (required anti-affinity, as Bed.statefulSet does); default true. */
  onePerNode?: boolean;
  /**
   * A pod annotation whose value the writer records as its token (issue 10: the claim's fencing token),
   * projected by the downward API into a file named by TOKEN_FILE.
   */
  tokenAnnotation?: string;
}

export interface LedgerManifests {
  storageClass: V1StorageClass;
  /** One per ordinal, pre-bound to its claim, in ordinal order. */
  volumes: V1PersistentVolume[];
  /** The claims the StatefulSet would create, each naming its volume: created first and waited for. */
  claims: V1PersistentVolumeClaim[];
  service: V1Service;
  statefulSet: V1StatefulSet;
}

/**
 * The ledger's objects. The StorageClass binds Immediately: the SAN reaches every node, so there is no
 * topology for WaitForFirstConsumer to respect, and binding a claim to its pre-bound volume should not
 * depend on the scheduler — the claim stays bound to the same volume across every failover, which is
 * the point (the replacement writes to the same file as the instance it replaces).
 */
export function ledgerManifests(o: LedgerOptions): LedgerManifests {
  const name = o.name ?? "ledger";
  const labels = { app: name };
  const volumes: V1PersistentVolume[] = [];
  for (let i = 0; i < o.replicas; i++) {
    const pv = ledgerVolumeName(o.namespace, name, i);
    volumes.push({
      apiVersion: "v1",
      kind: "PersistentVolume",
      metadata: { name: pv, labels: { ...labels, "stockade.lab/san": "true" } },
      spec: {
        capacity: { storage: VOLUME_SIZE },
        accessModes: ["ReadWriteOnce"],
        volumeMode: "Filesystem",
        // The file is the evidence: it must outlive the claim.
        persistentVolumeReclaimPolicy: "Retain",
        storageClassName: SAN_STORAGE_CLASS,
        hostPath: { path: join(o.san, pv), type: "DirectoryOrCreate" },
        // Pre-bound: the binder pairs ordinal i's claim with this volume and no other.
        claimRef: { apiVersion: "v1", kind: "PersistentVolumeClaim", namespace: o.namespace, name: ledgerClaimName(name, i) },
      },
    });
  }
  const env = [
    { name: "LEDGER_DIR", value: MOUNT },
    { name: "INTERVAL_MS", value: String(o.intervalMs ?? 100) },
    { name: "IDENTITY", valueFrom: { fieldRef: { fieldPath: "metadata.name" } } },
    { name: "POD_UID", valueFrom: { fieldRef: { fieldPath: "metadata.uid" } } },
    { name: "NODE_NAME", valueFrom: { fieldRef: { fieldPath: "spec.nodeName" } } },
    ...(o.tokenAnnotation ? [{ name: "TOKEN_FILE", value: `${TOKEN_MOUNT}/token` }] : []),
  ];
  const statefulSet: V1StatefulSet = {
    apiVersion: "apps/v1",
    kind: "StatefulSet",
    metadata: { name, namespace: o.namespace, labels },
    spec: {
      serviceName: name,
      replicas: o.replicas,
      podManagementPolicy: "Parallel",
      selector: { matchLabels: labels },
      template: {
        metadata: { labels },
        spec: {
          nodeSelector: o.nodeSelector,
          priorityClassName: o.priorityClassName,
          tolerations: o.tolerations,
          terminationGracePeriodSeconds: o.terminationGracePeriodSeconds ?? 2,
          affinity:
            (o.onePerNode ?? true)
              ? {
                  podAntiAffinity: {
                    requiredDuringSchedulingIgnoredDuringExecution: [
                      { labelSelector: { matchLabels: labels }, topologyKey: "kubernetes.io/hostname" },
                    ],
                  },
                }
              : undefined,
          containers: [
            {
              name: "ledger",
              image: o.image,
              imagePullPolicy: "Never",
              command: [LEDGER_BINARY],
              env,
              volumeMounts: [
                { name: "data", mountPath: MOUNT },
                ...(o.tokenAnnotation ? [{ name: "token", mountPath: TOKEN_MOUNT, readOnly: true }] : []),
              ],
            },
          ],
          volumes: o.tokenAnnotation
            ? [
                {
                  name: "token",
                  downwardAPI: { items: [{ path: "token", fieldRef: { fieldPath: `metadata.annotations['${o.tokenAnnotation}']` } }] },
                },
              ]
            : undefined,
        },
      },
      volumeClaimTemplates: [
        {
          metadata: { name: "data", labels },
          spec: {
            accessModes: ["ReadWriteOnce"],
            storageClassName: SAN_STORAGE_CLASS,
            resources: { requests: { storage: CLAIM_SIZE } },
          },
        },
      ],
    },
  };
  return {
    storageClass: {
      apiVersion: "storage.k8s.io/v1",
      kind: "StorageClass",
      metadata: { name: SAN_STORAGE_CLASS },
      provisioner: "kubernetes.io/no-provisioner",
      volumeBindingMode: "Immediate",
      reclaimPolicy: "Retain",
    },
    volumes,
    claims: volumes.map((pv, i) => ({
      apiVersion: "v1",
      kind: "PersistentVolumeClaim",
      metadata: { name: ledgerClaimName(name, i), namespace: o.namespace, labels },
      spec: { ...statefulSet.spec!.volumeClaimTemplates![0]!.spec!, volumeName: pv.metadata!.name },
    })),
    service: {
      apiVersion: "v1",
      kind: "Service",
      metadata: { name, namespace: o.namespace, labels },
      spec: { clusterIP: "None", selector: labels },
    },
    statefulSet,
  };
}

/**
 * Creates the SAN directories and the ledger's objects (the StorageClass only if missing: several ledgers
 * may share a lab). Does not wait for the pods.
 */
export async function deployLedger(kc: KubeConfig, o: LedgerOptions): Promise<LedgerManifests> {
  const m = ledgerManifests(o);
  for (const pv of m.volumes) mkdirSync(pv.spec!.hostPath!.path, { recursive: true });
  const storage = kc.makeApiClient(StorageV1Api);
  try {
    await storage.createStorageClass({ body: m.storageClass });
  } catch (e) {
    if ((e as { code?: number }).code !== 409) throw e;
  }
  const core = kc.makeApiClient(CoreV1Api);
  for (const pv of m.volumes) await core.createPersistentVolume({ body: pv });
  // The claims are created and Bound before the pods exist: a pod created with its claim still unbound is
  // unschedulable, and when the scheduler's try raced the binding it waited for an unrelated cluster event
  // to try again (90 s once, under load).
  for (const pvc of m.claims) await core.createNamespacedPersistentVolumeClaim({ namespace: o.namespace, body: pvc });
  await waitFor(
    `the ${m.claims.length} claims of ${m.statefulSet.metadata!.name} Bound`,
    async () => {
      const bound = await Promise.all(
        m.claims.map((c) => core.readNamespacedPersistentVolumeClaim({ namespace: o.namespace, name: c.metadata!.name! })),
      );
      return bound.every((c) => c.status?.phase === "Bound");
    },
    { timeoutMs: 60_000, intervalMs: 100 },
  );
  await core.createNamespacedService({ namespace: o.namespace, body: m.service });
  await kc.makeApiClient(AppsV1Api).createNamespacedStatefulSet({ namespace: o.namespace, body: m.statefulSet });
  return m;
}

// ---------------------------------------------------------------------------------------------------
// Reading the ledger files

/** One record of a ledger file, where it was found, and its time parsed. */
export interface LedgerRecord {
  identity: string;
  podUID: string;
  node: string;
  /** Random per process start (a container restarted inside its pod starts a new run at seq 1). */
  run?: string;
  /** 1, 2, 3, … per run. */
  seq: number;
  /** The writer's clock, RFC 3339 with nanoseconds, as written. */
  time: string;
  /** `time` in ms since the epoch, sub-millisecond digits kept. */
  timeMs: number;
  token?: string;
  /** The file, relative to the directory read (`<volume>/ledger.jsonl`). */
  file: string;
  /** 1-based line number in that file. */
  line: number;
}

/** A line that is not a record: a write cut off by a power-off, or garbage. */
export interface UnreadableLine {
  file: string;
  line: number;
  /** The start of the line, at most 120 characters. */
  text: string;
  /** The file's last line, with no newline after it: a write cut off in the middle (or still in progress). */
  atEnd: boolean;
}

export interface LedgerRead {
  files: string[];
  records: LedgerRecord[];
  unreadable: UnreadableLine[];
}

const RFC3339 = /^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(\.\d{1,9})?(Z|[+-]\d\d:\d\d)$/;

/** RFC 3339 (nanoseconds allowed) → ms since the epoch; undefined when not such a time. */
export function parseTime(s: string): number | undefined {
  const m = RFC3339.exec(s);
  if (!m) return undefined;
  const whole = Date.parse(`${m[1]}${m[3]}`);
  if (Number.isNaN(whole)) return undefined;
  return whole + (m[2] ? Number(`0${m[2]}`) * 1000 : 0);
}

function toRecord(text: string, file: string, line: number): LedgerRecord | undefined {
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch {
    return undefined;
  }
  if (typeof v !== "object" || v === null || Array.isArray(v)) return undefined;
  const r = v as Record<string, unknown>;
  const str = (x: unknown) => typeof x === "string" && x.length > 0;
  if (!str(r.identity) || !str(r.podUID) || !str(r.node) || typeof r.time !== "string") return undefined;
  if (typeof r.seq !== "number" || !Number.isSafeInteger(r.seq) || r.seq < 1) return undefined;
  if (r.run !== undefined && !str(r.run)) return undefined;
  if (r.token !== undefined && typeof r.token !== "string") return undefined;
  const timeMs = parseTime(r.time);
  if (timeMs === undefined) return undefined;
  return {
    identity: r.identity as string,
    podUID: r.podUID as string,
    node: r.node as string,
    ...(r.run !== undefined ? { run: r.run as string } : {}),
    seq: r.seq,
    time: r.time,
    timeMs,
    ...(r.token !== undefined && r.token !== "" ? { token: r.token as string } : {}),
    file,
    line,
  };
}

/** Parses one ledger file's text; never throws. Blank lines are skipped (a writer ends a torn tail with one). */
export function parseLedger(text: string, file: string): LedgerRead {
  const out: LedgerRead = { files: [file], records: [], unreadable: [] };
  const lines = text.split("\n");
  const complete = text.endsWith("\n");
  if (complete) lines.pop();
  lines.forEach((l, i) => {
    if (l.trim() === "") return;
    const r = toRecord(l, file, i + 1);
    if (r) out.records.push(r);
    else out.unreadable.push({ file, line: i + 1, text: l.slice(0, 120), atEnd: !complete && i === lines.length - 1 });
  });
  return out;
}

/** Reads every `<dir>/<volume>/ledger.jsonl` (and `<dir>/ledger.jsonl`): the whole SAN at once. */
export function readLedgers(dir: string): LedgerRead {
  const out: LedgerRead = { files: [], records: [], unreadable: [] };
  const candidates = [LEDGER_FILE];
  if (existsSync(dir)) {
    for (const d of readdirSync(dir, { withFileTypes: true }).sort((a, b) => (a.name < b.name ? -1 : 1))) {
      if (d.isDirectory()) candidates.push(join(d.name, LEDGER_FILE));
    }
  }
  for (const rel of candidates) {
    const full = join(dir, rel);
    if (!existsSync(full) || !statSync(full).isFile()) continue;
    const r = parseLedger(readFileSync(full, "utf8"), rel);
    out.files.push(rel);
    out.records.push(...r.records);
    out.unreadable.push(...r.unreadable);
  }
  return out;
}

// ---------------------------------------------------------------------------------------------------
// The ledger checker (pure)

/** One pod instance of an identity, as its records show it. */
export interface LedgerInstance {
  identity: string;
  podUID: string;
  node: string;
  records: number;
  /** Container runs (process starts) inside the pod. */
  runs: number;
  /** First and last record in file order. */
  first: LedgerRecord;
  last: LedgerRecord;
  /** Earliest and latest record by the writer's clock. */
  earliest: LedgerRecord;
  latest: LedgerRecord;
}

export interface LedgerHandover {
  identity: string;
  /** Pod uids. */
  from: string;
  to: string;
  fromNode: string;
  toNode: string;
  /** The old instance's last write and the new one's first (file order). */
  lastOld: LedgerRecord;
  firstNew: LedgerRecord;
  /** firstNew.timeMs − lastOld.timeMs by the writers' clocks; negative is an overlap. */
  gapMs: number;
}

export interface LedgerReport {
  identities: number;
  /** Every instance, per identity in the order they wrote. */
  instances: LedgerInstance[];
  records: number;
  handovers: LedgerHandover[];
  /** Worth knowing, not a breach: e.g. a torn last line (a writer cut off by a power-off). */
  problems: string[];
  /** Each names the identity, pod uids, nodes, times, and file:line. */
  violations: string[];
}

const at = (r: LedgerRecord) => `${r.file}:${r.line}`;
const who = (r: LedgerRecord) => `pod ${r.podUID} (${r.node})`;
const byFileOrder = (a: LedgerRecord, b: LedgerRecord) => (a.file === b.file ? a.line - b.line : a.file < b.file ? -1 : 1);
const writerOf = (r: LedgerRecord) => `${r.podUID}\u0000${r.run ?? ""}`;

function groupBy<T>(xs: readonly T[], key: (x: T) => string): Map<string, T[]> {
  const m = new Map<string, T[]>();
  for (const x of xs) {
    const k = key(x);
    const g = m.get(k);
    if (g) g.push(x);
    else m.set(k, [x]);
  }
  return m;
}

const tokenValue = (t: string): bigint | undefined => (/^\d+$/.test(t) ? BigInt(t) : undefined);

/**
 * Checks the ledger's records (from readLedgers/parseLedger; unreadable lines optional). Instances are
 * pods (uids) of an identity, ordered by their first line when the identity wrote one file, else by
 * their first write's time. Violations:
 *   - interleaving in file order: a writer appended after another writer of the identity had started in
 *     the same file and before it stopped — two writers at once (the file's order is the ground truth);
 *   - overlap by the writers' clocks: an instance wrote at or after its successor's first write (one
 *     clock in the lab; across machines this also catches clock skew, which is then the finding);
 *   - a seq gap (a lost write) or a seq going back (a duplicated write) within a run, a run not starting
 *     at 1, a garbage line between two records of one run;
 *   - a token that is not a decimal integer, goes back within an instance, or does not increase from
 *     one instance to the next;
 *   - a pod uid that wrote from two nodes or under two identities.
 */
export function checkLedger(read: { records: readonly LedgerRecord[]; unreadable?: readonly UnreadableLine[] }): LedgerReport {
  const report: LedgerReport = { identities: 0, instances: [], records: read.records.length, handovers: [], problems: [], violations: [] };
  const v = (s: string) => report.violations.push(s);

  for (const [uid, recs] of groupBy(read.records, (r) => r.podUID)) {
    const ids = [...new Set(recs.map((r) => r.identity))];
    if (ids.length > 1) v(`pod ${uid} wrote under ${ids.length} identities (${ids.join(", ")}): first as ${ids[0]} at ${at(recs[0]!)}`);
  }

  const identities = groupBy(read.records, (r) => r.identity);
  report.identities = identities.size;
  for (const [id, all] of identities) {
    const recs = [...all].sort(byFileOrder);
    const oneFile = new Set(recs.map((r) => r.file)).size === 1;

    // Instances and what each run of each instance wrote.
    const instances: LedgerInstance[] = [];
    const recordsOf = groupBy(recs, (r) => r.podUID);
    for (const [uid, ir] of recordsOf) {
      const nodes = [...new Set(ir.map((r) => r.node))];
      if (nodes.length > 1) {
        const other = ir.find((r) => r.node !== ir[0]!.node)!;
        v(
          `${id}: pod ${uid} wrote from ${nodes.length} nodes (${nodes.join(", ")}): ${ir[0]!.node} at ${at(ir[0]!)}, ${other.node} at ${at(other)}`,
        );
      }
      const runs = groupBy(ir, (r) => r.run ?? "");
      for (const rr of runs.values()) checkSeq(id, rr, v, (s) => report.problems.push(s));
      checkTokensWithin(id, ir, v);
      const byTime = [...ir].sort((a, b) => a.timeMs - b.timeMs);
      instances.push({
        identity: id,
        podUID: uid,
        node: ir[0]!.node,
        records: ir.length,
        runs: runs.size,
        first: ir[0]!,
        last: ir.at(-1)!,
        earliest: byTime[0]!,
        latest: byTime.at(-1)!,
      });
    }
    instances.sort((a, b) => (oneFile ? a.first.line - b.first.line : a.earliest.timeMs - b.earliest.timeMs));
    report.instances.push(...instances);

    for (let i = 1; i < instances.length; i++) {
      const [o, n] = [instances[i - 1]!, instances[i]!];
      report.handovers.push({
        identity: id,
        from: o.podUID,
        to: n.podUID,
        fromNode: o.node,
        toNode: n.node,
        lastOld: o.last,
        firstNew: n.first,
        gapMs: n.first.timeMs - o.last.timeMs,
      });
      checkTokensAcross(id, recordsOf.get(o.podUID)!, recordsOf.get(n.podUID)!, v);
    }

    // Overlap by the writers' clocks, every pair (an old instance may outlive several successors).
    for (let i = 0; i < instances.length; i++) {
      for (let j = i + 1; j < instances.length; j++) {
        const [o, n] = [instances[i]!, instances[j]!];
        if (o.latest.timeMs >= n.earliest.timeMs) {
          v(
            `${id}: ${who(o.latest)} wrote seq ${o.latest.seq} at ${o.latest.time} (${at(o.latest)}), ` +
              `${(o.latest.timeMs - n.earliest.timeMs).toFixed(1)} ms after its successor ${who(n.earliest)} first wrote at ${n.earliest.time} (${at(n.earliest)}): ` +
              `two instances alive at once by the writers' clocks`,
          );
        }
      }
    }

    // Interleaving in file order, per file, between writers (pod uid + run).
    for (const [file, fr] of groupBy(recs, (r) => r.file)) {
      const writers = [...groupBy(fr, writerOf).values()].sort((a, b) => a[0]!.line - b[0]!.line);
      for (let i = 0; i < writers.length; i++) {
        for (let j = i + 1; j < writers.length; j++) {
          const [a, b] = [writers[i]!, writers[j]!];
          const bFirst = b[0]!;
          const after = a.filter((r) => r.line > bFirst.line);
          if (!after.length) continue;
          const samePod = a[0]!.podUID === bFirst.podUID;
          v(
            `${id}: ${who(after[0]!)}${samePod ? ` run ${a[0]!.run ?? "?"}` : ""} wrote seq ${after[0]!.seq} at ${after[0]!.time} (${file}:${after[0]!.line}) ` +
              `after ${samePod ? `run ${bFirst.run ?? "?"} of the same pod` : who(bFirst)} had first written at ${bFirst.time} (${file}:${bFirst.line}): ` +
              `their records interleave in the file (${after.length} of ${a.length} records after that line) — two writers at once`,
          );
        }
      }
    }
  }

  classifyUnreadable(read.records, read.unreadable ?? [], report);
  return report;
}

function checkSeq(id: string, run: readonly LedgerRecord[], v: (s: string) => void, problem: (s: string) => void): void {
  const first = run[0]!;
  const back = run.findIndex((r, i) => i > 0 && r.timeMs < run[i - 1]!.timeMs);
  if (back > 0) {
    const [p, r] = [run[back - 1]!, run[back]!];
    problem(`${id}: the clock of ${who(r)} went back from ${p.time} (${at(p)}) to ${r.time} (${at(r)}): its times order nothing`);
  }
  if (first.seq !== 1)
    v(`${id}: ${who(first)} starts at seq ${first.seq} at ${first.time} (${at(first)}): ${first.seq - 1} earlier write(s) lost`);
  for (let i = 1; i < run.length; i++) {
    const [p, r] = [run[i - 1]!, run[i]!];
    if (r.seq === p.seq + 1) continue;
    if (r.seq > p.seq) {
      v(
        `${id}: ${who(r)} seq jumps from ${p.seq} (${at(p)}, ${p.time}) to ${r.seq} (${at(r)}, ${r.time}): ${r.seq - p.seq - 1} write(s) lost`,
      );
    } else {
      v(
        `${id}: ${who(r)} seq goes from ${p.seq} (${at(p)}, ${p.time}) back to ${r.seq} (${at(r)}, ${r.time}): a duplicated or replayed write` +
          (r.run === undefined ? " (records without a run id: a restarted writer cannot be told apart)" : ""),
      );
    }
  }
}

function checkTokensWithin(id: string, recs: readonly LedgerRecord[], v: (s: string) => void): void {
  let prev: { r: LedgerRecord; t: bigint } | undefined;
  for (const r of recs) {
    if (r.token === undefined) continue;
    const t = tokenValue(r.token);
    if (t === undefined) {
      v(`${id}: ${who(r)} token ${JSON.stringify(r.token)} at ${at(r)} is not a decimal integer: tokens cannot be ordered`);
      return;
    }
    if (prev && t < prev.t) {
      v(`${id}: ${who(r)} token went back from ${prev.t} (${at(prev.r)}, ${prev.r.time}) to ${t} (${at(r)}, ${r.time})`);
    }
    if (!prev || t > prev.t) prev = { r, t };
  }
}

function checkTokensAcross(id: string, older: readonly LedgerRecord[], newer: readonly LedgerRecord[], v: (s: string) => void): void {
  // Within an instance tokens only grow (checked above): the old one's last token against the new one's first.
  const last = older.findLast((r) => r.token !== undefined && tokenValue(r.token) !== undefined);
  const first = newer.find((r) => r.token !== undefined && tokenValue(r.token) !== undefined);
  if (!last || !first) return;
  const [l, f] = [tokenValue(last.token!)!, tokenValue(first.token!)!];
  if (f > l) return;
  v(
    `${id}: token went ${f < l ? "back" : "nowhere"} from ${l} (${who(last)}, ${last.time}, ${at(last)}) to ${f} ` +
      `(${who(first)}, ${first.time}, ${at(first)}): a new holder needs a newer token, or storage cannot refuse the old writer`,
  );
}

function classifyUnreadable(records: readonly LedgerRecord[], unreadable: readonly UnreadableLine[], report: LedgerReport): void {
  if (!unreadable.length) return;
  const byFile = groupBy([...records].sort(byFileOrder), (r) => r.file);
  for (const u of unreadable) {
    const fr = byFile.get(u.file) ?? [];
    const before = fr.filter((r) => r.line < u.line).at(-1);
    const after = fr.find((r) => r.line > u.line);
    const text = JSON.stringify(u.text);
    if (before && after && writerOf(before) === writerOf(after)) {
      report.violations.push(
        `${before.identity}: unreadable line ${u.file}:${u.line} ${text} between two records of ${who(before)} (seq ${before.seq} at ${before.time}, seq ${after.seq} at ${after.time}): a write was cut and its writer went on`,
      );
    } else if (u.atEnd) {
      report.problems.push(
        `${u.file}:${u.line}: torn last line ${text}${before ? ` after ${who(before)} seq ${before.seq} at ${before.time}` : ""}: a write cut off (a power-off) or still in progress`,
      );
    } else {
      report.problems.push(
        `${u.file}:${u.line}: unreadable line ${text}${before ? ` after ${who(before)} seq ${before.seq} at ${before.time}` : ""}${after ? `, before ${who(after)} seq ${after.seq} at ${after.time}` : ""}: a write cut off when its writer stopped`,
      );
    }
  }
}

// ---------------------------------------------------------------------------------------------------
// Process-table evidence

/** One process of a node, as captured from the node's cgroup subtree. */
export interface NodeProcess {
  pid: number;
  /** /proc/<pid>/cmdline, NULs as spaces. */
  cmdline: string;
  /** From the kubelet's pod cgroup (`…/pod<uid>/…`) when the process belongs to a pod. */
  podUID?: string;
  /** The cgroup below the pod's (the container, or the sandbox's pause). */
  containerID?: string;
}

/** Every process of a node at one moment, captured at a power change (before the kill, and after it). */
export interface ProcessSnapshot {
  /** ms since the epoch, when the capture was taken. */
  time: number;
  node: string;
  /** What triggered the capture, e.g. "power off: before kill", "power off: after kill". */
  event?: string;
  processes: NodeProcess[];
}

/** An instance that started while earlier instances of its identity had existed. */
export interface InstanceStart {
  identity: string;
  podUID: string;
  /** ms since the epoch: its first ledger record, or the pod Running. */
  time: number;
  /** Pod uids of the earlier instances of the identity. */
  previous: string[];
}

export interface ProcessReport {
  starts: number;
  snapshots: number;
  violations: string[];
}

/** The start of every instance after an identity's first, from the ledger (its first record by the writer's clock). */
export function instanceStarts(report: Pick<LedgerReport, "instances">): InstanceStart[] {
  const out: InstanceStart[] = [];
  for (const [id, insts] of groupBy(report.instances, (i) => i.identity)) {
    insts.forEach((n, k) => {
      if (k) out.push({ identity: id, podUID: n.podUID, time: n.earliest.timeMs, previous: insts.slice(0, k).map((x) => x.podUID) });
    });
  }
  return out;
}

const iso = (t: number) => new Date(t).toISOString();
const listProcs = (ps: readonly NodeProcess[]) =>
  ps
    .slice(0, 5)
    .map(
      (p) => `pid ${p.pid} ${JSON.stringify(p.cmdline.slice(0, 60))}${p.containerID ? ` (container ${p.containerID.slice(0, 12)})` : ""}`,
    )
    .join(", ") + (ps.length > 5 ? ` and ${ps.length - 5} more` : "");

/**
 * Reports every process of an old instance that was alive when its replacement started, by the
 * captures: a capture at or after the start that still lists it, or — when none does — the node's
 * last capture before the start listing it with no later capture showing it gone. A node without any
 * capture says nothing (the ledger and the timeline checker speak for it): capture after the kill
 * too, or a power-off's own "before" capture is the last word.
 */
/**
 * storageFenced(node, t): the node's storage was fenced at time t (a storage fence reported Fenced and not lifted
 * since). An old instance on such a node may run by design (StorageFenced evidence releases volumes, never pods):
 * its processes are not a violation, and what it could still write is the ledger checker's to judge.
 */
export function checkProcessTables(
  snapshots: readonly ProcessSnapshot[],
  starts: readonly InstanceStart[],
  storageFenced: (node: string, t: number) => boolean = () => false,
): ProcessReport {
  const report: ProcessReport = { starts: starts.length, snapshots: snapshots.length, violations: [] };
  const byNode = groupBy(
    [...snapshots].sort((a, b) => a.time - b.time),
    (s) => s.node,
  );
  for (const s of starts) {
    for (const old of s.previous) {
      for (const [node, snaps] of byNode) {
        if (storageFenced(node, s.time)) continue;
        const of = (snap: ProcessSnapshot) => snap.processes.filter((p) => p.podUID === old);
        const later = snaps.find((snap) => snap.time >= s.time && of(snap).length);
        const ev = (snap: ProcessSnapshot) => `${iso(snap.time)}${snap.event ? ` (${snap.event})` : ""}`;
        if (later) {
          report.violations.push(
            `${s.identity}: ${of(later).length} process(es) of old pod ${old} on ${node} still alive at ${ev(later)}, ` +
              `after its replacement pod ${s.podUID} started at ${iso(s.time)}: ${listProcs(of(later))}`,
          );
          continue;
        }
        const last = snaps.filter((snap) => snap.time < s.time).at(-1);
        if (last && of(last).length) {
          report.violations.push(
            `${s.identity}: the last capture of ${node} before pod ${s.podUID} started at ${iso(s.time)}, at ${ev(last)}, ` +
              `shows ${of(last).length} process(es) of old pod ${old} alive and no later capture shows them gone: ${listProcs(of(last))}`,
          );
        }
      }
    }
  }
  return report;
}

const POD_SEGMENT = /^(?:.*-)?pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})(?:\.slice)?$/;
const CONTAINER_SEGMENT = /^(?:[a-z-]+-)?([0-9a-f]{64})(?:\.scope)?$/;

/**
 * The pod and container of a process from its /proc/<pid>/cgroup text: the kubelet's pod cgroup
 * (cgroupsPerQOS) is `…/kubepods/<qos>/pod<uid>/<container id>` with the cgroupfs driver,
 * `…kubepods-<qos>-pod<uid with _>.slice/cri-containerd-<id>.scope` with systemd.
 */
export function podOfCgroup(text: string): { podUID?: string; containerID?: string } {
  for (const line of text.split("\n")) {
    const path = line.split(":").slice(2).join(":");
    const segs = path.split("/");
    const i = segs.findIndex((s) => POD_SEGMENT.test(s));
    if (i < 0) continue;
    const podUID = POD_SEGMENT.exec(segs[i]!)![1]!.replaceAll("_", "-");
    const c = segs[i + 1] !== undefined ? CONTAINER_SEGMENT.exec(segs[i + 1]!) : null;
    return c ? { podUID, containerID: c[1]! } : { podUID };
  }
  return {};
}

/**
 * Every process in a cgroup subtree (each `cgroup.procs` below `cgroupDir`), with its command line and
 * pod. A process that exits while being read is left out: it was not alive at the end of the capture.
 */
export function readCgroupProcesses(cgroupDir: string, procRoot = "/proc"): NodeProcess[] {
  const pids = new Set<number>();
  const walk = (dir: string) => {
    let entries;
    try {
      entries = readdirSync(dir, { withFileTypes: true });
    } catch {
      return; // removed while walking
    }
    for (const e of entries) {
      if (e.isDirectory()) walk(join(dir, e.name));
      else if (e.name === "cgroup.procs") {
        try {
          for (const l of readFileSync(join(dir, e.name), "utf8").split("\n")) if (/^\d+$/.test(l.trim())) pids.add(Number(l));
        } catch {
          // removed while walking
        }
      }
    }
  };
  walk(cgroupDir);
  const out: NodeProcess[] = [];
  for (const pid of [...pids].sort((a, b) => a - b)) {
    try {
      const cmdline = readFileSync(join(procRoot, String(pid), "cmdline"), "utf8")
        .replaceAll("\u0000", " ")
        .trim();
      const pod = podOfCgroup(readFileSync(join(procRoot, String(pid), "cgroup"), "utf8"));
      out.push({ pid, cmdline, ...pod });
    } catch {
      // exited meanwhile
    }
  }
  return out;
}
