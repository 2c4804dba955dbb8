// End-to-end on the real-node lab through the gcp and azure agents, against the loopback test doubles of
// Compute Engine and Azure Resource Manager (lab/test-doubles/: not real peers, no emulator installs here),
// whose instances are the lab machines: a stop powers the node off through its BMC. The operator authenticates
// as on GKE and AKS, through the platform's default chain: a metadata server (GCE_METADATA_HOST, what GKE
// Workload Identity serves) and Azure Workload Identity's federated token file; the CA of the lab signs both
// stubs' certificates (NODE_EXTRA_CA_CERTS).
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { Bed, SECRETS_NS } from "../lab/bed.ts";
import { assertFailover, failoverSteps } from "../lab/failover-timing.ts";
import { createPki } from "../lab/pki.ts";
import { paths } from "../lab/state.ts";
import { GceStub } from "../lab/test-doubles/gce-stub.ts";
import { ArmStub } from "../lab/test-doubles/arm-stub.ts";
import { labPower } from "../lab/test-doubles/power.ts";
import type { NodeFence } from "../src/api/v1alpha1.ts";

const PROJECT = "lab-project";
const ZONE = "europe-west1-b";
const SUB = "0b1f6471-1bf0-4dda-aec3-111122223333";
const released = (f: NodeFence) => f.status?.phase === "Released";

