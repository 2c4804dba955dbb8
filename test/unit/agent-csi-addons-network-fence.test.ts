import { describe, test } from "node:test";
import assert from "node:assert/strict";
import {
  FENCE_SUCCESS_MESSAGE,
  NETWORK_FENCE_AGENT_LABEL,
  NETWORK_FENCE_OWNER_LABEL,
  UNFENCE_SUCCESS_MESSAGE,
  fenceCidrs,
  networkFenceDriver,
  legacyNetworkFenceName,
  networkFenceName,
  networkFenceRules,
  parseCidr,
  stateOf,
} from "../../src/agents/csi-addons-network-fence.ts";
import { runStorageFence } from "../../src/agents/run-storage.ts";
import { driverFor, rulesFor, storageDriverFor } from "../../src/agents/registry.ts";
import type { NetworkFence, NetworkFenceApi } from "../../src/agents/types.ts";
import { checkAgent } from "../../src/agents/check.ts";
import type { FenceAgent } from "../../src/api/v1alpha1.ts";

const base = { networkFenceClassName: "ceph-fence", storageClasses: "rbd,cephfs", cidrs: "10.0.0.7" };

/**
 * The apiserver's side of NetworkFences, in memory, as the CRD has it: resourceVersion preconditions, a generation
 * bumped by spec changes only, status written only through the status subresource (replace keeps it). `controller`
 * plays csi-addons, which reconciles on a new generation only (or not at all).
 */
function store(controller: (nf: NetworkFence) => NetworkFence["status"] | undefined = () => undefined) {
  const objs = new Map<string, NetworkFence>();
  let uid = 0;
  let rv = 0;
  const calls: string[] = [];
  const settle = (nf: NetworkFence) => {
    const st = controller(nf);
    if (st) {
      nf.status = st;
      nf.metadata.resourceVersion = String(++rv);
    }
  };
  const current = (nf: NetworkFence) => {
    const o = objs.get(nf.metadata.name);
    if (!o) throw Object.assign(new Error("NotFound"), { code: 404 });
    if (nf.metadata.resourceVersion !== o.metadata.resourceVersion) throw Object.assign(new Error("Conflict"), { code: 409 });
    return o;
  };
  const api: NetworkFenceApi = {
    async get(name) {
      calls.push(`get ${name}`);
      const o = objs.get(name);
      return o ? structuredClone(o) : undefined;
    },
    async create(nf) {
      calls.push(`create ${nf.metadata.name}`);
      if (objs.has(nf.metadata.name)) throw new Error("AlreadyExists");
      const o = structuredClone(nf);
      delete o.status;
      o.metadata.uid = `uid-${++uid}`;
      o.metadata.generation = 1;
      o.metadata.resourceVersion = String(++rv);
      settle(o);
      objs.set(o.metadata.name, o);
    },
    async replace(nf) {
      calls.push(`replace ${nf.metadata.name} ${nf.spec.fenceState}`);
      const old = current(nf);
      const o = structuredClone({ ...nf, status: old.status });
      const changed = JSON.stringify(old.spec) !== JSON.stringify(nf.spec);
      o.metadata.generation = (old.metadata.generation ?? 1) + (changed ? 1 : 0);
      o.metadata.resourceVersion = String(++rv);
      if (changed) settle(o);
      objs.set(o.metadata.name, o);
      return structuredClone(o);
    },
    async replaceStatus(nf) {
      calls.push(`replaceStatus ${nf.metadata.name}`);
      const old = current(nf);
      const o = structuredClone({ ...old, status: nf.status });
      o.metadata.resourceVersion = String(++rv);
      objs.set(o.metadata.name, o);
      return structuredClone(o);
    },
    async delete(name, u) {
      calls.push(`delete ${name}`);
      if (objs.get(name)?.metadata.uid === u) objs.delete(name);
    },
  };
  return { api, objs, calls };
}

