// End-to-end, on real nodes (issue 28 items 3 and 4): a node condition written onto a live node's status the way
// node-problem-detector writes it (a status patch; the kubelet keeps heartbeating) fences the node once it has held
// for the policy's forSeconds — never before — and the pod is released only after the power-off was confirmed. The
// same condition on a node labelled control-plane fences nothing: the policy's QuorumGuard condition, `kubectl
// stockade explain` and a refused `kubectl stockade fence` say why.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { dirname, join } from "node:path";
import { promisify } from "node:util";
import { setTimeout as sleep } from "node:timers/promises";
import { Bed } from "../lab/bed.ts";
import { failoverTimeline } from "../lab/failover-timing.ts";
import { repoRoot } from "../lab/bins.ts";
import { waitFor } from "../lab/health.ts";

const run = promisify(execFile);
const FOR_SECONDS = 30;
const CP_LABEL = "node-role.kubernetes.io/control-plane";
/** The field manager the condition is written as, and the one writer the policy's trigger trusts. */
const WRITER = "node-problem-detector";

describe("e2e: condition triggers and control-plane nodes", () => {
  let bed: Bed;
  let node = "";
  let uid = "";
  before(async () => {
    bed = await Bed.up({ nodes: 3, name: "triggers" });
    await bed.policy("default", {
      triggers: { nodeConditions: [{ type: "KernelDeadlock", status: "True", forSeconds: FOR_SECONDS, trustedWriters: [WRITER] }] },
      guards: { maxUnhealthyNodes: 2, maxConcurrentFences: 1 },
    });
    await bed.startOperator();
    const [pod] = await bed.statefulSet("kd", 1);
    node = pod!.spec!.nodeName!;
    uid = pod!.metadata!.uid!;
  });
  after(async () => {
    await bed?.down();
  });

  /**
   * What node-problem-detector does: a strategic-merge patch of the Node's status conditions (merged by type), as
   * field manager node-problem-detector (recorded in the Node's managedFields).
   */
  async function setCondition(status: "True" | "False"): Promise<void> {
    const now = new Date().toISOString().replace(/\.\d+Z$/, "Z");
    const condition = {
      type: "KernelDeadlock",
      status,
      reason: status === "True" ? "DockerHung" : "KernelHasNoDeadlock",
      message: status === "True" ? "task docker:7 blocked for more than 120 seconds." : "kernel has no deadlock",
      lastHeartbeatTime: now,
      lastTransitionTime: now,
    };
    await bed.kubectl(
      "patch",
      "node",
      node,
      "--subresource=status",
      `--field-manager=${WRITER}`,
      "--type=strategic",
      "-p",
      JSON.stringify({ status: { conditions: [condition] } }),
    );
  }

  async function plugin(args: string[]): Promise<{ code: number; out: string }> {
    const env = { ...bed.lab.env, PATH: `${dirname(process.execPath)}:${bed.lab.env.PATH}` };
    try {
      const r = await run(process.execPath, [join(repoRoot, "bin/kubectl-stockade"), ...args], { env, cwd: repoRoot, timeout: 60_000 });
      return { code: 0, out: r.stdout + r.stderr };
    } catch (err) {
      const e = err as { code?: number; stdout?: string; stderr?: string };
      if (typeof e.code !== "number") throw err;
      return { code: e.code, out: (e.stdout ?? "") + (e.stderr ?? "") };
    }
  }

  const nodeFences = async () =>
    (
      (await bed.custom.listClusterCustomObject({ group: "stockade.io", version: "v1alpha1", plural: "nodefences" })) as {
        items: unknown[];
      }
    ).items;

  test("a control-plane node whose condition held is not fenced: QuorumGuard, explain, and a refused manual fence say why", async () => {
    await bed.kubectl("label", "node", node, `${CP_LABEL}=`);
    const t0 = Date.now();
    await setCondition("True");
    const policy = await waitFor(
      "QuorumGuard=True on the policy",
      async () => {
        const p = await bed.getPolicy("default");
        return p.status?.conditions?.find((c) => c.type === "QuorumGuard" && c.status === "True") ? p : undefined;
      },
      { timeoutMs: 90_000 },
    );
    assert.ok(Date.now() - t0 >= FOR_SECONDS * 1000, "refused only once it was due");
    const q = policy.status!.conditions!.find((c) => c.type === "QuorumGuard")!;
    assert.equal(q.reason, "ControlPlaneNode");
    assert.match(q.message, new RegExp(`${node} is not fenced: it is a control-plane node \\(label ${CP_LABEL}\\)`));
    const explain = await plugin(["explain", node]);
    assert.equal(explain.code, 0, explain.out);
    assert.match(explain.out, /^Verdict: {3}ControlPlane$/m, explain.out);
    assert.match(explain.out, /KernelDeadlock=True for 30 s: HELD since /, explain.out);
    assert.match(explain.out, /^Control plane: yes: it is a control-plane node/m, explain.out);
    const refused = await plugin(["fence", node, "--yes"]);
    assert.notEqual(refused.code, 0, refused.out);
    assert.match(refused.out, /is not fenced: it is a control-plane node .*spec\.allowControlPlane: true .*nothing changed/, refused.out);
    // A NodeFence made without the plugin waits, refused, with the reason in its status.
    await bed.create("nodefences", { metadata: { name: node }, spec: { nodeName: node } });
    const f = await bed.waitForFence(
      node,
      (x) => x.status?.conditions?.some((c) => c.type === "Fenced" && c.reason === "ControlPlaneNode") ?? false,
      "refused (ControlPlaneNode)",
    );
    assert.equal(f.status?.phase, undefined, "never started");
    assert.match(f.status!.conditions!.find((c) => c.type === "Fenced")!.message, /control-plane node/);
    await sleep(3_000);
    assert.equal(bed.lab.machine(node).power, "on");
    assert.equal((await bed.getFence(node))?.status?.attempts, undefined, "no agent ran");
    await bed.kubectl("delete", "nodefence", node, "--wait");
    // Back to a worker, the condition gone: the next test starts from nothing.
    await setCondition("False");
    await bed.kubectl("label", "node", node, `${CP_LABEL}-`);
    await waitFor(
      "the held condition forgotten",
      async () => ((await bed.getPolicy("default")).status?.heldConditions?.length ? undefined : true),
      { timeoutMs: 30_000 },
    );
  });

  test("a condition patched onto a live node fences it after forSeconds, power-off confirmed before the release", async () => {
    const t0 = Date.now();
    await setCondition("True");
    const held = await waitFor(
      "the condition recorded as held in the policy's status",
      async () => (await bed.getPolicy("default")).status?.heldConditions?.find((h) => h.node === node),
      { timeoutMs: 30_000 },
    );
    assert.equal(held.type, "KernelDeadlock");
    const waiting = await plugin(["explain", node]);
    assert.match(waiting.out, /^Verdict: {3}Waiting$/m, waiting.out);
    assert.match(waiting.out, /KernelDeadlock=True for 30 s: HELD since .* s left/, waiting.out);
    const f = await bed.waitForFence(node, (x) => x.status?.phase === "Released", "Released", 180_000);
    const created = Date.parse(f.metadata!.creationTimestamp as unknown as string);
    // The apiserver's creationTimestamp has whole seconds: allow one.
    assert.ok(created >= t0 - 1_000 + FOR_SECONDS * 1000, `created ${created - t0} ms after the condition, not before ${FOR_SECONDS} s`);
    assert.equal(f.spec.origin, "Automatic");
    assert.deepEqual(f.spec.trigger, {
      nodeCondition: { type: "KernelDeadlock", status: "True", forSeconds: FOR_SECONDS, trustedWriters: [WRITER] },
    });
    assert.equal(f.status?.evidence?.method, "PowerOffConfirmed");
    assert.equal(f.status?.evidence?.heartbeat?.silent, false, "confirmed while the node still heartbeat");
    assert.equal(bed.lab.machine(node).power, "off");
    const { off, gone } = failoverTimeline(bed.rec, { node, oldUid: uid, since: t0 });
    assert.ok(off && gone, bed.rec.format(t0));
    assert.ok(off >= t0 + FOR_SECONDS * 1000, `powered off ${off - t0} ms after the condition`);
    assert.ok(off < gone, `power off before the pod is released\n${bed.rec.format(t0)}`);
    const replacement = await bed.waitForReplacement("kd-0", uid, 120_000);
    assert.notEqual(replacement.spec?.nodeName, node);
    const explain = await plugin(["explain", node]);
    assert.match(explain.out, /trigger: {6}condition KernelDeadlock=True held for 30 s/, explain.out);
    const report = await bed.invariant();
    assert.deepEqual(report.violations, [], JSON.stringify(report, null, 2));
    assert.equal((await nodeFences()).length, 1);
  });
});
