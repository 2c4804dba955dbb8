// The claim-lock controller against a scripted API: a competing grant that lands between its reads must never
// leave two holders. The world changes right after the controller lists the namespace's pods: had it read the
// claim after that list (as it once did), the new holder would be missing from its list and taken for gone.
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import type { V1PersistentVolumeClaim, V1Pod } from "@kubernetes/client-node";
import { ApiException } from "@kubernetes/client-node";
import { DateTime } from "luxon";
import { ClaimLockController } from "../../src/controllers/claim-lock.ts";
import { CLAIM_GATE, LOCK_ANNOTATION, formatLock, parseLock } from "../../src/decide/claim-lock.ts";
import { SOLE_LEADER } from "../../src/runtime/leader.ts";
import type { FencingPolicy, NodeFence } from "../../src/api/v1alpha1.ts";
import { fence as mkFence, pod as mkPod, policy as mkPolicy, pvc as mkPvc } from "./decide-fixtures.ts";

function gatedPod(name: string, uid: string): V1Pod {
  const p = mkPod(name, { claims: ["data"], uid });
  delete p.spec!.nodeName;
  p.spec!.schedulingGates = [{ name: CLAIM_GATE }];
  p.status = { phase: "Pending" };
  p.metadata!.resourceVersion = "1";
  return p;
}

/** A tiny API: pods and one claim, resourceVersions, and a hook run once right after a pod list. */
function world() {
  const pods = new Map<string, V1Pod>();
  let claim: V1PersistentVolumeClaim = {
    ...mkPvc("data", ["ReadWriteOnce"]),
    // Opted in: guarded whatever the live policy's readWriteOnceVolumes says.
    metadata: { name: "data", namespace: "default", resourceVersion: "10", annotations: { "stockade.io/claim-guard": "true" } },
  };
  /** What the controller's cache shows of the claim (by default, the claim as it is now). */
  let cached: (() => V1PersistentVolumeClaim) | undefined;
  let rv = 10;
  let hook: (() => void) | undefined;
  const afterList = () => {
    const h = hook;
    hook = undefined;
    h?.();
  };
  const clone = <T>(x: T): T => structuredClone(x);
  const conflict = () => new ApiException(409, "Conflict", { message: "the object has been modified" }, {});
  const kube = {
    core: {
      readNamespacedPod: async ({ name }: { name: string }) => {
        const p = pods.get(name);
        if (!p) throw new ApiException(404, "NotFound", {}, {});
        return clone(p);
      },
      readNamespacedPersistentVolumeClaim: async () => {
        return clone(claim);
      },
    },
    listPodsFresh: async () => {
      const items = [...pods.values()].map(clone);
      afterList();
      return items;
    },
    getNodeFence: async () => undefined,
    readNode: async () => undefined,
    readLease: async () => undefined,
    casAnnotateClaim: async (c: V1PersistentVolumeClaim, annotations: Record<string, string>) => {
      if (c.metadata?.resourceVersion !== claim.metadata?.resourceVersion) throw conflict();
      claim = {
        ...claim,
        metadata: { ...claim.metadata, resourceVersion: String(++rv), annotations: { ...claim.metadata?.annotations, ...annotations } },
      };
      return clone(claim);
    },
    casPatchPod: async (p: V1Pod, annotations: Record<string, string>, schedulingGates: { name: string }[]) => {
      const cur = pods.get(p.metadata!.name!)!;
      if (p.metadata?.resourceVersion !== cur.metadata?.resourceVersion) throw conflict();
      pods.set(p.metadata!.name!, {
        ...cur,
        metadata: { ...cur.metadata, resourceVersion: String(++rv), annotations: { ...cur.metadata?.annotations, ...annotations } },
        spec: { ...cur.spec!, schedulingGates },
      });
      return clone(pods.get(p.metadata!.name!)!);
    },
  };
  return {
    pods,
    kube,
    claim: () => claim,
    cachedClaim: () => clone(cached ? cached() : claim),
    setCachedClaim: (c: () => V1PersistentVolumeClaim) => (cached = c),
    annotateClaim: (a: Record<string, string>) =>
      (claim = { ...claim, metadata: { ...claim.metadata, annotations: { ...claim.metadata?.annotations, ...a } } }),
    onList: (h: () => void) => (hook = h),
    /** Another worker's whole grant of the claim to pod p (created gated just before). */
    grantTo: (p: V1Pod) => {
      pods.set(p.metadata!.name!, p);
      claim = {
        ...claim,
        metadata: {
          ...claim.metadata,
          resourceVersion: String(++rv),
          annotations: {
            ...claim.metadata?.annotations,
            [LOCK_ANNOTATION]: formatLock({
              v: 1,
              token: 1,
              holder: { pod: p.metadata!.name!, uid: p.metadata!.uid! },
              time: "2026-01-01T00:00:00Z",
            }),
          },
        },
      };
    },
  };
}

