// A control-plane component whose port another process bound between the lab choosing it and the
// component starting is started again on new ports (a CI run lost a whole suite to a scheduler's
// "bind: address already in use"); one that fails for another reason fails at once, not at a deadline.
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ensureBins } from "../../lab/bins.ts";
import { defaultTimings, healthy, startWithFreshPorts, stopComponent } from "../../lab/control-plane.ts";
import { createPki } from "../../lab/pki.ts";
import { freeTcpPorts } from "../../lab/ports.ts";
import { paths, readState, type LabState } from "../../lab/state.ts";

async function labState(): Promise<LabState> {
  const dir = mkdtempSync(join(tmpdir(), "stockade-ports-"));
  const p = paths(dir);
  for (const d of [p.logs, p.pids]) mkdirSync(d, { recursive: true });
  const [etcd, etcdPeer, etcdProxy, apiserver, controllerManager, scheduler] = await freeTcpPorts(6);
  const bins = ensureBins();
  return {
    version: 1,
    dir,
    createdAt: new Date().toISOString(),
    apiserverUrl: `https://127.0.0.1:${apiserver}`,
    ports: {
      etcd: etcd!,
      etcdPeer: etcdPeer!,
      etcdProxy: etcdProxy!,
      apiserver: apiserver!,
      controllerManager: controllerManager!,
      scheduler: scheduler!,
    },
    binDir: bins.kubeDir,
    kwok: bins.kwok,
    kwokStages: bins.kwokStages,
    nodeBin: process.execPath,
    nodeLeaseSeconds: 8,
    timings: defaultTimings,
    nodes: [],
  };
}

test("etcd whose client port is taken starts again on new ports and is healthy there", async () => {
  const s = await labState();
  const taken = s.ports.etcd;
  // It drops whatever connects (the health probes of the first try reach it).
  const squatter = createServer((sock) => sock.destroy());
  await new Promise<void>((resolve) => squatter.listen(taken, "127.0.0.1", resolve));
  const said: string[] = [];
  try {
    await startWithFreshPorts(s, "etcd", ensureBins(), (m) => said.push(m));
    assert.notEqual(s.ports.etcd, taken);
    assert.ok(await healthy(s, "etcd"), "healthy on its new port");
    assert.equal(readState(s.dir).ports.etcd, s.ports.etcd, "the state on disk names the new port");
    assert.match(said.join("\n"), /etcd: its port was taken before it bound it; starting it again/);
    assert.match(readFileSync(join(paths(s.dir).logs, "etcd.log"), "utf8"), /address already in use/);
  } finally {
    await stopComponent(s, "etcd");
    await new Promise((r) => squatter.close(r));
    rmSync(s.dir, { recursive: true, force: true });
  }
});

test("kube-apiserver whose port is taken starts again on a new port, its URL follows, and its clients are told", async () => {
  const s = await labState();
  createPki(paths(s.dir).pki, [{ name: "admin", cn: "stockade-lab-admin", groups: ["system:masters"] }]);
  const taken = s.ports.apiserver;
  const squatter = createServer((sock) => sock.destroy());
  await new Promise<void>((resolve) => squatter.listen(taken, "127.0.0.1", resolve));
  const said: string[] = [];
  const told: string[] = [];
  try {
    await startWithFreshPorts(s, "etcd", ensureBins(), (m) => said.push(m));
    await startWithFreshPorts(s, "etcd-proxy", ensureBins(), (m) => said.push(m));
    await startWithFreshPorts(
      s,
      "kube-apiserver",
      ensureBins(),
      (m) => said.push(m),
      () => told.push(s.apiserverUrl),
    );
    assert.notEqual(s.ports.apiserver, taken);
    assert.equal(s.apiserverUrl, `https://127.0.0.1:${s.ports.apiserver}`);
    assert.deepEqual(told, [s.apiserverUrl], "the clients' kubeconfigs are rewritten once, with the new address");
    assert.ok(await healthy(s, "kube-apiserver"), "ready on its new port");
    assert.equal(readState(s.dir).apiserverUrl, s.apiserverUrl, "the state on disk names the new address");
    assert.match(said.join("\n"), /kube-apiserver: its port was taken before it bound it; starting it again/);
  } finally {
    for (const c of ["kube-apiserver", "etcd-proxy", "etcd"] as const) await stopComponent(s, c);
    await new Promise((r) => squatter.close(r));
    rmSync(s.dir, { recursive: true, force: true });
  }
});

test("a component that exits for another reason fails at once with its log, without another try", async () => {
  const s = await labState();
  // etcd's data directory is a file: it exits at start.
  writeFileSync(paths(s.dir).etcdData, "not a directory");
  const said: string[] = [];
  const t0 = Date.now();
  try {
    await assert.rejects(
      startWithFreshPorts(s, "etcd", ensureBins(), (m) => said.push(m)),
      /etcd exited\n--- last lines of /,
    );
    assert.ok(Date.now() - t0 < 30_000, `failed after ${Date.now() - t0} ms, not at the 90 s deadline`);
    assert.deepEqual(said, []);
  } finally {
    await stopComponent(s, "etcd");
    rmSync(s.dir, { recursive: true, force: true });
  }
});
