// The webhook endpoint is reachable by any pod that can reach its Service, and the apiserver does not authenticate
// itself to it by default: whatever a crafted AdmissionReview says, answering it writes nothing to the API (no
// Events), dry-run or not, and the fresh reads it causes are bounded.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { request } from "node:https";
import { pino } from "pino";
import { DateTime } from "luxon";
import type { V1PersistentVolumeClaim, V1Pod } from "@kubernetes/client-node";
import type { NodeFence } from "../../src/api/v1alpha1.ts";
import { CLAIM_GATE } from "../../src/decide/claim-lock.ts";
import { renew } from "../../src/admission/certificates.ts";
import { AdmissionServer, FORCE_DELETE_PATH, GATE_PATH, MAX_FRESH_CHECKS, type AdmissionDeps } from "../../src/admission/server.ts";
import { FORCE_DELETE_ANNOTATION } from "../../src/admission/force-delete.ts";
import { fence, pod, policy, pvc } from "./decide-fixtures.ts";

const NOW = DateTime.fromISO("2026-01-01T00:10:00Z", { zone: "utc" });
const tls = renew({}, "ca", ["127.0.0.1"], new Date("2026-01-01T00:00:00Z"));

/** Every call the server makes to the API, by name; reads answer from `world`, anything else is a write. */
const calls: string[] = [];
const events: string[] = [];
let hold: Promise<void> | undefined;
const read =
  (name: string, value: unknown = undefined) =>
  async () => {
    calls.push(name);
    if (hold) await hold;
    return value;
  };
const writes = () => calls.filter((c) => !/^(read|get|list)/.test(c));
const recordAll = (prefix: string): ProxyHandler<object> => ({
  get: (target, prop) =>
    prop in target
      ? (target as Record<string | symbol, unknown>)[prop]
      : async () => {
          calls.push(`${prefix}${String(prop)}`);
        },
});
const victim = () => {
  const p = pod("db-0", { sts: true, node: "node-2" });
  p.metadata!.creationTimestamp = new Date("2026-01-01T00:00:00Z");
  p.spec!.terminationGracePeriodSeconds = 30;
  return p;
};
const kube = new Proxy(
  {
    core: new Proxy({ readNamespacedPod: read("readNamespacedPod", victim()) }, recordAll("core.")),
    readNode: read("readNode", { metadata: { name: "node-2" }, status: { conditions: [{ type: "Ready", status: "Unknown" }] } }),
    readLease: read("readLease"),
    getNodeFence: read("getNodeFence"),
  },
  recordAll(""),
);
let policies = [policy("default")];
let fences: NodeFence[] = [];
const bound = new Map<string, V1Pod[]>();
const claims = new Map<string, V1PersistentVolumeClaim>();
const caches = {
  synced: true,
  pvcs: { list: () => [], get: (name: string) => claims.get(name) },
  // A live policy that selects every node: the guard covers node-2 (decide/scope.ts).
  policies: { list: () => policies },
  fences: { list: () => fences },
  podsOn: (node: string) => bound.get(node) ?? [],
};
// The recorder the server was built with before: anything it records is a write on behalf of the caller.
const recorder = new Proxy(
  {},
  {
    get:
      () =>
      async (...args: unknown[]) =>
        void events.push(JSON.stringify(args)),
  },
);
const server = new AdmissionServer({
  kube,
  caches,
  log: pino({ level: "silent" }),
  clock: () => NOW,
  events: recorder,
} as unknown as AdmissionDeps);
let addr = "";

before(async () => {
  addr = await server.listen({ host: "127.0.0.1", port: 0 }, { cert: tls["tls.crt"]!, key: tls["tls.key"]! });
});
after(() => server.close());

interface Answer {
  response: {
    allowed: boolean;
    status?: { code: number; message: string };
    warnings?: string[];
    auditAnnotations?: Record<string, string>;
  };
}

interface GateAnswer {
  response: { allowed: boolean; patch?: string; status?: { code: number; message: string } };
}