/** The live FencingPolicy whose scope (every namespace) has the world's pods: the claim lock is kept for them. */
const LIVE = [mkPolicy("default")];

function controller(w: ReturnType<typeof world>, policies = LIVE) {
  const silent = { info() {}, warn() {}, error() {}, debug() {} };
  const caches = {
    pods: { get: (name: string) => w.pods.get(name), on() {}, list: () => [...w.pods.values()] },
    policies: { list: () => policies },
    pvcs: { on() {}, get: () => w.cachedClaim() },
    fences: { on() {} },
  };
  return new ClaimLockController({
    kube: w.kube as never,
    caches: caches as never,
    events: { record: async () => {} } as never,
    log: silent as never,
    clock: () => DateTime.now(),
    leadership: SOLE_LEADER,
  });
}

test("a competing grant between the controller's reads never makes two holders", async () => {
  const w = world();
  const me = gatedPod("app-a", "uid-a");
  w.pods.set("app-a", me);
  // Right after the pod list, another pod is created and granted the claim by someone else.
  w.onList(() => w.grantTo(gatedPod("app-b", "uid-b")));
  await controller(w)
    .reconcile("default/app-a")
    .catch((e: unknown) => assert.equal((e as ApiException<unknown>).code, 409, String(e)));
  const lock = parseLock(w.claim());
  assert.ok(lock.ok);
  assert.equal(lock.lock?.holder?.pod, "app-b", "the other pod's grant stands");
  assert.ok(
    (w.pods.get("app-a")!.spec!.schedulingGates ?? []).some((g) => g.name === CLAIM_GATE),
    "app-a is still gated",
  );
});

test("uncontended: the gated pod is granted token 1 and its gate lifted with the token", async () => {
  const w = world();
  w.pods.set("app-a", gatedPod("app-a", "uid-a"));
  await controller(w).reconcile("default/app-a");
  const lock = parseLock(w.claim());
  assert.ok(lock.ok);
  assert.deepEqual(lock.lock?.holder, { pod: "app-a", uid: "uid-a" });
  const a = w.pods.get("app-a")!;
  assert.deepEqual(a.spec?.schedulingGates, []);
  assert.equal(a.metadata?.annotations?.["stockade.io/claim-token"], "1");
});

test("out of every live policy's scope (none, a dry run, claimLock: false, another namespace): the gate comes off with no grant", async () => {
  for (const policies of [
    [],
    [mkPolicy("default", { dryRun: true })],
    [mkPolicy("default", { claimLock: false })],
    [mkPolicy("default", { guardedPods: { namespaces: ["other"] } })],
  ]) {
    const w = world();
    w.pods.set("app-a", gatedPod("app-a", "uid-a"));
    await controller(w, policies).reconcile("default/app-a");
    const lock = parseLock(w.claim());
    assert.ok(lock.ok);
    assert.equal(lock.lock, undefined, `no grant written: ${JSON.stringify(policies.map((p) => p.spec))}`);
    assert.deepEqual(w.pods.get("app-a")!.spec?.schedulingGates, [], "the gate lifted");
  }
});

