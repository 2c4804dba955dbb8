// The lab's watchdog process: one per real-node lab, under a supervisor that starts it again if it dies
// (lab/lab.ts), looking at every node's watchdog device every WATCHDOG_POLL_MS (lab/watchdog.ts says how it works).
//   watchdog-daemon.ts <lab-dir>
// It also carries out the killNodeAgent fault while it is in force: the agent's containers on that node are killed
// whenever they run again, until the node boots anew or is healed.
import { closeSync, constants, fstatSync, openSync, readSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { performance } from "node:perf_hooks";
import { watchdogReset } from "./machine.ts";
import { killNodeAgentProcesses, realContext } from "./real/machine.ts";
import { nodePaths } from "./real/config.ts";
import { appendEvent, paths, readState, readText, type LabState } from "./state.ts";
import {
  agentKilledFor,
  clearAgentKilled,
  DEFAULT_WATCHDOG_TIMEOUT_SECONDS,
  monoOf,
  readWatchdogState,
  readWatchdogTimeout,
  resumeWatchdog,
  watchdogDisabled,
  watchdogPaths,
  watchdogStep,
  writeWatchdogState,
  WATCHDOG_POLL_MS,
  type WatchdogLook,
  type WatchdogState,
} from "./watchdog.ts";

const AGENT_KILL_EVERY_MS = 300;

class NodeWatchdog {
  private fd: number | undefined;
  private ino: number | undefined;
  private state: WatchdogState | undefined;
  private resetting = false;
  private killing = false;
  private lastKill = 0;
  private readonly buf = Buffer.alloc(4096);

  private readonly s: LabState;
  readonly node: string;
  private readonly machineDir: string;

  constructor(s: LabState, node: string, machineDir: string) {
    this.s = s;
    this.node = node;
    this.machineDir = machineDir;
  }

  /** Opens the device's current FIFO (a new one every boot), or closes a read end of one that is gone. */
  private device(): void {
    const p = watchdogPaths(this.machineDir);
    let st;
    try {
      st = statSync(p.device);
    } catch {
      st = undefined;
    }
    if (!st?.isFIFO() || st.ino !== this.ino) {
      if (this.fd !== undefined) closeSync(this.fd);
      this.fd = undefined;
      this.ino = undefined;
      if (st?.isFIFO()) {
        this.fd = openSync(p.device, constants.O_RDONLY | constants.O_NONBLOCK);
        this.ino = fstatSync(this.fd).ino;
      }
    }
  }

  /** Everything written since the last look, and whether a writer holds the device open now. */
  private drain(): { data: string; writers: boolean } {
    if (this.fd === undefined) return { data: "", writers: false };
    let data = "";
    for (;;) {
      try {
        const n = readSync(this.fd, this.buf);
        if (n === 0) return { data, writers: false }; // end of file: no writer
        data += this.buf.subarray(0, n).toString("latin1");
        if (data.length > 65_536) data = data.slice(-1024); // only the last bytes matter
      } catch (e) {
        if ((e as NodeJS.ErrnoException).code === "EAGAIN") return { data, writers: true };
        throw e;
      }
    }
  }

  /** One look. `lastRoundWallMs`: when the process that ran before this one last looked (first look only). */
  look(lastRoundWallMs: number | undefined): void {
    if (this.resetting) return;
    const ctxDir = this.machineDir;
    const bootID = readText(nodePaths(ctxDir).bootId);
    const powered = readText(paths(this.s.dir).node(this.node).power) !== "0";
    this.device();
    const { data, writers } = this.drain();
    const nowMono = performance.now();
    const nowWall = Date.now();
    let since: WatchdogLook["since"];
    if (!this.state) {
      this.state = resumeWatchdog(readWatchdogState(ctxDir), bootID, nowMono, nowWall);
      if (lastRoundWallMs !== undefined)
        since = { mono: monoOf(lastRoundWallMs, nowMono, nowWall), wallMs: Math.min(lastRoundWallMs, nowWall) };
    }
    const timeoutSeconds = readWatchdogTimeout(ctxDir) ?? DEFAULT_WATCHDOG_TIMEOUT_SECONDS;
    const look: WatchdogLook = {
      bootID,
      powered,
      enabled: this.fd !== undefined && !watchdogDisabled(ctxDir),
      data,
      writers,
      timeoutSeconds,
      ...(since ? { since } : {}),
    };
    const prev = this.state;
    const r = watchdogStep(prev, look, nowMono, nowWall);
    this.state = r.state;
    if (JSON.stringify(prev) !== JSON.stringify(r.state)) writeWatchdogState(ctxDir, r.state);
    for (const t of r.transitions)
      if (t !== "new-boot") appendEvent(this.s.dir, { kind: "watchdog", node: this.node, detail: { action: t, bootID } });
    if (r.expired) void this.reset(r.state, timeoutSeconds, nowMono);
    this.keepAgentDead(bootID);
  }

  private async reset(st: WatchdogState, timeoutSeconds: number, nowMono: number): Promise<void> {
    this.resetting = true;
    try {
      const done = await watchdogReset(this.s, this.node, st.bootID, {
        lastFeed: new Date(st.lastFeedWallMs).toISOString(),
        timeoutSeconds,
        unfedSeconds: Math.round(nowMono - st.lastFeedMono) / 1000,
      });
      if (!done) this.state = { ...st, armed: false };
    } catch (e) {
      process.stdout.write(`${new Date().toISOString()} ${this.node}: reset failed: ${(e as Error).message}\n`);
    } finally {
      this.resetting = false;
    }
  }

  /** The killNodeAgent fault: while in force for this boot, the agent's containers die whenever they run. */
  private keepAgentDead(bootID: string | undefined): void {
    const fault = agentKilledFor(this.machineDir);
    if (!fault) return;
    if (fault.bootID !== bootID) return clearAgentKilled(this.machineDir); // the node booted anew: the fault is over
    if (this.killing || performance.now() - this.lastKill < AGENT_KILL_EVERY_MS) return;
    this.killing = true;
    this.lastKill = performance.now();
    void killNodeAgentProcesses(realContext(this.s, this.node))
      .then((pids) => {
        if (pids.length) appendEvent(this.s.dir, { kind: "fault", node: this.node, detail: { fault: "agent-killed", again: true, pids } });
      })
      .catch(() => undefined)
      .finally(() => (this.killing = false));
  }
}

function main(): void {
  const dir = process.argv[2];
  if (!dir) throw new Error("usage: watchdog-daemon.ts <lab-dir>");
  const s = readState(dir);
  if (s.runtime !== "real") throw new Error(`lab ${dir} has no real nodes: no watchdogs to watch`);
  const nodes = s.nodes.map((n) => new NodeWatchdog(s, n.name, realContext(s, n.name).dir));
  // Stamped after every round of looks: what a process started after this one finds written was written after it.
  const alive = join(paths(dir).pids, "watchdog.alive");
  let lastRound: number | undefined;
  try {
    lastRound = statSync(alive).mtimeMs;
  } catch {
    lastRound = undefined; // the first start: nothing was written before
  }
  process.stdout.write(
    `${new Date().toISOString()} watching ${nodes.length} watchdogs every ${WATCHDOG_POLL_MS} ms${lastRound ? `; the last look before this start: ${new Date(lastRound).toISOString()}` : ""}\n`,
  );
  setInterval(() => {
    for (const n of nodes) {
      try {
        n.look(lastRound);
      } catch (e) {
        process.stdout.write(`${new Date().toISOString()} ${n.node}: ${(e as Error).message}\n`);
      }
    }
    writeFileSync(alive, ""); // its mtime, now
  }, WATCHDOG_POLL_MS);
}

if (import.meta.main) main();
