// The ledger writer (lab/programs/ledger, Go) built and run against a temp dir, read back with
// lab/ledger.ts: a clean run, a stop on SIGTERM, no write ever skipped silently — and two writers on one
// file (a split brain) caught by the checker, which proves the checker sees the real failure.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { execFile, spawn, type ChildProcess } from "node:child_process";
import { once } from "node:events";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, renameSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { repoRoot } from "../../lab/bins.ts";
import { waitFor } from "../../lab/health.ts";
import { checkLedger, LEDGER_FILE, parseLedger, readLedgers } from "../../lab/ledger.ts";

const run = promisify(execFile);
const work = mkdtempSync(join(tmpdir(), "stockade-ledger-writer-"));
const bin = join(work, "ledger");
const A = "aaaaaaaa-0000-4000-8000-000000000001";
const B = "bbbbbbbb-0000-4000-8000-000000000002";

before(async () => {
  // Built once per run of this file (Go's own build cache makes it fast after the first time).
  await run("go", ["build", "-trimpath", "-o", bin, "./ledger"], {
    cwd: join(repoRoot, "lab/programs"),
    env: { ...process.env, CGO_ENABLED: "0", GOTOOLCHAIN: "local", GOFLAGS: "-mod=mod" },
  });
});

interface Writer {
  child: ChildProcess;
  out: () => string;
  err: () => string;
}

let n = 0;
/** A fresh SAN with one volume directory. */
function san(): { san: string; vol: string } {
  const s = join(work, `san-${++n}`);
  const vol = join(s, "vol-0");
  mkdirSync(vol, { recursive: true });
  return { san: s, vol };
}

const started: ChildProcess[] = [];
after(() => {
  for (const c of started) if (c.exitCode === null && c.signalCode === null) c.kill("SIGKILL");
  rmSync(work, { recursive: true, force: true });
});

function start(env: Record<string, string>): Writer {
  const child = spawn(bin, [], {
    env: { PATH: process.env.PATH ?? "", INTERVAL_MS: "20", IDENTITY: "ledger-0", ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  started.push(child);
  let out = "";
  let err = "";
  child.stdout!.on("data", (b: Buffer) => (out += b.toString()));
  child.stderr!.on("data", (b: Buffer) => (err += b.toString()));
  return { child, out: () => out, err: () => err };
}

const count = (file: string, uid: string) =>
  existsSync(file) ? parseLedger(readFileSync(file, "utf8"), "f").records.filter((r) => r.podUID === uid).length : 0;
const until = (file: string, uid: string, records: number) =>
  waitFor(`${records} records of ${uid} in ${file}`, () => count(file, uid) >= records, { timeoutMs: 20_000, intervalMs: 20 });

/** Its exit status (after `signal`, if given); a writer that does not exit within 10 s is killed and fails the test. */
async function exit(w: Writer, signal?: NodeJS.Signals): Promise<number | null> {
  const done = w.child.exitCode !== null || w.child.signalCode !== null ? Promise.resolve([w.child.exitCode]) : once(w.child, "exit");
  if (signal) w.child.kill(signal);
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      w.child.kill("SIGKILL");
      reject(new Error(`the writer did not exit within 10 s${signal ? ` of ${signal}` : ""}; stderr: ${w.err().slice(-500)}`));
    }, 10_000);
  });
  try {
    const [code] = await Promise.race([done, late]);
    return code as number | null;
  } finally {
    clearTimeout(timer);
  }
}

