// Stockade's redfish driver against an emulator nobody here wrote: the `bmc/mock` of ironcore-dev's
// metal-operator v0.7.0 (DMTF's public mockup, one ComputerSystem 437XR1138R2), built from the Go module proxy by
// tools/redfish-mock/build.sh. Its Reset answers 202 (no task monitor) and PowerState flips ~150 ms later.
// It speaks plain HTTP only, so a TLS terminator (node:tls, a certificate from a CA made here) stands in front:
// the driver has no plain-HTTP mode, and its certificate verification is exercised on this path too.
// The emulator checks no credentials and its sessions carry no X-Auth-Token, so it uses authMethod: basic.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { connect, createServer as createTcpServer } from "node:net";
import { createServer as createTlsServer, type Server } from "node:tls";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { createPki, signServerCert } from "../../lab/pki.ts";
import { redfishDriver } from "../../src/agents/redfish.ts";
import { fenceOff, runOperation } from "../../src/agents/run.ts";
import type { AgentError } from "../../src/agents/types.ts";

const repoRoot = join(import.meta.dirname, "../..");
const MOCK = execFileSync("bash", [join(repoRoot, "tools/redfish-mock/build.sh"), "--print"], { encoding: "utf8" }).trim();

async function freePort(): Promise<number> {
  const s = createTcpServer();
  await new Promise<void>((r) => s.listen(0, "127.0.0.1", () => r()));
  const port = (s.address() as { port: number }).port;
  await new Promise<void>((r) => s.close(() => r()));
  return port;
}

describe("redfish driver against metal-operator's Go Redfish emulator (behind TLS)", () => {
  let dir: string;
  let mock: ChildProcess;
  let tls: Server;
  let port: number;
  let caBundle: string;
  const forwarded: string[] = [];

  before(async () => {
    assert.ok(existsSync(MOCK), `${MOCK} is missing: run tools/setup.sh (tools/redfish-mock/build.sh)`);
    dir = mkdtempSync(join(tmpdir(), "stockade-redfish-mock-"));
    const mockPort = await freePort();
    mock = spawn(MOCK, ["-addr", `127.0.0.1:${mockPort}`], { stdio: "ignore" });
    for (let i = 0; ; i++) {
      const up = await new Promise<boolean>((r) => {
        const c = connect(mockPort, "127.0.0.1", () => (c.destroy(), r(true))).on("error", () => r(false));
      });
      if (up) break;
      assert.ok(i < 100, "the emulator did not start listening");
      await sleep(100);
    }
    const pki = createPki(join(dir, "pki"), []);
    caBundle = readFileSync(pki.caCert, "utf8");
    const cert = signServerCert(pki.dir, "redfish-mock", "IP:127.0.0.1");
    tls = createTlsServer({ cert: readFileSync(cert.cert), key: readFileSync(cert.key) }, (client) => {
      const upstream = connect(mockPort, "127.0.0.1");
      // Every request line that crosses (one kept-alive connection carries several).
      client.on("data", (d: Buffer) =>
        forwarded.push(...(d.toString("latin1").match(/^(?:GET|POST|PATCH|DELETE) \S+ HTTP\/1\.1/gm) ?? [])),
      );
      client.pipe(upstream).pipe(client);
      const end = () => (client.destroy(), upstream.destroy());
      client.on("error", end).on("close", end);
      upstream.on("error", end).on("close", end);
    });
    await new Promise<void>((r) => tls.listen(0, "127.0.0.1", () => r()));
    port = (tls.address() as { port: number }).port;
  });
  after(async () => {
    tls?.close();
    mock?.kill("SIGTERM");
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  const params = (extra: Record<string, string> = {}) => ({
    address: "127.0.0.1",
    port: String(port),
    username: "admin",
    password: "emulator-does-not-check",
    authMethod: "basic",
    caBundle,
    ...extra,
  });
  const ctx = (p = params()) => ({ node: "node-1", parameters: p, annotations: {}, signal: AbortSignal.timeout(20_000) });
  const opts = { timeoutMs: 20_000, retries: 2, backoffMs: 200, pollMs: 100 };

  test("status finds the one ComputerSystem and reads PowerState On", async () => {
    assert.equal(await redfishDriver.status(ctx()), "on");
    assert.ok(forwarded.includes("GET /redfish/v1/Systems/437XR1138R2 HTTP/1.1"), forwarded.join("\n"));
  });

  test("off: ForceOff answered 202, then PowerState polled until Off; on: On, then On again", async () => {
    const t0 = Date.now();
    const off = await fenceOff(redfishDriver, { node: "node-1", parameters: params(), annotations: {} }, opts);
    assert.equal(off.outcome, "Succeeded", off.message);
    assert.equal(off.power, "off");
    console.log(`emulator: power off confirmed in ${Date.now() - t0} ms (${off.tries} driver calls)`);
    assert.ok(forwarded.includes("POST /redfish/v1/Systems/437XR1138R2/Actions/ComputerSystem.Reset HTTP/1.1"));
    assert.equal(await redfishDriver.status(ctx()), "off");
    const on = await runOperation(redfishDriver, { node: "node-1", parameters: params(), annotations: {} }, "on", opts);
    assert.equal(on.outcome, "Succeeded", on.message);
    let power = await redfishDriver.status(ctx());
    for (let i = 0; power !== "on" && i < 20; i++, await sleep(100)) power = await redfishDriver.status(ctx());
    assert.equal(power, "on");
  });

  test("its session login returns no X-Auth-Token: session auth is refused with the fix named", async () => {
    await assert.rejects(
      redfishDriver.status(ctx(params({ authMethod: "session" }))),
      (e: AgentError) => e.kind === "Config" && /sent no X-Auth-Token: set parameter authMethod to basic/.test(e.message),
    );
  });

  test("a CA that did not sign the terminator's certificate is refused before any request", async () => {
    const other = createPki(join(dir, "other-pki"), []);
    const before = forwarded.length;
    await assert.rejects(
      redfishDriver.status(ctx(params({ caBundle: readFileSync(other.caCert, "utf8") }))),
      (e: AgentError) => e.kind === "Config" && /does not verify against the caBundle/.test(e.message),
    );
    assert.equal(forwarded.length, before, "nothing reached the emulator");
  });
});
