// Claim-lock gate benchmark: how long a new pod on a guarded claim waits behind the stockade.io/claim-lock
// scheduling gate when nothing else holds its claim — the start latency the lock adds. On a kwok lab (the
// gate is API work: webhook, fresh reads, two compare-and-swap writes), N pods, each on its own
// ReadWriteOnce claim, are created one every --interval-ms; each one's wait is measured from just before its
// create call to the watch event that shows it without the gate.
//   node bench/claim-gate.ts [--pods N] [--interval-ms MS]
import { parseArgs } from "node:util";
import type { V1Pod } from "@kubernetes/client-node";
import { Bed, NS } from "../lab/bed.ts";
import { waitFor } from "../lab/health.ts";
import { isGated } from "../src/decide/claim-lock.ts";
import { Informer } from "../src/runtime/informer.ts";

const { values } = parseArgs({ options: { pods: { type: "string", default: "200" }, "interval-ms": { type: "string", default: "100" } } });
const n = Number(values.pods);
const interval = Number(values["interval-ms"]);
if (!Number.isInteger(n) || n < 1 || n > 5000) throw new Error(`--pods must be 1-5000 (got ${values.pods})`);
if (!Number.isInteger(interval) || interval < 0) throw new Error(`--interval-ms must be a whole number (got ${values["interval-ms"]})`);

const bed = await Bed.up({ nodes: 4, name: "bench-gate", runtime: "kwok", webhooks: true });
try {
  await bed.policy("default", {});
  // At the log level it ships with: the bed's debug logging of every watch event is not what a cluster runs.
  const operator = await bed.startOperator({ extraArgs: ["--log-level", "info"] });
  const core = bed.lab.core;
  for (let i = 0; i < n; i++)
    await core.createNamespacedPersistentVolumeClaim({
      namespace: NS,
      body: { metadata: { name: `gate-${i}` }, spec: { accessModes: ["ReadWriteOnce"], resources: { requests: { storage: "1Mi" } } } },
    });
  const started = new Map<string, number>();
  const created = new Map<string, number>();
  const lifted = new Map<string, number>();
  const pods = new Informer<V1Pod>({
    kc: bed.lab.kc,
    path: `/api/v1/namespaces/${NS}/pods`,
    list: () => core.listNamespacedPod({ namespace: NS }),
  });
  const seen = (p: V1Pod) => {
    const name = p.metadata?.name ?? "";
    if (started.has(name) && !lifted.has(name) && !isGated(p)) lifted.set(name, performance.now());
  };
  pods.on("add", seen);
  pods.on("update", seen);
  await pods.start();
  let gatedAtCreate = 0;
  for (let i = 0; i < n; i++) {
    const name = `gate-${i}`;
    started.set(name, performance.now());
    const p = await core.createNamespacedPod({
      namespace: NS,
      body: {
        metadata: { name },
        spec: {
          containers: [{ name: "c", image: "registry.k8s.io/pause:3.10" }],
          volumes: [{ name: "v", persistentVolumeClaim: { claimName: name } }],
        },
      },
    });
    created.set(name, performance.now());
    if (isGated(p)) gatedAtCreate++;
    if (interval) await new Promise((r) => setTimeout(r, interval));
  }
  await waitFor(`all ${n} gates lifted`, () => lifted.size === n, { timeoutMs: 120_000, intervalMs: 100 });
  pods.stop();
  const pct = (xs: number[], p: number) => {
    const v = [...xs].sort((a, b) => a - b);
    return v[Math.min(v.length - 1, Math.ceil((p / 100) * v.length) - 1)]!;
  };
  const line = (what: string, xs: number[]) =>
    `${what}: p50 ${pct(xs, 50).toFixed(0)} ms, p90 ${pct(xs, 90).toFixed(0)} ms, p99 ${pct(xs, 99).toFixed(0)} ms, max ${Math.max(...xs).toFixed(0)} ms`;
  const total = [...started].map(([k, t]) => lifted.get(k)! - t);
  console.log(`${n} pods, one every ${interval} ms; ${gatedAtCreate} gated at creation`);
  console.log(line("create call → gate lifted (seen by a watch)", total));
  console.log(
    line(
      "  of which the create call (webhook included)",
      [...started].map(([k, t]) => created.get(k)! - t),
    ),
  );
  console.log(
    line(
      "  of which create answered → gate lifted",
      [...created].map(([k, t]) => lifted.get(k)! - t),
    ),
  );
  // The operator's own account of each grant (src/controllers/claim-lock.ts logs its phases).
  const phases = bed
    .operatorLog(operator)
    .flatMap((l) => (l.phases ? [l.phases as Record<string, number>] : []))
    .filter((ph) => ph.pods !== undefined);
  if (phases.length)
    for (const k of ["read", "list", "grant", "lift"])
      console.log(
        line(
          `  operator: ${k}`,
          phases.map((ph) => ph[k]!),
        ),
      );
  if (gatedAtCreate !== n) process.exitCode = 1;
} finally {
  await bed.down();
}
