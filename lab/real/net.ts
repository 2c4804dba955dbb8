// The lab network of real nodes: a "switch" network namespace holding a bridge, one veth from the
// host (which holds the address the nodes reach the control plane on) and one veth per node namespace.
// Nothing is added to the host's own firewall or forwarding (forwarding stays off there, so nothing can
// leave the machine), and a lab owns a numbered slot so several labs can run side by side.
//
//   host  stk<S>h 10.250.S.1 ──┐  (apiserver forwarder, cluster DNS: what a partition cuts)
//                 10.250.S.2   │  (management network: BMCs and power/cloud peers; a partition leaves it)
//   node-1 eth0   10.250.S.11 ─┤ br0 (netns stockade-S-sw)
//   node-2 eth0   10.250.S.12 ─┘
//
// Pod subnets are 10.<100+S>.<i>.0/24: every node routes the others' via their address, and the host
// routes all of them (tests and checkers reach pods by IP). Faults are iptables rules in a node's own
// namespace, in a chain of ours: a cut cable survives the node's power cycle, as it would.
// Addresses nobody serves fail on the host itself (unreachable routes): the machine's egress proxy would
// otherwise "answer" a ClusterIP (10.96.0.0/16) or an unused pod address.
import { execFileSync } from "node:child_process";
import { existsSync, mkdirSync, readFileSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { procStart } from "../processes.ts";
import { join } from "node:path";

export const SLOTS_DIR = "/run/stockade-lab/slots";
export const MAX_SLOTS = 60;

export interface LabNet {
  slot: number;
  hostIp: string;
  /** The host's second address on the lab link: the management network (not cut by a partition). */
  managementIp: string;
  hostDev: string;
  switchNs: string;
}

export const labNet = (slot: number): LabNet => ({
  slot,
  hostIp: `10.250.${slot}.1`,
  managementIp: `10.250.${slot}.2`,
  hostDev: `stk${slot}h`,
  switchNs: `stockade-${slot}-sw`,
});
export const nodeIp = (slot: number, index: number) => `10.250.${slot}.${11 + index}`;
export const podCidr = (slot: number, index: number) => `10.${100 + slot}.${index + 1}.0/24`;
/** Every pod subnet of the slot (kube-proxy's clusterCIDR; unreachable on the host outside the nodes' /24s). */
export const labPodRange = (slot: number) => `10.${100 + slot}.0.0/16`;
/** The apiserver's --service-cluster-ip-range, the same in every lab. */
export const SERVICE_CIDR = "10.96.0.0/16";
export const nodeNetns = (slot: number, node: string) => `stockade-${slot}-${node}`;
const nodeDev = (slot: number, index: number) => `stk${slot}n${index}`;
export const FAULT_CHAIN = "STOCKADE-FAULTS";

function run(cmd: string, args: string[], o: { ignoreError?: boolean } = {}): string {
  try {
    return execFileSync(cmd, args, { stdio: ["ignore", "pipe", "pipe"], encoding: "utf8" });
  } catch (e) {
    if (o.ignoreError) return "";
    const err = e as { stderr?: string; message: string };
    throw new Error(`${cmd} ${args.join(" ")} failed: ${(err.stderr || err.message).trim()}`, { cause: e });
  }
}
const ip = (...args: string[]) => run("ip", args);
const inNs = (ns: string, cmd: string, ...args: string[]) => run("ip", ["netns", "exec", ns, cmd, ...args]);

/** Claims a free slot for the lab in `labDir`; a slot whose lab is gone is cleaned and reused. */
export async function claimSlot(
  labDir: string,
  isStale: (ownerDir: string, creatorAlive: boolean) => boolean,
  reclaim: (slot: number, ownerDir: string) => Promise<void>,
): Promise<number> {
  mkdirSync(SLOTS_DIR, { recursive: true });
  for (let slot = 1; slot <= MAX_SLOTS; slot++) {
    const f = join(SLOTS_DIR, String(slot));
    try {
      mkdirSync(f);
      // The process that starts the lab: while it lives, the lab is being set up (nothing runs yet).
      writeFileSync(join(f, "creator"), JSON.stringify({ pid: process.pid, start: procStart(process.pid) }));
      writeFileSync(join(f, "owner"), labDir);
      return slot;
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== "EEXIST") throw e;
      let owner: string;
      try {
        owner = readFileSync(join(f, "owner"), "utf8");
      } catch {
        /* being written: not stale */
        continue;
      }
      if (owner && isStale(owner, creatorAlive(join(f, "creator")))) {
        await reclaim(slot, owner); // whatever the dead lab left running in the slot goes first
        teardownNet(slot);
        rmSync(f, { recursive: true, force: true });
        slot--; // retry the same slot
      }
    }
  }
  throw new Error(`no free lab network slot (all ${MAX_SLOTS} in use under ${SLOTS_DIR}); stop labs with: npm run lab -- down`);
}

