// A simulated machine: its power (the truth its BMC reports) and its kubelet (one kwok process that
// manages only this node; real nodes dispatch to lab/real/machine.ts). The BMC's power hook and the lab's fault operations both go through here,
// under the node's lock, so the two never disagree.
//
//   power on   -> boot: new bootID, kubelet started
//   power off  -> kubelet killed (even while frozen); nothing on the node runs any more
//   crash      -> kubelet killed, power stays on (a hung or panicked machine)
//   partition  -> kubelet frozen (SIGSTOP): no heartbeats, workload presumed still running
//   heal       -> frozen kubelet resumed (same bootID); a crashed machine is rebooted (new bootID)
import { randomUUID } from "node:crypto";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { apiRequest } from "./api-lite.ts";
import { repoRoot } from "./bins.ts";
import { kwokConfig } from "./kwok-config.ts";
import { isAlive, procState, readRef, writeRef, clearRef, startDetached, signal, stop, freeze } from "./processes.ts";
import { appendEvent, paths, readText, withNodeLock, nodeSpec, type LabState } from "./state.ts";
import { realBoot, realCrash, realHeal, realMachineKubelet, realPartition, realPowerOff } from "./real/machine.ts";

export type Power = "on" | "off";
export type Kubelet = "running" | "frozen" | "stopped";

export interface MachineStatus {
  node: string;
  power: Power;
  kubelet: Kubelet;
  bootID: string | undefined;
  pid: number | undefined;
}

export function machineStatus(s: LabState, name: string): MachineStatus {
  const p = paths(s.dir).node(name);
  if (s.runtime === "real") {
    const k = realMachineKubelet(s, name);
    return { node: name, power: readText(p.power) === "0" ? "off" : "on", kubelet: k.kubelet, bootID: k.bootID, pid: k.pid };
  }
  const ref = readRef(p.kubelet);
  const state = ref ? procState(ref) : undefined;
  const kubelet: Kubelet = !isAlive(ref) ? "stopped" : state === "T" || state === "t" ? "frozen" : "running";
  return {
    node: name,
    power: readText(p.power) === "0" ? "off" : "on",
    kubelet,
    bootID: readText(p.bootId),
    pid: kubelet === "stopped" ? undefined : ref?.pid,
  };
}

/** Starts the node's kwok: a new boot (new bootID) unless `bootID` says it is the same boot. */
async function startKubelet(s: LabState, name: string, source: string, bootID: string = randomUUID()): Promise<string> {
  const spec = nodeSpec(s, name);
  const p = paths(s.dir).node(name);
  // A restarted kubelet renews its own lease at once; kwok's lease holder is per process, so the dead
  // process's lease would block the new one until it expires. The old process is gone: release it. On a
  // resume (same boot) the kubelet is alive and renews right away: the release carries that renewal, so the
  // node never looks silent while the new kwok process starts.
  const lease = `/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/${name}`;
  if (source === "resume")
    await apiRequest(
      s,
      "PATCH",
      lease,
      { spec: { holderIdentity: null, renewTime: new Date().toISOString().replace("Z", "000Z") } },
      "application/merge-patch+json",
    ).catch(() => undefined);
  else await apiRequest(s, "DELETE", lease).catch(() => undefined);
  writeFileSync(p.kwokConfig, kwokConfig(s.kwokStages, bootID));
  // Under a supervisor, as systemd's Restart=always runs a kubelet (and lab/real/node.ts runs the real one): kwok
  // v0.8 can die at start (seen in CI: "fatal error: concurrent map writes" initialising its CEL stages), and a
  // machine whose kubelet crashed once is not a dead machine. Power off and the kubelet-kill fault stop the whole
  // process group, supervisor included.
  const ref = startDetached({
    cmd: "sh",
    logFile: p.kwokLog,
    args: [
      "-c",
      'while :; do "$@"; sleep 1; done',
      "kwok-supervisor",
      s.kwok,
      `--kubeconfig=${p.kubeconfig}`,
      `--config=${p.kwokConfig}`,
      `--manage-single-node=${name}`,
      `--node-lease-duration-seconds=${s.nodeLeaseSeconds}`,
      `--cidr=${spec.cidr}`,
      `--node-ip=127.0.1.${spec.index + 1}`,
      `--node-name=${name}`,
    ],
  });
  writeRef(p.kubelet, ref);
  writeFileSync(p.bootId, bootID);
  writeRef(
    p.bootKick,
    startDetached({ cmd: s.nodeBin, args: [join(repoRoot, "lab/boot-kick.ts"), s.dir, name, bootID], logFile: p.kwokLog }),
  );
  if (source !== "resume") appendEvent(s.dir, { kind: "boot", node: name, detail: { bootID, pid: ref.pid, source } });
  return bootID;
}

