// The install bundle agrees with the code: manifests/01-crds.yaml is what tools/gen-manifests.ts generates
// from crds/, and the Deployment's flags, ports and Lease name are the ones the operator parses and uses.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { loadAllYaml, type V1Deployment, type V1Role } from "@kubernetes/client-node";
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
