// The configuration files of one real lab node: containerd, kubelet and CNI. Pure: everything a node
// needs is in its own directory, so nodes never share a socket, a state dir or an IPAM store
// (../shared/notes/real-nodes.md lists the pitfalls each setting avoids).
import { join } from "node:path";

export interface RealNodeLayout {
  /** The node's own directory: containerd root/state, kubelet root, CNI config and IPAM data. */
  dir: string;
  name: string;
  /** The node's address on the lab network (its InternalIP). */
  ip: string;
  /** Its pods' subnet (the CNI bridge's host-local range). */
  podCidr: string;
  /** Cgroup path (the same in every v1 hierarchy) that holds everything the node runs. */
  cgroup: string;
}

export const nodePaths = (dir: string) => ({
  containerdConfig: join(dir, "containerd.toml"),
  containerdRoot: join(dir, "containerd", "root"),
  containerdState: join(dir, "containerd", "state"),
  containerdSocket: join(dir, "containerd", "containerd.sock"),
  runcRoot: join(dir, "containerd", "runc"),
  containerdOpt: join(dir, "containerd", "opt"),
  // Paths every containerd uses whatever its config says (/run/containerd/s for shim sockets,
  // /var/lib/cni for CNI result caches): the node's mount namespace puts these over them.
  runContainerd: join(dir, "run-containerd"),
  varLibCni: join(dir, "var-lib-cni"),
  cniConf: join(dir, "cni", "net.d"),
  cniIpam: join(dir, "cni", "ipam"),
  kubeletConfig: join(dir, "kubelet.yaml"),
  kubeletRoot: join(dir, "kubelet"),
  kubeletCerts: join(dir, "kubelet-pki"),
  podLogs: join(dir, "pod-logs"),
  resolvConf: join(dir, "resolv.conf"),
  bootId: join(dir, "boot-id"),
  init: join(dir, "init.pid.json"),
  containerd: join(dir, "containerd.pid.json"),
  kubelet: join(dir, "kubelet.pid.json"),
  kubeProxyConfig: join(dir, "kube-proxy.yaml"),
  kubeProxy: join(dir, "kube-proxy.pid.json"),
  snapshots: join(dir, "process-snapshots.jsonl"),
});

export function containerdConfig(n: RealNodeLayout, pauseImage: string): string {
  const p = nodePaths(n.dir);
  const cri = 'plugins."io.containerd.grpc.v1.cri"';
  return `version = 2
root = ${JSON.stringify(p.containerdRoot)}
state = ${JSON.stringify(p.containerdState)}
# Only what a kubelet node needs; the others probe the kernel and log noise.
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]

[grpc]
  address = ${JSON.stringify(p.containerdSocket)}

[ttrpc]
  address = ${JSON.stringify(p.containerdSocket + ".ttrpc")}

[${cri}]
  sandbox_image = ${JSON.stringify(pauseImage)}
  # A negative oom_score_adj is refused here even for root; runc would fail every container.
  restrict_oom_score_adj = true
  disable_apparmor = true
  netns_mounts_under_state_dir = true
  enable_selinux = false

[${cri}.containerd]
  snapshotter = "overlayfs"
  default_runtime_name = "runc"

[${cri}.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"

[${cri}.containerd.runtimes.runc.options]
  SystemdCgroup = false
  # runc's default root (/run/containerd/runc/k8s.io) would be shared by every node.
  Root = ${JSON.stringify(p.runcRoot)}

[${cri}.cni]
  bin_dir = "/usr/lib/cni"
  conf_dir = ${JSON.stringify(p.cniConf)}

[${cri}.registry]
  # No registry is ever reachable; images are imported, pods use imagePullPolicy: Never.
  config_path = ""

[plugins."io.containerd.internal.v1.opt"]
  path = ${JSON.stringify(p.containerdOpt)}
`;
}

export function cniConfig(n: RealNodeLayout): string {
  return JSON.stringify(
    {
      cniVersion: "0.4.0",
      name: "stockade-lab",
      plugins: [
        {
          type: "bridge",
          bridge: "cni0",
          isGateway: true,
          ipMasq: false, // no host iptables rules, and traffic never leaves the machine
          hairpinMode: true,
          ipam: {
            type: "host-local",
            ranges: [[{ subnet: n.podCidr }]],
            routes: [{ dst: "0.0.0.0/0" }],
            dataDir: nodePaths(n.dir).cniIpam,
          },
        },
        { type: "portmap", capabilities: { portMappings: true } },
      ],
    },
    null,
    2,
  );
}

