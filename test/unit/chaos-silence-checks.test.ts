// The outages mode's check (lab/chaos/silence-checks.ts): a clean history passes, and each way of powering off a node
// that was not silent while the operator could see is reported, so the check cannot pass whatever happened.
import { test } from "node:test";
import assert from "node:assert/strict";
import {
  checkSilentBeforePowerOff,
  outagesFrom,
  powerOffsFrom,
  renewalsFrom,
  silenceViolations,
  type Renewal,
} from "../../lab/chaos/silence-checks.ts";
import type { AuditEvent } from "../../lab/audit.ts";
import type { LabEvent } from "../../lab/state.ts";

const T0 = Date.parse("2026-12-02T12:00:00Z");
const ms = (s: number) => T0 + s * 1000;
const t = (s: number) => new Date(ms(s)).toISOString();
const ev = (s: number, kind: LabEvent["kind"], node: string | undefined, detail: Record<string, unknown>): LabEvent => ({
  time: t(s),
  kind,
  ...(node ? { node } : {}),
  detail,
});
const L = 8_000;
/** A kubelet renewing every 2 s from `from` to `to` (seconds). */
const renewing = (node: string, from: number, to: number): Renewal[] =>
  Array.from({ length: Math.floor((to - from) / 2) + 1 }, (_, i) => ({ node, timeMs: ms(from + 2 * i) }));
const powerOff = (s: number, node: string, source = "bmc") => ev(s, "power", node, { power: "off", source });
const apiserverDown = (s: number) => ev(s, "fault", undefined, { fault: "component-stopped", component: "kube-apiserver" });
const apiserverUp = (s: number) => ev(s, "lab", undefined, { action: "component-started", component: "kube-apiserver" });
const etcdCut = (s: number, cut: boolean) => ev(s, "fault", undefined, { fault: "apiserver-etcd-partition", cut });

test("a clean history: the node cut off at 10 s, silent since, powered off at 30 s; another node renewing all along", () => {
  const events = [ev(10, "partition", "n1", {}), powerOff(30, "n1")];
  const renewals = [...renewing("n1", 0, 10), ...renewing("n2", 0, 40)];
  assert.deepEqual(silenceViolations(events, renewals, L, T0), []);
});

test("a power-off of a node that renewed within the Lease before it is reported", () => {
  const out = silenceViolations([powerOff(30, "n1")], renewing("n1", 0, 26), L, T0);
  assert.equal(out.length, 1);
  assert.match(out[0]!, /n1: powered off at .* although its kubelet renewed its Lease 4\.0 s before \(Lease 8 s\)/);
  // Another node's renewals say nothing about n1.
  assert.deepEqual(silenceViolations([powerOff(30, "n1")], renewing("n2", 0, 30), L, T0), []);
});

