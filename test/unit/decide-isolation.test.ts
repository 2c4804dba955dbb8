// The node agent's decision each check (decide/isolation.ts): each rule of its promise, and random event sequences
// (seeded, so a failing seed can be run again) over which it never feeds past the last "no fence" confirmation's
// start + D unless a strict majority of ALL its peers signed "unreachable ≥ F" in a round started within D, and stops
// feeding at once, for good, when a check sees a NodeFence.
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import {
  checkAgentConfig,
  decideIsolation,
  initialAgentState,
  mayFeed,
  nodeFenceVerdict,
  peerQuorum,
  shutdownAction,
  unreachableForSeconds,
  type AgentConfig,
  type AgentState,
  type OwnCheck,
  type PeerAnswer,
} from "../../src/decide/isolation.ts";
// A failing seed can be run again: the chaos schedules' generator (mulberry32).
import { prng as random } from "../../lab/chaos/schedule.ts";

const config = (peers = ["b", "c", "d", "e"]): AgentConfig => ({
  checkIntervalSeconds: 5,
  failedChecksBeforePeers: 2,
  deadlineSeconds: 30,
  controlPlaneDownSeconds: 10,
  peers,
});

const step = (state: AgentState, nowMs: number, own: OwnCheck, answers: PeerAnswer[] = [], cfg = config()) =>
  decideIsolation({ nowMs, config: cfg, state, own, answers });

const okAbsent = (startedMs: number): OwnCheck => ({ kind: "ok", nodeFence: "absent", startedMs });
const unreachable = (from: string, roundStartedMs: number, secs = 10): PeerAnswer => ({
  from,
  api: "unreachable",
  nodeFence: "unknown",
  unreachableForSeconds: secs,
  roundStartedMs,
});
const absent = (from: string, roundStartedMs: number): PeerAnswer => ({
  from,
  api: "reachable",
  nodeFence: "absent",
  unreachableForSeconds: 0,
  roundStartedMs,
});

