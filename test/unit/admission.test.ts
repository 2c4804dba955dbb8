import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { X509Certificate } from "node:crypto";
import type { V1Pod } from "@kubernetes/client-node";
import {
  caBundleOf,
  issueCa,
  issueServing,
  readTlsSecret,
  renew,
  renewalNeeded,
  serialNumberHex,
} from "../../src/admission/certificates.ts";
import { gatePod } from "../../src/admission/claim-gate.ts";
import {
  FORCE_DELETE_ANNOTATION,
  checkForceDelete,
  effectiveGracePeriod,
  otherRemediator,
  type ForceDeleteFacts,
} from "../../src/admission/force-delete.ts";
import { CLAIM_GATE, CLAIM_GUARD_ANNOTATION } from "../../src/decide/claim-lock.ts";
import { GUARDED_LABEL } from "../../src/decide/guarded-pods.ts";
import { pod, pvc } from "./decide-fixtures.ts";

const on = { readWriteOnceVolumes: true };
const claims = new Map([
  ["data", pvc("data", ["ReadWriteOnce"])],
  ["shared", pvc("shared", ["ReadWriteMany"])],
]);
const lookup = (n: string) => claims.get(n);

function newPod(o: { claims?: string[]; labels?: Record<string, string> } = {}): V1Pod {
  const p = pod("app-0", { claims: o.claims, labels: o.labels });
  delete p.spec!.nodeName;
  delete p.status;
  return p;
}

describe("gatePod", () => {
  test("a pod with a guarded claim gets the gate (added to a list, or as the list)", () => {
    const a = gatePod(newPod({ claims: ["data"] }), lookup, on);
    assert.deepEqual(a, {
      allowed: true,
      gated: true,
      why: "data (ReadWriteOnce claim)",
      patch: [{ op: "add", path: "/spec/schedulingGates", value: [{ name: CLAIM_GATE }] }],
    });
    const p = newPod({ claims: ["data"] });
    p.spec!.schedulingGates = [{ name: "other.io/wait" }];
    assert.deepEqual((gatePod(p, lookup, on) as { patch: unknown }).patch, [
      { op: "add", path: "/spec/schedulingGates/-", value: { name: CLAIM_GATE } },
    ]);
  });

  test("no gate without a guarded claim, for a pod opted out, or when it already has it", () => {
    assert.equal((gatePod(newPod({ claims: ["shared"] }), lookup, on) as { gated: boolean }).gated, false);
    assert.equal((gatePod(newPod(), lookup, on) as { gated: boolean }).gated, false);
    assert.equal(
      (gatePod(newPod({ claims: ["data"], labels: { [GUARDED_LABEL]: "false" } }), lookup, on) as { gated: boolean }).gated,
      false,
    );
    const p = newPod({ claims: ["data"] });
    p.spec!.schedulingGates = [{ name: CLAIM_GATE }];
    assert.deepEqual((gatePod(p, lookup, on) as { patch: unknown }).patch, []);
  });

  test("a claim that does not exist yet gates the pod (fail closed)", () => {
    assert.equal((gatePod(newPod({ claims: ["later"] }), lookup, on) as { gated: boolean }).gated, true);
  });

  test("an opted-in shared claim gates; the claim annotation's old opt-out (false) no longer opts an exclusive one out", () => {
    const rwx = pvc("rwx", ["ReadWriteMany"]);
    rwx.metadata!.annotations = { [CLAIM_GUARD_ANNOTATION]: "true" };
    assert.equal((gatePod(newPod({ claims: ["rwx"] }), () => rwx, on) as { gated: boolean }).gated, true);
    const rwo = pvc("rwo", ["ReadWriteOnce"]);
    rwo.metadata!.annotations = { [CLAIM_GUARD_ANNOTATION]: "false" };
    assert.equal((gatePod(newPod({ claims: ["rwo"] }), () => rwo, on) as { gated: boolean }).gated, true);
  });

  test("a pod bound at creation (spec.nodeName) with a guarded claim is refused with the way out", () => {
    const p = newPod({ claims: ["data"] });
    p.spec!.nodeName = "node-1";
    const a = gatePod(p, lookup, on);
    assert.equal(a.allowed, false);
    assert.match(
      (a as { message: string }).message,
      /sets spec.nodeName \(node-1\).*nodeSelector or affinity.*stockade\.io\/guarded=false/,
    );
  });
});

