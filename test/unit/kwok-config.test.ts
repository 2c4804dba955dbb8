import { test } from "node:test";
import assert from "node:assert/strict";
import { binPaths } from "../../lab/bins.ts";
import { kwokConfig } from "../../lab/kwok-config.ts";

const stages = binPaths().kwokStages;

test("each boot's kwok config carries its bootID and keeps node-boot and node-initialize mutually exclusive", () => {
  const cfg = kwokConfig(stages, "boot-123");
  const docs = cfg.split("\n---\n");
  const byName = new Map(docs.map((d) => [/name: (\S+)/.exec(d)![1], d]));
  assert.deepEqual(
    [...byName.keys()],
    ["node-boot", "node-initialize", "node-heartbeat-with-lease", "pod-ready", "pod-reready", "pod-complete", "pod-delete"],
  );
  const boot = byName.get("node-boot")!;
  assert.match(boot, /key: '\.status\.nodeInfo\.bootID'\n\s+operator: 'NotIn'\n\s+values:\n\s+- 'boot-123'/);
  assert.match(boot, /bootID: "boot-123"/);
  assert.match(byName.get("node-initialize")!, /key: '\.status\.nodeInfo\.bootID'\n\s+operator: 'In'\n\s+values:\n\s+- 'boot-123'/);
  assert.match(byName.get("pod-reready")!, /- 'Running'/);
  // pod-ready gives a starting pod its IP; pod-reready leaves a running pod's alone (a second one is refused).
  assert.match(byName.get("pod-ready")!, /PodIPsWith/);
  assert.doesNotMatch(byName.get("pod-reready")!, /podIP/);
  assert.match(byName.get("pod-reready")!, /phase: Running/);
  assert.doesNotMatch(kwokConfig(stages, "other"), /boot-123/);
});
