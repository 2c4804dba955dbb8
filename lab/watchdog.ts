// A watchdog per real lab node (issue 30), behaving like Linux's /dev/watchdog for the node agent (a DaemonSet pod,
// unprivileged) that reaches it through a hostPath:
//   - open for write starts a disarmed watchdog (its count begins at the open); every write feeds it; opening one
//     already armed (closed without "V") does not feed it, as Linux's watchdog_start does nothing for an active one;
//   - a last write ending in "V" then close disarms it (the magic close); a close without it leaves it counting;
//   - not fed for its timeout (a file beside the device that reads like /sys/class/watchdog/watchdogN/timeout, set
//     by the lab) -> the lab resets the machine exactly as the BMC's power cycle does (every process of the node
//     killed, a new boot ID, the node started again) and records a `watchdog` event (time, node, last feed).
//
// Where it is. Every real node shares the host's filesystem but has its own mount namespace (lab/real/node.ts: the
// node's init holds it; its boot ID is a file bind-mounted there). The device lives in the node's own directory,
// `<machine>/watchdog/`, and the init bind-mounts that directory, read-only, over WATCHDOG_HOST_PATH inside the node's
// namespace: the kubelet resolves a hostPath, and runc mounts it, in that namespace, so a pod on node N that mounts
// hostPath WATCHDOG_HOST_PATH sees node N's device and no other. Read-only: the pod can open the device for writing
// (a FIFO, like a device, is writable on a read-only mount) but can create, remove or rewrite nothing there, so an
// agent that opens a missing device with O_CREAT gets EROFS instead of arming a regular file.
//
// How it works. The device is a FIFO. Nothing the node writes waits on the lab: a holder process (`sleep`, outside the
// node) keeps a read end open for the FIFO's life, so opening never blocks and a write never fails (no EPIPE) even
// while the lab's watchdog process is down or restarting. That process (lab/watchdog-daemon.ts, one per lab, under
// a supervisor that restarts it) opens its own non-blocking read end and polls every node's device: bytes read are
// feeds (and say whether the last one ended in "V"); read() answering EAGAIN means a writer holds the device open,
// 0 means none does (so a close is seen, with the bytes written before it, whatever the interval). Its state (armed,
// in which boot, the last feed) is written to `<machine>/watchdog-state.json` at every change, and it stamps a file at
// every round of looks: a restarted process resumes the state, and counts what was written while it was down as
// written when it last looked (earlier than it was: never a reset later than Linux's, at worst one the downtime
// sooner). The FIFO's mtime cannot say when: a write through a read-only mount, as the agent's is, does not stamp it.
// At every boot the FIFO is made anew (the hardware re-initialised, disarmed): a descriptor that outlived the old boot
// points at the old one and can never arm the new boot's watchdog.
//
// Limits (the lab's, not Linux's): a disarmed device opened and closed again without a write within one poll (100 ms)
// is not seen, so not started (Linux would count from the open: an agent never does this, it writes before it says
// armed); "V" counts only as the last byte written before the close (Linux accepts it anywhere in the last write: the
// lab disarms less often, never more); two writers at once are not refused (Linux answers EBUSY to a second open); a
// reset comes up to one poll after the timeout.
import { execFile, execFileSync, spawn } from "node:child_process";
import { closeSync, constants, existsSync, mkdirSync, openSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { promisify } from "node:util";
import { NODE_AGENT_NAMESPACE } from "../src/decide/node-agent-record.ts";
import { clearRef, procStart, readRef, stop, writeRef } from "./processes.ts";
import { readEvents, type LabEvent } from "./state.ts";

/** Inside every real node: the directory the node agent's DaemonSet mounts (hostPath, type Directory, readOnly). */
export const WATCHDOG_HOST_PATH = "/run/stockade-lab/watchdog";
/** The device (open O_WRONLY, write to feed, "V" then close to disarm) and its timeout in seconds, as the node sees them. */
export const WATCHDOG_DEVICE = `${WATCHDOG_HOST_PATH}/watchdog`;
export const WATCHDOG_TIMEOUT_FILE = `${WATCHDOG_HOST_PATH}/timeout`;
export const DEFAULT_WATCHDOG_TIMEOUT_SECONDS = 10;

/** The lab's records of a watchdog resetting its machine, oldest first: one node's, in one boot, or since a time, as asked. */
export function watchdogResets(labDir: string, o: { node?: string; bootID?: string; sinceMs?: number } = {}): LabEvent[] {
  return readEvents(labDir).filter(
    (e) =>
      e.kind === "watchdog" &&
      e.detail.action === "reset" &&
      (o.node === undefined || e.node === o.node) &&
      (o.bootID === undefined || e.detail.bootID === o.bootID) &&
      (o.sinceMs === undefined || Date.parse(e.time) >= o.sinceMs),
  );
}
/** How often the lab's watchdog process looks at every device. */
export const WATCHDOG_POLL_MS = 100;
/** Pods whose containers `killNodeAgent` kills: the node agent's namespace. */
export const AGENT_NAMESPACE = NODE_AGENT_NAMESPACE;

/** Where a real node's watchdog lives on the host (`machineDir` is the node's machine directory, lab/real/machine.ts). */
export const watchdogPaths = (machineDir: string) => ({
  /** Bind-mounted read-only over WATCHDOG_HOST_PATH in the node's mount namespace. */
  dir: join(machineDir, "watchdog"),
  device: join(machineDir, "watchdog", "watchdog"),
  timeout: join(machineDir, "watchdog", "timeout"),
  /** The lab's watchdog process's state (WatchdogState), written at every change. */
  state: join(machineDir, "watchdog-state.json"),
  holder: join(machineDir, "watchdog-holder.pid.json"),
  /** Present: the disableWatchdog fault is in force (no device, never a reset) until enableWatchdog (the chaos suite's recovery). */
  disabled: join(machineDir, "watchdog-disabled"),
  /** Present: the killNodeAgent fault is in force for the boot it names (the agent is killed whenever it starts). */
  agentKilled: join(machineDir, "agent-killed.json"),
});

// ---- the device ---------------------------------------------------------------------------------------------------

/** Creates the node's watchdog directory with its timeout (the lab's setting; an existing one is replaced). */
export function prepareWatchdog(machineDir: string, timeoutSeconds = DEFAULT_WATCHDOG_TIMEOUT_SECONDS): void {
  const p = watchdogPaths(machineDir);
  mkdirSync(p.dir, { recursive: true, mode: 0o755 });
  setWatchdogTimeout(machineDir, timeoutSeconds);
}

export function setWatchdogTimeout(machineDir: string, seconds: number): void {
  if (!Number.isInteger(seconds) || seconds < 1 || seconds > 600)
    throw new Error(`a watchdog timeout is 1 to 600 seconds (got ${seconds})`);
  const p = watchdogPaths(machineDir);
  writeFileSync(`${p.timeout}.tmp`, `${seconds}\n`, { mode: 0o444 });
  execFileSync("mv", ["-f", `${p.timeout}.tmp`, p.timeout]); // atomic: the agent never reads half a number
}

/** The timeout as the device says it (seconds), or undefined if its file is missing or not a number. */
export function readWatchdogTimeout(machineDir: string): number | undefined {
  try {
    const t = readFileSync(watchdogPaths(machineDir).timeout, "utf8").trim();
    return /^[0-9]{1,4}$/.test(t) && Number(t) > 0 ? Number(t) : undefined;
  } catch {
    return undefined;
  }
}

export const watchdogDisabled = (machineDir: string): boolean => existsSync(watchdogPaths(machineDir).disabled);

/**
 * At every boot, before any process of the node starts: a new FIFO (a disarmed watchdog; descriptors of the old boot
 * point at the old one) and a new holder of its read end. Nothing when the watchdog is disabled.
 */
export async function watchdogAtBoot(machineDir: string): Promise<void> {
  const p = watchdogPaths(machineDir);
  if (!existsSync(p.timeout)) prepareWatchdog(machineDir);
  await stopHolder(machineDir);
  rmSync(p.device, { force: true });
  rmSync(p.agentKilled, { force: true }); // a fault of the last boot's agent
  if (watchdogDisabled(machineDir)) return;
  execFileSync("mkfifo", ["-m", "622", p.device]);
  // Non-blocking: opening a FIFO's read end blocks until a writer comes otherwise.
  const fd = openSync(p.device, constants.O_RDONLY | constants.O_NONBLOCK);
  try {
    const child = spawn("sleep", ["infinity"], { detached: true, stdio: [fd, "ignore", "ignore"] });
    if (child.pid === undefined) throw new Error("could not start the watchdog's holder (sleep)");
    child.on("error", () => {});
    child.unref();
    const start = procStart(child.pid);
    if (start === undefined) throw new Error("the watchdog's holder (sleep) exited at once");
    writeRef(p.holder, { pid: child.pid, start });
  } finally {
    closeSync(fd);
  }
}

async function stopHolder(machineDir: string): Promise<void> {
  const p = watchdogPaths(machineDir);
  await stop(readRef(p.holder), 0);
  clearRef(p.holder);
}

/** The disableWatchdog fault: the device goes (an agent cannot open it) and the machine is never reset by it. */
export async function disableWatchdogDevice(machineDir: string): Promise<void> {
  const p = watchdogPaths(machineDir);
  writeFileSync(p.disabled, new Date().toISOString());
  rmSync(p.device, { force: true });
  // The holder stays: an agent that had it open keeps writing without an error, into a watchdog that no longer counts.
}

/**
 * Undoes disableWatchdogDevice (the chaos suite's recovery): a new device, disarmed, as at a boot; the agent that runs
 * unarmed must be restarted to arm it (it opens the device only when it starts).
 */
export async function enableWatchdogDevice(machineDir: string): Promise<void> {
  rmSync(watchdogPaths(machineDir).disabled, { force: true });
  await watchdogAtBoot(machineDir);
}

/** On lab down. */
export async function removeWatchdog(machineDir: string): Promise<void> {
  await stopHolder(machineDir);
}

// ---- the watchdog's logic (pure) ----------------------------------------------------------------------------------

export interface WatchdogState {
  /** The boot this state belongs to; another boot (or power off) starts disarmed. */
  bootID: string | undefined;
  armed: boolean;
  /** A writer held the device open at the last look. */
  writerOpen: boolean;
  /** The last byte written was "V": a close now disarms. */
  magic: boolean;
  /** The watchdog process's monotonic time (ms) of the last feed it saw (or of the open that started it). */
  lastFeedMono: number;
  /** Wall time (ms) of the last feed, for people and for a restarted watchdog process. */
  lastFeedWallMs: number;
}

export interface WatchdogLook {
  bootID: string | undefined;
  powered: boolean;
  /** The device exists and the watchdog is not disabled. */
  enabled: boolean;
  /** Bytes read since the last look. */
  data: string;
  /** A writer holds the device open now (read() said EAGAIN, not end of file). */
  writers: boolean;
  timeoutSeconds: number;
  /**
   * When what this look found (bytes, an open) happened, if not at the look: a restarted watchdog process's first look
   * finds what was written while it was down, and counts it as written when it last looked (monotonic and wall, ms).
   */
  since?: { mono: number; wallMs: number };
}

export type WatchdogTransition = "armed" | "disarmed" | "closed-armed" | "new-boot";

export const freshWatchdog = (bootID: string | undefined): WatchdogState => ({
  bootID,
  armed: false,
  writerOpen: false,
  magic: false,
  lastFeedMono: 0,
  lastFeedWallMs: 0,
});

/**
 * One look at a device. `nowMono` is the watchdog process's monotonic clock, `nowWallMs` the wall clock (kept for
 * people only). Expired when armed and unfed for the timeout: the machine must be reset.
 */
export function watchdogStep(
  prev: WatchdogState,
  look: WatchdogLook,
  nowMono: number,
  nowWallMs: number,
): { state: WatchdogState; transitions: WatchdogTransition[]; expired: boolean } {
  const transitions: WatchdogTransition[] = [];
  let st = prev;
  if (!look.powered || look.bootID !== prev.bootID) {
    st = freshWatchdog(look.bootID);
    if (look.bootID !== prev.bootID) transitions.push("new-boot");
    if (!look.powered) return { state: st, transitions, expired: false };
  }
  if (!look.enabled) return { state: { ...st, armed: false, writerOpen: look.writers, magic: false }, transitions, expired: false };
  const wrote = look.data.length > 0;
  const opened = look.writers && !st.writerOpen;
  const next: WatchdogState = { ...st, writerOpen: look.writers };
  // An open starts a disarmed watchdog; it does not feed an armed one (Linux: watchdog_start returns at once for an
  // active watchdog), so an agent restarted in a loop extends nothing by opening the device again.
  if (wrote || (opened && !st.armed)) {
    const at = look.since ?? { mono: nowMono, wallMs: nowWallMs };
    if (!st.armed || at.mono > st.lastFeedMono) {
      next.lastFeedMono = at.mono;
      next.lastFeedWallMs = at.wallMs;
    }
    if (!st.armed) transitions.push("armed");
    next.armed = true;
  }
  if (wrote) next.magic = look.data.endsWith("V");
  const closed = (st.writerOpen || wrote) && !look.writers;
  if (closed && next.armed) {
    if (next.magic) {
      next.armed = false;
      transitions.push("disarmed");
    } else transitions.push("closed-armed");
  }
  if (closed) next.magic = false;
  const expired = next.armed && nowMono - next.lastFeedMono >= look.timeoutSeconds * 1000;
  return { state: next, transitions, expired };
}

/** A wall time (ms) of the past on the monotonic clock (a wall clock set back since counts as now). */
export const monoOf = (wallMs: number, nowMono: number, nowWallMs: number): number => nowMono - Math.max(0, nowWallMs - wallMs);

/**
 * The state a (re)started watchdog process resumes from: what it wrote last if it is of this boot, the last feed
 * placed on its new monotonic clock by the wall clock.
 */
export function resumeWatchdog(
  saved: WatchdogState | undefined,
  bootID: string | undefined,
  nowMono: number,
  nowWallMs: number,
): WatchdogState {
  if (!saved || saved.bootID !== bootID) return freshWatchdog(bootID);
  return { ...saved, lastFeedMono: monoOf(saved.lastFeedWallMs, nowMono, nowWallMs) };
}

export function readWatchdogState(machineDir: string): WatchdogState | undefined {
  try {
    return JSON.parse(readFileSync(watchdogPaths(machineDir).state, "utf8")) as WatchdogState;
  } catch {
    return undefined;
  }
}

export function writeWatchdogState(machineDir: string, st: WatchdogState): void {
  const f = watchdogPaths(machineDir).state;
  writeFileSync(`${f}.tmp`, JSON.stringify(st));
  execFileSync("mv", ["-f", `${f}.tmp`, f]);
}

export interface WatchdogStatus {
  /** false once disableWatchdog was applied. */
  enabled: boolean;
  /** The device exists (it does not while the node is off... until its next boot, nor once disabled). */
  present: boolean;
  armed: boolean;
  bootID: string | undefined;
  lastFeed: string | undefined;
  timeoutSeconds: number | undefined;
}

/** What tests read: the device, the lab's setting and the watchdog process's last recorded state. */
export function watchdogStatus(machineDir: string): WatchdogStatus {
  const p = watchdogPaths(machineDir);
  const st = readWatchdogState(machineDir);
  return {
    enabled: !watchdogDisabled(machineDir),
    present: existsSync(p.device),
    armed: st?.armed ?? false,
    bootID: st?.bootID,
    lastFeed: st && st.lastFeedWallMs > 0 ? new Date(st.lastFeedWallMs).toISOString() : undefined,
    timeoutSeconds: readWatchdogTimeout(machineDir),
  };
}

// ---- the agent-killed fault ---------------------------------------------------------------------------------------

const run = promisify(execFile);

/** Ids of the containers (not sandboxes) of pods in `namespace`, from the node's containerd. */
export async function agentContainerIds(containerdSocket: string, namespace = AGENT_NAMESPACE): Promise<Set<string>> {
  const filter = `labels."io.kubernetes.pod.namespace"==${namespace},labels."io.cri-containerd.kind"==container`;
  const { stdout } = await run("ctr", ["--address", containerdSocket, "-n", "k8s.io", "containers", "ls", "-q", filter], {
    timeout: 10_000,
  });
  return new Set(stdout.split("\n").filter(Boolean));
}

/** SIGKILLs every process whose container (from its cgroup, `containerOf`) is one of `ids`; returns their pids. */
export function killContainers(
  pids: number[],
  containerOf: (pid: number) => string | undefined,
  ids: Set<string>,
  kill: (pid: number) => void = (pid) => process.kill(pid, "SIGKILL"),
): number[] {
  const killed: number[] = [];
  for (const pid of pids) {
    const cid = containerOf(pid);
    if (!cid || !ids.has(cid)) continue;
    try {
      kill(pid);
      killed.push(pid);
    } catch {
      /* gone already */
    }
  }
  return killed;
}

export function markAgentKilled(machineDir: string, bootID: string | undefined): void {
  writeFileSync(watchdogPaths(machineDir).agentKilled, JSON.stringify({ bootID, since: new Date().toISOString() }));
}

export function clearAgentKilled(machineDir: string): void {
  rmSync(watchdogPaths(machineDir).agentKilled, { force: true });
}

/** The fault in force, if any: the boot whose agent is to be kept dead. */
export function agentKilledFor(machineDir: string): { bootID: string | undefined } | undefined {
  try {
    const f = JSON.parse(readFileSync(watchdogPaths(machineDir).agentKilled, "utf8")) as { bootID?: string };
    return { bootID: f.bootID };
  } catch {
    return undefined;
  }
}
