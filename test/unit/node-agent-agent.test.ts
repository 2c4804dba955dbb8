// The node agent's config errors (decide/isolation.ts checkAgentConfig, refused at start) and the agent's side of the
// isolation decision (src/node-agent/isolation.ts): own checks and peer rounds translated into decideIsolation's
// input, the membership by node name, feeding and SIGTERM from its state.
import { test } from "node:test";
import assert from "node:assert/strict";
import { NodeAgentConfigError, parseNodeAgentConfig } from "../../src/node-agent/config.ts";
import { Isolation } from "../../src/node-agent/isolation.ts";
import type { PeerAnswer } from "../../src/node-agent/protocol.ts";

const env = { NODE_NAME: "n1", POD_IP: "10.0.0.5" };

test("config: defaults, and the deadline rule D ≥ N·c + F + 2·peer timeout refused at start", () => {
  const c = parseNodeAgentConfig([], env)!;
  assert.equal(c.checkIntervalSeconds, 5);
  assert.equal(c.deadlineSeconds, 30);
  assert.equal(c.controlPlaneDownSeconds, 10, "F = 2·c by default");
  assert.equal(c.watchdogDevice, "/dev/watchdog");
  assert.equal(c.watchdogTimeoutFile, "/sys/class/watchdog/watchdog/timeout");
  assert.equal(c.peerPort, 9447);
  assert.equal(c.sysrqReboot, false);
  assert.ok(c.apiRequestTimeoutMs < c.checkIntervalSeconds * 1000);
  assert.throws(
    () => parseNodeAgentConfig(["--deadline-seconds", "25"], env),
    /at least N·c \+ F \+ 2·peer timeout = 2·5 \+ 10 \+ 2·3 = 26 s/,
  );
  assert.equal(parseNodeAgentConfig(["--deadline-seconds", "26"], env)!.deadlineSeconds, 26);
  assert.throws(() => parseNodeAgentConfig([], { POD_IP: "10.0.0.5" }), /--node-name/);
  assert.throws(() => parseNodeAgentConfig([], { NODE_NAME: "n1" }), /--pod-ip/);
  assert.throws(() => parseNodeAgentConfig(["--check-interval-seconds", "0"], env), /expected a whole number from 1 to 60/);
  assert.throws(() => parseNodeAgentConfig(["--sysrq-reboot", "yes"], env), /true or false/);
  assert.throws(() => parseNodeAgentConfig(["--bogus"], env), NodeAgentConfigError);
  assert.equal(parseNodeAgentConfig(["--help"], {}), undefined);
});

test("config: F is a flag (at least c + 3, counted in D), and the peer timeout must be shorter than c", () => {
  const f = parseNodeAgentConfig(["--control-plane-down-seconds", "8", "--deadline-seconds", "24"], env)!;
  assert.equal(f.controlPlaneDownSeconds, 8);
  assert.throws(
    () => parseNodeAgentConfig(["--control-plane-down-seconds", "7", "--deadline-seconds", "30"], env),
    /F \(7 s\) must be at least the check interval \+ 3 s = 8 s: .*renewing its record every 5 s, and watchdog evidence never holds/,
  );
  assert.throws(() => parseNodeAgentConfig(["--control-plane-down-seconds", "8", "--deadline-seconds", "23"], env), /= 24 s/);
  // The default F is 2·c, or c + 3 where that is more (c = 2: 5 s, not 4 s).
  const fast = ["--check-interval-seconds", "2", "--peer-timeout-seconds", "1"];
  assert.equal(parseNodeAgentConfig(fast, env)!.controlPlaneDownSeconds, 5);
  assert.equal(parseNodeAgentConfig(["--check-interval-seconds", "6", "--deadline-seconds", "60"], env)!.controlPlaneDownSeconds, 12);
  assert.throws(
    () => parseNodeAgentConfig(["--check-interval-seconds", "3", "--deadline-seconds", "60"], env),
    /peer request timeout \(3 s\) must be shorter than the check interval \(3 s\)/,
  );
});

