// A node's heartbeat as evidence: what the kubelet last wrote (Node uid, bootID, Lease renewTime, Ready heartbeat),
// recorded right after a confirmation and compared before each release step (fence-machine.ts) and each lock break
// (claim-lock.ts). Its own module so that both read it without importing each other.
import type { V1Lease, V1Node } from "@kubernetes/client-node";
import type { NodeFenceStatusEvidenceHeartbeat } from "../api/v1alpha1.ts";
import { toDateTime } from "./node-health.ts";

/** The node's heartbeat as the kubelet wrote it: compared by value, never against our clock (immune to skew). */
export function heartbeatOf(node: V1Node | undefined, lease: V1Lease | undefined): NodeFenceStatusEvidenceHeartbeat {
  const ready = node?.status?.conditions?.find((c) => c.type === "Ready");
  const t = (v: Date | string | undefined | null) => (v ? (toDateTime(v)?.toUTC().toISO() ?? String(v)) : "");
  return {
    nodeUID: node?.metadata?.uid ?? "",
    bootID: node?.status?.nodeInfo?.bootID ?? "",
    leaseRenewTime: t(lease?.spec?.renewTime as Date | string | undefined),
    readyHeartbeatTime: t(ready?.lastHeartbeatTime as Date | string | undefined),
  };
}

/** The differences between two heartbeats, as words for people; [] when the node has not heartbeat since. */
export function heartbeatChanges(before: NodeFenceStatusEvidenceHeartbeat, now: NodeFenceStatusEvidenceHeartbeat): string[] {
  const out: string[] = [];
  const cmp = (k: keyof Omit<NodeFenceStatusEvidenceHeartbeat, "silent">, what: string) => {
    if ((before[k] ?? "") !== (now[k] ?? "")) out.push(`${what} ${before[k] || "(none)"} → ${now[k] || "(none)"}`);
  };
  cmp("nodeUID", "Node uid");
  cmp("bootID", "bootID");
  cmp("leaseRenewTime", "Lease renewTime");
  cmp("readyHeartbeatTime", "Ready heartbeat");
  return out;
}