describe("decide/isolation: the agent's promise", () => {
  test("feeds only until the START of the last 'no fence' check + D, not its end", () => {
    let d = step(initialAgentState(), 1_000, okAbsent(0)); // the GET took 1 s
    assert.equal(d.feed, true);
    assert.equal(d.feedUntilMs, 30_000);
    assert.equal(d.reason, "healthy");
    d = step(d.state, 29_999, { kind: "failed", startedMs: 25_000 });
    assert.equal(d.feed, true);
    d = step(d.state, 30_000, { kind: "none" });
    assert.equal(d.feed, false, "one ms past start + D: no feeding");
    assert.equal(mayFeed(d.feedUntilMs, 29_999), true);
    assert.equal(mayFeed(d.feedUntilMs, 30_000), false);
  });

  test("no confirmation yet: no feeding", () => {
    const d = step(initialAgentState(), 5_000, { kind: "none" });
    assert.equal(d.feed, false);
    assert.equal(d.feedUntilMs, undefined);
    assert.equal(d.reason, "deadline-passed");
  });

  test("a hung in-flight GET neither extends nor stops feeding before the deadline; then peers are asked", () => {
    let d = step(initialAgentState(), 0, okAbsent(0));
    d = step(d.state, 6_000, { kind: "in-flight", sinceMs: 5_000 });
    assert.equal(d.feedUntilMs, 30_000);
    assert.equal(d.feed, true);
    assert.equal(d.askPeers, false);
    d = step(d.state, 15_000, { kind: "in-flight", sinceMs: 5_000 });
    assert.equal(d.askPeers, true, "hung for N·c: ask the peers");
    assert.equal(d.feedUntilMs, 30_000, "still no extension");
    d = step(d.state, 31_000, { kind: "in-flight", sinceMs: 5_000 });
    assert.equal(d.feed, false);
  });

  test("an exception is not isolation: it neither extends, nor counts as an API failure, nor stops feeding early", () => {
    let d = step(initialAgentState(), 0, okAbsent(0));
    for (let t = 5_000; t < 30_000; t += 5_000) {
      d = step(d.state, t, { kind: "error", message: "ENOSPC" });
      assert.equal(d.feed, true);
      assert.equal(d.state.consecutiveApiFailures, 0);
      assert.equal(d.feedUntilMs, 30_000);
    }
  });

  test("N failed checks: ask peers; a known peer's signed 'absent' extends from its round's start", () => {
    let d = step(initialAgentState(), 0, okAbsent(0));
    d = step(d.state, 5_000, { kind: "failed", startedMs: 5_000 });
    assert.equal(d.askPeers, false);
    d = step(d.state, 10_000, { kind: "failed", startedMs: 10_000 });
    assert.equal(d.askPeers, true);
    assert.equal(d.reason, "api-lost-asking-peers");
    d = step(d.state, 12_000, { kind: "none" }, [absent("b", 10_500)]);
    assert.equal(d.feedUntilMs, 40_500);
    assert.equal(d.state.confirmedBy, "peer");
  });

  test("an answer from a peer not in the membership never extends", () => {
    let d = step(initialAgentState(), 0, okAbsent(0));
    d = step(d.state, 12_000, { kind: "failed", startedMs: 10_000 }, [
      absent("stranger", 11_000),
      unreachable("x", 11_000),
      unreachable("y", 11_000),
      unreachable("z", 11_000),
    ]);
    assert.equal(d.feedUntilMs, 30_000);
  });

  test("an answer for an older round extends only to that round's start + D; a start in the future never", () => {
    let d = step(initialAgentState(), 0, okAbsent(20_000 - 20_000));
    d = step(d.state, 40_000, { kind: "failed", startedMs: 40_000 }, [absent("b", 5_000)]);
    assert.equal(d.feedUntilMs, 35_000);
    assert.equal(d.feed, false);
    d = step(d.state, 40_000, { kind: "none" }, [absent("b", 60_000)]);
    assert.equal(d.feedUntilMs, 35_000);
    d = step(d.state, 40_000, okAbsent(41_000));
    assert.equal(d.feedUntilMs, 35_000, "an own check said to start after now is not trusted");
  });

  test("control plane down: a strict majority of ALL known peers, each unreachable ≥ F, in one round", () => {
    const s = step(initialAgentState(), 0, okAbsent(0)).state;
    const f = { kind: "failed", startedMs: 20_000 } as const;
    // 2 of 4 peers: not a strict majority.
    let d = step({ ...s, consecutiveApiFailures: 3 }, 21_000, f, [unreachable("b", 20_000), unreachable("c", 20_000)]);
    assert.equal(d.feedUntilMs, 30_000);
    // 3 of 4, but one for less than F.
    d = step({ ...s, consecutiveApiFailures: 3 }, 21_000, f, [
      unreachable("b", 20_000),
      unreachable("c", 20_000),
      unreachable("d", 20_000, 9),
    ]);
    assert.equal(d.feedUntilMs, 30_000);
    // 3 of 4, but in two rounds.
    d = step({ ...s, consecutiveApiFailures: 3 }, 21_000, f, [
      unreachable("b", 20_000),
      unreachable("c", 20_000),
      unreachable("d", 19_000),
    ]);
    assert.equal(d.feedUntilMs, 30_000);
    // the same peer three times is one vote.
    d = step({ ...s, consecutiveApiFailures: 3 }, 21_000, f, [
      unreachable("b", 20_000),
      unreachable("b", 20_000),
      unreachable("b", 20_000),
    ]);
    assert.equal(d.feedUntilMs, 30_000);
    // 3 of 4 in one round: stays up.
    d = step({ ...s, consecutiveApiFailures: 3 }, 21_000, f, [
      unreachable("b", 20_000),
      unreachable("c", 20_000),
      unreachable("d", 20_000),
    ]);
    assert.equal(d.feedUntilMs, 50_000);
    assert.equal(d.reason, "control-plane-down-majority");
  });

  test("a node with no peers is never kept up by peers; peers that do not answer are not votes", () => {
    let d = step(initialAgentState(), 0, okAbsent(0), [], config([]));
    d = step(d.state, 20_000, { kind: "failed", startedMs: 20_000 }, [unreachable("b", 20_000)], config([]));
    assert.equal(d.feedUntilMs, 30_000);
    assert.equal(d.askPeers, false);
    d = step(d.state, 31_000, { kind: "failed", startedMs: 30_000 }, [], config([]));
    assert.equal(d.reason, "isolated");
  });

  test("a fence seen by the own GET or a known peer stops feeding at once and for good", () => {
    let d = step(initialAgentState(), 0, okAbsent(0));
    d = step(d.state, 5_000, { kind: "ok", nodeFence: "fence", startedMs: 5_000 });
    assert.equal(d.feed, false);
    assert.ok(d.fenceNow);
    assert.equal(d.reason, "fence-requested");
    d = step(d.state, 10_000, okAbsent(10_000), [absent("b", 10_000)]);
    assert.equal(d.feed, false, "a later 'absent' does not resume feeding");
    assert.equal(d.fenceNow, undefined, "fenceNow only on the decision that saw it");
    let e = step(initialAgentState(), 0, okAbsent(0));
    e = step(e.state, 12_000, { kind: "failed", startedMs: 10_000 }, [{ ...absent("c", 10_000), nodeFence: "fence" }, absent("b", 10_000)]);
    assert.equal(e.feed, false);
    assert.match(e.fenceNow ?? "", /peer c/);
  });

  test("nodeFenceVerdict: only a NodeFence the operator has started stops the agent", () => {
    assert.equal(nodeFenceVerdict(undefined), "absent");
    assert.equal(nodeFenceVerdict({ metadata: { deletionTimestamp: "2026-01-01T00:00:00Z" }, status: { phase: "Fencing" } }), "absent");
    assert.equal(nodeFenceVerdict({ status: { phase: "Unfencing" } }), "absent");
    assert.equal(nodeFenceVerdict({ status: { phase: "Unfenced" } }), "absent");
    // Any phase past Pending counts, one this version does not know too (the operator's clock starts in Fencing).
    for (const phase of ["Fencing", "Fenced", "Releasing", "Released", "Failed", "SomeLaterPhase"])
      assert.equal(nodeFenceVerdict({ status: { phase } }), "fence", phase);
  });

  test("nodeFenceVerdict: a NodeFence the operator holds (no phase yet, or Pending) resets nothing", () => {
    // Held without a phase: no policy selects the node, or a control-plane/etcd node its policy does not allow (the
    // quorum guard). Pending: the operator may still cancel it (a paused policy, the trigger gone).
    assert.equal(nodeFenceVerdict({}), "absent", "created by hand, not started");
    assert.equal(nodeFenceVerdict({ status: {} }), "absent");
    assert.equal(nodeFenceVerdict({ status: { phase: "Pending" } }), "absent");
  });

  test("unreachableForSeconds: since the later of the last success's start and the last record renewal, rounded down", () => {
    assert.equal(unreachableForSeconds(0, 3_000, 12_999), 9, "the record landed 3 s after the check started: 9 s, not 12");
    assert.equal(unreachableForSeconds(5_000, 3_000, 15_000), 10);
    assert.equal(unreachableForSeconds(5_000, undefined, 15_999), 10);
    assert.equal(unreachableForSeconds(undefined, 3_000, 60_000), 0, "never a success: no vote");
    assert.equal(unreachableForSeconds(5_000, 5_000, 1_000), 0, "a clock that reads earlier: 0, not negative");
  });

  test("shutdownAction: disarm only while healthy; after the deadline, before any confirmation or after a fence, let it fire", () => {
    const cfg = config();
    const s = step(initialAgentState(), 0, okAbsent(0)).state;
    assert.equal(shutdownAction(s, cfg, 29_999), "disarm");
    assert.equal(shutdownAction(s, cfg, 30_000), "let-fire");
    assert.equal(shutdownAction(initialAgentState(), cfg, 0), "let-fire");
    const fenced = step(s, 1_000, { kind: "ok", nodeFence: "fence", startedMs: 1_000 }).state;
    assert.equal(shutdownAction(fenced, cfg, 1_000), "let-fire");
  });

  test("checkAgentConfig: D ≥ N·c + F + 2·peerTimeout, the bounds, the peer timeout under c", () => {
    assert.deepEqual(checkAgentConfig(5, 2, 30, 10, 3), []);
    assert.deepEqual(checkAgentConfig(5, 2, 26, 10, 3), []);
    const short = checkAgentConfig(5, 2, 25, 10, 3);
    assert.equal(short.length, 1);
    assert.match(short.join(), /26 s/);
    assert.match(checkAgentConfig(5, 2, 30, 10, 5).join(), /shorter than the check interval/);
    assert.match(checkAgentConfig(5, 2, 30, 4, 3).join(), /F \(4 s\)/);
    assert.match(checkAgentConfig(2, 1, 30, 4, 1).join(), /F \(4 s\) must be at least the check interval \+ 3 s = 5 s/);
    assert.deepEqual(checkAgentConfig(2, 1, 9, 5, 1), []);
    assert.match(checkAgentConfig(0, 2, 30, 10, 3).join(), /check interval/);
    assert.match(checkAgentConfig(5, 2, 601, 10, 3).join(), /deadline/);
    assert.match(checkAgentConfig(5, 2.5, 30, 10, 3).join(), /failed checks/);
  });
});

