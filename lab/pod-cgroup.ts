// A pod's own cgroup on a real lab node, read as the kernel accounts it (cgroup v1, the kubelet's cgroupfs driver):
// <hierarchy>/stockade-lab/<slot>-<node>/pods/kubepods[/<qos>]/pod<uid> (lab/real/config.ts puts every pod under the
// node's subtree). What a pod really uses against what its Deployment limits, without metrics-server.
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { nodeCgroup } from "./real/node.ts";

const ROOT = "/sys/fs/cgroup";

/** One reading of a pod's cgroup. */
export interface PodCgroupSample {
  t: number;
  /** memory.usage_in_bytes: what the limit is enforced against (RSS and page cache). */
  memoryBytes: number;
  /** memory.stat total_rss: anonymous memory of every process in the pod. */
  rssBytes: number;
  /** cpuacct.usage: CPU time of the pod since it started, ns. */
  cpuNs: number;
}

/** The limits the kubelet wrote (bytes; CPU as cores, undefined when unlimited), and what the kernel counted. */
export interface PodCgroupLimits {
  memoryBytes: number;
  cpuCores: number | undefined;
  /** memory.max_usage_in_bytes: the pod's peak charge so far. */
  peakMemoryBytes: number;
  /** memory.failcnt: times the limit was hit. */
  memoryFailcnt: number;
  /** cpu.stat nr_throttled: CFS periods in which the pod was throttled. */
  throttledPeriods: number;
}

/** The value of `key` in a cgroup stat file ("key value" lines). */
export function statValue(text: string, key: string): number | undefined {
  const line = text.split("\n").find((l) => l.startsWith(`${key} `));
  return line === undefined ? undefined : Number(line.slice(key.length + 1));
}

/** CPU cores from CFS quota and period (quota -1: unlimited). */
export function cfsCores(quotaUs: number, periodUs: number): number | undefined {
  return quotaUs > 0 && periodUs > 0 ? quotaUs / periodUs : undefined;
}

/** CPU cores used between two samples. */
export function coresBetween(a: PodCgroupSample, b: PodCgroupSample): number {
  return b.t > a.t ? (b.cpuNs - a.cpuNs) / 1e6 / (b.t - a.t) : 0;
}

/** The pod's cgroup directory (relative to a hierarchy), or undefined before the kubelet made it / after it is gone. */
export function podCgroupPath(slot: number, node: string, uid: string): string | undefined {
  const base = `${nodeCgroup(slot, node)}/pods/kubepods`;
  for (const qos of ["burstable", "besteffort", ""]) {
    const p = join(base, qos, `pod${uid}`);
    if (existsSync(join(ROOT, "memory", p))) return p;
  }
  return undefined;
}

const read = (hierarchy: string, path: string, file: string) => readFileSync(join(ROOT, hierarchy, path, file), "utf8").trim();

export function samplePodCgroup(path: string): PodCgroupSample {
  return {
    t: Date.now(),
    memoryBytes: Number(read("memory", path, "memory.usage_in_bytes")),
    rssBytes: statValue(read("memory", path, "memory.stat"), "total_rss") ?? 0,
    cpuNs: Number(read("cpuacct", path, "cpuacct.usage")),
  };
}

export function podCgroupLimits(path: string): PodCgroupLimits {
  return {
    memoryBytes: Number(read("memory", path, "memory.limit_in_bytes")),
    cpuCores: cfsCores(Number(read("cpu", path, "cpu.cfs_quota_us")), Number(read("cpu", path, "cpu.cfs_period_us"))),
    peakMemoryBytes: Number(read("memory", path, "memory.max_usage_in_bytes")),
    memoryFailcnt: Number(read("memory", path, "memory.failcnt")),
    throttledPeriods: statValue(read("cpu", path, "cpu.stat"), "nr_throttled") ?? 0,
  };
}
