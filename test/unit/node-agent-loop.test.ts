// The agent's loop against a stand-in apiserver on loopback (no cluster; a test double speaking the API's HTTP for
// the few requests the agent makes, so that single requests can be made to hang or fail):
//   - it arms after its first confirmation and feeds; when the API hangs it feeds on until the deadline D after the
//     last confirmation, then stops — judged at each write, not when a hung request returns — and SIGTERM while
//     unconfirmed closes the watchdog without "V" (it fires);
//   - a record renewal that hangs does not push the next check back (the renewal runs beside the loop);
//   - SIGTERM while confirmed writes armed=false to the record before the magic close, and leaves the watchdog
//     armed when that write is not acknowledged.
// The real apiserver's side (the record, the admission policy, SIGTERM) is in test/lab/node-agent-record.test.ts.
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { KubeConfig } from "@kubernetes/client-node";
import { pino } from "pino";
import { freeTcpPort } from "../../lab/ports.ts";
import { Agent } from "../../src/node-agent/agent.ts";
import { parseNodeAgentConfig } from "../../src/node-agent/config.ts";

interface StandIn {
  /** Every request hangs (never answered). */
  hang: boolean;
  /** Requests on Leases (the record and the membership) hang; NodeFence reads are answered. */
  hangLeases: boolean;
  /** Writes of the record answer 500. */
  failWrites: boolean;
  /** Bodies of the record writes answered 201, with the device's length when each arrived. */
  writes: { body: string; deviceLength: number }[];
  nodeFenceReads: number;
  server: Server;
  kc: KubeConfig;
}

async function standIn(device: string): Promise<StandIn> {
  const s = { hang: false, hangLeases: false, failWrites: false, writes: [], nodeFenceReads: 0 } as unknown as StandIn;
  s.server = createServer((req, res) => {
    if (s.hang) return; // never answered: the agent's request deadline ends it
    const url = req.url ?? "";
    const status = (code: number, body: object) => res.writeHead(code, { "content-type": "application/json" }).end(JSON.stringify(body));
    const failure = (code: number, reason: string) => status(code, { kind: "Status", apiVersion: "v1", status: "Failure", reason, code });
    if (req.method === "GET" && url.startsWith("/apis/stockade.io/v1alpha1/nodefences/"))
      return (s.nodeFenceReads++, failure(404, "NotFound"));
    if (url.includes("/leases") && s.hangLeases) return;
    if (req.method === "GET" && /\/leases\/n1$/.test(url)) return failure(404, "NotFound");
    if (req.method === "GET" && /\/leases(\?|$)/.test(url))
      return status(200, { kind: "LeaseList", apiVersion: "coordination.k8s.io/v1", items: [] });
    if (req.method === "POST") {
      let b = "";
      req.on("data", (c: Buffer) => (b += c));
      req.on("end", () => {
        if (s.failWrites) return failure(500, "InternalError");
        s.writes.push({ body: b, deviceLength: readFileSync(device).length });
        status(201, JSON.parse(b) as object);
      });
      return;
    }
    failure(404, "NotFound");
  });
  await new Promise<void>((r) => s.server.listen(0, "127.0.0.1", r));
  s.kc = new KubeConfig();
  s.kc.loadFromOptions({
    clusters: [{ name: "c", server: `http://127.0.0.1:${(s.server.address() as AddressInfo).port}`, skipTLSVerify: true }],
    users: [{ name: "u" }],
    contexts: [{ name: "x", cluster: "c", user: "u" }],
    currentContext: "x",
  });
  return s;
}

