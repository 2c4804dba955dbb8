// The gcp and azure drivers through the official SDKs, run by the real runner (fenceOff/runOperation), against
// the loopback test doubles (lab/test-doubles/gce-stub.ts, arm-stub.ts: not real peers) over HTTPS with a
// throwaway CA. Credentials both ways: the platform's default chain (a metadata server for GCP as GKE Workload
// Identity serves it; Azure Workload Identity's federated token) and the Secret's (a service-account key; a
// service principal). No lab machine: the instances' power is in memory.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { rootCertificates, setDefaultCACertificates } from "node:tls";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createPki } from "../../lab/pki.ts";
import { GceStub } from "../../lab/test-doubles/gce-stub.ts";
import { ArmStub } from "../../lab/test-doubles/arm-stub.ts";
import { memoryPower } from "../../lab/test-doubles/power.ts";
import { fenceOff, runOperation, type RunOptions } from "../../src/agents/run.ts";
import { gcpDriver } from "../../src/agents/gcp.ts";
import { azureDriver } from "../../src/agents/azure.ts";

const dir = mkdtempSync(join(tmpdir(), "stockade-cloud-sdk-"));
const pki = createPki(join(dir, "pki"), []);
// What NODE_EXTRA_CA_CERTS does for the operator's process, for this one.
setDefaultCACertificates([...rootCertificates, readFileSync(pki.caCert, "utf8")]);
const power = memoryPower(["m1", "m2", "m3"]);
const opts = (o: Partial<RunOptions> = {}): RunOptions => ({ timeoutMs: 15_000, retries: 1, backoffMs: 200, pollMs: 100, ...o });

after(() => rmSync(dir, { recursive: true, force: true }));

