// WatchdogExpired end to end (issue 30): the operator installed in-cluster from manifests/, the node agent from
// manifests/node-agent/ (the lab's overlay: its watchdog through a hostPath, T = 10 s, c = 2 s, D = 12 s), a FenceAgent
// of type watchdog alone in the escalation and a policy that allows watchdog evidence. A node holding a guarded
// StatefulSet pod (the single-writer ledger) is cut off from the API: the operator creates its NodeFence, the node's
// peers tell its agent, its watchdog resets it, and only then — (D + T)·1.05 + 5 s after the operator first saw the
// NodeFence — the operator releases the pod, whose replacement starts elsewhere. Checked: the lab's own record of the
// reset comes before the release, the arithmetic is in status, and the ledger never had two writers.
// Then a node that crashes (its machine hangs; its next boot is cut off too): its watchdog resets it within T, and the
// operator releases its pod on the same evidence, checked the same way. Last, a node whose watchdog is disabled (its
// agent's record says armed=false), cut off: its fence's watchdog attempt fails and nothing is released.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { Bed } from "../lab/bed.ts";
import { setTimeout as sleep } from "node:timers/promises";
import { waitFor } from "../lab/health.ts";
import { installNodeAgent, LAB_AGENT_TIMINGS, nodeAgentRecords } from "../lab/node-agent-install.ts";
import { DEFAULT_WATCHDOG_TIMEOUT_SECONDS, watchdogResets } from "../lab/watchdog.ts";
import { NODE_AGENT_NAMESPACE } from "../src/decide/node-agent-record.ts";
import { requiredWaitMs } from "../src/decide/watchdog-evidence.ts";

const T = DEFAULT_WATCHDOG_TIMEOUT_SECONDS;
const D = LAB_AGENT_TIMINGS.deadlineSeconds;