const timing = { checkIntervalSeconds: 5, failedChecksBeforePeers: 2, deadlineSeconds: 30, controlPlaneDownSeconds: 10 };
const answer = (from: string, p: Partial<PeerAnswer> = {}): PeerAnswer => ({
  version: 1,
  from,
  about: "me",
  nonce: "",
  api: "reachable",
  nodeFence: "absent",
  unreachableForSeconds: 0,
  signature: "",
  ...p,
});
const un = (from: string, secs = 12) => answer(from, { api: "unreachable", nodeFence: "unknown", unreachableForSeconds: secs });
const names = (n: number) => Array.from({ length: n }, (_, i) => `p${i}`);
/** An agent confirmed by its own read started at 0, then a peer round started at 20 s, decided at 21 s. */
function afterRound(peers: string[], answers: PeerAnswer[]): Isolation {
  const iso = new Isolation(timing);
  iso.decide(100, peers, { kind: "ok", nodeFence: "absent", startedMs: 0 });
  iso.decide(21_000, peers, { kind: "none" }, { startedMs: 20_000, answers });
  return iso;
}

test("isolation: feeds until the start of the last confirmation + D, never before a first one, never backwards", () => {
  const iso = new Isolation(timing);
  assert.equal(iso.mayFeed(0), false);
  iso.decide(1200, [], { kind: "ok", nodeFence: "absent", startedMs: 1000 });
  assert.equal(iso.mayFeed(30_999), true);
  assert.equal(iso.mayFeed(31_000), false);
  iso.decide(1300, [], { kind: "ok", nodeFence: "absent", startedMs: 500 });
  assert.equal(iso.state.lastConfirmationStartMs, 1000, "an older check finishing late never moves it backwards");
  iso.decide(6000, [], { kind: "failed", startedMs: 5000 });
  iso.decide(7000, [], { kind: "error", message: "disk full" });
  assert.equal(iso.mayFeed(30_999), true, "a failed check or an exception does not stop feeding before the deadline");
  assert.equal(iso.shutdown(30_999), "disarm");
  assert.equal(iso.shutdown(31_000), "let-fire");
});

test("isolation: a fence seen (own read or a known peer's) stops feeding for good; SIGTERM then lets the watchdog fire", () => {
  const own = new Isolation(timing);
  own.decide(10, [], { kind: "ok", nodeFence: "absent", startedMs: 0 });
  assert.match(own.decide(20, [], { kind: "ok", nodeFence: "fence", startedMs: 15 }).fenceNow ?? "", /own API read/);
  assert.equal(own.mayFeed(21), false);
  own.decide(40, [], { kind: "ok", nodeFence: "absent", startedMs: 30 });
  assert.equal(own.mayFeed(41), false);
  assert.equal(own.shutdown(41), "let-fire");
  const byPeer = afterRound(["a", "b"], [answer("a"), answer("b", { nodeFence: "fence" })]);
  assert.equal(byPeer.mayFeed(21_001), false);
  assert.match(byPeer.last?.fenceNow ?? "", /peer b/);
});

test("isolation: cut off, only a strict majority of ALL known peers (by name) unreachable for ≥ F extends", () => {
  const at = (peers: string[], answers: PeerAnswer[]) => afterRound(peers, answers).state.lastConfirmationStartMs;
  const four = ["a", "b", "c", "d"];
  assert.equal(at(four, [un("a"), un("b")]), 0, "2 of 4 is no majority");
  assert.equal(at(four, [un("a"), un("b"), un("c")]), 20_000, "the round's start time, not the decision's");
  assert.equal(at(four, [un("a"), un("b"), un("c", 9)]), 0, "cut off for less than F");
  assert.equal(at(four, [un("a"), un("a"), un("a")]), 0, "one peer counts once");
  assert.equal(at(four, [un("a"), un("b"), un("x")]), 0, "a node outside the membership is not a vote");
  assert.equal(at([], []), 0, "no peers, no majority");
});

test("isolation: one peer's 'no NodeFence' no longer extends feeding once there are 6 or more peers (quorum ⌊n/6⌋+1)", () => {
  const at = (peers: string[], answers: PeerAnswer[]) => afterRound(peers, answers).state.lastConfirmationStartMs;
  assert.equal(at(names(5), [answer("p0")]), 20_000, "1 of 5: quorum 1");
  assert.equal(at(names(9), [answer("p0")]), 0, "1 of 9: one (possibly lying) agent is not enough");
  assert.equal(at(names(9), [answer("p0"), answer("p0")]), 0, "the same peer twice is still one");
  assert.equal(at(names(9), [answer("p0"), answer("p3")]), 20_000, "2 of 9");
  assert.equal(afterRound(names(9), [answer("p0")]).mayFeed(30_000), false, "the deadline counts from the own read at 0");
});