test("a claim the cache shows held by the pod is read fresh: a lock that moved on is not taken for this pod's", async () => {
  const w = world();
  const me = gatedPod("app-a", "uid-a");
  w.pods.set("app-a", me);
  // app-a was granted, and the operator stopped before lifting its gate; since then the lock moved to app-b.
  w.grantTo(me);
  const stale = w.claim();
  w.setCachedClaim(() => stale);
  w.grantTo({ ...gatedPod("app-b", "uid-b"), spec: { ...gatedPod("app-b", "uid-b").spec!, nodeName: "node-2", schedulingGates: [] } });
  w.pods.get("app-b")!.status = { phase: "Running" };
  await controller(w).reconcile("default/app-a");
  assert.ok(
    (w.pods.get("app-a")!.spec!.schedulingGates ?? []).some((g) => g.name === CLAIM_GATE),
    "app-a stays gated: app-b holds the claim now",
  );
});

test("a stale cached claim cannot grant: the compare-and-swap on its version fails", async () => {
  const w = world();
  w.pods.set("app-a", gatedPod("app-a", "uid-a"));
  const before = w.claim();
  w.setCachedClaim(() => before);
  w.grantTo(gatedPod("app-b", "uid-b")); // granted a moment ago; its gate not lifted yet
  await assert.rejects(controller(w).reconcile("default/app-a"), (e: ApiException<unknown>) => e.code === 409);
  const lock = parseLock(w.claim());
  assert.ok(lock.ok);
  assert.equal(lock.lock?.holder?.pod, "app-b");
  assert.ok((w.pods.get("app-a")!.spec!.schedulingGates ?? []).some((g) => g.name === CLAIM_GATE));
});

test("events wake only the gated pods that wait for the claim they concern", () => {
  const handlers: Record<string, ((o: unknown) => void)[]> = {};
  const informer = (kind: string) => ({
    on: (verb: string, fn: (o: unknown) => void) => (handlers[`${kind}/${verb}`] ??= []).push(fn),
  });
  const ctl = new ClaimLockController({
    caches: { pods: informer("pods"), pvcs: informer("pvcs"), fences: informer("fences"), policies: informer("policies") },
  } as never);
  const queued: string[] = [];
  ctl.watch({ add: (k: string) => queued.push(k) } as never);
  const emit = (kind: string, verb: string, o: unknown) => handlers[`${kind}/${verb}`]!.forEach((fn) => fn(o));
  const waiting = (name: string, claim: string, ns = "default") => {
    const p = gatedPod(name, `uid-${name}`);
    p.metadata!.namespace = ns;
    p.spec!.volumes = [{ name: "v", persistentVolumeClaim: { claimName: claim } }];
    return p;
  };
  emit("pods", "add", waiting("a", "data"));
  emit("pods", "add", waiting("b", "logs"));
  emit("pods", "add", waiting("c", "data", "other"));
  assert.deepEqual(queued.sort(), ["default/a", "default/b", "other/c"], "a new gated pod is looked at once");
  queued.length = 0;

  const holder = mkPod("old", { claims: ["data"], uid: "uid-old" });
  emit("pods", "update", holder);
  emit("pods", "delete", holder);
  assert.deepEqual(queued, ["default/a", "default/a"], "the holder of data wakes data's waiter in its namespace only");
  queued.length = 0;
  emit("pods", "update", mkPod("busy", { uid: "uid-busy" }));
  emit("pods", "update", mkPod("other-claim", { claims: ["cache"], uid: "uid-oc" }));
  assert.deepEqual(queued, [], "pods without the waited-for claims wake nobody");
  emit("pvcs", "update", { metadata: { name: "logs", namespace: "default" } });
  assert.deepEqual(queued, ["default/b"], "a claim's change wakes its waiters");
  queued.length = 0;
  emit("fences", "add", {});
  assert.deepEqual(queued.sort(), ["default/a", "default/b", "other/c"], "a fence may free any claim");
  queued.length = 0;
  const granted = waiting("a", "data");
  granted.spec!.schedulingGates = [];
  emit("pods", "update", granted);
  emit("pods", "update", holder);
  assert.deepEqual(queued, [], "a granted pod no longer waits");
});

