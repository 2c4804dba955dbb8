// Wires the operator together: caches, the controllers, leader election, metrics and the health
// endpoints. Every replica keeps its caches warm; only the leader runs controllers.
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import type { KubeConfig } from "@kubernetes/client-node";
import { DateTime } from "luxon";
import type { Logger } from "pino";
import type { Config } from "./config.ts";
import { FenceAgentController } from "./controllers/fence-agent.ts";
import { NodeFenceController } from "./controllers/node-fence.ts";
import { FLEET_KEY, NodeHealthController } from "./controllers/node-health.ts";
import { isGuarded } from "./decide/guarded-pods.ts";
import { Kube } from "./kube/api.ts";
import { Caches } from "./kube/caches.ts";
import { Metrics } from "./metrics.ts";
import { Controller, enqueueFrom } from "./runtime/controller.ts";
import { EventRecorder } from "./runtime/events.ts";
import { LeaderElector } from "./runtime/leader.ts";
import { WorkQueue } from "./runtime/work-queue.ts";

export const LEADER_LEASE = "stockade-operator";

export interface OperatorHooks {
  /** Called when leadership is lost: the process must stop acting (main exits). */
  onLostLeadership?: () => void;
}

export class Operator {
  readonly caches: Caches;
  readonly kube: Kube;
  readonly metrics = new Metrics();
  private readonly controllers: Controller[];
  private readonly fleet: Controller;
  private readonly health: NodeHealthController;
  private readonly elector: LeaderElector | undefined;
  private servers: Server[] = [];
  private running = false;
  private readonly log: Logger;
  private readonly cfg: Config;

  constructor(kc: KubeConfig, cfg: Config, log: Logger, hooks: OperatorHooks = {}, clock: () => DateTime = () => DateTime.now()) {
    this.log = log;
    this.cfg = cfg;
    this.kube = new Kube(kc);
    this.caches = new Caches(kc, {
      staleAfterMs: cfg.watchStaleSeconds * 1000,
      onError: (path, err, ms) => log.warn({ watch: path, err: String(err), restartInMs: ms }, `watch on ${path} failed; restarting`),
    });
    const events = new EventRecorder({ kc, log, instance: cfg.instanceId });
    const deps = { kube: this.kube, caches: this.caches, events, log, clock, metrics: this.metrics };
    this.health = new NodeHealthController(deps);
    const fence = new NodeFenceController(deps);
    const agent = new FenceAgentController(deps);
    const queue = (name: string) => new WorkQueue({ onMetric: this.metrics.queue(name) });
    this.fleet = new Controller({ name: "node-health", queue: queue("node-health"), reconcile: () => this.health.reconcile(), log });
    const fences = new Controller({
      name: "node-fence",
      queue: queue("node-fence"),
      workers: cfg.fenceWorkers,
      reconcile: (k) => fence.reconcile(k),
      log,
    });
    fence.enqueue = (k) => fences.queue.add(k);
    const agents = new Controller({ name: "fence-agent", queue: queue("fence-agent"), reconcile: (k) => agent.reconcile(k), log });
    this.controllers = [this.fleet, fences, agents];

    const c = this.caches;
    for (const inf of [c.nodes, c.leases, c.pods, c.pvcs, c.pdbs, c.policies, c.fences] as const)
      enqueueFrom(inf as never, this.fleet.queue, () => FLEET_KEY);
    enqueueFrom(c.fences, fences.queue, (f) => f.metadata?.name);
    enqueueFrom(c.nodes, fences.queue, (n) => (c.fences.get(n.metadata?.name ?? "") ? n.metadata?.name : undefined));
    const allFences = () => c.fences.list().map((f) => f.metadata?.name ?? "");
    enqueueFrom(c.policies, fences.queue, allFences);
    enqueueFrom(c.agents, fences.queue, allFences);
    enqueueFrom(c.agents, agents.queue, (a) => a.metadata?.name);
    enqueueFrom(c.policies, agents.queue, () => c.agents.list().map((a) => a.metadata?.name ?? ""));

    if (cfg.leaderElect) {
      this.elector = new LeaderElector({
        kc,
        namespace: cfg.leaderElectionNamespace,
        name: LEADER_LEASE,
        identity: cfg.instanceId,
        log,
        onStartedLeading: () => this.runControllers(),
        onStoppedLeading: () => hooks.onLostLeadership?.(),
      });
    }
  }

