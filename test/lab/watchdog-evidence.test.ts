// Issue 30 on a real control plane: the operator (a host process) takes WatchdogExpired from what it observes of the
// node agents' records, Leases in stockade-node-agent written here by hand as agents write them. Two Nodes made by
// hand, each with a NodeFence under a policy that allows watchdog evidence, with D = 5 s and T = 5 s (a wait of
// (5 + 5)·1.05 + 5 = 15.5 s): "wd-silent", whose kubelet Lease and agent record stay silent, is fenced with
// WatchdogExpired no sooner than 15.5 s after the operator started, and its guarded pod is released; "wd-alive", whose
// agent goes on renewing its record, never is, its status.watchdog saying why. Three other agents renew every 2 s.
// The record's authority is in force (issue 41 item 5): the admission policy of manifests/node-agent/ is installed,
// and each record names as holder the pod the node agent's DaemonSet runs on that node (pause pods here).
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import {
  AdmissionregistrationV1Api,
  AppsV1Api,
  CoordinationV1Api,
  loadAllYaml,
  PatchStrategy,
  setHeaderOptions,
  V1MicroTime,
  type V1Lease,
  type V1ValidatingAdmissionPolicy,
  type V1ValidatingAdmissionPolicyBinding,
} from "@kubernetes/client-node";
import { repoRoot } from "../../lab/bins.ts";
import { Bed, NS } from "../../lab/bed.ts";
import { GUARDED_LABEL } from "../../src/decide/guarded-pods.ts";
import { NODE_AGENT_USER } from "../../src/decide/record-authority.ts";
import { NODE_AGENT_NAMESPACE, RECORD_ANNOTATIONS as A } from "../../src/decide/node-agent-record.ts";

const LABEL = "lab.stockade.io/watchdog";
const KEY = "MCowBQYDK2VwAyEA" + "A".repeat(43) + "=";
const micro = () => new Date().toISOString().replace("Z", "000Z");

const record = (node: string, holder = `stockade-node-agent-${node}`): V1Lease => ({
  metadata: {
    name: node,
    namespace: NODE_AGENT_NAMESPACE,
    annotations: {
      [A.armed]: "true",
      [A.watchdogTimeoutSeconds]: "5",
      [A.deadlineSeconds]: "5",
      [A.controlPlaneDownSeconds]: "10",
      [A.publicKey]: KEY,
      [A.peerAddress]: "10.0.0.1:9443",
    },
  },
  spec: { holderIdentity: holder, renewTime: micro() as never },
});