/** The controller with its watch wired to the world (handlers fired by `emit`), and the Events it recorded. */
function wired(w: ReturnType<typeof world>) {
  const handlers: Record<string, ((o: unknown, old?: unknown) => void)[]> = {};
  const on = (kind: string) => (verb: string, fn: (o: unknown, old?: unknown) => void) => (handlers[`${kind}/${verb}`] ??= []).push(fn);
  const recorded: { pod: string; reason: string; message: string }[] = [];
  const ctl = new ClaimLockController({
    kube: w.kube as never,
    caches: {
      pods: { get: (name: string) => w.pods.get(name), on: on("pods"), list: () => [...w.pods.values()] },
      policies: { list: () => LIVE, on: on("policies") },
      pvcs: { on: on("pvcs"), get: () => w.cachedClaim() },
      fences: { on: on("fences") },
    } as never,
    events: {
      record: async (ref: { name: string }, _type: string, reason: string, message: string) =>
        void recorded.push({ pod: ref.name, reason, message }),
    } as never,
    log: { info() {}, warn() {}, error() {}, debug() {} } as never,
    clock: () => DateTime.now(),
    leadership: SOLE_LEADER,
  });
  ctl.watch({ add() {} } as never);
  const emit = (kind: string, verb: string, o: unknown, old?: unknown) => (handlers[`${kind}/${verb}`] ?? []).forEach((fn) => fn(o, old));
  /** Every key reconciled once by `workers` workers, as the operator's queue runs them. */
  const round = async (keys: string[], workers = 4) => {
    const q = [...keys];
    await Promise.all(
      Array.from({ length: workers }, async () => {
        for (let k = q.shift(); k; k = q.shift()) await ctl.reconcile(k).catch(() => {});
      }),
    );
  };
  return { ctl, emit, recorded, round };
}

test("many waiters of one claim: one fresh namespace list per change of the claim, not one per waiter", async () => {
  const w = world();
  const holder = mkPod("holder", { claims: ["data"], uid: "uid-holder", node: "node-1" });
  holder.metadata!.resourceVersion = "1";
  w.grantTo(holder);
  const keys: string[] = [];
  for (let i = 0; i < 50; i++) {
    w.pods.set(`app-${i}`, gatedPod(`app-${i}`, `uid-${i}`));
    keys.push(`default/app-${i}`);
  }
  let lists = 0;
  const list = w.kube.listPodsFresh;
  w.kube.listPodsFresh = async () => {
    lists++;
    return list();
  };
  const { emit, recorded, round } = wired(w);
  await round(keys);
  assert.equal(lists, 1, "50 waiters, one fresh list: the others take its decision");
  assert.equal(recorded.filter((e) => e.reason === "WaitingForClaim").length, 50, "every waiter is told whom it waits for");
  assert.match(recorded[49]!.message, /holder holds it \(token 1\) on node node-1/);

  await round(keys);
  assert.equal(lists, 1, "nothing touched the claim: the decision stands");
  assert.equal(recorded.length, 50, "and nobody is told the same thing again");

  // The holder's status changes: one more fresh list for the 50.
  emit("pods", "update", holder);
  await round(keys);
  assert.equal(lists, 2);

  // The holder goes away: the first waiter is granted the claim, and the 49 others wait for it, on one more list.
  w.pods.delete("holder");
  emit("pods", "delete", holder);
  await round(keys);
  const lock = parseLock(w.claim());
  assert.ok(lock.ok && lock.lock?.holder);
  const ungated = [...w.pods.values()].filter((p) => !(p.spec?.schedulingGates ?? []).some((g) => g.name === CLAIM_GATE));
  assert.deepEqual(
    ungated.map((p) => p.metadata?.name),
    [lock.lock.holder.pod],
    "exactly one pod was granted",
  );
  assert.equal(lists, 4, "the grant's list, then one list the 49 others share");
});