describe("decide/isolation: random sequences", () => {
  test("never feeds past the last 'no fence' start + D without a majority round within D; a fence stops it for good", () => {
    const peers = ["b", "c", "d", "e", "f"];
    const cfg = config(peers);
    const D = cfg.deadlineSeconds * 1000;
    for (let seed = 1; seed <= 300; seed++) {
      const r = random(seed);
      const pick = <T>(xs: readonly T[]): T => xs[Math.floor(r() * xs.length)]!;
      let state = initialAgentState();
      let now = 0;
      // The world's truth: a NodeFence created at fenceAt (maybe never); a read at t sees it iff t ≥ fenceAt.
      const fenceAt = r() < 0.5 ? 20_000 + r() * 200_000 : Infinity;
      let lastAbsentStart = -Infinity; // the latest start of a check whose answer said "absent"
      let lastMajority = -Infinity; // the latest round with a strict majority of all peers unreachable ≥ F
      let sawFence = false;
      for (let k = 0; k < 120; k++) {
        now += Math.floor(r() * 4_000);
        const start = now - Math.floor(r() * 6_000); // checks and rounds started up to 6 s before they are decided
        const readAt = start + r() * (now - start); // each read happens after its check started
        const fenced = readAt >= fenceAt;
        const ownKind = pick(["ok", "ok", "failed", "in-flight", "error", "none"] as const);
        const own: OwnCheck =
          ownKind === "ok"
            ? { kind: "ok", nodeFence: fenced ? "fence" : "absent", startedMs: start }
            : ownKind === "failed"
              ? { kind: "failed", startedMs: start }
              : ownKind === "in-flight"
                ? { kind: "in-flight", sinceMs: start }
                : ownKind === "error"
                  ? { kind: "error", message: "boom" }
                  : { kind: "none" };
        const answers: PeerAnswer[] = [];
        if (r() < 0.5)
          for (const p of [...peers, "stranger"]) {
            const roll = r();
            if (roll < 0.3) answers.push({ ...absent(p, start), nodeFence: fenced ? "fence" : "absent" });
            else if (roll < 0.7) answers.push(unreachable(p, start, Math.floor(r() * 20)));
          }
        const first = answers[0];
        if (r() < 0.1 && first) answers[0] = { ...first, roundStartedMs: start - r() * 60_000 }; // an old round
        const d = decideIsolation({ nowMs: now, config: cfg, state, own, answers });
        state = d.state;
        // The truth this step added.
        if (own.kind === "ok" && own.nodeFence === "fence") sawFence = true;
        if (own.kind === "ok" && own.nodeFence === "absent") lastAbsentStart = Math.max(lastAbsentStart, own.startedMs);
        const rounds = new Map<number, Set<string>>();
        for (const a of answers) {
          if (!peers.includes(a.from)) continue;
          if (a.nodeFence === "fence") sawFence = true;
          if (a.nodeFence === "absent" && a.api === "reachable") lastAbsentStart = Math.max(lastAbsentStart, a.roundStartedMs);
          if (a.api === "unreachable" && a.unreachableForSeconds >= 10)
            rounds.set(a.roundStartedMs, (rounds.get(a.roundStartedMs) ?? new Set()).add(a.from));
        }
        for (const [round, v] of rounds) if (2 * v.size > peers.length) lastMajority = Math.max(lastMajority, round);
        const why = `seed ${seed} step ${k} now ${now}`;
        if (sawFence) assert.equal(d.feed, false, `${why}: fed after a fence was seen`);
        if (d.feed) assert.ok(now < lastAbsentStart + D || now < lastMajority + D, `${why}: fed past every confirmation + D`);
        if (d.feed && now >= fenceAt + D)
          assert.ok(now < lastMajority + D, `${why}: fed past the NodeFence's creation + D without a majority`);
        if (d.feedUntilMs !== undefined) assert.ok(d.feedUntilMs <= Math.max(lastAbsentStart, lastMajority) + D, why);
      }
    }
  });
});

