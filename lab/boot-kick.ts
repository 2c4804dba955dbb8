// Runs briefly after a simulated node's kwok starts (boot, reboot, resume). A real kubelet posts its node
// status at start-up and then works through every pod bound to it; kwok only reacts to watch events, and
// only once it holds the node's lease:
//  - a node that reboots before anything else touches its Node object would never report its new boot, so
//    this nudges the Node (an annotation) until it reports the new bootID;
//  - kwok v0.8 lists the node's pods once, right after it creates (or takes over) the node's Lease, and skips
//    each as "read only" when its own Lease informer has not yet seen that Lease (a race it loses now and
//    then: reproduced in the lab, the crashed node's Terminating StatefulSet pod was never deleted after a reboot, so
//    the StatefulSet never got its replacement). A pod that then never changes (Terminating, Pending, marked
//    NotReady while the node was away) would wait forever, so each such pod unchanged for a second is nudged
//    too, while the node is Ready with this boot, until none is left.
// Exits when there is nothing left to nudge, at most 60 s after it started.
import { setTimeout as sleep } from "node:timers/promises";
import { apiRequest } from "./api-lite.ts";
import { readState } from "./state.ts";

interface PodLite {
  metadata?: {
    name?: string;
    namespace?: string;
    resourceVersion?: string;
    deletionTimestamp?: string;
    ownerReferences?: { kind?: string }[];
  };
  status?: { phase?: string; conditions?: { type?: string; status?: string }[] };
}
interface NodeLite {
  status?: { nodeInfo?: { bootID?: string }; conditions?: { type?: string; status?: string }[] };
}

/** A pod one of the lab's kwok stages (lab/kwok-config.ts) still has to act on. */
function awaitsKubelet(p: PodLite): boolean {
  if (p.metadata?.deletionTimestamp) return true; // pod-delete
  const phase = p.status?.phase;
  const ready = p.status?.conditions?.find((c) => c.type === "Ready")?.status === "True";
  if (phase === "Pending" || phase === "Running") {
    if (!ready) return true; // pod-ready, pod-reready
    if (phase === "Running" && p.metadata?.ownerReferences?.some((o) => o.kind === "Job")) return true; // pod-complete
  }
  return false;
}

const [dir, node, bootID] = process.argv.slice(2);
if (!dir || !node || !bootID) throw new Error("usage: boot-kick.ts <lab-dir> <node> <bootID>");
const s = readState(dir);
const deadline = Date.now() + 60_000;
const merge = "application/merge-patch+json";
/** resourceVersion of each waiting pod when last seen (or last nudged): a nudge only after a second without change. */
const seen = new Map<string, string | undefined>();
for (let i = 0; Date.now() < deadline; i++) {
  try {
    const n = JSON.parse((await apiRequest(s, "GET", `/api/v1/nodes/${node}`)).body) as NodeLite;
    const booted = n.status?.nodeInfo?.bootID === bootID;
    if (!booted)
      await apiRequest(
        s,
        "PATCH",
        `/api/v1/nodes/${node}`,
        { metadata: { annotations: { "lab.stockade.io/boot-nudge": `${bootID}/${i}` } } },
        merge,
      );
    const ready = n.status?.conditions?.find((c) => c.type === "Ready")?.status === "True";
    const r = await apiRequest(s, "GET", `/api/v1/pods?fieldSelector=${encodeURIComponent(`spec.nodeName=${node}`)}`);
    if (r.status !== 200) throw new Error(`listing the pods of ${node}: ${r.status}`);
    const waiting = ((JSON.parse(r.body) as { items?: PodLite[] }).items ?? []).filter(awaitsKubelet);
    if (booted && waiting.length === 0) break;
    // Only a live kwok (the node Ready with this boot) can act on a nudge; a frozen one is left alone.
    if (booted && ready) {
      for (const p of waiting) {
        const key = `${p.metadata?.namespace}/${p.metadata?.name}`;
        const rv = p.metadata?.resourceVersion;
        if (!seen.has(key) || seen.get(key) !== rv) {
          seen.set(key, rv);
          continue;
        }
        const res = await apiRequest(
          s,
          "PATCH",
          `/api/v1/namespaces/${p.metadata?.namespace}/pods/${p.metadata?.name}`,
          { metadata: { annotations: { "lab.stockade.io/boot-nudge": `${bootID}/${i}` } } },
          merge,
        );
        seen.set(key, res.status === 200 ? (JSON.parse(res.body) as PodLite).metadata?.resourceVersion : rv);
      }
    }
  } catch {
    /* apiserver restarting: keep trying until the deadline */
  }
  await sleep(1000);
}
