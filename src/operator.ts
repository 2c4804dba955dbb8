// Wires the operator together: caches, the controllers, leader election, metrics and the health
// endpoints. Every replica keeps its caches warm; only the leader runs controllers, and only once every
// cache has synced. Every API request has a deadline (kube/deadline.ts). On stop (SIGTERM) it takes no
// new work, lets the work in flight finish while still renewing the Lease, and only then releases it.
// Its parts (operator/): leadership.ts, controllers.ts, admission.ts (the webhooks), wiring.ts (which cache change
// enqueues what), http.ts.
import { guardedPodsOnMissingNodes } from "./decide/missing-nodes.ts";
import type { Server } from "node:http";
import { CoordinationV1Api, type KubeConfig } from "@kubernetes/client-node";
import { DateTime } from "luxon";
import type { Logger } from "pino";
import type { Config } from "./config.ts";
import type { AgentMonitor } from "./controllers/agent-monitor.ts";
import type { ClaimLockController } from "./controllers/claim-lock.ts";
import type { FenceHistory } from "./controllers/fence-history.ts";
import { FLEET_KEY, type NodeHealthController } from "./controllers/node-health.ts";
import { isGuarded } from "./decide/guarded-pods.ts";
import { ADMISSION_POLICY, checkAdmissionPolicy } from "./kube/admission-check.ts";
import { Kube, isNotFound } from "./kube/api.ts";
import { Caches } from "./kube/caches.ts";
import { Sight } from "./kube/sight.ts";
import { Metrics, nodeFencePhases } from "./metrics.ts";
import type { Controller } from "./runtime/controller.ts";
import { LoopStallWatch } from "./runtime/loop-stall.ts";
import { EventRecorder } from "./runtime/events.ts";
import { InFlight } from "./runtime/in-flight.ts";
import type { LeaderElector, SoleLeadership } from "./runtime/leader.ts";
import { webhooksFor, type Webhooks } from "./operator/admission.ts";
import { buildControllers } from "./operator/controllers.ts";
import { listenAddress, serve, type Reply } from "./operator/http.ts";
import { LEADER_LEASE, leadershipFor } from "./operator/leadership.ts";
import { wireEnqueues } from "./operator/wiring.ts";

export { LEADER_LEASE } from "./operator/leadership.ts";
/** How often the admission policy is checked to be in force. */
const ADMISSION_CHECK_MS = 10 * 60_000;
/** How often the leader applies the fence history's retention to every node (and once when it starts leading). */
const HISTORY_SWEEP_MS = 60 * 60_000;

