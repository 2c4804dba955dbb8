// The fleet decision with a memo (decide/fleet-memo.ts) is the decision without one: random sequences of changes
// (nodes going silent and coming back, the node controller marking them Unknown, Leases of other durations, labels
// moving nodes between policies, condition triggers, pods moving and carrying NodeDown, fences made and finished,
// policies changed, and the clock advancing, by fractions of a second or by minutes, and set back) decided after
// every step both ways, with one memo kept across the steps: the two decisions are deep-equal every time.
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import type { V1Lease, V1Node, V1Pod } from "@kubernetes/client-node";
import type { DateTime } from "luxon";
import type { FencingPolicy, NodeFence } from "../../src/api/v1alpha1.ts";
import { decideFleet, podsByNode, type FleetDecision, type FleetInput } from "../../src/decide/fleet.ts";
import { FleetMemo } from "../../src/decide/fleet-memo.ts";
import { NODE_DOWN } from "../../src/decide/node-down.ts";
import type { Sighting } from "../../src/decide/node-conditions.ts";
import { T0, fence, lease, node, pod, policy, stsPod } from "./decide-fixtures.ts";
// A failing seed can be run again: the chaos schedules' generator (mulberry32).
import { prng as random } from "../../lab/chaos/schedule.ts";

const ZONE = "topology.kubernetes.io/zone";

interface SimNode {
  name: string;
  alive: boolean;
  ready: "True" | "False" | "Unknown" | null;
  beat: DateTime | undefined;
  duration: number;
  zone: string;
  role: string;
  condition: boolean;
  node: V1Node;
  lease: V1Lease | undefined;
  /** When (monotonic ms) the operator saw the Lease's renewTime. */
  seenAt: number;
}

class World {
  readonly r: () => number;
  now: DateTime = T0.plus({ seconds: 100 });
  mono = 100_000;
  readonly nodes: SimNode[] = [];
  pods: V1Pod[] = [];
  policies: FencingPolicy[] = [];
  fences = new Map<string, NodeFence>();
  private version = 0;

  constructor(seed: number, n: number) {
    this.r = random(seed);
    for (let k = 0; k < n; k++) {
      const s: SimNode = {
        name: `node-${k}`,
        alive: true,
        ready: "True",
        beat: this.now.minus({ seconds: this.pick([0, 3, 9]) }),
        duration: this.pick([40, 40, 40, 10, 0]),
        zone: `z${k % 3}`,
        role: k % 4 === 0 ? "db" : "web",
        condition: false,
        node: undefined as never,
        lease: undefined,
        seenAt: this.mono,
      };
      this.nodes.push(s);
      this.remake(s);
      for (let p = 0; p < 3; p++) this.pods.push(this.newPod(s.name));
    }
    this.policies = [this.newPolicy("default", {})];
  }

  pick<T>(xs: readonly T[]): T {
    return xs[Math.floor(this.r() * xs.length)]!;
  }

  /** New Node and Lease objects for the node, as the caches hold them after an update (never changed in place). */
  remake(s: SimNode, renewed = true): void {
    const n = node(s.name, { ready: s.ready, heartbeat: s.beat, labels: { [ZONE]: s.zone, role: s.role } });
    if (s.condition) n.status!.conditions!.push({ type: "DiskPressure", status: "True", reason: "NPD", lastTransitionTime: T0.toJSDate() });
    n.metadata!.resourceVersion = String(++this.version);
    s.node = n;
    if (renewed) {
      s.lease = s.duration ? lease(s.name, s.beat, s.duration) : undefined;
      s.seenAt = this.mono;
    }
  }

  newPod(nodeName: string): V1Pod {
    const name = `p${++this.version}`;
    const guarded = this.r() < 0.5;
    const marked = this.r() < 0.1;
    const conditions = marked ? [{ type: NODE_DOWN, status: "True", reason: "NodePartitioned", message: "x" }] : undefined;
    return guarded ? stsPod(name, { node: nodeName, conditions }) : pod(name, { node: nodeName, conditions });
  }

