// Process-table evidence (lab/ledger.ts): from a node's processes captured at power changes, no process
// of an old instance was alive when its replacement started; and how a capture finds a process's pod.
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import {
  checkLedger,
  checkProcessTables,
  instanceStarts,
  parseLedger,
  podOfCgroup,
  readCgroupProcesses,
  type InstanceStart,
  type NodeProcess,
  type ProcessSnapshot,
} from "../../lab/ledger.ts";

const OLD = "aaaaaaaa-0000-4000-8000-000000000001";
const NEW = "bbbbbbbb-0000-4000-8000-000000000002";
const OTHER = "cccccccc-0000-4000-8000-000000000003";
const CID = "f".repeat(64);

const proc = (pid: number, podUID?: string, cmdline = "/usr/local/bin/ledger"): NodeProcess => ({
  pid,
  cmdline,
  ...(podUID ? { podUID, containerID: CID } : {}),
});
const snap = (time: number, node: string, processes: NodeProcess[], event?: string): ProcessSnapshot => ({ time, node, processes, event });
const start: InstanceStart = { identity: "ledger-0", podUID: NEW, time: 10_000, previous: [OLD] };

describe("process-table evidence", () => {
  test("a power-off captured before and after the kill, then the replacement: clean", () => {
    const r = checkProcessTables(
      [
        snap(
          9_000,
          "node-1",
          [proc(10, undefined, "kubelet"), proc(20, OLD), proc(21, OLD, "/pause"), proc(30, OTHER)],
          "power off: before kill",
        ),
        snap(9_010, "node-1", [], "power off: after kill"),
        // The replacement's own processes, and another pod's, are no concern.
        snap(12_000, "node-2", [proc(40, NEW), proc(41, OTHER)], "power off: before kill"),
      ],
      [start],
    );
    assert.deepEqual(r, { starts: 1, snapshots: 3, violations: [] });
  });

  test("an old instance's process in a capture taken after the replacement started is a violation", () => {
    const r = checkProcessTables(
      [
        snap(9_000, "node-1", [], "power on"),
        snap(11_500, "node-1", [proc(10, undefined, "kubelet"), proc(20, OLD), proc(21, OLD, "/pause")], "power off: before kill"),
      ],
      [start],
    );
    assert.equal(r.violations.length, 1);
    const m = r.violations[0]!;
    for (const s of [
      "ledger-0",
      OLD,
      NEW,
      "node-1",
      "pid 20",
      "pid 21",
      '"/pause"',
      new Date(11_500).toISOString(),
      new Date(10_000).toISOString(),
      "power off: before kill",
      "2 process(es)",
    ]) {
      assert.ok(m.includes(s), `${s} in: ${m}`);
    }
    assert.ok(!m.includes("kubelet"), "only the old pod's processes are listed");
  });

  test("the node's last capture before the start shows the old instance alive and nothing later shows it gone: a violation", () => {
    const r = checkProcessTables([snap(9_000, "node-1", [proc(20, OLD)], "power off: before kill")], [start]);
    assert.equal(r.violations.length, 1);
    assert.match(
      r.violations[0]!,
      /last capture of node-1 before pod bbbbbbbb.* shows 1 process\(es\) of old pod aaaaaaaa.* no later capture shows them gone/,
    );
  });

  test("an old instance on a node whose storage was fenced (issue 11) may still run: no violation there, only there", () => {
    const snaps = [snap(9_000, "node-1", [proc(20, OLD)], "crash")];
    assert.deepEqual(checkProcessTables(snaps, [start], (node) => node === "node-1").violations, []);
    assert.equal(checkProcessTables(snaps, [start], (node) => node === "node-2").violations.length, 1);
  });

  test("no capture of a node, or captures that never show the old instance, prove nothing and report nothing", () => {
    assert.deepEqual(checkProcessTables([], [start]).violations, []);
    assert.deepEqual(
      checkProcessTables([snap(9_000, "node-1", [proc(30, OTHER)]), snap(11_000, "node-2", [proc(31, OTHER)])], [start]).violations,
      [],
    );
  });

  test("an instance started before any replacement is measured against the right predecessors only", () => {
    const starts: InstanceStart[] = [start, { identity: "ledger-0", podUID: OTHER, time: 20_000, previous: [OLD, NEW] }];
    // NEW is alive at 15 s (it should be: it is the current instance), and gone by 19 s.
    const r = checkProcessTables([snap(15_000, "node-2", [proc(40, NEW)]), snap(19_000, "node-2", [])], starts);
    assert.deepEqual(r.violations, []);
    const bad = checkProcessTables([snap(15_000, "node-2", [proc(40, NEW)])], starts);
    assert.equal(bad.violations.length, 1);
    assert.ok(bad.violations[0]!.includes(`old pod ${NEW}`) && bad.violations[0]!.includes(`pod ${OTHER} started`));
  });

  test("instance starts come from the ledger's instances: each after the first, with its predecessors", () => {
    const line = (uid: string, node: string, seq: number, time: string, id = "ledger-0") =>
      JSON.stringify({ identity: id, podUID: uid, node, run: uid.slice(0, 4), seq, time });
    const report = checkLedger(
      parseLedger(
        [
          line(OLD, "node-1", 1, "2026-11-22T10:00:00Z"),
          line(NEW, "node-2", 1, "2026-11-22T10:00:10.5Z"),
          line(OTHER, "node-3", 1, "2026-11-22T10:00:20Z"),
          line("dddddddd-0000-4000-8000-000000000004", "node-1", 1, "2026-11-22T10:00:00Z", "ledger-1"),
        ].join("\n") + "\n",
        "f",
      ),
    );
    assert.deepEqual(instanceStarts(report), [
      { identity: "ledger-0", podUID: NEW, time: Date.parse("2026-11-22T10:00:10.5Z"), previous: [OLD] },
      { identity: "ledger-0", podUID: OTHER, time: Date.parse("2026-11-22T10:00:20Z"), previous: [OLD, NEW] },
    ]);
  });

  test("a process's pod and container come from the kubelet's pod cgroup, for both cgroup drivers", () => {
    const v1 = [
      `12:pids:/stockade-lab/node-1/pods/kubepods/besteffort/pod${OLD}/${CID}`,
      `11:freezer:/stockade-lab/node-1/pods/kubepods/besteffort/pod${OLD}/${CID}`,
      `0::/stockade-lab/node-1`,
    ].join("\n");
    assert.deepEqual(podOfCgroup(v1), { podUID: OLD, containerID: CID });
    // Guaranteed pods sit directly under kubepods.
    assert.deepEqual(podOfCgroup(`0::/lab/node-1/pods/kubepods/pod${OLD}/${CID}\n`), { podUID: OLD, containerID: CID });
    const systemd = `0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod${OLD.replaceAll("-", "_")}.slice/cri-containerd-${CID}.scope\n`;
    assert.deepEqual(podOfCgroup(systemd), { podUID: OLD, containerID: CID });
    assert.deepEqual(podOfCgroup(`0::/lab/node-1/pods/kubepods/besteffort/pod${OLD}\n`), { podUID: OLD });
    assert.deepEqual(podOfCgroup("12:pids:/stockade-lab/node-1\n0::/stockade-lab/node-1\n"), {}, "the kubelet itself");
    assert.deepEqual(podOfCgroup("0::/lab/node-1/podcast/x\n"), {});
  });

  test("a capture reads every cgroup.procs of the subtree; a process that exited meanwhile is left out", () => {
    const root = mkdtempSync(join(tmpdir(), "stockade-cgroup-"));
    const cg = join(root, "cg", "node-1");
    const proc = join(root, "proc");
    const podDir = join(cg, "pods", "kubepods", "besteffort", `pod${OLD}`, CID);
    mkdirSync(podDir, { recursive: true });
    writeFileSync(join(cg, "cgroup.procs"), "100\n");
    writeFileSync(join(podDir, "cgroup.procs"), "200\n201\n");
    const fake = (pid: number, cmd: string[], cgroup: string) => {
      mkdirSync(join(proc, String(pid)), { recursive: true });
      writeFileSync(join(proc, String(pid), "cmdline"), cmd.join("\u0000") + "\u0000");
      writeFileSync(join(proc, String(pid), "cgroup"), cgroup);
    };
    fake(100, ["kubelet", "--root-dir", "/x"], "0::/lab/node-1\n");
    fake(200, ["/usr/local/bin/ledger"], `0::/lab/node-1/pods/kubepods/besteffort/pod${OLD}/${CID}\n`);
    // 201 exited between reading cgroup.procs and /proc.
    assert.deepEqual(readCgroupProcesses(cg, proc), [
      { pid: 100, cmdline: "kubelet --root-dir /x" },
      { pid: 200, cmdline: "/usr/local/bin/ledger", podUID: OLD, containerID: CID },
    ]);
    assert.deepEqual(readCgroupProcesses(join(root, "missing"), proc), []);
    rmSync(root, { recursive: true, force: true });
  });
});
