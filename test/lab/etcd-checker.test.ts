// The etcd checker against a real 3-member etcd cluster on loopback (the lab's etcd binary, started with
// the same member flags as the etcd StatefulSet): it sees a member killed mid-writes and restarted as a
// fault the cluster survives (no acknowledged key lost, members intact, all healthy), and it reports lost
// keys, missing members and an unanswering member when they happen.
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { binPaths } from "../../lab/bins.ts";
import { EtcdWriter, etcdBaseline, etcdStatus, verifyEtcd, type WriteLog } from "../../lab/etcd-checker.ts";
import { etcdMemberArgs } from "../../lab/etcd-workload.ts";
import { waitFor } from "../../lab/health.ts";
import { freeTcpPorts } from "../../lab/ports.ts";
import { isAlive, signal, startDetached, stop, type ProcRef } from "../../lab/processes.ts";

interface Member {
  name: string;
  client: string;
  peer: string;
  dataDir: string;
  ref?: ProcRef;
}

async function cluster(dir: string, n: number, token: string) {
  const ports = await freeTcpPorts(2 * n);
  const members: Member[] = Array.from({ length: n }, (_, i) => ({
    name: `m${i}`,
    client: `http://127.0.0.1:${ports[2 * i]}`,
    peer: `http://127.0.0.1:${ports[2 * i + 1]}`,
    dataDir: join(dir, `m${i}`),
  }));
  const initialCluster = members.map((m) => `${m.name}=${m.peer}`).join(",");
  const start = (m: Member, ic = initialCluster, tok = token) => {
    m.ref = startDetached({
      cmd: binPaths().etcd,
      logFile: join(dir, `${m.name}.log`),
      args: [
        ...etcdMemberArgs({
          name: m.name,
          dataDir: m.dataDir,
          peerUrl: m.peer,
          clientUrl: m.client,
          listenPeerUrl: m.peer,
          listenClientUrl: m.client,
          initialCluster: ic,
          clusterToken: tok,
        }),
        "--log-level=warn",
      ],
    });
  };
  for (const m of members) start(m);
  return { members, endpoints: members.map((m) => m.client), start, stopAll: () => Promise.all(members.map((m) => stop(m.ref, 2000))) };
}

const ackedAfter = (log: WriteLog, t: number) => log.acked.filter((a) => a.at > t).length;

test(
  "a member killed mid-writes and restarted: no acknowledged key lost, the same 3 members, all healthy",
  { timeout: 120_000 },
  async (t) => {
    const dir = mkdtempSync(join(tmpdir(), "stockade-etcd-checker-"));
    const c = await cluster(dir, 3, "kill-restart");
    t.after(async () => {
      await c.stopAll();
      rmSync(dir, { recursive: true, force: true });
    });
    const baseline = await etcdBaseline(c.endpoints, { members: 3 });
    assert.deepEqual(baseline.map((m) => m.name).sort(), ["m0", "m1", "m2"]);

    const writer = new EtcdWriter({ endpoints: c.endpoints }).start();
    const acked = (n: number, what: string) =>
      waitFor(what, () => writer.snapshot().acked.length >= n, { timeoutMs: 30_000, intervalMs: 50 });
    await acked(50, "50 acknowledged puts before the fault");

    // Kill the leader: the hardest member to lose mid-write (an election, puts in flight on it).
    const leaderId = (await etcdStatus(c.endpoints[0]!)).leader;
    const victim = c.members.find((m) => m.name === baseline.find((b) => b.id === leaderId)?.name)!;
    assert.ok(victim, `leader ${leaderId} is one of the members`);
    signal(victim.ref, "SIGKILL");
    await waitFor("the killed member to be gone", () => !isAlive(victim.ref), { timeoutMs: 5000, intervalMs: 20 });
    const killedAt = Date.now();
    const before = writer.snapshot().acked.length;
    await acked(before + 50, "50 more puts acknowledged by the remaining quorum");
    const duringOutage = ackedAfter(writer.snapshot(), killedAt);

    c.start(victim); // same data dir: it rejoins as the same member
    await waitFor("the restarted member to answer", () => etcdStatus(victim.client).then(() => true), {
      timeoutMs: 30_000,
      intervalMs: 200,
    });
    const back = writer.snapshot().acked.length;
    await acked(back + 50, "50 puts after the restart");
    const log = await writer.stop();

    const verdict = await verifyEtcd({ endpoints: c.endpoints, log, members: baseline, settleTimeoutMs: 30_000 });
    assert.deepEqual(verdict.problems, []);
    assert.equal(verdict.ok, true);
    assert.deepEqual(verdict.lost, []);
    assert.ok(verdict.found >= log.acked.length, `read back ${verdict.found} keys, ${log.acked.length} acknowledged`);
    assert.ok(duringOutage >= 50, `the 2 remaining members kept acknowledging (${duringOutage} puts)`);
    assert.ok(log.acked.length >= 150);
    assert.deepEqual(verdict.members?.map((m) => m.id).sort(), baseline.map((m) => m.id).sort());
  },
);

