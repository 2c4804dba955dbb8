// What the health controller retains while the storm guard holds (the 5,000-node run of 2026-11-28 ran out of heap
// two minutes into a mass silence), without a lab: the real NodeHealthController and the real EventRecorder over
// synthetic caches of N nodes × P pods, a share of the nodes silent (partitioned, so more than maxUnhealthyNodes 50%
// makes the storm guard hold every fence), against stub API calls that each resolve after --write-ms (a loaded
// apiserver: the lab's took seconds). Runs --passes fleet passes --every ms apart, then prints the live heap after a
// full GC against the heap before the first pass, and the NodeDown work the controller holds.
//   node --expose-gc bench/storm-heap.ts [--nodes N] [--pods-per-node P] [--silent-share S] [--passes K] [--every MS] [--write-ms MS]
//   node --expose-gc bench/storm-heap.ts --sweep   (N = 500, 1,000, 2,000 × share 0, 0.6, 0.9, each in its own process)
import { spawnSync } from "node:child_process";
import { setTimeout as sleep } from "node:timers/promises";
import { parseArgs } from "node:util";
import { pino } from "pino";
import { DateTime } from "luxon";
import type { V1Lease, V1Node, V1Pod } from "@kubernetes/client-node";
import { KubeConfig } from "@kubernetes/client-node";
import type { FencingPolicy } from "../src/api/v1alpha1.ts";
import { NodeHealthController } from "../src/controllers/node-health.ts";
import { podsByNode } from "../src/decide/fleet.ts";
import { EventRecorder } from "../src/runtime/events.ts";

const { values } = parseArgs({
  options: {
    nodes: { type: "string", default: "1000" },
    "pods-per-node": { type: "string", default: "30" },
    "silent-share": { type: "string", default: "0.75" },
    passes: { type: "string", default: "20" },
    every: { type: "string", default: "200" },
    "write-ms": { type: "string", default: "500" },
    sweep: { type: "boolean", default: false },
    // The operator's own logger (pino to stdout, asynchronous): run with stdout piped to a reader that stalls, e.g.
    // `| (sleep 30; cat >/dev/null)`, to see what its buffer holds. The figures then go to stderr.
    log: { type: "boolean", default: false },
  },
});

if (values.sweep) {
  for (const nodes of [500, 1000, 2000])
    for (const share of [0, 0.6, 0.9]) {
      const args = [...process.execArgv, process.argv[1]!, "--nodes", String(nodes), "--silent-share", String(share)];
      for (const k of ["pods-per-node", "passes", "every", "write-ms"] as const) args.push(`--${k}`, values[k]!);
      const r = spawnSync(process.execPath, args, { stdio: "inherit" });
      if (r.status !== 0) process.exit(r.status ?? 1);
    }
  process.exit(0);
}

const gc = (globalThis as { gc?: () => void }).gc;
if (!gc) throw new Error("run with node --expose-gc");
const nodeCount = Number(values.nodes);
const perNode = Number(values["pods-per-node"]);
const share = Number(values["silent-share"]);
const [passes, every, writeMs] = [Number(values.passes), Number(values.every), Number(values["write-ms"])];
const silentCount = Math.round(nodeCount * share);

