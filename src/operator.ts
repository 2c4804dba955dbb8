// Wires the operator together: caches, the two controllers, and the health endpoints.
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import type { KubeConfig } from "@kubernetes/client-node";
import { DateTime } from "luxon";
import type { Logger } from "pino";
import { FenceAgentController } from "./controllers/fence-agent.ts";
import { NodeFenceController } from "./controllers/node-fence.ts";
import { FLEET_KEY, NodeHealthController } from "./controllers/node-health.ts";
import { Kube } from "./kube/api.ts";
import { Caches } from "./kube/caches.ts";
import { Controller, enqueueFrom } from "./runtime/controller.ts";
import { EventRecorder } from "./runtime/events.ts";
import type { Config } from "./config.ts";

export class Operator {
  readonly caches: Caches;
  readonly kube: Kube;
  private readonly fleet: Controller;
  private readonly fences: Controller;
  private readonly agents: Controller;
  private server: Server | undefined;
  private started = false;
  private readonly log: Logger;
  private readonly cfg: Config;

  constructor(kc: KubeConfig, cfg: Config, log: Logger, clock: () => DateTime = () => DateTime.now()) {
    this.log = log;
    this.cfg = cfg;
    this.kube = new Kube(kc);
    this.caches = new Caches(kc, {
      staleAfterMs: cfg.watchStaleSeconds * 1000,
      onError: (path, err, ms) => log.warn({ watch: path, err: String(err), restartInMs: ms }, `watch on ${path} failed; restarting`),
    });
    const events = new EventRecorder({ kc, log, instance: cfg.instanceId });
    const deps = { kube: this.kube, caches: this.caches, events, log, clock };
    const health = new NodeHealthController(deps);
    const fence = new NodeFenceController(deps);
    this.fleet = new Controller({ name: "node-health", reconcile: () => health.reconcile(), log });
    this.fences = new Controller({ name: "node-fence", workers: cfg.fenceWorkers, reconcile: (k) => fence.reconcile(k), log });
    const agent = new FenceAgentController(deps);
    this.agents = new Controller({ name: "fence-agent", reconcile: (k) => agent.reconcile(k), log });
    const c = this.caches;
    for (const inf of [c.nodes, c.leases, c.pods, c.pvcs, c.pdbs, c.policies, c.fences] as const)
      enqueueFrom(inf as never, this.fleet.queue, () => FLEET_KEY);
    enqueueFrom(c.fences, this.fences.queue, (f) => f.metadata?.name);
    enqueueFrom(c.nodes, this.fences.queue, (n) => (c.fences.get(n.metadata?.name ?? "") ? n.metadata?.name : undefined));
    const all = () => c.fences.list().map((f) => f.metadata?.name ?? "");
    enqueueFrom(c.policies, this.fences.queue, all);
    enqueueFrom(c.agents, this.fences.queue, all);
    enqueueFrom(c.agents, this.agents.queue, (a) => a.metadata?.name);
    enqueueFrom(c.policies, this.agents.queue, () => c.agents.list().map((a) => a.metadata?.name ?? ""));
  }

  get ready(): boolean {
    return this.started && this.caches.synced;
  }

  async start(): Promise<void> {
    if (this.cfg.healthBindAddress) await this.serveHealth(this.cfg.healthBindAddress);
    await this.caches.start();
    this.fleet.start();
    this.fences.start();
    this.agents.start();
    this.fleet.queue.add(FLEET_KEY);
    this.started = true;
    this.log.info(
      { nodes: this.caches.nodes.list().length, fences: this.caches.fences.list().length },
      "caches synced; controllers running",
    );
  }

  async stop(): Promise<void> {
    this.caches.stop();
    await Promise.all([this.fleet.stop(), this.fences.stop(), this.agents.stop()]);
    await new Promise<void>((r) => (this.server ? this.server.close(() => r()) : r()));
  }

  /** The address the health endpoints listen on (port 0 resolved). */
  get healthAddress(): string | undefined {
    const a = this.server?.address() as AddressInfo | null | undefined;
    return a ? `${a.address}:${a.port}` : undefined;
  }

  private async serveHealth(bind: { host: string; port: number }): Promise<void> {
    this.server = createServer((req, res) => {
      const path = (req.url ?? "").split("?")[0];
      const ok = path === "/healthz" ? true : path === "/readyz" ? this.ready : undefined;
      if (ok === undefined) {
        res.writeHead(404).end("not found\n");
        return;
      }
      res.writeHead(ok ? 200 : 503, { "content-type": "text/plain" }).end(ok ? "ok\n" : "caches not synced\n");
    });
    await new Promise<void>((resolve, reject) => {
      this.server!.once("error", (err) => reject(new Error(`cannot listen on ${bind.host}:${bind.port} for /healthz: ${err.message}`)));
      this.server!.listen(bind.port, bind.host, () => resolve());
    });
    this.log.info({ address: this.healthAddress }, "serving /healthz and /readyz");
  }
}
