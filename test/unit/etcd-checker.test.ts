import { test } from "node:test";
import assert from "node:assert/strict";
import {
  b64,
  checkAckOrder,
  compareKeys,
  compareMembers,
  fromB64,
  judgeHealth,
  parseMembers,
  parseStatus,
  prefixRangeEnd,
  seqKey,
  verifyEtcd,
  type EtcdMember,
  type EtcdStatus,
  type FoundKey,
  type WriteLog,
} from "../../lab/etcd-checker.ts";

const log = (n: number, pending?: number): WriteLog => ({
  prefix: "/p/",
  acked: Array.from({ length: n }, (_, i) => ({
    key: seqKey("/p/", i + 1),
    value: `/p/#${i + 1}`,
    revision: 10 + i,
    endpoint: "e",
    at: i,
  })),
  pending: pending === undefined ? undefined : { key: seqKey("/p/", pending), value: `/p/#${pending}` },
  attempts: n,
  failures: 0,
});
const found = (l: WriteLog): Map<string, FoundKey> => new Map(l.acked.map((a) => [a.key, { value: a.value, modRevision: a.revision }]));

test("prefixRangeEnd selects exactly the keys under the prefix", () => {
  assert.equal(fromB64(prefixRangeEnd("/p/")), "/p0");
  assert.deepEqual([...Buffer.from(prefixRangeEnd("a\xff"), "base64")], [0x61, 0xc3, 0xc0]); // utf8 "ÿ" = c3 bf → c3 c0
  assert.equal(fromB64(b64("héllo")), "héllo");
});

test("sequence keys sort in write order", () => {
  const keys = [1, 2, 9, 10, 11, 100, 99999].map((i) => seqKey("/p/", i));
  assert.deepEqual([...keys].sort(), keys);
});

test("compareKeys: all found is clean; a missing acknowledged key is lost", () => {
  const l = log(5);
  assert.deepEqual(compareKeys(l, found(l)), { lost: [], wrong: [], unexpected: [] });
  const f = found(l);
  f.delete(seqKey("/p/", 3));
  assert.deepEqual(compareKeys(l, f).lost, [seqKey("/p/", 3)]);
  assert.deepEqual(
    compareKeys(l, new Map()).lost,
    l.acked.map((a) => a.key),
  );
});

test("compareKeys: a wrong value or an older revision is wrong; a later revision of the same value is not", () => {
  const l = log(3);
  const f = found(l);
  f.set(seqKey("/p/", 1), { value: "other", modRevision: 10 });
  f.set(seqKey("/p/", 2), { value: "/p/#2", modRevision: 5 });
  f.set(seqKey("/p/", 3), { value: "/p/#3", modRevision: 99 }); // a timed-out earlier attempt applied late
  const r = compareKeys(l, f);
  assert.deepEqual(
    r.wrong.map((w) => w.key),
    [seqKey("/p/", 1), seqKey("/p/", 2)],
  );
  assert.deepEqual(r.lost, []);
});

test("compareKeys: the pending put may exist; any other unknown key is unexpected", () => {
  const l = log(2, 3);
  const f = found(l);
  f.set(seqKey("/p/", 3), { value: "/p/#3", modRevision: 50 });
  assert.deepEqual(compareKeys(l, f).unexpected, []);
  f.set(seqKey("/p/", 7), { value: "/p/#7", modRevision: 51 });
  assert.deepEqual(compareKeys(l, f).unexpected, [seqKey("/p/", 7)]);
});

test("checkAckOrder: acknowledged revisions must increase", () => {
  const l = log(3);
  assert.deepEqual(checkAckOrder(l), []);
  l.acked[2]!.revision = 11;
  assert.equal(checkAckOrder(l).length, 1);
  assert.match(checkAckOrder(l)[0]!, /revision 11, not after/);
});

const m = (id: string, name: string, extra: Partial<EtcdMember> = {}): EtcdMember => ({
  id,
  name,
  peerURLs: [`http://${name}:2380`],
  clientURLs: [`http://${name}:2379`],
  isLearner: false,
  ...extra,
});
const three = [m("1", "a"), m("2", "b"), m("3", "c")];

test("compareMembers: the same members in any order are fine", () => {
  assert.deepEqual(compareMembers(three, [...three].reverse()), []);
});