function creatorAlive(file: string): boolean {
  try {
    const c = JSON.parse(readFileSync(file, "utf8")) as { pid: number; start: number };
    return procStart(c.pid) === c.start;
  } catch {
    return false;
  }
}

export function releaseSlot(slot: number): void {
  rmSync(join(SLOTS_DIR, String(slot)), { recursive: true, force: true });
}

export function slotsInUse(): number {
  return existsSync(SLOTS_DIR) ? readdirSync(SLOTS_DIR).length : 0;
}

/** The switch and the host's port on it. */
export function setupSwitch(slot: number): LabNet {
  const n = labNet(slot);
  teardownNet(slot);
  ip("netns", "add", n.switchNs);
  inNs(n.switchNs, "ip", "link", "add", "br0", "type", "bridge");
  inNs(n.switchNs, "ip", "link", "set", "br0", "up");
  inNs(n.switchNs, "ip", "link", "set", "lo", "up");
  ip("link", "add", n.hostDev, "type", "veth", "peer", "name", `${n.hostDev}s`);
  ip("link", "set", `${n.hostDev}s`, "netns", n.switchNs);
  inNs(n.switchNs, "ip", "link", "set", `${n.hostDev}s`, "master", "br0", "up");
  ip("addr", "add", `${n.hostIp}/24`, "dev", n.hostDev);
  ip("addr", "add", `${n.managementIp}/24`, "dev", n.hostDev);
  ip("link", "set", n.hostDev, "up");
  // Fail locally, within the machine: the nodes' /24 routes are more specific. The ClusterIP route is shared by
  // every lab and never removed (harmless: nothing may send there from the host anyway).
  ip("route", "replace", "unreachable", labPodRange(slot));
  ip("route", "replace", "unreachable", SERVICE_CIDR);
  return n;
}

/** A node's namespace, its cable to the switch, its routes to every other node's pods. */
export function setupNodeNet(slot: number, node: string, index: number, all: number): void {
  const ns = nodeNetns(slot, node);
  const dev = nodeDev(slot, index);
  const n = labNet(slot);
  run("ip", ["netns", "del", ns], { ignoreError: true });
  ip("netns", "add", ns);
  ip("link", "add", dev, "type", "veth", "peer", "name", `${dev}s`);
  ip("link", "set", `${dev}s`, "netns", n.switchNs);
  inNs(n.switchNs, "ip", "link", "set", `${dev}s`, "master", "br0", "up");
  ip("link", "set", dev, "netns", ns);
  inNs(ns, "ip", "link", "set", dev, "name", "eth0");
  inNs(ns, "ip", "addr", "add", `${nodeIp(slot, index)}/24`, "dev", "eth0");
  inNs(ns, "ip", "link", "set", "eth0", "up");
  inNs(ns, "ip", "link", "set", "lo", "up");
  // Forwarding inside the node's own namespace (its pods' traffic to other nodes); the host's stays off.
  inNs(ns, "sysctl", "-qw", "net.ipv4.ip_forward=1");
  for (let j = 0; j < all; j++) if (j !== index) inNs(ns, "ip", "route", "add", podCidr(slot, j), "via", nodeIp(slot, j));
  ip("route", "replace", podCidr(slot, index), "via", nodeIp(slot, index), "dev", n.hostDev);
  inNs(ns, "iptables", "-N", FAULT_CHAIN);
  inNs(ns, "iptables", "-I", "INPUT", "-j", FAULT_CHAIN);
  inNs(ns, "iptables", "-I", "OUTPUT", "-j", FAULT_CHAIN);
  inNs(ns, "iptables", "-I", "FORWARD", "-j", FAULT_CHAIN);
}

