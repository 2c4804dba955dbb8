// The node agent's loop (issue 30): every c seconds a fresh read of the NodeFence named after its node; after N
// failed reads in a row, a signed question to every known peer. Each outcome goes through the isolation decision
// (decide/isolation.ts, through ./isolation.ts) which says until when the watchdog may be fed; the feeder runs on
// its own timer and asks that at every write. The record is renewed after each successful check, beside the loop (a
// hung renewal must not delay the next check); a failed renewal never stops feeding.
import { writeFileSync } from "node:fs";
import { createServer, type Server } from "node:http";
import type { KubeConfig } from "@kubernetes/client-node";
import type { Logger } from "pino";
import { Counter, Gauge, Registry } from "prom-client";
import { unreachableForSeconds, type OwnCheck } from "../decide/isolation.ts";
import type { NodeAgentRecord } from "../decide/node-agent-record.ts";
import { errorMessage } from "../kube/api.ts";
import type { NodeAgentConfig } from "./config.ts";
import { Isolation } from "./isolation.ts";
import { askPeers, PeerServer } from "./peers.ts";
import { generateKeyPair, type KeyPair, type PeerAnswer } from "./protocol.ts";
import { RecordClient, type RecordFields } from "./record.ts";
import { Feeder, feedPeriodMs, Watchdog } from "./watchdog.ts";

const mono = () => performance.now();

class AgentMetrics {
  readonly registry = new Registry();
  readonly checks = new Counter({
    name: "stockade_node_agent_checks_total",
    help: "Own API checks, by result",
    labelNames: ["result"],
    registers: [this.registry],
  });
  readonly peerIn = new Counter({
    name: "stockade_node_agent_peer_requests_in_total",
    help: "Peer requests answered",
    registers: [this.registry],
  });
  readonly peerOut = new Counter({
    name: "stockade_node_agent_peer_requests_out_total",
    help: "Peer questions sent, by result",
    labelNames: ["result"],
    registers: [this.registry],
  });
  readonly refused = new Counter({
    name: "stockade_node_agent_refused_requests_total",
    help: "Peer requests refused, by reason",
    labelNames: ["reason"],
    registers: [this.registry],
  });
  readonly fed = new Counter({
    name: "stockade_node_agent_watchdog_feeds_total",
    help: "Writes that fed the watchdog",
    registers: [this.registry],
  });
  readonly state = new Gauge({
    name: "stockade_node_agent_state",
    help: "1 for the agent's current state",
    labelNames: ["state"],
    registers: [this.registry],
  });
}

export type AgentState = "unarmed" | "confirmed" | "unconfirmed" | "fence-seen";

export class Agent {
  readonly #cfg: NodeAgentConfig;
  readonly #log: Logger;
  readonly #records: RecordClient;
  /** For peers' questions: a deadline shorter than the asker's peer timeout, so a slow API ends as "unreachable", not silence. */
  readonly #peerReads: RecordClient;
  readonly #keys: KeyPair = generateKeyPair();
  readonly metrics = new AgentMetrics();
  readonly #isolation: Isolation;
  #peers = new Map<string, NodeAgentRecord>();
  #lastSuccessStart: number | undefined;
  /** When our record's last renewal was acknowledged (our monotonic clock). */
  #lastRenewed: number | undefined;
  #watchdog: Watchdog | undefined;
  #timeoutSeconds = 0;
  #armProblem: string | undefined;
  #feeder: Feeder | undefined;
  #timer: NodeJS.Timeout | undefined;
  /** The renewal under way, if any: at most one, and the check loop never waits for it. */
  #renewal: Promise<void> | undefined;
  #server: PeerServer;
  #health: Server | undefined;
  #stopped = false;