test("compareMembers: missing, extra, renamed, moved, learner or unstarted members are reported", () => {
  assert.match(compareMembers(three, three.slice(0, 2)).join(), /c \(3\) is missing/);
  assert.match(compareMembers(three, [...three, m("4", "d")]).join(), /d \(4\) was not an original member/);
  assert.match(compareMembers(three, [m("1", "x"), three[1]!, three[2]!]).join(), /named "x", was "a"/);
  assert.match(compareMembers(three, [m("1", "a", { peerURLs: ["http://z:2380"] }), three[1]!, three[2]!]).join(), /peer URLs/);
  assert.match(compareMembers(three, [m("1", "a", { isLearner: true }), three[1]!, three[2]!]).join(), /is a learner/);
  assert.match(compareMembers(three, [m("1", "", { clientURLs: [] }), three[1]!, three[2]!]).join(), /has not started/);
});

const st = (endpoint: string, memberId: string, extra: Partial<EtcdStatus> = {}): EtcdStatus => ({
  endpoint,
  memberId,
  leader: "2",
  raftTerm: "3",
  raftIndex: "100",
  version: "3.6.16",
  isLearner: false,
  errors: [],
  ...extra,
});

test("judgeHealth: every member answering under one original leader is healthy", () => {
  assert.deepEqual(judgeHealth(three, [st("e1", "1"), st("e2", "2"), st("e3", "3")]), []);
});

test("judgeHealth: an unanswering endpoint, a member on no endpoint, no or split leaders, alarms are reported", () => {
  const down = judgeHealth(three, [st("e1", "1"), st("e2", "2"), { endpoint: "e3", error: "ECONNREFUSED" }]);
  assert.match(down.join("\n"), /e3 did not answer: ECONNREFUSED/);
  assert.match(down.join("\n"), /member c \(3\) answered on no endpoint/);
  assert.match(judgeHealth(three, [st("e1", "1", { leader: "0" }), st("e2", "2"), st("e3", "3")]).join(), /1 at e1 has no leader/);
  assert.match(judgeHealth(three, [st("e1", "1", { leader: "3" }), st("e2", "2"), st("e3", "3")]).join(), /disagree on the leader/);
  assert.match(
    judgeHealth(three, [st("e1", "1", { leader: "9" }), st("e2", "2", { leader: "9" }), st("e3", "3", { leader: "9" })]).join(),
    /follows 9, not an original member/,
  );
  assert.match(
    judgeHealth(three, [st("e1", "1", { errors: ["memberID:1 alarm:NOSPACE"] }), st("e2", "2"), st("e3", "3")]).join(),
    /NOSPACE/,
  );
});

test("parseMembers and parseStatus read the gateway's JSON (64-bit IDs as strings)", () => {
  const members = parseMembers({
    members: [
      { ID: "10551595412508535384", name: "m0", peerURLs: ["http://b:2380", "http://a:2380"], clientURLs: ["http://a:2379"] },
      { ID: "11011949906421398991", peerURLs: ["http://c:2380"] },
    ],
  });
  assert.deepEqual(members[0], {
    id: "10551595412508535384",
    name: "m0",
    peerURLs: ["http://a:2380", "http://b:2380"],
    clientURLs: ["http://a:2379"],
    isLearner: false,
  });
  assert.deepEqual(members[1]!.clientURLs, []);
  assert.equal(members[1]!.name, "");
  const s = parseStatus("e", {
    header: { member_id: "3319814642761637952" },
    leader: "3319814642761637952",
    raftTerm: "2",
    raftIndex: "5",
    version: "3.6.16",
  });
  assert.equal(s.memberId, "3319814642761637952");
  assert.equal(s.leader, "3319814642761637952");
  assert.deepEqual(s.errors, []);
  assert.equal(parseStatus("e", {}).leader, "0");
});

test(
  "verifyEtcd does not hang on an endpoints function that never answers: it reports it could check nothing",
  { timeout: 5000 },
  async () => {
    const v = await verifyEtcd({
      endpoints: () => new Promise<string[]>(() => {}),
      log: log(2),
      members: three,
      settleTimeoutMs: 0,
      requestTimeoutMs: 20,
    });
    assert.equal(v.ok, false);
    assert.deepEqual(v.problems, [
      "no endpoints to check",
      "no endpoint answered the member list: no endpoints",
      "no endpoint answered the read-back, so no acknowledged key could be checked: no endpoints",
    ]);
  },
);
