// The fault operations every lab driver offers, so tests and the demo are written once: this
// repository's local driver (processes on loopback) implements them today; a kind driver (Docker
// containers: docker stop / pause / unpause, a BMC emulator per container) can implement the same.
import type { MachineStatus } from "./machine.ts";

export interface BmcEndpoint {
  node: string;
  address: string;
  port: number;
  username: string;
  /** A file holding the password (never printed). */
  passwordFile: string;
}

export interface FaultDriver {
  /** Names of the simulated nodes. */
  nodes(): string[];
  /** The machine hangs: its kubelet stops, its power stays on. */
  crash(node: string): Promise<void>;
  /** The machine is cut off: no heartbeats, but its workload is presumed to keep running. */
  partition(node: string): Promise<void>;
  /** Undo a partition (same boot) or reboot a crashed machine (new boot ID). */
  heal(node: string): Promise<void>;
  /** Power control through the node's BMC, as a fence agent would do it. Returns the power state after. */
  bmc(node: string, action: "on" | "off" | "status"): Promise<"on" | "off">;
  /** Make the BMC stop (or resume) answering. */
  setBmcReachable(node: string, reachable: boolean): Promise<void>;
  bmcEndpoint(node: string): BmcEndpoint;
  machine(node: string): MachineStatus;
}
