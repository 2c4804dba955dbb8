// `stockade node-agent` flags (each with an environment variable), validated before anything starts: the timing
// rules of the agent's promise (decide/isolation.ts checkAgentConfig: D ≥ N·c + F + 2·peer timeout, peer timeout < c,
// F ≥ c + 3) are refused at start, never bent at run time.
import { parseArgs } from "node:util";
import { checkAgentConfig, defaultControlPlaneDownSeconds } from "../decide/isolation.ts";
import { NODE_AGENT_NAMESPACE } from "../decide/node-agent-record.ts";
import { defaultTimeoutFile } from "./watchdog.ts";

export interface NodeAgentConfig {
  nodeName: string;
  podName: string;
  podIP: string;
  namespace: string;
  kubeconfig: string | undefined;
  watchdogDevice: string;
  watchdogTimeoutFile: string;
  checkIntervalSeconds: number;
  failedChecksBeforePeers: number;
  deadlineSeconds: number;
  peerPort: number;
  peerTimeoutSeconds: number;
  healthBindAddress: { host: string; port: number };
  sysrqReboot: boolean;
  logLevel: "trace" | "debug" | "info" | "warn" | "error";
  /** F (default 2·c): how long a peer must have been cut off for its "unreachable" to count; also in the record. */
  controlPlaneDownSeconds: number;
  /** Deadline of every API request: shorter than the check interval. */
  apiRequestTimeoutMs: number;
}

export const NODE_AGENT_USAGE = `Usage: stockade node-agent --node-name NODE [flags]

Runs on every node (manifests/node-agent/): feeds the node's watchdog while it can confirm that no NodeFence
for its node exists, and renews its record (a Lease named after the node in namespace ${NODE_AGENT_NAMESPACE}).

Flags (environment variable in brackets):
  --node-name NODE                 this node [NODE_NAME] (required)
  --pod-name NAME                  this agent's pod, the record's holder [POD_NAME] (default: the node name)
  --pod-ip IP                      the address peers reach this agent at [POD_IP] (required)
  --namespace NS                   where the records live [STOCKADE_NODE_AGENT_NAMESPACE] (default ${NODE_AGENT_NAMESPACE})
  --kubeconfig PATH                kubeconfig file [KUBECONFIG] (default: the in-cluster service account)
  --watchdog-device PATH           [STOCKADE_WATCHDOG_DEVICE] (default /dev/watchdog)
  --watchdog-timeout-file PATH     [STOCKADE_WATCHDOG_TIMEOUT_FILE] (default /sys/class/watchdog/<device>/timeout)
  --check-interval-seconds N       c, 1-60 [STOCKADE_CHECK_INTERVAL_SECONDS] (default 5)
  --failed-checks-before-peers N   N, 1-10 [STOCKADE_FAILED_CHECKS_BEFORE_PEERS] (default 2)
  --deadline-seconds N             D, at least N·c + F + 2·peer timeout, at most 600 [STOCKADE_DEADLINE_SECONDS] (default 30)
  --control-plane-down-seconds N   F, at least c + 3: how long without the API before this agent tells a peer it cannot
                                   reach it [STOCKADE_CONTROL_PLANE_DOWN_SECONDS] (default 2·c, at least c + 3)
  --peer-port PORT                 [STOCKADE_PEER_PORT] (default 9447)
  --peer-timeout-seconds N         1-30, shorter than c [STOCKADE_PEER_TIMEOUT_SECONDS] (default 3)
  --health-bind-address HOST:PORT  /healthz and /metrics [STOCKADE_HEALTH_BIND_ADDRESS] (default 0.0.0.0:9448)
  --sysrq-reboot BOOL              reboot at once through /proc/sysrq-trigger when a NodeFence is seen [STOCKADE_SYSRQ_REBOOT] (default false)
  --log-level LEVEL                [STOCKADE_LOG_LEVEL] (default info)
  -h, --help
`;

export class NodeAgentConfigError extends Error {}

const FLAGS = {
  "node-name": "NODE_NAME",
  "pod-name": "POD_NAME",
  "pod-ip": "POD_IP",
  namespace: "STOCKADE_NODE_AGENT_NAMESPACE",
  kubeconfig: "KUBECONFIG",
  "watchdog-device": "STOCKADE_WATCHDOG_DEVICE",
  "watchdog-timeout-file": "STOCKADE_WATCHDOG_TIMEOUT_FILE",
  "check-interval-seconds": "STOCKADE_CHECK_INTERVAL_SECONDS",
  "failed-checks-before-peers": "STOCKADE_FAILED_CHECKS_BEFORE_PEERS",
  "deadline-seconds": "STOCKADE_DEADLINE_SECONDS",
  "control-plane-down-seconds": "STOCKADE_CONTROL_PLANE_DOWN_SECONDS",
  "peer-port": "STOCKADE_PEER_PORT",
  "peer-timeout-seconds": "STOCKADE_PEER_TIMEOUT_SECONDS",
  "health-bind-address": "STOCKADE_HEALTH_BIND_ADDRESS",
  "sysrq-reboot": "STOCKADE_SYSRQ_REBOOT",
  "log-level": "STOCKADE_LOG_LEVEL",
} as const;

