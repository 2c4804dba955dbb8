// The pure parts of the gcp and azure agents: providerID parsing, what counts as off, error classification,
// parameter rules, the providerID default and duplicate detection. The SDK paths run against the test doubles
// in test/unit/agent-cloud-sdk.test.ts and e2e/fence-cloud.test.ts.
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { loadAllYaml, type V1Node } from "@kubernetes/client-node";
import type { AgentError } from "../../src/agents/types.ts";
import {
  checkOperation,
  classifyGceError,
  gcePower,
  gcpRules,
  parseGceProviderID,
  parseServiceAccountKey,
  powerOfInstance,
} from "../../src/agents/gcp.ts";
import { azurePower, azureRules, classifyAzureError, parseAzureProviderID } from "../../src/agents/azure.ts";
import { endpointProblem, isMissingInstance, missingInstanceWitness } from "../../src/agents/cloud.ts";
import { awsRules, classifyAwsError } from "../../src/agents/aws.ts";
import { resolveParameters, type FenceAgentSpec } from "../../src/agents/parameters.ts";
import { checkUniqueTarget } from "../../src/agents/targets.ts";

const SUB = "0b1f6471-1bf0-4dda-aec3-111122223333";
const vmId = (name: string, rg = "rg-aks") =>
  `azure:///subscriptions/${SUB}/resourceGroups/${rg}/providers/Microsoft.Compute/virtualMachines/${name}`;
const kind = (f: () => unknown): string => {
  try {
    f();
  } catch (e) {
    return (e as AgentError).kind;
  }
  return "none";
};

describe("gcp: providerID", () => {
  test("gce://project/zone/instance parses", () => {
    assert.deepEqual(parseGceProviderID("gce://my-project-1/europe-west1-b/gke-pool-1-abcd"), {
      project: "my-project-1",
      zone: "europe-west1-b",
      instance: "gke-pool-1-abcd",
    });
    assert.equal(
      (parseGceProviderID("gce://example.com:my-proj/us-central1-a/vm-1") as { project: string }).project,
      "example.com:my-proj",
    );
  });
  for (const [id, why] of [
    ["aws:///eu-west-1a/i-0123", /not a GCE providerID/],
    ["gce://p/z", /not a GCE providerID/],
    ["gce://my-project/us-central1-a/vm/extra", /not a GCE providerID/],
    ["gce:///us-central1-a/vm", /project ""/],
    ["gce://My_Project/us-central1-a/vm", /project/],
    ["gce://my-project/uscentral/vm", /zone/],
    ["gce://my-project/us-central1-a/VM_1", /instance/],
    ["gce://my-project/us-central1-a/-vm", /instance/],
  ] as const)
    test(`refuses ${id}`, () => {
      const r = parseGceProviderID(id);
      assert.ok("error" in r && why.test(r.error), JSON.stringify(r));
    });
});

describe("gcp: what proves off", () => {
  test("TERMINATED and STOPPED are off, RUNNING on, transitions and SUSPENDED unknown, anything else an error", () => {
    assert.equal(gcePower("TERMINATED"), "off");
    assert.equal(gcePower("STOPPED"), "off");
    assert.equal(gcePower("RUNNING"), "on");
    for (const s of ["STOPPING", "SUSPENDING", "SUSPENDED", "PROVISIONING", "STAGING", "REPAIRING"])
      assert.equal(gcePower(s), "unknown", s);
    for (const s of [undefined, "", "terminated", "OFF", 3]) assert.ok(typeof gcePower(s) === "object", String(s));
  });
  const ref = { project: "my-project", zone: "us-central1-a", instance: "vm-1" };
  test("an answer about another instance, or with no status, is BadOutput, never off", () => {
    assert.equal(powerOfInstance({ name: "vm-1", status: "TERMINATED" }, ref), "off");
    assert.equal(
      kind(() => powerOfInstance({ name: "vm-2", status: "TERMINATED" }, ref)),
      "BadOutput",
    );
    assert.equal(
      kind(() => powerOfInstance({ name: "vm-1" }, ref)),
      "BadOutput",
    );
    assert.equal(
      kind(() => powerOfInstance("<html>", ref)),
      "BadOutput",
    );
  });
  test("an operation carrying errors is a failure", () => {
    checkOperation({ name: "operation-1", status: "RUNNING" }, "x");
    assert.equal(
      kind(() => checkOperation({ error: { errors: [{ code: "QUOTA", message: "no" }] } }, "x")),
      "Failed",
    );
    assert.equal(
      kind(() => checkOperation({ error: { errors: [{ code: "FORBIDDEN" }] }, httpErrorStatusCode: 403 }, "x")),
      "AuthFailed",
    );
    assert.equal(
      kind(() => checkOperation(undefined, "x")),
      "BadOutput",
    );
  });
});

