// The webhook agent: the signature against a vector computed by openssl and Python (not by our code), the
// classification of every kind of answer, its parameter rules and targets, and the driver live against the
// reference receiver (HTTPS with its own CA) and against the Python receiver printed in docs/webhook-agent.md.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { connect, createServer } from "node:net";
import { request } from "node:https";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { V1Node } from "@kubernetes/client-node";
import {
  classifyTransport,
  interpretAnswer,
  requestBody,
  sign,
  verify,
  webhookDriver,
  webhookRules,
  type Answer,
} from "../../src/agents/webhook.ts";
import { AgentError } from "../../src/agents/types.ts";
import { fenceOff, runOperation } from "../../src/agents/run.ts";
import { checkUniqueTarget } from "../../src/agents/targets.ts";
import { resolveParameters } from "../../src/agents/parameters.ts";
import { driverFor, rulesFor } from "../../src/agents/registry.ts";
import { serviceTls, WebhookPowerService, type Power, type PowerBackend } from "../../lab/webhook-power-service.ts";

const KEY = "0123456789abcdef0123456789abcdef";
const TS = "1767225600";
const BODY =
  '{"version":"stockade.io/webhook-agent/v1","action":"off","node":"node-1","machine":"rack4-slot2","requestId":"5f0c1a52-8d0e-4a51-9a3e-6f1f2b9a7c10","timestamp":1767225600}';
// Computed with `printf '%s' "$TS.$BODY" | openssl dgst -sha256 -hmac "$KEY"` when the contract was written (docs/webhook-agent.md).
const VECTOR = "cc3a96e657ab87d45dbddd77cd1238e2c1e36e59c4ce37773aa0e9f2b912bec6";

describe("webhook signature", () => {
  test("the body the driver sends for the documented request is byte for byte the documented one", () => {
    assert.equal(requestBody("off", "node-1", { machine: "rack4-slot2" }, "5f0c1a52-8d0e-4a51-9a3e-6f1f2b9a7c10", Number(TS)), BODY);
  });

  test("sign() matches the known vector, and openssl and Python's hmac compute the same now", () => {
    assert.equal(sign(KEY, TS, BODY), `v1=${VECTOR}`);
    const openssl = execFileSync("openssl", ["dgst", "-sha256", "-hmac", KEY], { input: `${TS}.${BODY}` }).toString();
    assert.match(openssl, new RegExp(`= ${VECTOR}\\s*$`));
    const py = execFileSync("python3", [
      "-c",
      "import hmac,hashlib,sys; k,t,b=sys.argv[1:]; print(hmac.new(k.encode(), (t+'.'+b).encode(), hashlib.sha256).hexdigest())",
      KEY,
      TS,
      BODY,
    ]);
    assert.equal(py.toString().trim(), VECTOR);
  });

  test("verify() accepts the signature (also among several), refuses any change of key, timestamp or body", () => {
    const sig = sign(KEY, TS, BODY);
    assert.ok(verify(KEY, TS, BODY, sig));
    assert.ok(verify(KEY, TS, Buffer.from(BODY), `v1=${"0".repeat(64)}, ${sig}`));
    assert.ok(!verify(KEY.replace("0", "1"), TS, BODY, sig));
    assert.ok(!verify(KEY, "1767225601", BODY, sig));
    assert.ok(!verify(KEY, TS, BODY.replace("off", "on "), sig));
    assert.ok(!verify(KEY, TS, BODY, undefined));
    assert.ok(!verify(KEY, TS, BODY, sig.toUpperCase()));
    assert.ok(!verify(KEY, "", BODY, sign(KEY, "", BODY)), "a signature without a timestamp is refused");
  });
});