describe("lab: WatchdogExpired from the operator's own observation (issue 30)", { timeout: 300_000 }, () => {
  let bed: Bed;
  let renewer: NodeJS.Timeout | undefined;
  before(async () => {
    bed = await Bed.up({ nodes: 1, name: "watchdog-evidence", runtime: "kwok" });
  });
  after(async () => {
    clearInterval(renewer);
    await bed?.down();
  });

  test("a silent node's watchdog wait: fenced after 15.5 s and its pod released; a node whose agent renews: never", async () => {
    const leases = bed.lab.kc.makeApiClient(CoordinationV1Api);
    const core = bed.lab.core;
    await core.createNamespace({ body: { metadata: { name: NODE_AGENT_NAMESPACE } } });
    const old = new Date(Date.now() - 60_000).toISOString();
    for (const name of ["wd-silent", "wd-alive"]) {
      await core.createNode({ body: { metadata: { name, labels: { [LABEL]: "on" } } } });
      await core.patchNodeStatus(
        {
          name,
          body: {
            status: {
              conditions: [
                { type: "Ready", status: "Unknown", reason: "NodeStatusUnknown", lastHeartbeatTime: old, lastTransitionTime: old },
              ],
              nodeInfo: { bootID: `boot-${name}` },
              // Room for pods: the scheduler places the agent DaemonSet's pods only on a node that has some.
              capacity: { pods: "10" },
              allocatable: { pods: "10" },
            },
          },
        },
        setHeaderOptions("Content-Type", PatchStrategy.StrategicMergePatch),
      );
      await leases.createNamespacedLease({
        namespace: "kube-node-lease",
        body: { metadata: { name }, spec: { holderIdentity: name, leaseDurationSeconds: 8, renewTime: old.replace("Z", "000Z") as never } },
      });
      await core.createNamespacedPod({
        namespace: NS,
        body: {
          metadata: { name: `db-${name}`, labels: { [GUARDED_LABEL]: "true" } },
          spec: { nodeName: name, automountServiceAccountToken: false, containers: [{ name: "c", image: "pause" }] },
        },
      });
    }
    // The record policy and its binding, as shipped; the agent's DaemonSet (nothing runs: a kwok lab) for the holders.
    const admission = bed.lab.kc.makeApiClient(AdmissionregistrationV1Api);
    const [vap, vapb] = (
      loadAllYaml(readFileSync(join(repoRoot, "manifests/node-agent/03-admission-policy.yaml"), "utf8")) as object[]
    ).filter(Boolean) as [V1ValidatingAdmissionPolicy, V1ValidatingAdmissionPolicyBinding];
    await admission.createValidatingAdmissionPolicy({ body: vap });
    await admission.createValidatingAdmissionPolicyBinding({ body: vapb });
    const labels = { "app.kubernetes.io/name": "stockade-node-agent" };
    await bed.lab.kc.makeApiClient(AppsV1Api).createNamespacedDaemonSet({
      namespace: NODE_AGENT_NAMESPACE,
      body: {
        metadata: { name: "stockade-node-agent" },
        spec: {
          selector: { matchLabels: labels },
          template: {
            metadata: { labels },
            spec: {
              tolerations: [{ operator: "Exists" }],
              automountServiceAccountToken: false,
              containers: [{ name: "a", image: "pause" }],
            },
          },
        },
      },
    });
    const holders = new Map<string, string>();
    const deadline = Date.now() + 60_000;
    while (!(holders.has("wd-silent") && holders.has("wd-alive"))) {
      assert.ok(Date.now() < deadline, "the DaemonSet's pods on wd-silent and wd-alive within 60 s");
      for (const p of (await core.listNamespacedPod({ namespace: NODE_AGENT_NAMESPACE })).items)
        if (p.spec?.nodeName && p.metadata?.name) holders.set(p.spec.nodeName, p.metadata.name);
      await new Promise((r) => setTimeout(r, 500));
    }
    const agents = ["wd-silent", "wd-alive", "peer-a", "peer-b", "peer-c"];
    // The shipped policy lets only the agent's ServiceAccount, bound to the record's node, write: each record is written
    // as that node's agent (the lab's admin impersonating it, with the node claim a pod-bound token carries).
    const asAgentOf = (n: string) =>
      setHeaderOptions(
        "Impersonate-User",
        NODE_AGENT_USER,
        setHeaderOptions(`Impersonate-Extra-${encodeURIComponent("authentication.kubernetes.io/node-name")}`, n),
      );
    // The agent's own RBAC, as shipped (create and update of its namespace's Leases: it renews by replace).
    await bed.kubectl("apply", "-f", join(repoRoot, "manifests/node-agent/01-rbac.yaml"));
    for (const n of agents)
      await leases.createNamespacedLease({ namespace: NODE_AGENT_NAMESPACE, body: record(n, holders.get(n)) }, asAgentOf(n));
    // Every agent but wd-silent's renews its record every 2 s.
    let renewals = 0;
    renewer = setInterval(() => {
      for (const n of agents.slice(1))
        void leases
          .readNamespacedLease({ name: n, namespace: NODE_AGENT_NAMESPACE })
          .then((l) => {
            l.spec!.renewTime = new V1MicroTime(Date.now());
            return leases.replaceNamespacedLease({ name: n, namespace: NODE_AGENT_NAMESPACE, body: l }, asAgentOf(n));
          })
          .then(() => renewals++);
    }, 2_000);
    await bed.create("fenceagents", { metadata: { name: "wd" }, spec: { type: "watchdog" } });
    await bed.policy("wd", {
      nodeSelector: { matchLabels: { [LABEL]: "on" } },
      // Silence far longer than the test: only the NodeFences made here fence.
      detection: { heartbeatTimeoutSeconds: 3600, fenceAfterSeconds: 3600, honorPodTolerations: false },
      escalation: [{ agents: [{ name: "wd" }] }],
      allowWatchdogEvidence: true,
    });
    for (const n of ["wd-silent", "wd-alive"])
      await bed.create("nodefences", { metadata: { name: n }, spec: { nodeName: n, policy: "wd" } });
    const t0 = Date.now();
    await bed.startOperator();

    const waiting = await bed.waitForFence(
      "wd-silent",
      (f) => f.status?.watchdog?.requiredSeconds !== undefined,
      "showing its arithmetic",
      30_000,
    );
    assert.equal(waiting.status?.watchdog?.requiredSeconds, "15.5");
    assert.equal(waiting.status?.watchdog?.deadlineSeconds, 5);
    assert.equal(waiting.status?.watchdog?.watchdogTimeoutSeconds, 5);
    const fenced = await bed.waitForFence("wd-silent", (f) => f.status?.phase === "Released", "Released", 90_000);
    const afterMs = Date.now() - t0;
    assert.equal(fenced.status?.evidence?.method, "WatchdogExpired");
    assert.ok(afterMs >= 15_500, `released ${afterMs} ms after the operator started, before the 15.5 s wait`);
    assert.ok(Number(fenced.status?.watchdog?.observedSeconds) >= 15.5, JSON.stringify(fenced.status?.watchdog));
    assert.equal(fenced.status?.evidence?.heartbeat?.agentRecordResourceVersion !== "", true);
    assert.ok((fenced.status?.releases ?? []).some((r) => r.kind === "Pod" && r.name === "db-wd-silent"));

    const alive = await bed.getFence("wd-alive");
    assert.equal(alive?.status?.phase, "Fencing");
    assert.equal(alive?.status?.evidence, undefined);
    assert.equal(alive?.status?.watchdog?.holds, false);
    assert.match(alive?.status?.watchdog?.reason ?? "", /node agent record was renewed/);
    assert.ok(renewals > 10);
    console.log(
      `# wd-silent Released on WatchdogExpired ${(afterMs / 1000).toFixed(1)} s after the operator started (required 15.5 s, observed ${fenced.status?.watchdog?.observedSeconds} s, window restarts ${fenced.status?.watchdog?.windowRestarts}); wd-alive still Fencing`,
    );
  });
});
