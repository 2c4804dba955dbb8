// The ledger checker (lab/ledger.ts) on hand-made ledger files: what a clean handover looks like, and
// each way two writers, a lost or duplicated write, or a stale token shows in the file.
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { checkLedger, parseLedger, parseTime, type LedgerRead } from "../../lab/ledger.ts";

const T0 = Date.parse("2026-11-22T10:00:00Z");
const A = "aaaaaaaa-0000-4000-8000-000000000001";
const B = "bbbbbbbb-0000-4000-8000-000000000002";
const C = "cccccccc-0000-4000-8000-000000000003";

interface Line {
  id?: string;
  uid: string;
  node: string;
  seq: number;
  /** ms after T0 */
  t: number;
  run?: string;
  token?: string;
}

const iso = (ms: number) => new Date(T0 + ms).toISOString().replace("Z", "000Z"); // with µs digits, as Go writes
const json = (l: Line) =>
  JSON.stringify({
    identity: l.id ?? "ledger-0",
    podUID: l.uid,
    node: l.node,
    run: l.run ?? `run-${l.uid.slice(0, 4)}`,
    seq: l.seq,
    time: iso(l.t),
    ...(l.token !== undefined ? { token: l.token } : {}),
  });
const text = (lines: (Line | string)[]) => lines.map((l) => (typeof l === "string" ? l : json(l)) + "\n").join("");

/** `n` records of one writer, every 100 ms from `t`. */
const writer = (uid: string, node: string, n: number, t: number, extra: Partial<Line> = {}): Line[] =>
  Array.from({ length: n }, (_, i) => ({ uid, node, seq: i + 1, t: t + i * 100, ...extra }));

const FILE = "san-default-data-ledger-0/ledger.jsonl";
const check = (lines: (Line | string)[], file = FILE) => checkLedger(parseLedger(text(lines), file));
const merge = (...reads: LedgerRead[]): LedgerRead => ({
  files: reads.flatMap((r) => r.files),
  records: reads.flatMap((r) => r.records),
  unreadable: reads.flatMap((r) => r.unreadable),
});

