// Command-line flags, each with an environment variable of the same meaning; validated before anything
// starts, so a typo stops the operator with a message instead of running it half-configured.
import { hostname } from "node:os";
import { parseArgs } from "node:util";
import { DEFAULT_CLUSTER_MAX_UNHEALTHY_NODES } from "./decide/storm-guard.ts";
import { timingProblem } from "./runtime/leader-timing.ts";

export interface Config {
  kubeconfig: string | undefined;
  healthBindAddress: { host: string; port: number } | undefined;
  metricsBindAddress: { host: string; port: number } | undefined;
  leaderElect: boolean;
  leaderElectionNamespace: string;
  logLevel: "trace" | "debug" | "info" | "warn" | "error";
  fenceWorkers: number;
  watchStaleSeconds: number;
  instanceId: string;
  /** Deadline of every API request (not watches). */
  apiRequestTimeoutSeconds: number;
  /** On SIGTERM, how long work in flight may take before the process exits without releasing the Lease. */
  shutdownGraceSeconds: number;
  leaseDurationSeconds: number;
  renewDeadlineSeconds: number;
  retryPeriodSeconds: number;
  /** Where the admission webhooks listen (HTTPS); undefined disables them. */
  webhookBindAddress: { host: string; port: number } | undefined;
  /** Names and addresses the webhooks' serving certificate carries. */
  webhookHosts: string[];
  /** The Secret (in the operator's namespace) holding the webhooks' CA and serving certificate. */
  webhookSecret: string;
  /** Fence history: ended FenceRecords kept per node. */
  historyPerNode: number;
  /** Fence history: ended FenceRecords older than this many days are deleted. */
  historyMaxAgeDays: number;
  /** The cluster-wide storm guard: how many of all the nodes (count, or "N%") may be silent before every policy holds. */
  clusterMaxUnhealthyNodes: number | string;
}

export const USAGE = `Usage: npm start -- [flags]   (or: node dist/main.js [flags])

Runs the Stockade fencing operator against the cluster in --kubeconfig / $KUBECONFIG, else the in-cluster
service account (in a pod), else ~/.kube/config. No cluster at hand? npm run demo starts a local one.

Flags (environment variable in brackets):
  --kubeconfig PATH               kubeconfig file [KUBECONFIG]
  --health-bind-address HOST:PORT serve /healthz and /readyz here; "0" disables [STOCKADE_HEALTH_BIND_ADDRESS] (default 0.0.0.0:8081)
  --metrics-bind-address HOST:PORT serve Prometheus /metrics here; "0" disables [STOCKADE_METRICS_BIND_ADDRESS] (default 0.0.0.0:8080)
  --leader-elect BOOL             run controllers only while holding the Lease stockade-operator [STOCKADE_LEADER_ELECT] (default true)
  --leader-election-namespace NS  namespace of that Lease [POD_NAMESPACE] (default stockade-system)
  --log-level LEVEL               trace, debug, info, warn or error [STOCKADE_LOG_LEVEL] (default info)
  --fence-workers N               NodeFences worked on at once, 1-64 [STOCKADE_FENCE_WORKERS] (default 4)
  --watch-stale-seconds N         drop and relist a watch without an event or reconnect this long, 10-3600 [STOCKADE_WATCH_STALE_SECONDS] (default 120)
  --leader-elect-lease-duration-seconds N  a standby takes the Lease over after seeing it unrenewed this long [STOCKADE_LEADER_ELECT_LEASE_DURATION_SECONDS] (default 15)
  --leader-elect-renew-deadline-seconds N  a leader that could not renew for this long stops and exits; less than the lease duration [STOCKADE_LEADER_ELECT_RENEW_DEADLINE_SECONDS] (default 10)
  --leader-elect-retry-period-seconds N    how often the Lease is renewed or tried [STOCKADE_LEADER_ELECT_RETRY_PERIOD_SECONDS] (default 2)
  --api-request-timeout-seconds N deadline of every API request except watches, 1-600 [STOCKADE_API_REQUEST_TIMEOUT_SECONDS] (default 30)
  --shutdown-grace-seconds N      on SIGTERM, time for work in flight to finish before the Lease is released, 0-3600 [STOCKADE_SHUTDOWN_GRACE_SECONDS] (default 30)
  --webhook-bind-address HOST:PORT serve the admission webhooks (HTTPS) here; "0" disables [STOCKADE_WEBHOOK_BIND_ADDRESS] (default 0.0.0.0:9443)
  --webhook-hosts NAMES           extra DNS names or IP addresses for the webhooks' certificate, comma-separated, besides
                                  stockade-webhook.NS.svc [STOCKADE_WEBHOOK_HOSTS]
  --webhook-secret NAME           Secret (operator's namespace) keeping the webhooks' CA and certificate [STOCKADE_WEBHOOK_SECRET] (default stockade-webhook-tls)
  --history-per-node N            ended fence episodes (FenceRecords) kept per node, 1-1000 [STOCKADE_HISTORY_PER_NODE] (default 20)
  --history-max-age-days N        ended fence episodes older than this are deleted, 1-3650 [STOCKADE_HISTORY_MAX_AGE_DAYS] (default 400)
  --cluster-max-unhealthy-nodes N|P%  more of all the cluster's nodes silent than this (a count, or a percentage
                                  of the nodes, at least 1) holds every policy's fencing back
                                  [STOCKADE_CLUSTER_MAX_UNHEALTHY_NODES] (default 50%)
  --instance-id ID                reported in Events; with a random suffix, the leader-election identity [POD_NAME] (default: the hostname)
  -h, --help                      print this help
`;

