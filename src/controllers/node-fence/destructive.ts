// Every destructive call the NodeFence controller makes, one function each, with the checks that precede it:
//   - powerCommand: power off/on of the machine through its agent, or a storage fence put up or lifted
//     (beforePowerCommand: leadership, and before each power-off a fresh read of the Node and Lease and powerOffRefused)
//   - markFenced: the fenced taint (and the node's Fenced condition)
//   - removeFenceTaints: the fenced and out-of-service taints taken off again
//   - forceDeletePod, breakClaimLock, deleteVolumeAttachment, setOutOfServiceTaint: the releases, each only after
//     assertReleaseEvidence (confirmation evidence, phase Releasing, nothing but volumes on StorageFenced)
// Leadership is asserted right before each call. The Node and Lease each step is decided on are read after the last
// write (observe.ts: none of these steps is in REUSABLE_VIEW), and a claim lock is broken on the claim read just before.
import type { V1Node, V1Pod, V1Taint } from "@kubernetes/client-node";
import type { FenceAgent, NodeFence } from "../../api/v1alpha1.ts";
import { driverFor, storageDriverFor } from "../../agents/registry.ts";
import { runStorageFence } from "../../agents/run-storage.ts";
import { fenceOff, runOperation } from "../../agents/run.ts";
import { AgentError, type AgentContext } from "../../agents/types.ts";
import { LOCK_ANNOTATION, breakLock, formatLock } from "../../decide/claim-lock.ts";
import { FENCED_TAINT, OUT_OF_SERVICE_TAINT, powerOffRefused, type ReleaseItem } from "../../decide/fence-machine.ts";
import { isNotFound } from "../../kube/api.ts";
import { networkFenceApi } from "../../kube/network-fence.ts";
import { FENCED_CONDITION } from "./conditions.ts";
import type { StepContext } from "./context.ts";
import { readFresh } from "./observe.ts";

type Guard = Pick<StepContext, "d" | "leadership">;

/** Checked before every try of a power command (agents/run.ts), never once for all of them. */
export function beforePowerCommand(c: Guard, fence: NodeFence): (o: "off" | "on") => Promise<void> {
  const nodeName = fence.spec.nodeName;
  return async (o) => {
    try {
      c.leadership.assertLeading(`power ${o} of ${nodeName}`);
    } catch (err) {
      throw new AgentError("Cancelled", (err as Error).message);
    }
    if (o !== "off") return;
    // Re-read right before each power command: never a control-plane or etcd node its policy does not allow; and
    // automatic fencing needs sustained silence (or its trigger condition still held).
    const [n, l] = await readFresh(c.d.kube, fence);
    const why = powerOffRefused({
      fence,
      node: n,
      lease: l,
      // The fresh Lease's renewTime as this process saw it: one newer than its cache counts as just renewed (refused).
      leaseObservedSilentMs: l ? c.d.caches.leaseSilentForMs(nodeName, l) : undefined,
      now: c.d.clock(),
      policies: c.d.caches.policies.list(),
      pods: c.d.caches.podsOn(nodeName),
    });
    if (why) throw new AgentError("Cancelled", why);
  };
}

export interface PowerCommand {
  fence: NodeFence;
  agent: FenceAgent;
  op: "off" | "on";
  /** The agent's resolved parameters ({} for a storage lift whose parameters no longer resolve). */
  parameters: Record<string, string>;
  target: V1Node;
  timeoutMs: number;
  signal: AbortSignal;
  /** Cloud agents: the witness that lets "this instance does not exist" count as off, or why there is none (agents/cloud.ts). */
  missingInstance?: AgentContext["missingInstance"];
}

/** Runs the agent's power (or storage fence) command, beforePowerCommand before each try. */
export async function powerCommand(c: Guard, x: PowerCommand) {
  const { agent, op } = x;
  const agentName = agent.metadata?.name ?? "";
  const storage = storageDriverFor(agent.spec.type);
  const ctx = {
    node: x.fence.spec.nodeName,
    parameters: x.parameters,
    annotations: {},
    notes: [] as string[],
    ...(x.missingInstance ? { missingInstance: x.missingInstance } : {}),
  };
  const opts = {
    timeoutMs: x.timeoutMs,
    retries: agent.spec.retries ?? 2,
    backoffMs: (agent.spec.retryBackoffSeconds ?? 1) * 1000,
    beforeTry: beforePowerCommand(c, x.fence),
    signal: x.signal,
    // A machine whose Node is gone may already be off (a terminated VM, a reclaimed spot instance): asked first, so
    // that an automatic fence, which may not power it off (powerOffRefused), can still confirm it. The cache only
    // chooses whether to ask: the refusal itself reads the Node fresh.
    queryFirst: !c.d.caches.nodes.get(x.fence.spec.nodeName),
  };
  if (storage) {
    // A storage fence gets the NetworkFence API and the Node's kubelet-reported addresses (used only if its parameters say so).
    const addresses = (x.target.status?.addresses ?? []).map((a) => ({ type: a.type, address: a.address }));
    return await runStorageFence(storage, { ...ctx, agent: agentName, kube: networkFenceApi(c.d.kube), addresses }, op, opts);
  }
  const driver = driverFor(agent.spec.type, agent.spec.agent);
  return op === "off" ? await fenceOff(driver, ctx, opts) : await runOperation(driver, ctx, op, opts);
}

