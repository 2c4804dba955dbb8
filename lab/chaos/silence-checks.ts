// The outages mode's check (pure; issue 41 item 7): no power-off of a node that was not silent while the operator could
// see. Over the lab's own record (lab/state.ts events: power changes through the BMCs, the runner's faults, the control
// plane stopped, started or cut from etcd) and the apiserver's audit record of every Lease renewal the kubelets got
// committed, each returns one line per violation.
//
// For every power-off of node N through its BMC at time t that no fault of the runner explains (a power cycle by
// "someone at the BMC"), with L the node Lease's duration:
//   (1) N's kubelet got no Lease renewal committed in [t − L, t];
//   (2) every control-plane outage (kube-apiserver down, or cut from etcd) that began before t ended at least L before t,
//       with no renewal of N after it: N's silence after the outage's end is itself ≥ L. An outage overlapping
//       [t − L, t] blinded the operator inside the window, so the silence it saw there proves nothing.
// Rule (2) is weaker than what Stockade promises (its silence restarts after any gap and needs its own timeout plus
// the fence delay, more than L in the lab), so a correct operator keeps it with a margin; the check cannot tell the
// operator's own blind spots (a watch broken alone, a leader change) from the record, and does not try.
import type { AuditEvent } from "../audit.ts";
import type { LabEvent } from "../state.ts";

/** A span of time in which the control plane could not serve (ms; end undefined: not over when the record was read). */
export interface Outage {
  what: string;
  startMs: number;
  endMs: number | undefined;
}

/** A power-off of a node through its BMC that the runner did not cause. */
export interface PowerOff {
  node: string;
  timeMs: number;
}

/** A committed renewal (or creation) of a node's Lease by that node's kubelet. */
export interface Renewal {
  node: string;
  timeMs: number;
}

const at = (e: LabEvent) => Date.parse(e.time);

/** A power-off the runner's own power-cycle fault explains: one recorded on the node within this long before it. */
const POWER_CYCLE_SLACK_MS = 15_000;

/** The control-plane outages in the lab's record: kube-apiserver killed or stopped until started, the etcd cut until mended. */
export function outagesFrom(events: readonly LabEvent[]): Outage[] {
  const out: Outage[] = [];
  let apiserver: number | undefined;
  let etcd: number | undefined;
  for (const e of events) {
    const d = e.detail;
    const apiserverGone =
      (e.kind === "fault" && (d.fault === "component-killed" || d.fault === "component-stopped") && d.component === "kube-apiserver") ||
      (e.kind === "lab" && d.action === "apiserver-stopped");
    const apiserverBack =
      e.kind === "lab" && ((d.action === "component-started" && d.component === "kube-apiserver") || d.action === "apiserver-started");
    if (apiserverGone) apiserver ??= at(e);
    if (apiserverBack && apiserver !== undefined) {
      out.push({ what: "kube-apiserver down", startMs: apiserver, endMs: at(e) });
      apiserver = undefined;
    }
    if (e.kind === "fault" && d.fault === "apiserver-etcd-partition") {
      if (d.cut === true) etcd ??= at(e);
      else if (etcd !== undefined) {
        out.push({ what: "kube-apiserver cut from etcd", startMs: etcd, endMs: at(e) });
        etcd = undefined;
      }
    }
  }
  if (apiserver !== undefined) out.push({ what: "kube-apiserver down", startMs: apiserver, endMs: undefined });
  if (etcd !== undefined) out.push({ what: "kube-apiserver cut from etcd", startMs: etcd, endMs: undefined });
  return out.sort((a, b) => a.startMs - b.startMs);
}

/** Power-offs through a BMC (the operator's fence agents, or anyone else) that no power-cycle fault of the runner explains. */
export function powerOffsFrom(events: readonly LabEvent[]): PowerOff[] {
  const cycles = events.filter((e) => e.kind === "fault" && e.detail.fault === "power-cycle");
  return events
    .filter((e) => e.kind === "power" && e.detail.power === "off" && e.detail.source === "bmc" && e.node)
    .filter((e) => !cycles.some((c) => c.node === e.node && at(c) <= at(e) && at(e) - at(c) <= POWER_CYCLE_SLACK_MS))
    .map((e) => ({ node: e.node!, timeMs: at(e) }));
}

/** Lease renewals the apiserver committed for a kubelet of its own node (audit: update/create/patch, 2xx). */
export function renewalsFrom(audit: Iterable<AuditEvent>): Renewal[] {
  const out: Renewal[] = [];
  for (const a of audit) {
    const r = a.objectRef;
    if (r?.resource !== "leases" || r.namespace !== "kube-node-lease" || !r.name || r.subresource) continue;
    if (!["update", "patch", "create"].includes(a.verb) || a.stage !== "ResponseComplete") continue;
    if (a.user.username !== `system:node:${r.name}`) continue;
    const code = a.responseStatus?.code ?? 0;
    if (code < 200 || code >= 300) continue;
    out.push({ node: r.name, timeMs: Date.parse(a.stageTimestamp) });
  }
  return out;
}

/** Rules (1) and (2) over one record; `leaseMs` is the node Lease's duration. */
export function checkSilentBeforePowerOff(
  powerOffs: readonly PowerOff[],
  renewals: readonly Renewal[],
  outages: readonly Outage[],
  leaseMs: number,
): string[] {
  const out: string[] = [];
  const iso = (ms: number) => new Date(ms).toISOString();
  for (const p of powerOffs) {
    const mine = renewals.filter((r) => r.node === p.node && r.timeMs <= p.timeMs);
    const last = Math.max(-Infinity, ...mine.map((r) => r.timeMs));
    if (last >= p.timeMs - leaseMs)
      out.push(
        `${p.node}: powered off at ${iso(p.timeMs)} although its kubelet renewed its Lease ${((p.timeMs - last) / 1000).toFixed(1)} s before (Lease ${leaseMs / 1000} s)`,
      );
    for (const o of outages) {
      if (o.startMs > p.timeMs) continue;
      // The node's silence since the operator could see again: from the outage's end (a renewal after it is rule 1's).
      const end = o.endMs ?? Infinity;
      if (p.timeMs - end < leaseMs)
        out.push(
          `${p.node}: powered off at ${iso(p.timeMs)}, ${o.endMs === undefined ? "during" : `${((p.timeMs - end) / 1000).toFixed(1)} s after the end of`} a control-plane outage (${o.what} from ${iso(o.startMs)}): its silence since the operator could see again is under the Lease's ${leaseMs / 1000} s`,
        );
    }
  }
  return out;
}

/** The check for one schedule: the power-offs at or after `sinceMs`, against the whole record. */
export function silenceViolations(events: readonly LabEvent[], renewals: readonly Renewal[], leaseMs: number, sinceMs: number): string[] {
  const offs = powerOffsFrom(events).filter((p) => p.timeMs >= sinceMs);
  return checkSilentBeforePowerOff(offs, renewals, outagesFrom(events), leaseMs);
}
