// kube/watchdog-observer.ts: what the operator itself observed of the node agents' records, on a fake monotonic clock.
// The records are shaped as the node agent writes them (a Lease per node in stockade-node-agent, its annotations, a
// resourceVersion per write). What is shown: t0 at the first look after the first list; the node's own record and
// kubelet Lease silences as the arithmetic needs them; the doubt window restarting when a third of the other agents
// are silent, including a silence that began and ended between two looks; other records not yet seen renewed counting
// as silent; and a new observer (a restarted or newly elected operator) starting again from its own first look.
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import type { V1Lease } from "@kubernetes/client-node";
import { watchdogEvidence as evidenceOf, type WatchdogEvidenceInput } from "../../src/decide/watchdog-evidence.ts";

/** The evidence with the record's authority in force unless the look said otherwise (the shell reads it: observe.ts). */
const watchdogEvidence = (x: WatchdogEvidenceInput) => evidenceOf({ ...x, authority: x.authority ?? { policy: [] } });
import { WatchdogObserver } from "../../src/kube/watchdog-observer.ts";
import { agentRecord } from "./decide-fixtures.ts";

const EPOCH = Date.parse("2026-01-01T00:00:00Z");

/** A fake monotonic clock (ms) with its wall clock. */
function clock() {
  const c = { t: 0, mono: () => c.t, wall: () => new Date(EPOCH + c.t).toISOString() };
  return c;
}

let rv = 100;
/** A node agent's record as it writes it: every write a new resourceVersion and renewTime. */
function record(node: string, renewMs: number, armed = "true"): V1Lease {
  return agentRecord(node, { armed, resourceVersion: String(++rv), renewTime: new Date(EPOCH + renewMs) });
}

const OTHERS = ["n2", "n3", "n4", "n5", "n6", "n7"];

/** An observer synced with n1's record and six others, each seen renewed once after the list (so none is unseen). */
function world() {
  const c = clock();
  const o = new WatchdogObserver(c.mono, c.wall);
  const latest = new Map<string, V1Lease>();
  const write = (node: string) => {
    const l = record(node, c.t);
    latest.set(node, l);
    o.observe(l);
  };
  for (const n of ["n1", ...OTHERS]) write(n);
  o.synced();
  c.t += 1_000;
  for (const n of OTHERS) write(n);
  /** Every other agent renews, except those named. */
  const renewOthers = (except: string[] = []) => OTHERS.filter((n) => !except.includes(n)).forEach(write);
  return { c, o, write, renewOthers, latest };
}

