// Claim-lock gate benchmark: how long a new pod on a guarded claim waits behind the stockade.io/claim-lock
// scheduling gate when nothing else holds its claim — the start latency the lock adds. On a kwok lab (the
// gate is API work: webhook, fresh reads, two compare-and-swap writes), N pods, each on its own
// ReadWriteOnce claim, are created one every --interval-ms; each one's wait is measured from just before its
// create call to the watch event that shows it without the gate.
//   node bench/claim-gate.ts [--pods N] [--interval-ms MS]
import { parseArgs } from "node:util";
import { HttpMethod, IsomorphicFetchHttpLibrary, RequestContext, type KubeConfig, type V1Pod } from "@kubernetes/client-node";
import { Bed, NS } from "../lab/bed.ts";
import { waitFor } from "../lab/health.ts";
import { isGated } from "../src/decide/claim-lock.ts";
import { Informer } from "../src/runtime/informer.ts";

const { values } = parseArgs({ options: { pods: { type: "string", default: "200" }, "interval-ms": { type: "string", default: "100" } } });
const n = Number(values.pods);
/** Lists of the namespace in each encoding after the run (the gzip comparison). */
const LISTS_EACH = 100;
const interval = Number(values["interval-ms"]);
if (!Number.isInteger(n) || n < 1 || n > 5000) throw new Error(`--pods must be 1-5000 (got ${values.pods})`);
if (!Number.isInteger(interval) || interval < 0) throw new Error(`--interval-ms must be a whole number (got ${values["interval-ms"]})`);