describe("gcp driver against the GCE test double", () => {
  let gce: GceStub;
  let key: string;
  let p: Record<string, string>;
  before(async () => {
    gce = await new GceStub({ cert: pki.serverCert, key: pki.serverKey, power }).start();
    process.env.GCE_METADATA_HOST = gce.metadataHost; // ADC: the metadata server, as on GKE with Workload Identity
    key = gce.serviceAccountKey();
    p = { providerID: gce.addInstance("lab-project", "europe-west1-b", "vm-1", "m1"), endpoint: gce.endpoint };
  });
  after(async () => {
    delete process.env.GCE_METADATA_HOST;
    await gce?.stop();
  });
  const ctx = (parameters: Record<string, string>) => ({ node: "n1", parameters, annotations: {} });

  test("off through ADC (metadata server): stop with discardLocalSsd explicit, confirmed by status TERMINATED; then on", async () => {
    const r = await fenceOff(gcpDriver, ctx(p), opts());
    assert.equal(r.outcome, "Succeeded", r.message);
    assert.equal(power.state.get("m1"), "off");
    const stop = gce.log.find((l) => l.method === "POST" && l.path.endsWith("/stop"));
    assert.equal(stop?.query.discardLocalSsd, "false", JSON.stringify(stop));
    assert.ok(gce.log.some((l) => l.method === "GET" && l.path.endsWith("/instances/vm-1") && l.status === 200));
    const on = await runOperation(gcpDriver, ctx({ ...p, discardLocalSsd: "true" }), "on", opts());
    assert.equal(on.outcome, "Succeeded", on.message);
    await new Promise((r) => setTimeout(r, 400));
    assert.equal(power.state.get("m1"), "on");
    assert.equal((await runOperation(gcpDriver, ctx(p), "status", opts())).power, "on");
  });

  test("with a service-account key from the Secret (self-signed JWT)", async () => {
    const r = await runOperation(gcpDriver, ctx({ ...p, serviceAccountKey: key }), "status", opts());
    assert.equal(r.outcome, "Succeeded", r.message);
    assert.equal(r.power, "on");
  });

  test("a key the API does not know: AuthFailed at once, not retried, no secret in the message", async () => {
    const bad = GceStub.unknownServiceAccountKey();
    const before = power.state.get("m1");
    const r = await fenceOff(gcpDriver, ctx({ ...p, serviceAccountKey: bad }), opts({ retries: 3 }));
    assert.equal(r.outcome, "Failed");
    assert.match(r.message, /1 try \(AuthFailed\)/);
    assert.ok(!r.message.includes("PRIVATE KEY"));
    assert.equal(power.state.get("m1"), before);
  });

  test("429 and 503 are retried by the SDK within the deadline", async () => {
    gce.faults.throttle = 4;
    const n = gce.log.length;
    const r = await runOperation(gcpDriver, ctx(p), "status", opts({ retries: 0 }));
    assert.equal(r.outcome, "Succeeded", r.message);
    assert.deepEqual(
      gce.log.slice(n).map((l) => l.status),
      [429, 503, 429, 503, 200],
    );
  });

  test("a hanging API: the deadline aborts it, TimedOut, power untouched", async () => {
    gce.faults.hang = true;
    try {
      const t0 = Date.now();
      const r = await fenceOff(gcpDriver, ctx(p), opts({ timeoutMs: 2500 }));
      assert.equal(r.outcome, "TimedOut", r.message);
      assert.ok(Date.now() - t0 < 4000, `returned ${Date.now() - t0} ms after the start`);
      assert.equal(power.state.get("m1"), "on");
    } finally {
      gce.faults.hang = false;
    }
  });

  test("a missing instance: Config, 'not proof it is off'", async () => {
    const r = await fenceOff(gcpDriver, ctx({ ...p, providerID: "gce://lab-project/europe-west1-b/vm-gone" }), opts({ retries: 3 }));
    assert.equal(r.outcome, "Failed");
    // The power-off of an instance that does not exist falls to the status query, which says so (no witness: no proof).
    assert.match(r.message, /2 tries \(Config\): instance not found.*not proof it is off/);
  });

  test("issue 41 item 6: a missing instance is off only when a witness instance answers to the same parameters", async () => {
    const gone = "gce://lab-project/europe-west1-b/vm-gone";
    const c = (missingInstance: unknown) => ({ ...ctx({ ...p, providerID: gone }), notes: [] as string[], missingInstance }) as never;
    const ok = await fenceOff(gcpDriver, c({ node: "n-witness", parameters: p }), opts({ retries: 3 }));
    assert.equal(ok.outcome, "Succeeded", ok.message);
    assert.match(ok.message, /does not exist.*node n-witness's instance/);
    const blind = await fenceOff(
      gcpDriver,
      c({ node: "n-witness", parameters: { ...p, providerID: "gce://lab-project/europe-west1-b/vm-gone-too" } }),
      opts(),
    );
    assert.equal(blind.outcome, "Failed");
    assert.match(blind.message, /\(Config\): instance not found.*not taken as off.*could not be seen either/);
    const refused = await fenceOff(gcpDriver, c({ refused: "its providerID is not the Node's own" }), opts());
    assert.equal(refused.outcome, "Failed");
    assert.match(refused.message, /not taken as off: its providerID is not the Node's own/);
  });

  test("a providerID of the wrong form is refused before any request", async () => {
    const n = gce.log.length;
    const r = await fenceOff(gcpDriver, ctx({ ...p, providerID: "aws:///eu-west-1a/i-0abc" }), opts());
    assert.equal(r.outcome, "Failed");
    assert.equal(r.tries, 0);
    assert.match(r.message, /not a GCE providerID of the form gce:\/\/<project>\/<zone>\/<instance-name>/);
    assert.equal(gce.log.length, n);
  });
});

describe("azure driver against the ARM test double", () => {
  let arm: ArmStub;
  let p: Record<string, string>;
  let vmss: string;
  const SUB = "0b1f6471-1bf0-4dda-aec3-111122223333";
  before(async () => {
    arm = await new ArmStub({ cert: pki.serverCert, key: pki.serverKey, power }).start();
    const wi = arm.workloadIdentity();
    const tokenFile = join(dir, "azure-identity-token");
    writeFileSync(tokenFile, wi.token);
    // What the Azure Workload Identity webhook injects into the operator's pod.
    Object.assign(process.env, { AZURE_TENANT_ID: wi.tenantId, AZURE_CLIENT_ID: wi.clientId, AZURE_FEDERATED_TOKEN_FILE: tokenFile });
    p = { providerID: arm.addVm(SUB, "rg-lab", "vm-2", "m2"), endpoint: arm.endpoint, authorityHost: arm.endpoint };
    vmss = arm.addVm(SUB, "MC_rg_lab", "3", "m3", "aks-pool-vmss");
  });
  after(async () => {
    for (const k of ["AZURE_TENANT_ID", "AZURE_CLIENT_ID", "AZURE_FEDERATED_TOKEN_FILE"]) delete process.env[k];
    await arm?.stop();
  });
  const ctx = (parameters: Record<string, string>) => ({ node: "n2", parameters, annotations: {} });

  test("off through Workload Identity: powerOff with skipShutdown, 202 + Azure-AsyncOperation, confirmed by PowerState/stopped; then on", async () => {
    const r = await fenceOff(azureDriver, ctx(p), opts());
    assert.equal(r.outcome, "Succeeded", r.message);
    assert.equal(power.state.get("m2"), "off");
    const off = arm.log.find((l) => l.method === "POST" && /\/powerOff$/i.test(l.path));
    assert.equal(off?.query.skipShutdown, "true");
    assert.equal(off?.status, 202);
    assert.ok(
      arm.log.some((l) => l.path.endsWith("/oauth2/v2.0/token") && l.status === 200),
      "a token from the federated credential",
    );
    const on = await runOperation(azureDriver, ctx(p), "on", opts());
    assert.equal(on.outcome, "Succeeded", on.message);
  });

  test("deallocate when asked, on a scale-set instance, with a service principal from the Secret", async () => {
    const sp = arm.servicePrincipal();
    const r = await fenceOff(azureDriver, ctx({ ...p, providerID: vmss, offAction: "deallocate", ...sp }), opts());
    assert.equal(r.outcome, "Succeeded", r.message);
    assert.equal(arm.powerState(vmss.replace("azure://", "").toLowerCase()), "deallocated");
    assert.ok(
      arm.log.some((l) => l.method === "POST" && /virtualMachineScaleSets\/aks-pool-vmss\/virtualMachines\/3\/deallocate$/i.test(l.path)),
    );
  });

  test("a wrong client secret: AuthFailed at once, the secret redacted", async () => {
    const sp = { ...arm.servicePrincipal(), clientSecret: "wrong-secret-value" };
    const r = await fenceOff(azureDriver, ctx({ ...p, ...sp }), opts({ retries: 3 }));
    assert.equal(r.outcome, "Failed");
    assert.match(r.message, /1 try \(AuthFailed\)/);
    assert.ok(!r.message.includes("wrong-secret-value"));
  });

  test("429 and 503 are retried by the SDK within the deadline", async () => {
    arm.faults.throttle = 4;
    const n = arm.log.length;
    const r = await runOperation(azureDriver, ctx(p), "status", opts({ retries: 0 }));
    assert.equal(r.outcome, "Succeeded", r.message);
    assert.deepEqual(
      arm.log.slice(n).map((l) => l.status),
      [429, 503, 429, 503, 200],
    );
  });

  test("a hanging API: TimedOut at the deadline, power untouched", async () => {
    arm.faults.hang = true;
    try {
      const t0 = Date.now();
      const r = await fenceOff(azureDriver, ctx(p), opts({ timeoutMs: 2500 }));
      assert.equal(r.outcome, "TimedOut", r.message);
      assert.ok(Date.now() - t0 < 4000);
      assert.equal(power.state.get("m2"), "on");
    } finally {
      arm.faults.hang = false;
    }
  });

  test("issue 41 item 6: a missing VM is off only when a witness VM answers to the same parameters", async () => {
    const gone = `azure:///subscriptions/${SUB}/resourceGroups/rg-lab/providers/Microsoft.Compute/virtualMachines/vm-gone`;
    const c = (missingInstance: unknown) => ({ ...ctx({ ...p, providerID: gone }), notes: [] as string[], missingInstance }) as never;
    const ok = await fenceOff(azureDriver, c({ node: "n-witness", parameters: p }), opts({ retries: 3 }));
    assert.equal(ok.outcome, "Succeeded", ok.message);
    assert.match(ok.message, /does not exist.*node n-witness's instance/);
    const blind = await fenceOff(
      azureDriver,
      c({ node: "n-witness", parameters: { ...p, providerID: gone.replace("vm-gone", "vm-gone-too") } }),
      opts(),
    );
    assert.equal(blind.outcome, "Failed");
    assert.match(blind.message, /\(Config\): instance not found.*could not be seen either/);
    // A missing resource group is no claim about the VM at all, whatever the witness.
    const noGroup = gone.replace("rg-lab", "rg-nope");
    const r = await fenceOff(
      azureDriver,
      { ...ctx({ ...p, providerID: noGroup }), notes: [], missingInstance: { node: "n-witness", parameters: p } } as never,
      opts(),
    );
    assert.equal(r.outcome, "Failed", r.message);
  });

  test("a missing VM: Config, 'not proof it is off'", async () => {
    const gone = `azure:///subscriptions/${SUB}/resourceGroups/rg-lab/providers/Microsoft.Compute/virtualMachines/vm-gone`;
    const r = await fenceOff(azureDriver, ctx({ ...p, providerID: gone }), opts({ retries: 3 }));
    assert.equal(r.outcome, "Failed");
    // The power-off of an instance that does not exist falls to the status query, which says so (no witness: no proof).
    assert.match(r.message, /2 tries \(Config\): instance not found.*not proof it is off/);
  });
});
