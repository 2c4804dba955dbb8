// The first list of a big collection, two ways (issue 12: cache sync at 150,000 pods): pages of 500 through
// client-node's typed list (what the informer did), or one watch that streams the current state first
// (sendInitialEvents, Kubernetes' WatchList; the end is a bookmark marked k8s.io/initial-events-end). Each slims
// every pod as the operator's cache does; prints wall time, objects and this process's memory afterwards.
//   node bench/initial-list.ts --kubeconfig FILE --mode paged|streamed
import { parseArgs } from "node:util";
import { CoreV1Api, KubeConfig, Watch, type V1Pod } from "@kubernetes/client-node";
import { slimPod } from "../src/kube/slim.ts";

const { values } = parseArgs({ options: { kubeconfig: { type: "string" }, mode: { type: "string", default: "paged" } } });
const kc = new KubeConfig();
if (values.kubeconfig) kc.loadFromFile(values.kubeconfig);
else kc.loadFromDefault();
const kept: V1Pod[] = [];
const t0 = performance.now();
let pages = 0;
if (values.mode === "paged") {
  const core = kc.makeApiClient(CoreV1Api);
  let cont: string | undefined;
  do {
    const page = await core.listPodForAllNamespaces({ limit: 500, ...(cont ? { _continue: cont } : {}) });
    pages++;
    for (const p of page.items) {
      delete p.metadata?.managedFields;
      kept.push(slimPod(p));
    }
    cont = page.metadata?._continue || undefined;
  } while (cont);
} else if (values.mode === "streamed") {
  await new Promise<void>((resolve, reject) => {
    let ctl: AbortController | undefined;
    let ended = false;
    void new Watch(kc)
      .watch(
        "/api/v1/pods",
        { sendInitialEvents: true, resourceVersionMatch: "NotOlderThan", allowWatchBookmarks: true },
        (type: string, obj: V1Pod) => {
          if (type === "ADDED") {
            delete obj.metadata?.managedFields;
            kept.push(slimPod(obj));
          } else if (type === "BOOKMARK" && obj.metadata?.annotations?.["k8s.io/initial-events-end"] === "true") {
            ended = true;
            ctl?.abort();
            resolve();
          }
        },
        (err: unknown) => (ended ? resolve() : reject(err ?? new Error("the stream ended before its initial-events-end bookmark"))),
      )
      .then((c) => (ctl = c));
  });
} else throw new Error(`--mode must be paged or streamed (got ${values.mode})`);
const ms = performance.now() - t0;
const m = process.memoryUsage();
const mib = (b: number) => `${(b / 2 ** 20).toFixed(0)} MiB`;
console.log(
  `${values.mode}: ${kept.length} pods${pages ? ` in ${pages} pages` : ""} in ${(ms / 1000).toFixed(1)} s; RSS ${mib(m.rss)}, heap used ${mib(m.heapUsed)} of ${mib(m.heapTotal)}, external ${mib(m.external)}`,
);