/** The fenced taint and the node's Fenced condition: it stays tainted until unfenced. */
export async function markFenced(c: Guard, fence: NodeFence, node: V1Node): Promise<void> {
  const nodeName = fence.spec.nodeName;
  c.leadership.assertLeading(`taint node ${nodeName}`);
  await addTaint(c, node, { key: FENCED_TAINT, effect: "NoExecute", value: "true" });
  await c.d.kube.setNodeCondition(nodeName, FENCED_CONDITION, {
    type: FENCED_CONDITION,
    status: "True",
    reason: "FencedByStockade",
    message: `fenced by Stockade (NodeFence ${fence.metadata?.name ?? ""}); it stays tainted until unfenced`,
    lastTransitionTime: new Date(),
    lastHeartbeatTime: new Date(),
  });
}

/** Takes the given taints (those this fence put on) off the node. */
export async function removeFenceTaints(c: Guard, fence: NodeFence, node: V1Node, ours: Set<string>): Promise<void> {
  const taints = node.spec?.taints ?? [];
  if (!taints.some((t) => ours.has(t.key))) return;
  c.leadership.assertLeading(`remove taints from node ${fence.spec.nodeName}`);
  await c.d.kube.setTaints(
    node,
    taints.filter((t) => !ours.has(t.key)),
  );
}

/** The invariant, checked where it matters: nothing is released from a fence without evidence. */
export function assertReleaseEvidence(fence: NodeFence, items: ReleaseItem[]): void {
  const nodeName = fence.spec.nodeName;
  const evidence = fence.status?.evidence?.method ?? "";
  if (!evidence || !fence.status?.evidence?.heartbeat || fence.status?.phase !== "Releasing")
    throw new Error(`refusing to release from NodeFence ${nodeName} in phase ${fence.status?.phase} without confirmation evidence`);
  // Storage fenced, the machine perhaps running: its pods and the out-of-service taint are never released on that.
  for (const item of items)
    if (evidence === "StorageFenced" && (item.kind === "Pod" || item.kind === "Taint"))
      throw new Error(`refusing to release ${item.kind} of NodeFence ${nodeName} on StorageFenced evidence: volumes only`);
}

export async function forceDeletePod(c: Guard, p: V1Pod): Promise<"deleted" | "gone"> {
  c.leadership.assertLeading(`force-delete pod ${p.metadata?.namespace}/${p.metadata?.name}`);
  return await c.d.kube.forceDeletePod(p);
}

/** Breaks the pod's lock on its claim, read just before; returns the release's action. */
export async function breakClaimLock(
  c: Guard,
  item: Extract<ReleaseItem, { kind: "ClaimLock" }>,
  by: string,
  now: () => string,
): Promise<string> {
  const ns = item.pvc.metadata?.namespace ?? "";
  const claim = item.pvc.metadata?.name ?? "";
  try {
    const fresh = await c.d.kube.core.readNamespacedPersistentVolumeClaim({ name: claim, namespace: ns });
    const broken = breakLock(fresh, item.pod.metadata?.uid ?? "", by, now());
    if (!broken) return "AlreadyReleased";
    c.leadership.assertLeading(`break the claim lock of ${ns}/${claim}`);
    // Compare-and-swap on the resourceVersion just read: a grant in between makes this fail and retry.
    await c.d.kube.casAnnotateClaim(fresh, { [LOCK_ANNOTATION]: formatLock(broken) });
    return "Broken";
  } catch (err) {
    if (!isNotFound(err)) throw err;
    return "AlreadyReleased";
  }
}

export async function deleteVolumeAttachment(
  c: Guard,
  item: Extract<ReleaseItem, { kind: "VolumeAttachment" }>,
): Promise<"deleted" | "gone"> {
  c.leadership.assertLeading(`delete VolumeAttachment ${item.name}`);
  return await c.d.kube.deleteVolumeAttachment(item.name, item.uid);
}

/** Adds or removes the out-of-service taint (node.kubernetes.io/out-of-service) on a node that still exists. */
export async function setOutOfServiceTaint(
  c: Guard,
  fence: NodeFence,
  node: V1Node | undefined,
  action: "Added" | "Removed",
): Promise<void> {
  if (!node) return;
  c.leadership.assertLeading(`${action === "Added" ? "add" : "remove"} the out-of-service taint on ${fence.spec.nodeName}`);
  if (action === "Added") return await addTaint(c, node, { key: OUT_OF_SERVICE_TAINT, value: "nodeshutdown", effect: "NoExecute" });
  const taints = node.spec?.taints ?? [];
  if (taints.some((t) => t.key === OUT_OF_SERVICE_TAINT))
    await c.d.kube.setTaints(
      node,
      taints.filter((t) => t.key !== OUT_OF_SERVICE_TAINT),
    );
}

async function addTaint(c: Guard, node: V1Node, taint: V1Taint): Promise<void> {
  const taints = node.spec?.taints ?? [];
  if (taints.some((t) => t.key === taint.key && t.effect === taint.effect)) return;
  await c.d.kube.setTaints(node, [...taints, { ...taint, timeAdded: new Date() }]);
}