function review(request_: Record<string, unknown>): Promise<Answer>;
function review(request_: Record<string, unknown>, path: typeof GATE_PATH): Promise<GateAnswer>;
function review(request_: Record<string, unknown>, path = FORCE_DELETE_PATH): Promise<Answer | GateAnswer> {
  const [host, port] = [addr.slice(0, addr.lastIndexOf(":")), Number(addr.slice(addr.lastIndexOf(":") + 1))];
  const body = JSON.stringify({ apiVersion: "admission.k8s.io/v1", kind: "AdmissionReview", request: { uid: "u-1", ...request_ } });
  return new Promise((resolve, reject) => {
    const req = request({ host, port, path, method: "POST", ca: tls["ca.crt"], headers: { "content-type": "application/json" } }, (res) => {
      const chunks: Buffer[] = [];
      res.on("data", (c: Buffer) => chunks.push(c));
      res.on("end", () => resolve(JSON.parse(Buffer.concat(chunks).toString("utf8")) as Answer));
    });
    req.on("error", reject);
    req.end(body);
  });
}

const forceDelete = (p: V1Pod, extra: Record<string, unknown> = {}) => ({
  operation: "DELETE",
  namespace: "default",
  name: p.metadata?.name,
  userInfo: { username: "mallory" },
  oldObject: p,
  options: { gracePeriodSeconds: 0 },
  // Attacker-chosen text: it must never reach an Event.
  ...extra,
});

describe("the force-delete webhook writes nothing to the API", () => {
  test("a crafted review of a guarded pod is refused, and the refusal is written nowhere but the answer and the audit log", async () => {
    calls.length = 0;
    events.length = 0;
    const a = await review(forceDelete(victim(), { userInfo: { username: "mallory: <script>your cluster is compromised" } }));
    assert.equal(a.response.allowed, false);
    assert.match(a.response.status?.message ?? "", /refusing to force-delete pod default\/db-0/);
    assert.equal(a.response.auditAnnotations?.decision, "refused");
    assert.deepEqual(events, [], "no Event");
    assert.deepEqual(writes(), [], "no API write");
    assert.deepEqual(calls.sort(), ["getNodeFence", "readLease", "readNode"], "the fresh reads only");
  });

  test("issue 28: with no FencingPolicy the delete goes through without a read; with a dry run, after reading the node", async () => {
    try {
      policies = [];
      calls.length = 0;
      const none = await review(forceDelete(victim()));
      assert.equal(none.response.allowed, true);
      assert.deepEqual(calls, [], "no policy, no NodeFence: nothing to read");
      policies = [policy("default", { dryRun: true })];
      const dry = await review(forceDelete(victim()));
      assert.equal(dry.response.allowed, true);
      assert.match(
        dry.response.auditAnnotations?.reason ?? "",
        /not guarded: FencingPolicy default, which selects node node-2, is a dry run/,
      );
      assert.deepEqual(calls.sort(), ["getNodeFence", "readLease", "readNode"]);
    } finally {
      policies = [policy("default")];
    }
  });

  test("an acknowledged force delete, dry run or not, is allowed with a warning and an audit annotation, and writes nothing", async () => {
    for (const dryRun of [true, false]) {
      calls.length = 0;
      events.length = 0;
      const p = victim();
      p.metadata!.annotations = { [FORCE_DELETE_ANNOTATION]: "checked by hand" };
      const a = await review(forceDelete(p, { dryRun }));
      assert.equal(a.response.allowed, true);
      assert.match(a.response.warnings?.[0] ?? "", /acknowledging the risk of two instances at once: "checked by hand"/);
      assert.equal(a.response.auditAnnotations?.acknowledged, "checked by hand");
      assert.deepEqual(events, [], `no Event (dryRun ${dryRun})`);
      assert.deepEqual(writes(), [], `no API write (dryRun ${dryRun})`);
    }
  });

  test("a graceful delete is answered without reading anything", async () => {
    calls.length = 0;
    const a = await review(forceDelete(victim(), { options: { gracePeriodSeconds: 30 } }));
    assert.equal(a.response.allowed, true);
    assert.deepEqual(calls, []);
    // No grace asked: the pod's own (30) applies.
    assert.equal((await review(forceDelete(victim(), { options: {} }))).response.allowed, true);
    assert.deepEqual(calls, []);
  });

  test("an eviction reads the pod: one asking for no grace period of a pod the apiserver deletes at once is checked", async () => {
    calls.length = 0;
    const evict = (deleteOptions: Record<string, unknown> | undefined) =>
      review({
        operation: "CREATE",
        subResource: "eviction",
        namespace: "default",
        name: "db-0",
        userInfo: { username: "mallory" },
        object: { deleteOptions },
      });
    assert.equal((await evict(undefined)).response.allowed, true, "its own grace period, 30");
    assert.deepEqual(calls, ["readNamespacedPod"]);
    assert.equal((await evict({ gracePeriodSeconds: 0 })).response.allowed, false);
  });

  test(`at most ${MAX_FRESH_CHECKS} checks read the API at once: a flood of crafted reviews is refused beyond that`, async () => {
    calls.length = 0;
    let release = () => {};
    hold = new Promise((r) => (release = r));
    let tooMany = 0;
    const flood = Array.from({ length: MAX_FRESH_CHECKS + 5 }, () =>
      review(forceDelete(victim())).then((a) => {
        if (a.response.status?.code === 429) tooMany++;
        return a;
      }),
    );
    // Wait until the admitted checks are all reading and the rest have been answered (on a loaded machine the last
    // TLS handshakes can come after the first checks are reading: released then, they would be admitted).
    const deadline = Date.now() + 10_000;
    while ((calls.filter((c) => c === "readNode").length < MAX_FRESH_CHECKS || tooMany < 5) && Date.now() < deadline)
      await new Promise((r) => setTimeout(r, 5));
    await new Promise((r) => setTimeout(r, 50));
    assert.equal(calls.filter((c) => c === "readNode").length, MAX_FRESH_CHECKS);
    hold = undefined;
    release();
    const answers = await Promise.all(flood);
    assert.equal(answers.filter((a) => a.response.status?.code === 429).length, 5);
    assert.ok(answers.every((a) => !a.response.allowed));
    assert.deepEqual(writes(), []);
  });
});