describe("webhook answers", () => {
  const rid = "5f0c1a52-8d0e-4a51-9a3e-6f1f2b9a7c10";
  const signed = (status: number, body: string, key = KEY): Answer => ({
    status,
    body: Buffer.from(body),
    timestamp: TS,
    signature: sign(key, TS, body),
  });
  const kind = (f: () => unknown) => {
    try {
      f();
    } catch (e) {
      assert.ok(e instanceof AgentError, String(e));
      return e.kind;
    }
    return "ok";
  };
  const status = (a: Answer) => kind(() => interpretAnswer("status", a, KEY, rid, "webhook X"));

  test("a signed status answer gives its power; off/on accept 200 and 202", () => {
    for (const p of ["on", "off", "unknown"] as const)
      assert.equal(interpretAnswer("status", signed(200, JSON.stringify({ requestId: rid, power: p })), KEY, rid, "w"), p);
    assert.equal(interpretAnswer("off", signed(202, JSON.stringify({ requestId: rid })), KEY, rid, "w"), undefined);
    assert.equal(interpretAnswer("on", signed(200, JSON.stringify({ requestId: rid, power: "on" })), KEY, rid, "w"), undefined);
  });

  test("error statuses are classified like the other agents'", () => {
    const plain = (s: number): Answer => ({ status: s, body: Buffer.from('{"error":"x"}'), timestamp: undefined, signature: undefined });
    const table: [number, string][] = [
      [401, "AuthFailed"],
      [403, "AuthFailed"],
      [404, "Config"],
      [400, "Config"],
      [422, "Config"],
      [301, "Config"],
      [307, "Config"],
      [408, "Unreachable"],
      [429, "Unreachable"],
      [502, "Unreachable"],
      [503, "Unreachable"],
      [504, "Unreachable"],
      [500, "Failed"],
      [409, "Failed"],
      [204, "Failed"],
    ];
    for (const [s, k] of table) assert.equal(status(plain(s)), k, String(s));
    assert.equal(
      kind(() => interpretAnswer("off", plain(503), KEY, rid, "w")),
      "Unreachable",
    );
  });

  test("garbage and doubtful answers are BadOutput, never off", () => {
    const cases = [
      "<html>please log in</html>",
      "",
      "[]",
      "null",
      '"off"',
      JSON.stringify({ requestId: rid, power: "OFF" }),
      JSON.stringify({ requestId: rid, power: "of" }),
      JSON.stringify({ requestId: rid, power: false }),
      JSON.stringify({ requestId: rid }),
      JSON.stringify({ requestId: "another", power: "off" }),
      JSON.stringify({ power: "off" }),
    ];
    for (const body of cases) assert.equal(status(signed(200, body)), "BadOutput", body);
    assert.equal(status(signed(202, JSON.stringify({ requestId: rid, power: "off" }))), "BadOutput", "202 to a status query");
    const garbage: Answer = { status: 200, body: Buffer.from("<html>oops</html>"), timestamp: undefined, signature: undefined };
    assert.equal(status(garbage), "BadOutput", "unsigned garbage is garbage");
  });

  test("an unsigned or wrongly signed 'off' is refused: a misrouted URL or a man in the middle cannot confirm off", () => {
    const body = JSON.stringify({ requestId: rid, power: "off" });
    assert.equal(status({ status: 200, body: Buffer.from(body), timestamp: undefined, signature: undefined }), "AuthFailed");
    assert.equal(status(signed(200, body, "another-key-another-key-another-key")), "AuthFailed");
    assert.equal(status({ ...signed(200, body), timestamp: "1767225601" }), "AuthFailed");
    const other = JSON.stringify({ requestId: rid, power: "on" });
    assert.equal(status({ ...signed(200, other), body: Buffer.from(body) }), "AuthFailed", "body swapped under a valid signature");
  });

  test("transport errors: refused/reset = Unreachable, certificate = Config, abort = TimedOut", () => {
    const err = (code: string) => Object.assign(new Error(code), { code });
    assert.equal(classifyTransport(err("ECONNREFUSED"), "w", false).kind, "Unreachable");
    assert.equal(classifyTransport(err("ECONNRESET"), "w", false).kind, "Unreachable");
    assert.equal(classifyTransport(err("ENOTFOUND"), "w", false).kind, "Unreachable");
    assert.equal(classifyTransport(err("UNABLE_TO_VERIFY_LEAF_SIGNATURE"), "w", false).kind, "Config");
    assert.equal(classifyTransport(err("DEPTH_ZERO_SELF_SIGNED_CERT"), "w", false).kind, "Config");
    assert.equal(classifyTransport(err("ERR_TLS_CERT_ALTNAME_INVALID"), "w", false).kind, "Config");
    assert.equal(classifyTransport(err("ABORT_ERR"), "w", true).kind, "TimedOut");
  });
});