describe("ledger writer", () => {
  test("runs, appends consecutive fsynced records with its identity, stops on SIGTERM with status 0, and the checker finds the file clean", async () => {
    const { san: dir, vol } = san();
    const file = join(vol, LEDGER_FILE);
    const t0 = Date.now();
    const w = start({ LEDGER_DIR: vol, POD_UID: A, NODE_NAME: "node-1" });
    await until(file, A, 10);
    await new Promise((r) => setTimeout(r, Math.max(0, t0 + 1000 - Date.now()))); // about a second of writing
    assert.equal(await exit(w, "SIGTERM"), 0, w.err());
    const t1 = Date.now();
    const read = readLedgers(dir);
    assert.deepEqual(read.files, ["vol-0/ledger.jsonl"]);
    assert.deepEqual(read.unreadable, []);
    const r = checkLedger(read);
    assert.deepEqual(r.violations, []);
    assert.deepEqual(r.problems, []);
    const seqs = read.records.map((x) => x.seq);
    assert.deepEqual(
      seqs,
      seqs.map((_, i) => i + 1),
      "consecutive from 1",
    );
    const stopped = /stopped after (\d+) records/.exec(w.out());
    assert.equal(Number(stopped?.[1]), seqs.length, "every record it wrote is in the file, and nothing after it said it stopped");
    const runs = new Set(read.records.map((x) => x.run));
    assert.equal(runs.size, 1);
    for (const x of read.records) {
      assert.deepEqual([x.identity, x.podUID, x.node, x.token], ["ledger-0", A, "node-1", undefined]);
      assert.ok(x.timeMs >= t0 && x.timeMs <= t1, `${x.time} within the run`);
    }
    assert.equal(r.instances.length, 1);
    assert.equal(r.instances[0]!.records, seqs.length);
  });

  test("two writers on one file at once (a split brain) are caught: interleaved in the file and overlapping in time", async () => {
    const { san: dir, vol } = san();
    const file = join(vol, LEDGER_FILE);
    const a = start({ LEDGER_DIR: vol, POD_UID: A, NODE_NAME: "node-1" });
    await until(file, A, 5);
    const b = start({ LEDGER_DIR: vol, POD_UID: B, NODE_NAME: "node-2" });
    await until(file, B, 5);
    await until(file, A, count(file, A) + 2); // A still writes after B's first record
    assert.equal(await exit(a, "SIGTERM"), 0);
    assert.equal(await exit(b, "SIGTERM"), 0);
    const r = checkLedger(readLedgers(dir));
    const interleave = r.violations.filter((v) => v.includes("interleave"));
    const overlap = r.violations.filter((v) => v.includes("writers' clocks"));
    assert.equal(interleave.length, 1, r.violations.join("\n"));
    assert.equal(overlap.length, 1, r.violations.join("\n"));
    for (const s of ["ledger-0", `pod ${A} (node-1)`, `pod ${B} (node-2)`, "vol-0/ledger.jsonl:"])
      assert.ok(interleave[0]!.includes(s), `${s} in ${interleave[0]}`);
    // O_APPEND keeps every record of both: no write lost, none duplicated, nothing torn.
    assert.equal(r.violations.length, 2, r.violations.join("\n"));
    assert.deepEqual(r.problems, []);
  });

  test("one writer after another on the same file: a clean handover", async () => {
    const { san: dir, vol } = san();
    const file = join(vol, LEDGER_FILE);
    const a = start({ LEDGER_DIR: vol, POD_UID: A, NODE_NAME: "node-1" });
    await until(file, A, 3);
    assert.equal(await exit(a, "SIGTERM"), 0);
    const b = start({ LEDGER_DIR: vol, POD_UID: B, NODE_NAME: "node-2" });
    await until(file, B, 3);
    assert.equal(await exit(b, "SIGTERM"), 0);
    const r = checkLedger(readLedgers(dir));
    assert.deepEqual(r.violations, []);
    assert.equal(r.handovers.length, 1);
    assert.deepEqual([r.handovers[0]!.from, r.handovers[0]!.to], [A, B]);
    assert.ok(r.handovers[0]!.gapMs > 0);
  });

  test("after a writer cut off mid-record, the next one starts on a new line: the torn line is reported, every record is read", async () => {
    const { san: dir, vol } = san();
    const file = join(vol, LEDGER_FILE);
    writeFileSync(
      file,
      `{"identity":"ledger-0","podUID":"${A}","node":"node-1","run":"r","seq":1,"time":"2026-11-22T10:00:00Z"}\n{"identity":"led`,
    );
    const b = start({ LEDGER_DIR: vol, POD_UID: B, NODE_NAME: "node-2" });
    await until(file, B, 3);
    assert.equal(await exit(b, "SIGTERM"), 0);
    const read = readLedgers(dir);
    assert.deepEqual(
      read.unreadable.map((u) => [u.line, u.text]),
      [[2, '{"identity":"led']],
    );
    assert.equal(read.records.filter((x) => x.podUID === B)[0]!.seq, 1, "its first record is not glued to the torn one");
    const r = checkLedger(read);
    assert.deepEqual(r.violations, []);
    assert.equal(r.problems.length, 1);
    assert.match(r.problems[0]!, /:2: unreadable line/);
  });

  test("a write error ends the writer with a non-zero status and a message, never a silent skip", async () => {
    const { vol } = san();
    symlinkSync("/dev/full", join(vol, LEDGER_FILE)); // every write fails with ENOSPC
    const w = start({ LEDGER_DIR: vol, POD_UID: A, NODE_NAME: "node-1" });
    assert.equal(await exit(w), 1);
    assert.match(w.err(), /ledger: ledger-0: write record 1: .*no space left on device/);
  });

  test("an unmounted volume (LEDGER_DIR missing) or missing settings stop the writer instead of writing elsewhere", async () => {
    const missing = join(work, "not-mounted");
    const w = start({ LEDGER_DIR: missing, POD_UID: A, NODE_NAME: "node-1" });
    assert.equal(await exit(w), 1);
    assert.match(w.err(), /no such file or directory/);
    assert.equal(existsSync(missing), false, "the directory was not created");

    const bad = start({ LEDGER_DIR: san().vol, NODE_NAME: "node-1", INTERVAL_MS: "fast" });
    assert.equal(await exit(bad), 2);
    assert.match(bad.err(), /missing environment variable\(s\) POD_UID/);
  });

  test("the token file's contents, read before every write, go in the records", async () => {
    const { san: dir, vol } = san();
    const file = join(vol, LEDGER_FILE);
    const token = join(work, `token-${n}`);
    writeFileSync(token, "41\n");
    const w = start({ LEDGER_DIR: vol, POD_UID: A, NODE_NAME: "node-1", TOKEN_FILE: token });
    await until(file, A, 2);
    // Replaced atomically, as the kubelet updates a downward-API file (a symlink swap).
    writeFileSync(`${token}.new`, "42");
    renameSync(`${token}.new`, token);
    await waitFor("a record with token 42", () => readLedgers(dir).records.some((x) => x.token === "42"), {
      timeoutMs: 20_000,
      intervalMs: 20,
    });
    assert.equal(await exit(w, "SIGTERM"), 0);
    const read = readLedgers(dir);
    assert.equal(read.records[0]!.token, "41");
    assert.deepEqual([...new Set(read.records.map((x) => x.token))], ["41", "42"]);
    assert.deepEqual(checkLedger(read).violations, []);
  });
});
