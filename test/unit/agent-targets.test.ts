// Two nodes that resolve to the same fencing target (BMC; PDU and outlet) are an error: the FenceAgent's Ready
// condition says DuplicateTarget, and checkUniqueTarget refuses to fence either.
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import type { V1Node } from "@kubernetes/client-node";
import type { FenceAgent } from "../../src/api/v1alpha1.ts";
import { CHECK_CHUNK, checkUniqueTarget, duplicateTargets, sameMachine, targetOf } from "../../src/agents/targets.ts";
import { ipmiRules } from "../../src/agents/ipmi.ts";
import { rulesFromMetadata } from "../../src/agents/fence-agent.ts";
import { parseMetadata } from "../../src/agents/fence-metadata.ts";
import type { FenceAgentSpec } from "../../src/agents/parameters.ts";
import { checkAgent, checkAgentInSteps } from "../../src/agents/check.ts";
import type { FencingTarget } from "../../src/agents/types.ts";

const fixture = (agent: string) => readFileSync(join(import.meta.dirname, "../fixtures/fence-agents", `${agent}.xml`), "utf8");
const apc = rulesFromMetadata(parseMetadata(fixture("fence_apc")));
const ipmilan = rulesFromMetadata(parseMetadata(fixture("fence_ipmilan")));
const n = (name: string, labels: Record<string, string> = {}): V1Node => ({ metadata: { name, labels } });
const nodes = ["node-1", "node-2", "node-3"].map((x) => n(x));

describe("the target of a node's parameters", () => {
  test("ipmi: address and port, normalised; the default port counts", () => {
    assert.deepEqual(ipmiRules.target({ address: "BMC-1.example.com.", port: "0623" }), { device: "bmc-1.example.com:623", outlets: [] });
    assert.deepEqual(ipmiRules.target({ address: "10.0.0.1" }), ipmiRules.target({ address: "10.0.0.1", port: "623" }));
    assert.equal(ipmiRules.target({ port: "623" }), undefined, "no address, no target");
  });

  test("fence agents: ip, ipport (metadata default), plugs split on the separator, qualifiers", () => {
    assert.deepEqual(ipmilan.target({ ip: "10.0.0.1" }), { device: "10.0.0.1:623", outlets: [] });
    assert.deepEqual(apc.target({ ip: "pdu", plug: "3,4", switch: "2" }), { device: "pdu:23 switch=2", outlets: ["3", "4"] });
    assert.deepEqual(apc.target({ ip: "pdu", plug: "3:4", plug_separator: ":" })?.outlets, ["3", "4"]);
  });

  test("same machine: same device and overlapping outlets, or a whole device", () => {
    const t = (device: string, ...outlets: string[]) => ({ device, outlets });
    assert.equal(sameMachine(t("pdu:23", "1"), t("pdu:23", "2")), false, "one PDU, different plugs: fine");
    assert.equal(sameMachine(t("pdu:23", "1", "2"), t("pdu:23", "2", "3")), true);
    assert.equal(sameMachine(t("pdu:23"), t("pdu:23", "2")), true, "a whole device covers every outlet");
    assert.equal(sameMachine(t("pdu:23 switch=1", "1"), t("pdu:23 switch=2", "1")), false);
  });
});