describe("gatePod: claims a NodeFence holds (issue 41 item 3)", () => {
  const held = [{ claim: "data", user: "app-old", node: "node-1", phase: "Fencing" }];
  test("no live policy has the pod in scope, a held claim gates it all the same, saying why", () => {
    const a = gatePod(newPod({ claims: ["data", "shared"] }), lookup, undefined, held);
    assert.equal(a.allowed && a.gated, true);
    assert.match(
      (a as { why: string }).why,
      /^data \(pod app-old uses it on node node-1, whose NodeFence is Fencing: .*whatever the FencingPolicies say now\)$/,
    );
    assert.equal((gatePod(newPod({ claims: ["data"] }), lookup, undefined) as { gated: boolean }).gated, false, "nothing held: not gated");
  });
  test("a policy that guards the claim names its own reason; a pod bound at creation is refused; the opt-out label wins", () => {
    assert.equal((gatePod(newPod({ claims: ["data"] }), lookup, on, held) as { why: string }).why, "data (ReadWriteOnce claim)");
    const bound = newPod({ claims: ["data"] });
    bound.spec!.nodeName = "node-2";
    assert.equal(gatePod(bound, lookup, undefined, held).allowed, false);
    const out = newPod({ claims: ["data"], labels: { [GUARDED_LABEL]: "false" } });
    assert.equal((gatePod(out, lookup, undefined, held) as { gated: boolean }).gated, false);
  });
});

