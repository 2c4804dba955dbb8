// The NodeDown pod condition the pod-safety proposal asks for: every pod of a partitioned node says
// so, naming the node and since when, and stops saying so if the node comes back unfenced.
import type { V1Pod, V1PodCondition } from "@kubernetes/client-node";
import type { NodeHealth } from "./node-health.ts";

export const NODE_DOWN = "NodeDown";

export interface NodeDownChange {
  /** The pod's node: the controller queues its writes by node (one entry per node, however many pods it has). */
  node: string;
  namespace: string;
  name: string;
  uid: string;
  /** The condition to set, or null to remove it. */
  condition: { status: "True"; reason: string; message: string } | null;
}

export function desiredNodeDown(health: NodeHealth, fenced: boolean): NodeDownChange["condition"] {
  if (health.state === "Partitioned") {
    return {
      status: "True",
      reason: "NodePartitioned",
      message: `node ${health.name} has sent no heartbeat since ${health.lastHeartbeat?.toUTC().toISO({ suppressMilliseconds: true }) ?? "ever"} (Ready=${health.ready}, node Lease stale)`,
    };
  }
  if (fenced) return { status: "True", reason: "NodeFenced", message: `node ${health.name} is fenced` };
  return null;
}

export const hasNodeDown = (pod: V1Pod): boolean => pod.status?.conditions?.some((c) => c.type === NODE_DOWN) ?? false;

/**
 * The change that gives the pod the wanted NodeDown, or undefined when it has it. `health` (the node's): a pod keeps
 * the NodeDown it has while its node is still silent and has not heartbeat since the condition was set — not yet
 * partitioned again only because this replica counts the silence again after a gap of its own or a change of leader
 * (kube/sight.ts), which is no sign of the node. Lost when the node heartbeats, as before.
 */
export function nodeDownChange(
  pod: V1Pod,
  want: NodeDownChange["condition"],
  health?: Pick<NodeHealth, "state" | "silent" | "lastHeartbeatMs">,
): NodeDownChange | undefined {
  const have: V1PodCondition | undefined = pod.status?.conditions?.find((c) => c.type === NODE_DOWN);
  if (want === null && have?.status === "True" && health && heldThroughRecount(have, health)) return undefined;
  const same =
    want === null ? have === undefined : have?.status === want.status && have.reason === want.reason && have.message === want.message;
  if (same) return undefined;
  return {
    node: pod.spec?.nodeName ?? "",
    namespace: pod.metadata?.namespace ?? "",
    name: pod.metadata?.name ?? "",
    uid: pod.metadata?.uid ?? "",
    condition: want,
  };
}

function heldThroughRecount(have: V1PodCondition, h: Pick<NodeHealth, "state" | "silent" | "lastHeartbeatMs">): boolean {
  if (h.state === "Partitioned" || !h.silent || h.lastHeartbeatMs === undefined) return false;
  const set = have.lastTransitionTime ? new Date(have.lastTransitionTime as Date | string).getTime() : NaN;
  return Number.isFinite(set) && set >= h.lastHeartbeatMs;
}
