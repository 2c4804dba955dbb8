// The ledger's manifests (lab/ledger.ts), what a lab test cannot see quickly: options that change them.
// test/lab/ledger-workload.test.ts applies them to a real control plane.
import { test } from "node:test";
import assert from "node:assert/strict";
import { ledgerManifests, LEDGER_BINARY, sanDir } from "../../lab/ledger.ts";

const STAY = [{ key: "node.kubernetes.io/unreachable", operator: "Exists", effect: "NoExecute" }];

test("one volume per ordinal under the SAN, pre-bound to its claim; the options reach the pod template", () => {
  const m = ledgerManifests({
    namespace: "ns1",
    replicas: 3,
    image: "stockade.lab/ledger:abc",
    san: sanDir("/tmp/lab"),
    tolerations: STAY,
    intervalMs: 50,
  });
  assert.deepEqual(
    m.volumes.map((v) => [v.metadata?.name, v.spec?.hostPath?.path, v.spec?.claimRef?.namespace, v.spec?.claimRef?.name]),
    [0, 1, 2].map((i) => [`san-ns1-data-ledger-${i}`, `/tmp/lab/san/san-ns1-data-ledger-${i}`, "ns1", `data-ledger-${i}`]),
  );
  // The claims the StatefulSet would make, each naming its volume (created and Bound before the pods).
  const template = m.statefulSet.spec!.volumeClaimTemplates![0]!;
  assert.deepEqual(
    m.claims.map((c) => [c.metadata?.namespace, c.metadata?.name, c.spec?.volumeName]),
    [0, 1, 2].map((i) => ["ns1", `${template.metadata!.name}-ledger-${i}`, `san-ns1-data-ledger-${i}`]),
  );
  for (const c of m.claims) assert.deepEqual({ ...c.spec, volumeName: undefined }, { ...template.spec, volumeName: undefined });
  const pod = m.statefulSet.spec!.template.spec!;
  assert.deepEqual(pod.tolerations, STAY);
  assert.equal(pod.containers[0]!.image, "stockade.lab/ledger:abc");
  assert.deepEqual(pod.containers[0]!.command, [LEDGER_BINARY]);
  assert.equal(pod.containers[0]!.env?.find((e) => e.name === "INTERVAL_MS")?.value, "50");
  assert.equal(
    pod.containers[0]!.env?.find((e) => e.name === "TOKEN_FILE"),
    undefined,
    "no token file unless asked",
  );
  assert.equal(pod.volumes, undefined);
  assert.ok(pod.affinity?.podAntiAffinity, "one per node by default");
  assert.equal(m.service.spec?.clusterIP, "None");
  assert.equal(m.statefulSet.spec?.volumeClaimTemplates?.[0]?.spec?.storageClassName, m.storageClass.metadata?.name);
});

test("a token annotation is projected by the downward API into the file the writer reads", () => {
  const m = ledgerManifests({
    name: "l",
    namespace: "ns",
    replicas: 1,
    image: "i",
    san: "/s",
    tokenAnnotation: "stockade.io/claim-token",
    onePerNode: false,
  });
  const pod = m.statefulSet.spec!.template.spec!;
  const c = pod.containers[0]!;
  const file = c.env?.find((e) => e.name === "TOKEN_FILE")?.value;
  const mount = c.volumeMounts?.find((v) => v.name === "token");
  const item = pod.volumes?.find((v) => v.name === "token")?.downwardAPI?.items?.[0];
  assert.equal(file, `${mount?.mountPath}/${item?.path}`);
  assert.equal(item?.fieldRef?.fieldPath, "metadata.annotations['stockade.io/claim-token']");
  assert.equal(pod.affinity, undefined);
});