describe("checkUniqueTarget (the node-fence controller's check before running an agent)", () => {
  test("two nodes on one BMC are refused, naming both and saying why", () => {
    const spec: FenceAgentSpec = {
      type: "ipmi",
      nodes: { "node-1": { parameters: { address: "10.0.0.1" } }, "node-2": { parameters: { address: "10.0.0.1", port: "623" } } },
    };
    const r = checkUniqueTarget("lab-ipmi", spec, nodes[0]!, nodes, ipmiRules);
    assert.deepEqual(r.ok ? [] : r.nodes, ["node-2"]);
    assert.ok(!r.ok);
    assert.equal(r.reason, "DuplicateTarget");
    assert.match(r.message, /FenceAgent lab-ipmi resolves node node-1 and node-2 to the same machine \(10\.0\.0\.1:623\)/);
    assert.match(r.message, /give each node its own address/);
    assert.deepEqual(
      checkUniqueTarget("lab-ipmi", spec, nodes[2]!, nodes, ipmiRules),
      { ok: true },
      "node-3 has no address: nothing shared",
    );
  });

  test("a shared address with no per-node value makes every node a duplicate", () => {
    const spec: FenceAgentSpec = { type: "fenceAgent", agent: "fence_ipmilan", parameters: { ip: "10.0.0.1" } };
    const r = checkUniqueTarget("a", spec, nodes[1]!, nodes, ipmilan);
    assert.deepEqual(r.ok ? [] : r.nodes, ["node-1", "node-3"]);
  });

  test("one PDU with different plugs is fine; the same plug is not", () => {
    const spec: FenceAgentSpec = {
      type: "fenceAgent",
      agent: "fence_apc",
      parameters: { ip: "pdu-a" },
      nodeTemplates: { plug: '{{ labels["node-restriction.kubernetes.io/plug"] }}' },
    };
    const pdu = [n("node-1", { "node-restriction.kubernetes.io/plug": "1" }), n("node-2", { "node-restriction.kubernetes.io/plug": "2" })];
    assert.deepEqual(checkUniqueTarget("pdu", spec, pdu[0]!, pdu, apc), { ok: true });
    pdu.push(n("node-3", { "node-restriction.kubernetes.io/plug": "2" }));
    const r = checkUniqueTarget("pdu", spec, pdu[2]!, pdu, apc);
    assert.ok(!r.ok && r.nodes.join() === "node-2" && /same machine \(pdu-a:23 plug 2\)/.test(r.message));
  });

  test("spellings of one address are one machine", () => {
    const spec: FenceAgentSpec = {
      type: "ipmi",
      nodes: { "node-1": { parameters: { address: "BMC.example.com" } }, "node-2": { parameters: { address: "bmc.example.com." } } },
    };
    assert.equal(checkUniqueTarget("x", spec, nodes[0]!, nodes, ipmiRules).ok, false);
  });

  test("nodes whose parameters do not resolve are ignored; manual has no target", () => {
    const spec: FenceAgentSpec = { type: "ipmi", nodeTemplates: { address: '{{ labels["node-restriction.kubernetes.io/bmc"] }}' } };
    const ns = [n("node-1", { "node-restriction.kubernetes.io/bmc": "10.0.0.1" }), n("node-2")];
    assert.deepEqual(checkUniqueTarget("x", spec, ns[0]!, ns, ipmiRules), { ok: true });
    assert.deepEqual(checkUniqueTarget("m", { type: "manual" }, nodes[0]!, nodes), { ok: true });
  });
});

describe("duplicateTargets and the FenceAgent's Ready condition", () => {
  const agent = (spec: FenceAgent["spec"]): FenceAgent => ({
    apiVersion: "stockade.io/v1alpha1",
    kind: "FenceAgent",
    metadata: { name: "a" },
    spec,
  });
  const secrets = new Map([["s/bmc", { password: "pw", username: "admin" }]]);

  test("groups every set of nodes that share a machine", () => {
    const spec: FenceAgentSpec = {
      type: "ipmi",
      nodes: {
        "node-1": { parameters: { address: "10.0.0.1" } },
        "node-2": { parameters: { address: "10.0.0.2" } },
        "node-3": { parameters: { address: "10.0.0.1" } },
      },
    };
    assert.deepEqual(duplicateTargets(spec, nodes, ipmiRules), [{ target: "10.0.0.1:623", nodes: ["node-1", "node-3"] }]);
  });

  test("checkAgent says DuplicateTarget, counting nodes outside the policies too", () => {
    const a = agent({
      type: "ipmi",
      credentialsSecretRef: { namespace: "s", name: "bmc" },
      nodes: { "node-1": { parameters: { address: "10.0.0.1" } }, "node-3": { parameters: { address: "10.0.0.1" } } },
    });
    const c = checkAgent(a, [nodes[0]!], secrets, nodes);
    assert.equal(c.reason, "DuplicateTarget");
    assert.match(c.message, /node-1, node-3 all resolve to 10\.0\.0\.1:623/);
    assert.equal(checkAgent(a, [nodes[0]!], secrets).reason, "Valid", "without the other Node, nothing is shared");
  });
});