/** The apiserver's histogram of how long fresh (consistent) pod lists waited for its watch cache: bucket (s) → count. */
async function podListWaits(kc: KubeConfig): Promise<Map<string, number>> {
  const ctx = new RequestContext(`${kc.getCurrentCluster()?.server ?? ""}/metrics`, HttpMethod.GET);
  await kc.applySecurityAuthentication(ctx);
  const text = await (await new IsomorphicFetchHttpLibrary().send(ctx).toPromise()).body.text();
  const out = new Map<string, number>();
  for (const m of text.matchAll(/^apiserver_watch_cache_read_wait_seconds_(bucket|sum|count)\{([^}]*)\} (\S+)$/gm)) {
    if (!/resource="pods"/.test(m[2]!)) continue;
    out.set(m[1] === "bucket" ? (/le="([^"]+)"/.exec(m[2]!)?.[1] ?? "?") : m[1]!, Number(m[3]));
  }
  return out;
}

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
  const waitsBefore = await podListWaits(bed.lab.kc);
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
  const waitsAfter = await podListWaits(bed.lab.kc);
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
  // When the operator's cache showed each pod (its log's seenAt, ms since the epoch): the informer's delay.
  const seenAt = new Map(
    bed
      .operatorLog(operator)
      .flatMap((l) =>
        l.phases && typeof l.pod === "string" ? [[l.pod.split("/")[1]!, (l.phases as Record<string, number>).seenAt!]] : [],
      ),
  );
  const informer = [...created].flatMap(([k, t]) => (seenAt.has(k) ? [seenAt.get(k)! - (performance.timeOrigin + t)] : []));
  if (informer.length) console.log(line("  operator: create answered → pod seen by its cache", informer));
  if (phases.length)
    for (const k of ["queued", "read", "list", "grant", "lift"])
      console.log(
        line(
          `  operator: ${k}`,
          phases.map((ph) => ph[k]!),
        ),
      );
  // The fresh list's cost as the namespace grows (its pods, this pod included).
  const bySize = [50, 100, 150, 200, Infinity].flatMap((upTo, i, all) => {
    const xs = phases.filter((ph) => ph.pods! > (all[i - 1] ?? 0) && ph.pods! <= upTo).map((ph) => ph.list!);
    return xs.length ? [`≤ ${upTo} pods p50 ${pct(xs, 50).toFixed(0)} ms, p99 ${pct(xs, 99).toFixed(0)} ms`] : [];
  });
  if (bySize.length) console.log(`  operator: list by namespace size: ${bySize.join("; ")}`);
  // Where a fresh list's time goes in the apiserver: a consistent list is served from its watch cache once that
  // cache has caught up with etcd's current revision, which a write to another kind (an Event, a Lease) leaves
  // ahead until the next pod event or progress notification (requested every 100 ms while a list waits).
  const count = (waitsAfter.get("count") ?? 0) - (waitsBefore.get("count") ?? 0);
  if (count > 0) {
    const sum = (waitsAfter.get("sum") ?? 0) - (waitsBefore.get("sum") ?? 0);
    const shares = ["0.005", "0.025", "0.05", "0.1", "0.2"].map((le) => {
      const k = (waitsAfter.get(le) ?? 0) - (waitsBefore.get(le) ?? 0);
      return `≤ ${Number(le) * 1000} ms ${((100 * k) / count).toFixed(0)}%`;
    });
    console.log(
      `  apiserver: fresh pod lists waiting for its watch cache: ${count}, mean ${((1000 * sum) / count).toFixed(1)} ms; ${shares.join(", ")}`,
    );
  }
  // After the measurement, with no pod written any more: the namespace's fresh list alone, 20 times. The apiserver's
  // watch cache of pods now catches up with etcd (whose revision other kinds' writes move on) only at a progress
  // notification, so each list waits for one.
  const quietBefore = await podListWaits(bed.lab.kc);
  const alone: number[] = [];
  for (let i = 0; i < 20; i++) {
    const t = performance.now();
    await core.listNamespacedPod({ namespace: NS });
    alone.push(performance.now() - t);
  }
  const quietAfter = await podListWaits(bed.lab.kc);
  const quietCount = (quietAfter.get("count") ?? 0) - (quietBefore.get("count") ?? 0);
  const quietWait = quietCount ? (1000 * ((quietAfter.get("sum") ?? 0) - (quietBefore.get("sum") ?? 0))) / quietCount : 0;
  console.log(
    `  the namespace's fresh list alone, no pod written meanwhile (${n} pods, 20 lists): p50 ${pct(alone, 50).toFixed(0)} ms, of which waiting for the watch cache: mean ${quietWait.toFixed(0)} ms`,
  );
  // What the apiserver's gzip costs a list of the namespace (it compresses answers over 128 KiB for a client that
  // offers gzip, as fetch does by default): from its watch cache without waiting (resourceVersion=0, for this
  // measurement only: the grant's list is a consistent read), offered gzip or asked uncompressed, alternated.
  const encoded = { gzip: [] as number[], identity: [] as number[] };
  const answered = { gzip: new Set<string>(), identity: new Set<string>() };
  for (let i = 0; i < 2 * LISTS_EACH; i++) {
    const enc = i % 2 ? "identity" : "gzip";
    const ctx = new RequestContext(
      `${bed.lab.kc.getCurrentCluster()?.server ?? ""}/api/v1/namespaces/${NS}/pods?resourceVersion=0`,
      HttpMethod.GET,
    );
    ctx.setHeaderParam("Accept", "application/json");
    ctx.setHeaderParam("Accept-Encoding", enc);
    await bed.lab.kc.applySecurityAuthentication(ctx);
    const t = performance.now();
    const res = await new IsomorphicFetchHttpLibrary().send(ctx).toPromise();
    JSON.parse(await res.body.text());
    encoded[enc].push(performance.now() - t);
    answered[enc].add(res.headers["content-encoding"] ?? "none");
  }
  const enc = (k: "gzip" | "identity") =>
    `p50 ${pct(encoded[k], 50).toFixed(1)} ms, p90 ${pct(encoded[k], 90).toFixed(1)} ms (answered ${[...answered[k]].join(", ")})`;
  console.log(
    `  the namespace's list from the watch cache, parsed (${n} pods, ${LISTS_EACH} each, alternated): offered gzip ${enc("gzip")}; uncompressed ${enc("identity")}`,
  );
  if (gatedAtCreate !== n) process.exitCode = 1;
} finally {
  await bed.down();
}
