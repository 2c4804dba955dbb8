// The install bundle agrees with the code: manifests/01-crds.yaml is what tools/gen-manifests.ts generates
// from crds/, and the Deployment's flags, ports and Lease name are the ones the operator parses and uses.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { loadAllYaml, type V1Deployment, type V1NetworkPolicy, type V1Role } from "@kubernetes/client-node";
import { crdFiles, generate, OUTPUT } from "../../tools/gen-manifests.ts";
import { parseConfig } from "../../src/config.ts";
import { LEADER_LEASE } from "../../src/operator.ts";

const manifests = join(import.meta.dirname, "../../manifests");
const load = <T>(file: string) => (loadAllYaml(readFileSync(join(manifests, file), "utf8")) as T[]).filter(Boolean);

test("manifests/01-crds.yaml is what tools/gen-manifests.ts generates from crds/", async () => {
  const committed = readFileSync(OUTPUT, "utf8");
  assert.equal(committed, await generate(), "manifests/01-crds.yaml is out of date: run node tools/gen-manifests.ts");
  assert.match(committed, /^# generated from crds\/ by tools\/gen-manifests\.ts/);
  const crds = (loadAllYaml(committed) as { kind?: string }[]).filter(Boolean);
  assert.equal(crds.length, crdFiles().length, "one CRD per file in crds/");
  assert.ok(crds.every((c) => c.kind === "CustomResourceDefinition"));
});

test("the Deployment's flags parse, and its ports, probes and Lease are the operator's", () => {
  const [dep] = load<V1Deployment>("03-deployment.yaml");
  const c = dep?.spec?.template.spec?.containers[0];
  assert.ok(c);
  const env = { POD_NAME: "stockade-abc", POD_NAMESPACE: dep?.metadata?.namespace };
  assert.deepEqual(
    c.env?.map((e) => [e.name, e.valueFrom?.fieldRef?.fieldPath]),
    [
      ["POD_NAME", "metadata.name"],
      ["POD_NAMESPACE", "metadata.namespace"],
    ],
  );
  const cfg = parseConfig(c.args ?? [], env);
  assert.ok(cfg);
  assert.equal(cfg.leaderElect, true);
  assert.equal(cfg.leaderElectionNamespace, "stockade-system");
  assert.equal(cfg.instanceId, "stockade-abc");
  const port = (name: string) => c.ports?.find((p) => p.name === name)?.containerPort;
  assert.equal(cfg.metricsBindAddress?.port, port("metrics"));
  assert.equal(cfg.healthBindAddress?.port, port("health"));
  assert.equal(c.livenessProbe?.httpGet?.path, "/healthz");
  assert.equal(c.readinessProbe?.httpGet?.path, "/readyz");
  assert.equal(c.livenessProbe?.httpGet?.port, "health");
  assert.equal(c.readinessProbe?.httpGet?.port, "health");

  const role = load<V1Role>("02-rbac.yaml").find((o) => o.kind === "Role" && o.metadata?.namespace === cfg.leaderElectionNamespace);
  const named = role?.rules?.find((r) => r.resources?.includes("leases") && r.resourceNames);
  assert.deepEqual(named?.resourceNames, [LEADER_LEASE], "the Role names the Lease the operator elects on");
});

test("the NetworkPolicy selects the operator's pods, admits its webhook and metrics ports, and never restricts egress", () => {
  const [dep] = load<V1Deployment>("03-deployment.yaml");
  const [np] = load<V1NetworkPolicy>("09-network-policy.yaml");
  assert.ok(dep && np);
  assert.equal(np.metadata?.namespace, dep.metadata?.namespace);
  const podLabels = dep.spec?.template.metadata?.labels ?? {};
  for (const [k, v] of Object.entries(np.spec?.podSelector?.matchLabels ?? {})) assert.equal(podLabels[k], v, `the pods carry ${k}=${v}`);
  // Egress open: a policy that misses one BMC turns a fence into a failure (manifests/README.md, "Network policy").
  assert.deepEqual(np.spec?.policyTypes, ["Ingress"]);
  assert.equal(np.spec?.egress, undefined);
  const containerPorts = new Set(dep.spec?.template.spec?.containers[0]?.ports?.map((p) => p.name));
  const rules = np.spec?.ingress ?? [];
  const ports = rules.flatMap((r) => (r.ports ?? []).map((p) => p.port));
  for (const p of ports) assert.ok(containerPorts.has(String(p)), `port ${p} is a named port of the operator's container`);
  assert.deepEqual([...ports].sort(), ["metrics", "webhook"]);
  // The apiserver calls the webhooks from outside the pod network: no `from` may narrow that rule.
  // (loadAllYaml gives the client's models, which name the YAML's `from` `_from`.)
  const from = (r: (typeof rules)[number] | undefined) => r?._from;
  const webhook = rules.find((r) => r.ports?.some((p) => p.port === "webhook"));
  assert.ok(webhook);
  assert.equal(from(webhook), undefined);
  assert.ok(from(rules.find((r) => r.ports?.some((p) => p.port === "metrics")))?.length, "metrics only from the monitoring namespace");
});