describe("webhook parameters", () => {
  const ok = { url: "https://power.example.com/stockade", hmacKey: KEY };
  const problems = (p: Record<string, string>) => webhookRules.check(p).join("; ");

  test("a URL and a key are enough; everything else is checked", () => {
    assert.deepEqual(webhookRules.check(ok), []);
    assert.deepEqual(webhookRules.check({ ...ok, machine: "rack4-slot2", providerID: "aws:///a/i-1", x_site: "paris" }), []);
    assert.match(problems({ hmacKey: KEY }), /url .* is missing/);
    assert.match(problems({ url: ok.url }), /hmacKey is missing/);
    assert.match(problems({ ...ok, hmacKey: "short" }), /too short/);
    assert.match(problems({ ...ok, url: "http://power.example.com/" }), /must be https/);
    assert.match(problems({ ...ok, url: "http://power.example.com/", allowInsecureHttp: "true" }), /only to a loopback/);
    assert.deepEqual(webhookRules.check({ ...ok, url: "http://127.0.0.1:8080/", allowInsecureHttp: "true" }), []);
    assert.deepEqual(webhookRules.check({ ...ok, url: "http://[::1]:8080/", allowInsecureHttp: "true" }), []);
    assert.match(problems({ ...ok, allowInsecureHttp: "yes" }), /"true" or "false"/);
    assert.match(problems({ ...ok, url: "https://user:pw@power.example.com/" }), /user or password/);
    assert.match(problems({ ...ok, url: "ftp://power.example.com/" }), /https:\/\//);
    assert.match(problems({ ...ok, url: "power.example.com" }), /absolute/);
    assert.match(problems({ ...ok, caBundle: "not a pem" }), /caBundle holds no PEM/);
    assert.match(problems({ ...ok, machine: "a b" }), /machine contains whitespace/);
    assert.match(problems({ ...ok, address: "10.0.0.1" }), /address is not a webhook parameter/);
    assert.match(problems({ ...ok, x_bad: "a\nb" }), /x_bad contains a control character/);
  });

  test("hmacKey only from a Secret; caBundle from either", () => {
    assert.deepEqual(webhookRules.verdict("hmacKey"), { kind: "credential", secretOnly: true });
    assert.deepEqual(webhookRules.verdict("caBundle"), { kind: "credential", secretOnly: false });
    assert.deepEqual(webhookRules.verdict("x_rack"), { kind: "allowed" });
    assert.equal(webhookRules.verdict("password"), undefined);
    const node: V1Node = { metadata: { name: "node-1" } };
    const spec = { type: "webhook", parameters: { url: ok.url }, credentialsSecretRef: { namespace: "s", name: "w" } };
    const r = resolveParameters(spec, node, new Map([["s/w", { hmacKey: `${KEY}\n` }]]));
    assert.deepEqual(r, { parameters: { url: ok.url, hmacKey: KEY } });
    const bad = resolveParameters({ ...spec, parameters: { url: ok.url, hmacKey: KEY } }, node, new Map([["s/w", { caBundle: "x" }]]));
    assert.match(("errors" in bad && bad.errors.join("; ")) || "", /sets hmacKey, a credential/);
    assert.equal(driverFor("webhook"), webhookDriver);
    assert.equal(rulesFor({ type: "webhook" }), webhookRules);
  });

  test("target = URL + machine (default the node): nodes with the same URL and machine are one target", () => {
    assert.deepEqual(webhookRules.target(ok, "node-1"), { device: "https://power.example.com/stockade", outlets: ["node-1"] });
    assert.deepEqual(webhookRules.target({ ...ok, url: "https://POWER.example.com:443/stockade", machine: "m1" }, "node-1"), {
      device: "https://power.example.com/stockade",
      outlets: ["m1"],
    });
    const nodes: V1Node[] = ["node-1", "node-2", "node-3"].map((name) => ({ metadata: { name } }));
    const spec = { type: "webhook", parameters: { url: ok.url } };
    for (const n of nodes) assert.deepEqual(checkUniqueTarget("w", spec, n, nodes, webhookRules), { ok: true });
    const clash = { ...spec, nodes: { "node-3": { parameters: { machine: "node-2" } } } };
    const r = checkUniqueTarget("w", clash, nodes[1]!, nodes, webhookRules);
    assert.equal(r.ok, false);
    assert.deepEqual(!r.ok && r.nodes, ["node-3"]);
    // Another URL is another service: no clash.
    const other = { ...spec, nodes: { "node-3": { parameters: { machine: "node-2", url: "https://other.example.com/stockade" } } } };
    assert.deepEqual(checkUniqueTarget("w", other, nodes[1]!, nodes, webhookRules), { ok: true });
  });
});

/** An in-memory power backend: machines that power off a moment after they are told to. */
function memoryBackend(names: string[]): PowerBackend & { state: Map<string, Power> } {
  const state = new Map<string, Power>(names.map((n) => [n, "on"]));
  return {
    state,
    machines: () => [...state.keys()],
    get: (m) => state.get(m)!,
    set: async (m, a) => {
      await new Promise((r) => setTimeout(r, 50));
      state.set(m, a);
    },
  };
}

describe("webhook driver against the reference receiver (HTTPS, its own CA)", () => {
  let dir: string;
  let tls: ReturnType<typeof serviceTls>;
  let service: WebhookPowerService;
  let backend: ReturnType<typeof memoryBackend>;
  let params: Record<string, string>;
  const opts = { timeoutMs: 5000, retries: 2, backoffMs: 50, pollMs: 50 };
  const ctx = () => ({ node: "node-1", parameters: params, annotations: {} });

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), "stockade-webhook-unit-"));
    tls = serviceTls(dir);
    backend = memoryBackend(["node-1", "node-2", "rack4-slot2"]);
    service = new WebhookPowerService({ keys: [KEY], backend, tls: { cert: tls.cert, key: tls.key } });
    await service.listen();
    params = { url: service.url, hmacKey: KEY, caBundle: tls.caBundle };
  });
  after(async () => {
    await service?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  test("off is confirmed by a status query that says off; on comes back", async () => {
    assert.equal((await runOperation(webhookDriver, ctx(), "status", opts)).power, "on");
    const r = await fenceOff(webhookDriver, ctx(), opts);
    assert.equal(r.outcome, "Succeeded", r.message);
    assert.equal(backend.state.get("node-1"), "off");
    const log = service.requests.slice(-3);
    assert.ok(log.some((q) => q.action === "off" && q.status === 202));
    assert.equal(log.at(-1)?.note, "power off");
    assert.equal((await runOperation(webhookDriver, ctx(), "on", opts)).outcome, "Succeeded");
    await new Promise((r) => setTimeout(r, 100));
    assert.equal(backend.state.get("node-1"), "on");
  });

  test("the machine parameter chooses the machine", async () => {
    const r = await fenceOff(webhookDriver, { ...ctx(), parameters: { ...params, machine: "rack4-slot2" } }, opts);
    assert.equal(r.outcome, "Succeeded", r.message);
    assert.equal(backend.state.get("rack4-slot2"), "off");
    assert.equal(backend.state.get("node-1"), "on");
  });

  test("a certificate from another CA is refused (Config, not retried)", async () => {
    const other = serviceTls(join(dir, "other"));
    const r = await runOperation(webhookDriver, { ...ctx(), parameters: { ...params, caBundle: other.caBundle } }, "status", opts);
    assert.equal(r.outcome, "Failed");
    assert.equal(r.tries, 1);
    assert.match(r.message, /\(Config\).*TLS certificate was refused/);
  });

  test("without caBundle the lab CA is unknown: refused", async () => {
    const rest = Object.fromEntries(Object.entries(params).filter(([k]) => k !== "caBundle"));
    const r = await runOperation(webhookDriver, { ...ctx(), parameters: rest }, "status", opts);
    assert.match(r.message, /\(Config\).*TLS certificate/);
  });

  test("wrong key: 401, AuthFailed at once, the key never in the message", async () => {
    service.keys = ["another-key-that-the-service-has-0000"];
    try {
      const r = await fenceOff(webhookDriver, ctx(), opts);
      assert.equal(r.outcome, "Failed");
      assert.equal(r.tries, 1);
      assert.match(r.message, /\(AuthFailed\).*refused the request \(401\).*bad signature/);
      assert.ok(!r.message.includes(KEY));
      assert.equal(backend.state.get("node-1"), "on");
    } finally {
      service.keys = [KEY];
    }
  });

  test("key rotation: a service that accepts the old and new keys verifies either", async () => {
    const next = "fedcba9876543210fedcba9876543210";
    service.keys = [KEY, next];
    try {
      assert.equal((await runOperation(webhookDriver, { ...ctx(), parameters: { ...params, hmacKey: next } }, "status", opts)).power, "on");
      assert.equal((await runOperation(webhookDriver, ctx(), "status", opts)).power, "on");
    } finally {
      service.keys = [KEY];
    }
  });

  test("garbage: BadOutput, retried, never off", async () => {
    service.fault = "garbage";
    try {
      const r = await runOperation(webhookDriver, ctx(), "status", opts);
      assert.equal(r.outcome, "Failed");
      assert.equal(r.tries, 3);
      assert.match(r.message, /\(BadOutput\).*not JSON.*Power portal/);
    } finally {
      service.fault = "none";
    }
  });

  test("a hanging service: the deadline aborts the request (TimedOut)", async () => {
    service.fault = "hang";
    try {
      const t0 = Date.now();
      const r = await runOperation(webhookDriver, ctx(), "status", { ...opts, timeoutMs: 800 });
      assert.equal(r.outcome, "TimedOut");
      assert.ok(Date.now() - t0 < 2000, "ended at the deadline");
    } finally {
      service.fault = "none";
    }
  });

  test("503 then OK: retried within the deadline", async () => {
    service.fault = "unavailable";
    service.unavailableFor = 2;
    try {
      const r = await runOperation(webhookDriver, ctx(), "status", opts);
      assert.equal(r.outcome, "Succeeded", r.message);
      assert.equal(r.tries, 3);
    } finally {
      service.fault = "none";
    }
  });

  /** Sends raw bytes with given headers to the service; its status and body. */
  function raw(body: string, headers: Record<string, string>): Promise<{ status: number; body: string }> {
    return new Promise((resolve, reject) => {
      const req = request(service.url, { method: "POST", headers, ca: tls.caBundle }, (res) => {
        let b = "";
        res.on("data", (c) => (b += c));
        res.on("end", () => resolve({ status: res.statusCode!, body: b }));
      });
      req.on("error", reject);
      req.end(body);
    });
  }

  test("the receiver refuses a replayed request and a stale timestamp", async () => {
    const ts = String(Math.floor(Date.now() / 1000));
    const body = requestBody("status", "node-2", {}, "0d3c5a8e-5b44-4c39-9a0f-77b7a1f0e001", Number(ts));
    const h = { "content-type": "application/json", "x-stockade-timestamp": ts, "x-stockade-signature": sign(KEY, ts, body) };
    assert.equal((await raw(body, h)).status, 200);
    const again = await raw(body, h);
    assert.equal(again.status, 401);
    assert.match(again.body, /replayed/);
    const old = String(Number(ts) - 301);
    const stale = requestBody("status", "node-2", {}, "0d3c5a8e-5b44-4c39-9a0f-77b7a1f0e002", Number(old));
    const r = await raw(stale, { ...h, "x-stockade-timestamp": old, "x-stockade-signature": sign(KEY, old, stale) });
    assert.equal(r.status, 401);
    assert.match(r.body, /5-minute window/);
    const tampered = await raw(body.replace("node-2", "node-1"), h);
    assert.equal(tampered.status, 401);
  });

  test("an unknown machine: 422, Config", async () => {
    const r = await runOperation(webhookDriver, { ...ctx(), parameters: { ...params, machine: "nope" } }, "status", opts);
    assert.equal(r.outcome, "Failed");
    assert.match(r.message, /\(Config\).*malformed \(422\).*unknown machine/);
  });
});

