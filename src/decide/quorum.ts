// Quorum awareness: a fence must not be what breaks the control plane. A control-plane node (labelled so by its
// installer: a kubelet cannot set node-role.kubernetes.io/* labels on its own Node under the NodeRestriction admission
// plugin) or a node running a member of the cluster's etcd (kubeadm's static etcd pod, mirrored in kube-system) is
// never fenced — automatically or by a NodeFence — unless its policy says spec.allowControlPlane. The etcd check reads
// mirror pods the node's own kubelet makes: a node can claim an etcd member it does not run, which only stops it being
// fenced (the safe side); an etcd member whose kubelet hides its mirror pod is still refused by the label when kubeadm
// made the node a control-plane node.
import type { V1Node, V1Pod } from "@kubernetes/client-node";

export const CONTROL_PLANE_LABELS = ["node-role.kubernetes.io/control-plane", "node-role.kubernetes.io/master"] as const;
export const MIRROR_POD_ANNOTATION = "kubernetes.io/config.mirror";

/** Whether a pod is a static etcd member on its node: kube-system, a mirror pod, component=etcd (kubeadm) or named etcd-*. */
export function isEtcdMember(pod: V1Pod): boolean {
  const m = pod.metadata;
  if (m?.namespace !== "kube-system" || m.annotations?.[MIRROR_POD_ANNOTATION] === undefined) return false;
  if (m.deletionTimestamp) return false;
  return m.labels?.component === "etcd" || (m.name ?? "").startsWith("etcd-");
}

/** Why this node holds up the control plane (a label, an etcd member), or undefined when it does not. */
export function controlPlaneRole(node: V1Node | undefined, pods: readonly V1Pod[]): string | undefined {
  const labels = node?.metadata?.labels ?? {};
  const label = CONTROL_PLANE_LABELS.find((l) => Object.hasOwn(labels, l));
  if (label) return `it is a control-plane node (label ${label})`;
  const name = node?.metadata?.name;
  const etcd = pods.find((p) => p.spec?.nodeName === name && isEtcdMember(p));
  if (etcd) return `it runs a member of the cluster's etcd (static pod kube-system/${etcd.metadata?.name})`;
  return undefined;
}

/**
 * Why fencing this node under this policy is refused, or undefined when it may be fenced: a control-plane or etcd node
 * whose policy does not set allowControlPlane.
 */
export function quorumRefusal(
  node: V1Node | undefined,
  pods: readonly V1Pod[],
  policy: { metadata?: { name?: string }; spec: { allowControlPlane?: boolean } } | undefined,
): string | undefined {
  if (policy?.spec.allowControlPlane) return undefined;
  const role = controlPlaneRole(node, pods);
  if (!role) return undefined;
  const name = node?.metadata?.name ?? "";
  return `${name} is not fenced: ${role}, and losing it may break the control plane's quorum; FencingPolicy ${policy?.metadata?.name ?? "(none)"} does not set spec.allowControlPlane`;
}
