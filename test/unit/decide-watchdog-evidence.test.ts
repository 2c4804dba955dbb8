// WatchdogExpired's arithmetic (decide/watchdog-evidence.ts): the boundary to the millisecond, every input that must
// block it, the wait growing with the clock-rate drift, and the control-plane-doubt window that restarts the wait and
// never shortens it.
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import type { V1Lease } from "@kubernetes/client-node";
import { parseNodeAgentRecord, type ParsedRecord } from "../../src/decide/node-agent-record.ts";
import {
  CLOCK_RATE_DRIFT,
  DOUBT_FRACTION,
  doubtControlPlaneDownSeconds,
  FIXED_MARGIN_SECONDS,
  SILENCE_SLACK_SECONDS,
  advanceDoubtWindow,
  requiredWaitMs,
  startDoubtWindow,
  watchdogEvidence,
  type AgentSilence,
  type WatchdogEvidenceInput,
} from "../../src/decide/watchdog-evidence.ts";
import { checkAgentConfig, minControlPlaneDownSeconds } from "../../src/decide/isolation.ts";
import { agentRecord } from "./decide-fixtures.ts";

const recordLease = (name: string, o: { armed?: string; T?: string; D?: string; F?: string | null } = {}): V1Lease =>
  agentRecord(name, { ...o, holder: "agent-x", renewTime: new Date("2026-01-01T00:00:00Z") });

const T0 = 1_000_000;
const T0_WALL = "2026-01-01T00:00:10.000Z";

function input(o: Partial<WatchdogEvidenceInput> = {}): WatchdogEvidenceInput {
  const nowMs = o.nowMs ?? T0 + 68_000;
  return {
    node: "n1",
    record: parseNodeAgentRecord(recordLease("n1")),
    // In force: the record policy enforcing, the holder the node agent's pod on n1 (decide-record-authority.test.ts).
    authority: { policy: [] },
    t0Ms: T0,
    t0Wall: T0_WALL,
    window: startDoubtWindow(T0, T0_WALL),
    nowMs,
    kubeletSilentMs: nowMs - T0 + 20_000,
    recordSilentMs: nowMs - T0 + 15_000,
    ...o,
  };
}