test("a waiter the shared decision names as the claim's holder makes its own reads and finishes its grant", async () => {
  const w = world();
  const me = gatedPod("app-a", "uid-a");
  w.pods.set("app-a", me);
  w.pods.set("app-b", gatedPod("app-b", "uid-b"));
  // app-a was granted, and the operator stopped before lifting its gate.
  w.grantTo(me);
  const { round } = wired(w);
  await round(["default/app-b", "default/app-a"], 1);
  assert.deepEqual(w.pods.get("app-a")!.spec?.schedulingGates, [], "app-a holds the claim: its gate is lifted");
  assert.ok((w.pods.get("app-b")!.spec!.schedulingGates ?? []).some((g) => g.name === CLAIM_GATE));
});

test("a gated pod's own events (creation, status) wake none of the claim's other waiters: it frees nothing", () => {
  const queued: string[] = [];
  const handlers: Record<string, ((o: unknown, old?: unknown) => void)[]> = {};
  const on = (kind: string) => (verb: string, fn: (o: unknown, old?: unknown) => void) => (handlers[`${kind}/${verb}`] ??= []).push(fn);
  const ctl = new ClaimLockController({
    caches: { pods: { on: on("pods") }, pvcs: { on: on("pvcs") }, fences: { on: on("fences") }, policies: { on: on("policies") } },
  } as never);
  ctl.watch({ add: (k: string) => queued.push(k) } as never);
  const emit = (verb: string, o: unknown, old?: unknown) => (handlers[`pods/${verb}`] ?? []).forEach((fn) => fn(o, old));
  for (let i = 0; i < 5; i++) emit("add", gatedPod(`app-${i}`, `uid-${i}`));
  assert.deepEqual(queued, ["default/app-0", "default/app-1", "default/app-2", "default/app-3", "default/app-4"], "each new one once");
  queued.length = 0;
  emit("update", gatedPod("app-4", "uid-4"), gatedPod("app-4", "uid-4"));
  assert.deepEqual(queued, []);
  // Its deletion and its gate's removal may free the claim (it may hold it): they wake the others.
  emit("delete", gatedPod("app-4", "uid-4"));
  assert.deepEqual(queued.sort(), ["default/app-0", "default/app-1", "default/app-2", "default/app-3"]);
  queued.length = 0;
  const lifted = gatedPod("app-3", "uid-3");
  lifted.spec!.schedulingGates = [];
  emit("update", lifted, gatedPod("app-3", "uid-3"));
  assert.deepEqual(queued.sort(), ["default/app-0", "default/app-1", "default/app-2"]);
});

test("a claim still carrying the old opt-out (claim-guard=false) is guarded anyway, and told so once with a Warning Event", async () => {
  const w = world();
  w.annotateClaim({ "stockade.io/claim-guard": "false" }); // a ReadWriteOnce claim: guarded by the live policy
  w.pods.set("app-a", gatedPod("app-a", "uid-a"));
  const { ctl, recorded } = wired(w);
  await ctl.reconcile("default/app-a");
  const lock = parseLock(w.claim());
  assert.ok(lock.ok);
  assert.deepEqual(lock.lock?.holder, { pod: "app-a", uid: "uid-a" }, "granted by compare-and-swap, not let go");
  w.pods.set("app-b", gatedPod("app-b", "uid-b"));
  await ctl.reconcile("default/app-b");
  const told = recorded.filter((r) => r.reason === "ClaimOptOutIgnored");
  assert.equal(told.length, 1, "once per claim");
  assert.equal(told[0]!.pod, "data");
  assert.match(told[0]!.message, /no longer opts a claim out.*stockade\.io\/guarded=false/);
});

