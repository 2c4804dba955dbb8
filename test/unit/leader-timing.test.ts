// The leader-election timing rules, driven by an explicit clock: a leader stops before any other
// replica can take over, whatever the wall clock does; a follower waits a whole lease duration of its
// own monotonic time after the last change it saw.
import { test } from "node:test";
import assert from "node:assert/strict";
import {
  DEFAULT_TIMING,
  decide,
  elapsedAtLeast,
  leadershipLeftMs,
  mayAct,
  observe,
  timingProblem,
  type Instant,
  type LeaseRecord,
  type Observation,
} from "../../src/runtime/leader-timing.ts";

const t = DEFAULT_TIMING; // 15 s lease, 10 s renew deadline, 2 s retry
const at = (mono: number, wall = 1_700_000_000_000 + mono): Instant => ({ mono, wall });
const rec = (holder: string, version: string, transitions = 3, leaseDurationSeconds = 15): LeaseRecord => ({
  holder,
  version,
  transitions,
  leaseDurationSeconds,
});

test("elapsed time is the larger of the monotonic and wall-clock deltas", () => {
  assert.equal(elapsedAtLeast(at(0), at(5_000)), 5_000);
  // Wall clock set back an hour: the monotonic clock still counts.
  assert.equal(elapsedAtLeast(at(0), { mono: 5_000, wall: at(0).wall - 3_600_000 }), 5_000);
  // Process suspended (monotonic clock stopped) while real time passed: the wall clock counts.
  assert.equal(elapsedAtLeast(at(0), { mono: 100, wall: at(0).wall + 60_000 }), 60_000);
});

test("a leader may act until retryPeriod before its renew deadline, and leads until the deadline", () => {
  const sent = at(1_000);
  assert.equal(leadershipLeftMs(sent, at(1_000), t), 10_000);
  assert.ok(mayAct(sent, at(8_999), t), "7.999 s after the renew was sent");
  assert.ok(!mayAct(sent, at(9_000), t), "8 s after: less than the 2 s margin left");
  assert.ok(leadershipLeftMs(sent, at(10_999), t) > 0);
  assert.ok(leadershipLeftMs(sent, at(11_000), t) <= 0, "over 10 s after the renew was sent");
  // A wall clock set back does not extend it; one set forward ends it early (the safe direction).
  assert.ok(leadershipLeftMs(sent, { mono: 11_000, wall: sent.wall - 86_400_000 }, t) <= 0);
  assert.ok(!mayAct(sent, { mono: 2_000, wall: sent.wall + 20_000 }, t));
});

test("decide: create, renew our own, take a released Lease, wait for another holder's to expire", () => {
  const base = { identity: "me", timing: t, now: at(0) };
  assert.deepEqual(decide({ ...base, record: undefined, observation: undefined, leading: false }), { kind: "create" });
  const mine = rec("me", "v1");
  assert.deepEqual(decide({ ...base, record: mine, observation: observe(undefined, mine, at(0)), leading: true }), { kind: "renew" });
  // Ours but we do not lead (an acquisition that answered too late to act on): take it again, new epoch.
  assert.deepEqual(decide({ ...base, record: mine, observation: observe(undefined, mine, at(0)), leading: false }), {
    kind: "acquire",
    transitions: 4,
  });
  const released = rec("", "v2", 7, 1);
  assert.deepEqual(decide({ ...base, record: released, observation: observe(undefined, released, at(0)), leading: false }), {
    kind: "acquire",
    transitions: 8,
  });
});

test("another holder's Lease expires a lease duration after we first saw its current record, on our monotonic clock", () => {
  const theirs = rec("other", "v1");
  let obs: Observation | undefined = observe(undefined, theirs, at(0));
  const d = (now: Instant, record = theirs) => {
    obs = observe(obs, record, now);
    return decide({ identity: "me", timing: t, record, observation: obs, leading: false, now });
  };
  assert.deepEqual(d(at(14_999)), { kind: "wait", holder: "other", expiresInMs: 1 });
  // A wall clock that jumped a day ahead does not make it expire.
  assert.equal(d({ mono: 14_999, wall: at(0).wall + 86_400_000 }).kind, "wait");
  // A renewal (new version) restarts the wait from when we saw it.
  assert.equal(d(at(14_000, 0), rec("other", "v2")).kind, "wait");
  assert.equal(obs.at.mono, 14_000);
  assert.equal(d(at(28_999), rec("other", "v2")).kind, "wait");
  assert.deepEqual(d(at(29_000), rec("other", "v2")), { kind: "acquire", transitions: 4 });
  // A holder that declares a longer lease is waited for that long; a shorter one, our own duration.
  const long = rec("other", "v3", 3, 60);
  obs = observe(undefined, long, at(0));
  assert.equal(decide({ identity: "me", timing: t, record: long, observation: obs, leading: false, now: at(59_999) }).kind, "wait");
  const short = rec("other", "v4", 3, 1);
  obs = observe(undefined, short, at(0));
  assert.equal(decide({ identity: "me", timing: t, record: short, observation: obs, leading: false, now: at(14_999) }).kind, "wait");
});

test("the old leader has stopped before a follower can take over, for any request and read latency", () => {
  // The leader sends its last successful renew at S; the apiserver writes it at S + w; the follower's
  // read returns it at S + w + r (its observation time). The follower keeps reading the same record.
  for (const w of [0, 10, 1_000, 9_000])
    for (const r of [0, 5, 2_000]) {
      const S = at(100_000);
      const seen = at(S.mono + w + r);
      const record = rec("leader", `renew@${S.mono}`);
      const obs = observe(undefined, record, seen);
      let takeover = seen.mono;
      while (decide({ identity: "follower", timing: t, record, observation: obs, leading: false, now: at(takeover) }).kind === "wait")
        takeover += 1;
      let stop = S.mono;
      while (leadershipLeftMs(S, at(stop), t) > 0) stop += 1;
      let lastAct = S.mono;
      while (mayAct(S, at(lastAct + 1), t)) lastAct += 1;
      assert.ok(takeover - stop >= t.leaseDurationMs - t.renewDeadlineMs, `w=${w} r=${r}: stop ${stop}, takeover ${takeover}`);
      assert.ok(takeover - lastAct >= t.leaseDurationMs - t.renewDeadlineMs + t.retryPeriodMs, `w=${w} r=${r}: last act ${lastAct}`);
    }
});

test("timings that leave no margin are refused", () => {
  assert.equal(timingProblem(t), undefined);
  assert.match(
    timingProblem({ ...t, leaseDurationMs: 10_000 }) ?? "",
    /lease duration \(10 s\) must be longer than the renew deadline \(10 s\)/,
  );
  assert.match(timingProblem({ ...t, retryPeriodMs: 4_000 }) ?? "", /at least 3 × the retry period \(4 s\)/);
});
