// What the operator's cache costs in memory at scale, without a lab (issue 12): N pods shaped like the scale lab's
// (a Running Deployment pod as the apiserver serves it, one in twenty guarded, plain JSON as a watch or a streamed
// list delivers it, slimmed as the pod cache does), nodes shaped like kwok's with their Leases, then fleet passes.
// Prints the live heap after a full GC at each step, what V8 holds (heap total, new space) and RSS, and the pass
// times. Run it under the V8 flags to compare, e.g. `node --expose-gc --max-semi-space-size=16 bench/cache-heap.ts`.
// --churn-seconds S then runs the steady churn of a burst for S seconds: a fleet pass every 300 ms while 500 Leases a
// second are replaced by freshly parsed ones (5,000 kubelets renewing), and prints the passes and the collections.
// --memory-limit Q runs it all in a memory cgroup of Q (root), as the Deployment's container runs the operator:
// V8 sizes its heap, and its young generation, from that limit.
//   npm run bench:cache-heap -- [--nodes N] [--pods M] [--churn-seconds S] [--memory-limit 512Mi]
//   e.g. node --expose-gc [--max-semi-space-size=16] bench/cache-heap.ts --churn-seconds 60 --memory-limit 512Mi
import { spawn } from "node:child_process";
import { once } from "node:events";
import { performance, PerformanceObserver } from "node:perf_hooks";
import { parseArgs } from "node:util";
import { getHeapSpaceStatistics } from "node:v8";
import { DateTime } from "luxon";
import type { V1Lease, V1Node, V1Pod } from "@kubernetes/client-node";
import { slimNode, slimPod } from "../src/kube/slim.ts";
import { decideFleet, podsByNode } from "../src/decide/fleet.ts";
import { createMemoryCgroup, execInCgroup, memoryQuantityBytes } from "../lab/memory-cgroup.ts";

const { values } = parseArgs({
  options: {
    nodes: { type: "string", default: "5000" },
    pods: { type: "string", default: "150000" },
    "churn-seconds": { type: "string", default: "0" },
    "memory-limit": { type: "string" },
  },
});
const IN_CGROUP = "STOCKADE_BENCH_IN_CGROUP";
if (values["memory-limit"] && !process.env[IN_CGROUP]) {
  // Again, in the cgroup from its first instruction (lab/bed.ts does the same for the operator).
  const cg = createMemoryCgroup(`stockade-cache-heap-${process.pid}`, memoryQuantityBytes(values["memory-limit"]));
  const [cmd, args] = execInCgroup(cg, process.execPath, [...process.execArgv, ...process.argv.slice(1)]);
  const child = spawn(cmd, args, { stdio: "inherit", env: { ...process.env, [IN_CGROUP]: "1" } });
  const [code] = (await once(child, "exit")) as [number | null];
  cg.remove();
  process.exit(code ?? 1);
}
const [nodeCount, podCount, churnSeconds] = [Number(values.nodes), Number(values.pods), Number(values["churn-seconds"])];
if (!(churnSeconds >= 0)) throw new Error(`--churn-seconds must be a number ≥ 0 (got ${values["churn-seconds"]})`);
if (!Number.isInteger(nodeCount) || nodeCount < 1 || !Number.isInteger(podCount) || podCount < 0)
  throw new Error(`--nodes must be a whole number ≥ 1 and --pods ≥ 0 (got ${values.nodes}, ${values.pods})`);
const gc = (globalThis as { gc?: () => void }).gc;
if (!gc) throw new Error("run with node --expose-gc (the npm script does)");

const mib = (b: number) => `${(b / 2 ** 20).toFixed(0)} MiB`;
function report(what: string): void {
  gc!();
  gc!();
  const m = process.memoryUsage();
  const young = getHeapSpaceStatistics().find((s) => s.space_name === "new_space")?.space_size ?? 0;
  console.log(`${what}: live heap ${mib(m.heapUsed)}; V8 holds ${mib(m.heapTotal)} (new space ${mib(young)}); RSS ${mib(m.rss)}`);
}

const now = DateTime.utc();
const nodeName = (i: number) => `scale-${String(i + 1).padStart(5, "0")}`;
const ip = (i: number) => `10.${200 + (i >> 16)}.${(i >> 8) & 255}.${i & 255}`;
const t = (s: number) => now.minus({ seconds: s }).toISO({ suppressMilliseconds: true });

