// The watchdog mode's checks (pure): over the lab's own record of what happened to its machines (lab/state.ts events:
// watchdog resets, crashes, power changes, boots, faults) and the NodeFences a schedule left (read before they are
// deleted), each returns one line per violation.
//   (a) a release on WatchdogExpired evidence comes after the lab recorded that node's reset, crash or power-off in the
//       boot its pods ran in: the old writer was gone before its pod was released;
//   (b) no watchdog reset that no fault caused: a reset is explained only by the agent killed on that node, the node
//       hung (crash), or a NodeFence for that node created before it (its agent stopped feeding, as promised); a
//       control plane down, a node↔node cut, a short partition or a killed kubelet alone must reset nothing;
//   (c) a node whose watchdog was disabled is never released on WatchdogExpired: not while it is disabled, and not by
//       a NodeFence created while it was.
import type { LabEvent } from "../state.ts";

/** A NodeFence as the runner read it at the end of a schedule. */
export interface FenceSeen {
  node: string;
  /** creationTimestamp, ms. */
  createdMs: number;
  /** status.evidence.method, if any. */
  evidence: string | undefined;
  /** Every release in status (pods, attachments, taint...), with its time in ms. */
  releases: { kind: string; name: string; timeMs: number }[];
}

const at = (e: LabEvent) => Date.parse(e.time);
const isReset = (e: LabEvent) => e.kind === "watchdog" && e.detail.action === "reset";
/** The lab's record of a machine whose processes stopped: its watchdog reset it, it hung, or its power went off. */
const isKill = (e: LabEvent) => isReset(e) || e.kind === "crash" || (e.kind === "power" && e.detail.power === "off");

/** (a) Every release on WatchdogExpired has, for its node, a reset/crash/power-off after the boot the fence found. */
export function checkWatchdogReleases(fences: readonly FenceSeen[], events: readonly LabEvent[]): string[] {
  const out: string[] = [];
  for (const f of fences) {
    if (f.evidence !== "WatchdogExpired") continue;
    const mine = events.filter((e) => e.node === f.node);
    // The boot the node's pods ran in when the fence began: the last boot recorded before the NodeFence.
    const bootStart = Math.max(-Infinity, ...mine.filter((e) => e.kind === "boot" && at(e) <= f.createdMs).map(at));
    for (const r of f.releases) {
      const killed = mine.some((e) => isKill(e) && at(e) >= bootStart && at(e) <= r.timeMs);
      if (!killed)
        out.push(
          `${f.node}: ${r.kind} ${r.name} released on WatchdogExpired at ${new Date(r.timeMs).toISOString()} with no reset, crash or power-off of the node recorded before it in the boot it ran`,
        );
    }
  }
  return out;
}

/** (b) Every watchdog reset at or after `sinceMs` is explained by a kill-agent, a crash or a NodeFence of its node. */
export function checkUnexplainedResets(events: readonly LabEvent[], fences: readonly FenceSeen[], sinceMs: number): string[] {
  const out: string[] = [];
  for (const e of events) {
    if (!isReset(e) || at(e) < sinceMs) continue;
    const before = (x: LabEvent) => x.node === e.node && at(x) >= sinceMs && at(x) <= at(e);
    const agentKilled = events.some((x) => before(x) && x.kind === "fault" && x.detail.fault === "agent-killed");
    const hung = events.some((x) => before(x) && x.kind === "crash");
    const fenced = fences.some((f) => f.node === e.node && f.createdMs <= at(e));
    if (!agentKilled && !hung && !fenced)
      out.push(`${e.node}: reset by its watchdog at ${e.time} with no fault that explains it (no agent killed, no hang, no NodeFence)`);
  }
  return out;
}

/** (c) No release on WatchdogExpired for a node while its watchdog was disabled, or by a fence created while it was. */
export function checkDisabledNotReleased(fences: readonly FenceSeen[], events: readonly LabEvent[]): string[] {
  const out: string[] = [];
  for (const f of fences) {
    if (f.evidence !== "WatchdogExpired" || f.releases.length === 0) continue;
    const disabledAt = (t: number) => {
      let disabled = false;
      for (const e of events) {
        if (e.node !== f.node || at(e) > t) continue;
        if (e.kind === "fault" && e.detail.fault === "watchdog-disabled") disabled = true;
        if (e.kind === "lab" && e.detail.action === "watchdog-enabled") disabled = false;
      }
      return disabled;
    };
    const when = [f.createdMs, ...f.releases.map((r) => r.timeMs)].find(disabledAt);
    if (when !== undefined)
      out.push(
        `${f.node}: released on WatchdogExpired although its watchdog was disabled at ${new Date(when).toISOString()} (${f.releases.length} release(s))`,
      );
  }
  return out;
}

/** The three checks together, for one schedule. */
export function watchdogViolations(fences: readonly FenceSeen[], events: readonly LabEvent[], sinceMs: number): string[] {
  return [
    ...checkWatchdogReleases(fences, events),
    ...checkUnexplainedResets(events, fences, sinceMs),
    ...checkDisabledNotReleased(fences, events),
  ];
}