export interface KubeletOptions {
  caFile: string;
  nodeLeaseSeconds: number;
  /** Where pods resolve names (the lab's cluster DNS), if it runs. */
  clusterDns?: string;
  /** The Node's spec.providerID, set by the kubelet when it registers. */
  providerID?: string;
}

export function kubeletConfig(n: RealNodeLayout, o: KubeletOptions): string {
  const p = nodePaths(n.dir);
  const cfg = {
    apiVersion: "kubelet.config.k8s.io/v1beta1",
    kind: "KubeletConfiguration",
    address: n.ip,
    port: 10250,
    readOnlyPort: 0,
    healthzPort: 0,
    authentication: { x509: { clientCAFile: o.caFile }, webhook: { enabled: false }, anonymous: { enabled: false } },
    authorization: { mode: "AlwaysAllow" },
    containerRuntimeEndpoint: `unix://${p.containerdSocket}`,
    cgroupDriver: "cgroupfs",
    // Every pod's cgroup under the node's own subtree: powering the node off reaches all of them.
    cgroupsPerQOS: true,
    cgroupRoot: `${n.cgroup}/pods`,
    enforceNodeAllocatable: [],
    failSwapOn: false,
    failCgroupV1: false,
    // A kubelet changes vm.overcommit_memory and kernel.panic*; the lab records and restores them on down.
    protectKernelDefaults: false,
    podLogsDir: p.podLogs,
    nodeLeaseDurationSeconds: o.nodeLeaseSeconds,
    resolvConf: p.resolvConf,
    ...(o.clusterDns ? { clusterDNS: [o.clusterDns], clusterDomain: "cluster.local" } : {}),
    ...(o.providerID ? { providerID: o.providerID } : {}),
    // The machine's disks are shared by every node: never evict for disk or memory pressure of the whole machine.
    evictionHard: { "memory.available": "1Mi", "nodefs.available": "1%", "imagefs.available": "1%" },
    imageGCHighThresholdPercent: 100,
    imageGCLowThresholdPercent: 99,
    serializeImagePulls: false,
    maxPods: 50,
    shutdownGracePeriod: "0s",
    // Tests delete pods gracefully and wait for the kubelet: a short sync loop keeps them quick.
    syncFrequency: "10s",
    fileCheckFrequency: "10s",
  };
  return JSON.stringify(cfg, null, 2);
}

export function kubeletArgs(n: RealNodeLayout, o: { kubeconfig: string; zone: string; extraLabels?: Record<string, string> }): string[] {
  const p = nodePaths(n.dir);
  const labels = { "topology.kubernetes.io/zone": o.zone, "stockade.io/lab-runtime": "real", ...o.extraLabels };
  return [
    `--config=${p.kubeletConfig}`,
    `--kubeconfig=${o.kubeconfig}`,
    `--hostname-override=${n.name}`,
    `--node-ip=${n.ip}`,
    `--root-dir=${p.kubeletRoot}`,
    `--cert-dir=${p.kubeletCerts}`,
    `--node-labels=${Object.entries(labels)
      .map(([k, v]) => `${k}=${v}`)
      .join(",")}`,
    "--v=1",
  ];
}

/**
 * kube-proxy of one node, in nftables mode: its own table, so the lab's partition rules (iptables-nft in the
 * filter hooks) still drop a pod's forwarded packets; iptables mode's KUBE-FORWARD accepts ESTABLISHED
 * connections before them, and a partitioned pod kept talking to the apiserver. The conntrack settings at 0
 * leave the machine-wide sysctls alone (every node and lab shares them).
 */
export function kubeProxyConfig(n: RealNodeLayout, o: { kubeconfig: string; clusterCidr: string }): string {
  const cfg = {
    apiVersion: "kubeproxy.config.k8s.io/v1alpha1",
    kind: "KubeProxyConfiguration",
    mode: "nftables",
    clientConnection: { kubeconfig: o.kubeconfig },
    hostnameOverride: n.name,
    bindAddress: n.ip,
    healthzBindAddress: `${n.ip}:10256`,
    metricsBindAddress: `${n.ip}:10249`,
    clusterCIDR: o.clusterCidr,
    conntrack: { maxPerCore: 0, min: 0, tcpEstablishedTimeout: "0s", tcpCloseWaitTimeout: "0s" },
  };
  return JSON.stringify(cfg, null, 2);
}