describe("the Python receiver printed in docs/webhook-agent.md", () => {
  let child: ChildProcess;
  let url: string;
  let dir: string;
  let stderr = "";

  before(async () => {
    const doc = readFileSync(join(import.meta.dirname, "../../docs/webhook-agent.md"), "utf8");
    const m = /<!-- python-receiver:begin -->\s*```python\n([\s\S]*?)```\s*<!-- python-receiver:end -->/.exec(doc);
    assert.ok(m, "the docs carry the example between its markers");
    dir = mkdtempSync(join(tmpdir(), "stockade-webhook-py-"));
    writeFileSync(join(dir, "receiver.py"), m[1]!);
    const probe = createServer();
    await new Promise<void>((r) => probe.listen(0, "127.0.0.1", () => r()));
    const port = (probe.address() as { port: number }).port;
    await new Promise<void>((r) => probe.close(() => r()));
    child = spawn("python3", [join(dir, "receiver.py")], { env: { ...process.env, STOCKADE_HMAC_KEY: KEY, PORT: String(port) } });
    child.stderr!.on("data", (c) => (stderr += c));
    url = `http://127.0.0.1:${port}/stockade`;
    for (let i = 0; ; i++) {
      const up = await new Promise<boolean>((r) => {
        const s = connect(port, "127.0.0.1", () => (s.end(), r(true)));
        s.on("error", () => r(false));
      });
      if (up) break;
      if (i > 100) throw new Error(`the Python receiver did not start: ${stderr}`);
      await new Promise((r) => setTimeout(r, 50));
    }
  });
  after(() => {
    child?.kill();
    rmSync(dir, { recursive: true, force: true });
  });

  const opts = { timeoutMs: 5000, retries: 1, backoffMs: 50, pollMs: 50 };
  const parameters = () => ({ url, hmacKey: KEY, allowInsecureHttp: "true" });

  test("status of a machine it knows nothing of is unknown; off is confirmed; on comes back", async () => {
    const ctx = { node: "node-7", parameters: parameters(), annotations: {} };
    assert.equal((await runOperation(webhookDriver, ctx, "status", opts)).power, "unknown");
    const r = await fenceOff(webhookDriver, ctx, opts);
    assert.equal(r.outcome, "Succeeded", r.message);
    assert.equal((await runOperation(webhookDriver, ctx, "on", opts)).outcome, "Succeeded");
    assert.equal((await runOperation(webhookDriver, ctx, "status", opts)).power, "on");
  });

  test("it refuses a wrong key (AuthFailed) and a replayed request", async () => {
    const r = await runOperation(
      webhookDriver,
      { node: "node-7", parameters: { ...parameters(), hmacKey: "x".repeat(32) }, annotations: {} },
      "status",
      opts,
    );
    assert.match(r.message, /\(AuthFailed\).*401/);
    const ts = String(Math.floor(Date.now() / 1000));
    const body = requestBody("status", "node-7", {}, "7c0a3a7e-0f7b-4d0e-8d8e-2f0c5e4b9a01", Number(ts));
    const send = () =>
      fetch(url, {
        method: "POST",
        body,
        headers: { "content-type": "application/json", "x-stockade-timestamp": ts, "x-stockade-signature": sign(KEY, ts, body) },
      });
    const first = await send();
    assert.equal(first.status, 200);
    // Its answer verifies with our code: the Python side signs the same way.
    assert.ok(
      verify(
        KEY,
        first.headers.get("x-stockade-timestamp")!,
        Buffer.from(await first.arrayBuffer()),
        first.headers.get("x-stockade-signature")!,
      ),
    );
    assert.equal((await send()).status, 401);
  });
});