describe("gcp: errors", () => {
  const k = (e: unknown) => classifyGceError(e, "instance gcp:p/z/i").kind;
  test("by gRPC code as google-gax maps HTTP statuses", () => {
    assert.equal(k(Object.assign(new Error("401"), { code: 16 })), "AuthFailed");
    assert.equal(k(Object.assign(new Error("403"), { code: 7 })), "AuthFailed");
    const nf = classifyGceError(Object.assign(new Error("The resource was not found"), { code: 5 }), "instance gcp:p/z/i");
    assert.equal(nf.kind, "Config");
    // A 404 that does not name the instance's own resource says nothing about the instance (issue 41 item 6).
    assert.match(nf.message, /found no such resource.*not proof it is off/);
    assert.equal(k(Object.assign(new Error("429"), { code: 8 })), "Failed");
    assert.equal(k(Object.assign(new Error("503"), { code: 14 })), "Unreachable");
    assert.equal(k(Object.assign(new Error("400"), { code: 3 })), "Config");
    assert.equal(k(Object.assign(new Error("connect ECONNREFUSED 127.0.0.1:1"), { code: "ECONNREFUSED" })), "Unreachable");
    assert.equal(k(new Error("Unexpected token < in JSON at position 0")), "BadOutput");
    assert.equal(k(new Error("something else")), "Failed");
    assert.match(
      classifyGceError(new Error("Could not load the default credentials. Browse to ..."), "x").message,
      /Workload Identity.*serviceAccountKey/,
    );
  });
});

describe("gcp: parameters", () => {
  const key = JSON.stringify({
    type: "service_account",
    client_email: "a@b.iam.gserviceaccount.com",
    private_key: "-----BEGIN PRIVATE KEY-----\nx\n-----END PRIVATE KEY-----\n",
  });
  test("a valid set has no problems", () => {
    assert.deepEqual(
      gcpRules.check({
        providerID: "gce://my-project/us-central1-a/vm-1",
        discardLocalSsd: "true",
        endpoint: "https://127.0.0.1:8443",
        serviceAccountKey: key,
      }),
      [],
    );
  });
  test("each bad value is named", () => {
    const p = gcpRules.check({
      providerID: "gce://x",
      discardLocalSsd: "yes",
      endpoint: "http://compute.example",
      serviceAccountKey: "{}",
      zone: "a",
    });
    assert.equal(p.length, 5, p.join("\n"));
    assert.match(p.join("\n"), /zone is not a gcp parameter/);
    assert.match(p.join("\n"), /discardLocalSsd must be "true" or "false"/);
    assert.match(p.join("\n"), /endpoint must be an https URL/);
    assert.match(p.join("\n"), /serviceAccountKey .* is not a service-account key/);
    assert.match(gcpRules.check({}).join(), /providerID is missing/);
  });
  test("the key is Secret-only, and its parse errors never echo it", () => {
    assert.deepEqual(gcpRules.verdict("serviceAccountKey"), { kind: "credential", secretOnly: true });
    assert.deepEqual(gcpRules.verdict("providerID"), { kind: "allowed" });
    const r = parseServiceAccountKey("not json s3cr3t");
    assert.ok("error" in r && !r.error.includes("s3cr3t"));
  });
  test("target: gcp:<project>/<zone>/<name>", () => {
    assert.deepEqual(gcpRules.target({ providerID: "gce://my-project/us-central1-a/vm-1" }), {
      device: "gcp:my-project/us-central1-a/vm-1",
      outlets: [],
    });
    assert.equal(gcpRules.target({ providerID: "nope" }), undefined);
  });
  test("endpoints: https origin only", () => {
    assert.equal(endpointProblem("https://127.0.0.1:8443"), undefined);
    assert.equal(endpointProblem("https://compute.example.internal"), undefined);
    assert.ok(endpointProblem("https://user:pw@h"));
    assert.ok(endpointProblem("https://h/compute/v1"));
    assert.ok(endpointProblem("127.0.0.1:8443"));
  });
});

