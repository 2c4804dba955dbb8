// The kwok stage configuration for one boot of one simulated node. kwok v0.8 ships no built-in stages,
// so the lab assembles them from the stage files of the kwok module it was built from, plus two of its own:
//  - node-boot: writes this boot's bootID (a real kubelet reports a new one every boot; the node-lifecycle
//    tooling and Stockade use it to tell "rebooted" from "came back");
//  - pod-reready: pods the node-lifecycle controller marked NotReady become Ready again once the node is
//    back (kwok's pod-ready only handles Pending pods: kubernetes-sigs/kwok#1464).
import { readFileSync } from "node:fs";
import { join } from "node:path";

function replaceOnce(text: string, from: string | RegExp, to: string, what: string): string {
  const out = text.replace(from, to);
  if (out === text) throw new Error(`kwok stage template changed upstream: cannot derive ${what}`);
  return out;
}

export function kwokConfig(stageDir: string, bootID: string): string {
  const read = (p: string) => readFileSync(join(stageDir, p), "utf8").trim();
  const init = read("node/fast/node-initialize.yaml");
  const readySelector =
    /- key: '\.status\.conditions\.\[\] \| select\( \.type == "Ready" \) \| \.status'\n\s+operator: 'NotIn'\n\s+values:\n\s+- 'True'/;
  let boot = replaceOnce(init, "name: node-initialize", "name: node-boot", "node-boot name");
  boot = replaceOnce(
    boot,
    readySelector,
    `- key: '.status.nodeInfo.bootID'\n      operator: 'NotIn'\n      values:\n      - '${bootID}'`,
    "node-boot selector",
  );
  boot = replaceOnce(boot, /bootID: \{\{[^\n]*\}\}/, `bootID: "${bootID}"`, "node-boot bootID");
  boot = replaceOnce(boot, /\$lastTransitionTime := [^\n]*\}\}/, "$lastTransitionTime := $now }}", "node-boot transition time");

  // Mutually exclusive with node-boot, so the first status a boot writes always carries its bootID.
  const initialize = replaceOnce(
    init,
    readySelector,
    `$&\n    - key: '.status.nodeInfo.bootID'\n      operator: 'In'\n      values:\n      - '${bootID}'`,
    "node-initialize selector",
  );

  const ready = read("pod/fast/pod-ready.yaml");
  let reready = replaceOnce(ready, "name: pod-ready", "name: pod-reready", "pod-reready name");
  reready = replaceOnce(reready, /(operator: 'In'\n\s+values:\n\s+- )'Pending'/, "$1'Running'", "pod-reready selector");
  // A running pod keeps its IP: pod-ready's template allocates one anew, and the status patch merged it beside the
  // old (podIPs are merged by ip), which the apiserver refuses ("no more than one IP for each IP family") — kwok
  // then retried the stage forever and, at 150,000 pods, never reached the pods still Pending.
  reready = replaceOnce(
    reready,
    /\n\s*\{\{ \$podIPs := PodIPsWith[^\n]*\n\s*\{\{ with \$podIPs \}\}[\s\S]*?\{\{ end \}\}\n\s*\{\{ end \}\}/,
    "",
    "pod-reready without a new pod IP",
  );

  return [
    boot,
    initialize,
    read("node/heartbeat-with-lease/node-heartbeat-with-lease.yaml"),
    ready,
    reready,
    read("pod/fast/pod-complete.yaml"),
    read("pod/fast/pod-delete.yaml"),
  ].join("\n---\n");
}
