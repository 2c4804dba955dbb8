// Issue 28 item 1 (docs/pilot.md, the example policy applied as the page says) on a real apiserver (kwok lab, the bundle's webhooks pointed at an operator replica on the host):
// the force-delete guard and the claim gate act only on what a live FencingPolicy covers.
//   - no FencingPolicy: a force delete of a StatefulSet pod goes through, a pod on a ReadWriteOnce claim is not gated;
//   - a dry-run policy: the same;
//   - a live policy selecting node A for namespace "pilot": the force delete of a guarded pod on A is refused (naming the
//     policy and `kubectl stockade fence A`), one on node B and one in another namespace go through; a claim pod in
//     "pilot" is gated, one in another namespace is not; Fence Agents Remediation's own grace-0 delete on A is refused
//     and names it; forceDeleteGuard: false and claimLock: false turn each off;
//   - the pilot stopped (the policy deleted) while a NodeFence of node A is under way: a pod waiting for a claim used on
//     node A keeps its gate (Event GateKeptByFence), one created then is gated, both let go once the fence is deleted.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import type { V1Pod } from "@kubernetes/client-node";
import { AppsV1Api } from "@kubernetes/client-node";
import { join } from "node:path";
import { Bed } from "../../lab/bed.ts";
import { repoRoot } from "../../lab/bins.ts";
import { waitFor } from "../../lab/health.ts";
import { CLAIM_GATE } from "../../src/decide/claim-lock.ts";

const FAR = "system:serviceaccount:medik8s:fence-agents-remediation-controller-manager";