const errorText = (err: unknown) => (err instanceof Error ? err.message : String(err));

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
  private readonly sole: SoleLeadership | undefined;
  /** Background work controllers registered (deps.inflight); stop() waits for it before releasing the Lease. */
  readonly inflight = new InFlight();
  private servers: Server[] = [];
  private admissionTimer: NodeJS.Timeout | undefined;
  private historyTimer: NodeJS.Timeout | undefined;
  private sightTimer: NodeJS.Timeout | undefined;
  /** Without leader election: what asks the apiserver every retry period in the elector's stead (kube/sight.ts). */
  private readonly sightProbe: CoordinationV1Api | undefined;
  /** Fence history: each NodeFence's FenceRecord (controllers/fence-history.ts). */
  readonly history: FenceHistory;
  /** Says when the event loop was held long enough to delay a fence (with the last fleet pass's length beside it). */
  private readonly stalls = new LoopStallWatch({
    onStall: (blockedMs) =>
      this.log.info({ blockedMs, lastFleetPassMs: Math.round(this.health.lastPassMs) }, `event loop held for ${blockedMs} ms`),
  });
  private readonly claims: ClaimLockController;
  /** Status queries of every node's fence device, on the leader (controllers/agent-monitor.ts). */
  readonly monitor: AgentMonitor;
  private readonly claimQueue: Controller;
  /** The admission webhooks, when this replica serves them. */
  private readonly webhooks: Webhooks | undefined;
  private readonly events: EventRecorder;
  private admissionProblems: string | undefined;
  private running = false;
  private stopping: Promise<boolean> | undefined;
  private readonly log: Logger;
  private readonly cfg: Config;

  constructor(kc: KubeConfig, cfg: Config, log: Logger, hooks: OperatorHooks = {}, clock: () => DateTime = () => DateTime.now()) {
    this.log = log;
    this.cfg = cfg;
    // When this replica could see: a node's silence counts only from the end of its last gap (kube/sight.ts). Answers
    // of the apiserver further apart than the renew deadline are a gap: the leader would have lost the Lease by then.
    const sight = new Sight({
      maxQuietMs: Math.max(cfg.renewDeadlineSeconds, 2 * cfg.retryPeriodSeconds) * 1000,
      onChange: (e) => {
        if (e.kind === "lost")
          log.warn({ source: e.source }, `cannot see the cluster's heartbeats: ${e.why}; no node's silence counts until it can`);
        else {
          this.metrics.silenceRestarts.inc({ source: e.source });
          log.info({ source: e.source, blindMs: e.blindMs }, `node silence counts again from now: ${e.why}`);
        }
      },
    });
    const lead = leadershipFor(kc, cfg, log, {
      onStartedLeading: () => {
        // What was seen while another replica led (or before an outage that made it lose) proves nothing now.
        sight.restart("became the leader");
        this.runControllers();
      },
      onAnswer: (ok, why) => sight.answered(ok, why),
      onStoppedLeading: () => hooks.onLostLeadership?.(),
      // Epochs never go backwards, even when the Lease is deleted and created again (caches are synced first).
      minEpoch: () => Math.max(-1, ...this.caches.fences.list().map((f) => f.status?.leaderEpoch ?? 0)) + 1,
    });
    this.elector = lead.elector;
    this.sole = lead.sole;
    if (!lead.elector) this.sightProbe = lead.reads.makeApiClient(CoordinationV1Api);
    const { reads, writes } = lead;
    this.kube = new Kube(writes);
    this.caches = new Caches(reads, {
      sight,
      staleAfterMs: cfg.watchStaleSeconds * 1000,
      onError: (path, err, ms) =>
        log.warn({ watch: path, err: errorText(err), restartInMs: ms }, `watch on ${path} failed; restarting in ${ms} ms`),
    });
    this.events = new EventRecorder({ kc: writes, log, instance: cfg.instanceId });
    const shared = { kube: this.kube, caches: this.caches, log, metrics: this.metrics };
    const c = buildControllers({
      ...shared,
      cfg,
      reads,
      events: this.events,
      clock,
      leadership: lead.leadership,
      inflight: this.inflight,
      leading: () => this.leading,
    });
    ({ health: this.health, history: this.history, monitor: this.monitor, claims: this.claims } = c);
    ({ fleet: this.fleet, claimQueue: this.claimQueue, all: this.controllers } = c);
    this.webhooks = webhooksFor(cfg, { ...shared, reads, stopping: () => !!this.stopping });
    wireEnqueues(this.caches, c);
  }

  /**
   * Ready: caches synced and leadership known (we lead, or we know who does), not stopping, and, when it serves the
   * webhooks, able to answer them: its certificate loaded and signed by the CA the configurations carry (a replica
   * the apiserver cannot trust must not get the Service's traffic).
   */
  get ready(): boolean {
    return !this.notReady();
  }

  /** Why this replica is not ready, or undefined when it is. */
  private notReady(): string | undefined {
    if (this.stopping) return "stopping";
    if (!this.caches.synced) return `caches not synced: ${this.caches.unsynced().join(", ")}`;
    if (!(this.elector ? this.elector.known : this.running)) return "leadership not known yet";
    if (this.webhooks) {
      if (!this.webhooks.address) return "the admission webhooks are not served yet";
      const why = this.webhooks.tls.unanswerable;
      if (why) return `the admission webhooks cannot be answered: ${why}`;
    }
    return undefined;
  }

  /** The leader epoch (0 without leader election). */
  get epoch(): number {
    return this.elector?.epoch ?? 0;
  }

  get leading(): boolean {
    return this.elector ? this.elector.leading : this.running;
  }

  async start(): Promise<void> {
    this.stalls.start();
    // Served before the caches sync: until then every exclusive claim counts as guarded (fail closed).
    await this.webhooks?.start();
    if (this.cfg.healthBindAddress)
      this.servers.push(await serve(this.log, "health", this.cfg.healthBindAddress, (p) => this.healthEndpoint(p)));
    if (this.cfg.metricsBindAddress)
      this.servers.push(await serve(this.log, "metrics", this.cfg.metricsBindAddress, (p) => this.metricsEndpoint(p)));
    // Controllers act on what the caches show: an object missing from a cache that has not synced yet
    // would look deleted. Nothing runs, and leadership is not even sought, before every cache has synced.
    const waiting = setInterval(
      () => this.log.info({ unsynced: this.caches.unsynced() }, `waiting for caches to sync: ${this.caches.unsynced().join(", ")}`),
      10_000,
    );
    waiting.unref();
    await this.caches.start();
    clearInterval(waiting);
    if (this.stopping) return;
    this.log.info({ nodes: this.caches.nodes.list().length, fences: this.caches.fences.list().length }, "caches synced");
    void this.checkAdmission();
    this.admissionTimer = setInterval(() => void this.checkAdmission(), ADMISSION_CHECK_MS);
    this.admissionTimer.unref();
    if (this.elector) this.elector.start();
    else {
      this.probeSight();
      this.runControllers();
    }
  }

  /**
   * Without the admission policy, RBAC alone lets whoever may write nodefences/status forge a fence's evidence
   * (docs/safety.md §2): say so, loudly and once per change, and export it.
   */
  private async checkAdmission(): Promise<void> {
    const problems = await checkAdmissionPolicy(this.kube.kc).catch((err: unknown) => [
      `cannot check the admission policy: ${errorText(err)}`,
    ]);
    this.metrics.admissionPolicy.set(problems.length ? 0 : 1);
    const text = problems.join("; ");
    if (text === this.admissionProblems) return;
    this.admissionProblems = text;
    if (problems.length)
      this.log.error(
        { problems },
        `the admission policy ${ADMISSION_POLICY} is not in force: anyone with update on nodefences/status can forge a fence's evidence and anyone with patch on nodefences can confirm a manual fence (manifests/06-admission-policy.yaml): ${text}`,
      );
    else this.log.info(`the admission policy ${ADMISSION_POLICY} is in force`);
  }

  /**
   * Without leader election nothing reads from etcd every few seconds, and etcd down leaves the watches open and
   * silent: a read of the leader Lease every retry period (a quorum read; 404 is an answer too) stands in for the
   * elector's, so that such an outage is a gap in what this replica saw (kube/sight.ts).
   */
  private probeSight(): void {
    const probe = this.sightProbe;
    if (!probe || this.sightTimer) return;
    let asking = false;
    this.sightTimer = setInterval(() => {
      if (asking) return;
      asking = true;
      probe
        .readNamespacedLease({ name: LEADER_LEASE, namespace: this.cfg.leaderElectionNamespace })
        .then(
          () => this.caches.sight.answered(true),
          (err: unknown) =>
            isNotFound(err) ? this.caches.sight.answered(true) : this.caches.sight.answered(false, `apiserver: ${errorText(err)}`),
        )
        .finally(() => (asking = false));
    }, this.cfg.retryPeriodSeconds * 1000);
    this.sightTimer.unref();
  }

  private runControllers(): void {
    if (this.running || this.stopping) return;
    this.running = true;
    for (const c of this.controllers) c.start();
    this.fleet.queue.add(FLEET_KEY);
    for (const f of this.caches.fences.list()) this.controllers[1]!.queue.add(f.metadata?.name ?? "");
    for (const a of this.caches.agents.list()) this.controllers[2]!.queue.add(a.metadata?.name ?? "");
    for (const k of this.claims.gatedKeys()) this.claimQueue.queue.add(k);
    this.monitor.start();
    // Retention: deletes only records of episodes that ended, and only as the leader (controllers run only then).
    void this.history.sweep();
    this.historyTimer = setInterval(() => void this.history.sweep(), HISTORY_SWEEP_MS);
    this.historyTimer.unref();
    this.log.info({ leaderElection: !!this.elector }, "controllers running");
  }

  /**
   * Stops (SIGTERM): no new work; the reconciles in progress and the background work controllers
   * registered (deps.inflight) may finish within --shutdown-grace-seconds while the Lease is still
   * renewed; then the Lease is released. Work still running after the grace period keeps the Lease from
   * being released (it expires on its own once the process has exited). Resolves whether all work finished.
   */
  stop(): Promise<boolean> {
    this.stopping ??= this.shutDown();
    return this.stopping;
  }

  private async shutDown(): Promise<boolean> {
    clearInterval(this.admissionTimer);
    clearInterval(this.historyTimer);
    clearInterval(this.sightTimer);
    this.stalls.stop();
    this.webhooks?.stop();
    const graceMs = this.cfg.shutdownGraceSeconds * 1000;
    const busy = this.inflight.size;
    this.log.info(
      { graceSeconds: this.cfg.shutdownGraceSeconds, backgroundWork: busy },
      "stopping: taking no new work, finishing the work in flight",
    );
    // Status queries are cancelled, not waited for: they record nothing and fence nothing.
    const work = Promise.all([...this.controllers.map((c) => c.stop()), this.inflight.drain(), this.monitor.stop()]).then(() => true);
    let timer: NodeJS.Timeout | undefined;
    const drained = await Promise.race([work, new Promise<false>((r) => (timer = setTimeout(() => r(false), graceMs)))]);
    clearTimeout(timer);
    if (this.elector) {
      if (drained) await this.elector.release();
      else {
        this.log.warn(
          { graceSeconds: this.cfg.shutdownGraceSeconds, backgroundWork: this.inflight.size },
          `work still in flight after ${this.cfg.shutdownGraceSeconds} s: exiting without releasing the leader Lease (it expires ${this.cfg.leaseDurationSeconds} s after the last renewal)`,
        );
        await this.elector.abandon();
      }
    }
    this.sole?.stop();
    this.caches.stop();
    await Promise.all([...this.servers.map((s) => new Promise<void>((r) => s.close(() => r()))), this.webhooks?.close()]);
    return drained;
  }

  /** Where the admission webhooks listen (port 0 resolved), once started. */
  get webhookListenAddress(): string | undefined {
    return this.webhooks?.address;
  }

  /** Where the health (index 0) and metrics (index 1) endpoints listen, port 0 resolved. */
  addresses(): string[] {
    return this.servers.map(listenAddress);
  }

  private async healthEndpoint(path: string): Promise<Reply> {
    if (path === "/healthz") return [200, "text/plain", "ok\n"];
    if (path === "/readyz") {
      const why = this.notReady();
      return why ? [503, "text/plain", `${why}\n`] : [200, "text/plain", "ok\n"];
    }
    return [404, "text/plain", "not found\n"];
  }

  private async metricsEndpoint(path: string): Promise<Reply> {
    if (path !== "/metrics") return [404, "text/plain", "not found\n"];
    this.refreshGauges();
    return [200, this.metrics.registry.contentType, await this.metrics.registry.metrics()];
  }

  /** State gauges from what the caches show now. */
  private refreshGauges(): void {
    const m = this.metrics;
    m.leader.set(this.leading ? 1 : 0);
    m.heartbeatsVisible.set(this.caches.sight.seeing ? 1 : 0);
    m.watchRestarts.set(this.caches.restarts());
    this.monitor.refreshGauges();
    const expiry = this.webhooks?.tls.expiry ?? {};
    for (const certificate of ["ca", "serving"] as const) {
      const at = expiry[certificate];
      if (at === undefined) m.webhookCertificateExpiry.remove({ certificate });
      else m.webhookCertificateExpiry.set({ certificate }, at / 1000);
    }
    if (!this.caches.synced) return;
    m.nodeFences.reset();
    m.nodeFenceOldest.reset();
    for (const [phase, p] of nodeFencePhases(this.caches.fences.list(), Date.now())) {
      m.nodeFences.set({ phase }, p.count);
      m.nodeFenceOldest.set({ phase }, p.oldestSeconds);
    }
    const d = this.health.decide();
    const partitioned = new Set(d.decisions.filter((x) => x.health.state === "Partitioned").map((x) => x.node));
    m.partitioned.set(partitioned.size);
    const pvcs = this.caches.pvcsByKey();
    m.guardedPods.set([...partitioned].flatMap((n) => this.caches.podsOn(n)).filter((p) => isGuarded(p, undefined, pvcs).guarded).length);
    m.guardedPodsOnMissingNodes.reset();
    for (const w of guardedPodsOnMissingNodes({
      podNodes: this.caches.podNodeNames(),
      nodeExists: (n) => this.caches.nodes.get(n) !== undefined,
      podsOn: (n) => this.caches.podsOn(n),
      policies: this.caches.policies.list(),
      pvcs,
      fence: (n) => this.caches.fences.get(n),
      remembered: (n) => this.caches.lastSeenNodes.get(n) !== undefined,
    }))
      m.guardedPodsOnMissingNodes.set({ node: w.node, remembered: String(w.remembered) }, w.pods);
    m.stormGuard.reset();
    for (const [policy, s] of d.policies) for (const h of s.holds) m.stormGuard.set({ policy, reason: h.reason }, 1);
  }
}
