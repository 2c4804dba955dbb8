// The node agent's config errors and the stand-in isolation decision (design rules 1-3), until slice A's
// decide/isolation.ts replaces it.
import { test } from "node:test";
import assert from "node:assert/strict";
import { NodeAgentConfigError, parseNodeAgentConfig } from "../../src/node-agent/config.ts";
import { applyObservation, initialIsolation, mayFeed, type IsolationState } from "../../src/node-agent/isolation-stand-in.ts";
import type { PeerAnswer } from "../../src/node-agent/protocol.ts";

const env = { NODE_NAME: "n1", POD_IP: "10.0.0.5" };

test("config: defaults, and the deadline rule D ≥ N·c + F + 2·peer timeout refused at start", () => {
  const c = parseNodeAgentConfig([], env)!;
  assert.equal(c.checkIntervalSeconds, 5);
  assert.equal(c.deadlineSeconds, 30);
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

const answer = (from: string, p: Partial<PeerAnswer>): PeerAnswer => ({
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
const peers = (s: IsolationState, startedMono: number, answers: PeerAnswer[], knownPeers: number) =>
  applyObservation(s, { kind: "peers", startedMono, answers, knownPeers, minUnreachableSeconds: 10 });

test("isolation: feeds until the start of the last confirmation + D, never before a first one", () => {
  let s = initialIsolation();
  assert.equal(mayFeed(s, 0, 30), false);
  s = applyObservation(s, { kind: "own", startedMono: 1000, nodeFence: "absent" });
  assert.equal(mayFeed(s, 30_999, 30), true);
  assert.equal(mayFeed(s, 31_000, 30), false);
  // An older check finishing late never moves the confirmation backwards.
  s = applyObservation(s, { kind: "own", startedMono: 500, nodeFence: "absent" });
  assert.equal(s.lastConfirmationMono, 1000);
});

test("isolation: a fence seen (own read or a peer's) stops feeding for good", () => {
  let s = applyObservation(initialIsolation(), { kind: "own", startedMono: 0, nodeFence: "absent" });
  s = applyObservation(s, { kind: "own", startedMono: 10, nodeFence: "fence" });
  assert.equal(mayFeed(s, 11, 30), false);
  s = applyObservation(s, { kind: "own", startedMono: 20, nodeFence: "absent" });
  assert.equal(mayFeed(s, 21, 30), false);
  let p = applyObservation(initialIsolation(), { kind: "own", startedMono: 0, nodeFence: "absent" });
  p = peers(p, 5, [answer("a", {}), answer("b", { nodeFence: "fence" })], 2);
  assert.equal(mayFeed(p, 6, 30), false);
});

test("isolation: cut off, only a strict majority of ALL known peers unreachable for ≥ F extends", () => {
  const base = applyObservation(initialIsolation(), { kind: "own", startedMono: 0, nodeFence: "absent" });
  const un = (from: string, secs = 12) => answer(from, { api: "unreachable", nodeFence: "unknown", unreachableForSeconds: secs });
  assert.equal(peers(base, 20_000, [un("a"), un("b")], 4).lastConfirmationMono, 0, "2 of 4 is no majority");
  assert.equal(peers(base, 20_000, [un("a"), un("b"), un("c")], 4).lastConfirmationMono, 20_000);
  assert.equal(peers(base, 20_000, [un("a"), un("b"), un("c", 9)], 4).lastConfirmationMono, 0, "cut off for less than F");
  assert.equal(peers(base, 20_000, [un("a"), un("a"), un("a")], 4).lastConfirmationMono, 0, "one peer counts once");
  assert.equal(peers(base, 20_000, [], 0).lastConfirmationMono, 0, "no peers, no majority");
  assert.equal(peers(base, 20_000, [answer("a", {})], 9).lastConfirmationMono, 20_000, "one peer that reads the API");
});
