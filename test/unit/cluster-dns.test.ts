import { test } from "node:test";
import assert from "node:assert/strict";
import { corednsRbac, corefile } from "../../lab/cluster-dns.ts";

const input = {
  address: "10.200.0.1",
  port: 53,
  domain: "cluster.local",
  kubeconfig: "/lab/kubeconfigs/coredns.kubeconfig",
  readyPort: 8181,
  ttlSeconds: 1,
};

test("the Corefile serves the cluster domain from the apiserver and NXDOMAIN for everything else, on the given address", () => {
  const c = corefile(input);
  assert.match(c, /^cluster\.local:53 \{\n {4}bind 10\.200\.0\.1\n/);
  assert.match(c, /kubernetes cluster\.local \{\n {8}kubeconfig \/lab\/kubeconfigs\/coredns\.kubeconfig stockade-lab\n {8}ttl 1\n/);
  assert.match(c, /ready 127\.0\.0\.1:8181/);
  assert.match(c, /\n\.:53 \{\n {4}bind 10\.200\.0\.1\n[\s\S]*rcode NXDOMAIN/);
  assert.doesNotMatch(c, /forward/, "nothing leaves the machine");
  assert.equal((c.match(/bind /g) ?? []).length, 2, "both server blocks bound to the given address only");
});

test("the Corefile refuses bad input", () => {
  assert.throws(() => corefile({ ...input, domain: "bad domain" }), /invalid cluster domain/);
  assert.throws(() => corefile({ ...input, port: 0 }), /invalid DNS port/);
  assert.throws(() => corefile({ ...input, ttlSeconds: -1 }), /invalid TTL/);
  assert.throws(() => corefile({ ...input, kubeconfig: "/a b" }), /whitespace/);
});

test("CoreDNS's RBAC: list and watch of what the kubernetes plugin serves from, nothing else", () => {
  const { role, binding } = corednsRbac("u");
  assert.deepEqual(role.rules, [
    { apiGroups: [""], resources: ["services", "pods", "namespaces"], verbs: ["list", "watch"] },
    { apiGroups: ["discovery.k8s.io"], resources: ["endpointslices"], verbs: ["list", "watch"] },
  ]);
  assert.deepEqual(binding.subjects, [{ apiGroup: "rbac.authorization.k8s.io", kind: "User", name: "u" }]);
  assert.equal(binding.roleRef.name, role.metadata!.name);
});
