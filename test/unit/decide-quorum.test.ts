import { describe, test } from "node:test";
import assert from "node:assert/strict";
import type { V1Pod } from "@kubernetes/client-node";
import { controlPlaneRole, isEtcdMember, MIRROR_POD_ANNOTATION, quorumRefusal } from "../../src/decide/quorum.ts";
import { at, node, pod, policy } from "./decide-fixtures.ts";

/** A kubeadm static etcd pod as its kubelet mirrors it. */
function etcd(nodeName: string, o: { ns?: string; mirror?: boolean; component?: string; name?: string } = {}): V1Pod {
  const p = pod(o.name ?? `etcd-${nodeName}`, {
    node: nodeName,
    ns: o.ns ?? "kube-system",
    labels: o.component === undefined ? { component: "etcd", tier: "control-plane" } : { component: o.component },
  });
  if (o.mirror ?? true) p.metadata!.annotations = { [MIRROR_POD_ANNOTATION]: "abc123" };
  return p;
}

describe("quorum: control-plane and etcd nodes are never fenced unless the policy allows it", () => {
  test("a worker is not protected", () => {
    assert.equal(controlPlaneRole(node("w1"), [pod("app", { node: "w1" })]), undefined);
    assert.equal(quorumRefusal(node("w1"), [], policy("default")), undefined);
  });

  test("the control-plane label, and the legacy master label", () => {
    const cp = node("cp1", { labels: { "node-role.kubernetes.io/control-plane": "" } });
    assert.match(controlPlaneRole(cp, []) ?? "", /control-plane node \(label node-role\.kubernetes\.io\/control-plane\)/);
    const master = node("m1", { labels: { "node-role.kubernetes.io/master": "" } });
    assert.match(controlPlaneRole(master, []) ?? "", /label node-role\.kubernetes\.io\/master/);
    assert.match(
      quorumRefusal(cp, [], policy("default")) ?? "",
      /^cp1 is not fenced: .*quorum.*FencingPolicy default does not set spec\.allowControlPlane/,
    );
  });

  test("a node running a static etcd member (mirror pod in kube-system), by label or by name", () => {
    assert.match(controlPlaneRole(node("e1"), [etcd("e1")]) ?? "", /member of the cluster's etcd \(static pod kube-system\/etcd-e1\)/);
    assert.ok(controlPlaneRole(node("e1"), [etcd("e1", { component: "other", name: "etcd-e1" })]));
    assert.ok(controlPlaneRole(node("e1"), [etcd("e1", { component: "etcd", name: "db-e1" })]));
  });

  test("not an etcd member: a plain pod, another namespace, another node, one being deleted", () => {
    assert.equal(isEtcdMember(etcd("e1", { mirror: false })), false, "not a mirror pod: a tenant's etcd");
    assert.equal(isEtcdMember(etcd("e1", { ns: "db" })), false);
    assert.equal(isEtcdMember(etcd("e1", { component: "kube-apiserver", name: "kube-apiserver-e1" })), false);
    assert.equal(controlPlaneRole(node("w1"), [etcd("e1")]), undefined, "an etcd pod of another node");
    const gone = etcd("e1");
    gone.metadata!.deletionTimestamp = at(0).toJSDate();
    assert.equal(isEtcdMember(gone), false);
  });

  test("spec.allowControlPlane allows it; no policy refuses", () => {
    const cp = node("cp1", { labels: { "node-role.kubernetes.io/control-plane": "" } });
    assert.equal(quorumRefusal(cp, [], policy("cp", { allowControlPlane: true })), undefined);
    assert.match(quorumRefusal(cp, [], undefined) ?? "", /FencingPolicy \(none\)/);
  });
});
