// The one-command demo: a lab with real nodes and simulated BMCs, the operator installed in-cluster as a
// user installs it (its image built from the Dockerfile, imported into every node, `kubectl apply -k` of
// manifests/; `--operator host` runs it as a process of this one instead, the fast path), a policy and a
// StatefulSet; then a node is cut off and a live timeline shows Stockade fence it and the replica come back. `--once` exits 0 after the replacement runs (for tests and scripts); otherwise
// the cluster stays up for exploring with kubectl until Ctrl-C.
import { join } from "node:path";
import { parseArgs } from "node:util";
import type { V1Pod } from "@kubernetes/client-node";
import { repoRoot } from "../lab/bins.ts";
import { Lab } from "../lab/lab.ts";
import { Informer } from "../src/runtime/informer.ts";
import { GROUP, VERSION, type NodeFence } from "../src/api/v1alpha1.ts";
import { Bed, NS } from "../lab/bed.ts";
import { waitFor } from "../lab/health.ts";
import { checkLedger, readLedgers, sanDir } from "../lab/ledger.ts";
import { labOperatorImage, type OperatorImage } from "../lab/operator-install.ts";

const { values } = parseArgs({
  options: {
    once: { type: "boolean", default: false },
    nodes: { type: "string", default: "4" },
    operator: { type: "string", default: "in-cluster" },
  },
});
const mode = values.operator;
if (mode !== "in-cluster" && mode !== "host") {
  console.error(`demo: --operator must be in-cluster or host (got ${values.operator})`);
  process.exit(2);
}
const nodes = Number(values.nodes);
if (!Number.isInteger(nodes) || nodes < 3 || nodes > 20) {
  console.error(`demo: --nodes must be 3-20 (got ${values.nodes})`);
  process.exit(2);
}
const dir = process.env.STOCKADE_LAB_DIR ?? join(repoRoot, ".lab");
if (Lab.running(dir)) {
  console.error(`demo: a lab is already running in ${dir}; stop it with: npm run lab -- down`);
  process.exit(2);
}

const step = (msg: string) => console.log(`==> ${msg}`);
step(
  `starting the lab in ${dir}: a real Kubernetes control plane, ${nodes} real nodes (a containerd and a kubelet each, in their own network namespace), one simulated BMC each`,
);
let operatorImage: OperatorImage | undefined;
if (mode === "in-cluster") {
  step("building the operator image from the Dockerfile (cached by its inputs; the first build takes minutes)");
  const t = Date.now();
  operatorImage = await labOperatorImage((m) => console.log(`    ${m}`));
  console.log(`    ${operatorImage.refs.join(", ")} in ${((Date.now() - t) / 1000).toFixed(1)} s`);
}
const bed = await Bed.up({ nodes, name: "demo", dir, log: (m) => console.log(`    ${m}`), operator: mode, operatorImage });
let stopping = false;
/** Stops everything; `last` is printed after the lab is down, so that it is the last line (the --once contract). */
const shutdown = async (code: number, last?: string) => {
  if (stopping) return;
  stopping = true;
  step("stopping the operator and the lab");
  await bed.down();
  if (last) console.log(last);
  process.exit(code);
};
process.on("SIGINT", () => void shutdown(0));
process.on("SIGTERM", () => void shutdown(0));

