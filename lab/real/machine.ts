// The fault operations of lab/machine.ts for real nodes. Each runs under the node's lock (taken by
// the caller) and leaves a line in the lab's event log, as the kwok versions do.
//
//   power off -> every process of the node frozen, recorded, killed (lab/real/node.ts)
//   power on  -> fresh boot, new boot ID
//   crash     -> the machine hangs: every process frozen in place (nothing runs, nothing writes)
//   partition -> the node's cable to the control plane is cut (iptables in its namespace): its pods keep running
//   partitionFrom(peer) -> node<->node cut, both ways
//   killKubelet -> the kubelet dies, containerd and the containers keep running
//   killNodeAgent -> the node agent's containers SIGKILLed, and again whenever they start, until a new boot or heal
//   disableWatchdog -> the node's watchdog device removed (until enableWatchdog): the agent cannot arm it, it never resets the node
//   heal      -> cables reconnected, a dead kubelet restarted, a killed agent let live (same boot); a hung machine is rebooted
import { randomUUID } from "node:crypto";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { appendEvent, nodeSpec, paths, readText, type LabState } from "../state.ts";
import { addFaultRules, dropRules, labNet, labPodRange, podCidr, removeFaultRules } from "./net.ts";
import {
  bootNode,
  freezeNode,
  frozen,
  kubeletPid,
  kubeletState,
  killKubelet,
  nodeCgroup,
  powerOffNode,
  restartKubelet,
  type RealNodeContext,
} from "./node.ts";
import { isAlive, readRef } from "../processes.ts";
import { nodePaths } from "./config.ts";
import { describe, nodePids } from "./node.ts";
import {
  agentContainerIds,
  clearAgentKilled,
  disableWatchdogDevice,
  enableWatchdogDevice,
  killContainers,
  markAgentKilled,
} from "../watchdog.ts";

export function realContext(s: LabState, name: string): RealNodeContext {
  const spec = nodeSpec(s, name);
  const r = s.real;
  if (!r || !spec.ip) throw new Error(`lab ${s.dir} has no real nodes`);
  const p = paths(s.dir).node(name);
  return {
    dir: join(p.dir, "machine"),
    name,
    ip: spec.ip,
    podCidr: spec.cidr,
    cgroup: nodeCgroup(r.slot, name),
    slot: r.slot,
    zone: spec.zone,
    kubeconfig: p.kubeconfig,
    caFile: join(paths(s.dir).pki, "ca.crt"),
    nodeLeaseSeconds: s.nodeLeaseSeconds,
    kubelet: r.kubelet,
    kubeProxy: r.kubeProxy,
    kubeProxyKubeconfig: join(paths(s.dir).kubeconfigs, "kube-proxy.kubeconfig"),
    clusterCidr: labPodRange(r.slot),
    pauseImage: r.pauseImage,
    imageTars: r.imageTars,
    clusterDns: r.clusterDns,
    ...(spec.providerID ? { providerID: spec.providerID } : {}),
    logDir: paths(s.dir).logs,
  };
}

/** A fault in force on a node: what was cut, so heal can reconnect exactly that. */
interface ActiveFault {
  kind: "control-plane" | "node";
  peer?: string;
  rules: string[][];
}

function readFaults(s: LabState, name: string): ActiveFault[] {
  const f = paths(s.dir).node(name).faults;
  return existsSync(f) ? (JSON.parse(readFileSync(f, "utf8")) as ActiveFault[]) : [];
}
function writeFaults(s: LabState, name: string, faults: ActiveFault[]): void {
  writeFileSync(paths(s.dir).node(name).faults, JSON.stringify(faults));
}

export function isPowered(ctx: RealNodeContext): boolean {
  return isAlive(readRef(nodePaths(ctx.dir).init));
}

export async function realBoot(s: LabState, name: string, source: string): Promise<string> {
  const ctx = realContext(s, name);
  if (isPowered(ctx)) await powerOffNode(ctx, `reboot (${source})`);
  const bootID = randomUUID();
  writeFileSync(paths(s.dir).node(name).power, "1");
  await bootNode(ctx, bootID);
  appendEvent(s.dir, { kind: "boot", node: name, detail: { bootID, pid: kubeletPid(ctx), source } });
  return bootID;
}

export async function realPowerOff(s: LabState, name: string): Promise<void> {
  await powerOffNode(realContext(s, name), "power off");
  writeFileSync(paths(s.dir).node(name).power, "0");
}

export async function realCrash(s: LabState, name: string): Promise<void> {
  const ctx = realContext(s, name);
  if (!isPowered(ctx)) throw new Error(`node ${name} is powered off; nothing to crash`);
  const snap = await freezeNode(ctx);
  appendEvent(s.dir, { kind: "crash", node: name, detail: { hung: true, processes: snap.processes.length } });
}

export function realPartition(s: LabState, name: string): void {
  const ctx = realContext(s, name);
  if (!isPowered(ctx)) throw new Error(`node ${name} is powered off; nothing to partition`);
  const faults = readFaults(s, name);
  if (faults.some((f) => f.kind === "control-plane")) return;
  const rules = dropRules([labNet(s.real!.slot).hostIp]);
  addFaultRules(s.real!.slot, name, rules);
  writeFaults(s, name, [...faults, { kind: "control-plane", rules }]);
  appendEvent(s.dir, { kind: "partition", node: name, detail: { from: "control-plane", kubeletPid: kubeletPid(ctx) } });
}