async function killKubelet(s: LabState, name: string): Promise<void> {
  const p = paths(s.dir).node(name);
  await stop(readRef(p.kubelet), 0); // SIGKILL: a machine losing power does not shut down gracefully
  await stop(readRef(p.bootKick), 0);
  clearRef(p.kubelet);
}

export function boot(s: LabState, name: string, source = "lab"): Promise<string> {
  const p = paths(s.dir).node(name);
  return withNodeLock(p.lock, async () => {
    if (s.runtime === "real") return realBoot(s, name, source);
    await killKubelet(s, name);
    writeFileSync(p.power, "1");
    return startKubelet(s, name, source);
  });
}

/** What the BMC does on "chassis power on|off|cycle|reset". Idempotent like a real BMC. */
export function setPower(s: LabState, name: string, action: "on" | "off" | "cycle", source: string): Promise<void> {
  return withNodeLock(paths(s.dir).node(name).lock, () => changePower(s, name, action, source));
}

/** setPower's work, under the node's lock (held by the caller). */
async function changePower(s: LabState, name: string, action: "on" | "off" | "cycle", source: string): Promise<void> {
  const p = paths(s.dir).node(name);
  const was = readText(p.power) === "0" ? "off" : "on";
  if (action === "off" || action === "cycle") {
    if (s.runtime === "real") await realPowerOff(s, name);
    else await killKubelet(s, name);
    writeFileSync(p.power, "0");
    if (was === "on") appendEvent(s.dir, { kind: "power", node: name, detail: { power: "off", source } });
  }
  if (action === "on" || action === "cycle") {
    if (action === "on" && was === "on") return; // already on: nothing changes, as on real hardware
    writeFileSync(p.power, "1");
    appendEvent(s.dir, { kind: "power", node: name, detail: { power: "on", source } });
    if (s.runtime === "real") await realBoot(s, name, source);
    else await startKubelet(s, name, source);
  }
}

/**
 * A watchdog that expired resets its machine: the BMC's power cycle (source "watchdog"), preceded by a `watchdog`
 * event, and only if the machine is still on in the boot that armed it (a fence's power-off or a reboot that got the
 * lock first disarmed it: a watchdog does not power a machine on). Resolves with whether it reset.
 */
export function watchdogReset(s: LabState, name: string, bootID: string | undefined, detail: Record<string, unknown>): Promise<boolean> {
  const p = paths(s.dir).node(name);
  return withNodeLock(p.lock, async () => {
    if (readText(p.power) === "0" || machineStatus(s, name).bootID !== bootID) return false;
    appendEvent(s.dir, { kind: "watchdog", node: name, detail: { action: "reset", bootID, ...detail } });
    await changePower(s, name, "cycle", "watchdog");
    return true;
  });
}

export function crash(s: LabState, name: string): Promise<void> {
  const p = paths(s.dir).node(name);
  return withNodeLock(p.lock, async () => {
    if (s.runtime === "real") return realCrash(s, name);
    if (readText(p.power) === "0") throw new Error(`node ${name} is powered off; nothing to crash`);
    await killKubelet(s, name);
    appendEvent(s.dir, { kind: "crash", node: name, detail: {} });
  });
}

export function partition(s: LabState, name: string): Promise<void> {
  const p = paths(s.dir).node(name);
  return withNodeLock(p.lock, async () => {
    if (s.runtime === "real") return realPartition(s, name);
    const ref = readRef(p.kubelet);
    if (!isAlive(ref))
      throw new Error(`node ${name} has no running kubelet to partition (power ${readText(p.power) === "0" ? "off" : "on"})`);
    await freeze(ref!);
    appendEvent(s.dir, { kind: "partition", node: name, detail: { pid: ref!.pid } });
  });
}

export function heal(s: LabState, name: string): Promise<void> {
  const p = paths(s.dir).node(name);
  return withNodeLock(p.lock, async () => {
    if (s.runtime === "real") return realHeal(s, name);
    if (readText(p.power) === "0") throw new Error(`node ${name} is powered off; power it on through its BMC`);
    const ref = readRef(p.kubelet);
    if (isAlive(ref)) {
      signal(ref, "SIGCONT");
      // kwok v0.8, resumed after a SIGSTOP, renews its node Lease once and never again (seen here: the node
      // goes silent a second time, which a real kubelet would not do). Same boot, same workload: restart it
      // with the same bootID, as a kubelet restarted within the boot.
      const bootID = readText(p.bootId) ?? randomUUID();
      await stop(ref, 0);
      await stop(readRef(p.bootKick), 0);
      await startKubelet(s, name, "resume", bootID);
      appendEvent(s.dir, { kind: "heal", node: name, detail: { resumed: true } });
    } else {
      appendEvent(s.dir, { kind: "heal", node: name, detail: { rebooted: true } });
      await startKubelet(s, name, "heal");
    }
  });
}

export async function shutdownMachine(s: LabState, name: string): Promise<void> {
  if (s.runtime === "real") await realPowerOff(s, name);
  else await killKubelet(s, name);
}
