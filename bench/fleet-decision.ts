// The fleet decision alone (src/decide/fleet.ts, pure): how long one pass takes over a synthetic cluster shaped like
// the scale lab's (nodes over zones, Leases renewed just now, pods bound round-robin with the tolerations Kubernetes
// injects, one in twenty guarded), with `--silent` of the nodes partitioned. No lab, no API server: this isolates
// the decision's own cost from the controller around it (bench/scale.ts measures that, end to end).
// Before each pass `--renewed` Leases are replaced by new objects (renewed now, as their watch events bring them): 200
// is 0.4 s of 5,000 kubelets renewing every 10 s, the passes of a burst; 2,500 is 5 s of them, the steady state's
// pass every 5 s. Then the same passes with the health controller's memo (src/decide/fleet-memo.ts).
//   node bench/fleet-decision.ts [--nodes N] [--pods M] [--silent S] [--runs R] [--renewed K]
import { parseArgs } from "node:util";
import { DateTime } from "luxon";
import type { V1Lease, V1Node, V1Pod } from "@kubernetes/client-node";
import type { FencingPolicy } from "../src/api/v1alpha1.ts";
import { decideFleet, podsByNode } from "../src/decide/fleet.ts";
import { FleetMemo } from "../src/decide/fleet-memo.ts";
import { LeaseObserver } from "../src/kube/lease-observer.ts";

const { values } = parseArgs({
  options: {
    nodes: { type: "string", default: "5000" },
    pods: { type: "string", default: "150000" },
    silent: { type: "string", default: "50" },
    runs: { type: "string", default: "20" },
    renewed: { type: "string", default: "200" },
  },
});
const [nodes, pods, silent, runs] = [values.nodes, values.pods, values.silent, values.runs].map(Number) as [number, number, number, number];
const renewed = Number(values.renewed);
const now = DateTime.utc();

const nodeList: V1Node[] = [];
const leases = new Map<string, V1Lease>();
for (let i = 0; i < nodes; i++) {
  const name = `scale-${String(i + 1).padStart(5, "0")}`;
  const down = i < silent;
  const beat = down ? now.minus({ seconds: 120 }) : now.minus({ seconds: i % 10 });
  nodeList.push({
    metadata: {
      name,
      uid: `uid-${name}`,
      labels: { "topology.kubernetes.io/zone": `zone-${"abc"[i % 3]}`, "kubernetes.io/hostname": name },
    },
    status: {
      nodeInfo: { bootID: `boot-${name}` } as never,
      conditions: [
        // ISO strings, as a watch event carries them (most of the cache at steady state), not a list's Dates.
        { type: "Ready", status: down ? "Unknown" : "True", lastHeartbeatTime: beat.minus({ seconds: 60 }).toISO() } as never,
      ],
    },
  });
  leases.set(name, { metadata: { name }, spec: { holderIdentity: name, leaseDurationSeconds: 40, renewTime: beat.toISO() as never } });
}
const tolerations = [
  { key: "node.kubernetes.io/not-ready", operator: "Exists", effect: "NoExecute", tolerationSeconds: 300 },
  { key: "node.kubernetes.io/unreachable", operator: "Exists", effect: "NoExecute", tolerationSeconds: 300 },
];
const podList: V1Pod[] = [];
for (let i = 0; i < pods; i++) {
  const guarded = i % 20 === Math.floor(i / nodes) % 20;
  podList.push({
    metadata: {
      name: `pod-${i}`,
      namespace: "default",
      uid: `pod-uid-${i}`,
      labels: { app: `app-${i % 500}`, ...(guarded ? { "stockade.io/guarded": "true" } : {}) },
      creationTimestamp: now.minus({ hours: 1 }).toJSDate(),
    },
    spec: {
      nodeName: nodeList[i % nodes]!.metadata!.name!,
      containers: [{ name: "app", image: "registry.example/app:1.0" }],
      tolerations,
    },
    status: { phase: "Running", conditions: [{ type: "Ready", status: "True" }] },
  });
}
const policy = {
  apiVersion: "stockade.io/v1alpha1",
  kind: "FencingPolicy",
  metadata: { name: "default", generation: 1 },
  spec: {
    nodeSelector: {},
    detection: { heartbeatTimeoutSeconds: 40, fenceAfterSeconds: 10, honorPodTolerations: true, injectedTolerationSeconds: 300 },
    guardedPods: { statefulSets: true, readWriteOnceVolumes: true },
    escalation: [{ agents: [{ name: "x" }] }],
    guards: { maxConcurrentFences: 100, maxUnhealthyNodes: "50%" },
  },
} as unknown as FencingPolicy;

// When each renewal was seen, as the operator's leases cache records it (asked for every node on every pass).
const observer = new LeaseObserver();
for (const l of leases.values()) observer.observe(l);
observer.synced();

const input = {
  nodes: nodeList,
  leases,
  leaseSilentMs: (n: string, l: V1Lease) => observer.silentForMs(n, l.spec?.renewTime),
  // Built once, as the operator's cache keeps its index.
  pods: podsByNode(podList),
  pvcs: new Map(),
  pdbs: [],
  policies: [policy],
  fences: new Map(),
  watchStalenessSeconds: 0,
};
let fenced = 0;
const quantiles = (times: number[]) => {
  times.sort((a, b) => a - b);
  const at = (q: number) => times[Math.min(times.length - 1, Math.ceil(q * times.length) - 1)]!.toFixed(1);
  return `p50 ${at(0.5)} ms, p99 ${at(0.99)} ms`;
};
// Before each pass, timed or not, `renewed` Leases are replaced by new objects renewed now, as watch events bring them.
const alive = nodeList.slice(silent).map((n) => n.metadata!.name!);
let next = 0;
const renew = () => {
  const renewedAt = DateTime.utc().toISO();
  for (let k = 0; k < renewed && alive.length; k++) {
    const name = alive[next++ % alive.length]!;
    const l: V1Lease = { metadata: { name }, spec: { ...leases.get(name)!.spec, renewTime: renewedAt as never } };
    leases.set(name, l);
    observer.observe(l);
  }
};
const full: number[] = [];
for (let r = 0; r < runs; r++) {
  renew();
  const t0 = performance.now();
  const d = decideFleet({ ...input, now: DateTime.utc() });
  full.push(performance.now() - t0);
  fenced = d.create.length;
}
console.log(
  `fleet decision over ${nodes} nodes / ${pods} pods (${silent} partitioned, ${fenced} fences decided), ${renewed} Leases renewed before each pass: ${runs} runs, ${quantiles(full)}`,
);

// With the memo: the first pass fills it (not counted).
const memo = new FleetMemo();
decideFleet({ ...input, now: DateTime.utc(), memo });
const incremental: number[] = [];
for (let r = 0; r < runs; r++) {
  renew();
  const t0 = performance.now();
  const d = decideFleet({ ...input, now: DateTime.utc(), memo });
  incremental.push(performance.now() - t0);
  fenced = d.create.length;
}
console.log(`  with the memo (${fenced} fences decided): ${runs} runs, ${quantiles(incremental)}`);