describe("decide/watchdog-evidence: the arithmetic", () => {
  test("the constants are the documented ones", () => {
    assert.equal(CLOCK_RATE_DRIFT, 0.05);
    assert.equal(FIXED_MARGIN_SECONDS, 5);
    assert.equal(SILENCE_SLACK_SECONDS, 2);
    assert.equal(DOUBT_FRACTION, 1 / 3);
  });

  test("defaults: (30 + 30)·1.05 + 5 = 68 s after first sight; one ms short does not hold", () => {
    assert.equal(requiredWaitMs(30, 30), 68_000);
    const e = watchdogEvidence(input());
    assert.equal(e.holds, true);
    assert.deepEqual(e.arithmetic, {
      watchdogTimeoutSeconds: 30,
      deadlineSeconds: 30,
      clockRateDrift: 0.05,
      marginSeconds: 5,
      requiredSeconds: 68,
      observedSeconds: 68,
      firstSeen: T0_WALL,
      windowStart: T0_WALL,
      silentAgents: 0,
      agents: 0,
      windowRestarts: 0,
    });
    const short = watchdogEvidence(input({ nowMs: T0 + 67_999 }));
    assert.equal(short.holds, false);
    assert.match(short.holds ? "" : short.reason, /67\.999 s of \(30 \+ 30\)·\(1 \+ 0\.05\) \+ 5 = 68 s/);
  });

  test("the required wait grows with ρ and is never rounded down", () => {
    let last = 0;
    for (const rho of [0, 0.01, 0.05, 0.1, 0.5]) {
      const r = requiredWaitMs(30, 30, rho);
      assert.ok(r > last, `ρ ${rho}`);
      assert.ok(r >= (60 * (1 + rho) + 5) * 1000 - 1e-9);
      last = r;
    }
    assert.equal(requiredWaitMs(7, 3, 0.05, 0), 10_500);
    assert.equal(requiredWaitMs(1, 0, 0.0001, 0), 1_001); // 1000.1 ms, rounded up
    const at68 = watchdogEvidence(input({ clockRateDrift: 0.1 }));
    assert.equal(at68.holds, false, "at 68 s, ρ = 0.1 needs 71 s");
    assert.equal(watchdogEvidence(input({ clockRateDrift: 0.1, nowMs: T0 + 71_000 })).holds, true);
    assert.equal(watchdogEvidence(input({ clockRateDrift: 1 })).holds, false);
    assert.equal(watchdogEvidence(input({ marginSeconds: -1 })).holds, false);
  });

  test("each input that must block it", () => {
    const blocked = (o: Partial<WatchdogEvidenceInput>, re: RegExp) => {
      const e = watchdogEvidence(input({ nowMs: T0 + 600_000, ...o }));
      assert.equal(e.holds, false, String(re));
      assert.match(e.holds ? "" : e.reason, re);
    };
    blocked({ record: undefined }, /no node agent record.*next level/);
    blocked({ record: parseNodeAgentRecord(recordLease("n1", { armed: "false" })) }, /not armed.*next level/);
    blocked({ record: parseNodeAgentRecord(recordLease("n1", { armed: "yes" })) }, /not usable: .*armed is "yes"/);
    blocked({ record: parseNodeAgentRecord(recordLease("n1", { T: "0" })) }, /not usable: .*watchdog-timeout-seconds/);
    blocked({ record: parseNodeAgentRecord(recordLease("n1", { D: "" })) }, /not usable: .*deadline-seconds/);
    blocked({ record: parseNodeAgentRecord(recordLease("n2")) }, /n2's, not n1's/);
    blocked({ kubeletSilentMs: undefined }, /kubelet Lease was renewed/);
    blocked({ kubeletSilentMs: 600_000 - 1 }, /kubelet Lease was renewed/);
    blocked({ recordSilentMs: undefined }, /agent record was renewed/);
    blocked({ recordSilentMs: 600_000 - 1 }, /agent record was renewed/);
    assert.equal(watchdogEvidence(input({ nowMs: T0 + 600_000, kubeletSilentMs: 600_000, recordSilentMs: 600_000 })).holds, true);
    const bad: ParsedRecord = { ok: false, node: "n1", problem: "the record has no name" };
    blocked({ record: bad }, /the record has no name/);
  });

  test("a restarted operator (t0 its own first sight, silences counted from its sync) waits again", () => {
    // The node went silent long before; this operator saw the NodeFence at T0 and the Leases since it synced, T0 - 1 s.
    assert.equal(watchdogEvidence(input({ nowMs: T0 + 60_000, kubeletSilentMs: 61_000, recordSilentMs: 61_000 })).holds, false);
    assert.equal(watchdogEvidence(input({ nowMs: T0 + 68_000, kubeletSilentMs: 69_000, recordSilentMs: 69_000 })).holds, true);
  });
});