describe("azure: providerID", () => {
  test("a VM and a scale-set instance parse; segment names are case-insensitive", () => {
    assert.deepEqual(parseAzureProviderID(vmId("aks-node-1")), {
      kind: "vm",
      subscription: SUB,
      resourceGroup: "rg-aks",
      name: "aks-node-1",
    });
    const ss = `azure:///subscriptions/${SUB}/resourcegroups/MC_rg_aks_westeurope/providers/Microsoft.Compute/virtualMachineScaleSets/aks-nodepool1-123-vmss/virtualMachines/7`;
    assert.deepEqual(parseAzureProviderID(ss), {
      kind: "vmss",
      subscription: SUB,
      resourceGroup: "MC_rg_aks_westeurope",
      scaleSet: "aks-nodepool1-123-vmss",
      instanceId: "7",
    });
  });
  for (const [id, why] of [
    ["gce://p/z/i", /not an Azure VM providerID/],
    [`azure:///subscriptions/${SUB}/resourceGroups/rg/providers/Microsoft.Network/virtualMachines/vm`, /not an Azure VM providerID/],
    [`azure://subscriptions/${SUB}/resourceGroups/rg/providers/Microsoft.Compute/virtualMachines/vm`, /not an Azure VM providerID/],
    [`azure:///subscriptions/not-a-guid/resourceGroups/rg/providers/Microsoft.Compute/virtualMachines/vm`, /subscription/],
    [
      `azure:///subscriptions/${SUB}/resourceGroups/rg/providers/Microsoft.Compute/virtualMachineScaleSets/ss/virtualMachines/seven`,
      /instance id/,
    ],
  ] as const)
    test(`refuses ${id}`, () => {
      const r = parseAzureProviderID(id);
      assert.ok("error" in r && why.test(r.error), JSON.stringify(r));
    });
  test("target: azure:<lower-cased resource id>", () => {
    assert.deepEqual(azureRules.target({ providerID: vmId("AKS-Node-1", "RG-Aks") }), {
      device: `azure:/subscriptions/${SUB}/resourcegroups/rg-aks/providers/microsoft.compute/virtualmachines/aks-node-1`,
      outlets: [],
    });
  });
});

describe("azure: what proves off", () => {
  const st = (...codes: string[]) => [{ code: "ProvisioningState/succeeded" }, ...codes.map((code) => ({ code }))];
  test("stopped and deallocated are off, running on, transitions unknown", () => {
    assert.equal(azurePower(st("PowerState/stopped")), "off");
    assert.equal(azurePower(st("PowerState/deallocated")), "off");
    assert.equal(azurePower(st("PowerState/running")), "on");
    for (const s of ["starting", "stopping", "deallocating"]) assert.equal(azurePower(st(`PowerState/${s}`)), "unknown");
  });
  test("no PowerState, two of them, or an unknown one is an error, never off", () => {
    assert.ok(typeof azurePower(st()) === "object");
    assert.ok(typeof azurePower(st("PowerState/stopped", "PowerState/running")) === "object");
    assert.ok(typeof azurePower(st("PowerState/hibernated")) === "object");
    assert.ok(typeof azurePower(undefined) === "object");
  });
});

