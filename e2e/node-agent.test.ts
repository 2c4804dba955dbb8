// The node agent (issue 30) on real kubelet nodes, installed from manifests/node-agent/ with the lab's overlay (the
// lab's watchdog through a hostPath instead of /dev/watchdog, not privileged: lab/node-agent-install.ts), its fast
// timings c = 2 s, N = 2, F = 6 s, D = 12 s, peer timeout 1 s, and the lab's watchdog timeout T = 3 s. No operator
// runs: the NodeFences here are created by hand, as an administrator does, and nothing but the agents acts on them.
//   - every agent arms its node's watchdog and keeps a record the operator can read;
//   - the control plane down for two minutes: no node resets (a strict majority of its peers, each unable to reach
//     the API for ≥ F, keeps each node fed), and the agents renew their records once it is back;
//   - a node cut off from the API stays up on its peers' word while no NodeFence exists or one exists that the
//     operator has not started (no phase, as it leaves one it holds; Pending); once it is Fencing its peers tell it
//     so: it stops feeding and its watchdog resets it within D + T of that phase;
//   - two nodes cut from each other, each reaching the API: no reset;
//   - a request not signed by a known peer is refused (401), from outside the node (the host);
//   - the agent killed: the armed watchdog resets the node within T;
//   - the node's watchdog gone: the restarted agent runs unarmed and its record says so.
// Every reset is asserted against the lab's own record of it (a `watchdog` event with the machine's boot ID).
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { existsSync, mkdtempSync } from "node:fs";
import { execFile } from "node:child_process";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { setTimeout as sleep } from "node:timers/promises";
import { CoordinationV1Api, CustomObjectsApi, type V1Lease } from "@kubernetes/client-node";
import { Lab } from "../lab/lab.ts";
import { repoRoot } from "../lab/bins.ts";
import { waitFor } from "../lab/health.ts";
import { realNodeImages } from "../lab/images.ts";
import { installNodeAgent, LAB_AGENT_TIMINGS, nodeAgentRecords, waitForArmedAgents } from "../lab/node-agent-install.ts";
import { paths, readEvents, type LabEvent } from "../lab/state.ts";
import { watchdogResets } from "../lab/watchdog.ts";
import { GROUP, VERSION } from "../src/api/v1alpha1.ts";
import { NODE_AGENT_NAMESPACE } from "../src/decide/node-agent-record.ts";

const run = promisify(execFile);
const T = 3;
const { deadlineSeconds: D } = LAB_AGENT_TIMINGS;
/** How late a reset may come: the lab watchdog's 100 ms look and the power cycle's freeze, on a loaded machine. */
const MARGIN_MS = 3_000;