describe("checkForceDelete", () => {
  const T = new Date("2026-01-01T00:00:00Z");
  const terminated = (name: string) => ({
    name,
    image: "x",
    imageID: "",
    ready: false,
    restartCount: 0,
    state: { terminated: { exitCode: 0, finishedAt: T } },
  });
  const facts = (o: Partial<ForceDeleteFacts> = {}): ForceDeleteFacts => {
    const p = pod("db-0", { sts: true, node: "node-2" });
    p.metadata!.creationTimestamp = T;
    p.spec!.terminationGracePeriodSeconds = 30; // the apiserver's default
    return {
      pod: p,
      username: "alice",
      gracePeriodSeconds: 0,
      guarded: "owned by a StatefulSet",
      policy: "default",
      operatorUsers: ["system:serviceaccount:stockade-system:stockade"],
      nodeExists: true,
      nodeHeartbeats: false,
      fencedSince: undefined,
      ...o,
    };
  };

  test("a person's force delete of a guarded pod on an unfenced node is refused, naming the risk and the safe path", () => {
    const a = checkForceDelete(facts());
    assert.equal(a.allowed, false);
    const m = (a as { message: string }).message;
    assert.match(m, /refusing to force-delete pod default\/db-0/);
    assert.match(m, /two writers/);
    assert.match(m, /kubectl stockade fence node-2/);
    assert.match(m, new RegExp(FORCE_DELETE_ANNOTATION));
  });

  test("`kubectl stockade fence` is suggested only where a live policy selects the node; a fence under way is named instead", () => {
    const none = (checkForceDelete(facts({ policy: undefined })) as { message: string }).message;
    assert.doesNotMatch(none, /stockade fence/);
    assert.match(none, /refusing to force-delete pod default\/db-0: it is guarded by Stockade \(owned/);
    const fencing = (checkForceDelete(facts({ policy: undefined, fencePhase: "Fencing" })) as { message: string }).message;
    assert.doesNotMatch(fencing, /kubectl stockade fence/);
    assert.match(fencing, /Stockade is fencing node node-2 \(NodeFence node-2, phase Fencing\)/);
    assert.match((checkForceDelete(facts()) as { message: string }).message, /guarded by Stockade \(FencingPolicy default\)/);
  });

  test("issue 28 item 6: a grace-0 delete by FAR or SNR is refused too, naming the other remediator and what to disable", () => {
    const far = "system:serviceaccount:openshift-workload-availability:fence-agents-remediation-controller-manager";
    const snr = "system:serviceaccount:medik8s:self-node-remediation-controller-manager";
    for (const [username, name, template] of [
      [far, "Fence Agents Remediation \\(FAR\\)", "FenceAgentsRemediationTemplate"],
      [snr, "Self Node Remediation \\(SNR\\)", "SelfNodeRemediationTemplate"],
    ] as const) {
      const a = checkForceDelete(facts({ username }));
      assert.equal(a.allowed, false, `${username}: no silent allow inside the scope`);
      const m = (a as { message: string }).message;
      assert.match(m, new RegExp(`The request comes from ${username.replace(/[.]/g, "\\.")}, which looks like ${name}`));
      assert.match(m, new RegExp(`NodeHealthCheck's selector \\(or drop the ${template}`));
      assert.match(m, /docs\/pilot\.md/);
    }
    assert.equal(otherRemediator("alice"), undefined);
    assert.equal(otherRemediator("system:serviceaccount:x:fence-agents-remediation"), undefined, "the prefix, with its dash");
    assert.doesNotMatch((checkForceDelete(facts()) as { message: string }).message, /NodeHealthCheck/);
  });

  test("allowed: a graceful delete, an unguarded pod, a pod never scheduled, a finished pod", () => {
    assert.equal(checkForceDelete(facts({ gracePeriodSeconds: undefined })).allowed, true);
    assert.equal(checkForceDelete(facts({ gracePeriodSeconds: 30 })).allowed, true);
    assert.equal(checkForceDelete(facts({ guarded: undefined })).allowed, true);
    const unscheduled = facts();
    delete unscheduled.pod.spec!.nodeName;
    assert.equal(checkForceDelete(unscheduled).allowed, true);
    const done = facts({ nodeHeartbeats: true });
    done.pod.status = { phase: "Succeeded", containerStatuses: [terminated("c")] };
    assert.equal(checkForceDelete(done).allowed, true, "finished, as its heartbeating kubelet reports");
  });

  test("a Failed phase on a silent node is no proof: the pod GC controller writes it itself before its own force delete", () => {
    const gc = "system:serviceaccount:kube-system:pod-garbage-collector";
    // What pkg/controller/podgc markFailedAndDeletePod leaves: the phase patched, the kubelet's last report untouched.
    const marked = (o: Partial<ForceDeleteFacts> = {}) => {
      const f = facts(o);
      f.pod.status = { phase: "Failed", containerStatuses: [{ ...terminated("c"), state: { running: { startedAt: T } } }] };
      return f;
    };
    for (const username of [gc, "system:kube-controller-manager", "alice"]) {
      const a = checkForceDelete(marked({ username }));
      assert.equal(a.allowed, false, username);
      assert.match((a as { message: string }).message, /phase Failed proves nothing while node node-2 does not heartbeat/);
    }
    // Even where the node heartbeats, a container its kubelet last reported running is not stopped yet.
    assert.equal(checkForceDelete(marked({ username: gc, nodeHeartbeats: true })).allowed, false);
    assert.match((checkForceDelete(marked({ nodeHeartbeats: true })) as { message: string }).message, /container\(s\) c running/);
    // The phase without any container status (never started, or rejected by the kubelet) counts only with a heartbeat.
    const bare = facts({ username: gc });
    bare.pod.status = { phase: "Failed" };
    assert.equal(checkForceDelete(bare).allowed, false);
    assert.equal(checkForceDelete({ ...bare, nodeHeartbeats: true }).allowed, true);
    // A sidecar (restartable init container) still running keeps it alive too.
    const sidecar = facts({ nodeHeartbeats: true });
    sidecar.pod.status = { phase: "Succeeded", initContainerStatuses: [{ ...terminated("s"), state: { running: {} } }] };
    assert.equal(checkForceDelete(sidecar).allowed, false);
    // Once the node is confirmed fenced, the pod GC's retry goes through.
    assert.equal(checkForceDelete(marked({ username: gc, fencedSince: new Date("2026-01-01T00:05:00Z") })).allowed, true);
  });

  test("a delete that is immediate without asking for grace 0 is a force delete: the pod's own grace 0, or a Failed/Succeeded phase", () => {
    assert.equal(effectiveGracePeriod(undefined, facts().pod), 30, "the pod's own");
    const zero = facts({ gracePeriodSeconds: undefined });
    zero.pod.spec!.terminationGracePeriodSeconds = 0;
    assert.equal(effectiveGracePeriod(undefined, zero.pod), 0);
    const a = checkForceDelete(zero);
    assert.equal(a.allowed, false, "a plain delete (the taint manager's, the StatefulSet controller's) of a grace-0 pod");
    assert.match((a as { message: string }).message, /refusing to delete at once \(its effective grace period is 0\) pod default\/db-0/);
    assert.equal(checkForceDelete({ ...zero, gracePeriodSeconds: 10 }).allowed, true, "an explicit grace period wins over the pod's");
    // The apiserver deletes a Failed/Succeeded pod at once whatever grace period was asked (CheckGracefulDelete).
    for (const grace of [undefined, 30]) {
      const failed = facts({ gracePeriodSeconds: grace });
      failed.pod.status = { phase: "Failed" };
      assert.equal(effectiveGracePeriod(grace, failed.pod), 0);
      assert.equal(checkForceDelete(failed).allowed, false, `grace ${grace}`);
    }
    const negative = facts({ gracePeriodSeconds: -1 });
    assert.equal(effectiveGracePeriod(-1, negative.pod), 1, "negative becomes 1");
    assert.equal(checkForceDelete(negative).allowed, true);
  });

  test("allowed: Stockade itself, the pod's own kubelet — not another node's", () => {
    assert.equal(checkForceDelete(facts({ username: "system:serviceaccount:stockade-system:stockade" })).allowed, true);
    assert.equal(checkForceDelete(facts({ username: "system:node:node-2" })).allowed, true);
    assert.equal(checkForceDelete(facts({ username: "system:node:node-3" })).allowed, false);
  });

  test("a deleted Node proves nothing: the pod GC controller's delete of its pods is refused until the machine is fenced", () => {
    const gc = "system:serviceaccount:kube-system:pod-garbage-collector";
    for (const username of [gc, "system:kube-controller-manager", "alice"]) {
      const a = checkForceDelete(facts({ username, nodeExists: false }));
      assert.equal(a.allowed, false, username);
      assert.match((a as { message: string }).message, /its Node object is gone, which proves nothing \(a live kubelet re-creates it\)/);
    }
    assert.equal(checkForceDelete(facts({ username: gc, nodeExists: true })).allowed, false);
    assert.equal(checkForceDelete(facts({ username: gc, nodeExists: false, fencedSince: new Date("2026-01-01T00:05:00Z") })).allowed, true);
  });

  test("a confirmed fence allows it — for pods created before the confirmation only", () => {
    assert.equal(checkForceDelete(facts({ fencedSince: new Date("2026-01-01T00:05:00Z") })).allowed, true);
    assert.equal(checkForceDelete(facts({ fencedSince: new Date("2025-12-31T23:00:00Z") })).allowed, false);
  });

  test("the override annotation allows it and is reported for the Event", () => {
    const f = facts();
    f.pod.metadata!.annotations = { [FORCE_DELETE_ANNOTATION]: "node-2 is on fire, checked by hand" };
    assert.deepEqual(checkForceDelete(f), {
      allowed: true,
      why: `acknowledged by annotation ${FORCE_DELETE_ANNOTATION}`,
      acknowledged: "node-2 is on fire, checked by hand",
    });
  });
});

describe("webhook certificates", () => {
  const hosts = ["stockade-webhook.stockade-system.svc", "127.0.0.1"];
  const now = new Date("2026-06-01T00:00:00Z");
  const asSecret = (d: Record<string, string>) => ({
    data: Object.fromEntries(Object.entries(d).map(([k, v]) => [k, Buffer.from(v).toString("base64")])),
  });
  const fresh = renew({}, "ca", hosts, now);

  test("issues a CA and a serving certificate for every host, signed by it", () => {
    assert.equal(renewalNeeded({}, hosts, now)?.what, "ca");
    const data = readTlsSecret(asSecret(fresh));
    assert.equal(renewalNeeded(data, hosts, now), undefined);
    const cert = new X509Certificate(fresh["tls.crt"]!);
    assert.ok(cert.verify(new X509Certificate(fresh["ca.crt"]!).publicKey));
    assert.match(cert.subjectAltName ?? "", /DNS:stockade-webhook\.stockade-system\.svc/);
    assert.match(cert.subjectAltName ?? "", /IP Address:127\.0\.0\.1/);
    assert.equal(cert.ca, false);
  });

  test("renews the serving certificate near its end or when a host is missing, keeping the CA", () => {
    const data = readTlsSecret(asSecret(fresh));
    assert.equal(renewalNeeded(data, hosts, new Date("2027-05-15T00:00:00Z"))?.what, "serving");
    assert.match(renewalNeeded(data, [...hosts, "other.example"], now)?.why ?? "", /does not name other\.example/);
    const next = renew(data, "serving", hosts, now);
    assert.equal(next["ca.crt"], fresh["ca.crt"]);
    assert.notEqual(next["tls.crt"], fresh["tls.crt"]);
  });

  test("a renewed CA keeps the previous one trusted while it is valid", () => {
    const data = readTlsSecret(asSecret(fresh));
    const later = new Date("2035-08-01T00:00:00Z"); // less than a year left on the CA
    assert.equal(renewalNeeded(data, hosts, later)?.what, "ca");
    const next = renew(data, "ca", hosts, later);
    assert.equal(next["ca-previous.crt"], fresh["ca.crt"]);
    assert.equal(caBundleOf(next), `${next["ca.crt"]}${fresh["ca.crt"]}`);
  });

  test("every random serial is positive and minimally encoded: OpenSSL parses the CA and the serving certificate", () => {
    // `00` + random bytes beginning 0x00 0x00–0x7f was one certificate in 512 that OpenSSL refused ("illegal
    // padding"); a CA bundle holding it verified nothing (the CI failure of kube-connections.test.ts).
    for (const first of ["0000", "007f", "0080", "7fff", "8000", "ffff"]) {
      const serial = Buffer.from(first + "ab".repeat(14), "hex");
      const hex = serialNumberHex(serial);
      assert.match(hex, /^[4-7][0-9a-f]{31}$/, `from ${first}…`);
      const ca = issueCa(now, serial);
      const serving = issueServing(ca, hosts, now, serial);
      const caCert = new X509Certificate(ca.cert);
      assert.equal(caCert.serialNumber.toLowerCase(), hex);
      assert.ok(new X509Certificate(serving.cert).checkIssued(caCert), `serving certificate from ${first}… issued by its CA`);
    }
    assert.throws(() => serialNumberHex(Buffer.alloc(8)), /64 random bits/);
  });

  test("garbage or a mismatched key is renewed, never served", () => {
    assert.equal(renewalNeeded({ "ca.crt": "junk", "ca.key": "junk" }, hosts, now)?.what, "ca");
    const other = renew({}, "ca", hosts, now);
    const mixed = readTlsSecret(asSecret({ ...fresh, "tls.key": other["tls.key"]! }));
    assert.match(renewalNeeded(mixed, hosts, now)?.why ?? "", /tls.key does not match/);
  });
});