describe("azure: errors and parameters", () => {
  const k = (e: unknown) => classifyAzureError(e, "virtual machine x").kind;
  test("by HTTP status and identity error", () => {
    assert.equal(k(Object.assign(new Error("x"), { statusCode: 401 })), "AuthFailed");
    assert.equal(k(Object.assign(new Error("AuthorizationFailed"), { statusCode: 403 })), "AuthFailed");
    assert.equal(k(Object.assign(new Error("ResourceNotFound"), { statusCode: 404 })), "Config");
    assert.match(
      classifyAzureError(Object.assign(new Error("ResourceNotFound"), { statusCode: 404 }), "vm").message,
      /not proof it is off/,
    );
    assert.equal(k(Object.assign(new Error("x"), { statusCode: 429 })), "Failed");
    assert.equal(k(Object.assign(new Error("x"), { statusCode: 503 })), "Unreachable");
    assert.equal(k(Object.assign(new Error("invalid_client"), { name: "AuthenticationError", statusCode: 401 })), "AuthFailed");
    assert.equal(k(Object.assign(new Error("no env"), { name: "CredentialUnavailableError" })), "Config");
    assert.equal(k(Object.assign(new Error("x"), { name: "AbortError" })), "TimedOut");
    assert.equal(k(Object.assign(new Error("x"), { code: "REQUEST_SEND_ERROR" })), "Unreachable");
    assert.equal(k(Object.assign(new Error("x"), { code: "PARSE_ERROR" })), "BadOutput");
  });
  test("a service principal needs all three; Workload Identity none", () => {
    const id = vmId("vm-1");
    assert.deepEqual(azureRules.check({ providerID: id }), []);
    const tenantId = "72f988bf-86f1-41af-91ab-2d7cd011db47";
    const clientId = "11111111-2222-3333-4444-555555555555";
    assert.deepEqual(azureRules.check({ providerID: id, tenantId, clientId, clientSecret: "s" }), []);
    assert.match(azureRules.check({ providerID: id, clientSecret: "s" }).join(), /tenantId or clientId is missing/);
    assert.match(azureRules.check({ providerID: id, clientId }).join(), /used only with clientSecret/);
    assert.match(azureRules.check({ providerID: id, offAction: "shutdown" }).join(), /offAction must be one of powerOff, deallocate/);
    assert.deepEqual(azureRules.verdict("clientSecret"), { kind: "credential", secretOnly: true });
    assert.deepEqual(azureRules.verdict("clientId"), { kind: "credential", secretOnly: false });
  });
});

describe("providerID defaults to the Node's spec.providerID for cloud types", () => {
  const nodeWith = (name: string, providerID?: string): V1Node => ({ metadata: { name }, spec: providerID ? { providerID } : {} });
  const gcp: FenceAgentSpec = { type: "gcp", parameters: { discardLocalSsd: "false" } };
  test("from the Node", () => {
    const r = resolveParameters(gcp, nodeWith("n1", "gce://my-project/us-central1-a/n1"), new Map(), gcpRules);
    assert.deepEqual(r, { parameters: { discardLocalSsd: "false", providerID: "gce://my-project/us-central1-a/n1" } });
  });
  test("a spec layer overrides it", () => {
    const spec = { ...gcp, nodes: { n1: { parameters: { providerID: "gce://my-project/us-central1-b/other" } } } };
    const r = resolveParameters(spec, nodeWith("n1", "gce://my-project/us-central1-a/n1"), new Map(), gcpRules);
    assert.equal("parameters" in r && r.parameters.providerID, "gce://my-project/us-central1-b/other");
  });
  test("a Node without one: an actionable error", () => {
    const r = resolveParameters(gcp, nodeWith("n1"), new Map(), gcpRules);
    assert.ok("errors" in r && /node n1 has no spec.providerID.*spec.nodes.n1.parameters/.test(r.errors.join()), JSON.stringify(r));
  });
  test("other types get no default", () => {
    const r = resolveParameters({ type: "manual" }, nodeWith("n1", "gce://my-project/us-central1-a/n1"), new Map(), null);
    assert.deepEqual(r, { parameters: {} });
  });
  test("two Nodes naming one VM (in different case) are a duplicate target", () => {
    const spec: FenceAgentSpec = { type: "azure" };
    const a = nodeWith("a", vmId("vm-1"));
    const b = nodeWith("b", vmId("VM-1", "RG-AKS"));
    const r = checkUniqueTarget("az", spec, a, [a, b, nodeWith("c", vmId("vm-3"))], azureRules);
    assert.ok(!r.ok && r.nodes.join() === "b", JSON.stringify(r));
  });
});

