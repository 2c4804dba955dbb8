// lab/pod-cgroup.ts's pure part: the stat files and CFS settings the e2e reads a pod's usage and limits from.
import { test } from "node:test";
import assert from "node:assert/strict";
import { cfsCores, coresBetween, statValue } from "../../lab/pod-cgroup.ts";

test("statValue reads one key of a cgroup v1 stat file, not a key it prefixes", () => {
  const stat = "rss 4096\nrss_huge 0\ntotal_rss_huge 0\ntotal_rss 78659584\n";
  assert.equal(statValue(stat, "total_rss"), 78659584);
  assert.equal(statValue(stat, "rss"), 4096);
  assert.equal(statValue(stat, "nr_throttled"), undefined);
});

test("cfsCores: quota over period; -1 is no limit", () => {
  assert.equal(cfsCores(100000, 100000), 1);
  assert.equal(cfsCores(50000, 100000), 0.5);
  assert.equal(cfsCores(-1, 100000), undefined);
});

test("coresBetween: CPU ns over wall ms", () => {
  const a = { t: 1000, memoryBytes: 0, rssBytes: 0, cpuNs: 0 };
  assert.equal(coresBetween(a, { ...a, t: 1200, cpuNs: 100e6 }), 0.5);
  assert.equal(coresBetween(a, a), 0);
});
