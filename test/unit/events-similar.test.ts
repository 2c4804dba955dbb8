// EventRecorder's folding of similar Events (issue 26 item 5), against a loopback stand-in for the apiserver's Event
// endpoints: a fence that loops or fails for days names its round or time in each message, so identical repeats alone
// would not bound its Events. The real apiserver's side is test/lab/events.test.ts.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { createServer, type Server } from "node:http";
import { KubeConfig } from "@kubernetes/client-node";
import { COMBINED_PREFIX, EventRecorder, MAX_SIMILAR } from "../../src/runtime/events.ts";

const quiet = { info() {}, warn() {}, error() {}, debug() {} };
let server: Server;
let kc: KubeConfig;
const calls: { method: string; name?: string; message?: string }[] = [];

before(async () => {
  server = createServer((req, res) => {
    let body = "";
    req.on("data", (c) => (body += c));
    req.on("end", () => {
      const parsed = body ? JSON.parse(body) : undefined;
      const name = req.url?.split("/").at(-1);
      if (req.method === "POST") calls.push({ method: "create", message: parsed.message });
      else calls.push({ method: "patch", name, message: parsed.find((p: { path: string }) => p.path === "/message")?.value });
      res.writeHead(req.method === "POST" ? 201 : 200, { "content-type": "application/json" });
      res.end(JSON.stringify(req.method === "POST" ? parsed : { metadata: { name } }));
    });
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const { port } = server.address() as { port: number };
  kc = new KubeConfig();
  kc.loadFromOptions({
    clusters: [{ name: "loop", server: `http://127.0.0.1:${port}`, skipTLSVerify: true }],
    users: [{ name: "u" }],
    contexts: [{ name: "loop", cluster: "loop", user: "u" }],
    currentContext: "loop",
  });
});
after(() => server.close());

test("past MAX_SIMILAR different messages of one (object, type, reason) in the window, the rest patch one combined Event", async () => {
  calls.length = 0;
  let now = 1_000_000;
  const rec = new EventRecorder({ kc, log: quiet, now: () => now });
  const fence = { apiVersion: "stockade.io/v1alpha1", kind: "NodeFence", name: "node-1", uid: "uid-fence" };
  for (let round = 1; round <= 100; round++) await rec.record(fence, "Warning", "HeartbeatAfterFence", `round ${round}: heartbeat`);
  const creates = calls.filter((c) => c.method === "create");
  assert.equal(creates.length, MAX_SIMILAR + 1, "ten Events, then one combined");
  assert.equal(creates.at(-1)?.message, `${COMBINED_PREFIX}round ${MAX_SIMILAR + 1}: heartbeat`);
  assert.equal(calls.filter((c) => c.method === "patch").length, 100 - MAX_SIMILAR - 1);
  assert.equal(calls.at(-1)?.message, `${COMBINED_PREFIX}round 100: heartbeat`, "the combined Event says the latest");
  // Another reason, another object: counted apart. A new window starts over.
  await rec.record(fence, "Warning", "FenceFailed", "x");
  await rec.record({ ...fence, uid: "uid-other" }, "Warning", "HeartbeatAfterFence", "round 1: heartbeat");
  assert.equal(calls.filter((c) => c.method === "create").length, MAX_SIMILAR + 3);
  now += 11 * 60_000;
  await rec.record(fence, "Warning", "HeartbeatAfterFence", "round 101: heartbeat");
  assert.equal(calls.at(-1)?.method, "create");
  assert.equal(calls.at(-1)?.message, "round 101: heartbeat");
});

test("identical repeats still patch their own Event", async () => {
  calls.length = 0;
  const rec = new EventRecorder({ kc, log: quiet });
  const node = { apiVersion: "v1", kind: "Node", name: "node-1", uid: "uid-node" };
  for (let i = 0; i < 5; i++) await rec.record(node, "Warning", "FenceFailed", "no BMC");
  assert.deepEqual(
    calls.map((c) => c.method),
    ["create", "patch", "patch", "patch", "patch"],
  );
});
