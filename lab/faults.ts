// The fault operations every lab driver offers, so tests, the chaos suite and the demo are written
// once. This repository's local driver (lab/lab.ts) implements them for both node kinds: simulated
// kubelets (kwok) and real ones (a containerd and a kubelet per node, lab/real/). A kind driver (Docker
// containers: docker stop / pause / unpause, network disconnect, a BMC emulator per container) can
// implement the same. Operator faults (killed, two replicas, leadership moving) belong to the bed
// (lab/bed.ts), which runs the operator.
import type { MachineStatus } from "./machine.ts";

export interface BmcEndpoint {
  node: string;
  address: string;
  port: number;
  username: string;
  /** A file holding the password (never printed). */
  passwordFile: string;
}

export type ControlPlaneComponent = "etcd" | "etcd-proxy" | "kube-apiserver" | "kube-controller-manager" | "kube-scheduler";

export interface FaultDriver {
  /** Names of the nodes. */
  nodes(): string[];
  /** "kwok" nodes simulate a kubelet; "real" ones run containerd, a kubelet and real containers. */
  readonly runtime: "kwok" | "real";
  /** The machine hangs, power on. kwok: its kubelet dies. real: every process of the node freezes in place. */
  crash(node: string): Promise<void>;
  /** Node <-> control plane cut: no heartbeats, the workload keeps running (real: it really does, and writes). */
  partition(node: string): Promise<void>;
  /** Node <-> node cut, both ways; each still reaches the control plane. Real nodes only. */
  partitionNodes(a: string, b: string): Promise<void>;
  /** The kubelet dies, its containers keep running (the hung-kubelet case). Real nodes only. */
  killKubelet(node: string): Promise<void>;
  /**
   * The node agent dies: its container processes on the node are SIGKILLed, and again whenever its kubelet restarts
   * them, until the node boots anew or `heal`; an armed watchdog then fires. Resolves with the pids killed at once.
   * Real nodes only (kwok nodes have no containers).
   */
  killNodeAgent(node: string): Promise<number[]>;
  /** The node's watchdog is gone for good (no device: the agent cannot arm it; it never resets the node). Real nodes only. */
  disableWatchdog(node: string): Promise<void>;
  /** Undo a partition, a dead kubelet or a killed agent (same boot), or reboot a hung machine (new boot ID). */
  heal(node: string): Promise<void>;
  /** kube-apiserver <-> etcd cut (true) or reconnected (false). */
  partitionEtcd(cut: boolean): Promise<void>;
  /** Kills a control-plane component (SIGKILL) / starts it again. */
  killComponent(c: ControlPlaneComponent): Promise<void>;
  startComponent(c: ControlPlaneComponent): Promise<void>;
  /** Power control through the node's BMC, as a fence agent would do it. Returns the power state after. */
  bmc(node: string, action: "on" | "off" | "status"): Promise<"on" | "off">;
  /** Make the BMC stop (or resume) answering. */
  setBmcReachable(node: string, reachable: boolean): Promise<void>;
  bmcEndpoint(node: string): BmcEndpoint;
  machine(node: string): MachineStatus;
}