/** What csi-addons' controller answers: success for the state asked. */
const succeeds = (nf: NetworkFence) => ({
  result: "Succeeded" as const,
  message: nf.spec.fenceState === "Fenced" ? FENCE_SUCCESS_MESSAGE : UNFENCE_SUCCESS_MESSAGE,
});
const ctx = (
  kube: NetworkFenceApi,
  parameters: Record<string, string> = base,
  addresses?: { type: string; address: string }[],
  agent = "netfence",
) => ({
  node: "node-1",
  agent,
  parameters,
  annotations: {},
  kube,
  addresses,
});
const opts = { timeoutMs: 2000, retries: 1, backoffMs: 10, pollMs: 20 };

describe("csiAddonsNetworkFence parameters", () => {
  test("a class or a driver with its Secret, storageClasses and cidrs are required; values are checked", () => {
    assert.deepEqual(networkFenceRules.check(base), []);
    const p = networkFenceRules.check({});
    assert.ok(p.some((x) => x.includes("networkFenceClassName")));
    assert.ok(p.some((x) => x.includes("storageClasses is required")));
    assert.ok(p.some((x) => x.includes("cidrs is missing")));
    assert.ok(
      networkFenceRules.check({ ...base, networkFenceClassName: "", driver: "rbd.csi.ceph.com" }).some((x) => x.includes("secretName")),
    );
    assert.ok(networkFenceRules.check({ ...base, cidrs: "10.0.0.0/8" }).some((x) => x.includes("more than a node")));
    assert.ok(networkFenceRules.check({ ...base, cidrs: "not-an-ip" }).some((x) => x.includes("not an IP")));
    assert.ok(networkFenceRules.check({ ...base, nodeAddresses: "Hostname" }).some((x) => x.includes("nodeAddresses")));
    assert.ok(networkFenceRules.check({ ...base, bmc: "x" }).some((x) => x.includes("not a csiAddonsNetworkFence parameter")));
  });
  test("CIDRs: bare addresses become /32 and /128; the kubelet's addresses only when nodeAddresses asks", () => {
    assert.deepEqual(parseCidr("10.0.0.7"), { cidr: "10.0.0.7/32" });
    assert.deepEqual(parseCidr("fd00::7"), { cidr: "fd00::7/128" });
    const addrs = [
      { type: "InternalIP", address: "10.9.9.9" },
      { type: "Hostname", address: "node-1" },
    ];
    assert.deepEqual(fenceCidrs({ parameters: base, addresses: addrs }), ["10.0.0.7/32"]);
    assert.deepEqual(fenceCidrs({ parameters: { ...base, nodeAddresses: "InternalIP" }, addresses: addrs }), [
      "10.0.0.7/32",
      "10.9.9.9/32",
    ]);
  });
  test("the registry: a storage driver, rules, and no power driver (it has no power state)", () => {
    assert.equal(storageDriverFor("csiAddonsNetworkFence"), networkFenceDriver);
    assert.equal(storageDriverFor("ipmi"), undefined);
    assert.equal(rulesFor({ type: "csiAddonsNetworkFence" }), networkFenceRules);
    assert.throws(() => driverFor("csiAddonsNetworkFence"), /no power state/);
  });
  test("the FenceAgent check (Ready condition) validates it like any agent: Valid, a missing cidrs, a duplicate", () => {
    const agent = (nodes: Record<string, string>): FenceAgent => ({
      apiVersion: "stockade.io/v1alpha1",
      kind: "FenceAgent",
      metadata: { name: "nf" },
      spec: {
        type: "csiAddonsNetworkFence",
        parameters: { networkFenceClassName: "ceph", storageClasses: "rbd" },
        nodes: Object.fromEntries(Object.entries(nodes).map(([n, cidrs]) => [n, { parameters: { cidrs } }])),
      },
    });
    const nodes = ["node-1", "node-2"].map((name) => ({ metadata: { name } }));
    assert.equal(checkAgent(agent({ "node-1": "10.0.0.1", "node-2": "10.0.0.2" }), nodes, new Map()).reason, "Valid");
    const missing = checkAgent(agent({ "node-1": "10.0.0.1" }), nodes, new Map());
    assert.equal(missing.reason, "InvalidConfiguration");
    assert.match(missing.message, /node node-2: parameter cidrs is missing/);
    assert.equal(checkAgent(agent({ "node-1": "10.0.0.1", "node-2": "10.0.0.1/32" }), nodes, new Map()).reason, "DuplicateTarget");
  });

  test("two nodes with the same CIDRs fence each other: the target says so", () => {
    assert.deepEqual(networkFenceRules.target(base), networkFenceRules.target({ ...base, cidrs: "10.0.0.7/32" }));
  });
});