test("the grant's Events are written only once the gate's lift is answered (not beside it), and still when the lift fails", async () => {
  for (const outcome of ["lifted", "lift refused"] as const) {
    const w = world();
    w.pods.set("app-a", gatedPod("app-a", "uid-a"));
    const patch = w.kube.casPatchPod;
    let answer!: () => void;
    const answered = new Promise<void>((r) => (answer = r));
    let eventsDuringLift = -1;
    const { ctl, recorded } = wired(w);
    w.kube.casPatchPod = async (...args: Parameters<typeof patch>) => {
      await answered;
      eventsDuringLift = recorded.filter((r) => r.reason === "ClaimLockGranted").length;
      if (outcome === "lift refused") throw new ApiException(409, "Conflict", { message: "the object has been modified" }, {});
      return patch(...args);
    };
    const done = ctl.reconcile("default/app-a").then(
      () => "ok",
      () => "failed",
    );
    await new Promise((r) => setTimeout(r, 20));
    assert.equal(recorded.filter((r) => r.reason === "ClaimLockGranted").length, 0, `${outcome}: no Event while the lift is under way`);
    answer();
    assert.equal(await done, outcome === "lifted" ? "ok" : "failed");
    assert.equal(eventsDuringLift, 0, outcome);
    assert.deepEqual(
      recorded
        .filter((r) => r.reason === "ClaimLockGranted")
        .map((r) => r.pod)
        .sort(),
      ["app-a", "data"],
      outcome,
    );
  }
});