describe("e2e: WatchdogExpired, the operator and the node agent installed in-cluster", () => {
  let bed: Bed;
  let victimOfFirst: string | undefined;
  let victimOfSecond: string | undefined;
  const log = (m: string) => console.log(`[watchdog-fencing] ${m}`);
  before(async () => {
    bed = await Bed.up({ nodes: 3, name: "watchdog-fencing", operator: "in-cluster", log });
    await installNodeAgent(bed.lab, { image: bed.installed!.image, log });
    await bed.create("fenceagents", { metadata: { name: "node-watchdog" }, spec: { type: "watchdog" } });
    await bed.policy("watchdog", {
      escalation: [{ agents: [{ name: "node-watchdog" }] }],
      allowWatchdogEvidence: true,
      guards: { maxUnhealthyNodes: 1, maxConcurrentFences: 1 },
    });
  });
  after(async () => {
    const r = await bed?.invariant().catch(() => undefined);
    if (r) console.log(`invariant: ${r.identities} identities, ${r.replacements} replacements, ${r.violations.length} violations`);
    await bed?.down();
  });

  test("a node cut off: its watchdog resets it, then the operator releases its guarded pod on WatchdogExpired", async () => {
    const leaderNode = await bed.leaderNode();
    for (const n of bed.lab.nodes().filter((x) => x !== leaderNode)) await bed.kubectl("label", "node", n, "e2e.stockade.io/workload=true");
    const pods = await bed.statefulSet("db", 1, { nodeSelector: { "e2e.stockade.io/workload": "true" } });
    const victim = pods[0]!;
    const node = victim.spec!.nodeName!;
    const uid = victim.metadata!.uid!;
    const boot = bed.lab.machine(node).bootID;
    const t0 = Date.now();
    await bed.lab.partition(node);
    const replacement = await bed.waitForReplacement("db-0", uid, 240_000);
    const f = await bed.waitForFence(node, (x) => x.status?.phase === "Released", "Released", 60_000);

    assert.equal(f.status?.evidence?.method, "WatchdogExpired", JSON.stringify(f.status?.evidence));
    const w = f.status?.watchdog;
    assert.ok(w?.holds, JSON.stringify(w));
    assert.equal(w.watchdogTimeoutSeconds, T, "T as the node's agent read it from its device");
    assert.equal(w.deadlineSeconds, D);
    assert.equal(Number(w.requiredSeconds), requiredWaitMs(D, T) / 1000);
    assert.ok(Number(w.observedSeconds) >= Number(w.requiredSeconds), `observed ${w.observedSeconds} s ≥ required ${w.requiredSeconds} s`);
    assert.deepEqual(
      (f.status?.releases ?? []).filter((r) => r.kind === "Pod").map((r) => r.uid),
      [uid],
      "db-0 released once",
    );

    // The machine was reset by its watchdog (the lab's record), in the boot the pod ran in, before the pod was released.
    const reset = watchdogResets(bed.lab.dir, { node, bootID: boot })[0];
    assert.ok(reset, `${node}'s watchdog reset it`);
    const released = Date.parse(String(f.status?.releases?.find((r) => r.kind === "Pod")?.time ?? ""));
    assert.ok(Number.isFinite(released), "the release has a time");
    assert.ok(Date.parse(reset.time) < released, `reset at ${reset.time}, released at ${new Date(released).toISOString()}`);
    const created = Date.parse(String(f.metadata?.creationTimestamp));
    assert.ok(
      Date.parse(reset.time) - created <= (D + T) * 1000 + 3_000,
      `reset ${Date.parse(reset.time) - created} ms after the NodeFence`,
    );
    assert.deepEqual((await bed.invariant()).violations, []);
    const running = Date.parse(String(replacement.status?.startTime ?? "")) || Date.now();
    log(
      `cut → NodeFence ${((created - t0) / 1000).toFixed(1)} s → reset ${((Date.parse(reset.time) - created) / 1000).toFixed(1)} s → released ${((released - Date.parse(reset.time)) / 1000).toFixed(1)} s later (wait ${w.requiredSeconds} s from first sight); replacement started ${((running - t0) / 1000).toFixed(1)} s after the cut`,
    );
    victimOfFirst = node;
  });

  test("a node crashes (and reboots cut off): released on WatchdogExpired after its watchdog reset it, one writer at a time", async () => {
    // The first test's node back: its cable mended, its NodeFence unfenced, Ready again (the replacement's only other home).
    assert.ok(victimOfFirst, "the first test ran");
    await bed.unfence(victimOfFirst);
    const [pod] = await bed.pods("db");
    const node = pod!.spec!.nodeName!;
    assert.notEqual(node, victimOfFirst);
    const uid = pod!.metadata!.uid!;
    const boot = bed.lab.machine(node).bootID;
    const t0 = Date.now();
    // The machine hangs: its agent no longer feeds the watchdog, which resets it within T. The cut keeps the machine's
    // next boot away from the API, so the operator sees the node silent until the arithmetic holds (a crashed node
    // that comes straight back renews its Lease, and its pod starts again where it was: nothing to release).
    await bed.lab.crash(node);
    await bed.lab.partition(node);
    const replacement = await bed.waitForReplacement("db-0", uid, 240_000);
    const f = await bed.waitForFence(node, (x) => x.status?.phase === "Released", "Released", 60_000);
    assert.equal(f.status?.evidence?.method, "WatchdogExpired", JSON.stringify(f.status?.evidence));
    assert.ok(f.status?.watchdog?.holds, JSON.stringify(f.status?.watchdog));
    const reset = watchdogResets(bed.lab.dir, { node, bootID: boot })[0];
    assert.ok(reset, `${node}'s watchdog reset it in the boot it crashed in`);
    const released = Date.parse(String(f.status?.releases?.find((r) => r.kind === "Pod" && r.uid === uid)?.time ?? ""));
    assert.ok(Date.parse(reset.time) < released, `reset at ${reset.time}, released at ${new Date(released).toISOString()}`);
    assert.ok(
      Date.parse(reset.time) - t0 <= (T + 3) * 1000,
      `the hung machine reset ${Date.parse(reset.time) - t0} ms after the crash (T = ${T} s)`,
    );
    assert.notEqual(replacement.spec?.nodeName, node);
    assert.deepEqual((await bed.invariant()).violations, []);
    const running = Date.parse(String(replacement.status?.startTime ?? "")) || Date.now();
    log(
      `crash → reset ${((Date.parse(reset.time) - t0) / 1000).toFixed(1)} s → released ${((released - t0) / 1000).toFixed(1)} s → replacement started ${((running - t0) / 1000).toFixed(1)} s after the crash`,
    );
    victimOfSecond = node;
  });

  test("a node whose watchdog is disabled, cut off: never released on WatchdogExpired (its attempt fails: not armed)", async () => {
    // The crashed node back (the storm guard allows one unhealthy node), then the pod's node loses its watchdog.
    assert.ok(victimOfSecond, "the second test ran");
    await bed.unfence(victimOfSecond);
    const [pod] = await bed.pods("db");
    const node = pod!.spec!.nodeName!;
    const uid = pod!.metadata!.uid!;
    const boot = bed.lab.machine(node).bootID;
    await bed.lab.disableWatchdog(node);
    const agentPod = (
      await bed.lab.core.listNamespacedPod({ namespace: NODE_AGENT_NAMESPACE, fieldSelector: `spec.nodeName=${node}` })
    ).items.find((p) => !p.metadata?.deletionTimestamp)!;
    await bed.lab.core.deleteNamespacedPod({ namespace: NODE_AGENT_NAMESPACE, name: agentPod.metadata!.name! });
    await waitFor(
      `${node}'s record from a new agent, unarmed`,
      async () => {
        const r = (await nodeAgentRecords(bed.lab)).records.get(node);
        return r && r.holder !== agentPod.metadata!.name && !r.armed ? r : undefined;
      },
      { timeoutMs: 90_000, intervalMs: 500 },
    );
    await bed.lab.partition(node);
    const failed = await bed.waitForFence(
      node,
      (x) => (x.status?.attempts ?? []).some((a) => a.agent === "node-watchdog" && a.outcome === "Failed"),
      "its watchdog attempt failed",
      90_000,
    );
    const attempt = failed.status!.attempts!.find((a) => a.agent === "node-watchdog" && a.outcome === "Failed")!;
    assert.match(String(attempt.message), /not armed/, JSON.stringify(attempt));
    // Longer than the wait an armed node would have needed from the NodeFence: still not released, no evidence.
    await sleep(requiredWaitMs(D, T) + 10_000);
    const f = (await bed.getFence(node))!;
    assert.equal(f.status?.evidence, undefined, JSON.stringify(f.status?.evidence));
    assert.deepEqual(f.status?.releases ?? [], []);
    const [still] = await bed.pods("db");
    // Still there: at most Terminating (the node controller's eviction of an unreachable node's pods waits for a
    // kubelet that never answers), never force-deleted, so no replacement.
    assert.equal(still?.metadata?.uid, uid, "the pod is not released nor replaced");
    assert.equal(bed.lab.machine(node).bootID, boot, "no reset: its watchdog is disabled");
    assert.deepEqual((await bed.invariant()).violations, []);
  });
});