/** A Running pod as the apiserver serves it (the informer drops its managedFields). */
function pod(i: number): V1Pod {
  const app = `app-${i % 500}`;
  const started = t(3600 - (i % 600));
  const text = JSON.stringify({
    metadata: {
      name: `pod-${String(i).padStart(6, "0")}`,
      namespace: "default",
      uid: `e0697850-5422-42bc-99ab-${String(i).padStart(12, "0")}`,
      resourceVersion: String(100_000 + i),
      generation: 1,
      creationTimestamp: started,
      labels: { app, "pod-template-hash": "5d8f7c9b6", ...(i % 20 === 0 ? { "stockade.io/guarded": "true" } : {}) },
      managedFields: [
        {
          manager: "kubernetes-client-javascript",
          operation: "Update",
          apiVersion: "v1",
          time: started,
          fieldsType: "FieldsV1",
          fieldsV1: {
            "f:metadata": { "f:labels": { ".": {}, "f:app": {} } },
            "f:spec": { "f:containers": { 'k:{"name":"app"}': { ".": {}, "f:image": {}, "f:name": {} } }, "f:nodeName": {} },
          },
        },
        {
          manager: "kwok",
          operation: "Update",
          apiVersion: "v1",
          time: started,
          fieldsType: "FieldsV1",
          fieldsV1: { "f:status": { "f:conditions": {}, "f:phase": {}, "f:podIP": {} } },
          subresource: "status",
        },
      ],
    },
    spec: {
      volumes: [
        {
          name: "kube-api-access-v8lxv",
          projected: {
            sources: [
              { serviceAccountToken: { expirationSeconds: 3607, path: "token" } },
              { configMap: { name: "kube-root-ca.crt", items: [{ key: "ca.crt", path: "ca.crt" }] } },
              { downwardAPI: { items: [{ path: "namespace", fieldRef: { apiVersion: "v1", fieldPath: "metadata.namespace" } }] } },
            ],
            defaultMode: 420,
          },
        },
      ],
      containers: [
        {
          name: "app",
          image: "registry.example/app:1.0",
          ports: [{ name: "http", containerPort: 8080, protocol: "TCP" }],
          resources: { requests: { cpu: "10m", memory: "16Mi" } },
          volumeMounts: [{ name: "kube-api-access-v8lxv", readOnly: true, mountPath: "/var/run/secrets/kubernetes.io/serviceaccount" }],
          terminationMessagePath: "/dev/termination-log",
          terminationMessagePolicy: "File",
          imagePullPolicy: "IfNotPresent",
        },
      ],
      restartPolicy: "Always",
      terminationGracePeriodSeconds: 30,
      dnsPolicy: "ClusterFirst",
      serviceAccountName: "default",
      serviceAccount: "default",
      nodeName: nodeName(i % nodeCount),
      securityContext: {},
      schedulerName: "default-scheduler",
      tolerations: ["not-ready", "unreachable"].map((k) => ({
        key: `node.kubernetes.io/${k}`,
        operator: "Exists",
        effect: "NoExecute",
        tolerationSeconds: 300,
      })),
      priority: 0,
      enableServiceLinks: true,
      preemptionPolicy: "PreemptLowerPriority",
    },
    status: {
      phase: "Running",
      conditions: ["Initialized", "Ready", "ContainersReady"].map((type) => ({
        type,
        status: "True",
        lastProbeTime: null,
        lastTransitionTime: started,
      })),
      podIP: ip(i),
      podIPs: [{ ip: ip(i) }],
      startTime: started,
      containerStatuses: [
        {
          name: "app",
          state: { running: { startedAt: started } },
          lastState: {},
          ready: true,
          restartCount: 0,
          image: "registry.example/app:1.0",
          imageID: "",
        },
      ],
      qosClass: "Burstable",
    },
  });
  return JSON.parse(text) as V1Pod; // parsed on its own, as each watch event is
}

function node(i: number): V1Node {
  const name = nodeName(i);
  return JSON.parse(
    JSON.stringify({
      metadata: {
        name,
        uid: `${String(i).padStart(8, "0")}-0000-4000-8000-000000000000`,
        resourceVersion: "123456",
        creationTimestamp: t(4000),
        labels: {
          "beta.kubernetes.io/arch": "amd64",
          "beta.kubernetes.io/os": "linux",
          "kubernetes.io/arch": "amd64",
          "kubernetes.io/hostname": name,
          "kubernetes.io/os": "linux",
          "kubernetes.io/role": "agent",
          type: "kwok",
          "topology.kubernetes.io/zone": `zone-${"abc"[i % 3]}`,
          "lab.stockade.io/scale": "on",
        },
        annotations: { "node.alpha.kubernetes.io/ttl": "0", "kwok.x-k8s.io/node": "fake" },
      },
      spec: { providerID: `kwok://${name}` },
      status: {
        addresses: [{ type: "InternalIP", address: ip(i) }],
        allocatable: { cpu: "32", memory: "256Gi", pods: "110" },
        capacity: { cpu: "32", memory: "256Gi", pods: "110" },
        conditions: ["Ready", "MemoryPressure", "DiskPressure", "PIDPressure", "NetworkUnavailable"].map((type) => ({
          type,
          status: type === "Ready" ? "True" : "False",
          lastHeartbeatTime: t(i % 10),
          lastTransitionTime: t(4000),
          reason: type,
          message: `kubelet ${type}`,
        })),
        daemonEndpoints: { kubeletEndpoint: { Port: 10250 } },
        nodeInfo: {
          architecture: "amd64",
          bootID: `boot-${name}`,
          containerRuntimeVersion: "kwok",
          kernelVersion: "kwok",
          kubeProxyVersion: "",
          kubeletVersion: "kwok",
          machineID: "",
          operatingSystem: "linux",
          osImage: "",
          systemUUID: "",
        },
        phase: "Running",
      },
    }),
  ) as V1Node;
}