test(
  "the checker reports a member that does not answer, and lost keys and members against a wiped member's fresh cluster",
  { timeout: 120_000 },
  async (t) => {
    const dir = mkdtempSync(join(tmpdir(), "stockade-etcd-checker-"));
    const c = await cluster(dir, 3, "wipe");
    t.after(async () => {
      await c.stopAll();
      rmSync(dir, { recursive: true, force: true });
    });
    const baseline = await etcdBaseline(c.endpoints, { members: 3 });
    const writer = new EtcdWriter({ endpoints: c.endpoints }).start();
    await waitFor("30 acknowledged puts", () => writer.snapshot().acked.length >= 30, { timeoutMs: 30_000, intervalMs: 50 });
    const log = await writer.stop();
    assert.equal(
      (await verifyEtcd({ endpoints: c.endpoints, log, members: baseline, settleTimeoutMs: 10_000 })).ok,
      true,
      "intact at first",
    );

    // A member down: its keys are still all there (quorum), but the cluster is not whole.
    const [m0, , m2] = c.members;
    await stop(m2!.ref, 2000);
    const down = await verifyEtcd({ endpoints: c.endpoints, log, members: baseline, settleTimeoutMs: 1500 });
    assert.equal(down.ok, false);
    assert.deepEqual(down.lost, [], "the quorum still has every key");
    assert.ok(
      down.problems.some((p) => p.includes(m2!.client) && p.includes("did not answer")),
      `reports the unanswering member: ${down.problems.join(" | ")}`,
    );
    assert.ok(down.problems.some((p) => p.includes("m2") && p.includes("answered on no endpoint")));

    // m0's data wiped and m0 started as a fresh single-member cluster: every acknowledged key is gone.
    await c.stopAll();
    rmSync(m0!.dataDir, { recursive: true, force: true });
    c.start(m0!, `m0=${m0!.peer}`, "wipe-fresh");
    await waitFor("the fresh single member to answer", () => etcdStatus(m0!.client).then(() => true), {
      timeoutMs: 30_000,
      intervalMs: 200,
    });
    const wiped = await verifyEtcd({ endpoints: [m0!.client], log, members: baseline, settleTimeoutMs: 1500 });
    assert.equal(wiped.ok, false);
    assert.deepEqual(
      wiped.lost,
      log.acked.map((a) => a.key),
      "every acknowledged key is reported lost",
    );
    assert.ok(
      wiped.problems.some((p) => p.startsWith(`${log.acked.length} acknowledged keys lost`)),
      wiped.problems.join(" | "),
    );
    for (const name of ["m1", "m2"]) {
      assert.ok(
        wiped.problems.some((p) => p.includes(`member ${name} `) && p.includes("missing from the member list")),
        `${name} missing`,
      );
    }
    assert.ok(
      wiped.problems.some((p) => p.includes("was not an original member")),
      "the fresh m0 has a new member ID",
    );
  },
);
