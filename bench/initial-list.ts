// The first list of every pod, two ways (issue 12: cache sync at 150,000 pods), through the operator's own Informer
// with its pod transform: pages of 500 through client-node's typed list, or one watch that streams the current
// state first (sendInitialEvents, Kubernetes' WatchList). Prints wall time, objects and this process's memory.
// The figures in docs/developer/scale.md were taken with this script's first form (4eb58a0), which ran its own watch loop and
// deleted managedFields rather than going through the Informer.
//   node bench/initial-list.ts --kubeconfig FILE --mode paged|streamed
import { parseArgs } from "node:util";
import { CoreV1Api, KubeConfig, type V1Pod } from "@kubernetes/client-node";
import { Informer } from "../src/runtime/informer.ts";
import { slimPod } from "../src/kube/slim.ts";

const { values } = parseArgs({ options: { kubeconfig: { type: "string" }, mode: { type: "string", default: "paged" } } });
if (values.mode !== "paged" && values.mode !== "streamed") throw new Error(`--mode must be paged or streamed (got ${values.mode})`);
const kc = new KubeConfig();
if (values.kubeconfig) kc.loadFromFile(values.kubeconfig);
else kc.loadFromDefault();
const core = kc.makeApiClient(CoreV1Api);
let pages = 0;
const pods = new Informer<V1Pod>({
  kc,
  path: "/api/v1/pods",
  list: (page) => (pages++, core.listPodForAllNamespaces(page)),
  transform: slimPod,
  streamingList: values.mode === "streamed",
  onError: (err) => console.error(String(err)),
});
const t0 = performance.now();
await pods.start();
const ms = performance.now() - t0;
pods.stop();
const m = process.memoryUsage();
const mib = (b: number) => `${(b / 2 ** 20).toFixed(0)} MiB`;
console.log(
  `${values.mode}: ${pods.list().length} pods${pages ? ` in ${pages} pages` : ""} in ${(ms / 1000).toFixed(1)} s; RSS ${mib(m.rss)}, heap used ${mib(m.heapUsed)} of ${mib(m.heapTotal)}, external ${mib(m.external)}`,
);
