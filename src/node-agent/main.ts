// `stockade node-agent`: parse the flags, load the cluster configuration, run the agent until SIGTERM/SIGINT.
import { existsSync } from "node:fs";
import { KubeConfig } from "@kubernetes/client-node";
import { pino } from "pino";
import { kubeconfigSource } from "../kube/kubeconfig-source.ts";
import { Agent } from "./agent.ts";
import { NODE_AGENT_USAGE, NodeAgentConfigError, parseNodeAgentConfig } from "./config.ts";

export async function runNodeAgent(argv: string[]): Promise<number> {
  let cfg;
  try {
    cfg = parseNodeAgentConfig(argv, process.env);
  } catch (err) {
    if (err instanceof NodeAgentConfigError) {
      process.stderr.write(`stockade node-agent: ${err.message}\n`);
      return 2;
    }
    throw err;
  }
  if (!cfg) {
    process.stdout.write(NODE_AGENT_USAGE);
    return 0;
  }
  const log = pino({ level: cfg.logLevel, base: { node: cfg.nodeName } });
  const source = kubeconfigSource({ kubeconfig: cfg.kubeconfig, env: process.env, home: process.env.HOME, exists: existsSync });
  if (source.kind === "none") {
    process.stderr.write(`stockade node-agent: ${source.message}\n`);
    return 2;
  }
  const kc = new KubeConfig();
  try {
    if (source.kind === "file") kc.loadFromFile(source.path);
    else kc.loadFromCluster();
  } catch (err) {
    process.stderr.write(`stockade node-agent: cannot load the cluster configuration: ${(err as Error).message}\n`);
    return 2;
  }
  const agent = new Agent(kc, cfg, log);
  const signalled = new Promise<void>((resolve) => {
    process.once("SIGTERM", resolve);
    process.once("SIGINT", resolve);
  });
  await agent.start();
  await signalled;
  const outcome = await agent.stop();
  log.info({ watchdog: outcome }, outcome === "left-armed" ? "stopped while unconfirmed: the watchdog was left armed" : "stopped");
  return 0;
}