describe("the examples in manifests/examples/ resolve to valid parameters", () => {
  const examples = join(import.meta.dirname, "../../manifests/examples");
  for (const [file, rules, providerID] of [
    ["50-fenceagent-gcp.yaml", gcpRules, "gce://my-project/us-central1-a/gke-pool-1-abcd"],
    ["60-fenceagent-azure.yaml", azureRules, vmId("aks-node-1")],
  ] as const)
    test(file, () => {
      const [doc] = loadAllYaml(readFileSync(join(examples, file), "utf8")) as { kind: string; spec: FenceAgentSpec }[];
      assert.equal(doc?.kind, "FenceAgent");
      const r = resolveParameters(doc!.spec, { metadata: { name: "n1" }, spec: { providerID } }, new Map(), rules);
      assert.ok("parameters" in r, JSON.stringify(r));
      assert.deepEqual(rules.check(r.parameters), []);
      assert.equal(r.parameters.providerID, providerID);
    });
  test("the IAM documents name exactly the permissions the agents use", () => {
    const gcpRole = readFileSync(join(examples, "cloud-iam/gcp-fencer-role.yaml"), "utf8");
    assert.deepEqual(
      [...gcpRole.matchAll(/^ {2}- (\S+)$/gm)].map((m) => m[1]),
      ["compute.instances.get", "compute.instances.stop", "compute.instances.start"],
    );
    const az = JSON.parse(readFileSync(join(examples, "cloud-iam/azure-fencer-role.json"), "utf8")) as { Actions: string[] };
    for (const a of ["read", "instanceView/read", "powerOff/action", "deallocate/action", "start/action"])
      assert.ok(az.Actions.includes(`Microsoft.Compute/virtualMachines/${a}`), a);
  });
});