describe("csiAddonsNetworkFence: the NetworkFence it writes and reads", () => {
  test("state is fenced only on csi-addons' success message for fenceState Fenced (never a power state)", () => {
    const nf = (fenceState: "Fenced" | "Unfenced", status?: NetworkFence["status"]): NetworkFence => ({
      apiVersion: "csiaddons.openshift.io/v1alpha1",
      kind: "NetworkFence",
      metadata: { name: "x" },
      spec: { fenceState, cidrs: [] },
      status,
    });
    assert.equal(stateOf(nf("Fenced")), "pending");
    assert.equal(stateOf(nf("Fenced", { result: "Succeeded", message: FENCE_SUCCESS_MESSAGE })), "fenced");
    // Just flipped from Unfenced, the controller has not answered yet: its old success is not a fence.
    assert.equal(stateOf(nf("Fenced", { result: "Succeeded", message: UNFENCE_SUCCESS_MESSAGE })), "pending");
    assert.equal(stateOf(nf("Unfenced", { result: "Succeeded", message: FENCE_SUCCESS_MESSAGE })), "pending");
    assert.equal(stateOf(nf("Fenced", { result: "Failed", message: "rpc error" })), "failed");
    assert.equal(stateOf(undefined), "unfenced");
  });

  test("fence: created once, named for agent and node, labelled ours; a repeat reuses it; unfence sets Unfenced, then deletes", async () => {
    const s = store(succeeds);
    const r = await runStorageFence(networkFenceDriver, ctx(s.api), "off", opts);
    assert.equal(r.outcome, "Succeeded", r.message);
    assert.match(r.message, /may still run/);
    assert.doesNotMatch(r.message, /\boff\b/);
    const name = networkFenceName("netfence", "node-1");
    const nf = s.objs.get(name)!;
    assert.match(nf.metadata.name, /^stockade-netfence-node-1-[0-9a-f]{10}$/);
    assert.equal(nf.metadata.labels?.[NETWORK_FENCE_OWNER_LABEL], "node-1");
    assert.equal(nf.metadata.labels?.[NETWORK_FENCE_AGENT_LABEL], "netfence");
    assert.deepEqual(nf.spec, { fenceState: "Fenced", cidrs: ["10.0.0.7/32"], networkFenceClassName: "ceph-fence" });
    assert.equal((await runStorageFence(networkFenceDriver, ctx(s.api), "off", opts)).outcome, "Succeeded");
    assert.equal(s.calls.filter((c) => c.startsWith("create")).length, 1, "idempotent: one create");
    const u = await runStorageFence(networkFenceDriver, ctx(s.api), "on", opts);
    assert.equal(u.outcome, "Succeeded", u.message);
    assert.ok(s.calls.includes(`replace ${name} Unfenced`));
    assert.ok(s.calls.indexOf(`replace ${name} Unfenced`) < s.calls.indexOf(`delete ${name}`), "unfenced before deleted");
    assert.equal(s.objs.size, 0);
  });

  test("a NetworkFence of that name that is not ours is refused, never changed", async () => {
    const s = store(succeeds);
    const name = networkFenceName("netfence", "node-1");
    s.objs.set(name, {
      apiVersion: "csiaddons.openshift.io/v1alpha1",
      kind: "NetworkFence",
      // Our node label, but no agent label: not this agent's.
      metadata: { name, uid: "theirs", labels: { [NETWORK_FENCE_OWNER_LABEL]: "node-1" } },
      spec: { fenceState: "Unfenced", cidrs: ["10.0.0.7/32"] },
    });
    const r = await runStorageFence(networkFenceDriver, ctx(s.api), "off", opts);
    assert.equal(r.outcome, "Failed");
    assert.match(r.message, /not Stockade's/);
    assert.ok(!s.calls.some((c) => c.startsWith("replace") || c.startsWith("create")));
  });

  test("csi-addons answering Failed, or never answering: not fenced, the message says why", async () => {
    const failed = await runStorageFence(
      networkFenceDriver,
      ctx(store(() => ({ result: "Failed", message: "blocklist add failed" })).api),
      "off",
      { ...opts, timeoutMs: 300 },
    );
    assert.equal(failed.outcome, "TimedOut");
    assert.match(failed.message, /Failed: .*blocklist add failed/);
    const silent = await runStorageFence(networkFenceDriver, ctx(store().api), "off", { ...opts, timeoutMs: 300 });
    assert.equal(silent.outcome, "TimedOut");
    assert.match(silent.message, /says pending/);
  });

  test("no address to fence is a Config failure; beforeTry cancels before any write", async () => {
    const s = store(succeeds);
    const none = await runStorageFence(
      networkFenceDriver,
      ctx(s.api, { ...base, cidrs: "", nodeAddresses: "InternalIP" }, []),
      "off",
      opts,
    );
    assert.equal(none.outcome, "Failed");
    assert.match(none.message, /no address to fence/);
    const { AgentError } = await import("../../src/agents/types.ts");
    const c = await runStorageFence(networkFenceDriver, ctx(s.api), "off", {
      ...opts,
      beforeTry: async () => {
        throw new AgentError("Cancelled", "the node heartbeats again");
      },
    });
    assert.equal(c.outcome, "Cancelled");
    assert.equal(s.objs.size, 0);
  });

  test("unfence: each later write (the delete after Unfenced) passes beforeTry too: a replica that lost the Lease stops before it", async () => {
    const s = store(succeeds);
    assert.equal((await runStorageFence(networkFenceDriver, ctx(s.api), "off", opts)).outcome, "Succeeded");
    const { AgentError } = await import("../../src/agents/types.ts");
    let tries = 0;
    const u = await runStorageFence(networkFenceDriver, ctx(s.api), "on", {
      ...opts,
      beforeTry: async () => {
        if (++tries > 1) throw new AgentError("Cancelled", "not the leader any more");
      },
    });
    assert.equal(u.outcome, "Cancelled", u.message);
    assert.equal(tries, 2, "checked again before the second write");
    const name = networkFenceName("netfence", "node-1");
    assert.ok(s.calls.includes(`replace ${name} Unfenced`), "the first write, checked, was made");
    assert.ok(!s.calls.some((c) => c.startsWith("delete")), `no delete after leadership was lost: ${s.calls.join(", ")}`);
    assert.equal(s.objs.get(name)?.spec.fenceState, "Unfenced");
  });
});

describe("csiAddonsNetworkFence: one NetworkFence per agent and node (issue 26 item 2)", () => {
  const nfObj = (name: string, spec: Partial<NetworkFence["spec"]>, labels: Record<string, string>, status?: NetworkFence["status"]) => ({
    apiVersion: "csiaddons.openshift.io/v1alpha1",
    kind: "NetworkFence" as const,
    metadata: { name, uid: `uid-${name}`, generation: 1, resourceVersion: "1", labels },
    spec: { fenceState: "Fenced" as const, cidrs: ["10.0.0.7/32"], ...spec },
    ...(status ? { status } : {}),
  });
  const mine = { [NETWORK_FENCE_OWNER_LABEL]: "node-1", [NETWORK_FENCE_AGENT_LABEL]: "netfence" };

  test("names: deterministic, one per (agent, node), exact where plain joining is not, valid and within 253 characters", () => {
    assert.equal(networkFenceName("a", "n"), networkFenceName("a", "n"));
    assert.notEqual(networkFenceName("ceph", "node-1"), networkFenceName("nfs", "node-1"));
    assert.notEqual(networkFenceName("a-b", "c"), networkFenceName("a", "b-c"));
    const long = networkFenceName("x".repeat(200), `${"y".repeat(240)}.z`);
    assert.ok(long.length <= 253, `${long.length}`);
    const subdomain = /^(?=.{1,253}$)[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;
    for (const n of [long, networkFenceName("a.b", "c."), networkFenceName("agent", `${"n".repeat(236)}.x`)]) assert.match(n, subdomain);
    assert.equal(legacyNetworkFenceName("node-1"), "stockade-node-1");
  });

  test("two storage agents of one node: two NetworkFences; the second never succeeds on the first's answer", async () => {
    // csi-addons answers only the ceph backend's fences; the nfs backend's controller is down.
    const s = store((nf) => (nf.spec.networkFenceClassName === "ceph-fence" ? succeeds(nf) : undefined));
    const ceph = await runStorageFence(networkFenceDriver, ctx(s.api, base, undefined, "ceph"), "off", opts);
    assert.equal(ceph.outcome, "Succeeded", ceph.message);
    const nfs = await runStorageFence(
      networkFenceDriver,
      ctx(s.api, { ...base, networkFenceClassName: "nfs-fence", storageClasses: "nfs" }, undefined, "nfs"),
      "off",
      { ...opts, timeoutMs: 300 },
    );
    assert.equal(nfs.outcome, "TimedOut", nfs.message);
    assert.equal(s.objs.size, 2);
    assert.equal(s.objs.get(networkFenceName("nfs", "node-1"))?.spec.networkFenceClassName, "nfs-fence");
    assert.equal(s.objs.get(networkFenceName("ceph", "node-1"))?.spec.networkFenceClassName, "ceph-fence");
  });

  test("an existing fence made with other immutable settings: held, it is an actionable Config failure and untouched; lifted, it is made again", async () => {
    const s = store(succeeds);
    const name = networkFenceName("netfence", "node-1");
    s.objs.set(name, nfObj(name, { networkFenceClassName: "old-class" }, mine, { result: "Succeeded", message: FENCE_SUCCESS_MESSAGE }));
    const held = await runStorageFence(networkFenceDriver, ctx(s.api), "off", opts);
    assert.equal(held.outcome, "Failed");
    assert.match(
      held.message,
      /other settings .*networkFenceClassName "old-class" \(wanted "ceph-fence"\).*never lifts a fence to change them/,
    );
    assert.ok(!s.calls.some((c) => !c.startsWith("get")), s.calls.join(", "));
    // The same, lifted and confirmed so: it holds nothing, it goes and ours is created.
    s.objs.set(
      name,
      nfObj(name, { networkFenceClassName: "old-class", fenceState: "Unfenced" }, mine, {
        result: "Succeeded",
        message: UNFENCE_SUCCESS_MESSAGE,
      }),
    );
    const again = await runStorageFence(networkFenceDriver, ctx(s.api), "off", { ...opts, retries: 2 });
    assert.equal(again.outcome, "Succeeded", again.message);
    assert.equal(s.objs.get(name)?.spec.networkFenceClassName, "ceph-fence");
  });

  test("a CIDR added to a fenced NetworkFence: the old answer is cleared first and never read as the answer to the new spec", async () => {
    const s = store(); // csi-addons does not answer (yet)
    const name = networkFenceName("netfence", "node-1");
    s.objs.set(
      name,
      nfObj(name, { networkFenceClassName: "ceph-fence", cidrs: ["10.0.0.6/32"] }, mine, {
        result: "Succeeded",
        message: FENCE_SUCCESS_MESSAGE,
      }),
    );
    const r = await runStorageFence(networkFenceDriver, ctx(s.api), "off", { ...opts, timeoutMs: 300 });
    assert.equal(r.outcome, "TimedOut", r.message);
    const nf = s.objs.get(name)!;
    assert.deepEqual(nf.spec.cidrs, ["10.0.0.6/32", "10.0.0.7/32"], "the wider set is kept");
    assert.deepEqual(nf.status ?? {}, {});
    assert.ok(s.calls.indexOf(`replaceStatus ${name}`) < s.calls.indexOf(`replace ${name} Fenced`), s.calls.join(", "));
    // Once csi-addons answers the new generation, it is fenced, with no further write.
    nf.status = succeeds(nf);
    const writes = s.calls.length;
    assert.equal((await runStorageFence(networkFenceDriver, ctx(s.api), "off", opts)).outcome, "Succeeded");
    assert.ok(!s.calls.slice(writes).some((c) => !c.startsWith("get")), s.calls.slice(writes).join(", "));
  });

  test("a status condition naming an older generation is not an answer (if csi-addons ever writes one)", () => {
    const nf = nfObj("x", { networkFenceClassName: "c" }, mine, {
      result: "Succeeded",
      message: FENCE_SUCCESS_MESSAGE,
      conditions: [{ type: "Fenced", status: "True", observedGeneration: 1 }],
    });
    assert.equal(stateOf(nf), "fenced");
    assert.equal(stateOf({ ...nf, metadata: { ...nf.metadata, generation: 2 } }), "pending");
  });

  test("upgrade: a legacy stockade-<node> fence of ours is lifted by the unfence (never adopted to fence); another's of that name is left alone", async () => {
    const s = store(succeeds);
    const legacy = legacyNetworkFenceName("node-1");
    s.objs.set(
      legacy,
      nfObj(
        legacy,
        { networkFenceClassName: "ceph-fence" },
        { [NETWORK_FENCE_OWNER_LABEL]: "node-1" },
        { result: "Succeeded", message: FENCE_SUCCESS_MESSAGE },
      ),
    );
    const off = await runStorageFence(networkFenceDriver, ctx(s.api), "off", opts);
    assert.equal(off.outcome, "Succeeded", off.message);
    assert.ok(s.calls.includes(`create ${networkFenceName("netfence", "node-1")}`), "ours is made, the legacy one not adopted");
    const on = await runStorageFence(networkFenceDriver, ctx(s.api), "on", opts);
    assert.equal(on.outcome, "Succeeded", on.message);
    assert.ok(s.calls.includes(`replace ${legacy} Unfenced`), s.calls.join(", "));
    assert.equal(s.objs.size, 0, "both lifted and deleted");
    // Not ours (no node label): not touched, and the unfence does not wait for it.
    const t = store(succeeds);
    t.objs.set(legacy, nfObj(legacy, { networkFenceClassName: "ceph-fence" }, {}, { result: "Succeeded", message: FENCE_SUCCESS_MESSAGE }));
    assert.equal((await runStorageFence(networkFenceDriver, ctx(t.api), "on", opts)).outcome, "Succeeded");
    assert.ok(!t.calls.some((c) => !c.startsWith("get")), t.calls.join(", "));
  });

  test("a withdrawn fence ends only once its create has landed, so the lift that follows finds it", async () => {
    const s = store(succeeds);
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const slow: NetworkFenceApi = {
      ...s.api,
      async create(nf, signal) {
        await gate;
        await s.api.create(nf, signal);
      },
    };
    const ac = new AbortController();
    const off = runStorageFence(networkFenceDriver, ctx(slow), "off", { ...opts, signal: ac.signal });
    await new Promise((r) => setTimeout(r, 20));
    ac.abort();
    let ended = false;
    void off.then(() => (ended = true));
    await new Promise((r) => setTimeout(r, 50));
    assert.equal(ended, false, "not ended while its create is on its way");
    release();
    assert.equal((await off).outcome, "Cancelled");
    assert.equal(s.objs.size, 1, "the create landed before the operation ended");
    assert.equal((await runStorageFence(networkFenceDriver, ctx(s.api), "on", opts)).outcome, "Succeeded");
    assert.equal(s.objs.size, 0);
  });
});
