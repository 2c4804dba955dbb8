// The CRDs in crds/ against a real kube-apiserver: the documented examples are accepted with their defaults
// filled in, every object in test/fixtures/invalid-specs/ is refused with a message that says what to fix,
// and a NodeFence cannot be pointed at another node or change its origin after creation.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdtempSync, readdirSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { promisify } from "node:util";
import {
  ApiException,
  ApiextensionsV1Api,
  CustomObjectsApi,
  loadAllYaml,
  loadYaml,
  type KubernetesObject,
  type V1CustomResourceDefinition,
} from "@kubernetes/client-node";
import { Lab } from "../../lab/lab.ts";
import { waitFor } from "../../lab/health.ts";
import { CRD_FILES } from "../../tools/gen-api-types.ts";
import {
  FENCE_AGENTS,
  FENCE_RECORDS,
  FENCING_POLICIES,
  GROUP,
  NODE_FENCES,
  VERSION,
  type FenceAgent,
  type FenceRecord,
  type FencingPolicy,
  type NodeFence,
  type NodeFenceStatus,
} from "../../src/api/v1alpha1.ts";

const run = promisify(execFile);
const repoRoot = resolve(import.meta.dirname, "../..");
const invalidDir = join(repoRoot, "test/fixtures/invalid-specs");
const plurals: Record<string, string> = {
  FenceAgent: FENCE_AGENTS,
  FencingPolicy: FENCING_POLICIES,
  NodeFence: NODE_FENCES,
  FenceRecord: FENCE_RECORDS,
};

/** The stockade.io objects in docs/api.md's YAML examples: the documentation must stay valid. */
function docExamples(): KubernetesObject[] {
  const md = readFileSync(join(repoRoot, "docs/api.md"), "utf8");
  const blocks = [...md.matchAll(/```yaml\n([\s\S]*?)```/g)].map((m) => m[1]!).filter((y) => y.includes(`apiVersion: ${GROUP}/`));
  return blocks.map((y) => loadYaml<KubernetesObject>(y));
}

const minimal = {
  fenceAgent: { apiVersion: `${GROUP}/${VERSION}`, kind: "FenceAgent", metadata: { name: "min-manual" }, spec: { type: "manual" } },
  policy: {
    apiVersion: `${GROUP}/${VERSION}`,
    kind: "FencingPolicy",
    metadata: { name: "min-policy" },
    spec: { escalation: [{ agents: [{ name: "min-manual" }] }] },
  },
  nodeFence: { apiVersion: `${GROUP}/${VERSION}`, kind: "NodeFence", metadata: { name: "node-1" }, spec: { nodeName: "node-1" } },
} satisfies Record<string, FenceAgent | FencingPolicy | NodeFence>;

