// The lab watchdog's logic (lab/watchdog.ts), one look at a time: Linux's semantics as the node agent relies on them
// (open starts it, every write feeds, "V" then close disarms, close without it keeps counting, a reopen feeds nothing,
// expiry after the timeout)
// and what a restarted watchdog process resumes from. The device and the reset are tested on a real node in
// test/lab/watchdog.test.ts.
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { existsSync, mkdtempSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Lab } from "../../lab/lab.ts";
import {
  disableWatchdogDevice,
  enableWatchdogDevice,
  freshWatchdog,
  killContainers,
  prepareWatchdog,
  removeWatchdog,
  resumeWatchdog,
  watchdogAtBoot,
  watchdogPaths,
  watchdogStatus,
  watchdogStep,
  type WatchdogLook,
  type WatchdogState,
} from "../../lab/watchdog.ts";

const BOOT = "boot-1";
const look = (o: Partial<WatchdogLook> = {}): WatchdogLook => ({
  bootID: BOOT,
  powered: true,
  enabled: true,
  data: "",
  writers: false,
  timeoutSeconds: 5,
  ...o,
});

/** Runs looks at the given monotonic times (ms) from a fresh, disarmed watchdog of BOOT. */
function run(steps: [number, Partial<WatchdogLook>][], from: WatchdogState = freshWatchdog(BOOT)) {
  let st = from;
  const out = [];
  for (const [t, o] of steps) {
    const r = watchdogStep(st, look(o), t, 1_700_000_000_000 + t);
    st = r.state;
    out.push(r);
  }
  return out;
}

