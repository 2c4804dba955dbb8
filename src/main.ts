// Entry point: validate configuration, check the cluster is reachable and has our CRDs, then run until
// SIGTERM/SIGINT.
import { existsSync } from "node:fs";
import { KubeConfig } from "@kubernetes/client-node";
import { pino } from "pino";
import { GROUP, VERSION } from "./api/v1alpha1.ts";
import { ConfigError, parseConfig, USAGE } from "./config.ts";
import { errorMessage, isNotFound, Kube } from "./kube/api.ts";
import { withRequestTimeout } from "./kube/deadline.ts";
import { kubeconfigSource } from "./kube/kubeconfig-source.ts";
import { Operator } from "./operator.ts";

async function main(): Promise<number> {
  let cfg;
  try {
    cfg = parseConfig(process.argv.slice(2), process.env);
  } catch (err) {
    if (err instanceof ConfigError) {
      process.stderr.write(`stockade: ${err.message}\n`);
      return 2;
    }
    throw err;
  }
  if (!cfg) {
    process.stdout.write(USAGE);
    return 0;
  }
  const log = pino({ level: cfg.logLevel, base: { instance: cfg.instanceId } });
  const source = kubeconfigSource({ kubeconfig: cfg.kubeconfig, env: process.env, home: process.env.HOME, exists: existsSync });
  if (source.kind === "none") {
    process.stderr.write(`stockade: ${source.message}\n`);
    return 2;
  }
  const kc = new KubeConfig();
  try {
    if (source.kind === "file") kc.loadFromFile(source.path);
    else kc.loadFromCluster();
    if (!kc.getCurrentCluster()) throw new Error("no cluster in the configuration");
  } catch (err) {
    process.stderr.write(
      `stockade: cannot load ${source.kind === "file" ? `kubeconfig ${source.path}` : "in-cluster configuration"}: ${(err as Error).message}\n`,
    );
    return 2;
  }
  const server = kc.getCurrentCluster()?.server;
  try {
    await new Kube(withRequestTimeout(kc, cfg.apiRequestTimeoutSeconds * 1000)).custom.listClusterCustomObject({
      group: GROUP,
      version: VERSION,
      plural: "nodefences",
      limit: 1,
    });
  } catch (err) {
    const msg = isNotFound(err)
      ? `the Stockade CRDs are not installed in the cluster at ${server}: kubectl apply -f crds/`
      : `cannot reach the Kubernetes API at ${server}: ${errorMessage(err)}`;
    process.stderr.write(`stockade: ${msg}\n`);
    return 1;
  }
  const op = new Operator(kc, cfg, log, {
    // A replica that lost the Lease may hold a view another replica now acts on: stop at once.
    onLostLeadership: () => {
      log.error("lost leadership; exiting so that a restart starts from a clean state");
      process.exit(1);
    },
  });
  const signalled = new Promise<void>((resolve) => {
    process.once("SIGTERM", resolve);
    process.once("SIGINT", resolve);
  });
  await Promise.race([op.start(), signalled]);
  await signalled;
  // No new work; the work in flight finishes (the Lease still renewed), then the Lease is released.
  const drained = await op.stop();
  log.info({ drained }, drained ? "stopped" : "stopped with work still in flight");
  return drained ? 0 : 1;
}

// `stockade node-agent ...` runs the node agent (manifests/node-agent/); anything else is the operator, as before.
process.exit(
  process.argv[2] === "node-agent" ? await (await import("./node-agent/main.ts")).runNodeAgent(process.argv.slice(3)) : await main(),
);