describe("ledger checker", () => {
  test("a clean handover: one instance stops, the next starts later on another node", () => {
    const r = check([...writer(A, "node-1", 5, 0), ...writer(B, "node-2", 3, 1000)]);
    assert.deepEqual(r.violations, []);
    assert.deepEqual(r.problems, []);
    assert.equal(r.identities, 1);
    assert.equal(r.records, 8);
    assert.deepEqual(
      r.instances.map((i) => [i.podUID, i.node, i.records, i.runs, i.first.line, i.last.line]),
      [
        [A, "node-1", 5, 1, 1, 5],
        [B, "node-2", 3, 1, 6, 8],
      ],
    );
    assert.equal(r.handovers.length, 1);
    const h = r.handovers[0]!;
    assert.deepEqual([h.identity, h.from, h.to, h.fromNode, h.toNode], ["ledger-0", A, B, "node-1", "node-2"]);
    assert.deepEqual([h.lastOld.line, h.lastOld.seq, h.firstNew.line, h.firstNew.seq], [5, 5, 6, 1]);
    assert.ok(Math.abs(h.gapMs - 600) < 0.01, `gap ${h.gapMs}`);
  });

  test("an overlap by the writers' clocks: the old instance wrote after its successor's first write", () => {
    // In file order the handover looks clean (B's first write reached the file late), but B stamped its
    // first record at 150 ms while A still wrote at 200 ms: both were alive.
    const r = check([...writer(A, "node-1", 3, 0), ...writer(B, "node-2", 3, 150)]);
    assert.equal(r.violations.length, 1, r.violations.join("\n"));
    const m = r.violations[0]!;
    assert.match(m, /two instances alive at once by the writers' clocks/);
    for (const s of ["ledger-0", A, B, "node-1", "node-2", iso(200), iso(150), `${FILE}:3`, `${FILE}:4`, "50.0 ms"]) {
      assert.ok(m.includes(s), `${s} in: ${m}`);
    }
    assert.ok(r.handovers[0]!.gapMs < 0);
  });

  test("an interleaving in file order is caught even when the clocks look clean", () => {
    // A writes a record stamped before B's first write but appends it after: a stale writer's late write.
    const r = check([
      { uid: A, node: "node-1", seq: 1, t: 0 },
      { uid: A, node: "node-1", seq: 2, t: 100 },
      { uid: B, node: "node-2", seq: 1, t: 300 },
      { uid: A, node: "node-1", seq: 3, t: 200 },
      { uid: B, node: "node-2", seq: 2, t: 400 },
    ]);
    assert.equal(r.violations.length, 1, r.violations.join("\n"));
    const m = r.violations[0]!;
    assert.match(m, /interleave in the file .* two writers at once/);
    for (const s of [A, B, "node-1", "node-2", `${FILE}:4`, `${FILE}:3`, iso(200), iso(300), "1 of 3 records"])
      assert.ok(m.includes(s), `${s} in: ${m}`);
  });

  test("two writers at once, as a split brain writes them, give both an interleaving and an overlap", () => {
    const lines: Line[] = [];
    for (let i = 0; i < 5; i++)
      lines.push({ uid: A, node: "node-1", seq: i + 1, t: i * 100 }, { uid: B, node: "node-2", seq: i + 1, t: i * 100 + 50 });
    const r = check(lines);
    assert.equal(r.violations.filter((v) => v.includes("interleave")).length, 1);
    assert.equal(r.violations.filter((v) => v.includes("writers' clocks")).length, 1);
  });

  test("a torn last line is reported as a problem, not a violation, and does not stop the reading", () => {
    const body = text(writer(A, "node-1", 3, 0)) + '{"identity":"ledger-0","podUID":"aaaa';
    const read = parseLedger(body, FILE);
    assert.equal(read.records.length, 3);
    assert.deepEqual(read.unreadable, [{ file: FILE, line: 4, text: '{"identity":"ledger-0","podUID":"aaaa', atEnd: true }]);
    const r = checkLedger(read);
    assert.deepEqual(r.violations, []);
    assert.equal(r.problems.length, 1);
    assert.match(r.problems[0]!, new RegExp(`${FILE}:4: torn last line .* after pod ${A} \\(node-1\\) seq 3`));
  });

  test("a torn write at a handover (the next writer starts a new line after it) is a problem; garbage inside one writer's records is a violation", () => {
    const handover = check([...writer(A, "node-1", 2, 0), '{"identity":"ledger-0","po', "", ...writer(B, "node-2", 2, 1000)]);
    assert.deepEqual(handover.violations, []);
    assert.equal(handover.problems.length, 1);
    assert.match(handover.problems[0]!, new RegExp(`${FILE}:3: unreadable line .* after pod ${A} .* before pod ${B}`));

    const inside = check([...writer(A, "node-1", 2, 0), "\u0000\u0000garbage", { uid: A, node: "node-1", seq: 3, t: 200 }]);
    assert.equal(inside.violations.length, 1, inside.violations.join("\n"));
    assert.match(inside.violations[0]!, new RegExp(`unreadable line ${FILE}:3 .* between two records of pod ${A}`));
  });

  test("garbage of every shape is read without throwing", () => {
    const bad = ["null", "[]", "{}", "42", '"x"', "{", '{"identity":"x","podUID":"u","node":"n","seq":0,"time":"2026-11-22T10:00:00Z"}'];
    bad.push(
      '{"identity":"x","podUID":"u","node":"n","seq":1,"time":"yesterday"}',
      '{"identity":"x","podUID":"u","node":"n","seq":1.5,"time":"2026-11-22T10:00:00Z"}',
    );
    bad.push('{"identity":"x","podUID":"u","node":"n","seq":1,"time":"2026-11-22T10:00:00Z","token":7}');
    const read = parseLedger(bad.join("\n") + "\n", FILE);
    assert.equal(read.records.length, 0);
    assert.equal(read.unreadable.length, bad.length);
    assert.ok(read.unreadable.every((u) => !u.atEnd));
    assert.equal(checkLedger(read).problems.length, bad.length);
  });

  test("a seq gap is a lost write; a seq going back is a duplicated one; a run must start at 1", () => {
    const gap = check([
      { uid: A, node: "node-1", seq: 1, t: 0 },
      { uid: A, node: "node-1", seq: 2, t: 100 },
      { uid: A, node: "node-1", seq: 4, t: 300 },
    ]);
    assert.equal(gap.violations.length, 1);
    assert.match(
      gap.violations[0]!,
      new RegExp(`ledger-0: pod ${A} \\(node-1\\) seq jumps from 2 \\(${FILE}:2, .*\\) to 4 \\(${FILE}:3, .*\\): 1 write\\(s\\) lost`),
    );

    const back = check([...writer(A, "node-1", 3, 0), { uid: A, node: "node-1", seq: 2, t: 300 }]);
    assert.equal(back.violations.length, 1);
    assert.match(back.violations[0]!, /seq goes from 3 .* back to 2 .*duplicated/);

    const late = check([{ uid: A, node: "node-1", seq: 3, t: 0 }]);
    assert.match(late.violations[0]!, /starts at seq 3 .* 2 earlier write\(s\) lost/);
  });

  test("a container restarted inside its pod starts a new run at seq 1; without run ids a reset is a violation", () => {
    const restarted = check([...writer(A, "node-1", 3, 0, { run: "r1" }), ...writer(A, "node-1", 2, 1000, { run: "r2" })]);
    assert.deepEqual(restarted.violations, []);
    assert.equal(restarted.instances.length, 1);
    assert.equal(restarted.instances[0]!.runs, 2);
    assert.equal(restarted.handovers.length, 0);

    const rec = (seq: number, t: number) => JSON.stringify({ identity: "ledger-0", podUID: A, node: "node-1", seq, time: iso(t) });
    const noRun = checkLedger(parseLedger([rec(1, 0), rec(2, 100), rec(1, 1000)].join("\n") + "\n", FILE));
    assert.equal(noRun.violations.length, 1);
    assert.match(noRun.violations[0]!, /back to 1 .*without a run id/);

    // Two runs of one pod writing at once: the kubelet started a second container while the first lived.
    const twice = check([
      { uid: A, node: "node-1", seq: 1, t: 0, run: "r1" },
      { uid: A, node: "node-1", seq: 1, t: 50, run: "r2" },
      { uid: A, node: "node-1", seq: 2, t: 100, run: "r1" },
    ]);
    assert.equal(twice.violations.length, 1, twice.violations.join("\n"));
    assert.match(twice.violations[0]!, /run r1 wrote seq 2 .* after run r2 of the same pod .* two writers at once/);
  });

  test("tokens must increase from one instance to the next and never go back within one", () => {
    const ok = check([...writer(A, "node-1", 2, 0, { token: "5" }), ...writer(B, "node-2", 2, 1000, { token: "6" })]);
    assert.deepEqual(ok.violations, []);

    const back = check([...writer(A, "node-1", 2, 0, { token: "5" }), ...writer(B, "node-2", 2, 1000, { token: "4" })]);
    assert.equal(back.violations.length, 1);
    const m = back.violations[0]!;
    assert.match(m, /token went back from 5 .* to 4/);
    for (const s of [A, B, "node-1", "node-2", `${FILE}:2`, `${FILE}:3`, iso(100), iso(1000)]) assert.ok(m.includes(s), `${s} in: ${m}`);

    const same = check([...writer(A, "node-1", 2, 0, { token: "5" }), ...writer(B, "node-2", 2, 1000, { token: "5" })]);
    assert.match(same.violations[0]!, /token went nowhere from 5/);

    // Numbers, not strings: "10" follows "9".
    assert.deepEqual(
      check([...writer(A, "node-1", 1, 0, { token: "9" }), ...writer(B, "node-2", 1, 1000, { token: "10" })]).violations,
      [],
    );

    const within = check([
      { uid: A, node: "node-1", seq: 1, t: 0, token: "7" },
      { uid: A, node: "node-1", seq: 2, t: 100, token: "6" },
    ]);
    assert.match(within.violations[0]!, /token went back from 7 .* to 6/);

    assert.match(check(writer(A, "node-1", 1, 0, { token: "abc" })).violations[0]!, /not a decimal integer/);
    // Absent tokens are not compared (the workload may run without TOKEN_FILE).
    assert.deepEqual(check([...writer(A, "node-1", 2, 0, { token: "5" }), ...writer(B, "node-2", 2, 1000)]).violations, []);
  });

  test("two identities are independent: each has its own instances, handovers and violations", () => {
    const l0 = parseLedger(text([...writer(A, "node-1", 3, 0), ...writer(B, "node-2", 3, 1000)]), "v0/ledger.jsonl");
    // ledger-1 writes at the same times as ledger-0, from the same nodes: no concern of ledger-0's.
    const l1 = parseLedger(text(writer(C, "node-2", 3, 0, { id: "ledger-1" })), "v1/ledger.jsonl");
    const clean = checkLedger(merge(l0, l1));
    assert.deepEqual(clean.violations, []);
    assert.equal(clean.identities, 2);
    assert.equal(clean.handovers.length, 1);
    assert.deepEqual(
      clean.instances.map((i) => [i.identity, i.podUID]),
      [
        ["ledger-0", A],
        ["ledger-0", B],
        ["ledger-1", C],
      ],
    );

    const D = "dddddddd-0000-4000-8000-000000000004";
    const l1bad = parseLedger(
      text([...writer(C, "node-2", 3, 0, { id: "ledger-1" }), ...writer(D, "node-3", 2, 100, { id: "ledger-1" })]),
      "v1/ledger.jsonl",
    );
    const bad = checkLedger(merge(l0, l1bad));
    assert.ok(bad.violations.length >= 1);
    assert.ok(
      bad.violations.every((v) => v.startsWith("ledger-1: ") && v.includes(C) && v.includes(D)),
      bad.violations.join("\n"),
    );
  });

  test("across files, instances are ordered by their writers' clocks and overlaps still show", () => {
    const r = checkLedger(
      merge(
        parseLedger(text(writer(B, "node-2", 2, 1000)), "x/ledger.jsonl"),
        parseLedger(text(writer(A, "node-1", 2, 0)), "y/ledger.jsonl"),
      ),
    );
    assert.deepEqual(r.violations, []);
    assert.deepEqual([r.handovers[0]!.from, r.handovers[0]!.to], [A, B]);
    const o = checkLedger(
      merge(
        parseLedger(text(writer(B, "node-2", 2, 50)), "x/ledger.jsonl"),
        parseLedger(text(writer(A, "node-1", 2, 0)), "y/ledger.jsonl"),
      ),
    );
    assert.equal(o.violations.length, 1);
    assert.match(o.violations[0]!, /y\/ledger.jsonl:2.*x\/ledger.jsonl:1/);
  });

  test("a pod uid on two nodes or under two identities is a violation", () => {
    const nodes = check([
      { uid: A, node: "node-1", seq: 1, t: 0 },
      { uid: A, node: "node-3", seq: 2, t: 100 },
    ]);
    assert.match(nodes.violations.join("\n"), /pod .* wrote from 2 nodes \(node-1, node-3\)/);
    const ids = check([
      { uid: A, node: "node-1", seq: 1, t: 0 },
      { id: "ledger-1", uid: A, node: "node-1", seq: 1, t: 100 },
    ]);
    assert.match(ids.violations.join("\n"), /wrote under 2 identities \(ledger-0, ledger-1\)/);
  });

  test("a writer's clock going back is reported as a problem", () => {
    const r = check([
      { uid: A, node: "node-1", seq: 1, t: 100 },
      { uid: A, node: "node-1", seq: 2, t: 0 },
    ]);
    assert.deepEqual(r.violations, []);
    assert.match(r.problems[0]!, /clock of pod .* went back/);
  });

  test("RFC 3339 times keep their sub-millisecond digits and offsets", () => {
    assert.equal(parseTime("2026-11-22T10:00:00.123456789Z"), T0 + 123.456789);
    assert.equal(parseTime("2026-11-22T11:00:00.5+01:00"), T0 + 500);
    assert.equal(parseTime("2026-11-22T10:00:00Z"), T0);
    assert.equal(parseTime("2026-11-22 10:00:00Z"), undefined);
    assert.equal(parseTime("2026-11-22T10:00:00.1234567891Z"), undefined);
  });
});