describe("duplicateTargets at scale", () => {
  // The grouping as it was written first: every pair of one device's nodes compared. The indexed one must agree.
  function naive(spec: FenceAgentSpec, ns: readonly V1Node[]): { target: string; nodes: string[] }[] {
    const byDevice = new Map<string, { name: string; target: FencingTarget }[]>();
    for (const x of ns) {
      const target = targetOf(spec, x, apc);
      if (target) byDevice.set(target.device, [...(byDevice.get(target.device) ?? []), { name: x.metadata!.name!, target }]);
    }
    const groups: { target: string; nodes: string[] }[] = [];
    for (const list of byDevice.values()) {
      list.sort((a, b) => a.name.localeCompare(b.name));
      const seen = new Set<string>();
      for (const a of list) {
        if (seen.has(a.name)) continue;
        const same = list.filter((b) => b.name !== a.name && !seen.has(b.name) && sameMachine(a.target, b.target));
        if (same.length === 0) continue;
        for (const b of [a, ...same]) seen.add(b.name);
        const t = a.target;
        groups.push({
          target: `${t.device}${t.outlets.length ? ` plug ${t.outlets.join(",")}` : ""}`,
          nodes: [a.name, ...same.map((b) => b.name)],
        });
      }
    }
    return groups.sort((a, b) => a.nodes[0]!.localeCompare(b.nodes[0]!));
  }

  test("indexing outlets groups exactly as comparing every pair does (random PDUs, plugs and whole devices)", () => {
    let seed = 12;
    const rand = (n: number) => ((seed = (seed * 1103515245 + 12345) % 2 ** 31), seed % n);
    for (let round = 0; round < 300; round++) {
      const count = 1 + rand(12);
      const ns = Array.from({ length: count }, (_, i) => n(`node-${String.fromCharCode(97 + rand(26))}${i}`));
      const nodesSpec: Record<string, { parameters: Record<string, string> }> = {};
      for (const x of ns) {
        const plugs = [...new Set(Array.from({ length: rand(3) }, () => String(1 + rand(5))))];
        nodesSpec[x.metadata!.name!] = { parameters: { ip: `pdu-${rand(2)}`, ...(plugs.length ? { plug: plugs.join(",") } : {}) } };
      }
      const spec: FenceAgentSpec = { type: "fenceAgent", agent: "fence_apc", nodes: nodesSpec };
      assert.deepEqual(duplicateTargets(spec, ns, apc), naive(spec, ns), JSON.stringify(nodesSpec));
    }
  });

  test("one device driving 5,000 machines by plug: the duplicate found without comparing every pair", () => {
    const ns = Array.from({ length: 5000 }, (_, i) => n(`node-${i}`));
    const nodesSpec = Object.fromEntries(
      ns.map((x, i) => [x.metadata!.name!, { parameters: { ip: "vcenter", plug: `vm-${i === 4999 ? 7 : i}` } }]),
    );
    const spec: FenceAgentSpec = { type: "fenceAgent", agent: "fence_apc", nodes: nodesSpec };
    // Every comparison of two machines reads both devices: count the reads.
    let reads = 0;
    const counted = (t: FencingTarget) => new Proxy(t, { get: (o, k) => (k === "device" && reads++, o[k as keyof FencingTarget]) });
    const counting = { ...apc, target: (p: Record<string, string>, node?: string) => apc.target(p, node) && counted(apc.target(p, node)!) };
    assert.deepEqual(duplicateTargets(spec, ns, counting), [{ target: "vcenter:23 plug vm-7", nodes: ["node-4999", "node-7"] }]);
    assert.ok(reads < 4 * 5000, `${reads} reads of a device: every pair would be over 12 million`);
  });

  test("the check in steps yields every CHECK_CHUNK nodes and ends with checkAgent's answer", () => {
    const ns = Array.from({ length: 1000 }, (_, i) => n(`node-${i}`));
    const a: FenceAgent = {
      apiVersion: "stockade.io/v1alpha1",
      kind: "FenceAgent",
      metadata: { name: "pdu" },
      spec: { type: "ipmi", credentialsSecretRef: { namespace: "s", name: "bmc" }, nodeTemplates: { address: "{{ name }}.bmc" } },
    };
    const secrets = new Map([["s/bmc", { password: "pw", username: "admin" }]]);
    const steps = checkAgentInSteps(a, ns, secrets);
    let yields = 0;
    let r = steps.next();
    for (; !r.done; r = steps.next()) yields++;
    assert.deepEqual(r.value, checkAgent(a, ns, secrets));
    assert.equal(r.value.reason, "Valid");
    // 1,000 nodes' parameters, then 1,000 nodes' targets.
    assert.equal(yields, (2 * 1000) / CHECK_CHUNK);
  });
});