// Issue 41 item 3: a pilot stopped while a NodeFence is under way (docs/pilot.md: `kubectl delete fencingpolicy`, or a
// dry run, or the namespaces narrowed) must not let the replacement of a pod on the node being fenced start on its
// claim: the gate stays until the fence ends, and then comes off only the usual way.
describe("a gate on a claim whose holder's node is being fenced stays, whatever the policies say now", () => {
  const snapshot = { escalation: [], guardedPods: {} };
  /** The world: app-old holds the claim (token 1) on node-1, whose NodeFence is `fence`; app-new waits for it. */
  function fencedWorld(f: NodeFence | undefined, o: { holderGone?: boolean } = {}) {
    const w = world();
    const holder = mkPod("app-old", { claims: ["data"], uid: "uid-old", node: "node-1" });
    holder.metadata!.resourceVersion = "1";
    w.grantTo(holder);
    if (o.holderGone) {
      // Released: the fence broke the lock and force-deleted the pod.
      w.pods.delete("app-old");
      w.annotateClaim({ [LOCK_ANNOTATION]: formatLock({ v: 1, token: 1, time: "2026-01-01T00:01:00Z", brokenBy: "NodeFence node-1" }) });
    }
    w.pods.set("app-new", gatedPod("app-new", "uid-new"));
    const reads: string[] = [];
    (w.kube as { getNodeFence: (n: string) => Promise<NodeFence | undefined> }).getNodeFence = async (n: string) => {
      reads.push(n);
      return n === "node-1" ? f : undefined;
    };
    return { w, reads };
  }
  async function run(w: ReturnType<typeof world>, policies: FencingPolicy[]) {
    const recorded: { reason: string; message: string }[] = [];
    const ctl = new ClaimLockController({
      kube: w.kube as never,
      caches: {
        pods: { get: (name: string) => w.pods.get(name), on() {}, list: () => [...w.pods.values()] },
        policies: { list: () => policies },
        pvcs: { on() {}, get: () => w.cachedClaim() },
        fences: { on() {} },
      } as never,
      events: {
        record: async (_ref: unknown, _type: string, reason: string, message: string) => void recorded.push({ reason, message }),
      } as never,
      log: { info() {}, warn() {}, error() {}, debug() {} } as never,
      clock: () => DateTime.now(),
      leadership: SOLE_LEADER,
    });
    await ctl.reconcile("default/app-new");
    const lock = parseLock(w.claim());
    assert.ok(lock.ok);
    return {
      gated: (w.pods.get("app-new")!.spec!.schedulingGates ?? []).some((g) => g.name === CLAIM_GATE),
      holder: lock.lock?.holder?.pod,
      token: lock.lock?.token,
      recorded,
    };
  }
  const stopped: [string, FencingPolicy[]][] = [
    ["the policy deleted", []],
    ["turned to a dry run", [mkPolicy("default", { dryRun: true })]],
    ["claimLock: false", [mkPolicy("default", { claimLock: false })]],
    ["its namespaces narrowed", [mkPolicy("default", { guardedPods: { namespaces: ["other"] } })]],
  ];

  test("the holder's node's NodeFence is Fencing: the gate stays, no grant, and the pod is told why (GateKeptByFence)", async () => {
    for (const [what, policies] of stopped) {
      const { w, reads } = fencedWorld(mkFence("node-1", { phase: "Fencing", policySnapshot: snapshot }));
      const r = await run(w, policies);
      assert.equal(r.gated, true, `${what}: app-new stays gated`);
      assert.equal(r.holder, "app-old", `${what}: the claim is not handed over`);
      assert.ok(reads.includes("node-1"), `${what}: the fence is read fresh`);
      const told = r.recorded.find((e) => e.reason === "GateKeptByFence");
      assert.ok(told, `${what}: ${JSON.stringify(r.recorded)}`);
      assert.match(told.message, /claim data is in use: app-old holds it \(token 1\) on node node-1/);
      assert.match(told.message, /whose NodeFence is Fencing/);
      assert.match(told.message, /whatever the FencingPolicies say now/);
    }
  });

  test("every phase until the fence ends (Pending, Fenced, Releasing, Failed, Unfencing) keeps it too", async () => {
    for (const phase of ["Pending", "Fenced", "Releasing", "Failed", "Unfencing"] as const) {
      const { w } = fencedWorld(mkFence("node-1", { phase, policySnapshot: snapshot }));
      const r = await run(w, []);
      assert.equal(r.gated, true, phase);
      assert.equal(r.holder, "app-old", phase);
    }
  });

  test("a paused live policy keeps the lock as before (the usual wait)", async () => {
    const { w } = fencedWorld(mkFence("node-1", { phase: "Fencing", policySnapshot: snapshot }));
    const r = await run(w, [mkPolicy("default", { paused: true })]);
    assert.equal(r.gated, true);
    assert.ok(r.recorded.some((e) => e.reason === "WaitingForClaim"));
  });

  test("once the fence has ended the usual outcome: Unfenced, or Released with the holder released, and no policy: lifted without a grant", async () => {
    for (const [what, f, holderGone] of [
      ["Unfenced", mkFence("node-1", { phase: "Unfenced", policySnapshot: snapshot }), false],
      ["Released, the holder released", mkFence("node-1", { phase: "Released", policySnapshot: snapshot }), true],
      ["no NodeFence", undefined, false],
    ] as const) {
      const { w } = fencedWorld(f, { holderGone });
      const r = await run(w, []);
      assert.equal(r.gated, false, `${what}: the gate comes off`);
      assert.equal(r.token, 1, `${what}: no grant (the policies keep no lock)`);
      assert.equal(r.holder, holderGone ? undefined : "app-old", what);
      assert.ok(!r.recorded.some((e) => e.reason === "GateKeptByFence"), what);
    }
  });

  test("with a live policy, Released with the holder released: granted the next token, as always", async () => {
    const { w } = fencedWorld(mkFence("node-1", { phase: "Released", policySnapshot: snapshot }), { holderGone: true });
    const r = await run(w, LIVE);
    assert.equal(r.gated, false);
    assert.equal(r.holder, "app-new");
    assert.equal(r.token, 2);
  });
});