/** More valid shapes: the edges of each rule, on the accepting side. */
const moreValid: (FenceAgent | FencingPolicy)[] = [
  {
    apiVersion: `${GROUP}/${VERSION}`,
    kind: "FenceAgent",
    metadata: { name: "ok-webhook" },
    spec: {
      type: "webhook",
      // A PEM in spec.parameters: exempt from the no-whitespace rule (the operator parses it).
      parameters: {
        url: "https://power.example.com/stockade",
        caBundle: "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n",
        x_site: "paris-2",
      },
      nodeTemplates: { machine: '{{ labels["node-restriction.kubernetes.io/machine"] }}', providerID: "{{ providerID }}" },
      nodes: { "node-1": { parameters: { machine: "rack4-slot2", x_rack: "r4" } } },
      credentialsSecretRef: { namespace: "stockade-system", name: "power-service" },
    },
  },
  {
    apiVersion: `${GROUP}/${VERSION}`,
    kind: "FenceAgent",
    metadata: { name: "ok-aws-every-parameter" },
    spec: {
      type: "aws",
      parameters: { region: "us-east-1", offAction: "terminate", endpoint: "https://ec2.us-east-1.amazonaws.com" },
      nodeTemplates: { providerID: "{{ providerID }}" },
      nodes: { "node-1": { parameters: { providerID: "aws:///us-east-1a/i-0123456789abcdef0" } } },
    },
  },
  {
    apiVersion: `${GROUP}/${VERSION}`,
    kind: "FenceAgent",
    metadata: { name: "ok-fence-ipmilan" },
    spec: {
      type: "fenceAgent",
      agent: "fence_ipmilan",
      parameters: { ip: "10.0.0.1", username: "admin", lanplus: "1", cipher: "3" },
      nodeTemplates: {
        ipport: '{{ labels["node-restriction.kubernetes.io/bmc-port"] }}',
        ip: '{{ labels["bmc.node-restriction.kubernetes.io/host"] }}',
      },
      credentialsSecretRef: { namespace: "stockade-system", name: "bmc" },
      timeoutSeconds: 600,
      retries: 0,
      retryBackoffSeconds: 0,
    },
  },
  {
    apiVersion: `${GROUP}/${VERSION}`,
    kind: "FenceAgent",
    metadata: { name: "ok-ipmi-per-node-credentials" },
    spec: {
      type: "ipmi",
      // ipmi's "port" is also fence agents' deprecated alias of plug: fine here, in every map.
      parameters: { port: "623" },
      nodeTemplates: { port: '{{ labels["node-restriction.kubernetes.io/bmc-port"] }}' },
      nodes: {
        "node-1": {
          parameters: { address: "10.0.0.1", port: "6230" },
          credentialsSecretRef: { namespace: "stockade-system", name: "bmc-node-1" },
        },
        "node-2": { credentialsSecretRef: { namespace: "stockade-system", name: "bmc-node-2" } },
      },
    },
  },
  {
    apiVersion: `${GROUP}/${VERSION}`,
    kind: "FenceAgent",
    metadata: { name: "ok-pdu-plugs-and-spaced-select" },
    spec: {
      type: "fenceAgent",
      agent: "fence_drac5",
      parameters: { drac_version: "DRAC CMC", ssh: "1", command_prompt: "admin1->" },
      nodeTemplates: { plug: "{{ name }}", ip: "drac-{{ providerID }}.example.com" },
      nodes: { "node-1": { parameters: { ip: "10.0.0.9", ipport: "22" } } },
      credentialsSecretRef: { namespace: "stockade-system", name: "drac" },
    },
  },
  {
    apiVersion: `${GROUP}/${VERSION}`,
    kind: "FenceAgent",
    metadata: { name: "ok-azure-camel-case-names" },
    spec: {
      type: "fenceAgent",
      agent: "fence_azure_arm",
      parameters: { resourceGroup: "rg-1", subscriptionId: "0000-1111", tenantId: "t" },
      nodeTemplates: { plug: "{{ name }}" },
    },
  },
  ...([3, "0%", "100%", "7%"] as const).map((maxUnhealthyNodes, i): FencingPolicy => ({
    apiVersion: `${GROUP}/${VERSION}`,
    kind: "FencingPolicy",
    metadata: { name: `ok-max-unhealthy-${i}` },
    spec: { escalation: [{ agents: [{ name: "a" }] }], guards: { maxUnhealthyNodes } },
  })),
  {
    apiVersion: `${GROUP}/${VERSION}`,
    kind: "FencingPolicy",
    metadata: { name: "ok-taint-only-no-zone-guard" },
    spec: {
      nodeSelector: {
        matchLabels: { "node-role.kubernetes.io/worker": "" },
        matchExpressions: [
          { key: "topology.kubernetes.io/zone", operator: "In", values: ["zone-a", "zone-b"] },
          { key: "stockade.io/exclude", operator: "DoesNotExist" },
        ],
      },
      escalation: [{ agents: [{ name: "a" }, { name: "b" }], timeoutSeconds: 3600 }, { agents: [{ name: "a" }] }],
      action: "reboot",
      release: { forceDeletePods: false, outOfServiceTaint: true },
      guards: { zoneTopologyKey: "" },
      detection: { heartbeatTimeoutSeconds: 5, fenceAfterSeconds: 0 },
    },
  },
];

function apiError(err: unknown): string {
  if (!(err instanceof ApiException)) throw err;
  const body = err.body as unknown;
  const parsed = typeof body === "string" ? (JSON.parse(body) as { message?: string }) : (body as { message?: string } | undefined);
  return parsed?.message ?? `HTTP ${err.code}`;
}