  newPolicy(name: string, o: { db?: boolean; triggers?: boolean; wait?: boolean; timeout?: number; max?: number }): FencingPolicy {
    const p = policy(name, {
      ...(o.db ? { nodeSelector: { matchLabels: { role: "db" } } } : {}),
      detection: {
        heartbeatTimeoutSeconds: o.timeout ?? 40,
        fenceAfterSeconds: this.pick([0, 10, 60]),
        ...(o.wait ? { waitForNodeController: true } : {}),
      },
      guards: { maxConcurrentFences: this.pick([1, 3]), maxUnhealthyNodes: o.max ?? (this.pick(["50%", "90%"]) as never) },
      ...(o.triggers ? { triggers: { nodeConditions: [{ type: "DiskPressure", status: "True", forSeconds: 20 }] } } : {}),
    } as never);
    p.metadata!.generation = ++this.version;
    return p;
  }

  /** One random change. */
  step(): string {
    const s = this.pick(this.nodes);
    const x = this.r();
    if (x < 0.3) {
      // Time passes (mostly a little), and every live node renews when its renewal is due.
      const dt = this.pick([0.2, 0.5, 1, 3, 5, 10, 25, 45]) * (0.5 + this.r());
      this.now = this.now.plus({ milliseconds: dt * 1000 });
      this.mono += dt * 1000;
      for (const n of this.nodes)
        if (n.alive && (n.beat === undefined || this.now.diff(n.beat).as("seconds") >= (n.duration || 40) / 4)) {
          n.beat = this.now;
          if (n.ready !== "True" && this.r() < 0.7) n.ready = "True";
          this.remake(n);
        }
      return `time +${dt.toFixed(2)} s`;
    }
    if (x < 0.34) {
      // The operator's wall clock set back (the monotonic clock goes on).
      this.now = this.now.minus({ seconds: this.pick([1, 15, 60]) });
      return "clock set back";
    }
    if (x < 0.45) {
      s.alive = !s.alive;
      return `${s.name} ${s.alive ? "back" : "silent"}`;
    }
    if (x < 0.52) {
      // The node controller marks silent nodes Unknown (a Node update, no renewal).
      for (const n of this.nodes)
        if (!n.alive && n.ready !== "Unknown" && n.beat && this.now.diff(n.beat).as("seconds") > 40) {
          n.ready = "Unknown";
          this.remake(n, false);
        }
      return "node controller";
    }
    if (x < 0.57) {
      s.ready = this.pick(["True", "False", null]);
      this.remake(s, false);
      return `${s.name} Ready=${s.ready}`;
    }
    if (x < 0.62) {
      s.role = s.role === "db" ? "web" : "db";
      s.zone = this.pick(["z0", "z1", "z2"]);
      this.remake(s, false);
      return `${s.name} relabelled`;
    }
    if (x < 0.67) {
      s.condition = !s.condition;
      this.remake(s, false);
      return `${s.name} DiskPressure ${s.condition}`;
    }
    if (x < 0.7) {
      s.duration = this.pick([40, 10, 0]);
      s.beat = s.alive ? this.now : s.beat;
      this.remake(s);
      return `${s.name} Lease duration ${s.duration}`;
    }
    if (x < 0.8) {
      const k = Math.floor(this.r() * this.pods.length);
      const y = this.r();
      if (y < 0.4) this.pods[k] = { ...this.pods[k]!, spec: { ...this.pods[k]!.spec!, nodeName: this.pick(this.nodes).name } };
      else if (y < 0.7) this.pods[k] = this.newPod(this.pick(this.nodes).name);
      else this.pods.push(this.newPod(s.name));
      return "pods changed";
    }
    if (x < 0.9) {
      const have = this.fences.get(s.name);
      const phase = this.pick(["", "Pending", "Fencing", "Fenced", "Unfenced", "Failed", undefined]);
      if (phase === undefined || (have && this.r() < 0.3)) this.fences.delete(s.name);
      else this.fences.set(s.name, fence(s.name, { phase: phase as never, policy: "default" }));
      return `${s.name} fence ${phase}`;
    }
    if (this.r() < 0.5) {
      // A status write (the pass's own, on every pass of a burst): the spec is the same, the storm guard may turn.
      this.policies = this.policies.map((p) => ({
        ...p,
        metadata: { ...p.metadata, resourceVersion: String(++this.version) },
        status: {
          conditions: [
            {
              type: "StormGuard",
              status: this.pick(["True", "False"]),
              reason: "x",
              message: "",
              lastTransitionTime: this.now.minus({ seconds: this.pick([1, 30, 300]) }).toISO()!,
            },
          ],
        },
      })) as FencingPolicy[];
      return "policy status written";
    }
    const variants = [
      () => [this.newPolicy("default", {})],
      () => [this.newPolicy("default", { triggers: true })],
      () => [this.newPolicy("a-db", { db: true, wait: true }), this.newPolicy("default", { timeout: 10 })],
      () => [this.newPolicy("default", { max: 1 })],
      () => [],
    ];
    this.policies = this.pick(variants)();
    return "policies changed";
  }