/** The pids of the processes with a socket listening on `ip` (TCP or UDP), from `ss -Hlnptu` output. */
export function listenerPids(ssOutput: string, ip: string): number[] {
  const pids = new Set<number>();
  for (const line of ssOutput.split("\n")) {
    const cols = line.trim().split(/\s+/);
    // Netid State Recv-Q Send-Q Local:Port Peer:Port Process
    const local = cols[4] ?? "";
    if (!local.startsWith(`${ip}:`) && !local.startsWith(`${ip}%`)) continue;
    for (const m of line.matchAll(/pid=(\d+)/g)) pids.add(Number(m[1]));
  }
  return [...pids];
}

/**
 * Kills what still listens on a slot's host addresses (BMCs on the management one too): the apiserver
 * forwarder and cluster DNS of a lab whose directory is gone (its pid files with it) keep the address bound
 * after the bridge is deleted, and the next lab on the slot could not listen there (EADDRINUSE; its kubelets
 * never registered).
 */
export function killSlotListeners(slot: number): number[] {
  const ss = run("ss", ["-Hlnptu"], { ignoreError: true });
  const n = labNet(slot);
  const pids = [...new Set([...listenerPids(ss, n.hostIp), ...listenerPids(ss, n.managementIp)])].filter((p) => p !== process.pid);
  for (const pid of pids) {
    try {
      process.kill(pid, "SIGKILL");
    } catch {
      /* gone already */
    }
  }
  return pids;
}

/** Removes every namespace, link and route of a slot (idempotent; used on down and before reuse). */
export function teardownNet(slot: number): void {
  const prefix = `stockade-${slot}-`;
  const list = run("ip", ["netns", "list"], { ignoreError: true });
  for (const line of list.split("\n")) {
    const ns = line.split(" ")[0];
    if (ns?.startsWith(prefix)) run("ip", ["netns", "del", ns], { ignoreError: true });
  }
  run("ip", ["link", "del", labNet(slot).hostDev], { ignoreError: true }); // takes its routes along
  run("ip", ["route", "del", "unreachable", labPodRange(slot)], { ignoreError: true });
}

// ---- faults: rules in the node's own chain -------------------------------------------------------

/** Rules (iptables arguments after `-A CHAIN`) that drop all traffic between this node and `peers`. */
export function dropRules(peers: string[]): string[][] {
  return peers.flatMap((p) => [
    ["-s", p, "-j", "DROP"],
    ["-d", p, "-j", "DROP"],
  ]);
}

export function addFaultRules(slot: number, node: string, rules: string[][]): void {
  const ns = nodeNetns(slot, node);
  for (const r of rules) inNs(ns, "iptables", "-A", FAULT_CHAIN, ...r);
}

export function removeFaultRules(slot: number, node: string, rules: string[][]): void {
  const ns = nodeNetns(slot, node);
  for (const r of rules) run("ip", ["netns", "exec", ns, "iptables", "-D", FAULT_CHAIN, ...r], { ignoreError: true });
}

export function faultRules(slot: number, node: string): string {
  return run("ip", ["netns", "exec", nodeNetns(slot, node), "iptables", "-S", FAULT_CHAIN], { ignoreError: true });
}
