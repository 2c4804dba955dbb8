// Where the lab's Go-built components live, and building them on first use.
import { execFileSync } from "node:child_process";
import { createHash } from "node:crypto";
import { existsSync, readFileSync, readdirSync } from "node:fs";
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
  kubeDir: string; // kube-apiserver, kube-controller-manager, kube-scheduler, kubectl, kubelet, kube-proxy
  etcd: string;
  etcdctl: string; // next to etcd, same version (the etcd image carries both)
  kwok: string;
  kwokStages: string;
  kubeApiserver: string;
  kubeControllerManager: string;
  kubeScheduler: string;
  kubectl: string;
  kubelet: string;
  /** Service VIPs in each real node (nftables mode). */
  kubeProxy: string;
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
    etcdctl: join(base, `etcd-v${v.ETCD_VERSION}`, "etcdctl"),
    kwok: join(kwokDir, "kwok"),
    kwokStages: join(kwokDir, "stage"),
    kubeApiserver: join(kubeDir, "kube-apiserver"),
    kubeControllerManager: join(kubeDir, "kube-controller-manager"),
    kubeScheduler: join(kubeDir, "kube-scheduler"),
    kubectl: join(kubeDir, "kubectl"),
    kubelet: join(kubeDir, "kubelet"),
    kubeProxy: join(kubeDir, "kube-proxy"),
    coredns: join(base, `coredns-v${v.COREDNS_VERSION}`, "coredns"),
  };
}

/** Returns the binaries, building any that are missing (progress goes to stderr). */
export function ensureBins(): Bins {
  const b = binPaths();
  const all = [
    b.etcd,
    b.etcdctl,
    b.kwok,
    b.kubeApiserver,
    b.kubeControllerManager,
    b.kubeScheduler,
    b.kubectl,
    b.kubelet,
    b.kubeProxy,
    b.coredns,
  ];
  if (!all.every((f) => existsSync(f))) {
    execFileSync("bash", [buildScript], { stdio: ["ignore", "inherit", "inherit"] });
  }
  return b;
}

/** The lab's own Go programs: one `package main` per directory (pause, the workloads of the images). */
export const labProgramsSrc = join(repoRoot, "lab/programs");

/**
 * Content hash of the lab programs' sources (relative paths and contents), 16 hex digits: the cache
 * key of their binaries. Must equal `lab_programs_hash` in tools/k8s-bins/build.sh, which is
 * `find . -type f | LC_ALL=C sort | xargs sha256sum | sha256sum` run in lab/programs.
 */
export function labProgramsHash(src = labProgramsSrc): string {
  const files: string[] = [];
  const walk = (rel: string) => {
    for (const e of readdirSync(join(src, rel), { withFileTypes: true })) {
      const r = `${rel}/${e.name}`;
      if (e.isDirectory()) walk(r);
      else if (e.isFile()) files.push(r);
    }
  };
  walk(".");
  files.sort((a, b) => Buffer.compare(Buffer.from(a), Buffer.from(b)));
  const sha = (f: string) =>
    createHash("sha256")
      .update(readFileSync(join(src, f)))
      .digest("hex");
  const list = files.map((f) => `${sha(f)}  ${f}\n`).join("");
  return createHash("sha256").update(list).digest("hex").slice(0, 16);
}

/** Names of the lab programs: every directory of lab/programs that holds Go sources. */
export function labProgramNames(src = labProgramsSrc): string[] {
  return readdirSync(src, { withFileTypes: true })
    .filter((e) => e.isDirectory() && readdirSync(join(src, e.name)).some((f) => f.endsWith(".go")))
    .map((e) => e.name)
    .sort();
}

/** Where the binaries of the current lab/programs sources live (built by `build.sh lab-programs`). */
export function labProgramsDir(): string {
  return join(cacheDir(), "bin", `lab-programs-${labProgramsHash()}`);
}

/** Name → binary path of every lab program, building them if these sources were never built. */
export function ensureLabPrograms(): Record<string, string> {
  const dir = labProgramsDir();
  // The directory is renamed into place whole, so its existence means every binary is there.
  if (!existsSync(dir)) execFileSync("bash", [buildScript, "lab-programs"], { stdio: ["ignore", "inherit", "inherit"] });
  return Object.fromEntries(labProgramNames().map((n) => [n, join(dir, n)]));
}

/** The build.sh targets of a real-node lab: everything but kwok (tools/setup.sh demo builds the same list). */
export const REAL_NODE_BUILD_TARGETS = ["etcd", "etcdctl", "kubernetes", "coredns", "lab-programs"] as const;

/**
 * ensureBins for a lab of real nodes, which never run kwok: builds only those of REAL_NODE_BUILD_TARGETS whose
 * binaries are missing, so that the demo's first run does not build kwok.
 */
export function ensureRealNodeBins(): Bins {
  const b = binPaths();
  const notForRealNodes = new Set(["kubeDir", "kwok", "kwokStages"]);
  const needed = Object.entries(b).filter(([k]) => !notForRealNodes.has(k));
  if (!needed.every(([, f]) => existsSync(f)))
    execFileSync("bash", [buildScript, ...REAL_NODE_BUILD_TARGETS], { stdio: ["ignore", "inherit", "inherit"] });
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