describe("pilot scope: the guard and the gate act only where a live FencingPolicy covers", () => {
  let bed: Bed;
  let nodeA: string;
  let nodeB: string;
  let apps: AppsV1Api;
  let seq = 0;

  before(async () => {
    bed = await Bed.up({ nodes: 2, name: "pilot-scope", runtime: "kwok", webhooks: true });
    [nodeA, nodeB] = bed.lab.nodes() as [string, string];
    apps = bed.lab.kc.makeApiClient(AppsV1Api);
    // docs/pilot.md, step 1, as written: the pool's node labelled for the example policy.
    await bed.kubectl("label", "node", nodeA, "stockade.io/pilot=true");
    for (const ns of ["pilot", "other", "medik8s"]) await bed.lab.core.createNamespace({ body: { metadata: { name: ns } } });
    for (const ns of ["pilot", "other"])
      await bed.lab.core.createNamespacedPersistentVolumeClaim({
        namespace: ns,
        body: { metadata: { name: "data" }, spec: { accessModes: ["ReadWriteOnce"], resources: { requests: { storage: "1Mi" } } } },
      });
    // FAR's ServiceAccount, allowed to delete pods (RBAC first; the guard is what this test is about).
    await bed.kubectl("create", "serviceaccount", "-n", "medik8s", "fence-agents-remediation-controller-manager");
    await bed.kubectl(
      "create",
      "clusterrolebinding",
      "far-edit",
      "--clusterrole=edit",
      `--serviceaccount=medik8s:fence-agents-remediation-controller-manager`,
    );
    await bed.startOperator();
  });
  after(async () => {
    await bed?.killOperator("SIGTERM");
    await bed?.down();
  });

  /** A StatefulSet of one replica bound to the node; resolves with its pod's name once the pod exists. */
  const statefulPod = async (ns: string, node: string): Promise<string> => {
    const name = `db${++seq}`;
    await apps.createNamespacedStatefulSet({
      namespace: ns,
      body: {
        metadata: { name },
        spec: {
          replicas: 1,
          serviceName: name,
          selector: { matchLabels: { app: name } },
          template: {
            metadata: { labels: { app: name } },
            spec: { nodeName: node, containers: [{ name: "c", image: "registry.k8s.io/pause:3.10" }] },
          },
        },
      },
    });
    const pod = await waitFor(`pod ${ns}/${name}-0`, () => bed.lab.core.readNamespacedPod({ name: `${name}-0`, namespace: ns }), {
      timeoutMs: 30_000,
      intervalMs: 250,
    });
    uids.set(`${ns}/${name}-0`, pod.metadata?.uid ?? "");
    return `${name}-0`;
  };
  /** kubectl's error text, or "" when the delete went through. */
  const forceDelete = (ns: string, pod: string, ...extra: string[]) =>
    bed.kubectl("delete", "pod", "-n", ns, pod, "--force", "--grace-period=0", "--wait=false", ...extra).then(
      () => "",
      (e: { stderr?: string; message?: string }) => e.stderr ?? e.message ?? String(e),
    );
  /** Whether the force delete would be refused now, without deleting (a server-side dry run goes through the webhook). */
  const refusedNow = async (ns: string, pod: string) => (await forceDelete(ns, pod, "--dry-run=server")) !== "";
  const uids = new Map<string, string>();
  /** Whether the instance the test made is gone (its StatefulSet makes a new pod of the same name at once). */
  const gone = (ns: string, pod: string) =>
    bed.lab.core.readNamespacedPod({ name: pod, namespace: ns }).then(
      (p) => p.metadata?.uid !== uids.get(`${ns}/${pod}`),
      () => true,
    );
  /** Creates a pod that mounts the namespace's RWO claim; the stored pod's scheduling gates, as admitted. */
  const claimPodGates = async (ns: string): Promise<string[]> => {
    const body: V1Pod = {
      metadata: { name: `writer${++seq}` },
      spec: {
        containers: [{ name: "c", image: "registry.k8s.io/pause:3.10" }],
        volumes: [{ name: "v", persistentVolumeClaim: { claimName: "data" } }],
      },
    };
    const created = await bed.lab.core.createNamespacedPod({ namespace: ns, body });
    return (created.spec?.schedulingGates ?? []).map((g) => g.name);
  };
  const setPolicy = (spec: Record<string, unknown>) =>
    bed.kubectl("patch", "fencingpolicy", "default", "--type=merge", "-p", JSON.stringify({ spec }));

  test("no FencingPolicy: a StatefulSet pod's force delete goes through, a claim pod is not gated", async () => {
    const pod = await statefulPod("pilot", nodeA);
    assert.equal(await forceDelete("pilot", pod), "", "allowed");
    assert.ok(await gone("pilot", pod));
    assert.deepEqual(await claimPodGates("pilot"), []);
  });

  test("the example policy (docs/pilot.md: a dry run over the labelled pool, the pilot's namespace named) guards and gates nothing", async () => {
    await bed.kubectl("apply", "-f", join(repoRoot, "manifests/examples/40-fencingpolicy.yaml"));
    await setPolicy({ guardedPods: { namespaces: ["pilot"] } }); // the $EDITOR step
    assert.match(await bed.kubectl("get", "fencingpolicies"), /^default\s+\S*\s+off\s+true\s+false/m, "DRYRUN true");
    const pod = await statefulPod("pilot", nodeA);
    // Give the operator's cache the policy's creation first: what is checked is its answer, not its lag.
    await new Promise((r) => setTimeout(r, 2_000));
    assert.equal(await forceDelete("pilot", pod), "");
    assert.ok(await gone("pilot", pod));
    assert.deepEqual(await claimPodGates("pilot"), []);
  });

  test("live: refused on node A in the pilot namespace (naming the policy and the fence), allowed on B and elsewhere", async () => {
    const onA = await statefulPod("pilot", nodeA);
    const onB = await statefulPod("pilot", nodeB);
    const otherNs = await statefulPod("other", nodeA);
    await setPolicy({ dryRun: false });
    await waitFor("the live policy to reach the guard", async () => (await refusedNow("pilot", onA)) || undefined, {
      timeoutMs: 30_000,
      intervalMs: 250,
    });
    const refused = await forceDelete("pilot", onA);
    assert.match(refused, /force-delete\.stockade\.io/);
    assert.match(refused, /guarded by Stockade \(FencingPolicy default\) \(owned by a StatefulSet\)/);
    assert.match(refused, new RegExp(`kubectl stockade fence ${nodeA}`));
    assert.equal(await gone("pilot", onA), false, "still there");
    assert.equal(await forceDelete("pilot", onB), "", "node B: no live policy selects it");
    assert.ok(await gone("pilot", onB));
    assert.equal(await forceDelete("other", otherNs), "", "namespace other: outside the policy's namespaces");
    assert.ok(await gone("other", otherNs));
    assert.deepEqual(await claimPodGates("pilot"), [CLAIM_GATE], "gated in the pilot namespace");
    assert.deepEqual(await claimPodGates("other"), [], "not gated elsewhere");

    // Fence Agents Remediation's own grace-0 delete on a covered node: refused too, naming it and what to disable.
    const far = await forceDelete("pilot", onA, `--as=${FAR}`);
    assert.match(far, /which looks like Fence Agents Remediation \(FAR\)/);
    assert.match(far, /FenceAgentsRemediationTemplate/);
    assert.equal(await gone("pilot", onA), false);
  });

  test("forceDeleteGuard: false and claimLock: false turn each feature off for the policy", async () => {
    const onA = await statefulPod("pilot", nodeA);
    await setPolicy({ forceDeleteGuard: false, claimLock: false });
    await waitFor("the switch to reach the guard", async () => (!(await refusedNow("pilot", onA)) ? true : undefined), {
      timeoutMs: 30_000,
      intervalMs: 250,
    });
    assert.equal(await forceDelete("pilot", onA), "");
    assert.deepEqual(await claimPodGates("pilot"), [], "claimLock: false");
  });

  // Issue 41 item 3: the administrator stops the pilot as this page says (`kubectl delete fencingpolicy default`) while
  // a NodeFence is under way; the replacement must not start on the RWO claim while the old writer, on the node being
  // fenced, may still write. Its gate stays (Event GateKeptByFence), a pod created after the deletion is gated too,
  // and both are let go once the fence has ended (here: deleted).
  test("stopping the pilot while a NodeFence is under way: a claim used on the fenced node keeps its gate until the fence ends", async () => {
    const gatesOf = async (name: string) =>
      ((await bed.lab.core.readNamespacedPod({ name, namespace: "pilot" })).spec?.schedulingGates ?? []).map((g) => g.name);
    const eventsOf = async (name: string, reason: string) =>
      (
        await bed.lab.core.listNamespacedEvent({
          namespace: "pilot",
          fieldSelector: `involvedObject.name=${name},reason=${reason}`,
        })
      ).items;
    const writer = (name: string, node?: string): V1Pod => ({
      metadata: { name },
      spec: {
        ...(node ? { nodeName: node } : {}),
        containers: [{ name: "c", image: "registry.k8s.io/pause:3.10" }],
        volumes: [{ name: "v", persistentVolumeClaim: { claimName: "fenced" } }],
      },
    });
    await bed.lab.core.createNamespacedPersistentVolumeClaim({
      namespace: "pilot",
      body: { metadata: { name: "fenced" }, spec: { accessModes: ["ReadWriteOnce"], resources: { requests: { storage: "1Mi" } } } },
    });
    // The old writer, bound to node A (claimLock is still off from the test before: created without the gate).
    await bed.lab.core.createNamespacedPod({ namespace: "pilot", body: writer("old-writer", nodeA) });
    await setPolicy({ claimLock: true });
    // An administrator's fence of node A (the example policy's agents do not exist in the lab: it never gets further).
    await bed.create("nodefences", { metadata: { name: nodeA }, spec: { nodeName: nodeA } });
    const status = await waitFor("the operator to take up the NodeFence", async () => (await bed.getFence(nodeA))?.status, {
      timeoutMs: 30_000,
      intervalMs: 250,
    });
    assert.notEqual(status.phase, "Unfenced", "under way");
    // The replacement, created while the policy is live: gated, waiting for the old writer.
    await bed.lab.core.createNamespacedPod({ namespace: "pilot", body: writer("new-writer") });
    assert.deepEqual(await gatesOf("new-writer"), [CLAIM_GATE]);
    await waitFor("new-writer waiting for the claim", async () => (await eventsOf("new-writer", "WaitingForClaim"))[0], {
      timeoutMs: 30_000,
      intervalMs: 250,
    });
    // docs/pilot.md: stop the pilot.
    await bed.kubectl("delete", "fencingpolicy", "default");
    const kept = await waitFor("the gate kept, and said why", async () => (await eventsOf("new-writer", "GateKeptByFence"))[0], {
      timeoutMs: 30_000,
      intervalMs: 250,
    });
    assert.match(kept.message ?? "", new RegExp(`old-writer uses it on node ${nodeA}, whose NodeFence is`));
    await new Promise((r) => setTimeout(r, 2_000));
    assert.deepEqual(await gatesOf("new-writer"), [CLAIM_GATE], "still gated with no policy at all");
    // A pod created now, with no policy: gated by the fence alone.
    const late = await bed.lab.core.createNamespacedPod({ namespace: "pilot", body: writer("late-writer") });
    assert.deepEqual(
      (late.spec?.schedulingGates ?? []).map((g) => g.name),
      [CLAIM_GATE],
      "gated at creation",
    );
    // The fence ends (deleted): no policy, so the usual outcome — both let go without a grant.
    await bed.kubectl("delete", "nodefence", nodeA, "--timeout=60s");
    for (const name of ["new-writer", "late-writer"])
      await waitFor(`${name} let go`, async () => ((await gatesOf(name)).length === 0 ? true : undefined), {
        timeoutMs: 30_000,
        intervalMs: 250,
      });
  });
});
