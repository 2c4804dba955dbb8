// The lab's watchdog on a real node (lab/watchdog.ts): the device the node agent reaches through its hostPath, with
// Linux's semantics, and the reset it does when unfed (the BMC's power cycle: every process of the node killed, a new
// boot ID). A writer started in the node's cgroup and mount namespace stands in for the agent, opening the device at
// the path the DaemonSet mounts, as a pod sees it; one test runs a real pod that does the same through a hostPath
// (killNodeAgent kills it). Timeout 3 s; the reset is asserted neither early nor later than the timeout + MARGIN_MS.
import { after, before, describe, test, type TestContext } from "node:test";
import assert from "node:assert/strict";
import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { existsSync, mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { Lab } from "../../lab/lab.ts";
import { waitFor } from "../../lab/health.ts";
import { realNodeImages } from "../../lab/images.ts";
import { isAlive, readRef } from "../../lab/processes.ts";
import { realContext } from "../../lab/real/machine.ts";
import { nodePaths } from "../../lab/real/config.ts";
import { inNodeArgs, nodePids, readSnapshots } from "../../lab/real/node.ts";
import { paths, readEvents, type LabEvent } from "../../lab/state.ts";
import {
  AGENT_NAMESPACE,
  WATCHDOG_DEVICE,
  WATCHDOG_HOST_PATH,
  WATCHDOG_POLL_MS,
  WATCHDOG_TIMEOUT_FILE,
  watchdogPaths,
  watchdogResets,
} from "../../lab/watchdog.ts";

const NODE = "node-1";
const T = 3;
/** How late a reset may come after the timeout: the 100 ms look, the lock, the power-off's freeze, on a loaded machine. */
const MARGIN_MS = 2_000;

describe("the lab watchdog on a real node", () => {
  let lab: Lab;
  before(async () => {
    lab = await Lab.up({
      dir: mkdtempSync(join(tmpdir(), "stockade-watchdog-")),
      nodes: 1,
      runtime: "real",
      images: await realNodeImages(),
      watchdogTimeoutSeconds: T,
    });
  });
  after(async () => {
    await lab?.down();
  });

  const ctx = () => realContext(lab.state, NODE);
  const initPid = () => readRef(nodePaths(ctx().dir).init)!.pid;
  /** A command in the node's cgroup and namespaces (as the node's own processes run). */
  const inNode = (script: string, ...args: string[]) => inNodeArgs(ctx(), ["sh", "-c", script, "in-node", ...args], { initPid: initPid() });
  const runInNode = (script: string, ...args: string[]) => spawnSync("sh", inNode(script, ...args), { encoding: "utf8", timeout: 10_000 });
  const resets = (): LabEvent[] => watchdogResets(lab.dir, { node: NODE });
  const lastFeed = () => Date.parse(lab.watchdog(NODE).lastFeed ?? "0");
  /** Each test starts from a node up in its current boot (a test before may have reset it: its lock is held meanwhile). */
  const ready = async () => {
    await waitFor("no power change under way", () => !existsSync(paths(lab.dir).node(NODE).lock), { timeoutMs: 30_000, intervalMs: 50 });
    await lab.waitForNodeReady(NODE, { timeoutMs: 60_000 });
  };

  /** The agent's stand-in: `cat` writing its stdin to the device, opened in the node as a pod would open it. */
  class Writer {
    readonly child: ChildProcess;
    readonly exited: Promise<void>;
    lastFeedMs = 0;
    constructor() {
      this.child = spawn("sh", inNode('exec cat > "$1"', WATCHDOG_DEVICE), { stdio: ["pipe", "ignore", "inherit"] });
      this.exited = new Promise((r) => this.child.once("exit", () => r()));
    }
    /** The cat process itself (the node's process that holds the device), once the shell has exec'd into it. */
    async open(): Promise<void> {
      await waitFor(`${NODE}'s watchdog armed by the writer`, () => lab.watchdog(NODE).armed, { timeoutMs: 10_000, intervalMs: 50 });
    }
    feed(): void {
      this.child.stdin!.write("k");
      this.lastFeedMs = Date.now();
    }
    async feedFor(ms: number): Promise<void> {
      const until = Date.now() + ms;
      while (Date.now() < until) {
        this.feed();
        await sleep(1_000);
      }
    }
    async close(magic: boolean): Promise<void> {
      this.child.stdin!.end(magic ? "V" : "");
      if (magic) this.lastFeedMs = Date.now();
      await this.exited;
    }
  }

  /**
   * Waits for the watchdog's reset after `before` resets, and checks when it came: not before the timeout after the
   * last feed it recorded, not much after; and that last feed is the writer's (when `lastFeedMs` is known).
   */
  async function expectReset(before: number, lastFeedMs?: number, t?: TestContext): Promise<LabEvent> {
    const ev = await waitFor(`${NODE}'s watchdog to reset it`, () => resets()[before], { timeoutMs: (T + 15) * 1000, intervalMs: 50 });
    const lastFeed = Date.parse(String(ev.detail.lastFeed));
    if (lastFeedMs !== undefined)
      assert.ok(
        Math.abs(lastFeed - lastFeedMs) < 300,
        `the recorded last feed (${ev.detail.lastFeed}) is the writer's (${new Date(lastFeedMs).toISOString()})`,
      );
    const after = Date.parse(ev.time) - lastFeed;
    assert.ok(after >= T * 1000 - 20, `not before the timeout: ${after} ms after the last feed`);
    assert.ok(after <= T * 1000 + MARGIN_MS, `within the timeout + ${MARGIN_MS} ms: ${after} ms after the last feed`);
    assert.equal(ev.detail.timeoutSeconds, T);
    if (lastFeedMs !== undefined)
      t?.diagnostic(`reset ${Date.parse(ev.time) - lastFeedMs - T * 1000} ms after the timeout from the writer's last write`);
    return ev;
  }

  async function waitBooted(oldBoot: string | undefined): Promise<string> {
    const boot = await waitFor("a new boot", () => (lab.machine(NODE).bootID !== oldBoot ? lab.machine(NODE).bootID : undefined), {
      timeoutMs: 30_000,
    });
    await lab.waitForNodeReady(NODE, { bootID: boot, timeoutMs: 60_000 });
    return boot!;
  }

  test("the node sees its own device and timeout at the DaemonSet's path, read-only; the host's path is not it", () => {
    const r = runInNode(
      `test -p "$1" && cat "$2" && ! touch "$3/x" 2>/dev/null && echo read-only`,
      WATCHDOG_DEVICE,
      WATCHDOG_TIMEOUT_FILE,
      WATCHDOG_HOST_PATH,
    );
    assert.equal(r.status, 0, r.stderr);
    assert.equal(r.stdout, `${T}\nread-only\n`);
    assert.ok(!existsSync(WATCHDOG_DEVICE), "outside the node's mount namespace the path holds no device");
    assert.deepEqual(
      { ...lab.watchdog(NODE), bootID: undefined, lastFeed: undefined },
      {
        enabled: true,
        present: true,
        armed: false,
        bootID: undefined,
        lastFeed: undefined,
        timeoutSeconds: T,
      },
    );
  });

  test("fed every second, it never resets the node (3 × the timeout)", async () => {
    await ready();
    const boot = lab.machine(NODE).bootID;
    const w = new Writer();
    await w.open();
    await w.feedFor(3 * T * 1000 + 500);
    assert.equal(resets().length, 0);
    assert.equal(lab.machine(NODE).bootID, boot);
    assert.ok(Math.abs(lastFeed() - w.lastFeedMs) < 300, "every write is a feed");
    await w.close(true);
  });

  test("unfed, it resets the node after its timeout: a new boot ID, every process of the old boot gone", async (t) => {
    await ready();
    const boot = lab.machine(NODE).bootID;
    const before = resets().length;
    const w = new Writer();
    await w.open();
    await w.feedFor(2_500); // then nothing more, the device held open
    const writerPid = w.child.pid!;
    const ev = await expectReset(before, w.lastFeedMs, t);
    assert.equal(ev.detail.bootID, boot);
    await w.exited;
    assert.equal(w.child.signalCode, "SIGKILL", "the writer was a process of the node: killed with it");
    const newBoot = await waitBooted(boot);
    t.diagnostic(`node Ready with its new boot ID ${Date.now() - Date.parse(ev.time)} ms after the reset began`);
    assert.notEqual(newBoot, boot);
    const snap = readSnapshots(ctx().dir).findLast((x) => x.bootID === boot && /before kill/.test(x.reason));
    assert.ok(snap, "the power-off recorded the old boot's processes");
    const old = snap.processes.map((p) => p.pid);
    assert.ok(old.length > 3, `${old.length} processes`);
    const now = new Set(nodePids(ctx().cgroup));
    assert.deepEqual(
      old.filter((p) => now.has(p)),
      [],
      "no process of the old boot runs",
    );
    // The reset is the BMC's power cycle: off, on, boot, each from the watchdog.
    const after = readEvents(lab.dir).filter((e) => e.node === NODE && Date.parse(e.time) >= Date.parse(ev.time));
    assert.deepEqual(
      after.filter((e) => e.kind === "power" || e.kind === "boot").map((e) => [e.kind, e.detail.power ?? "", e.detail.source]),
      [
        ["power", "off", "watchdog"],
        ["power", "on", "watchdog"],
        ["boot", "", "watchdog"],
      ],
    );
    assert.ok(old.includes(writerPid), "the writer was among them");
    assert.equal(lab.watchdog(NODE).armed, false, "the new boot's watchdog is disarmed");
  });

  test('"V" then close disarms it: no reset for 3 × the timeout', async () => {
    await ready();
    const boot = lab.machine(NODE).bootID;
    const before = resets().length;
    const w = new Writer();
    await w.open();
    await w.feedFor(2_000);
    await w.close(true);
    await waitFor("disarmed", () => !lab.watchdog(NODE).armed, { timeoutMs: 5_000, intervalMs: 50 });
    await sleep(3 * T * 1000);
    assert.equal(resets().length, before);
    assert.equal(lab.machine(NODE).bootID, boot);
    assert.ok(readEvents(lab.dir).some((e) => e.kind === "watchdog" && e.detail.action === "disarmed" && e.detail.bootID === boot));
  });

  test('a close without "V" leaves it counting: reset after the timeout from the last write', async (t) => {
    await ready();
    const boot = lab.machine(NODE).bootID;
    const before = resets().length;
    const w = new Writer();
    await w.open();
    await w.feedFor(1_500);
    await w.close(false);
    assert.equal(w.child.exitCode, 0, "the writer closed it and exited on its own");
    await expectReset(before, w.lastFeedMs, t);
    await waitBooted(boot);
  });

  test("the lab's watchdog process killed while armed: its supervisor restarts it and the reset still comes", async () => {
    await ready();
    const boot = lab.machine(NODE).bootID;
    const before = resets().length;
    const w = new Writer();
    await w.open();
    await w.feedFor(1_500);
    const supervisor = lab.watchdogProcess();
    assert.ok(supervisor && isAlive(supervisor));
    const child = spawnSync("pgrep", ["-P", String(supervisor.pid)], { encoding: "utf8" })
      .stdout.trim()
      .split("\n")
      .map(Number)[0];
    assert.ok(child, "the watchdog process under its supervisor");
    process.kill(child, "SIGKILL");
    const ev = await waitFor(`${NODE}'s watchdog to reset it`, () => resets()[before], { timeoutMs: (T + 15) * 1000, intervalMs: 50 });
    const after = Date.parse(ev.time) - w.lastFeedMs;
    assert.ok(
      after >= T * 1000 - 20 && after <= T * 1000 + MARGIN_MS + 3_000,
      `reset ${after} ms after the last feed (a restart costs ~1 s)`,
    );
    await w.exited;
    await waitBooted(boot);
  });

  test("killNodeAgent: the agent's pod (hostPath) is killed and stays dead, the armed watchdog fires", async () => {
    await ready();
    const boot = lab.machine(NODE).bootID;
    const before = resets().length;
    await lab.core.createNamespace({ body: { metadata: { name: AGENT_NAMESPACE } } }).catch(() => undefined);
    await lab.core.createNamespacedPod({
      namespace: AGENT_NAMESPACE,
      body: {
        metadata: { name: "agent" },
        spec: {
          nodeName: NODE,
          terminationGracePeriodSeconds: 0,
          containers: [
            {
              name: "agent",
              image: lab.state.real!.images.busybox!,
              imagePullPolicy: "Never",
              command: ["sh", "-c", `exec 3>/watchdog/watchdog; while :; do printf k >&3; sleep 1; done`],
              volumeMounts: [{ name: "watchdog", mountPath: "/watchdog", readOnly: true }],
            },
          ],
          volumes: [{ name: "watchdog", hostPath: { path: WATCHDOG_HOST_PATH, type: "Directory" } }],
        },
      },
    });
    await waitFor("the agent pod feeding the watchdog", () => lab.watchdog(NODE).armed && Date.now() - lastFeed() < 1_500, {
      timeoutMs: 60_000,
      intervalMs: 100,
    });
    const killed = await lab.killNodeAgent(NODE);
    assert.ok(killed.length >= 1, `the agent's processes: ${killed.join(", ")}`);
    assert.ok(!killed.includes(initPid()));
    const ev = await expectReset(before);
    assert.equal(ev.detail.bootID, boot);
    // The kubelet restarts a killed container at once (the first time): the restarted agent may open and write before
    // the lab kills it again, as a crash-looping agent would. No feed comes after the last kill of this boot.
    const kills = readEvents(lab.dir).filter(
      (e) => e.kind === "fault" && e.detail.fault === "agent-killed" && e.node === NODE && Date.parse(e.time) <= Date.parse(ev.time),
    );
    assert.ok(kills.length >= 1, "the fault is in the lab's log");
    const lastKill = Date.parse(kills.at(-1)!.time);
    // A feed is stamped when the lab's next look reads it (every WATCHDOG_POLL_MS, later under load): one written
    // before the kill can carry a time just after it (80 ms after, seen in a full run). A feed of an agent started again
    // after the last kill would come with a kill after it (the fault kills every 300 ms while it is in force).
    assert.ok(
      Date.parse(String(ev.detail.lastFeed)) <= lastKill + WATCHDOG_POLL_MS + 400,
      `the last feed (${ev.detail.lastFeed}) before the last kill (${kills.at(-1)!.time})`,
    );
    const newBoot = await waitBooted(boot);
    // The fault ends with the boot: the kubelet starts the pod again and it arms the new boot's watchdog.
    await waitFor(
      "the agent back, arming the new boot's watchdog",
      () => lab.watchdog(NODE).armed && lab.watchdog(NODE).bootID === newBoot,
      {
        timeoutMs: 60_000,
        intervalMs: 100,
      },
    );
    assert.ok(!existsSync(watchdogPaths(ctx().dir).agentKilled));
  });

  test("disableWatchdog: no device (the agent cannot arm it) and no reset, even of a watchdog armed before", async () => {
    await ready();
    const boot = lab.machine(NODE).bootID;
    const before = resets().length;
    assert.equal(lab.watchdog(NODE).armed, true, "armed by the agent pod of the test before");
    await lab.disableWatchdog(NODE);
    await lab.core.deleteNamespacedPod({ name: "agent", namespace: AGENT_NAMESPACE, gracePeriodSeconds: 0 });
    const r = runInNode(`exec 3>"$1"`, WATCHDOG_DEVICE);
    assert.notEqual(r.status, 0, "opening the device fails");
    assert.match(r.stderr, /read-only|No such file/i);
    await sleep(3 * T * 1000);
    assert.equal(resets().length, before);
    assert.equal(lab.machine(NODE).bootID, boot);
    assert.deepEqual(
      { enabled: lab.watchdog(NODE).enabled, present: lab.watchdog(NODE).present, armed: lab.watchdog(NODE).armed },
      { enabled: false, present: false, armed: false },
    );
    // It stays so across a power cycle.
    await lab.bmc(NODE, "off");
    await lab.bmc(NODE, "on");
    await waitBooted(boot);
    assert.equal(runInNode(`test -e "$1"`, WATCHDOG_DEVICE).status, 1);
  });
});