  /** Ready: caches synced and leadership known (we lead, or we know who does). */
  get ready(): boolean {
    return this.caches.synced && (this.elector ? this.elector.known : this.running);
  }

  get leading(): boolean {
    return this.elector ? this.elector.leading : this.running;
  }

  async start(): Promise<void> {
    if (this.cfg.healthBindAddress)
      this.servers.push(await this.serve("health", this.cfg.healthBindAddress, (p) => this.healthEndpoint(p)));
    if (this.cfg.metricsBindAddress)
      this.servers.push(await this.serve("metrics", this.cfg.metricsBindAddress, (p) => this.metricsEndpoint(p)));
    await this.caches.start();
    this.log.info({ nodes: this.caches.nodes.list().length, fences: this.caches.fences.list().length }, "caches synced");
    if (this.elector) this.elector.start();
    else this.runControllers();
  }

  private runControllers(): void {
    if (this.running) return;
    this.running = true;
    for (const c of this.controllers) c.start();
    this.fleet.queue.add(FLEET_KEY);
    for (const f of this.caches.fences.list()) this.controllers[1]!.queue.add(f.metadata?.name ?? "");
    for (const a of this.caches.agents.list()) this.controllers[2]!.queue.add(a.metadata?.name ?? "");
    this.log.info({ leaderElection: !!this.elector }, "controllers running");
  }

  async stop(): Promise<void> {
    await this.elector?.stop();
    this.caches.stop();
    await Promise.all(this.controllers.map((c) => c.stop()));
    await Promise.all(this.servers.map((s) => new Promise<void>((r) => s.close(() => r()))));
  }

  /** Where the health (index 0) and metrics (index 1) endpoints listen, port 0 resolved. */
  addresses(): string[] {
    return this.servers.map((s) => {
      const a = s.address() as AddressInfo;
      return `${a.address}:${a.port}`;
    });
  }

  private async healthEndpoint(path: string): Promise<[number, string, string]> {
    if (path === "/healthz") return [200, "text/plain", "ok\n"];
    if (path === "/readyz")
      return this.ready
        ? [200, "text/plain", "ok\n"]
        : [503, "text/plain", this.caches.synced ? "leadership not known yet\n" : "caches not synced\n"];
    return [404, "text/plain", "not found\n"];
  }

  private async metricsEndpoint(path: string): Promise<[number, string, string]> {
    if (path !== "/metrics") return [404, "text/plain", "not found\n"];
    this.refreshGauges();
    return [200, this.metrics.registry.contentType, await this.metrics.registry.metrics()];
  }

  /** State gauges from what the caches show now. */
  private refreshGauges(): void {
    const m = this.metrics;
    m.leader.set(this.leading ? 1 : 0);
    m.watchRestarts.set(this.caches.restarts());
    if (!this.caches.synced) return;
    const d = this.health.decide();
    const partitioned = new Set(d.decisions.filter((x) => x.health.state === "Partitioned").map((x) => x.node));
    m.partitioned.set(partitioned.size);
    const pvcs = new Map(this.caches.pvcs.list().map((p) => [`${p.metadata?.namespace}/${p.metadata?.name}`, p] as const));
    m.guardedPods.set(
      this.caches.pods.list().filter((p) => partitioned.has(p.spec?.nodeName ?? "") && isGuarded(p, undefined, pvcs).guarded).length,
    );
    m.stormGuard.reset();
    for (const [policy, s] of d.policies) for (const h of s.holds) m.stormGuard.set({ policy, reason: h.reason }, 1);
  }

  private async serve(
    what: string,
    bind: { host: string; port: number },
    handler: (path: string) => Promise<[number, string, string]>,
  ): Promise<Server> {
    const server = createServer((req, res) => {
      handler((req.url ?? "").split("?")[0] ?? "").then(
        ([code, type, body]) => res.writeHead(code, { "content-type": type }).end(body),
        (err: unknown) => res.writeHead(500).end(`${String(err)}\n`),
      );
    });
    await new Promise<void>((resolve, reject) => {
      server.once("error", (err) => reject(new Error(`cannot listen on ${bind.host}:${bind.port} for ${what}: ${err.message}`)));
      server.listen(bind.port, bind.host, () => resolve());
    });
    const a = server.address() as AddressInfo;
    this.log.info(
      { [what]: `${a.address}:${a.port}`, address: `${a.address}:${a.port}` },
      `serving ${what === "health" ? "/healthz and /readyz" : "/metrics"}`,
    );
    return server;
  }
}
