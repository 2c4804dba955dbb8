// manifests/node-agent/ (opt-in, not part of manifests/): the DaemonSet runs the operator's image on every node with
// the node agent's command, the sysrq reboot off, and the admission policy names the ServiceAccount the pods run as.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { loadAll } from "js-yaml";
import type { V1DaemonSet, V1Deployment } from "@kubernetes/client-node";
import { NODE_AGENT_NAMESPACE } from "../../src/decide/node-agent-record.ts";

const dir = join(import.meta.dirname, "../../manifests/node-agent");
type Obj = { kind: string; metadata: { name: string; namespace?: string; labels?: Record<string, string> }; [k: string]: unknown };
const objects = readdirSync(dir)
  .filter((f) => f.endsWith(".yaml"))
  .sort()
  .flatMap((f) => (loadAll(readFileSync(join(dir, f), "utf8")) as Obj[]).filter(Boolean));
const one = <T>(kind: string) => objects.find((o) => o.kind === kind) as unknown as T;

test("the DaemonSet: the operator's image, `node-agent`, every node, downward-API env, sysrq off, readiness on /healthz", () => {
  const ds = one<V1DaemonSet>("DaemonSet");
  const deployment = (loadAll(readFileSync(join(dir, "../03-deployment.yaml"), "utf8")) as V1Deployment[]).find(
    (o) => o?.kind === "Deployment",
  )!;
  const c = ds.spec!.template.spec!.containers[0]!;
  assert.equal(c.image, deployment.spec!.template.spec!.containers[0]!.image);
  assert.equal(c.args?.[0], "node-agent");
  assert.deepEqual(ds.spec!.template.spec!.tolerations, [{ operator: "Exists" }]);
  const env = Object.fromEntries((c.env ?? []).map((e) => [e.name, e.valueFrom?.fieldRef?.fieldPath ?? e.value]));
  assert.deepEqual(env, { NODE_NAME: "spec.nodeName", POD_NAME: "metadata.name", POD_IP: "status.podIP", STOCKADE_SYSRQ_REBOOT: "false" });
  assert.equal(c.readinessProbe?.httpGet?.path, "/healthz");
  assert.ok(c.resources?.requests?.cpu && c.resources?.limits?.memory);
  assert.equal(ds.metadata!.namespace, NODE_AGENT_NAMESPACE);
});

test("the DaemonSet mounts nothing from the host: the watchdog is the privileged container's own /dev/watchdog", () => {
  const ds = one<V1DaemonSet>("DaemonSet");
  const pod = ds.spec!.template.spec!;
  const c = pod.containers[0]!;
  assert.ok(c.args?.includes("--watchdog-device=/dev/watchdog"), JSON.stringify(c.args));
  assert.deepEqual(
    (pod.volumes ?? []).filter((v) => v.hostPath),
    [],
    "no hostPath volume (the host's whole /dev was mounted before)",
  );
  assert.equal(c.securityContext?.privileged, true, "host devices reach the container only when privileged");
});

test("the namespace allows privileged pods; the policy binds writes by the agent's ServiceAccount to its node", () => {
  const ns = objects.find((o) => o.kind === "Namespace")!;
  assert.equal(ns.metadata.name, NODE_AGENT_NAMESPACE);
  assert.equal(ns.metadata.labels?.["pod-security.kubernetes.io/enforce"], "privileged");
  const sa = objects.find((o) => o.kind === "ServiceAccount")!;
  const ds = one<V1DaemonSet>("DaemonSet");
  assert.equal(ds.spec!.template.spec!.serviceAccountName, sa.metadata.name);
  const policy = JSON.stringify(objects.find((o) => o.kind === "ValidatingAdmissionPolicy"));
  assert.ok(policy.includes(`system:serviceaccount:${NODE_AGENT_NAMESPACE}:${sa.metadata.name}`), policy);
  assert.match(policy, /authentication\.kubernetes\.io\/node-name.*\[0\] == object\.metadata\.name/);
  assert.ok(objects.some((o) => o.kind === "ValidatingAdmissionPolicyBinding"));
});

test("not part of `kubectl apply -f manifests/`: its files live only in the subdirectory", () => {
  const top = readdirSync(join(dir, "..")).filter((f) => f.endsWith(".yaml"));
  for (const f of top) assert.ok(!readFileSync(join(dir, "..", f), "utf8").includes(`namespace: ${NODE_AGENT_NAMESPACE}`), f);
});