  constructor(kc: KubeConfig, cfg: NodeAgentConfig, log: Logger) {
    this.#cfg = cfg;
    this.#log = log;
    this.#isolation = new Isolation({
      checkIntervalSeconds: cfg.checkIntervalSeconds,
      failedChecksBeforePeers: cfg.failedChecksBeforePeers,
      deadlineSeconds: cfg.deadlineSeconds,
      controlPlaneDownSeconds: cfg.controlPlaneDownSeconds,
    });
    this.#records = new RecordClient(kc, {
      node: cfg.nodeName,
      holder: cfg.podName,
      namespace: cfg.namespace,
      requestTimeoutMs: cfg.apiRequestTimeoutMs,
    });
    this.#peerReads = new RecordClient(kc, {
      node: cfg.nodeName,
      holder: cfg.podName,
      namespace: cfg.namespace,
      requestTimeoutMs: Math.max(250, Math.min(cfg.apiRequestTimeoutMs, cfg.peerTimeoutSeconds * 1000 - 500)),
    });
    this.#server = new PeerServer({
      node: cfg.nodeName,
      privateKey: this.#keys.privateKey,
      peerKey: (n) => this.#peers.get(n)?.publicKey,
      freshCheck: (about) => this.#peerReads.nodeFence(about).catch(() => "unreachable" as const),
      unreachableForSeconds: () => unreachableForSeconds(this.#lastSuccessStart, this.#lastRenewed, mono()),
      minUnreachableSeconds: cfg.controlPlaneDownSeconds,
      log,
      onRefused: (reason) => this.metrics.refused.inc({ reason }),
      onAnswered: () => this.metrics.peerIn.inc(),
    });
  }

  /** Every call into the isolation decision goes through here: the own check's outcome, or one peer round. */
  #apply(own: OwnCheck, round?: { startedMs: number; answers: PeerAnswer[] }): boolean {
    const d = this.#isolation.decide(mono(), [...this.#peers.keys()], own, round);
    if (d.fenceNow !== undefined) this.#onFence(d.fenceNow);
    this.#log.debug({ reason: d.reason, feedUntilMs: d.feedUntilMs }, d.message);
    this.#publishState();
    return d.askPeers;
  }

  mayFeed(now = mono()): boolean {
    return this.#isolation.mayFeed(now);
  }

  /** Healthy: SIGTERM now disarms (decide/isolation.ts shutdownAction); otherwise it leaves the watchdog armed. */
  get healthy(): boolean {
    return this.#isolation.shutdown(mono()) === "disarm";
  }

  get stateName(): AgentState {
    if (this.#isolation.fenced) return "fence-seen";
    if (!this.#watchdog) return "unarmed";
    return this.mayFeed() ? "confirmed" : "unconfirmed";
  }

  #publishState(): void {
    for (const s of ["unarmed", "confirmed", "unconfirmed", "fence-seen"])
      this.metrics.state.set({ state: s }, s === this.stateName ? 1 : 0);
  }

  #onFence(why: string): void {
    this.#log.error({ node: this.#cfg.nodeName, why }, "a NodeFence for this node exists: the watchdog is no longer fed");
    if (!this.#cfg.sysrqReboot) return;
    try {
      writeFileSync("/proc/sysrq-trigger", "b");
    } catch (err) {
      this.#log.error({ err: (err as Error).message }, "sysrq reboot failed; the watchdog resets the machine");
    }
  }

  async start(): Promise<void> {
    const port = await this.#server.listen(this.#cfg.peerPort);
    this.#log.info({ port }, "peer server listening");
    await this.#startHealth();
    await this.checkOnce();
    await this.#renewal; // the first record is written before start() returns
    this.#schedule();
  }

  #schedule(): void {
    if (this.#stopped) return;
    this.#timer = setTimeout(() => {
      this.checkOnce()
        .catch((err: unknown) => {
          this.#log.error({ err: errorMessage(err) }, "check failed unexpectedly (feeding goes on until the deadline)");
          this.#apply({ kind: "error", message: errorMessage(err) });
        })
        .finally(() => this.#schedule());
    }, this.#cfg.checkIntervalSeconds * 1000);
  }

  /** One check: own API read; then (success) renew + membership, or (N failures) the peers. */
  async checkOnce(): Promise<void> {
    const startedMono = mono();
    let seen: "fence" | "absent";
    try {
      seen = await this.#records.nodeFence(this.#cfg.nodeName);
    } catch (err) {
      this.metrics.checks.inc({ result: "failed" });
      this.#log.warn({ err: errorMessage(err) }, "cannot read this node's NodeFence");
      if (this.#apply({ kind: "failed", startedMs: startedMono })) await this.#askPeers();
      return;
    }
    this.metrics.checks.inc({ result: seen });
    this.#lastSuccessStart = startedMono;
    this.#apply({ kind: "ok", startedMs: startedMono, nodeFence: seen });
    if (seen === "absent" && !this.#watchdog && this.#armProblem === undefined) this.#arm();
    // Not awaited: a renewal hung until its deadline would otherwise push the next check back by up to two request
    // deadlines; one still under way is not doubled (the next success renews again).
    if (!this.#stopped) this.#renewal ??= this.#renewAndList().finally(() => (this.#renewal = undefined));
  }

  async #askPeers(): Promise<void> {
    const peers = [...this.#peers.values()].map((r) => ({ node: r.node, address: r.peerAddress, publicKey: r.publicKey }));
    // The round's start, taken before any request is sent: every answer's fresh read happened after it.
    const startedMs = mono();
    const r = await askPeers(this.#cfg.nodeName, this.#keys.privateKey, peers, this.#cfg.peerTimeoutSeconds * 1000);
    this.metrics.peerOut.inc({ result: "answered" }, r.answers.length);
    this.metrics.peerOut.inc({ result: "dropped" }, r.dropped.length);
    for (const d of r.dropped) this.#log.info(d, "peer answer dropped");
    this.#apply({ kind: "none" }, { startedMs, answers: r.answers });
  }

  #fields(armed: boolean): RecordFields {
    return {
      armed,
      watchdogTimeoutSeconds: this.#timeoutSeconds,
      deadlineSeconds: this.#cfg.deadlineSeconds,
      controlPlaneDownSeconds: this.#cfg.controlPlaneDownSeconds,
      publicKey: this.#keys.publicKeyBase64,
      peerAddress: `${this.#cfg.podIP.includes(":") ? `[${this.#cfg.podIP}]` : this.#cfg.podIP}:${this.#cfg.peerPort}`,
    };
  }

  async #recordDisarmed(): Promise<boolean> {
    try {
      await this.#records.renew(this.#fields(false));
      return true;
    } catch (err) {
      this.#log.error({ err: errorMessage(err) }, "cannot record armed=false before disarming: the watchdog is left armed");
      return false;
    }
  }

  async #renewAndList(): Promise<void> {
    try {
      await this.#records.renew(this.#fields(this.#watchdog !== undefined));
      this.#lastRenewed = mono();
    } catch (err) {
      this.#log.warn({ err: errorMessage(err) }, "cannot renew this node's record (feeding is not affected)");
    }
    try {
      const { records, problems } = await this.#records.others();
      this.#peers = new Map(records.map((r) => [r.node, r]));
      for (const p of problems) this.#log.debug({ problem: p }, "unusable peer record");
    } catch (err) {
      this.#log.warn({ err: errorMessage(err) }, "cannot list the other agents' records (membership unchanged)");
    }
  }

  /** Arms only after a first confirmation: an agent that never reached the API never resets its machine. */
  #arm(): void {
    const opened = Watchdog.open(this.#cfg.watchdogDevice, this.#cfg.watchdogTimeoutFile);
    if (!opened.armed) {
      this.#armProblem = opened.problem;
      this.#log.error(
        { problem: opened.problem },
        "watchdog NOT armed: this node can be fenced only by other means (record says armed=false)",
      );
      return;
    }
    this.#watchdog = opened.watchdog;
    this.#timeoutSeconds = opened.timeoutSeconds;
    this.#feeder = new Feeder(
      { feed: () => (opened.watchdog.feed(), this.metrics.fed.inc()) },
      (now) => this.mayFeed(now),
      mono,
      (err) => this.#log.error({ err: (err as Error).message }, "watchdog write failed"),
    );
    this.#feeder.start(feedPeriodMs(opened.timeoutSeconds, this.#cfg.checkIntervalSeconds));
    this.#log.info({ device: this.#cfg.watchdogDevice, timeoutSeconds: opened.timeoutSeconds }, "watchdog armed");
  }

  async #startHealth(): Promise<void> {
    const { host, port } = this.#cfg.healthBindAddress;
    this.#health = createServer((req, res) => {
      if (req.url === "/healthz") res.writeHead(200).end(`ok ${this.stateName}\n`);
      else if (req.url === "/metrics")
        void this.metrics.registry.metrics().then((m) => res.writeHead(200, { "content-type": this.metrics.registry.contentType }).end(m));
      else res.writeHead(404).end();
    });
    await new Promise<void>((resolve) => this.#health!.listen(port, host, resolve));
  }

  /**
   * SIGTERM (design rule 5): healthy → magic close (disarmed); otherwise close without "V" (the watchdog fires).
   * A disarm needs the record to say armed=false first, acknowledged by the API: a record left saying "armed" over a
   * disarmed watchdog would let the operator count a reset that never comes. No acknowledgement → left armed.
   */
  async stop(): Promise<"disarmed" | "left-armed" | "unarmed"> {
    this.#stopped = true;
    if (this.#timer) clearTimeout(this.#timer);
    await this.#renewal; // an armed=true renewal under way must not land after the armed=false one
    let outcome: "disarmed" | "left-armed" | "unarmed" = "unarmed";
    if (this.#watchdog) {
      // The feeder runs on (within D only) while the record is written.
      const recorded = this.healthy && (await this.#recordDisarmed());
      this.#feeder?.stop();
      if (recorded && this.healthy) {
        this.#watchdog.disarm();
        outcome = "disarmed";
      } else {
        this.#watchdog.closeArmed();
        outcome = "left-armed";
      }
    }
    await this.#server.close();
    this.#health?.closeAllConnections();
    this.#health?.close();
    return outcome;
  }
}