describe("issue 41 item 6: a cloud's \"does not exist\" is off only for the Node's own instance, against a witness", () => {
  const spec: FenceAgentSpec = { type: "aws", parameters: {} };
  const awsNode = (name: string, id: string, zone = "us-east-1a"): V1Node => ({
    metadata: { name, uid: `uid-${name}` },
    spec: { providerID: `aws:///${zone}/${id}` },
  });
  const resolve = (n: V1Node) => {
    const r = resolveParameters(spec, n, new Map(), awsRules);
    return "errors" in r ? undefined : r.parameters;
  };
  const device = (p: Record<string, string>) => awsRules.target(p)?.device;
  const gone = awsNode("node-1", "i-0123456789abcdef0");
  const params = resolve(gone)!;
  const witness = (o: { parameters?: Record<string, string>; nodes: V1Node[]; target?: V1Node; type?: string }) =>
    missingInstanceWitness({
      type: o.type ?? "aws",
      parameters: o.parameters ?? params,
      target: o.target ?? gone,
      nodes: o.nodes,
      resolve,
      device,
    });

  test("another Node's instance in the same region, through the same parameters, is the witness", () => {
    const w = witness({ nodes: [gone, awsNode("node-2", "i-0aaaaaaaaaaaaaaaa")] });
    assert.ok("node" in w && w.node === "node-2", JSON.stringify(w));
    assert.equal(w.parameters.providerID, "aws:///us-east-1a/i-0aaaaaaaaaaaaaaaa");
  });

  test("no witness: only the Node itself, another region, or another Node with other credentials", () => {
    assert.ok("refused" in witness({ nodes: [gone] }));
    assert.ok("refused" in witness({ nodes: [gone, awsNode("node-2", "i-0aaaaaaaaaaaaaaaa", "eu-west-1a")] }), "another region");
    const other = missingInstanceWitness({
      type: "aws",
      parameters: params,
      target: gone,
      nodes: [gone, awsNode("node-2", "i-0aaaaaaaaaaaaaaaa")],
      resolve: (n) => ({ ...resolve(n)!, accessKeyId: "AKIAOTHER" }),
      device,
    });
    assert.ok("refused" in other, "other credentials");
  });

  test("the instance must be the Node's own providerID: one set in the FenceAgent, or none on the Node, is never taken as gone", () => {
    const set = witness({
      parameters: { ...params, providerID: "aws:///us-east-1a/i-0bbbbbbbbbbbbbbbb" },
      nodes: [gone, awsNode("node-2", "i-0aaaaaaaaaaaaaaaa")],
    });
    assert.match("refused" in set ? set.refused : "", /not the Node's own spec.providerID/);
    const nameOnly: V1Node = { metadata: { name: "node-1" } };
    assert.ok("refused" in witness({ target: nameOnly, nodes: [awsNode("node-2", "i-0aaaaaaaaaaaaaaaa")] }));
    assert.ok("refused" in witness({ type: "ipmi", nodes: [gone, awsNode("node-2", "i-0aaaaaaaaaaaaaaaa")] }), "never for a BMC");
  });

  test("gcp: the witness is in the same project and zone", () => {
    const gspec: FenceAgentSpec = { type: "gcp", parameters: {} };
    const gnode = (name: string, zone: string, inst: string): V1Node => ({
      metadata: { name },
      spec: { providerID: `gce://proj-123456/${zone}/${inst}` },
    });
    const gresolve = (n: V1Node) => {
      const r = resolveParameters(gspec, n, new Map(), gcpRules);
      return "errors" in r ? undefined : r.parameters;
    };
    const t = gnode("node-1", "europe-west1-b", "vm-1");
    const run = (nodes: V1Node[]) =>
      missingInstanceWitness({
        type: "gcp",
        parameters: gresolve(t)!,
        target: t,
        nodes,
        resolve: gresolve,
        device: (p) => gcpRules.target(p)?.device,
      });
    assert.ok("refused" in run([gnode("node-2", "europe-west1-c", "vm-2")]), "another zone");
    const w = run([gnode("node-2", "europe-west1-c", "vm-2"), gnode("node-3", "europe-west1-b", "vm-3")]);
    assert.ok("node" in w && w.node === "node-3");
  });

  test("which answers are \"does not exist\": AWS InvalidInstanceID.NotFound, not Malformed; GCE's 404 naming the instance, not its project or zone; ARM's ResourceNotFound, not ResourceGroupNotFound", () => {
    const sdk = (name: string) => Object.assign(new Error(name), { name, $metadata: { httpStatusCode: 400 } });
    assert.ok(isMissingInstance(classifyAwsError(sdk("InvalidInstanceID.NotFound"), "EC2 instance i-1", "DescribeInstances")));
    assert.ok(!isMissingInstance(classifyAwsError(sdk("InvalidInstanceID.Malformed"), "EC2 instance i-1", "DescribeInstances")));
    const ref = { project: "p-123456", zone: "europe-west1-b", instance: "vm-1" };
    const g = (msg: string) => classifyGceError(Object.assign(new Error(msg), { code: 5 }), "instance", ref);
    assert.ok(isMissingInstance(g("The resource 'projects/p-123456/zones/europe-west1-b/instances/vm-1' was not found")));
    assert.ok(!isMissingInstance(g("The resource 'projects/p-123456' was not found")));
    assert.ok(!isMissingInstance(g("The resource 'projects/p-123456/zones/europe-west1-b/instances/vm-10' was not found")));
    const a = (code: string) => classifyAzureError(Object.assign(new Error(code), { statusCode: 404, code }), "vm");
    assert.ok(isMissingInstance(a("ResourceNotFound")));
    for (const c of ["ResourceGroupNotFound", "ParentResourceNotFound", "SubscriptionNotFound"]) {
      assert.ok(!isMissingInstance(a(c)), c);
      assert.equal(a(c).kind, "Config", c);
    }
  });
});