describe("lab watchdog: one look at a time", () => {
  test("a disarmed watchdog never expires, however long nobody writes", () => {
    const r = run([
      [0, {}],
      [60_000, {}],
    ]);
    assert.equal(r[1]!.state.armed, false);
    assert.equal(r[1]!.expired, false);
  });

  test("opening starts it (the count begins at the open); unfed for the timeout it expires, not a moment before", () => {
    const r = run([
      [1_000, { writers: true }],
      [5_999, { writers: true }],
      [6_000, { writers: true }],
    ]);
    assert.deepEqual(r[0]!.transitions, ["armed"]);
    assert.equal(r[0]!.state.lastFeedMono, 1_000);
    assert.equal(r[1]!.expired, false, "4.999 s after the open");
    assert.equal(r[2]!.expired, true, "5 s after the open");
  });

  test("every write feeds it: fed every second it never expires", () => {
    const steps: [number, Partial<WatchdogLook>][] = [[0, { writers: true }]];
    for (let t = 1_000; t <= 30_000; t += 1_000) steps.push([t, { writers: true, data: "k" }]);
    const r = run(steps);
    assert.ok(r.every((x) => !x.expired));
    assert.equal(r.at(-1)!.state.lastFeedMono, 30_000);
    assert.equal(r.at(-1)!.state.lastFeedWallMs, 1_700_000_030_000, "the wall time of the look that saw it, for people");
  });

  test('"V" then close disarms it (the magic close), even when both happen between two looks', () => {
    const separate = run([
      [0, { writers: true, data: "k" }],
      [1_000, { writers: true, data: "V" }],
      [1_100, { writers: false }],
      [60_000, {}],
    ]);
    assert.deepEqual(separate[2]!.transitions, ["disarmed"]);
    assert.equal(separate[3]!.state.armed, false);
    assert.equal(separate[3]!.expired, false);
    const together = run([
      [0, { writers: true, data: "k" }],
      [1_000, { writers: false, data: "kkV" }],
      [60_000, {}],
    ]);
    assert.deepEqual(together[1]!.transitions, ["disarmed"]);
    assert.equal(together[2]!.expired, false);
  });

  test("a close without V leaves it counting from the last write: it expires", () => {
    const r = run([
      [0, { writers: true, data: "k" }],
      [1_000, { writers: false, data: "k" }],
      [5_999, {}],
      [6_000, {}],
    ]);
    assert.deepEqual(r[1]!.transitions, ["closed-armed"]);
    assert.equal(r[2]!.expired, false);
    assert.equal(r[3]!.expired, true);
  });

  test('"V" followed by another write no longer disarms at close; nor does "V" without a close', () => {
    const after = run([
      [0, { writers: true, data: "V" }],
      [500, { writers: true, data: "k" }],
      [600, { writers: false }],
      [5_500, {}],
    ]);
    assert.equal(after[2]!.state.armed, true);
    assert.equal(after[3]!.expired, true);
    const open = run([
      [0, { writers: true, data: "kV" }],
      [5_000, { writers: true }],
    ]);
    assert.equal(open[1]!.expired, true, "still open: Linux's release happens at close only");
  });

  test("an agent that opens, writes and closes repeatedly without V keeps it armed; each write feeds it", () => {
    const steps: [number, Partial<WatchdogLook>][] = [];
    for (let t = 0; t < 20_000; t += 2_000) steps.push([t, { writers: true }], [t + 1_000, { writers: false, data: "k" }]);
    const r = run(steps);
    assert.ok(r.every((x) => !x.expired));
    assert.ok(r.slice(1).every((x) => x.state.armed));
    assert.deepEqual(
      r.flatMap((x) => x.transitions).filter((t) => t === "armed"),
      ["armed"],
    );
  });

  test("opening it again while armed (closed without V) does not feed it, as on Linux: a restarted agent's open extends nothing", () => {
    const r = run([
      [0, { writers: true, data: "k" }],
      [1_000, { writers: false }],
      [3_000, { writers: true }],
      [4_999, { writers: true }],
      [5_000, { writers: true }],
    ]);
    assert.deepEqual(r[1]!.transitions, ["closed-armed"]);
    assert.equal(r[2]!.state.lastFeedMono, 0, "the reopen at 3 s is no feed");
    assert.equal(r[3]!.expired, false);
    assert.equal(r[4]!.expired, true, "5 s after the last write, not after the reopen");
  });

  test("a new boot or a powered-off machine starts disarmed, whatever the last boot left", () => {
    const armed = run([[0, { writers: true, data: "k" }]])[0]!.state;
    const reboot = watchdogStep(armed, look({ bootID: "boot-2" }), 60_000, 0);
    assert.equal(reboot.state.armed, false);
    assert.equal(reboot.state.bootID, "boot-2");
    assert.deepEqual(reboot.transitions, ["new-boot"]);
    assert.equal(reboot.expired, false);
    const off = watchdogStep(armed, look({ powered: false }), 60_000, 0);
    assert.equal(off.state.armed, false);
    assert.equal(off.expired, false);
    // The new boot's agent opening it in the same look arms the new boot's watchdog.
    const opened = watchdogStep(armed, look({ bootID: "boot-2", writers: true }), 60_000, 0);
    assert.equal(opened.state.armed, true);
    assert.equal(opened.state.lastFeedMono, 60_000);
  });

  test("disabled (or the device gone), an armed watchdog stops counting and cannot be armed", () => {
    const armed = run([[0, { writers: true, data: "k" }]])[0]!.state;
    const r = run(
      [
        [10_000, { enabled: false, writers: true, data: "k" }],
        [60_000, { enabled: false, writers: true }],
      ],
      armed,
    );
    assert.ok(r.every((x) => !x.expired && !x.state.armed));
  });

  test("a restarted watchdog process resumes its boot's state, the last feed placed on its new clock by the wall clock", () => {
    const saved: WatchdogState = { ...freshWatchdog(BOOT), armed: true, writerOpen: true, lastFeedMono: 123, lastFeedWallMs: 10_000 };
    // Restarted at wall 12 000, mono 500: the last feed was 2 s ago.
    const r = resumeWatchdog(saved, BOOT, 500, 12_000);
    assert.equal(r.armed, true);
    assert.equal(r.lastFeedMono, -1_500);
    assert.equal(watchdogStep(r, look({ writers: true }), 3_499, 15_000).expired, false);
    assert.equal(watchdogStep(r, look({ writers: true }), 3_500, 15_000).expired, true);
    // Another boot's state, or none: disarmed.
    assert.equal(resumeWatchdog(saved, "boot-2", 500, 12_000).armed, false);
    assert.equal(resumeWatchdog(undefined, BOOT, 500, 12_000).armed, false);
    // A wall clock set back since the last feed does not place it in the future.
    assert.equal(resumeWatchdog(saved, BOOT, 500, 5_000).lastFeedMono, 500);
  });

  test("what a restarted process finds written counts from when the one before last looked: never later than it was written", () => {
    const saved: WatchdogState = { ...freshWatchdog(BOOT), armed: true, writerOpen: true, lastFeedMono: 0, lastFeedWallMs: 10_000 };
    const r = resumeWatchdog(saved, BOOT, 500, 12_000);
    // The old process last looked at wall 10 500; the bytes were written after that, at most now.
    const first = watchdogStep(r, look({ writers: true, data: "k", since: { mono: -1_000, wallMs: 10_500 } }), 500, 12_000);
    assert.equal(first.state.lastFeedMono, -1_000);
    assert.equal(first.state.lastFeedWallMs, 10_500);
    assert.equal(watchdogStep(first.state, look({ writers: true }), 3_999, 15_499).expired, false);
    assert.equal(watchdogStep(first.state, look({ writers: true }), 4_000, 15_500).expired, true, "5 s after 10 500, not after now");
    // A since earlier than the feed it already knows never moves the last feed back.
    const older = watchdogStep(r, look({ writers: true, data: "k", since: { mono: -5_000, wallMs: 6_500 } }), 500, 12_000);
    assert.equal(older.state.lastFeedMono, -1_500);
  });
});