describe("decide/isolation: peers' 'no NodeFence' needs a quorum of ⌊n/6⌋ + 1", () => {
  const twelve = ["p1", "p2", "p3", "p4", "p5", "p6", "p7", "p8", "p9", "p10", "p11", "p12"];
  test("the quorum by membership size", () => {
    assert.deepEqual([1, 5, 6, 11, 12, 18].map(peerQuorum), [1, 1, 2, 2, 3, 4]);
  });
  test("with 12 known peers, 2 vouching peers do not extend feeding, 3 of the same round do", () => {
    const cfg = config(twelve);
    const lost = step(initialAgentState(), 1_000, okAbsent(0), [], cfg).state; // confirmed at 0: feeds until 30 s
    let d = step(lost, 20_000, { kind: "failed", startedMs: 19_000 }, [absent("p1", 18_000), absent("p2", 18_000)], cfg);
    assert.equal(d.feedUntilMs, 30_000, "two vouchers (q = 3): no extension");
    d = step(lost, 20_000, { kind: "failed", startedMs: 19_000 }, [absent("p1", 18_000), absent("p2", 18_000), absent("p2", 18_000)], cfg);
    assert.equal(d.feedUntilMs, 30_000, "the same peer twice counts once");
    d = step(lost, 20_000, { kind: "failed", startedMs: 19_000 }, [absent("p1", 18_000), absent("p2", 17_000), absent("p3", 16_000)], cfg);
    assert.equal(d.feedUntilMs, 30_000, "three vouchers of three different rounds: no quorum in any round");
    d = step(lost, 20_000, { kind: "failed", startedMs: 19_000 }, [absent("p1", 18_000), absent("p2", 18_000), absent("p3", 18_000)], cfg);
    assert.equal(d.feedUntilMs, 48_000, "three of one round: extended to that round's start + D");
    assert.equal(d.state.confirmedBy, "peer");
  });
  test("random sequences with up to ⌊n/6⌋ liars: never fed past the NodeFence + D unless a third of the peers, honest (so silent to the operator: its doubt window), were unreachable", () => {
    const peers = twelve;
    const liars = new Set(["p11", "p12"]); // ⌊12/6⌋ = 2
    const cfg = config(peers);
    const D = cfg.deadlineSeconds * 1000;
    for (let seed = 1; seed <= 200; seed++) {
      const r = random(seed);
      let state = initialAgentState();
      let now = 0;
      const fenceAt = 20_000 + r() * 100_000;
      let lastDoubt = -Infinity; // the latest round in which ≥ n/3 honest peers were unreachable
      for (let k = 0; k < 100; k++) {
        now += Math.floor(r() * 4_000);
        const start = now - Math.floor(r() * 6_000);
        const fenced = start >= fenceAt; // an honest read made after the start sees the fence once it exists
        // The node is cut off from the API after the fence (own checks fail); before it, they may succeed.
        const own: OwnCheck = !fenced && r() < 0.5 ? okAbsent(start) : { kind: "failed", startedMs: start };
        const answers: PeerAnswer[] = [];
        let honestUnreachable = 0;
        for (const p of peers) {
          if (liars.has(p)) {
            answers.push(r() < 0.5 ? absent(p, start) : unreachable(p, start, 60));
            continue;
          }
          const roll = r();
          if (roll < 0.3) {
            answers.push(unreachable(p, start, 10 + Math.floor(r() * 10)));
            honestUnreachable++;
          } // After the fence the node reaches no honest peer that reaches the API (the attack: only liars vouch).
          else if (roll < 0.4 && !fenced) answers.push({ ...absent(p, start), nodeFence: fenced ? "fence" : "absent" });
        }
        if (3 * honestUnreachable >= peers.length) lastDoubt = Math.max(lastDoubt, start);
        const d = decideIsolation({ nowMs: now, config: cfg, state, own, answers });
        state = d.state;
        if (d.feed && now >= fenceAt + D)
          assert.ok(now < lastDoubt + D, `seed ${seed} step ${k} now ${now}: fed past the NodeFence + D on the liars' word`);
      }
    }
  });
});