  input(sightings: Map<string, Sighting>): FleetInput {
    const byNode = new Map(this.nodes.map((n) => [n.name, n] as const));
    return {
      now: this.now,
      mono: this.mono,
      sightings,
      nodes: this.nodes.map((n) => n.node),
      leases: { get: (name) => byNode.get(name)?.lease },
      leaseSilentMs: (name) => this.mono - (byNode.get(name)?.seenAt ?? this.mono),
      pods: podsByNode(this.pods),
      pvcs: new Map(),
      pdbs: [],
      policies: this.policies,
      fences: this.fences,
      watchStalenessSeconds: 0,
    };
  }
}

describe("the fleet decision with a memo", () => {
  test("decides exactly as without one, after every step of random sequences of changes", () => {
    let reused = 0;
    let recomputed = 0;
    for (let seed = 1; seed <= 60; seed++) {
      const w = new World(seed, 4 + (seed % 9));
      const memo = new FleetMemo();
      let sightingsFull = new Map<string, Sighting>();
      let sightingsMemo = new Map<string, Sighting>();
      let last: FleetDecision | undefined;
      const steps: string[] = [];
      for (let k = 0; k < 120; k++) {
        steps.push(w.step());
        const full = decideFleet(w.input(sightingsFull));
        const incremental = decideFleet({ ...w.input(sightingsMemo), memo });
        assert.deepStrictEqual(incremental, full, `seed ${seed}, after: ${steps.slice(-6).join("; ")}`);
        sightingsFull = full.sightings;
        sightingsMemo = incremental.sightings;
        const before = new Set(last?.decisions);
        for (const d of incremental.decisions) if (before.has(d)) reused++;
        recomputed += full.decisions.length;
        last = incremental;
      }
    }
    // The memo is used: without reuse this test would compare a full pass with itself.
    assert.ok(reused > recomputed / 4, `decisions reused ${reused} of ${recomputed}`);
  });

  test("a node whose Lease stops being renewed, with no event at all, turns silent and partitioned on time", () => {
    const memo = new FleetMemo();
    const w = new World(7, 3);
    w.policies = [w.newPolicy("default", { timeout: 40 })];
    const silent = w.nodes[0]!;
    silent.duration = 40;
    silent.beat = w.now;
    w.remake(silent);
    silent.alive = false;
    const decided = () => {
      const d = decideFleet({ ...w.input(new Map()), memo });
      assert.deepStrictEqual(d, decideFleet(w.input(new Map())));
      return d.decisions.find((x) => x.node === silent.name)!;
    };
    const h0 = decided().health;
    assert.equal(h0.state, "Healthy");
    // Nothing about the node changes from here on: only the clocks move, to the deadline the pass asked to be woken at.
    let wakeAt = decideFleet({ ...w.input(new Map()), memo }).nextCheck!;
    for (let guard = 0; guard < 20 && decided().health.state !== "Partitioned"; guard++) {
      const dt = wakeAt.diff(w.now).as("milliseconds") + 1;
      w.now = w.now.plus({ milliseconds: dt });
      w.mono += dt;
      for (const n of w.nodes.slice(1)) {
        n.beat = w.now;
        w.remake(n);
      }
      const d = decideFleet({ ...w.input(new Map()), memo });
      wakeAt = d.nextCheck ?? w.now.plus({ seconds: 5 });
    }
    const h = decided().health;
    assert.equal(h.state, "Partitioned");
    assert.equal(h.partitionedBy, "Lease");
    assert.ok(w.now.diff(silent.beat!).as("seconds") < 41 + 1, "partitioned at its Lease's expiry, not later");
  });
});
