import { test } from "node:test";
import assert from "node:assert/strict";
import { ConfigError, parseConfig } from "../../src/config.ts";

test("defaults, and flags win over environment variables", () => {
  const c = parseConfig([], { KUBECONFIG: "/k", POD_NAME: "stockade-0" })!;
  assert.deepEqual(c, {
    kubeconfig: "/k",
    healthBindAddress: { host: "0.0.0.0", port: 8081 },
    metricsBindAddress: { host: "0.0.0.0", port: 8080 },
    leaderElect: true,
    leaderElectionNamespace: "stockade-system",
    logLevel: "info",
    fenceWorkers: 4,
    watchStaleSeconds: 120,
    instanceId: "stockade-0",
    apiRequestTimeoutSeconds: 30,
    shutdownGraceSeconds: 30,
    leaseDurationSeconds: 15,
    renewDeadlineSeconds: 10,
    retryPeriodSeconds: 2,
    webhookBindAddress: { host: "0.0.0.0", port: 9443 },
    webhookHosts: ["stockade-webhook.stockade-system.svc", "stockade-webhook.stockade-system.svc.cluster.local"],
    webhookSecret: "stockade-webhook-tls",
    historyPerNode: 20,
    historyMaxAgeDays: 400,
    clusterMaxUnhealthyNodes: "50%",
  });
  assert.equal(parseConfig(["--cluster-max-unhealthy-nodes", "5"], {})!.clusterMaxUnhealthyNodes, 5);
  assert.equal(parseConfig([], { STOCKADE_CLUSTER_MAX_UNHEALTHY_NODES: "30%" })!.clusterMaxUnhealthyNodes, "30%");
  const h = parseConfig(["--history-per-node", "3"], { STOCKADE_HISTORY_MAX_AGE_DAYS: "30" })!;
  assert.deepEqual([h.historyPerNode, h.historyMaxAgeDays], [3, 30]);
  const w = parseConfig(
    ["--webhook-hosts", "127.0.0.1, lab.example", "--webhook-bind-address", "0", "--leader-election-namespace", "ops"],
    {},
  )!;
  assert.deepEqual(w.webhookHosts, ["stockade-webhook.ops.svc", "stockade-webhook.ops.svc.cluster.local", "127.0.0.1", "lab.example"]);
  assert.equal(w.webhookBindAddress, undefined);
  const f = parseConfig(["--log-level", "debug", "--fence-workers=8", "--health-bind-address", "127.0.0.1:0"], {
    STOCKADE_LOG_LEVEL: "warn",
  })!;
  assert.equal(f.logLevel, "debug");
  assert.equal(f.fenceWorkers, 8);
  assert.deepEqual(f.healthBindAddress, { host: "127.0.0.1", port: 0 });
  assert.equal(parseConfig(["--health-bind-address", "0"], {})!.healthBindAddress, undefined);
  assert.equal(parseConfig(["--help"], {}), undefined);
  const t = parseConfig(["--leader-elect-lease-duration-seconds", "30", "--api-request-timeout-seconds=5"], {
    STOCKADE_LEADER_ELECT_RENEW_DEADLINE_SECONDS: "20",
    STOCKADE_SHUTDOWN_GRACE_SECONDS: "0",
  })!;
  assert.deepEqual(
    [t.leaseDurationSeconds, t.renewDeadlineSeconds, t.retryPeriodSeconds, t.apiRequestTimeoutSeconds, t.shutdownGraceSeconds],
    [30, 20, 2, 5, 0],
  );
});

test("bad input is refused with a message naming the flag and what is expected", () => {
  const cases: [string[], NodeJS.ProcessEnv, RegExp][] = [
    [["--log-level", "loud"], {}, /invalid --log-level "loud": expected one of trace, debug, info, warn, error/],
    [[], { STOCKADE_LOG_LEVEL: "verbose" }, /invalid --log-level "verbose"/],
    [["--fence-workers", "0"], {}, /invalid --fence-workers "0": expected a whole number from 1 to 64/],
    [["--fence-workers", "2.5"], {}, /--fence-workers/],
    [["--history-per-node", "0"], {}, /invalid --history-per-node "0": expected a whole number from 1 to 1000/],
    [[], { STOCKADE_HISTORY_MAX_AGE_DAYS: "9999" }, /--history-max-age-days "9999": expected a whole number from 1 to 3650/],
    [[], { STOCKADE_WATCH_STALE_SECONDS: "5" }, /--watch-stale-seconds "5": expected a whole number from 10 to 3600/],
    [["--health-bind-address", "8081"], {}, /expected HOST:PORT/],
    [["--health-bind-address", "x:70000"], {}, /expected HOST:PORT/],
    [["--kubeconfg", "/x"], {}, /Unknown option '--kubeconfg'[\s\S]*Usage:/],
    [["extra"], {}, /Unexpected argument 'extra'|positional/],
    [["--leader-elect", "yes"], {}, /invalid --leader-elect "yes": expected true or false/],
    [[], { POD_NAMESPACE: "Bad_NS" }, /invalid --leader-election-namespace "Bad_NS"/],
    [["--webhook-hosts", "a b"], {}, /invalid --webhook-hosts entry "a b": expected a DNS name or an IP address/],
    [["--webhook-secret", "Bad/Name"], {}, /invalid --webhook-secret "Bad\/Name"/],
    [["--webhook-bind-address", "9443"], {}, /invalid --webhook-bind-address "9443": expected HOST:PORT/],
    [["--metrics-bind-address", "x"], {}, /invalid --metrics-bind-address "x"/],
    [["--api-request-timeout-seconds", "0"], {}, /invalid --api-request-timeout-seconds "0": expected a whole number from 1 to 600/],
    [[], { STOCKADE_SHUTDOWN_GRACE_SECONDS: "-1" }, /invalid --shutdown-grace-seconds "-1"/],
    [["--cluster-max-unhealthy-nodes", "0"], {}, /invalid --cluster-max-unhealthy-nodes "0": expected a whole number of nodes from 1/],
    [["--cluster-max-unhealthy-nodes", "150%"], {}, /or a percentage from 1% to 100%/],
    [[], { STOCKADE_CLUSTER_MAX_UNHEALTHY_NODES: "half" }, /invalid --cluster-max-unhealthy-nodes "half"/],
    [
      ["--leader-elect-renew-deadline-seconds", "15"],
      {},
      /invalid --leader-elect-\* timings: the lease duration \(15 s\) must be longer than the renew deadline \(15 s\)/,
    ],
    [["--leader-elect-retry-period-seconds", "4"], {}, /the renew deadline \(10 s\) must be at least 3 × the retry period \(4 s\)/],
  ];
  for (const [argv, env, msg] of cases)
    assert.throws(
      () => parseConfig(argv, env),
      (e: unknown) => e instanceof ConfigError && msg.test(e.message),
      argv.join(" "),
    );
});
