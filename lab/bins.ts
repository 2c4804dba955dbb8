// Where the lab's Go-built components live, and building them on first use.
import { execFileSync } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { homedir } from "node:os";
import { join, resolve } from "node:path";

export const repoRoot = resolve(import.meta.dirname, "..");
const buildScript = join(repoRoot, "tools/k8s-bins/build.sh");

export interface Versions {
  K8S_VERSION: string;
  ETCD_VERSION: string;
  KWOK_VERSION: string;
  COREDNS_VERSION: string;
}

export function versions(): Versions {
  const text = readFileSync(join(repoRoot, "tools/k8s-bins/versions.env"), "utf8");
  const v: Record<string, string> = {};
  for (const line of text.split("\n")) {
    const m = /^\s*([A-Z0-9_]+)=(\S+)/.exec(line);
    if (m) v[m[1]!] = m[2]!;
  }
  return v as unknown as Versions;
}

export function cacheDir(): string {
  return process.env.STOCKADE_CACHE ?? join(process.env.XDG_CACHE_HOME ?? join(homedir(), ".cache"), "stockade");
}

export interface Bins {
  kubeDir: string; // kube-apiserver, kube-controller-manager, kube-scheduler, kubectl, kubelet
  etcd: string;
  kwok: string;
  kwokStages: string;
  kubeApiserver: string;
  kubeControllerManager: string;
  kubeScheduler: string;
  kubectl: string;
  kubelet: string;
  /** The lab's cluster DNS (lab/cluster-dns.ts). */
  coredns: string;
}

export function binPaths(): Bins {
  const v = versions();
  const base = join(cacheDir(), "bin");
  const kubeDir = join(base, `kubernetes-v${v.K8S_VERSION}`);
  const kwokDir = join(base, `kwok-v${v.KWOK_VERSION}`);
  return {
    kubeDir,
    etcd: join(base, `etcd-v${v.ETCD_VERSION}`, "etcd"),
    kwok: join(kwokDir, "kwok"),
    kwokStages: join(kwokDir, "stage"),
    kubeApiserver: join(kubeDir, "kube-apiserver"),
    kubeControllerManager: join(kubeDir, "kube-controller-manager"),
    kubeScheduler: join(kubeDir, "kube-scheduler"),
    kubectl: join(kubeDir, "kubectl"),
    kubelet: join(kubeDir, "kubelet"),
    coredns: join(base, `coredns-v${v.COREDNS_VERSION}`, "coredns"),
  };
}

/** Returns the binaries, building any that are missing (progress goes to stderr). */
export function ensureBins(): Bins {
  const b = binPaths();
  const all = [b.etcd, b.kwok, b.kubeApiserver, b.kubeControllerManager, b.kubeScheduler, b.kubectl, b.kubelet, b.coredns];
  if (!all.every((f) => existsSync(f))) {
    execFileSync("bash", [buildScript], { stdio: ["ignore", "inherit", "inherit"] });
  }
  return b;
}

/** External programs the lab needs from Debian packages. */
export const systemTools = {
  openssl: "openssl",
  ipmiSim: "ipmi_sim",
  ipmitool: "ipmitool",
  fenceIpmilan: "fence_ipmilan",
} as const;

export function which(cmd: string): string | undefined {
  for (const dir of (process.env.PATH ?? "").split(":").concat(["/usr/sbin", "/sbin"])) {
    const p = join(dir, cmd);
    if (dir && existsSync(p)) return p;
  }
  return undefined;
}