describe("targets remembered between checks (each Node version resolved once per spec)", () => {
  const PLUG = "node-restriction.kubernetes.io/plug";
  // Rules that count how often a target is resolved: apc's, by plug label.
  const counting = () => {
    const rules = { ...apc, calls: 0 };
    rules.target = (p, node) => (rules.calls++, apc.target(p, node));
    return rules;
  };
  const spec: FenceAgentSpec = {
    type: "fenceAgent",
    agent: "fence_apc",
    parameters: { ip: "pdu" },
    nodeTemplates: { plug: `{{ labels["${PLUG}"] }}` },
  };
  const v = (name: string, plug: string, rv: string): V1Node => ({ metadata: { name, resourceVersion: rv, labels: { [PLUG]: plug } } });
  const fleet = () => Array.from({ length: 1000 }, (_, i) => v(`node-${i}`, String(i), String(100 + i)));

  test("a second check over the same Node versions resolves only the node to fence", () => {
    const rules = counting();
    const all = fleet();
    assert.deepEqual(checkUniqueTarget("pdu", spec, all[0]!, all, rules), { ok: true });
    assert.equal(rules.calls, 1 + all.length);
    rules.calls = 0;
    assert.deepEqual(checkUniqueTarget("pdu", spec, all[1]!, all, rules), { ok: true });
    assert.equal(rules.calls, 1, "the others' targets were reused");
  });

  test("a Node changed since (new resourceVersion) is resolved again: a plug it now shares is found", () => {
    const rules = counting();
    const all = fleet();
    checkUniqueTarget("pdu", spec, all[0]!, all, rules);
    all[5] = v("node-5", "0", "5000"); // now on node-0's plug
    const r = checkUniqueTarget("pdu", spec, all[0]!, all, rules);
    assert.ok(!r.ok);
    assert.deepEqual(r.nodes, ["node-5"]);
    // The node to fence is always resolved as given (it may be a fresh read the cache has not seen yet).
    const fresh = v("node-7", "0", "107");
    const again = checkUniqueTarget("pdu", spec, fresh, all, rules);
    assert.ok(!again.ok);
    assert.deepEqual(again.nodes, ["node-0", "node-5"]);
  });

  test("a Node without a resourceVersion is resolved every time, even changed in place", () => {
    const rules = counting();
    const all = [n("a", { [PLUG]: "1" }), n("b", { [PLUG]: "2" })];
    assert.deepEqual(checkUniqueTarget("pdu", spec, all[0]!, all, rules), { ok: true });
    all[1]!.metadata!.labels![PLUG] = "1";
    assert.equal(checkUniqueTarget("pdu", spec, all[0]!, all, rules).ok, false);
  });

  test("another spec, or other rules, resolve again", () => {
    const rules = counting();
    const all = fleet();
    checkUniqueTarget("pdu", spec, all[0]!, all, rules);
    // Every node on one plug under the edited spec: a target remembered from the old spec would miss it.
    const edited: FenceAgentSpec = { ...spec, nodeTemplates: { plug: "1" } };
    const r = checkUniqueTarget("pdu", edited, all[0]!, all, rules);
    assert.ok(!r.ok);
    assert.equal(r.nodes.length, all.length - 1);
    const other = counting();
    checkUniqueTarget("pdu", spec, all[0]!, all, other);
    assert.equal(other.calls, 1 + all.length, "nothing shared between rules objects");
  });

  test("the FenceAgent's check and the fencing check share what they resolved", () => {
    const rules = counting();
    const all = fleet();
    assert.deepEqual(duplicateTargets(spec, all, rules), []);
    rules.calls = 0;
    assert.deepEqual(checkUniqueTarget("pdu", spec, all[3]!, all, rules), { ok: true });
    assert.equal(rules.calls, 1);
  });
});