// Issue 41 item 3: the administrator deletes the FencingPolicy while a NodeFence is Fencing; the Deployment's
// replacement, created after, must not start on the RWO claim while the old instance on the node being fenced may
// still write. The gate webhook gates it whatever the policies say; once the fence has ended, as before.
describe("the claim-gate webhook: a claim used on a node whose NodeFence has not ended is gated whatever the policies say", () => {
  const replacement = () => {
    const p = pod("app-new", { claims: ["data"] });
    delete p.spec!.nodeName;
    delete p.metadata!.uid;
    return p;
  };
  const create = (p: V1Pod) => review({ operation: "CREATE", kind: { kind: "Pod" }, namespace: "default", object: p }, GATE_PATH);
  const gates = (a: GateAnswer) =>
    a.response.patch ? (JSON.parse(Buffer.from(a.response.patch, "base64").toString("utf8")) as { value: unknown }[]) : [];
  const held = [{ value: [{ name: CLAIM_GATE }] }];

  test("no policy (deleted), a dry run, its namespaces narrowed: the replacement is gated while the holder's node is being fenced", async () => {
    const saved = policies;
    try {
      claims.set("data", pvc("data", ["ReadWriteOnce"]));
      bound.set("node-2", [pod("app-old", { claims: ["data"], node: "node-2" })]);
      for (const phase of ["Fencing", "Pending", "Fenced", "Releasing", "Released", "Failed", "Unfencing"] as const) {
        fences = [fence("node-2", { phase, policySnapshot: { escalation: [], guardedPods: {} } })];
        for (const now of [[], [policy("default", { dryRun: true })], [policy("default", { guardedPods: { namespaces: ["other"] } })]]) {
          policies = now;
          const a = await create(replacement());
          assert.equal(a.response.allowed, true);
          assert.deepEqual(
            gates(a).map((o) => o.value),
            held.map((o) => o.value),
            `${phase}, ${JSON.stringify(now.map((p) => p.spec))}`,
          );
        }
      }
      policies = [];
      fences = [fence("node-2", { phase: "Unfenced", policySnapshot: { escalation: [], guardedPods: {} } })];
      assert.deepEqual(gates(await create(replacement())), [], "Unfenced: no policy, no gate");
      fences = [fence("node-2", { phase: "Released", policySnapshot: { escalation: [], guardedPods: {} } })];
      bound.set("node-2", []);
      assert.deepEqual(gates(await create(replacement())), [], "Released, the holder released: no policy, no gate");
      fences = [];
      bound.set("node-2", [pod("app-old", { claims: ["data"], node: "node-2" })]);
      assert.deepEqual(gates(await create(replacement())), [], "no NodeFence: no policy, no gate (as before)");
      fences = [fence("node-2", { phase: "Fencing", policySnapshot: { escalation: [], guardedPods: {} } })];
      const optedOut = replacement();
      optedOut.metadata!.labels = { "stockade.io/guarded": "false" };
      assert.deepEqual(gates(await create(optedOut)), [], "opted out by label");
    } finally {
      policies = saved;
      fences = [];
      bound.clear();
      claims.clear();
    }
  });
});