/** An agent of node n1 on the stand-in, c = 2 s, N = 1, F = 5 s, peer timeout 1 s, D = 9 s; T = 3 s (a plain file). */
async function agentOn(): Promise<{ agent: Agent; api: StandIn; device: string }> {
  const dir = mkdtempSync(join(tmpdir(), "agent-loop-"));
  const device = join(dir, "watchdog");
  writeFileSync(device, "");
  writeFileSync(join(dir, "timeout"), "3\n");
  const api = await standIn(device);
  const cfg = parseNodeAgentConfig(
    [
      ...["--check-interval-seconds", "2", "--failed-checks-before-peers", "1", "--peer-timeout-seconds", "1", "--deadline-seconds", "9"],
      ...["--control-plane-down-seconds", "5"],
      ...["--watchdog-device", device, "--watchdog-timeout-file", join(dir, "timeout")],
      ...["--peer-port", String(await freeTcpPort()), "--health-bind-address", "127.0.0.1:0"],
    ],
    { NODE_NAME: "n1", POD_IP: "127.0.0.1" },
  )!;
  const agent = new Agent(api.kc, cfg, pino({ level: "silent" }));
  await agent.start();
  return { agent, api, device };
}

const closeApi = (api: StandIn) => (api.server.closeAllConnections(), api.server.close());

test("feeds while confirmed, keeps feeding through a hung API until D, then stops; SIGTERM then leaves it armed", async () => {
  const { agent, api, device } = await agentOn();
  try {
    assert.equal(agent.stateName, "confirmed");
    assert.ok(api.writes.length >= 1, "the record was created");
    assert.match(api.writes[0]!.body, /"node-agent.stockade.io\/armed":"true"/);
    assert.match(api.writes[0]!.body, /"node-agent.stockade.io\/control-plane-down-seconds":"5"/);
    await sleep(1500);
    const fedBeforeHang = readFileSync(device).length;
    assert.ok(fedBeforeHang >= 2, `fed ${fedBeforeHang} times`);
    api.hang = true;
    const hungAt = performance.now();
    // Within D of the last confirmation (≤ 1 s before the hang): still fed, although every request hangs.
    await sleep(2500);
    assert.ok(readFileSync(device).length > fedBeforeHang, "fed on while the API hung, before the deadline");
    // Past D (9 s after the last confirmation, which started before the hang): no more feeding.
    await sleep(Math.max(0, hungAt + 9200 - performance.now()));
    assert.equal(agent.stateName, "unconfirmed");
    const atDeadline = readFileSync(device).length;
    await sleep(1500);
    assert.equal(readFileSync(device).length, atDeadline, "no feed past the deadline");
  } finally {
    assert.equal(await agent.stop(), "left-armed");
    closeApi(api);
  }
  assert.ok(!readFileSync(device, "latin1").includes("V"), "no magic close while unconfirmed");
});

test("a record renewal that hangs does not push the next check back", async () => {
  const { agent, api } = await agentOn();
  try {
    // Each renewal now hangs for two request deadlines (1.6 s each: its read, then the membership list). Awaited in
    // the loop, that made a check every 2 + 3.2 s: 2 in 10 s. Beside the loop: one every 2 s.
    api.hangLeases = true;
    const before = api.nodeFenceReads;
    await sleep(10_000);
    const checks = api.nodeFenceReads - before;
    assert.ok(checks >= 4, `${checks} checks in 10 s with c = 2 s while renewals hung`);
    assert.equal(agent.stateName, "confirmed", "the checks kept confirming");
  } finally {
    api.hangLeases = false;
    await agent.stop();
    closeApi(api);
  }
});

test("SIGTERM while confirmed: the record says armed=false, acknowledged, before the magic close", async () => {
  const { agent, api, device } = await agentOn();
  try {
    await sleep(500);
    assert.equal(await agent.stop(), "disarmed");
  } finally {
    closeApi(api);
  }
  const last = api.writes.at(-1)!;
  assert.match(last.body, /"node-agent.stockade.io\/armed":"false"/);
  const written = readFileSync(device, "latin1");
  assert.ok(written.endsWith("V"), "magic close");
  assert.ok(!written.slice(0, last.deviceLength).includes("V"), "the V came after the armed=false write was answered");
});

test("SIGTERM while confirmed, the armed=false write refused: the watchdog is left armed (no V)", async () => {
  const { agent, api, device } = await agentOn();
  try {
    await sleep(500);
    api.failWrites = true;
    assert.equal(await agent.stop(), "left-armed");
  } finally {
    closeApi(api);
  }
  assert.ok(!readFileSync(device, "latin1").includes("V"), "no magic close without the record saying armed=false");
});