export class ConfigError extends Error {}

function int(name: string, raw: string, min: number, max: number): number {
  const n = Number(raw);
  if (!/^\d+$/.test(raw.trim()) || n < min || n > max)
    throw new ConfigError(`invalid ${name} "${raw}": expected a whole number from ${min} to ${max}`);
  return n;
}

function bindAddress(flag: string, raw: string): Config["healthBindAddress"] {
  if (raw === "0") return undefined;
  const m = /^(.*):(\d{1,5})$/.exec(raw);
  const port = m ? Number(m[2]) : NaN;
  if (!m || port > 65535)
    throw new ConfigError(`invalid ${flag} "${raw}": expected HOST:PORT (e.g. 0.0.0.0:8081, 127.0.0.1:0) or 0 to disable`);
  return { host: m[1] || "0.0.0.0", port };
}

/** A count of nodes (1-100000) or a percentage of them (1%-100%): the storm guard's limit. */
function nodeLimit(name: string, raw: string): number | string {
  const v = raw.trim();
  const pct = /^(\d{1,3})%$/.exec(v);
  if (pct && Number(pct[1]) >= 1 && Number(pct[1]) <= 100) return v;
  if (/^\d{1,6}$/.test(v) && Number(v) >= 1 && Number(v) <= 100_000) return Number(v);
  throw new ConfigError(`invalid ${name} "${raw}": expected a whole number of nodes from 1 to 100000, or a percentage from 1% to 100%`);
}

function bool(name: string, raw: string): boolean {
  if (raw === "true") return true;
  if (raw === "false") return false;
  throw new ConfigError(`invalid ${name} "${raw}": expected true or false`);
}

function dnsLabel(name: string, raw: string): string {
  if (!/^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/.test(raw))
    throw new ConfigError(`invalid ${name} "${raw}": expected a namespace name (lowercase DNS label)`);
  return raw;
}

