// The agent's loop against a stand-in apiserver on loopback (no cluster): it arms after its first confirmation and
// feeds; when the API starts hanging (requests never answered) it goes on feeding until the deadline D after the
// last confirmation, then stops — judged at each write, not when a hung request returns — and SIGTERM while
// unconfirmed closes the watchdog without "V" (it fires).
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { KubeConfig } from "@kubernetes/client-node";
import { pino } from "pino";
import { freeTcpPort } from "../../lab/ports.ts";
import { Agent } from "../../src/node-agent/agent.ts";
import { parseNodeAgentConfig } from "../../src/node-agent/config.ts";

test("feeds while confirmed, keeps feeding through a hung API until D, then stops; SIGTERM then leaves it armed", async () => {
  let hang = false;
  const leases: string[] = [];
  const api = createServer((req, res) => {
    if (hang) return; // never answered: the agent's request deadline ends it
    const status = (code: number, body: object) => res.writeHead(code, { "content-type": "application/json" }).end(JSON.stringify(body));
    const notFound = () => status(404, { kind: "Status", apiVersion: "v1", status: "Failure", reason: "NotFound", code: 404 });
    if (req.method === "GET" && req.url?.startsWith("/apis/stockade.io/v1alpha1/nodefences/")) return notFound();
    if (req.method === "GET" && /\/leases\/n1$/.test(req.url ?? "")) return notFound();
    if (req.method === "GET" && /\/leases(\?|$)/.test(req.url ?? ""))
      return status(200, { kind: "LeaseList", apiVersion: "coordination.k8s.io/v1", items: [] });
    if (req.method === "POST") {
      let b = "";
      req.on("data", (c: Buffer) => (b += c));
      req.on("end", () => (leases.push(b), status(201, JSON.parse(b) as object)));
      return;
    }
    notFound();
  });
  await new Promise<void>((r) => api.listen(0, "127.0.0.1", r));
  const kc = new KubeConfig();
  kc.loadFromOptions({
    clusters: [{ name: "c", server: `http://127.0.0.1:${(api.address() as AddressInfo).port}`, skipTLSVerify: true }],
    users: [{ name: "u" }],
    contexts: [{ name: "x", cluster: "c", user: "u" }],
    currentContext: "x",
  });
  const dir = mkdtempSync(join(tmpdir(), "agent-loop-"));
  const device = join(dir, "watchdog");
  writeFileSync(device, "");
  writeFileSync(join(dir, "timeout"), "3\n");
  // c = 2 s, N = 1, F = 2 s, peer timeout 1 s (shorter than c): D ≥ 2 + 2 + 2 = 6 s.
  const cfg = parseNodeAgentConfig(
    [
      ...["--check-interval-seconds", "2", "--failed-checks-before-peers", "1", "--peer-timeout-seconds", "1", "--deadline-seconds", "6"],
      ...["--control-plane-down-seconds", "2"],
      ...["--watchdog-device", device, "--watchdog-timeout-file", join(dir, "timeout")],
      ...["--peer-port", String(await freeTcpPort()), "--health-bind-address", "127.0.0.1:0"],
    ],
    { NODE_NAME: "n1", POD_IP: "127.0.0.1" },
  )!;
  const agent = new Agent(kc, cfg, pino({ level: "silent" }));
  await agent.start();
  try {
    assert.equal(agent.stateName, "confirmed");
    assert.ok(leases.length >= 1, "the record was created");
    assert.match(leases[0]!, /"node-agent.stockade.io\/armed":"true"/);
    assert.match(leases[0]!, /"node-agent.stockade.io\/control-plane-down-seconds":"2"/);
    await sleep(1500);
    const fedBeforeHang = readFileSync(device).length;
    assert.ok(fedBeforeHang >= 2, `fed ${fedBeforeHang} times`);
    hang = true;
    const hungAt = performance.now();
    // Within D of the last confirmation (≤ 1 s before the hang): still fed, although every request hangs.
    await sleep(2500);
    assert.ok(readFileSync(device).length > fedBeforeHang, "fed on while the API hung, before the deadline");
    // Past D (6 s after the last confirmation, which started before the hang): no more feeding.
    await sleep(Math.max(0, hungAt + 6200 - performance.now()));
    assert.equal(agent.stateName, "unconfirmed");
    const atDeadline = readFileSync(device).length;
    await sleep(1500);
    assert.equal(readFileSync(device).length, atDeadline, "no feed past the deadline");
  } finally {
    assert.equal(await agent.stop(), "left-armed");
    api.closeAllConnections();
    api.close();
  }
  assert.ok(!readFileSync(device, "latin1").includes("V"), "no magic close while unconfirmed");
});
