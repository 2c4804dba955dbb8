import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { GUARDED_LABEL, isFinished, isGuarded } from "../../src/decide/guarded-pods.ts";
import { pod, pvc, pvcMap } from "./decide-fixtures.ts";

const none = pvcMap();
const claims = pvcMap(
  pvc("data-rwo", ["ReadWriteOnce"]),
  pvc("data-rwop", ["ReadWriteOncePod"]),
  pvc("shared-rwx", ["ReadWriteMany"]),
  pvc("shared-rox", ["ReadOnlyMany"]),
  pvc("mixed", ["ReadWriteMany", "ReadWriteOnce"]),
  pvc("other-ns-rwo", ["ReadWriteOnce"], "other"),
);

describe("isGuarded", () => {
  test("a pod controlled by a StatefulSet is guarded", () => {
    const g = isGuarded(pod("db-0", { sts: true }), undefined, none);
    assert.deepEqual(g, { guarded: true, why: "owned by a StatefulSet" });
  });

  test("a StatefulSet owner reference that is not the controller does not count", () => {
    const p = pod("x");
    p.metadata!.ownerReferences = [{ apiVersion: "apps/v1", kind: "StatefulSet", name: "db", uid: "u", controller: false }];
    assert.equal(isGuarded(p, undefined, none).guarded, false);
    p.metadata!.ownerReferences = [{ apiVersion: "apps/v1", kind: "ReplicaSet", name: "web", uid: "u", controller: true }];
    assert.equal(isGuarded(p, undefined, none).guarded, false);
  });

  test("a plain pod without volumes is not guarded", () => {
    const g = isGuarded(pod("web"), {}, claims);
    assert.equal(g.guarded, false);
    assert.match(g.why, /neither a StatefulSet pod nor/);
  });

  test("ReadWriteOnce and ReadWriteOncePod claims guard the pod", () => {
    const rwo = isGuarded(pod("a", { claims: ["data-rwo"] }), undefined, claims);
    assert.equal(rwo.guarded, true);
    assert.match(rwo.why, /data-rwo/);
    assert.equal(isGuarded(pod("b", { claims: ["data-rwop"] }), undefined, claims).guarded, true);
    assert.equal(isGuarded(pod("c", { claims: ["mixed"] }), undefined, claims).guarded, true, "any exclusive mode counts");
  });

  test("ReadWriteMany and ReadOnlyMany claims do not", () => {
    assert.equal(isGuarded(pod("a", { claims: ["shared-rwx"] }), undefined, claims).guarded, false);
    assert.equal(isGuarded(pod("b", { claims: ["shared-rox", "shared-rwx"] }), undefined, claims).guarded, false);
  });

  test("one exclusive claim among shared ones is enough", () => {
    assert.equal(isGuarded(pod("a", { claims: ["shared-rwx", "data-rwo"] }), undefined, claims).guarded, true);
  });

  test("a claim we cannot see counts as exclusive: when in doubt, guard", () => {
    const g = isGuarded(pod("a", { claims: ["not-in-cache"] }), undefined, claims);
    assert.equal(g.guarded, true);
    assert.match(g.why, /not-in-cache/);
  });

  test("claims are looked up in the pod's own namespace", () => {
    // other/other-ns-rwo is RWO; default/other-ns-rwo does not exist → unknown → guarded (fail safe).
    assert.equal(isGuarded(pod("a", { ns: "other", claims: ["other-ns-rwo"] }), undefined, claims).guarded, true);
    const shared = pvcMap(pvc("data", ["ReadWriteMany"], "other"), pvc("data", ["ReadWriteOnce"], "default"));
    assert.equal(isGuarded(pod("a", { ns: "other", claims: ["data"] }), undefined, shared).guarded, false);
    assert.equal(isGuarded(pod("a", { ns: "default", claims: ["data"] }), undefined, shared).guarded, true);
  });

  test("an ephemeral volume with an exclusive claim template guards the pod", () => {
    const g = isGuarded(pod("a", { ephemeral: ["ReadWriteOnce"] }), undefined, none);
    assert.equal(g.guarded, true);
    assert.match(g.why, /ephemeral volume scratch/);
    assert.equal(isGuarded(pod("b", { ephemeral: ["ReadWriteOncePod"] }), undefined, none).guarded, true);
    assert.equal(isGuarded(pod("c", { ephemeral: ["ReadWriteMany"] }), undefined, none).guarded, false);
  });

  test("emptyDir, hostPath and configMap volumes do not guard", () => {
    const p = pod("a");
    p.spec!.volumes = [
      { name: "tmp", emptyDir: {} },
      { name: "h", hostPath: { path: "/data" } },
      { name: "cm", configMap: { name: "cfg" } },
    ];
    assert.equal(isGuarded(p, undefined, none).guarded, false);
  });

  test(`label ${GUARDED_LABEL}=true opts any pod in, even with every policy switch off`, () => {
    const g = isGuarded(pod("web", { labels: { [GUARDED_LABEL]: "true" } }), { statefulSets: false, readWriteOnceVolumes: false }, none);
    assert.equal(g.guarded, true);
    assert.match(g.why, /opted in/);
  });

  test(`label ${GUARDED_LABEL}=false opts a StatefulSet pod with an RWO claim out`, () => {
    const g = isGuarded(pod("db-0", { sts: true, claims: ["data-rwo"], labels: { [GUARDED_LABEL]: "false" } }), undefined, claims);
    assert.equal(g.guarded, false);
    assert.match(g.why, /opted out/);
  });

  test("other label values are ignored", () => {
    assert.equal(isGuarded(pod("web", { labels: { [GUARDED_LABEL]: "yes" } }), undefined, none).guarded, false);
    assert.equal(isGuarded(pod("db-0", { sts: true, labels: { [GUARDED_LABEL]: "False" } }), undefined, none).guarded, true);
  });

  test("statefulSets: false stops guarding StatefulSet pods that hold no exclusive volume", () => {
    assert.equal(isGuarded(pod("db-0", { sts: true }), { statefulSets: false }, none).guarded, false);
    assert.equal(isGuarded(pod("db-0", { sts: true, claims: ["data-rwo"] }), { statefulSets: false }, claims).guarded, true);
  });

  test("readWriteOnceVolumes: false stops guarding by volume (claims, unknown claims and ephemeral ones)", () => {
    const off = { readWriteOnceVolumes: false };
    assert.equal(isGuarded(pod("a", { claims: ["data-rwo"] }), off, claims).guarded, false);
    assert.equal(isGuarded(pod("b", { claims: ["not-in-cache"] }), off, claims).guarded, false);
    assert.equal(isGuarded(pod("c", { ephemeral: ["ReadWriteOnce"] }), off, none).guarded, false);
    assert.equal(isGuarded(pod("db-0", { sts: true, claims: ["data-rwo"] }), off, claims).guarded, true, "still a StatefulSet pod");
  });

  test("both switches off: only the label guards", () => {
    const off = { statefulSets: false, readWriteOnceVolumes: false };
    assert.equal(isGuarded(pod("db-0", { sts: true, claims: ["data-rwo"] }), off, claims).guarded, false);
  });

  test("undefined switches default to on", () => {
    assert.equal(isGuarded(pod("db-0", { sts: true }), {}, none).guarded, true);
    assert.equal(isGuarded(pod("a", { claims: ["data-rwo"] }), {}, claims).guarded, true);
  });
});

describe("isFinished", () => {
  test("Succeeded and Failed pods are finished; Running, Pending and Unknown are not", () => {
    assert.equal(isFinished(pod("a", { phase: "Succeeded" })), true);
    assert.equal(isFinished(pod("a", { phase: "Failed" })), true);
    for (const phase of ["Running", "Pending", "Unknown"]) assert.equal(isFinished(pod("a", { phase })), false, phase);
    const p = pod("a");
    delete p.status;
    assert.equal(isFinished(p), false);
  });
});