describe("decide/watchdog-evidence: the control-plane-doubt window", () => {
  const silences = (ms: number[]): AgentSilence[] => ms.map((silentMs, k) => ({ node: `p${k}`, silentMs }));

  test("with the least F an agent accepts, healthy agents renewing every c (plus under a second) raise no doubt; with F = c + 2 they all would", () => {
    const w0 = startDoubtWindow(T0, T0_WALL);
    for (const c of [1, 2, 5, 10]) {
      const healthy = silences([c * 1000 + 900, c * 1000 + 500, c * 1000]);
      const ok = advanceDoubtWindow(w0, "n1", healthy, T0 + 20_000, "x", minControlPlaneDownSeconds(c));
      assert.equal(ok.silentAgents, 0, `c = ${c} s, F = ${minControlPlaneDownSeconds(c)} s`);
      assert.equal(ok.startMs, T0);
      assert.deepEqual(
        checkAgentConfig(c + 1, 1, 600, minControlPlaneDownSeconds(c + 1), 1),
        [],
        `F = ${minControlPlaneDownSeconds(c + 1)} s accepted with c = ${c + 1} s`,
      );
      // One second less (what the agent refuses): every healthy agent looks silent, the window never closes.
      const never = advanceDoubtWindow(w0, "n1", healthy, T0 + 20_000, "x", c + SILENCE_SLACK_SECONDS);
      assert.equal(never.silentAgents, 3, `c = ${c} s, F = ${c + SILENCE_SLACK_SECONDS} s`);
      assert.match(checkAgentConfig(c + 1, 1, 600, c + 1 + SILENCE_SLACK_SECONDS, 1).join(), /watchdog evidence never holds/);
    }
  });

  test("a third or more of the other agents silent ≥ F − slack restarts the window at now", () => {
    const w0 = startDoubtWindow(T0, T0_WALL);
    const F = 10_000;
    const slack = SILENCE_SLACK_SECONDS * 1000;
    // 3 others, 1 silent ≥ 8 s: 1 ≥ 3/3 → doubt.
    let w = advanceDoubtWindow(w0, "n1", silences([F - slack, 0, 500]), T0 + 20_000, "2026-01-01T00:00:30.000Z");
    assert.equal(w.startMs, T0 + 20_000);
    assert.equal(w.startWall, "2026-01-01T00:00:30.000Z");
    assert.deepEqual([w.silentAgents, w.agents, w.restarts], [1, 3, 1]);
    // one ms under F − slack: no doubt.
    w = advanceDoubtWindow(w0, "n1", silences([F - slack - 1, 0, 500]), T0 + 20_000, "x");
    assert.equal(w.startMs, T0);
    // 1 of 4 silent: under a third.
    w = advanceDoubtWindow(w0, "n1", silences([60_000, 0, 0, 0]), T0 + 20_000, "x");
    assert.equal(w.startMs, T0);
    assert.deepEqual([w.silentAgents, w.agents], [1, 4]);
    // 2 of 6: exactly a third.
    w = advanceDoubtWindow(w0, "n1", silences([60_000, 9_000, 0, 0, 0, 0]), T0 + 20_000, "x");
    assert.equal(w.startMs, T0 + 20_000);
    // the fenced node's own record is not counted (it is silent: it is the one fenced).
    w = advanceDoubtWindow(w0, "n1", [{ node: "n1", silentMs: 60_000 }, ...silences([0, 0])], T0 + 20_000, "x");
    assert.equal(w.startMs, T0);
    assert.equal(w.agents, 2);
    // a silence that cannot be measured counts as silent.
    w = advanceDoubtWindow(w0, "n1", silences([Number.NaN, 0]), T0 + 20_000, "x");
    assert.equal(w.startMs, T0 + 20_000);
    // a record a restarted operator has not yet seen renewed counts as silent (its silence may be older than the look).
    w = advanceDoubtWindow(
      w0,
      "n1",
      [{ node: "p0", silentMs: 1_000, unseen: true }, ...silences([0, 0]).map((x) => ({ ...x, node: `q${x.node}` }))],
      T0 + 20_000,
      "x",
    );
    assert.equal(w.startMs, T0 + 20_000);
    // a larger F (an agent fleet configured so) needs longer silences.
    w = advanceDoubtWindow(w0, "n1", silences([9_000, 0]), T0 + 20_000, "x", 20);
    assert.equal(w.startMs, T0);
  });

  test("the users' worked example: 2 of 6 other agents silent 8 s, 20 s after t0: 88 s after t0 at the earliest", () => {
    const w = advanceDoubtWindow(
      startDoubtWindow(T0, T0_WALL),
      "n1",
      silences([8_000, 8_000, 0, 0, 0, 0]),
      T0 + 20_000,
      "2026-01-01T00:00:30.000Z",
    );
    const at = (s: number) => watchdogEvidence(input({ nowMs: T0 + s, window: w, kubeletSilentMs: s, recordSilentMs: s })).holds;
    assert.equal(at(68_000), false);
    assert.equal(at(87_999), false);
    assert.equal(at(88_000), true);
  });

  test("a majority vote with up to a sixth of the agents lying still leaves a third silent: doubt", () => {
    for (let m = 1; m <= 60; m++) {
      const liars = Math.floor(m / 6);
      const votes = Math.floor(m / 2) + 1; // the least strict majority of m peers
      const honest = votes - liars; // their records are not renewed: silent
      const w = advanceDoubtWindow(
        startDoubtWindow(T0, T0_WALL),
        "n1",
        silences(Array.from({ length: m }, (_, k) => (k < honest ? 8_000 : 0))),
        T0 + 1,
        "x",
      );
      assert.equal(w.startMs, T0 + 1, `m ${m}, ${liars} lying`);
    }
  });

  test("the window never moves earlier, and a restart makes the evidence wait from it", () => {
    let w = startDoubtWindow(T0, T0_WALL);
    w = advanceDoubtWindow(w, "n1", silences([60_000]), T0 + 30_000, "2026-01-01T00:00:40.000Z");
    const back = advanceDoubtWindow(w, "n1", silences([60_000]), T0 + 10_000, "earlier");
    assert.equal(back.startMs, T0 + 30_000, "a look with an earlier now does not move it back");
    assert.equal(back.startWall, "2026-01-01T00:00:40.000Z");
    const quiet = advanceDoubtWindow(w, "n1", silences([0]), T0 + 40_000, "y");
    assert.equal(quiet.startMs, T0 + 30_000, "doubt ending does not shorten the wait");
    const at = (nowMs: number) =>
      watchdogEvidence(input({ nowMs, window: quiet, kubeletSilentMs: nowMs - T0, recordSilentMs: nowMs - T0 }));
    const before = at(T0 + 30_000 + 67_999);
    assert.equal(before.holds, false);
    assert.match(before.holds ? "" : before.reason, /counted from 2026-01-01T00:00:40.000Z, when 0 of 1 other agents/);
    const after = at(T0 + 30_000 + 68_000);
    assert.equal(after.holds, true);
    assert.equal(after.arithmetic.windowStart, "2026-01-01T00:00:40.000Z");
    assert.equal(after.arithmetic.firstSeen, T0_WALL);
    assert.equal(after.arithmetic.windowRestarts, 1);
  });

  test("random looks: the window start only grows, and the wait is never shorter than from t0", () => {
    let seed = 7;
    const r = () => (seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31;
    let w = startDoubtWindow(T0, T0_WALL);
    let now = T0;
    for (let k = 0; k < 2_000; k++) {
      now += Math.floor(r() * 3_000);
      const prev = w.startMs;
      const obs = silences(Array.from({ length: 1 + Math.floor(r() * 9) }, () => (r() < 0.2 ? r() * 30_000 : r() * 3_000)));
      w = advanceDoubtWindow(w, "n1", obs, now, `w${k}`);
      assert.ok(w.startMs >= prev);
      const e = watchdogEvidence(input({ nowMs: now, window: w, kubeletSilentMs: now - T0, recordSilentMs: now - T0 }));
      if (e.holds) assert.ok(now - w.startMs >= 68_000 && now - T0 >= 68_000);
    }
  });
});

describe("decide/watchdog-evidence: F travels in the records", () => {
  test("a record without control-plane-down-seconds is refused, naming the annotation", () => {
    const r = parseNodeAgentRecord(recordLease("n1", { F: null }));
    assert.equal(r.ok, false);
    assert.match(r.ok ? "" : r.problem, /control-plane-down-seconds must be a whole number of seconds, 1-600/);
    assert.equal(parseNodeAgentRecord(recordLease("n1", { F: "0" })).ok, false);
  });
  test("the doubt window uses the smallest F any valid record states; none valid: the default", () => {
    const recs = [recordLease("a", { F: "12" }), recordLease("b", { F: "6" }), recordLease("c", { F: null })].map(parseNodeAgentRecord);
    assert.equal(doubtControlPlaneDownSeconds(recs), 6);
    assert.equal(doubtControlPlaneDownSeconds([parseNodeAgentRecord(recordLease("c", { F: null }))]), 10);
    assert.equal(doubtControlPlaneDownSeconds([]), 10);
  });
});