describe("e2e: fencing through the gcp and azure agents (against test doubles)", () => {
  let bed: Bed;
  let gce: GceStub;
  let arm: ArmStub;
  const azureIds = new Map<string, string>();
  before(async () => {
    bed = await Bed.up({ nodes: 3, name: "cloud", providerID: (n) => `gce://${PROJECT}/${ZONE}/${n.name}` });
    const pki = createPki(paths(bed.lab.dir).pki, []);
    const power = labPower(bed.lab);
    gce = await new GceStub({ cert: pki.serverCert, key: pki.serverKey, power }).start();
    arm = await new ArmStub({ cert: pki.serverCert, key: pki.serverKey, power }).start();
    for (const n of bed.lab.nodes()) {
      gce.addInstance(PROJECT, ZONE, n, n);
      azureIds.set(n, arm.addVm(SUB, "rg-lab", `vm-${n}`, n));
    }
    const wi = arm.workloadIdentity();
    const tokenFile = join(bed.lab.dir, "azure-identity-token");
    writeFileSync(tokenFile, wi.token);
    // A key the API does not know, in the Secret of the first escalation level: wrong credentials.
    await bed.lab.core.createNamespacedSecret({
      namespace: SECRETS_NS,
      body: { metadata: { name: "gcp-stale-key" }, stringData: { serviceAccountKey: GceStub.unknownServiceAccountKey() } },
    });
    await bed.create("fenceagents", {
      metadata: { name: "gcp-stale" },
      spec: { type: "gcp", parameters: { endpoint: gce.endpoint }, credentialsSecretRef: { namespace: SECRETS_NS, name: "gcp-stale-key" } },
    });
    await bed.create("fenceagents", {
      metadata: { name: "gcp" },
      spec: { type: "gcp", parameters: { endpoint: gce.endpoint, discardLocalSsd: "false" }, timeoutSeconds: 30, retries: 1 },
    });
    await bed.create("fenceagents", {
      metadata: { name: "azure" },
      spec: {
        type: "azure",
        parameters: { endpoint: arm.endpoint, authorityHost: arm.endpoint },
        // These nodes registered with GCE providerIDs: the Azure VMs are named per node instead.
        nodes: Object.fromEntries([...azureIds].map(([n, id]) => [n, { parameters: { providerID: id } }])),
        timeoutSeconds: 10,
        retries: 1,
      },
    });
    await bed.policy("default", {
      escalation: [{ agents: [{ name: "gcp-stale" }] }, { agents: [{ name: "gcp" }] }],
      guards: { maxUnhealthyNodes: 2, maxConcurrentFences: 1 },
    });
    await bed.startOperator({
      env: {
        NODE_EXTRA_CA_CERTS: pki.caCert,
        GCE_METADATA_HOST: gce.metadataHost,
        AZURE_TENANT_ID: wi.tenantId,
        AZURE_CLIENT_ID: wi.clientId,
        AZURE_FEDERATED_TOKEN_FILE: tokenFile,
      },
    });
  });
  after(async () => {
    const r = await bed?.invariant().catch(() => undefined);
    if (r) console.log(`invariant: ${r.identities} identities, ${r.replacements} replacements, ${r.violations.length} violations`);
    await gce?.stop();
    await arm?.stop();
    await bed?.down();
  });

  async function current(name: string) {
    const p = (await bed.lab.core.listNamespacedPod({ namespace: "default", fieldSelector: `metadata.name=${name}` })).items[0];
    assert.ok(p?.spec?.nodeName && p.metadata?.uid, `${name} is scheduled`);
    return { uid: p.metadata.uid, node: p.spec.nodeName };
  }

  /** Asserts the failover's order; its steps, in seconds from `since`. */
  const steps = (node: string, oldUid: string, newUid: string, since: number) =>
    failoverSteps(assertFailover(bed.rec, { node, oldUid, newUid, since }), since);

  test("gcp: crash → a stale key fails (AuthFailed) → next level stops the instance through ADC despite 429/503 → confirmed → released", async () => {
    const pods = await bed.statefulSet("db", 2);
    const victim = pods.find((p) => p.metadata?.name === "db-0")!;
    const node = victim.spec!.nodeName!;
    gce.faults.throttle = 4;
    const t0 = Date.now();
    await bed.lab.crash(node);
    const replacement = await bed.waitForReplacement("db-0", victim.metadata!.uid!);
    const f = await bed.waitForFence(node, released, "Released");
    assert.equal(f.status?.evidence?.method, "PowerOffConfirmed");
    assert.equal(bed.lab.machine(node).power, "off");
    assert.equal(gce.status(PROJECT, ZONE, node), "TERMINATED");
    const offs = (f.status?.attempts ?? []).filter((a) => a.operation === "off");
    assert.equal(offs[0]?.agent, "gcp-stale");
    assert.equal(offs[0]?.outcome, "Failed");
    assert.match(offs[0]?.message ?? "", /AuthFailed.*refused the credentials/);
    assert.equal(offs.at(-1)?.agent, "gcp");
    assert.equal(offs.at(-1)?.outcome, "Succeeded");
    const statuses = gce.log.map((l) => l.status);
    assert.ok(statuses.includes(429) && statuses.includes(503), "throttled answers were retried");
    const stop = gce.log.find((l) => l.path.endsWith(`/instances/${node}/stop`) && l.status === 200);
    assert.equal(stop?.query.discardLocalSsd, "false");
    console.log(
      `gcp (stale key first, throttled, cold SDK): ${((Date.now() - t0) / 1000).toFixed(1)} s (${steps(node, victim.metadata!.uid!, replacement.metadata!.uid!, t0)})`,
    );
    assert.deepEqual((await bed.invariant()).violations, []);
    await bed.unfence(node);
  });

  test("azure: a hanging API times out and releases nothing; once it answers, powerOff is confirmed and the pod released", async () => {
    await bed.kubectl(
      "patch",
      "fencingpolicy",
      "default",
      "--type=merge",
      "-p",
      JSON.stringify({ spec: { escalation: [{ agents: [{ name: "azure" }] }] } }),
    );
    const { uid, node } = await current("db-1");
    arm.faults.hang = true;
    const t0 = Date.now();
    await bed.lab.crash(node);
    const timedOut = await bed.waitForFence(
      node,
      (f) => (f.status?.attempts ?? []).some((a) => a.agent === "azure" && a.outcome === "TimedOut"),
      "an azure attempt timed out",
    );
    assert.notEqual(timedOut.status?.phase, "Released");
    assert.equal((await current("db-1")).uid, uid, "nothing released while the API hangs");
    assert.equal(bed.lab.machine(node).power, "on", "a crashed machine stays powered until the API acts");
    arm.faults.hang = false;
    const replacement = await bed.waitForReplacement("db-1", uid);
    const f = await bed.waitForFence(node, released, "Released");
    assert.equal(f.status?.evidence?.method, "PowerOffConfirmed");
    assert.equal(bed.lab.machine(node).power, "off");
    assert.equal(arm.powerState(azureIds.get(node)!.replace("azure://", "").toLowerCase()), "stopped");
    const off = arm.log.find((l) => /\/powerOff$/.test(l.path) && l.status === 202);
    assert.equal(off?.query.skipShutdown, "true");
    console.log(`azure (after a hang): ${((Date.now() - t0) / 1000).toFixed(1)} s (${steps(node, uid, replacement.metadata!.uid!, t0)})`);
    assert.deepEqual((await bed.invariant()).violations, []);
    await bed.unfence(node);
  });

  test("azure: a crash fenced without faults (the failover figure)", async () => {
    const { uid, node } = await current("db-0");
    const t0 = Date.now();
    await bed.lab.crash(node);
    const replacement = await bed.waitForReplacement("db-0", uid);
    await bed.waitForFence(node, released, "Released");
    console.log(`azure failover: ${((Date.now() - t0) / 1000).toFixed(1)} s (${steps(node, uid, replacement.metadata!.uid!, t0)})`);
    assert.deepEqual((await bed.invariant()).violations, []);
    await bed.unfence(node);
  });

  test("gcp: a crash fenced without faults (the failover figure)", async () => {
    await bed.kubectl(
      "patch",
      "fencingpolicy",
      "default",
      "--type=merge",
      "-p",
      JSON.stringify({ spec: { escalation: [{ agents: [{ name: "gcp" }] }] } }),
    );
    const { uid, node } = await current("db-1");
    const t0 = Date.now();
    await bed.lab.crash(node);
    const replacement = await bed.waitForReplacement("db-1", uid);
    const f = await bed.waitForFence(node, released, "Released");
    assert.deepEqual(
      (f.status?.attempts ?? []).filter((a) => a.operation === "off").map((a) => [a.agent, a.outcome]),
      [["gcp", "Succeeded"]],
    );
    console.log(`gcp failover: ${((Date.now() - t0) / 1000).toFixed(1)} s (${steps(node, uid, replacement.metadata!.uid!, t0)})`);
    assert.deepEqual((await bed.invariant()).violations, []);
    await bed.unfence(node);
  });

  test("a providerID of the wrong form, and a missing instance: clear Config errors, nothing released", async () => {
    const { uid, node } = await current("db-1");
    const bad = {
      "gcp-bad-form": {
        type: "gcp",
        parameters: { endpoint: gce.endpoint },
        nodes: { [node]: { parameters: { providerID: `aws:///eu-west-1a/i-0${node}` } } },
      },
      "azure-missing": {
        type: "azure",
        parameters: { endpoint: arm.endpoint, authorityHost: arm.endpoint },
        nodes: { [node]: { parameters: { providerID: azureIds.get(node)!.replace(/vm-[^/]+$/, "vm-gone") } } },
      },
    };
    for (const [name, spec] of Object.entries(bad))
      await bed.create("fenceagents", { metadata: { name }, spec: { ...spec, timeoutSeconds: 10, retries: 2 } });
    await bed.kubectl(
      "patch",
      "fencingpolicy",
      "default",
      "--type=merge",
      "-p",
      JSON.stringify({ spec: { escalation: [{ agents: [{ name: "gcp-bad-form" }] }, { agents: [{ name: "azure-missing" }] }] } }),
    );
    await bed.kubectl("delete", "nodefence", node, "--ignore-not-found");
    await bed.create("nodefences", { metadata: { name: node }, spec: { nodeName: node, reason: "bad input test" } });
    const f = await bed.waitForFence(
      node,
      (x) =>
        ["gcp-bad-form", "azure-missing"].every((a) => (x.status?.attempts ?? []).some((t) => t.agent === a && t.outcome === "Failed")),
      "both agents failed",
    );
    const msg = (a: string) => (f.status?.attempts ?? []).find((t) => t.agent === a)?.message ?? "";
    assert.match(msg("gcp-bad-form"), /not a GCE providerID of the form gce:\/\/<project>\/<zone>\/<instance-name>/);
    assert.match(msg("azure-missing"), /instance not found.*a missing instance is not proof it is off/);
    assert.notEqual(f.status?.phase, "Released");
    assert.deepEqual(f.status?.releases ?? [], []);
    assert.equal((await current("db-1")).uid, uid, "nothing released");
    assert.equal(bed.lab.machine(node).power, "on");
    await bed.kubectl("delete", "nodefence", node);
  });
});
