// The chaos suite's watchdog-mode checks (lab/chaos/watchdog-checks.ts): each one passes on a history that keeps it and
// reports a history that breaks it, so none of them can pass whatever happened.
import { test } from "node:test";
import assert from "node:assert/strict";
import {
  checkDisabledNotReleased,
  checkUnexplainedResets,
  checkWatchdogReleases,
  watchdogViolations,
  type FenceSeen,
} from "../../lab/chaos/watchdog-checks.ts";
import type { LabEvent } from "../../lab/state.ts";

const T0 = Date.parse("2026-11-28T12:00:00Z");
const t = (s: number) => new Date(T0 + s * 1000).toISOString();
const ev = (s: number, kind: LabEvent["kind"], node: string | undefined, detail: Record<string, unknown>): LabEvent => ({
  time: t(s),
  kind,
  ...(node ? { node } : {}),
  detail,
});
const fence = (node: string, createdS: number, evidence: string | undefined, releasedS: number[]): FenceSeen => ({
  node,
  createdMs: T0 + createdS * 1000,
  evidence,
  releases: releasedS.map((s, i) => ({ kind: "Pod", name: `ledger-${i}`, timeMs: T0 + s * 1000 })),
});
const boot = (s: number, node: string, bootID: string) => ev(s, "boot", node, { bootID, source: "power" });
const reset = (s: number, node: string, bootID: string) => ev(s, "watchdog", node, { action: "reset", bootID });

test("(a) a release on WatchdogExpired after the node's reset passes; before it, or with no reset at all, is reported", () => {
  const events = [boot(0, "n1", "b1"), reset(40, "n1", "b1"), boot(42, "n1", "b2")];
  assert.deepEqual(checkWatchdogReleases([fence("n1", 20, "WatchdogExpired", [50])], events), []);
  const early = checkWatchdogReleases([fence("n1", 20, "WatchdogExpired", [35])], events);
  assert.equal(early.length, 1);
  assert.match(early[0]!, /n1: Pod ledger-0 released on WatchdogExpired .* with no reset, crash or power-off/);
  assert.equal(checkWatchdogReleases([fence("n1", 20, "WatchdogExpired", [50])], [boot(0, "n1", "b1")]).length, 1, "no reset at all");
  // A reset of an earlier boot (before the boot the fence found) proves nothing about this one.
  const old = [boot(0, "n1", "b1"), reset(5, "n1", "b1"), boot(8, "n1", "b2")];
  assert.equal(checkWatchdogReleases([fence("n1", 20, "WatchdogExpired", [50])], old).length, 1);
  // Another node's reset proves nothing about this one.
  assert.equal(checkWatchdogReleases([fence("n1", 20, "WatchdogExpired", [50])], [boot(0, "n1", "b1"), reset(40, "n2", "x")]).length, 1);
  // A crash or a power-off in the boot counts as the old writer gone; other evidence is not this check's business.
  assert.deepEqual(
    checkWatchdogReleases([fence("n1", 20, "WatchdogExpired", [50])], [boot(0, "n1", "b1"), ev(10, "crash", "n1", { hung: true })]),
    [],
  );
  assert.deepEqual(checkWatchdogReleases([fence("n1", 20, "WatchdogExpired", [50])], [ev(30, "power", "n1", { power: "off" })]), []);
  assert.deepEqual(checkWatchdogReleases([fence("n1", 20, "PowerOffConfirmed", [50])], []), []);
});

test("(b) a reset explained by a killed agent, a hang or a NodeFence passes; one after a control-plane outage or a node cut alone is reported", () => {
  const since = T0;
  const killed = [ev(5, "fault", "n2", { fault: "agent-killed", pids: [1] }), reset(16, "n2", "b1")];
  assert.deepEqual(checkUnexplainedResets(killed, [], since), []);
  assert.deepEqual(checkUnexplainedResets([ev(5, "crash", "n2", { hung: true }), reset(16, "n2", "b1")], [], since), []);
  assert.deepEqual(checkUnexplainedResets([reset(30, "n2", "b1")], [fence("n2", 10, undefined, [])], since), []);
  const cpDown = [ev(1, "fault", undefined, { fault: "component-killed", component: "kube-apiserver" }), reset(30, "n3", "b1")];
  const out = checkUnexplainedResets(cpDown, [], since);
  assert.equal(out.length, 1);
  assert.match(out[0]!, /n3: reset by its watchdog .* no fault that explains it/);
  // The cause must be on that node, and before the reset; a fence of the node created after it explains nothing.
  assert.equal(checkUnexplainedResets([ev(5, "fault", "n1", { fault: "agent-killed" }), reset(16, "n2", "b1")], [], since).length, 1);
  assert.equal(checkUnexplainedResets([reset(16, "n2", "b1"), ev(20, "crash", "n2", {})], [], since).length, 1);
  assert.equal(checkUnexplainedResets([reset(16, "n2", "b1")], [fence("n2", 20, undefined, [])], since).length, 1);
  assert.equal(
    checkUnexplainedResets([ev(2, "fault", "n2", { fault: "node-partition", peer: "n3" }), reset(16, "n2", "b1")], [], since).length,
    1,
  );
  // Resets before the schedule began are earlier schedules' business.
  assert.deepEqual(checkUnexplainedResets([reset(-5, "n2", "b1")], [], since), []);
});

test("(c) a node released on WatchdogExpired while its watchdog was disabled, or by a fence begun then, is reported", () => {
  const disabled = ev(10, "fault", "n4", { fault: "watchdog-disabled" });
  const enabled = ev(100, "lab", "n4", { action: "watchdog-enabled" });
  const during = checkDisabledNotReleased([fence("n4", 20, "WatchdogExpired", [60])], [disabled, enabled]);
  assert.equal(during.length, 1);
  assert.match(during[0]!, /n4: released on WatchdogExpired although its watchdog was disabled/);
  assert.equal(
    checkDisabledNotReleased([fence("n4", 20, "WatchdogExpired", [120])], [disabled, enabled]).length,
    1,
    "fence begun while disabled",
  );
  // Not released, released on other evidence, or fenced again after the watchdog came back: fine.
  assert.deepEqual(checkDisabledNotReleased([fence("n4", 20, "WatchdogExpired", [])], [disabled, enabled]), []);
  assert.deepEqual(checkDisabledNotReleased([fence("n4", 20, "ManualConfirmation", [60])], [disabled, enabled]), []);
  assert.deepEqual(checkDisabledNotReleased([fence("n4", 110, "WatchdogExpired", [150])], [disabled, enabled]), []);
  assert.deepEqual(checkDisabledNotReleased([fence("n1", 20, "WatchdogExpired", [60])], [disabled]), [], "another node's watchdog");
});

test("watchdogViolations runs all three", () => {
  const events = [ev(10, "fault", "n4", { fault: "watchdog-disabled" }), reset(30, "n3", "b1")];
  const v = watchdogViolations([fence("n4", 20, "WatchdogExpired", [60])], events, T0);
  assert.equal(v.length, 3, v.join("\n")); // (a) no reset of n4, (b) n3's reset unexplained, (c) n4 released while disabled
});