test("issue 41's trigger: an outage every kubelet missed renewals in, the node powered off as soon as it ends, is reported", () => {
  // The apiserver stopped from 10 s to 55 s; n1 renews until 10 s and again from 57 s. A powered-off n1 at 56 s (an
  // operator counting the outage as n1's silence) saw no renewal in the last 8 s, yet it was never silent while seen.
  const events = [apiserverDown(10), apiserverUp(55), powerOff(56, "n1")];
  const renewals = [...renewing("n1", 0, 10), ...renewing("n1", 57, 80)];
  const out = silenceViolations(events, renewals, L, T0);
  assert.equal(out.length, 1, out.join("\n"));
  assert.match(
    out[0]!,
    /n1: powered off at .*, 1\.0 s after the end of a control-plane outage \(kube-apiserver down from .*\): its silence since the operator could see again is under the Lease's 8 s/,
  );
  // The same with etcd cut from the apiserver, and with the power-off inside the outage.
  assert.equal(silenceViolations([etcdCut(10, true), etcdCut(55, false), powerOff(60, "n1")], renewing("n1", 0, 10), L, T0).length, 1);
  assert.match(
    silenceViolations([etcdCut(10, true), powerOff(30, "n1")], renewing("n1", 0, 10), L, T0)[0]!,
    /during a control-plane outage \(kube-apiserver cut from etcd/,
  );
  // A node really gone (silent past the outage's end by more than a Lease) may be powered off.
  assert.deepEqual(silenceViolations([apiserverDown(10), apiserverUp(55), powerOff(64, "n1")], renewing("n1", 0, 10), L, T0), []);
  // An outage that ended more than a Lease before the silence began does not matter.
  assert.deepEqual(silenceViolations([apiserverDown(0), apiserverUp(20), powerOff(50, "n1")], renewing("n1", 20, 40), L, T0), []);
});

test("a power cycle by the runner (someone at the BMC) is not the operator's; a watchdog reset is not a BMC power-off", () => {
  const cycle = ev(29, "fault", "n1", { fault: "power-cycle" });
  assert.deepEqual(powerOffsFrom([cycle, powerOff(30, "n1")]), []);
  assert.deepEqual(powerOffsFrom([powerOff(30, "n1", "watchdog")]), []);
  // A cycle of another node, or long before, explains nothing.
  assert.equal(powerOffsFrom([ev(29, "fault", "n2", { fault: "power-cycle" }), powerOff(30, "n1")]).length, 1);
  assert.equal(powerOffsFrom([ev(0, "fault", "n1", { fault: "power-cycle" }), powerOff(30, "n1")]).length, 1);
  // Power-offs before the schedule began are an earlier schedule's business.
  assert.deepEqual(silenceViolations([powerOff(-5, "n1")], renewing("n1", -20, -5), L, T0), []);
});

test("outages are read from the lab's record: killed, stopped or restarted apiserver, the etcd cut; one not over stays open", () => {
  const o = outagesFrom([
    ev(0, "fault", undefined, { fault: "component-killed", component: "kube-apiserver" }),
    apiserverUp(20),
    ev(30, "lab", undefined, { action: "apiserver-stopped" }),
    ev(31, "lab", undefined, { action: "apiserver-started" }),
    ev(32, "fault", undefined, { fault: "component-killed", component: "kube-controller-manager" }),
    etcdCut(40, true),
    etcdCut(45, false),
    etcdCut(46, false), // the recovery mends a cable that is not cut: no outage
    etcdCut(50, true),
  ]);
  assert.deepEqual(
    o.map((x) => [x.what, (x.startMs - T0) / 1000, x.endMs === undefined ? undefined : (x.endMs - T0) / 1000]),
    [
      ["kube-apiserver down", 0, 20],
      ["kube-apiserver down", 30, 31],
      ["kube-apiserver cut from etcd", 40, 45],
      ["kube-apiserver cut from etcd", 50, undefined],
    ],
  );
});

test("renewals are the kubelet's own committed Lease writes from the audit log", () => {
  const a = (o: Partial<AuditEvent> & { name?: string }): AuditEvent => ({
    stage: "ResponseComplete",
    verb: "update",
    user: { username: `system:node:${o.name ?? "n1"}` },
    objectRef: { resource: "leases", namespace: "kube-node-lease", name: o.name ?? "n1" },
    responseStatus: { code: 200 },
    requestReceivedTimestamp: t(10),
    stageTimestamp: "2026-12-02T12:00:10.250000Z",
    ...o,
  });
  assert.deepEqual(renewalsFrom([a({})]), [{ node: "n1", timeMs: ms(10.25) }]);
  assert.deepEqual(renewalsFrom([a({ verb: "create", responseStatus: { code: 201 } })]).length, 1);
  for (const bad of [
    a({ responseStatus: { code: 504 } }), // etcd cut: the write timed out
    a({ verb: "get" }),
    a({ user: { username: "system:node:n2" } }), // another writer (NodeRestriction would refuse it anyway)
    a({ user: { username: "stockade-operator" } }),
    a({ objectRef: { resource: "leases", namespace: "stockade-system", name: "n1" } }),
  ])
    assert.deepEqual(renewalsFrom([bad]), [], JSON.stringify(bad));
});

test("the two rules over explicit inputs: each renewal and each outage is judged against the Lease", () => {
  const off = [{ node: "n1", timeMs: ms(100) }];
  assert.deepEqual(checkSilentBeforePowerOff(off, [{ node: "n1", timeMs: ms(91.9) }], [], L), []);
  assert.equal(checkSilentBeforePowerOff(off, [{ node: "n1", timeMs: ms(92) }], [], L).length, 1, "a renewal exactly L before");
  assert.equal(checkSilentBeforePowerOff(off, [], [{ what: "x", startMs: ms(50), endMs: ms(93) }], L).length, 1);
  assert.deepEqual(checkSilentBeforePowerOff(off, [], [{ what: "x", startMs: ms(50), endMs: ms(91) }], L), []);
  assert.deepEqual(checkSilentBeforePowerOff(off, [], [{ what: "x", startMs: ms(101), endMs: undefined }], L), [], "an outage after");
});