const now = DateTime.utc();
const nodes = new Map<string, V1Node>();
const leases = new Map<string, V1Lease>();
for (let i = 0; i < nodeCount; i++) {
  const name = `scale-${String(i + 1).padStart(5, "0")}`;
  const down = i < silentCount;
  const beat = (down ? now.minus({ seconds: 120 }) : now).toISO();
  nodes.set(name, {
    metadata: { name, uid: `uid-${name}`, labels: { "kubernetes.io/hostname": name } },
    status: {
      nodeInfo: { bootID: `boot-${name}` } as never,
      conditions: [{ type: "Ready", status: down ? "Unknown" : "True", lastHeartbeatTime: beat } as never],
    },
  });
  leases.set(name, { metadata: { name }, spec: { holderIdentity: name, leaseDurationSeconds: 40, renewTime: beat as never } });
}
const pods: V1Pod[] = [];
for (let i = 0; i < nodeCount * perNode; i++) {
  const node = `scale-${String((i % nodeCount) + 1).padStart(5, "0")}`;
  pods.push({
    // Two guarded pods a node, as in the scale lab: the storm guard holds their fences.
    metadata: {
      name: `pod-${i}`,
      namespace: "default",
      uid: `pod-uid-${i}`,
      labels: { app: `app-${i % 500}`, ...(i < 2 * nodeCount ? { "stockade.io/guarded": "true" } : {}) },
    },
    spec: { nodeName: node, containers: [{ name: "app", image: "registry.example/app:1.0" }] },
    status: { phase: "Running", conditions: [{ type: "Ready", status: "True" }] },
  });
}
const byNode = podsByNode(pods);
const policy = {
  apiVersion: "stockade.io/v1alpha1",
  kind: "FencingPolicy",
  metadata: { name: "default", generation: 1 },
  spec: {
    nodeSelector: {},
    detection: { heartbeatTimeoutSeconds: 40, fenceAfterSeconds: 10 },
    escalation: [{ agents: [{ name: "x" }] }],
    guards: { maxConcurrentFences: 100, maxUnhealthyNodes: "50%" },
  },
} as unknown as FencingPolicy;
const inf = <T>(m: Map<string, T>) => ({ list: () => [...m.values()], get: (name: string) => m.get(name), on() {} });
const caches = {
  nodes: inf(nodes),
  leases: inf(leases),
  pods: { list: () => pods },
  pvcsByKey: () => new Map(),
  podsByNode: byNode,
  leaseSilentForMs: () => 0,
  goneNodes: () => [], // no pods bound to a Node that is gone
  leaseOf: (n: string) => leases.get(n),
  pdbs: inf(new Map()),
  policies: inf(new Map([["default", policy]])),
  agents: inf(new Map([["x", {}]])),
  fences: inf(new Map()),
  heartbeatStalenessSeconds: () => 0,
};
const slow = async <T>(v: T): Promise<T> => {
  await sleep(writeMs);
  return v;
};
let podWrites = 0;
let events = 0;
const kube = {
  setPodCondition: async () => {
    podWrites++;
    await slow(undefined);
  },
  replaceStatus: async (_plural: string, obj: unknown) => slow(obj),
  freshHealth: async () => ({}),
  createNodeFence: async () => {
    throw new Error("the storm guard holds: no fence is created");
  },
};
const quiet = { info() {}, warn() {}, error() {}, debug() {}, child: () => quiet };
const kc = new KubeConfig();
kc.loadFromOptions({
  clusters: [{ name: "c", server: "https://127.0.0.1:1" }],
  users: [{ name: "u" }],
  contexts: [{ name: "x", cluster: "c", user: "u" }],
  currentContext: "x",
});
const recorder = new EventRecorder({ kc, log: quiet as never });
// The real recorder's dedup and aggregation state, over a stub of its two API calls.
(recorder as unknown as { core: unknown }).core = {
  createNamespacedEvent: async (r: { body: { metadata: { name: string } } }) => {
    events++;
    return slow(r.body);
  },
  patchNamespacedEvent: async () => slow({}),
};
const ctl = new NodeHealthController({
  caches: caches as never,
  kube: kube as never,
  events: recorder,
  log: values.log ? pino({ base: { instance: "storm-heap" } }) : (quiet as never),
  clock: () => DateTime.utc(),
});

const mib = (b: number) => (b / 2 ** 20).toFixed(1);
const live = () => {
  gc!();
  gc!();
  return process.memoryUsage().heapUsed;
};
const before = live();
let peak = 0;
for (let k = 0; k < passes; k++) {
  await ctl.reconcile();
  peak = Math.max(peak, process.memoryUsage().heapUsed);
  await sleep(every);
}
const after = live();
// What one pass's decision holds while it is applied (the changes, the decisions): live, then let go.
const beforeDecision = live();
const changes = ((d) => {
  const bytes = live() - beforeDecision;
  return { bytes, count: d.nodeDown.length };
})(ctl.decide());
const decisionBytes = changes.bytes;
const verdicts = new Map<string, number>();
for (const d of ctl.decide().decisions) verdicts.set(d.verdict, (verdicts.get(d.verdict) ?? 0) + 1);
const held = verdicts.get("Held") ?? 0;
(values.log ? console.error : console.log)(
  `${nodeCount} nodes × ${perNode} pods, ${silentCount} silent (${held} held by the storm guard), ${passes} passes ${every} ms apart, writes of ${writeMs} ms: ` +
    `retained ${mib(after - before)} MiB over the caches' ${mib(before)} MiB (peak heap ${mib(peak)} MiB); ` +
    `NodeDown backlog ${ctl.nodeDownBacklog()} pod(s), ${podWrites} written, ${events} Events created; ` +
    `a pass's decision holds ${mib(decisionBytes)} MiB while applied (${changes.count} NodeDown changes)`,
);
process.exit(0);