try {
  if (bed.installed) {
    const ms = bed.installed.ms;
    step(
      `installed the operator with kubectl apply -k (overlay ${bed.installed.overlay}): image imported into ${nodes} nodes in ${(ms.import / 1000).toFixed(1)} s, applied in ${(ms.apply / 1000).toFixed(1)} s, both replicas Ready with a leader and the webhooks answering ${(ms.ready / 1000).toFixed(1)} s later`,
    );
    step("FenceAgent lab-ipmi: native IPMI to each node's BMC on the lab's management address, one Secret per BMC password");
  } else
    step(
      "installed the stockade.io CRDs, their admission policy (only the operator writes a fence's status) and FenceAgent lab-ipmi (native IPMI, one Secret per node's BMC password)",
    );
  // The embedded default policy: fast detection for a demo (a production policy waits longer).
  await bed.policy("default", { guards: { maxUnhealthyNodes: 1, maxConcurrentFences: 1 } });
  step(
    "FencingPolicy default: partitioned after 6 s without heartbeat, fenced 4 s later through lab-ipmi, pods force-deleted after power off",
  );
  if (mode === "host") {
    await bed.startOperator();
    step(`operator running (logs: ${join(dir, "logs", "operator-1.log")})`);
  } else {
    for (const p of await bed.operatorPods()) console.log(`    ${p.metadata?.name} Ready on ${p.spec?.nodeName}`);
    const leader = await bed.leaderPod();
    step(
      `operator leader: ${leader?.metadata?.name} on ${leader?.spec?.nodeName} (logs: kubectl -n stockade-system logs ${leader?.metadata?.name})`,
    );
  }
  // In-cluster, db stays off the leader's node: cutting the leader off is another story (the operator's own failover first).
  const leaderNode = mode === "in-cluster" ? await bed.leaderNode() : undefined;
  for (const n of bed.lab.nodes().filter((x) => x !== leaderNode)) await bed.kubectl("label", "node", n, "demo.stockade.io/workload=true");
  // One pod per node (required anti-affinity), and a free node left for db-0's replacement.
  const replicas = Math.min(2, nodes - (leaderNode ? 2 : 1));
  step(
    `deploying StatefulSet db (${replicas} replica${replicas > 1 ? "s, one per node" : ""}${leaderNode ? `, not on the leader's node ${leaderNode}` : ""}): each pod appends records to its own volume on a shared SAN, with no storage-side lock`,
  );
  const pods = await bed.statefulSet("db", replicas, { nodeSelector: { "demo.stockade.io/workload": "true" } });
  const victimName = "db-0";
  const victim = pods.find((p) => p.metadata?.name === victimName)!;
  const node = victim.spec!.nodeName!;
  const oldUid = victim.metadata!.uid!;
  for (const p of pods) console.log(`    ${p.metadata?.name} Running on ${p.spec?.nodeName}`);

  const t0 = Date.now();
  const say = (msg: string) => console.log(`  +${((Date.now() - t0) / 1000).toFixed(1).padStart(5)} s  ${msg}`);
  const fences = new Informer<NodeFence>({
    kc: bed.lab.kc,
    path: `/apis/${GROUP}/${VERSION}/nodefences`,
    list: async () => (await bed.custom.listClusterCustomObject({ group: GROUP, version: VERSION, plural: "nodefences" })) as never,
  });
  const podInf = new Informer<V1Pod>({
    kc: bed.lab.kc,
    path: `/api/v1/namespaces/${NS}/pods`,
    list: () => bed.lab.core.listNamespacedPod({ namespace: NS }),
  });
  const seen = new Set<string>();
  const once = (key: string, msg: string) => {
    if (seen.has(key)) return;
    seen.add(key);
    say(msg);
  };
  let done: (pod: V1Pod) => void = () => {};
  const replaced = new Promise<V1Pod>((r) => (done = r));
  fences.on("update", (f) => {
    const st = f.status ?? {};
    if (st.phase) once(`phase-${st.phase}`, `NodeFence ${f.metadata?.name}: ${st.phase}`);
    for (const a of st.attempts ?? []) {
      if (a.outcome === "InProgress")
        once(`try-${a.level}-${a.agent}-${a.startTime}`, `fencing: level ${a.level + 1}, agent ${a.agent}: power ${a.operation}…`);
      else
        once(`done-${a.level}-${a.agent}-${a.startTime}`, `fencing: level ${a.level + 1}, agent ${a.agent}: ${a.outcome} — ${a.message}`);
    }
    if (st.evidence) once("evidence", `confirmed fenced (${st.evidence.method}): ${st.evidence.detail}`);
    for (const r of st.releases ?? [])
      once(`rel-${r.kind}-${r.name}`, `released ${r.kind} ${r.namespace ? `${r.namespace}/` : ""}${r.name}: ${r.action}`);
  });
  fences.on("add", (f) => once("created", `NodeFence ${f.metadata?.name} created by the operator: ${f.spec.reason ?? ""}`));
  const onPod = (p: V1Pod) => {
    if (p.metadata?.name !== victimName) return;
    const down = p.status?.conditions?.find((c) => c.type === "NodeDown");
    if (p.metadata.uid === oldUid && down?.status === "True") once("nodedown", `pod ${victimName}: NodeDown — ${down.message}`);
    if (p.metadata.uid !== oldUid) {
      if (p.spec?.nodeName) once("scheduled", `replacement ${victimName} scheduled on ${p.spec.nodeName}`);
      if (p.status?.phase === "Running") {
        once("running", `replacement ${victimName} Running on ${p.spec?.nodeName}`);
        done(p);
      }
    }
  };
  podInf.on("add", onPod);
  podInf.on("update", onPod);
  podInf.on("delete", (p) => {
    if (p.metadata?.uid === oldUid) once("gone", `old ${victimName} removed from the API (force-deleted after the fence)`);
  });
  await Promise.all([fences.start(), podInf.start()]);
  const labTail = setInterval(() => {
    for (const e of bed.rec.timeline()) {
      if (e.t < t0) continue;
      if (e.source === "lab" && e.kind === "power" && e.node === node)
        once(`power-${e.detail.power}`, `BMC of ${node}: power ${String(e.detail.power)}`);
      if (e.source === "node" && e.name === node && e.ready === "Unknown")
        once("unknown", `node ${node}: Ready=Unknown (the node controller noticed)`);
    }
  }, 100);

  step(`cutting ${node} (the node of ${victimName}) off the network: its kubelet and ${victimName} keep running and writing`);
  await bed.lab.partition(node);
  say(`heartbeat lost: ${node} can no longer renew its Lease`);
  const pod = await Promise.race([
    replaced,
    new Promise<never>((_, rej) => setTimeout(() => rej(new Error("no replacement Running within 180 s")), 180_000).unref()),
  ]);
  const failover = (Date.now() - t0) / 1000;
  clearInterval(labTail);
  fences.stop();
  podInf.stop();
  // The ledger: the cut-off writer's last record, the power-off, the new writer's first record.
  const ledger = await waitFor(
    `the new ${victimName} writing`,
    async () => {
      const r = checkLedger(readLedgers(sanDir(bed.lab.dir)));
      return r.handovers.find((h) => h.identity === victimName && h.to === pod.metadata!.uid) ? r : undefined;
    },
    { timeoutMs: 30_000 },
  );
  const h = ledger.handovers.find((x) => x.identity === victimName && x.to === pod.metadata!.uid)!;
  const off = bed.rec.timeline().find((e) => e.source === "lab" && e.kind === "power" && e.node === node && e.detail.power === "off");
  const clock = (ms: number) => new Date(ms).toISOString().slice(11, 23);
  console.log(`\nledger of ${victimName} (files under ${sanDir(bed.lab.dir)}):`);
  console.log(`  ${clock(h.lastOld.timeMs)}  last record of the cut-off writer on ${h.fromNode} (seq ${h.lastOld.seq})`);
  if (off) console.log(`  ${clock(off.t)}  ${node} powered off through its BMC`);
  console.log(`  ${clock(h.firstNew.timeMs)}  first record of the new writer on ${h.toNode} (${(h.gapMs / 1000).toFixed(1)} s later)`);
  const inv = await bed.invariant();
  console.log(
    `\nsafety invariant (timeline, ledger files, process tables): ${inv.violations.length ? inv.violations.join("; ") : "held (old machine powered off before the replacement started; no two writers of one identity)"}`,
  );
  if (!values.once) {
    console.log(`
The cluster stays up. In another terminal:
  export KUBECONFIG=${bed.lab.kubeconfig}
  export PATH=${bed.lab.state.binDir}:$PATH
  kubectl get nodefences                  # the fence and its evidence
  kubectl describe nodefence ${node}        # every attempt and Event
  kubectl get pods -o wide                # ${victimName} on ${pod.spec?.nodeName}
  kubectl patch nodefence ${node} --type=merge -p '{"spec":{"unfence":true}}'   # power it back on
Press Ctrl-C to stop everything.`);
  }
  if (values.once) await shutdown(inv.violations.length ? 1 : 0, `failover: ${failover.toFixed(1)} s`);
  console.log(`failover: ${failover.toFixed(1)} s`);
} catch (err) {
  console.error(`demo failed: ${(err as Error).message}`);
  await shutdown(1);
}