/** Parses argv and env; throws ConfigError with an actionable message, or returns undefined when help was asked for. */
export function parseConfig(argv: string[], env: NodeJS.ProcessEnv): Config | undefined {
  let values;
  try {
    ({ values } = parseArgs({
      args: argv,
      strict: true,
      allowPositionals: false,
      options: {
        kubeconfig: { type: "string" },
        "health-bind-address": { type: "string" },
        "metrics-bind-address": { type: "string" },
        "leader-elect": { type: "string" },
        "leader-election-namespace": { type: "string" },
        "log-level": { type: "string" },
        "fence-workers": { type: "string" },
        "watch-stale-seconds": { type: "string" },
        "instance-id": { type: "string" },
        "leader-elect-lease-duration-seconds": { type: "string" },
        "leader-elect-renew-deadline-seconds": { type: "string" },
        "leader-elect-retry-period-seconds": { type: "string" },
        "api-request-timeout-seconds": { type: "string" },
        "shutdown-grace-seconds": { type: "string" },
        "webhook-bind-address": { type: "string" },
        "webhook-hosts": { type: "string" },
        "webhook-secret": { type: "string" },
        "history-per-node": { type: "string" },
        "history-max-age-days": { type: "string" },
        "cluster-max-unhealthy-nodes": { type: "string" },
        help: { type: "boolean", short: "h" },
      },
    }));
  } catch (err) {
    throw new ConfigError(`${(err as Error).message}\n\n${USAGE}`);
  }
  if (values.help) return undefined;
  const level = values["log-level"] ?? env.STOCKADE_LOG_LEVEL ?? "info";
  const levels = ["trace", "debug", "info", "warn", "error"] as const;
  if (!(levels as readonly string[]).includes(level))
    throw new ConfigError(`invalid --log-level "${level}": expected one of ${levels.join(", ")}`);
  const kubeconfig = values.kubeconfig ?? env.KUBECONFIG ?? undefined;
  const seconds = (flag: keyof typeof values, envName: string, dflt: string, min: number, max: number) =>
    int(`--${flag}`, (values[flag] as string | undefined) ?? env[envName] ?? dflt, min, max);
  const leaseDurationSeconds = seconds("leader-elect-lease-duration-seconds", "STOCKADE_LEADER_ELECT_LEASE_DURATION_SECONDS", "15", 2, 600);
  const renewDeadlineSeconds = seconds("leader-elect-renew-deadline-seconds", "STOCKADE_LEADER_ELECT_RENEW_DEADLINE_SECONDS", "10", 1, 600);
  const retryPeriodSeconds = seconds("leader-elect-retry-period-seconds", "STOCKADE_LEADER_ELECT_RETRY_PERIOD_SECONDS", "2", 1, 600);
  const problem = timingProblem({
    leaseDurationMs: leaseDurationSeconds * 1000,
    renewDeadlineMs: renewDeadlineSeconds * 1000,
    retryPeriodMs: retryPeriodSeconds * 1000,
  });
  if (problem) throw new ConfigError(`invalid --leader-elect-* timings: ${problem}`);
  const namespace = dnsLabel("--leader-election-namespace", values["leader-election-namespace"] ?? env.POD_NAMESPACE ?? "stockade-system");
  const extraHosts = (values["webhook-hosts"] ?? env.STOCKADE_WEBHOOK_HOSTS ?? "")
    .split(",")
    .map((h) => h.trim())
    .filter(Boolean);
  for (const h of extraHosts)
    if (!/^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$/i.test(h) && !/^[0-9a-f:.]+$/i.test(h))
      throw new ConfigError(`invalid --webhook-hosts entry "${h}": expected a DNS name or an IP address`);
  const webhookSecret = values["webhook-secret"] ?? env.STOCKADE_WEBHOOK_SECRET ?? "stockade-webhook-tls";
  if (!/^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$/.test(webhookSecret))
    throw new ConfigError(`invalid --webhook-secret "${webhookSecret}": expected a Secret name (lowercase DNS subdomain)`);
  return {
    kubeconfig: kubeconfig || undefined,
    healthBindAddress: bindAddress(
      "--health-bind-address",
      values["health-bind-address"] ?? env.STOCKADE_HEALTH_BIND_ADDRESS ?? "0.0.0.0:8081",
    ),
    metricsBindAddress: bindAddress(
      "--metrics-bind-address",
      values["metrics-bind-address"] ?? env.STOCKADE_METRICS_BIND_ADDRESS ?? "0.0.0.0:8080",
    ),
    leaderElect: bool("--leader-elect", values["leader-elect"] ?? env.STOCKADE_LEADER_ELECT ?? "true"),
    leaderElectionNamespace: namespace,
    logLevel: level as Config["logLevel"],
    fenceWorkers: int("--fence-workers", values["fence-workers"] ?? env.STOCKADE_FENCE_WORKERS ?? "4", 1, 64),
    watchStaleSeconds: int("--watch-stale-seconds", values["watch-stale-seconds"] ?? env.STOCKADE_WATCH_STALE_SECONDS ?? "120", 10, 3600),
    instanceId: values["instance-id"] ?? env.POD_NAME ?? hostname(),
    apiRequestTimeoutSeconds: seconds("api-request-timeout-seconds", "STOCKADE_API_REQUEST_TIMEOUT_SECONDS", "30", 1, 600),
    shutdownGraceSeconds: seconds("shutdown-grace-seconds", "STOCKADE_SHUTDOWN_GRACE_SECONDS", "30", 0, 3600),
    leaseDurationSeconds,
    renewDeadlineSeconds,
    retryPeriodSeconds,
    webhookBindAddress: bindAddress(
      "--webhook-bind-address",
      values["webhook-bind-address"] ?? env.STOCKADE_WEBHOOK_BIND_ADDRESS ?? "0.0.0.0:9443",
    ),
    webhookHosts: [`stockade-webhook.${namespace}.svc`, `stockade-webhook.${namespace}.svc.cluster.local`, ...extraHosts],
    webhookSecret,
    historyPerNode: seconds("history-per-node", "STOCKADE_HISTORY_PER_NODE", "20", 1, 1000),
    historyMaxAgeDays: seconds("history-max-age-days", "STOCKADE_HISTORY_MAX_AGE_DAYS", "400", 1, 3650),
    clusterMaxUnhealthyNodes: nodeLimit(
      "--cluster-max-unhealthy-nodes",
      values["cluster-max-unhealthy-nodes"] ?? env.STOCKADE_CLUSTER_MAX_UNHEALTHY_NODES ?? DEFAULT_CLUSTER_MAX_UNHEALTHY_NODES,
    ),
  };
}