report("start");
const pods = new Map<string, V1Pod>();
for (let i = 0; i < podCount; i++) {
  const raw = pod(i);
  raw.metadata!.managedFields = undefined; // as the informer does
  const p = slimPod(raw);
  pods.set(`default/${p.metadata!.name}`, p);
}
report(`${podCount} slim pods`);
const nodes = new Map<string, V1Node>();
const leases = new Map<string, V1Lease>();
for (let i = 0; i < nodeCount; i++) {
  const name = nodeName(i);
  nodes.set(name, slimNode(node(i)));
  leases.set(
    name,
    JSON.parse(
      JSON.stringify({
        metadata: {
          name,
          namespace: "kube-node-lease",
          uid: `l-${name}`,
          resourceVersion: "1234567",
          ownerReferences: [{ apiVersion: "v1", kind: "Node", name, uid: `n-${name}` }],
        },
        spec: { holderIdentity: name, leaseDurationSeconds: 40, renewTime: now.minus({ seconds: i % 10 }).toISO() },
      }),
    ) as V1Lease,
  );
}
report(`+ ${nodeCount} nodes and Leases`);
const policy = {
  apiVersion: "stockade.io/v1alpha1",
  kind: "FencingPolicy",
  metadata: { name: "default" },
  spec: {
    nodeSelector: {},
    detection: {},
    escalation: [{ agents: [{ name: "instant" }] }],
    guards: { maxUnhealthyNodes: "50%", maxConcurrentFences: 50 },
  },
};
const input = (byNode = podsByNode([...pods.values()])) =>
  ({
    now: DateTime.utc(),
    nodes: [...nodes.values()],
    leases,
    pods: byNode,
    pvcs: new Map(),
    pdbs: [],
    policies: [policy],
    fences: new Map(),
    watchStalenessSeconds: 0,
  }) as never;
let last: ReturnType<typeof decideFleet> | undefined;
const times: number[] = [];
for (let k = 0; k < 6; k++) {
  const t0 = performance.now();
  last = decideFleet(input());
  times.push(performance.now() - t0);
}
console.log(`fleet passes: ${times.map((x) => x.toFixed(0)).join(", ")} ms (${last!.decisions.length} node decisions)`);
report("+ the last decision kept");

if (churnSeconds > 0) {
  const gcs = { n: 0, ms: 0, major: 0, majorMs: 0, max: 0 };
  const obs = new PerformanceObserver((l) => {
    for (const e of l.getEntries()) {
      gcs.n++;
      gcs.ms += e.duration;
      gcs.max = Math.max(gcs.max, e.duration);
      const kind = (e as unknown as { detail?: { kind?: number } }).detail?.kind;
      if (kind === 4 /* major */) [gcs.major, gcs.majorMs] = [gcs.major + 1, gcs.majorMs + e.duration];
    }
  });
  obs.observe({ entryTypes: ["gc"] });
  // The operator's cache indexes pods by node once, not per pass.
  const byNode = podsByNode([...pods.values()]);
  const names = [...leases.keys()];
  const passes: number[] = [];
  let renewed = 0;
  const renew = setInterval(() => {
    for (let k = 0; k < 50; k++) {
      const name = names[renewed++ % names.length]!;
      const l = leases.get(name)!;
      leases.set(name, JSON.parse(JSON.stringify({ ...l, spec: { ...l.spec, renewTime: DateTime.utc().toISO() } })) as V1Lease);
    }
  }, 100);
  const t0 = performance.now();
  await new Promise<void>((resolve) => {
    const pass = () => {
      const a = performance.now();
      last = decideFleet(input(byNode));
      passes.push(performance.now() - a);
      if (performance.now() - t0 < churnSeconds * 1000) setTimeout(pass, 300);
      else resolve();
    };
    pass();
  });
  clearInterval(renew);
  obs.disconnect();
  passes.sort((a, b) => a - b);
  const q = (f: number) => passes[Math.min(passes.length - 1, Math.floor(f * passes.length))]!.toFixed(0);
  console.log(
    `churn ${churnSeconds} s: ${passes.length} fleet passes, p50 ${q(0.5)} / p99 ${q(0.99)} / max ${q(1)} ms; ${renewed} Leases replaced; ` +
      `GC ${gcs.n} × ${gcs.ms.toFixed(0)} ms (major ${gcs.major} × ${gcs.majorMs.toFixed(0)} ms), longest pause ${gcs.max.toFixed(0)} ms`,
  );
  report("after the churn");
}
