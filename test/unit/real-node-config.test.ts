// The configuration of a real lab node (lab/real/config.ts): every path a node's containerd, runc,
// kubelet and CNI use is its own (two nodes sharing one is the pitfall ../shared/notes/real-nodes.md
// records), the settings this machine needs are there, and nothing can pull an image.
import { test } from "node:test";
import assert from "node:assert/strict";
import {
  cniConfig,
  containerdConfig,
  kubeletArgs,
  kubeletConfig,
  kubeProxyConfig,
  nodePaths,
  type RealNodeLayout,
} from "../../lab/real/config.ts";
import { dropRules, labNet, labPodRange, listenerPids, nodeIp, podCidr } from "../../lab/real/net.ts";

const node = (name: string, i: number): RealNodeLayout => ({
  dir: `/labs/x/nodes/${name}/machine`,
  name,
  ip: nodeIp(3, i),
  podCidr: podCidr(3, i),
  cgroup: `/stockade-lab/3-${name}`,
});
const a = node("node-1", 0);
const b = node("node-2", 1);

test("two nodes share no path: sockets, state, runc root, CNI config and IPAM store, kubelet root", () => {
  const paths = (n: RealNodeLayout) => {
    const text = containerdConfig(n, "stockade.lab/pause:x") + cniConfig(n) + kubeletConfig(n, { caFile: "/ca", nodeLeaseSeconds: 8 });
    return new Set([...text.matchAll(/"(\/[^"]+)"/g)].map((m) => m[1]!).filter((p) => p !== "/ca" && p !== "/usr/lib/cni"));
  };
  const pa = paths(a);
  const pb = paths(b);
  assert.ok(pa.size >= 8, [...pa].join(" "));
  for (const p of pa) {
    assert.ok(!pb.has(p), `shared path ${p}`);
    assert.ok(p.startsWith(a.dir) || p.startsWith(a.cgroup), `${p} is outside the node's own directory and cgroup`);
  }
});

test("containerd: the settings this machine needs, the lab's pause image, no registry", () => {
  const c = containerdConfig(a, "stockade.lab/pause:abc");
  assert.match(c, /restrict_oom_score_adj = true/);
  assert.match(c, /disable_apparmor = true/);
  assert.match(c, /netns_mounts_under_state_dir = true/);
  assert.match(c, /SystemdCgroup = false/);
  assert.match(c, /sandbox_image = "stockade\.lab\/pause:abc"/);
  assert.ok(c.includes(`Root = ${JSON.stringify(nodePaths(a.dir).runcRoot)}`), "runc's root is the node's");
});

test("kubelet: pods under the node's cgroup, its own address, no unauthenticated port", () => {
  const k = JSON.parse(kubeletConfig(a, { caFile: "/ca", nodeLeaseSeconds: 8, clusterDns: labNet(3).hostIp })) as Record<string, unknown>;
  assert.equal(k.cgroupRoot, "/stockade-lab/3-node-1/pods");
  assert.equal(k.cgroupsPerQOS, true);
  assert.equal(k.address, "10.250.3.11");
  assert.equal(k.readOnlyPort, 0);
  assert.deepEqual((k.authentication as { anonymous: unknown }).anonymous, { enabled: false });
  assert.deepEqual(k.clusterDNS, ["10.250.3.1"]);
  assert.equal(k.nodeLeaseDurationSeconds, 8);
  const args = kubeletArgs(a, { kubeconfig: "/kc", zone: "zone-b" });
  assert.ok(args.includes("--hostname-override=node-1") && args.includes("--node-ip=10.250.3.11"));
  assert.ok(args.some((x) => x.startsWith("--node-labels=") && x.includes("topology.kubernetes.io/zone=zone-b")));
  assert.ok(!args.some((x) => x.includes("node-restriction.kubernetes.io")), "a kubelet may not set those labels");
});

test("kube-proxy: nftables mode (partitions hold), the node's identity and address, machine-wide conntrack sysctls untouched", () => {
  const k = JSON.parse(kubeProxyConfig(a, { kubeconfig: "/kp", clusterCidr: labPodRange(3) })) as Record<string, unknown>;
  assert.equal(k.mode, "nftables");
  assert.equal(k.hostnameOverride, "node-1");
  assert.equal(k.bindAddress, "10.250.3.11");
  assert.equal(k.healthzBindAddress, "10.250.3.11:10256");
  assert.equal(k.metricsBindAddress, "10.250.3.11:10249");
  assert.equal(k.clusterCIDR, "10.103.0.0/16");
  assert.deepEqual(k.clientConnection, { kubeconfig: "/kp" });
  assert.deepEqual(k.conntrack, { maxPerCore: 0, min: 0, tcpEstablishedTimeout: "0s", tcpCloseWaitTimeout: "0s" });
  assert.notEqual(nodePaths(a.dir).kubeProxyConfig, nodePaths(b.dir).kubeProxyConfig);
});

test("CNI: the node's own subnet, no masquerade", () => {
  const c = JSON.parse(cniConfig(b)) as { plugins: { type: string; ipMasq?: boolean; ipam?: { ranges: { subnet: string }[][] } }[] };
  const bridge = c.plugins.find((p) => p.type === "bridge")!;
  assert.equal(bridge.ipMasq, false);
  assert.equal(bridge.ipam!.ranges[0]![0]!.subnet, "10.103.2.0/24");
});

test("addresses: one lab network per slot, node and pod subnets never overlap across slots", () => {
  assert.equal(nodeIp(3, 0), "10.250.3.11");
  assert.notEqual(podCidr(3, 0), podCidr(4, 0));
  assert.notEqual(labNet(3).hostDev, labNet(4).hostDev);
  assert.ok(labNet(60).hostDev.length <= 15, "Linux interface names are at most 15 bytes");
  assert.ok(`stk60n49s`.length <= 15);
  // The management address shares the host's link but is not the address a partition cuts.
  assert.equal(labNet(3).managementIp, "10.250.3.2");
  assert.notEqual(labNet(3).managementIp, labNet(3).hostIp);
  assert.deepEqual(
    dropRules([labNet(3).hostIp])
      .flat()
      .includes(labNet(3).managementIp),
    false,
  );
  // Every node's pod subnet lies in the slot's range, and no other slot's.
  for (const i of [0, 49]) assert.ok(podCidr(3, i).startsWith("10.103."), podCidr(3, i));
  assert.notEqual(labPodRange(3), labPodRange(4));
});

test("a cut drops both directions for every peer", () => {
  assert.deepEqual(dropRules(["10.250.3.1"]), [
    ["-s", "10.250.3.1", "-j", "DROP"],
    ["-d", "10.250.3.1", "-j", "DROP"],
  ]);
});

test("a reclaimed slot's leftover listeners are found by its host address only (ss -Hlnptu output)", () => {
  const ss = [
    `tcp LISTEN 0 511 10.250.1.1:6443 0.0.0.0:* users:(("node",pid=17357,fd=20))`,
    `udp UNCONN 0 0 10.250.1.1:53 0.0.0.0:* users:(("coredns",pid=17366,fd=9),("coredns",pid=17367,fd=9))`,
    `tcp LISTEN 0 4096 10.250.1.1%stk1br:8053 0.0.0.0:* users:(("coredns",pid=17368,fd=3))`,
    `tcp LISTEN 0 511 10.250.11.1:6443 0.0.0.0:* users:(("node",pid=20001,fd=20))`,
    `tcp LISTEN 0 4096 127.0.0.1:25646 0.0.0.0:* users:(("kube-apiserver",pid=17287,fd=7))`,
    `garbage`,
    ``,
  ].join("\n");
  assert.deepEqual(listenerPids(ss, "10.250.1.1"), [17357, 17366, 17367, 17368]);
  assert.deepEqual(listenerPids(ss, "10.250.2.1"), []);
});
