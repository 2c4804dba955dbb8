// The claim-lock controller against a scripted API: a competing grant that lands between its reads must never
// leave two holders. The world changes right after the controller lists the namespace's pods: had it read the
// claim after that list (as it once did), the new holder would be missing from its list and taken for gone.
import { test } from "node:test";
import assert from "node:assert/strict";
import type { V1PersistentVolumeClaim, V1Pod } from "@kubernetes/client-node";
import { ApiException } from "@kubernetes/client-node";
import { DateTime } from "luxon";
import { ClaimLockController } from "../../src/controllers/claim-lock.ts";
import { CLAIM_GATE, LOCK_ANNOTATION, formatLock, parseLock } from "../../src/decide/claim-lock.ts";
import { SOLE_LEADER } from "../../src/runtime/leader.ts";
import { pod as mkPod, pvc as mkPvc } from "./decide-fixtures.ts";

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
    // No FencingPolicy in this world: the claim is opted in.
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

function controller(w: ReturnType<typeof world>) {
  const silent = { info() {}, warn() {}, error() {}, debug() {} };
  const caches = {
    pods: { get: (name: string) => w.pods.get(name), on() {}, list: () => [...w.pods.values()] },
    policies: { list: () => [] },
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
