// Runs briefly after a simulated node boots. A real kubelet posts its node status at start-up; kwok
// only reacts to watch events, and only once it holds the node's lease, so a node that reboots before
// anything else touches its Node object would never report its new boot. This nudges the Node (an
// annotation) until the node reports the new bootID, then exits (at most 60 s).
import { setTimeout as sleep } from "node:timers/promises";
import { apiRequest } from "./api-lite.ts";
import { readState } from "./state.ts";

const [dir, node, bootID] = process.argv.slice(2);
if (!dir || !node || !bootID) throw new Error("usage: boot-kick.ts <lab-dir> <node> <bootID>");
const s = readState(dir);
const deadline = Date.now() + 60_000;
for (let i = 0; Date.now() < deadline; i++) {
  try {
    const r = await apiRequest(s, "GET", `/api/v1/nodes/${node}`);
    const n = JSON.parse(r.body) as { status?: { nodeInfo?: { bootID?: string } } };
    if (n.status?.nodeInfo?.bootID === bootID) break;
    await apiRequest(
      s,
      "PATCH",
      `/api/v1/nodes/${node}`,
      { metadata: { annotations: { "lab.stockade.io/boot-nudge": `${bootID}/${i}` } } },
      "application/merge-patch+json",
    );
  } catch {
    /* apiserver restarting: keep trying until the deadline */
  }
  await sleep(1000);
}