describe("e2e: the node agent on real nodes, from manifests/node-agent/", () => {
  let lab: Lab;
  const log = (m: string) => console.log(`[node-agent] ${m}`);
  const resets = (node?: string): LabEvent[] => watchdogResets(lab.dir, { node });
  const custom = () => lab.kc.makeApiClient(CustomObjectsApi);
  const nodeFence = (node: string) => ({
    apiVersion: `${GROUP}/${VERSION}`,
    kind: "NodeFence",
    metadata: { name: node },
    spec: { nodeName: node },
  });
  /** A status write as the operator sends it (update of the object read now), with only the phase set. */
  const setPhase = async (node: string, phase: string) => {
    const f = await custom().getClusterCustomObject({ group: GROUP, version: VERSION, plural: "nodefences", name: node });
    await custom().replaceClusterCustomObjectStatus({
      group: GROUP,
      version: VERSION,
      plural: "nodefences",
      name: node,
      body: { ...f, status: { phase } },
    });
  };
  const renewTime = (l: V1Lease | undefined) => String(l?.spec?.renewTime ?? "");

  /** The node up in a boot, its agent armed (a test before may have reset it). */
  async function settled(nodes = lab.nodes()): Promise<void> {
    for (const n of nodes) {
      await waitFor(`${n}: no power change under way`, () => !existsSync(paths(lab.dir).node(n).lock), {
        timeoutMs: 60_000,
        intervalMs: 100,
      });
      await lab.waitForNodeReady(n, { timeoutMs: 90_000 });
    }
    await waitForArmedAgents(lab, nodes, 120_000);
  }

  before(async () => {
    lab = await Lab.up({
      dir: mkdtempSync(join(tmpdir(), "stockade-e2e-node-agent-")),
      nodes: 3,
      runtime: "real",
      images: await realNodeImages(),
      watchdogTimeoutSeconds: T,
      log,
    });
    await run("kubectl", ["apply", "-f", join(repoRoot, "manifests/01-crds.yaml")], { env: lab.env });
    await lab.waitForCrds(["nodefences"]);
    await installNodeAgent(lab, { log });
  });
  after(async () => {
    await lab?.down();
  });

  test("every node's agent arms its watchdog and keeps its record: armed, T read from the device, D, F, a key and an address", async () => {
    const { records, problems } = await nodeAgentRecords(lab);
    assert.deepEqual(problems, []);
    for (const n of lab.nodes()) {
      const r = records.get(n);
      assert.ok(r, `${n} has a record`);
      assert.equal(r.armed, true);
      assert.equal(r.watchdogTimeoutSeconds, T, "T as the device says it");
      assert.equal(r.deadlineSeconds, D);
      assert.equal(r.controlPlaneDownSeconds, LAB_AGENT_TIMINGS.controlPlaneDownSeconds);
      assert.match(r.peerAddress, /^[0-9.]+:9447$/);
      assert.ok(lab.watchdog(n).armed, `${n}'s watchdog armed`);
    }
    assert.deepEqual(resets(), [], "no reset while the agents run");
  });

  test("the control plane down for two minutes: no node resets; the agents renew once it is back", async () => {
    await settled();
    const boots = new Map(lab.nodes().map((n) => [n, lab.machine(n).bootID]));
    const before = resets().length;
    const leases = lab.kc.makeApiClient(CoordinationV1Api);
    await lab.killComponent("kube-apiserver");
    const downAt = Date.now();
    try {
      // Well past D (12 s): without the peers' majority every watchdog would have fired many times over.
      while (Date.now() - downAt < 120_000) {
        await sleep(2_000);
        assert.equal(resets().length, before, `a node was reset ${Math.round((Date.now() - downAt) / 1000)} s into the outage`);
      }
    } finally {
      await lab.startComponent("kube-apiserver");
    }
    const back = Date.now();
    for (const n of lab.nodes()) {
      assert.equal(lab.machine(n).bootID, boots.get(n), `${n} kept its boot`);
      assert.ok(lab.watchdog(n).armed, `${n}'s watchdog still armed (fed through the outage)`);
    }
    await waitFor(
      "every record renewed after the control plane came back",
      async () => {
        const list = await leases.listNamespacedLease({ namespace: NODE_AGENT_NAMESPACE }).catch(() => undefined);
        return list && lab.nodes().every((n) => Date.parse(renewTime(list.items.find((l) => l.metadata?.name === n))) >= back - 1_000);
      },
      { timeoutMs: 60_000, intervalMs: 500 },
    );
    assert.equal(resets().length, before);
  });

  test("a node cut off from the API stays up on its peers' word, a NodeFence not started (held) too; once it is Fencing its peers say so and its watchdog resets it within D + T", async () => {
    await settled();
    const node = lab.nodes()[2]!;
    const boot = lab.machine(node).bootID;
    const before = resets(node).length;
    await lab.partition(node);
    try {
      // 2·D with no own API read: only the peers' signed "no NodeFence" keeps it fed (one of its 2 peers is a quorum).
      // The NodeFence exists from the start but has no phase: what the operator leaves when it holds one (no policy
      // selects the node, or the quorum guard refuses it) — the agents must not act on it.
      await custom().createClusterCustomObject({ group: GROUP, version: VERSION, plural: "nodefences", body: nodeFence(node) });
      await sleep(D * 1000);
      await setPhase(node, "Pending");
      await sleep(D * 1000);
      assert.equal(resets(node).length, before, "reset while cut off, with a NodeFence held (no phase, then Pending)");
      // What the operator writes when it begins the fence (status subresource; no operator runs here).
      await setPhase(node, "Fencing");
      const createdAt = Date.now();
      const ev = await waitFor(`${node}'s watchdog to reset it`, () => resets(node)[before], {
        timeoutMs: (D + T + 30) * 1000,
        intervalMs: 100,
      });
      const after = Date.parse(ev.time) - createdAt;
      log(`NodeFence Fencing → reset: ${(after / 1000).toFixed(1)} s (bound D + T = ${D + T} s)`);
      assert.equal(ev.detail.bootID, boot);
      assert.ok(after <= (D + T) * 1000 + MARGIN_MS, `reset ${after} ms after the NodeFence; the promise is D + T = ${D + T} s`);
    } finally {
      // The NodeFence goes first (no operator: no finalizer), so the agent of the new boot arms again once reconnected.
      await custom()
        .deleteClusterCustomObject({ group: GROUP, version: VERSION, plural: "nodefences", name: node })
        .catch(() => undefined);
      await lab.reconnect(node);
    }
    await settled([node]);
    assert.notEqual(lab.machine(node).bootID, boot, "a new boot");
  });

  test("two nodes cut from each other (each still reaching the API): no reset", async () => {
    await settled();
    const [a, , c] = lab.nodes() as [string, string, string];
    const before = resets().length;
    await lab.partitionNodes(a, c);
    try {
      await sleep(2 * D * 1000);
      assert.equal(resets().length, before, "a node-to-node cut reset a node");
    } finally {
      await lab.heal(a);
    }
  });

  test("a request that is not a known peer's, signed, is refused (401) and answers nothing about the node", async () => {
    await settled();
    const { records } = await nodeAgentRecords(lab);
    const node = lab.nodes()[0]!;
    const addr = records.get(node)!.peerAddress;
    const ask = (body: object) =>
      fetch(`http://${addr}/v1/peer-check`, { method: "POST", body: JSON.stringify(body), signal: AbortSignal.timeout(5_000) });
    const nonce = Buffer.alloc(16, 7).toString("base64");
    const unsigned = await ask({ version: 1, from: lab.nodes()[1], nonce });
    assert.equal(unsigned.status, 401, await unsigned.text());
    const forged = await ask({ version: 1, from: lab.nodes()[1], nonce, signature: Buffer.alloc(64, 1).toString("base64") });
    assert.equal(forged.status, 401);
    assert.match(await forged.text(), /does not verify/);
    const stranger = await ask({ version: 1, from: "not-a-node", nonce, signature: Buffer.alloc(64, 1).toString("base64") });
    assert.equal(stranger.status, 401);
    assert.match(await stranger.text(), /not a known peer/);
  });

  test("the agent killed: the armed watchdog resets its node within T", async () => {
    await settled();
    const node = lab.nodes()[1]!;
    const before = resets(node).length;
    const boot = lab.machine(node).bootID;
    const killed = await lab.killNodeAgent(node);
    assert.ok(killed.length >= 1, "the agent's processes were killed");
    const ev = await waitFor(`${node}'s watchdog to reset it`, () => resets(node)[before], { timeoutMs: (T + 30) * 1000, intervalMs: 100 });
    assert.equal(ev.detail.bootID, boot);
    // The kubelet restarts a killed container at once and the lab kills it again: a restarted agent may arm and feed
    // once in between (as a crash-looping agent would), so the reset counts from the last kill.
    const kills = readEvents(lab.dir).filter(
      (e) => e.kind === "fault" && e.detail.fault === "agent-killed" && e.node === node && Date.parse(e.time) <= Date.parse(ev.time),
    );
    const after = Date.parse(ev.time) - Date.parse(kills.at(-1)!.time);
    assert.ok(after <= T * 1000 + MARGIN_MS, `reset ${after} ms after the last kill; T = ${T} s`);
    await settled([node]);
    assert.notEqual(lab.machine(node).bootID, boot, "a new boot, its agent armed again");
  });

  test("the node's watchdog disabled: the restarted agent runs unarmed and its record says armed=false", async () => {
    await settled();
    const node = lab.nodes()[0]!;
    await lab.disableWatchdog(node);
    const pod = (await lab.core.listNamespacedPod({ namespace: NODE_AGENT_NAMESPACE, fieldSelector: `spec.nodeName=${node}` })).items.find(
      (p) => !p.metadata?.deletionTimestamp,
    )!;
    await lab.core.deleteNamespacedPod({ namespace: NODE_AGENT_NAMESPACE, name: pod.metadata!.name! });
    const before = resets(node).length;
    const record = await waitFor(
      `${node}'s record from a new agent, unarmed`,
      async () => {
        const r = (await nodeAgentRecords(lab)).records.get(node);
        return r && r.holder !== pod.metadata!.name && !r.armed ? r : undefined;
      },
      { timeoutMs: 90_000, intervalMs: 500 },
    );
    assert.equal(record.armed, false);
    await sleep((T + 2) * 1000);
    assert.equal(resets(node).length, before, "a disabled watchdog never resets its node");
  });
});
