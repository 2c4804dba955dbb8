// The peer protocol over real HTTP on loopback: a good request is answered and verifies; unsigned, unknown,
// foreign-key, replayed, malformed and oversized requests are refused with a status and a message; an answer
// replayed to another asker (another nonce) is dropped.
import { test, after } from "node:test";
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { askPeers, checkAnswer, PeerServer } from "../../src/node-agent/peers.ts";
import { generateKeyPair, PEER_CHECK_PATH, signRequest } from "../../src/node-agent/protocol.ts";

const alice = generateKeyPair();
const bob = generateKeyPair();
const mallory = generateKeyPair();
const logs: { obj: object; msg: string }[] = [];
const refused: string[] = [];
let fenceFor = new Set<string>();
let apiUp = true;
let unreachableFor = 12;
const server = new PeerServer({
  node: "bob",
  privateKey: bob.privateKey,
  peerKey: (n) => (n === "alice" ? alice.publicKeyBase64 : undefined),
  freshCheck: async (about) => (apiUp ? (fenceFor.has(about) ? "fence" : "absent") : "unreachable"),
  unreachableForSeconds: () => unreachableFor,
  minUnreachableSeconds: 10,
  log: { warn: (obj, msg) => logs.push({ obj, msg }) },
  onRefused: (r) => refused.push(r),
  ratePerSecond: 1000,
});
const port = await server.listen(0, "127.0.0.1");
after(() => server.close());
const bobPeer = { node: "bob", address: `127.0.0.1:${port}`, publicKey: bob.publicKeyBase64 };
const nonce = () => randomBytes(16).toString("base64");

async function post(body: string) {
  const res = await fetch(`http://127.0.0.1:${port}${PEER_CHECK_PATH}`, {
    method: "POST",
    body,
    headers: { "content-type": "application/json" },
  });
  return { status: res.status, text: await res.text() };
}

test("a signed request from a known peer is answered from a fresh check, and the answer verifies", async () => {
  fenceFor = new Set();
  const r = await askPeers("alice", alice.privateKey, [bobPeer], 2000);
  assert.deepEqual(r.dropped, []);
  assert.equal(r.answers.length, 1);
  assert.deepEqual(
    { ...r.answers[0], nonce: "", signature: "" },
    {
      version: 1,
      from: "bob",
      about: "alice",
      nonce: "",
      api: "reachable",
      nodeFence: "absent",
      unreachableForSeconds: 0,
      signature: "",
    },
  );
  fenceFor = new Set(["alice"]);
  const f = await askPeers("alice", alice.privateKey, [bobPeer], 2000);
  assert.equal(f.answers[0]?.nodeFence, "fence");
  apiUp = false;
  const u = await askPeers("alice", alice.privateKey, [bobPeer], 2000);
  apiUp = true;
  assert.equal(u.answers[0]?.api, "unreachable");
  assert.equal(u.answers[0]?.unreachableForSeconds, 12);
});

test("a peer that cannot reach the API either, for less than F, says nothing (503, counted as too-early), then answers unreachable", async () => {
  apiUp = false;
  unreachableFor = 9.9;
  refused.length = 0;
  try {
    const early = await askPeers("alice", alice.privateKey, [bobPeer], 2000);
    assert.equal(early.answers.length, 0);
    assert.match(early.dropped[0]!.why, /^answered 503: cannot reach the API, but for less than 10 s/);
    assert.deepEqual(refused, ["too-early"]);
    unreachableFor = 10;
    const later = await askPeers("alice", alice.privateKey, [bobPeer], 2000);
    assert.equal(later.answers[0]?.api, "unreachable");
    assert.equal(later.answers[0]?.unreachableForSeconds, 10);
  } finally {
    apiUp = true;
    unreachableFor = 12;
  }
});

test("unsigned, unknown, foreign-key, malformed and oversized requests are refused with a message and a log line", async () => {
  refused.length = 0;
  const cases: [string, string, number, RegExp][] = [
    ["unsigned", JSON.stringify({ version: 1, from: "alice", nonce: nonce(), signature: "" }), 401, /unsigned/],
    [
      "unknown node",
      JSON.stringify(signRequest({ version: 1, from: "mallory", nonce: nonce() }, mallory.privateKey)),
      401,
      /mallory is not a known peer/,
    ],
    [
      "foreign key",
      JSON.stringify(signRequest({ version: 1, from: "alice", nonce: nonce() }, mallory.privateKey)),
      401,
      /does not verify with alice's public key/,
    ],
    ["not JSON", "{", 400, /not JSON/],
    ["bad nonce", JSON.stringify({ version: 1, from: "alice", nonce: "x", signature: "y" }), 400, /nonce/],
    [
      "oversized",
      JSON.stringify({ version: 1, from: "alice", nonce: nonce(), signature: "x".repeat(5000) }),
      400,
      /larger than 4096 bytes/,
    ],
  ];
  for (const [what, body, status, message] of cases) {
    const before = logs.length;
    const r = await post(body);
    assert.equal(r.status, status, what);
    assert.match(r.text, message, what);
    assert.equal(logs.length, before + 1, `${what}: one log line`);
    assert.equal(logs.at(-1)?.msg, "peer request refused");
  }
  assert.deepEqual(refused, ["unauthorized", "unauthorized", "unauthorized", "bad-request", "bad-request", "bad-request"]);
});

test("a replayed request is refused; an answer replayed to another asker (another nonce) is dropped", async () => {
  const req = signRequest({ version: 1, from: "alice", nonce: nonce() }, alice.privateKey);
  const first = await post(JSON.stringify(req));
  assert.equal(first.status, 200);
  const again = await post(JSON.stringify(req));
  assert.equal(again.status, 401);
  assert.match(again.text, /already answered/);
  // The answer bob gave alice, shown to alice again for a later question (her new nonce), or to carol: dropped.
  assert.equal(checkAnswer(first.text, "alice", bobPeer, nonce()), "the answer does not echo our nonce");
  assert.equal(checkAnswer(first.text, "carol", bobPeer, req.nonce), "the answer is about alice, not carol");
  assert.equal(typeof checkAnswer(first.text, "alice", bobPeer, req.nonce), "object");
  // Signed by someone else than the named peer: dropped.
  assert.match(String(checkAnswer(first.text, "alice", { ...bobPeer, publicKey: mallory.publicKeyBase64 }, req.nonce)), /does not verify/);
});

test("a peer that does not answer in time is dropped, not counted", async () => {
  const r = await askPeers("alice", alice.privateKey, [{ node: "gone", address: "127.0.0.1:1", publicKey: bob.publicKeyBase64 }], 500);
  assert.equal(r.answers.length, 0);
  assert.equal(r.dropped[0]?.node, "gone");
});

test("requests beyond the rate limit from one source are refused with 429", async () => {
  const limited = new PeerServer({
    node: "bob",
    privateKey: bob.privateKey,
    peerKey: () => undefined,
    freshCheck: async () => "absent",
    unreachableForSeconds: () => 0,
    minUnreachableSeconds: 10,
    log: { warn: () => {} },
    ratePerSecond: 1,
  });
  const p = await limited.listen(0, "127.0.0.1");
  const statuses: number[] = [];
  for (let i = 0; i < 4; i++)
    statuses.push((await fetch(`http://127.0.0.1:${p}${PEER_CHECK_PATH}`, { method: "POST", body: "{}" })).status);
  await limited.close();
  assert.deepEqual(statuses, [400, 400, 429, 429]);
});