function int(flag: string, raw: string, min: number, max: number): number {
  const n = Number(raw);
  if (!/^\d+$/.test(raw.trim()) || n < min || n > max)
    throw new NodeAgentConfigError(`invalid --${flag} "${raw}": expected a whole number from ${min} to ${max}`);
  return n;
}

/** The configuration, undefined for --help; throws NodeAgentConfigError with a message for people. */
export function parseNodeAgentConfig(argv: string[], env: NodeJS.ProcessEnv): NodeAgentConfig | undefined {
  let values: Record<string, string | boolean | undefined>;
  try {
    const options = Object.fromEntries(Object.keys(FLAGS).map((k) => [k, { type: "string" as const }]));
    values = parseArgs({
      args: argv,
      options: { ...options, help: { type: "boolean", short: "h" } },
      strict: true,
      allowPositionals: false,
    }).values;
  } catch (err) {
    throw new NodeAgentConfigError((err as Error).message);
  }
  if (values.help) return undefined;
  const get = (flag: keyof typeof FLAGS) => (values[flag] as string | undefined) ?? env[FLAGS[flag]] ?? undefined;
  const nodeName = get("node-name");
  if (!nodeName || !/^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$/.test(nodeName))
    throw new NodeAgentConfigError(`--node-name (or NODE_NAME) must be this node's name${nodeName ? `, not "${nodeName}"` : ""}`);
  const podIP = get("pod-ip");
  if (!podIP || !/^[0-9a-fA-F.:]{2,45}$/.test(podIP))
    throw new NodeAgentConfigError("--pod-ip (or POD_IP) must be this agent's pod IP address");
  const c = int("check-interval-seconds", get("check-interval-seconds") ?? "5", 1, 60);
  const n = int("failed-checks-before-peers", get("failed-checks-before-peers") ?? "2", 1, 10);
  const peerTimeout = int("peer-timeout-seconds", get("peer-timeout-seconds") ?? "3", 1, 30);
  const d = int("deadline-seconds", get("deadline-seconds") ?? "30", 1, 600);
  const f = int("control-plane-down-seconds", get("control-plane-down-seconds") ?? String(defaultControlPlaneDownSeconds(c)), 1, 600);
  const problems = checkAgentConfig(c, n, d, f, peerTimeout);
  if (problems.length) throw new NodeAgentConfigError(problems.join("; "));
  const health = get("health-bind-address") ?? "0.0.0.0:9448";
  const m = /^(.*):(\d{1,5})$/.exec(health);
  if (!m || Number(m[2]) > 65535) throw new NodeAgentConfigError(`invalid --health-bind-address "${health}": expected HOST:PORT`);
  const sysrq = get("sysrq-reboot") ?? "false";
  if (sysrq !== "true" && sysrq !== "false") throw new NodeAgentConfigError(`invalid --sysrq-reboot "${sysrq}": expected true or false`);
  const logLevel = get("log-level") ?? "info";
  if (!["trace", "debug", "info", "warn", "error"].includes(logLevel)) throw new NodeAgentConfigError(`invalid --log-level "${logLevel}"`);
  const watchdogDevice = get("watchdog-device") ?? "/dev/watchdog";
  return {
    nodeName,
    podName: get("pod-name") ?? nodeName,
    podIP,
    namespace: get("namespace") ?? NODE_AGENT_NAMESPACE,
    kubeconfig: get("kubeconfig"),
    watchdogDevice,
    watchdogTimeoutFile: get("watchdog-timeout-file") ?? defaultTimeoutFile(watchdogDevice),
    checkIntervalSeconds: c,
    failedChecksBeforePeers: n,
    deadlineSeconds: d,
    peerPort: int("peer-port", get("peer-port") ?? "9447", 1, 65535),
    peerTimeoutSeconds: peerTimeout,
    healthBindAddress: { host: m[1] || "0.0.0.0", port: Number(m[2]) },
    sysrqReboot: sysrq === "true",
    logLevel: logLevel as NodeAgentConfig["logLevel"],
    controlPlaneDownSeconds: f,
    apiRequestTimeoutMs: Math.max(500, Math.floor(c * 1000 * 0.8)),
  };
}