/** The apiserver's message when it refuses `p`; fails when it accepts. */
async function refusal(p: Promise<unknown>, what: string): Promise<string> {
  try {
    await p;
  } catch (err) {
    return apiError(err);
  }
  assert.fail(`${what} was accepted; it should have been refused`);
}

describe("CRDs: the apiserver validates stockade.io objects", () => {
  let lab: Lab;
  let custom: CustomObjectsApi;
  const create = <T>(obj: KubernetesObject | FenceAgent | FencingPolicy | NodeFence) =>
    custom.createClusterCustomObject({ group: GROUP, version: VERSION, plural: plurals[obj.kind!]!, body: obj }) as Promise<T>;

  before(async () => {
    lab = await Lab.up({ dir: mkdtempSync(join(tmpdir(), "stockade-crd-")), nodes: 1 });
    custom = lab.kc.makeApiClient(CustomObjectsApi);
    const ext = lab.kc.makeApiClient(ApiextensionsV1Api);
    const names: string[] = [];
    for (const file of CRD_FILES) {
      const [crd] = loadAllYaml(readFileSync(join(repoRoot, file), "utf8")) as V1CustomResourceDefinition[];
      await ext.createCustomResourceDefinition({ body: crd! });
      names.push(crd!.metadata!.name!);
    }
    for (const name of names) {
      await waitFor(`CRD ${name} Established`, async () => {
        const crd = await ext.readCustomResourceDefinition({ name });
        return crd.status?.conditions?.some((c) => c.type === "Established" && c.status === "True");
      });
    }
  });
  after(async () => {
    await lab?.down();
  });

  test("the examples in docs/api.md and a minimal object of each kind are accepted", async () => {
    const examples = docExamples();
    assert.deepEqual(
      examples.map((o) => o.kind).sort(),
      ["FenceAgent", "FencingPolicy", "NodeFence"],
      "docs/api.md has one example per kind",
    );
    for (const obj of [...examples, minimal.fenceAgent, minimal.policy, minimal.nodeFence, ...moreValid]) {
      await create(obj).catch((err: unknown) => assert.fail(`${obj.kind} ${obj.metadata?.name} was refused: ${apiError(err)}`));
    }
  });

  test("defaults are filled in", async () => {
    const get = <T>(plural: string, name: string) =>
      custom.getClusterCustomObject({ group: GROUP, version: VERSION, plural, name }) as Promise<T>;
    const fp = await get<FencingPolicy>(FENCING_POLICIES, minimal.policy.metadata.name);
    assert.equal(fp.spec.action, "off");
    assert.equal(fp.spec.guards?.maxConcurrentFences, 1);
    assert.deepEqual(fp.spec, {
      nodeSelector: {},
      guardedPods: { statefulSets: true, readWriteOnceVolumes: true },
      detection: {
        heartbeatTimeoutSeconds: 30,
        waitForNodeController: false,
        fenceAfterSeconds: 10,
        honorPodTolerations: true,
        minTolerationSeconds: 30,
        injectedTolerationSeconds: 300,
      },
      escalation: [{ agents: [{ name: "min-manual" }] }],
      action: "off",
      release: { forceDeletePods: true, deleteVolumeAttachments: true, outOfServiceTaint: false },
      unfenceOnReboot: false,
      guards: {
        maxConcurrentFences: 1,
        maxUnhealthyNodes: "50%",
        zoneTopologyKey: "topology.kubernetes.io/zone",
        minZoneSize: 2,
        maxWatchStalenessSeconds: 60,
      },
      claimLock: true,
      forceDeleteGuard: true,
      triggers: {},
      allowControlPlane: false,
      allowWatchdogEvidence: false,
      dryRun: false,
      paused: false,
    });
    const fa = await get<FenceAgent>(FENCE_AGENTS, minimal.fenceAgent.metadata.name);
    assert.deepEqual(fa.spec, {
      type: "manual",
      parameters: {},
      nodeTemplates: {},
      nodes: {},
      timeoutSeconds: 30,
      retries: 2,
      retryBackoffSeconds: 1,
    });
    const nf = await get<NodeFence>(NODE_FENCES, minimal.nodeFence.metadata.name);
    assert.deepEqual(nf.spec, { nodeName: "node-1", origin: "Manual", unfence: false });
  });

  test("every object in test/fixtures/invalid-specs is refused with its expected message", async () => {
    const files = readdirSync(invalidDir).filter((f) => f.endsWith(".yaml"));
    assert.ok(files.length >= 20, `at least 20 invalid specs (found ${files.length})`);
    const wrong: string[] = [];
    for (const file of files) {
      const text = readFileSync(join(invalidDir, file), "utf8");
      const expect = /^# expect: (.+)$/m.exec(text)?.[1]?.trim();
      assert.ok(expect, `${file} must start with a "# expect: <part of the apiserver's message>" line`);
      const message = await refusal(create(loadYaml<KubernetesObject>(text)), file);
      if (!message.includes(expect)) wrong.push(`${file}: expected a message containing\n  ${expect}\ngot\n  ${message}`);
    }
    assert.deepEqual(wrong, []);
  });

  test("every option that runs a command or names a file is refused in each parameter map, saying why", async () => {
    const named = [
      "passwd_script",
      "password_script",
      "ipmitool_path",
      "ssh_path",
      "sudo_path",
      "identity_file",
      "ssh_options",
      "debug_file",
    ];
    const wrong: string[] = [];
    for (const [i, option] of named.entries()) {
      const maps = {
        "spec.parameters": { parameters: { [option]: "/tmp/x" } },
        "spec.nodeTemplates": { nodeTemplates: { [option]: "/tmp/x" } },
        "spec.nodes[*].parameters": { nodes: { "node-1": { parameters: { [option]: "/tmp/x" } } } },
      };
      for (const [j, [field, spec]] of Object.entries(maps).entries()) {
        const obj: FenceAgent = {
          apiVersion: `${GROUP}/${VERSION}`,
          kind: "FenceAgent",
          metadata: { name: `bad-option-${i}-${j}` },
          spec: { type: "fenceAgent", agent: "fence_ilo_ssh", ...spec },
        };
        const message = await refusal(create(obj), `${option} in ${field}`);
        if (
          !message.includes(`${field} must not contain`) ||
          !message.includes(option) ||
          !message.includes("run commands or name files on the operator's host")
        )
          wrong.push(`${option} in ${field}: ${message}`);
      }
    }
    assert.deepEqual(wrong, []);
  });

  test("a FenceAgent for 5000 nodes passes the generated rules within the apiserver's CEL cost limits", async () => {
    const nodes = Object.fromEntries(
      Array.from({ length: 5000 }, (_, i) => [
        `node-${i}`,
        { parameters: { ip: `10.${i >> 16}.${(i >> 8) & 255}.${i & 255}`, ipport: "623" } },
      ]),
    );
    const big: FenceAgent = {
      apiVersion: `${GROUP}/${VERSION}`,
      kind: "FenceAgent",
      metadata: { name: "ok-5000-nodes" },
      spec: { type: "fenceAgent", agent: "fence_ipmilan", parameters: { username: "admin", lanplus: "1", cipher: "3" }, nodes },
    };
    await create(big).catch((err: unknown) => assert.fail(`refused: ${apiError(err).slice(0, 500)}`));
  });

  test("a NodeFence's nodeName and origin cannot change; its other fields can", async () => {
    const name = "node-immutable";
    const created = await create<NodeFence>({ ...minimal.nodeFence, metadata: { name }, spec: { nodeName: name, reason: "first" } });
    const replace = (spec: NodeFence["spec"]) =>
      custom.replaceClusterCustomObject({ group: GROUP, version: VERSION, plural: NODE_FENCES, name, body: { ...created, spec } });

    const moved = await refusal(replace({ ...created.spec, nodeName: "node-1" }), "changing spec.nodeName");
    assert.match(moved, /spec\.nodeName is immutable/);
    const reorigined = await refusal(replace({ ...created.spec, origin: "Automatic" }), "changing spec.origin");
    assert.match(reorigined, /spec\.origin is immutable/);

    const updated = (await replace({ ...created.spec, reason: "second", unfence: true })) as NodeFence;
    assert.equal(updated.spec.reason, "second");
    assert.equal(updated.spec.unfence, true);
  });

  test("an Automatic NodeFence's spec.trigger (what made the operator fence) cannot be added, removed or changed", async () => {
    const name = "node-triggered";
    const trigger = { nodeCondition: { type: "KernelDeadlock", status: "True" as const, forSeconds: 60 } };
    const created = await create<NodeFence>({
      ...minimal.nodeFence,
      metadata: { name },
      spec: { nodeName: name, origin: "Automatic" as const, trigger },
    });
    assert.deepEqual(created.spec.trigger, trigger);
    const replace = (spec: NodeFence["spec"]) =>
      custom.replaceClusterCustomObject({ group: GROUP, version: VERSION, plural: NODE_FENCES, name, body: { ...created, spec } });
    const changed = await refusal(
      replace({ ...created.spec, trigger: { nodeCondition: { ...trigger.nodeCondition, status: "False" } } }),
      "changing spec.trigger",
    );
    assert.match(changed, /spec\.trigger is immutable/);
    const without = { ...created.spec };
    delete without.trigger;
    assert.match(await refusal(replace(without), "removing spec.trigger"), /spec\.trigger is immutable/);
    const plain = await create<NodeFence>({
      ...minimal.nodeFence,
      metadata: { name: "node-untriggered" },
      spec: { nodeName: "node-untriggered", origin: "Automatic" as const },
    });
    const added = await refusal(
      custom.replaceClusterCustomObject({
        group: GROUP,
        version: VERSION,
        plural: NODE_FENCES,
        name: "node-untriggered",
        body: { ...plain, spec: { ...plain.spec, trigger } },
      }),
      "adding spec.trigger",
    );
    assert.match(added, /spec\.trigger is immutable/);
  });

  test("the status the operator writes is accepted, and the printer columns show it", async () => {
    const name = minimal.nodeFence.metadata.name;
    const nf = (await custom.getClusterCustomObject({ group: GROUP, version: VERSION, plural: NODE_FENCES, name })) as NodeFence;
    const t = "2025-01-01T00:00:00Z";
    const status: NodeFenceStatus = {
      phase: "Released",
      observedGeneration: 1,
      conditions: [
        { type: "Fenced", status: "True", observedGeneration: 1, lastTransitionTime: t, reason: "PowerOffConfirmed", message: "off" },
      ],
      policy: "default",
      bootID: "b0",
      lastHeartbeatTime: t,
      startTime: t,
      fencedTime: t,
      releasedTime: t,
      currentLevel: 1,
      levelNumber: 2,
      attempts: [
        { level: 0, agent: "lab-ipmi", operation: "off", startTime: t, endTime: t, outcome: "TimedOut", message: "no answer" },
        { level: 1, agent: "pdu-a", operation: "confirm", startTime: t, endTime: t, outcome: "Succeeded" },
      ],
      evidence: { method: "PowerOffConfirmed", time: t, agents: ["pdu-a"], detail: "chassis power is off" },
      releases: [{ kind: "Pod", namespace: "default", name: "web-0", uid: "u1", action: "ForceDeleted", time: t }],
    };
    const written = (await custom.replaceClusterCustomObjectStatus({
      group: GROUP,
      version: VERSION,
      plural: NODE_FENCES,
      name,
      body: { ...nf, status },
    })) as NodeFence;
    assert.deepEqual(written.status, status);

    const { stdout } = await run("kubectl", ["get", "nodefences", name], { env: lab.env });
    const [header, row] = stdout
      .trim()
      .split("\n")
      .map((l) => l.trim().split(/\s+/));
    // No NODE column (a NodeFence is named after its node); LEVEL counts from 1 (currentLevel 1 is the second level).
    assert.deepEqual(header, ["NAME", "PHASE", "ORIGIN", "LEVEL", "EVIDENCE", "AGE"]);
    assert.deepEqual(row?.slice(0, 5), [name, "Released", "Manual", "2", "PowerOffConfirmed"]);
    // levelNumber is currentLevel + 1, or refused.
    const stored = (await custom.getClusterCustomObject({ group: GROUP, version: VERSION, plural: NODE_FENCES, name })) as NodeFence;
    await assert.rejects(
      custom.replaceClusterCustomObjectStatus({
        group: GROUP,
        version: VERSION,
        plural: NODE_FENCES,
        name,
        body: { ...stored, status: { ...status, levelNumber: 1 } },
      }),
      (err: unknown) =>
        err instanceof ApiException && err.code === 422 && /status.levelNumber is status.currentLevel \+ 1/.test(JSON.stringify(err.body)),
    );

    // A FenceRecord as the operator writes it (decide/fence-history.ts recordOf), and its columns.
    const record: FenceRecord = {
      apiVersion: `${GROUP}/${VERSION}`,
      kind: "FenceRecord",
      metadata: { name: "node-1-0123456789ab", labels: { "stockade.io/node": "node-1" } },
      spec: {
        nodeName: "node-1",
        nodeFence: { name: "node-1", uid: "0123456789ab" },
        origin: "Automatic",
        policy: "default",
        reason: "silent",
      },
      status: {
        phase: "Unfenced",
        outcome: "Released",
        startTime: t,
        fencedTime: t,
        releasedTime: t,
        endTime: t,
        endReason: "UnfenceRequested",
        rounds: 1,
        failures: 0,
        levelNumber: 2,
        levels: [
          { round: 1, level: 1, agents: [{ name: "lab-ipmi", type: "ipmi", outcome: "TimedOut", message: "no answer" }] },
          { round: 1, level: 2, agents: [{ name: "pdu-a", type: "redfish", outcome: "Succeeded" }] },
        ],
        evidence: { method: "PowerOffConfirmed", time: t, agents: ["pdu-a"], detail: "off" },
        podsReleased: 1,
        volumesReleased: 0,
      },
    };
    const created = (await create<FenceRecord>(record)) as FenceRecord;
    assert.deepEqual(created.status, record.status, "the whole record is kept as written");
    const rec = await run("kubectl", ["get", "fencerecords", "-l", "stockade.io/node=node-1"], { env: lab.env });
    const [rh, rr] = rec.stdout
      .trim()
      .split("\n")
      .map((l) => l.trim().split(/\s+/));
    assert.deepEqual(rh, ["NAME", "NODE", "OUTCOME", "ORIGIN", "EVIDENCE", "LEVEL", "STARTED", "ENDED"]);
    assert.deepEqual(rr?.slice(0, 6), ["node-1-0123456789ab", "node-1", "Released", "Automatic", "PowerOffConfirmed", "2"]);

    const fp = (await custom.getClusterCustomObject({
      group: GROUP,
      version: VERSION,
      plural: FENCING_POLICIES,
      name: minimal.policy.metadata.name,
    })) as FencingPolicy;
    await custom.replaceClusterCustomObjectStatus({
      group: GROUP,
      version: VERSION,
      plural: FENCING_POLICIES,
      name: minimal.policy.metadata.name,
      body: {
        ...fp,
        status: {
          conditions: [
            { type: "Ready", status: "True", lastTransitionTime: t, reason: "Accepted", message: "every agent exists" },
            { type: "StormGuard", status: "True", lastTransitionTime: t, reason: "TooManyUnhealthyNodes", message: "3 of 4 nodes" },
          ],
          partitionedNodes: ["node-1"],
          activeFences: 0,
        },
      } satisfies FencingPolicy,
    });
    const fpOut = await run("kubectl", ["get", "fp", minimal.policy.metadata.name], { env: lab.env });
    const fpLines = fpOut.stdout
      .trim()
      .split("\n")
      .map((l) => l.trim().split(/\s+/));
    assert.deepEqual(fpLines[0], ["NAME", "READY", "ACTION", "DRYRUN", "PAUSED", "STORMGUARD", "AGE"]);
    assert.deepEqual(fpLines[1]?.slice(0, 6), [minimal.policy.metadata.name, "True", "off", "false", "false", "True"]);

    const { stdout: all } = await run("kubectl", ["get", "stockade", "-o", "name"], { env: lab.env });
    assert.match(all, /fenceagent\.stockade\.io\/min-manual/, "the stockade category lists every kind");
    assert.match(all, /nodefence\.stockade\.io\/node-1/);
    assert.match(all, /fencerecord\.stockade\.io\/node-1-0123456789ab/);
  });
});
