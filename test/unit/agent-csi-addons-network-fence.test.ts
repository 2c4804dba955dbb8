import { describe, test } from "node:test";
import assert from "node:assert/strict";
import {
  FENCE_SUCCESS_MESSAGE,
  NETWORK_FENCE_OWNER_LABEL,
  UNFENCE_SUCCESS_MESSAGE,
  fenceCidrs,
  networkFenceDriver,
  networkFenceName,
  networkFenceRules,
  parseCidr,
  stateOf,
} from "../../src/agents/csi-addons-network-fence.ts";
import { runStorageFence } from "../../src/agents/run-storage.ts";
import { driverFor, rulesFor, storageDriverFor } from "../../src/agents/registry.ts";
import type { NetworkFence, NetworkFenceApi } from "../../src/agents/types.ts";
import { checkAgent } from "../../src/decide/agent-check.ts";
import type { FenceAgent } from "../../src/api/v1alpha1.ts";

const base = { networkFenceClassName: "ceph-fence", storageClasses: "rbd,cephfs", cidrs: "10.0.0.7" };

/** The apiserver's side of NetworkFences, in memory; `controller` plays csi-addons (or not). */
function store(controller: (nf: NetworkFence) => NetworkFence["status"] | undefined = () => undefined) {
  const objs = new Map<string, NetworkFence>();
  let uid = 0;
  const calls: string[] = [];
  const settle = (nf: NetworkFence) => {
    const st = controller(nf);
    if (st) nf.status = st;
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
      o.metadata.uid = `uid-${++uid}`;
      settle(o);
      objs.set(o.metadata.name, o);
    },
    async replace(nf) {
      calls.push(`replace ${nf.metadata.name} ${nf.spec.fenceState}`);
      const o = structuredClone(nf);
      settle(o);
      objs.set(o.metadata.name, o);
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
const ctx = (kube: NetworkFenceApi, parameters: Record<string, string> = base, addresses?: { type: string; address: string }[]) => ({
  node: "node-1",
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

  test("fence: created once, named stockade-<node>, labelled ours; a repeat reuses it; unfence sets Unfenced, then deletes", async () => {
    const s = store(succeeds);
    const r = await runStorageFence(networkFenceDriver, ctx(s.api), "off", opts);
    assert.equal(r.outcome, "Succeeded", r.message);
    assert.match(r.message, /may still run/);
    assert.doesNotMatch(r.message, /\boff\b/);
    const nf = s.objs.get(networkFenceName("node-1"))!;
    assert.equal(nf.metadata.name, "stockade-node-1");
    assert.equal(nf.metadata.labels?.[NETWORK_FENCE_OWNER_LABEL], "node-1");
    assert.deepEqual(nf.spec, { fenceState: "Fenced", cidrs: ["10.0.0.7/32"], networkFenceClassName: "ceph-fence" });
    assert.equal((await runStorageFence(networkFenceDriver, ctx(s.api), "off", opts)).outcome, "Succeeded");
    assert.equal(s.calls.filter((c) => c.startsWith("create")).length, 1, "idempotent: one create");
    const u = await runStorageFence(networkFenceDriver, ctx(s.api), "on", opts);
    assert.equal(u.outcome, "Succeeded", u.message);
    assert.ok(s.calls.includes("replace stockade-node-1 Unfenced"));
    assert.ok(s.calls.indexOf("replace stockade-node-1 Unfenced") < s.calls.indexOf("delete stockade-node-1"), "unfenced before deleted");
    assert.equal(s.objs.size, 0);
  });

  test("a NetworkFence of that name that is not ours is refused, never changed", async () => {
    const s = store(succeeds);
    s.objs.set("stockade-node-1", {
      apiVersion: "csiaddons.openshift.io/v1alpha1",
      kind: "NetworkFence",
      metadata: { name: "stockade-node-1", uid: "theirs" },
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
    assert.ok(s.calls.includes("replace stockade-node-1 Unfenced"), "the first write, checked, was made");
    assert.ok(!s.calls.some((c) => c.startsWith("delete")), `no delete after leadership was lost: ${s.calls.join(", ")}`);
    assert.equal(s.objs.get("stockade-node-1")?.spec.fenceState, "Unfenced");
  });
});
