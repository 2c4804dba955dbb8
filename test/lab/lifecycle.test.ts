// The lab starts and stops cleanly, twice in a row, leaving no process and no bound port behind.
import { test } from "node:test";
import assert from "node:assert/strict";
import { createServer } from "node:net";
import { createSocket } from "node:dgram";
import { mkdtempSync, readdirSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Lab } from "../../lab/lab.ts";
import { isAlive, readRef, type ProcRef } from "../../lab/processes.ts";
import { paths } from "../../lab/state.ts";

function refsOf(dir: string): ProcRef[] {
  const p = paths(dir);
  const files = readdirSync(p.pids).map((f) => join(p.pids, f));
  for (const n of readdirSync(join(dir, "nodes"))) {
    files.push(p.node(n).kubelet, p.node(n).bmcPid);
  }
  return files.map(readRef).filter((r): r is ProcRef => !!r);
}

const tcpFree = (port: number) =>
  new Promise<boolean>((resolve) => {
    const s = createServer().once("error", () => resolve(false));
    s.listen(port, "127.0.0.1", () => s.close(() => resolve(true)));
  });
const udpFree = (port: number) =>
  new Promise<boolean>((resolve) => {
    const s = createSocket("udp4").once("error", () => resolve(false));
    s.bind(port, "127.0.0.1", () => s.close(() => resolve(true)));
  });

test("the lab starts and stops cleanly twice in a row", async () => {
  const dir = mkdtempSync(join(tmpdir(), "stockade-lifecycle-"));
  for (const round of [1, 2]) {
    const lab = await Lab.up({ dir, nodes: 2 });
    const refs = refsOf(dir);
    assert.equal(refs.length, 5 + 2 * 2, `round ${round}: control plane (with its etcd proxy) + a kubelet and a BMC per node`);
    assert.ok(refs.every(isAlive), `round ${round}: all running`);
    assert.ok(Lab.running(dir));
    await assert.rejects(Lab.up({ dir, nodes: 1 }), /already running/, "a second lab in the same place is refused");

    await lab.down();
    assert.deepEqual(refs.filter(isAlive), [], `round ${round}: no process left`);
    assert.equal(Lab.running(dir), false);
    const s = lab.state;
    for (const port of [s.ports.etcd, s.ports.etcdPeer, s.ports.apiserver, s.ports.controllerManager, s.ports.scheduler]) {
      assert.ok(await tcpFree(port), `round ${round}: tcp port ${port} released`);
    }
    for (const n of s.nodes) assert.ok(await udpFree(n.bmc.port), `round ${round}: BMC port ${n.bmc.port} released`);
  }
});