describe("lab watchdog: the agent-killed fault", () => {
  test("kills only processes of the agent's containers, and counts only those it signalled", () => {
    const containerOf = new Map<number, string>([
      [11, "agent"],
      [12, "pause-of-agent"],
      [13, "other"],
      [14, "agent"],
    ]);
    const signalled: number[] = [];
    const kill = (pid: number) => {
      if (pid === 14) throw Object.assign(new Error("ESRCH"), { code: "ESRCH" }); // exited meanwhile
      signalled.push(pid);
    };
    assert.deepEqual(
      killContainers([11, 12, 13, 14, 15], (p) => containerOf.get(p), new Set(["agent"]), kill),
      [11],
    );
    assert.deepEqual(signalled, [11]);
  });
});

describe("lab watchdog: kwok nodes", () => {
  test("the watchdog faults and status refuse kwok nodes with a clear error", async () => {
    const dir = mkdtempSync(join(tmpdir(), "stockade-kwok-watchdog-"));
    try {
      const kubeconfig = {
        apiVersion: "v1",
        kind: "Config",
        clusters: [{ name: "lab", cluster: { server: "https://127.0.0.1:1" } }],
        users: [{ name: "admin", user: { token: "x" } }],
        contexts: [{ name: "lab", context: { cluster: "lab", user: "admin" } }],
        "current-context": "lab",
      };
      writeFileSync(join(dir, "kubeconfig"), JSON.stringify(kubeconfig));
      const nodes = [
        {
          name: "node-1",
          index: 0,
          zone: "zone-a",
          cidr: "10.244.1.0/24",
          bmc: { address: "127.0.0.1", port: 1, username: "admin", passwordFile: "/nonexistent" },
        },
      ];
      writeFileSync(join(dir, "state.json"), JSON.stringify({ version: 1, dir, runtime: "kwok", nodes }));
      const lab = Lab.attach(dir);
      const real = /needs real nodes \(npm run lab -- up --runtime real\)/;
      await assert.rejects(lab.killNodeAgent("node-1"), real);
      await assert.rejects(lab.disableWatchdog("node-1"), real);
      assert.throws(() => lab.watchdog("node-1"), real);
      assert.throws(() => lab.setWatchdogTimeout("node-1", 5), real);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

test("the watchdog-disabled fault lasts across boots until enableWatchdogDevice, which gives a new, disarmed device", async () => {
  const dir = mkdtempSync(join(tmpdir(), "stockade-lab-watchdog-enable-"));
  try {
    prepareWatchdog(dir, 7);
    await watchdogAtBoot(dir);
    assert.ok(statSync(watchdogPaths(dir).device).isFIFO(), "a device at boot");
    await disableWatchdogDevice(dir);
    assert.equal(watchdogStatus(dir).enabled, false);
    assert.equal(existsSync(watchdogPaths(dir).device), false, "no device once disabled");
    await watchdogAtBoot(dir); // a reset while disabled: still none
    assert.equal(existsSync(watchdogPaths(dir).device), false, "no device after a boot while disabled");
    await enableWatchdogDevice(dir);
    const st = watchdogStatus(dir);
    assert.equal(st.enabled, true);
    assert.equal(st.present, true);
    assert.equal(st.armed, false, "disarmed until an agent opens it");
    assert.equal(st.timeoutSeconds, 7, "the lab's timeout kept");
    assert.ok(statSync(watchdogPaths(dir).device).isFIFO());
  } finally {
    await removeWatchdog(dir);
    rmSync(dir, { recursive: true, force: true });
  }
});