/** Cuts node `a` from node `b` (both ways; the control plane still sees both). */
export function realPartitionNodes(s: LabState, a: string, b: string): void {
  for (const [x, y] of [
    [a, b],
    [b, a],
  ] as const) {
    const peer = nodeSpec(s, y);
    const faults = readFaults(s, x);
    if (faults.some((f) => f.kind === "node" && f.peer === y)) continue;
    const rules = dropRules([peer.ip!, podCidr(s.real!.slot, peer.index)]);
    addFaultRules(s.real!.slot, x, rules);
    writeFaults(s, x, [...faults, { kind: "node", peer: y, rules }]);
  }
  appendEvent(s.dir, { kind: "fault", node: a, detail: { fault: "node-partition", peer: b } });
}

export async function realKillKubelet(s: LabState, name: string): Promise<void> {
  const ctx = realContext(s, name);
  if (!isPowered(ctx)) throw new Error(`node ${name} is powered off; no kubelet to kill`);
  await killKubelet(ctx);
  appendEvent(s.dir, { kind: "kubelet", node: name, detail: { killed: true } });
}

/** Reconnects every cable of the node cut by a fault (and the peers' halves); works with the power off too. */
export function realReconnect(s: LabState, name: string): string[] {
  const faults = readFaults(s, name);
  for (const f of faults) {
    removeFaultRules(s.real!.slot, name, f.rules);
    if (f.kind === "node" && f.peer) {
      const theirs = readFaults(s, f.peer);
      for (const g of theirs.filter((x) => x.kind === "node" && x.peer === name)) removeFaultRules(s.real!.slot, f.peer, g.rules);
      writeFaults(
        s,
        f.peer,
        theirs.filter((x) => !(x.kind === "node" && x.peer === name)),
      );
    }
  }
  writeFaults(s, name, []);
  // A powered node whose cable is mended resumes in the same boot: its kubelet (if alive) reports again, and
  // the invariant checker takes a graceful delete after this as the kubelet's confirmation.
  const resumed = kubeletState(realContext(s, name)) === "running";
  if (faults.length)
    appendEvent(s.dir, { kind: "heal", node: name, detail: { reconnected: faults.map((f) => f.peer ?? f.kind), resumed } });
  return faults.map((f) => f.peer ?? f.kind);
}

/** SIGKILLs the node agent's container processes on the node (found through its containerd and cgroups). */
export async function killNodeAgentProcesses(ctx: RealNodeContext): Promise<number[]> {
  const ids = await agentContainerIds(nodePaths(ctx.dir).containerdSocket);
  if (ids.size === 0) return [];
  return killContainers(nodePids(ctx.cgroup), (pid) => describe(pid)?.containerID, ids);
}

/**
 * The agent-killed fault: its containers die now, and (lab/watchdog-daemon.ts) whenever the kubelet starts them again
 * in this boot (it would within a second, before a short watchdog fired), until the node boots anew or is healed.
 */
export async function realKillNodeAgent(s: LabState, name: string): Promise<number[]> {
  const ctx = realContext(s, name);
  if (!isPowered(ctx)) throw new Error(`node ${name} is powered off; no agent to kill`);
  // Killed first, then kept dead by the lab's watchdog process (which would otherwise race this kill for them).
  const pids = await killNodeAgentProcesses(ctx);
  markAgentKilled(ctx.dir, readText(nodePaths(ctx.dir).bootId));
  appendEvent(s.dir, { kind: "fault", node: name, detail: { fault: "agent-killed", pids } });
  return pids;
}

/** The watchdog-disabled fault: no device from now on (an agent cannot arm it) and no reset by it, for the lab's life. */
export async function realDisableWatchdog(s: LabState, name: string): Promise<void> {
  await disableWatchdogDevice(realContext(s, name).dir);
  appendEvent(s.dir, { kind: "fault", node: name, detail: { fault: "watchdog-disabled" } });
}

/** Undoes the watchdog-disabled fault: a new, disarmed device (the node's agent must be restarted to arm it). */
export async function realEnableWatchdog(s: LabState, name: string): Promise<void> {
  await enableWatchdogDevice(realContext(s, name).dir);
  appendEvent(s.dir, { kind: "lab", node: name, detail: { action: "watchdog-enabled" } });
}

export async function realHeal(s: LabState, name: string): Promise<void> {
  const ctx = realContext(s, name);
  if (readText(paths(s.dir).node(name).power) === "0") throw new Error(`node ${name} is powered off; power it on through its BMC`);
  clearAgentKilled(ctx.dir); // its kubelet starts it again
  const reconnected = realReconnect(s, name);
  if (frozen(ctx.cgroup)) {
    // A hung machine comes back only through a reset: new boot.
    appendEvent(s.dir, { kind: "heal", node: name, detail: { rebooted: true } });
    await realBoot(s, name, "heal");
    return;
  }
  const restarted = kubeletState(ctx) === "stopped";
  if (restarted) restartKubelet(ctx);
  appendEvent(s.dir, { kind: "heal", node: name, detail: { resumed: true, reconnected, restarted } });
}

export function realMachineKubelet(
  s: LabState,
  name: string,
): { kubelet: "running" | "frozen" | "stopped"; pid: number | undefined; bootID: string | undefined } {
  const ctx = realContext(s, name);
  return { kubelet: kubeletState(ctx), pid: kubeletPid(ctx), bootID: readText(nodePaths(ctx.dir).bootId) };
}