describe("kube/watchdog-observer", () => {
  test("nothing before the records' first list: no window starts", () => {
    const c = clock();
    const o = new WatchdogObserver(c.mono, c.wall);
    o.observe(record("n1", 0));
    assert.equal(o.look("uid-1", "n1", record("n1", 0), 0), undefined);
    o.synced();
    assert.ok(o.look("uid-1", "n1", undefined, 0));
  });

  test("t0 is the first look; the wait holds at 68 s of silence, not at 67.999 s", () => {
    const { c, o, renewOthers, latest } = world();
    const t0 = c.t;
    const first = o.look("uid-1", "n1", latest.get("n1"), 0)!;
    assert.equal(first.t0Ms, t0);
    assert.equal(first.t0Wall, new Date(EPOCH + t0).toISOString());
    // Everyone else renews every 5 s; n1 and its kubelet stay silent.
    const step = (ms: number) => {
      for (let left = ms; left > 0; left -= Math.min(5_000, left)) {
        c.t += Math.min(5_000, left);
        renewOthers();
      }
    };
    step(67_999);
    const before = o.look("uid-1", "n1", latest.get("n1"), c.t);
    assert.equal(watchdogEvidence(before!).holds, false);
    step(1);
    const after = o.look("uid-1", "n1", latest.get("n1"), c.t)!;
    const w = watchdogEvidence(after);
    assert.equal(w.holds, true, JSON.stringify(w));
    assert.equal(after.t0Ms, t0, "t0 does not move");
    assert.equal(after.window.restarts, 0);
  });

  test("the node's own record renewed after t0 (a fresh read with a new version): no evidence, however long after", () => {
    const { c, o, renewOthers, write, latest } = world();
    o.look("uid-1", "n1", latest.get("n1"), 0);
    c.t += 10_000;
    renewOthers();
    write("n1"); // the agent wrote its record after the NodeFence was seen: it may be running
    for (let i = 0; i < 40; i++) {
      c.t += 5_000;
      renewOthers();
    }
    const x = o.look("uid-1", "n1", latest.get("n1"), c.t)!;
    assert.ok(x.recordSilentMs! < x.nowMs - x.t0Ms);
    const w = watchdogEvidence(x);
    assert.equal(w.holds, false);
    assert.match(!w.holds ? w.reason : "", /node agent record was renewed/);
  });

  test("a fresh read newer than the cache counts as a renewal seen now", () => {
    const { c, o, renewOthers, latest } = world();
    o.look("uid-1", "n1", latest.get("n1"), 0);
    c.t += 70_000;
    renewOthers();
    const fresh = record("n1", c.t); // written, the watch has not delivered it yet
    const x = o.look("uid-1", "n1", fresh, c.t)!;
    assert.equal(x.recordSilentMs, 0);
    assert.equal(watchdogEvidence(x).holds, false);
  });

  test("no record on the fresh read: no evidence (the cached one is not used)", () => {
    const { o } = world();
    const x = o.look("uid-1", "n1", undefined, 0)!;
    assert.equal(x.record, undefined);
    assert.match((watchdogEvidence(x) as { reason: string }).reason, /has no node agent record/);
  });

  test("a third of the other agents silent for F − 2 s restarts the window; fewer does not", () => {
    const { c, o, renewOthers, latest } = world();
    o.look("uid-1", "n1", latest.get("n1"), 0);
    // One of six silent for 9 s: below a third.
    for (let i = 0; i < 3; i++) {
      c.t += 3_000;
      renewOthers(["n2"]);
    }
    let x = o.look("uid-1", "n1", latest.get("n1"), c.t)!;
    assert.equal(x.window.restarts, 0);
    assert.equal(x.window.silentAgents, 1);
    // Two of six (a third) silent for ≥ 8 s: the window starts again now.
    renewOthers();
    for (let i = 0; i < 3; i++) {
      c.t += 3_000;
      renewOthers(["n2", "n3"]);
    }
    x = o.look("uid-1", "n1", latest.get("n1"), c.t)!;
    assert.equal(x.window.restarts, 1);
    assert.equal(x.window.startMs, c.t);
    assert.equal(x.window.silentAgents, 2);
    assert.equal(x.window.agents, 6);
    const w = watchdogEvidence({ ...x, nowMs: x.t0Ms + 68_000, kubeletSilentMs: 1e9, recordSilentMs: 1e9 });
    assert.equal(w.holds, false, "68 s after t0 is not enough once the window restarted");
  });

  test("a silence that began and ended between two looks still restarts the window", () => {
    const { c, o, renewOthers, latest } = world();
    o.look("uid-1", "n1", latest.get("n1"), 0);
    c.t += 1_000;
    renewOthers();
    // n2 and n3 fall silent for 9 s, then renew again; the next look comes only after that.
    c.t += 9_000;
    renewOthers(); // everyone renews at the end of the gap (n2, n3 after 9 s of silence; the others renew too)
    c.t += 1_000;
    renewOthers();
    // The look: nobody is silent now, yet n2 and n3 were silent 9 s ≥ F − 2 = 8 s since the previous look.
    const x = o.look("uid-1", "n1", latest.get("n1"), c.t)!;
    assert.equal(x.window.restarts, 1);
    assert.equal(x.window.startMs, c.t);
  });

  test("others not yet seen renewed by this process count as silent: doubt until they are", () => {
    const c = clock();
    const o = new WatchdogObserver(c.mono, c.wall);
    for (const n of ["n1", ...OTHERS]) o.observe(record(n, 0));
    o.synced();
    c.t += 1_000;
    let x = o.look("uid-1", "n1", record("n1", 0), 0)!;
    // Listed, never seen to change: the silence may have begun long before this process looked.
    assert.equal(x.window.silentAgents, 6);
    c.t += 1_000;
    x = o.look("uid-1", "n1", undefined, 0)!;
    assert.equal(x.window.restarts, 2);
    assert.equal(x.window.startMs, c.t);
    for (const n of OTHERS) o.observe(record(n, c.t));
    c.t += 1_000;
    x = o.look("uid-1", "n1", undefined, 0)!;
    assert.equal(x.window.silentAgents, 0);
    assert.equal(x.window.restarts, 2, "seen renewed: no more doubt");
  });

  test("a restarted operator (a new observer) starts t0 again from its own first look: more time, never less", () => {
    const { c, o, renewOthers, latest } = world();
    o.look("uid-1", "n1", latest.get("n1"), 0);
    for (let i = 0; i < 12; i++) {
      c.t += 5_000;
      renewOthers();
    }
    assert.equal(watchdogEvidence(o.look("uid-1", "n1", latest.get("n1"), c.t)!).holds, false);
    for (let i = 0; i < 2; i++) {
      c.t += 5_000;
      renewOthers();
    }
    assert.equal(watchdogEvidence(o.look("uid-1", "n1", latest.get("n1"), c.t)!).holds, true, "the first process would release");
    // The new process lists the same records at the same real moment: nothing it watched, everything from now.
    const restarted = new WatchdogObserver(c.mono, c.wall);
    for (const l of latest.values()) restarted.observe(l);
    restarted.synced();
    const y = restarted.look("uid-1", "n1", latest.get("n1"), 0)!;
    assert.equal(y.t0Ms, c.t);
    const w = watchdogEvidence({ ...y, kubeletSilentMs: 1e9 });
    assert.equal(w.holds, false);
    assert.equal(w.arithmetic?.observedSeconds, 0);
  });

  test("a deleted fence's window is forgotten: seen again, it starts again", () => {
    const { c, o, latest } = world();
    o.look("uid-1", "n1", latest.get("n1"), 0);
    c.t += 30_000;
    o.drop("uid-1");
    assert.equal(o.look("uid-1", "n1", latest.get("n1"), 0)!.t0Ms, c.t);
  });
});
