// Issue 28 item 5 on real nodes: fence history that lasts. One node is fenced twice — first automatically (its
// machine crashes under a StatefulSet pod), then, after it was unfenced and came back, by an administrator with
// `kubectl stockade fence --replace`, which deletes the first episode's NodeFence. The second NodeFence is then
// deleted while the operator is down (its finalizer holds it until the restarted operator writes the record). Both
// episodes are kept as FenceRecords, each with its reason, who asked, the levels tried, the evidence and the outcome,
// and `kubectl stockade history` shows them, newest first.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { dirname, join } from "node:path";
import { promisify } from "node:util";
import { Bed } from "../lab/bed.ts";
import { repoRoot } from "../lab/bins.ts";
import { waitFor } from "../lab/health.ts";
import { GROUP, VERSION, type FenceRecord, type NodeFence } from "../src/api/v1alpha1.ts";
import { HISTORY_NODE_LABEL } from "../src/decide/fence-history.ts";

const run = promisify(execFile);
const released = (f: NodeFence) => f.status?.phase === "Released";

describe("e2e: fence history across two fences of one node, the NodeFence's deletion and an operator restart", () => {
  let bed: Bed;
  before(async () => {
    bed = await Bed.up({ nodes: 3, name: "history" });
    await bed.policy("default", { guards: { maxUnhealthyNodes: 1, maxConcurrentFences: 1 } });
    await bed.startOperator();
  });
  after(async () => {
    const r = await bed?.invariant().catch(() => undefined);
    if (r) console.log(`invariant: ${r.identities} identities, ${r.replacements} replacements, ${r.violations.length} violations`);
    await bed?.down();
  });

  /** The plugin as an administrator runs it. */
  const plugin = async (...args: string[]) => {
    const env = { ...bed.lab.env, PATH: `${dirname(process.execPath)}:${bed.lab.env.PATH}` };
    return (await run(process.execPath, [join(repoRoot, "bin/kubectl-stockade"), ...args], { env, cwd: repoRoot, timeout: 120_000 }))
      .stdout;
  };
  const records = async (node: string): Promise<FenceRecord[]> =>
    (
      (await bed.custom.listClusterCustomObject({
        group: GROUP,
        version: VERSION,
        plural: "fencerecords",
        labelSelector: `${HISTORY_NODE_LABEL}=${node}`,
      })) as { items: FenceRecord[] }
    ).items;
  const recordOf = async (node: string, uid: string) => (await records(node)).find((r) => r.spec.nodeFence.uid === uid);

  test("both episodes are kept with their reasons and outcomes, after the NodeFences are gone and the operator restarted", async () => {
    const [victim] = await bed.statefulSet("hist", 1);
    const node = victim!.spec!.nodeName!;

    // Episode 1: the machine crashes; the operator fences it (Automatic) and releases the pod.
    await bed.lab.crash(node);
    await bed.waitForReplacement("hist-0", victim!.metadata!.uid!);
    const first = await bed.waitForFence(node, released, "Released");
    const uid1 = first.metadata!.uid!;
    const during = await waitFor("the first episode's record, Released", async () => {
      const r = await recordOf(node, uid1);
      return r?.status?.outcome === "Released" ? r : undefined;
    });
    assert.equal(during.status?.endTime, undefined, "not ended while the node stays fenced");
    // Recovered: unfenced (powered back on), Ready again.
    await bed.unfence(node);
    await waitFor(
      "the first record ended by the unfence",
      async () => (await recordOf(node, uid1))?.status?.endReason === "UnfenceRequested",
    );

    // Episode 2: an administrator fences the node again; --replace deletes the first (Unfenced) NodeFence.
    const out = await plugin("fence", node, "--replace", "--yes", "--reason", "second episode: suspect NIC");
    assert.match(out, /deleted \(it was Unfenced\)/, out);
    const second = await bed.waitForFence(node, (f) => f.metadata?.uid !== uid1 && released(f), "Released again (a new NodeFence)");
    const uid2 = second.metadata!.uid!;
    assert.equal(second.status?.levelNumber, 1, "the level counted from 1 in status");
    const cols = await bed.kubectl("get", "nodefence", node);
    assert.match(cols.split("\n")[0]!, /^NAME\s+PHASE\s+ORIGIN\s+LEVEL\s+EVIDENCE\s+AGE$/, cols);
    assert.match(cols.split("\n")[1]!, new RegExp(`^${node}\\s+Released\\s+Manual\\s+1\\s+PowerOffConfirmed\\s`), cols);
    await waitFor("the second episode's record, Released", async () => (await recordOf(node, uid2))?.status?.outcome === "Released");

    // The operator dies; the NodeFence is deleted meanwhile: its finalizer keeps it until an operator writes the record.
    await bed.killOperator();
    await bed.kubectl("delete", "nodefence", node, "--wait=false");
    await new Promise((r) => setTimeout(r, 2_000));
    assert.ok(await bed.getFence(node), "held by its finalizer while no operator runs");
    assert.equal((await recordOf(node, uid2))?.status?.endTime, undefined, "the record does not know yet");
    await bed.startOperator();
    await waitFor("the NodeFence gone once the restarted operator finalized it", async () => !(await bed.getFence(node)), {
      timeoutMs: 60_000,
    });

    // Both episodes, as kept.
    const kept = await records(node);
    assert.equal(kept.length, 2, JSON.stringify(kept.map((r) => r.metadata?.name)));
    const r1 = kept.find((r) => r.spec.nodeFence.uid === uid1)!;
    const r2 = kept.find((r) => r.spec.nodeFence.uid === uid2)!;
    assert.equal(r1.spec.origin, "Automatic");
    assert.match(r1.spec.reason ?? "", /no heartbeat since .*guarded pod\(s\) waited/);
    assert.deepEqual(
      [r1.status?.outcome, r1.status?.endReason, r1.status?.evidence?.method, r1.status?.podsReleased],
      ["Released", "UnfenceRequested", "PowerOffConfirmed", 1],
    );
    assert.deepEqual(
      r1.status?.levels?.[0]?.agents.map((a) => [a.name, a.outcome]),
      [["lab-ipmi", "Succeeded"]],
    );
    assert.equal(r1.status?.levels?.[0]?.level, 1, "levels counted from 1");
    assert.equal(r2.spec.origin, "Manual");
    assert.equal(r2.spec.reason, "second episode: suspect NIC");
    assert.deepEqual(
      [r2.status?.outcome, r2.status?.endReason, r2.status?.evidence?.method, r2.status?.podsReleased],
      ["Released", "Deleted", "PowerOffConfirmed", 0],
    );
    assert.ok(
      r2.status?.startTime && r1.status?.endTime && r2.status.startTime > r1.status.endTime,
      "the second began after the first ended",
    );

    // What an administrator reads.
    const data = JSON.parse(await plugin("history", node, "-o", "json")) as {
      episodes: { origin: string; outcome: string; reason: string }[];
    };
    assert.deepEqual(
      data.episodes.map((e) => [e.origin, e.outcome]),
      [
        ["Manual", "Released"],
        ["Automatic", "Released"],
      ],
      "newest first",
    );
    const table = await plugin("history", node);
    assert.match(table, /2 episode\(s\), newest first/, table);
    assert.match(table, /\(Deleted\)\s+Manual\s+Released\s+PowerOffConfirmed\s+1: lab-ipmi Succeeded/, table);
    assert.match(table, /\(UnfenceRequested\)\s+Automatic\s+Released/, table);
  });
});
