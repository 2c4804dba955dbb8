// The agent cut off from the API, asking its peers over real HTTP on loopback (a stand-in apiserver, real peer
// servers): the peers' "no NodeFence" extends feeding only from ⌊n/6⌋+1 distinct known peers of one round
// (decide/isolation.ts), so with 9 known peers one vouching peer (it may be lying) no longer keeps the node fed past
// D after its own last read, while two do. Peers that do not answer are not votes.
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
import { RECORD_ANNOTATIONS } from "../../src/decide/node-agent-record.ts";
import { Agent } from "../../src/node-agent/agent.ts";
import { parseNodeAgentConfig } from "../../src/node-agent/config.ts";
import { PeerServer } from "../../src/node-agent/peers.ts";
import { generateKeyPair } from "../../src/node-agent/protocol.ts";

const KNOWN = 9;

/** Runs n1 with 9 known peers of which `vouching` answer "reachable, no NodeFence"; the API goes down after start. */
async function cutOff(vouching: number): Promise<{ fedAfterDeadline: boolean; state: string; answered: number }> {
  let apiDown = false;
  let agentKey: string | undefined;
  const peers = await Promise.all(
    Array.from({ length: KNOWN }, async (_, i) => {
      const keys = generateKeyPair();
      const node = `p${i}`;
      let answered = 0;
      const server =
        i < vouching
          ? new PeerServer({
              node,
              privateKey: keys.privateKey,
              peerKey: (n) => (n === "n1" ? agentKey : undefined),
              freshCheck: async () => "absent",
              unreachableForSeconds: () => 0,
              minUnreachableSeconds: 2,
              log: { warn: () => undefined },
              onAnswered: () => answered++,
              ratePerSecond: 1000,
            })
          : undefined;
      const port = server ? await server.listen(0, "127.0.0.1") : await freeTcpPort(); // nothing listens: no vote
      return { node, keys, port, server, answered: () => answered };
    }),
  );
  const lease = (p: (typeof peers)[number]) => ({
    metadata: {
      name: p.node,
      namespace: "stockade-node-agent",
      annotations: {
        [RECORD_ANNOTATIONS.armed]: "false",
        [RECORD_ANNOTATIONS.deadlineSeconds]: "30",
        [RECORD_ANNOTATIONS.controlPlaneDownSeconds]: "2",
        [RECORD_ANNOTATIONS.publicKey]: p.keys.publicKeyBase64,
        [RECORD_ANNOTATIONS.peerAddress]: `127.0.0.1:${p.port}`,
      },
    },
    spec: { holderIdentity: p.node, renewTime: new Date().toISOString() },
  });
  const api = createServer((req, res) => {
    const status = (code: number, body: object) => res.writeHead(code, { "content-type": "application/json" }).end(JSON.stringify(body));
    const notFound = () => status(404, { kind: "Status", apiVersion: "v1", status: "Failure", reason: "NotFound", code: 404 });
    if (apiDown) return status(503, { kind: "Status", apiVersion: "v1", status: "Failure", code: 503 });
    if (req.method === "GET" && req.url?.startsWith("/apis/stockade.io/v1alpha1/nodefences/")) return notFound();
    if (req.method === "GET" && /\/leases\/n1$/.test(req.url ?? "")) return notFound();
    if (req.method === "GET" && /\/leases(\?|$)/.test(req.url ?? ""))
      return status(200, { kind: "LeaseList", apiVersion: "coordination.k8s.io/v1", items: peers.map(lease) });
    if (req.method === "POST") {
      let b = "";
      req.on("data", (c: Buffer) => (b += c));
      req.on("end", () => {
        const body = JSON.parse(b) as { metadata: { annotations: Record<string, string> } };
        agentKey = body.metadata.annotations[RECORD_ANNOTATIONS.publicKey];
        status(201, body);
      });
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
  const dir = mkdtempSync(join(tmpdir(), "agent-cutoff-"));
  const device = join(dir, "watchdog");
  writeFileSync(device, "");
  writeFileSync(join(dir, "timeout"), "3\n");
  // c = 2 s, N = 1, F = 5 s (the least with c = 2 s), peer timeout 1 s: D = 9 s.
  const cfg = parseNodeAgentConfig(
    [
      ...["--check-interval-seconds", "2", "--failed-checks-before-peers", "1", "--peer-timeout-seconds", "1", "--deadline-seconds", "9"],
      ...["--control-plane-down-seconds", "5", "--watchdog-device", device, "--watchdog-timeout-file", join(dir, "timeout")],
      ...["--peer-port", String(await freeTcpPort()), "--health-bind-address", "127.0.0.1:0"],
    ],
    { NODE_NAME: "n1", POD_IP: "127.0.0.1" },
  )!;
  const agent = new Agent(kc, cfg, pino({ level: "silent" }));
  const started = performance.now(); // the own confirmation's start is after this
  await agent.start();
  try {
    assert.equal(agent.stateName, "confirmed");
    assert.ok(agentKey, "the agent's record was written");
    apiDown = true;
    // Past D after the own read (which started after `started`), with peer rounds every check since.
    await sleep(Math.max(0, started + 9500 - performance.now()));
    const at = readFileSync(device).length;
    await sleep(1500);
    return {
      fedAfterDeadline: readFileSync(device).length > at,
      state: agent.stateName,
      answered: peers.reduce((n, p) => n + p.answered(), 0),
    };
  } finally {
    await agent.stop();
    await Promise.all(peers.map((p) => p.server?.close()));
    api.closeAllConnections();
    api.close();
  }
}

test("cut off with 9 known peers: one vouching peer does not keep the node fed past D; two do", async () => {
  const one = await cutOff(1);
  assert.ok(one.answered >= 2, `the vouching peer answered every round (${one.answered})`);
  assert.equal(one.fedAfterDeadline, false, "1 of 9 is below the quorum ⌊9/6⌋+1 = 2");
  assert.equal(one.state, "unconfirmed");
  const two = await cutOff(2);
  assert.ok(two.answered >= 4, `both vouching peers answered every round (${two.answered})`);
  assert.equal(two.fedAfterDeadline, true, "2 of 9 distinct known peers in one round extend feeding");
  assert.equal(two.state, "confirmed");
});
