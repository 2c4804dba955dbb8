import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { governingPolicy, matchesSelector, policyForNode } from "../../src/decide/selectors.ts";
import { node, policy } from "./decide-fixtures.ts";

const labels = { "topology.kubernetes.io/zone": "a", role: "db", tier: "" };

describe("matchesSelector", () => {
  test("an empty or missing selector matches everything, labels or not", () => {
    assert.equal(matchesSelector(labels, {}), true);
    assert.equal(matchesSelector(labels, undefined), true);
    assert.equal(matchesSelector(undefined, {}), true);
    assert.equal(matchesSelector({}, { matchLabels: {}, matchExpressions: [] }), true);
  });

  test("matchLabels: every pair must be present with the same value", () => {
    assert.equal(matchesSelector(labels, { matchLabels: { role: "db" } }), true);
    assert.equal(matchesSelector(labels, { matchLabels: { role: "db", "topology.kubernetes.io/zone": "a" } }), true);
    assert.equal(matchesSelector(labels, { matchLabels: { role: "db", "topology.kubernetes.io/zone": "b" } }), false);
    assert.equal(matchesSelector(labels, { matchLabels: { missing: "x" } }), false);
    assert.equal(matchesSelector(undefined, { matchLabels: { role: "db" } }), false);
  });

  test("matchLabels with an empty value needs the label present and empty", () => {
    assert.equal(matchesSelector(labels, { matchLabels: { tier: "" } }), true);
    assert.equal(matchesSelector({}, { matchLabels: { tier: "" } }), false);
  });

  test("In: the label must exist with one of the values", () => {
    assert.equal(matchesSelector(labels, { matchExpressions: [{ key: "role", operator: "In", values: ["web", "db"] }] }), true);
    assert.equal(matchesSelector(labels, { matchExpressions: [{ key: "role", operator: "In", values: ["web"] }] }), false);
    assert.equal(matchesSelector(labels, { matchExpressions: [{ key: "missing", operator: "In", values: [""] }] }), false);
    assert.equal(matchesSelector(labels, { matchExpressions: [{ key: "tier", operator: "In", values: [""] }] }), true);
  });

  test("NotIn: matches when the label is absent or has another value", () => {
    assert.equal(matchesSelector(labels, { matchExpressions: [{ key: "role", operator: "NotIn", values: ["web"] }] }), true);
    assert.equal(matchesSelector(labels, { matchExpressions: [{ key: "role", operator: "NotIn", values: ["db"] }] }), false);
    assert.equal(matchesSelector(labels, { matchExpressions: [{ key: "missing", operator: "NotIn", values: ["x"] }] }), true);
  });

  test("Exists and DoesNotExist look only at the key", () => {
    assert.equal(matchesSelector(labels, { matchExpressions: [{ key: "tier", operator: "Exists" }] }), true);
    assert.equal(matchesSelector(labels, { matchExpressions: [{ key: "missing", operator: "Exists" }] }), false);
    assert.equal(matchesSelector(labels, { matchExpressions: [{ key: "missing", operator: "DoesNotExist" }] }), true);
    assert.equal(matchesSelector(labels, { matchExpressions: [{ key: "role", operator: "DoesNotExist" }] }), false);
  });

  test("keys inherited from Object.prototype are not labels", () => {
    assert.equal(matchesSelector({}, { matchExpressions: [{ key: "toString", operator: "Exists" }] }), false);
    assert.equal(matchesSelector({}, { matchExpressions: [{ key: "constructor", operator: "DoesNotExist" }] }), true);
  });

  test("every requirement must hold (AND of matchLabels and all expressions)", () => {
    const sel = {
      matchLabels: { role: "db" },
      matchExpressions: [
        { key: "topology.kubernetes.io/zone", operator: "In", values: ["a", "b"] },
        { key: "gpu", operator: "DoesNotExist" },
      ],
    };
    assert.equal(matchesSelector(labels, sel), true);
    assert.equal(matchesSelector({ ...labels, gpu: "1" }, sel), false);
    assert.equal(matchesSelector({ ...labels, role: "web" }, sel), false);
    assert.equal(matchesSelector({ ...labels, "topology.kubernetes.io/zone": "c" }, sel), false);
  });
});

describe("policyForNode", () => {
  const db = node("db-1", { labels: { role: "db" } });
  const web = node("web-1", { labels: { role: "web" } });

  test("the only matching policy governs, with no conflicts", () => {
    const ps = [
      policy("dbs", { nodeSelector: { matchLabels: { role: "db" } } }),
      policy("webs", { nodeSelector: { matchLabels: { role: "web" } } }),
    ];
    const r = policyForNode(db, ps);
    assert.equal(r.policy?.metadata.name, "dbs");
    assert.deepEqual(r.conflicts, []);
    assert.equal(policyForNode(web, ps).policy?.metadata.name, "webs");
  });

  test("no match: undefined, no conflicts", () => {
    const r = policyForNode(node("gpu-1", { labels: { role: "gpu" } }), [policy("dbs", { nodeSelector: { matchLabels: { role: "db" } } })]);
    assert.equal(r.policy, undefined);
    assert.deepEqual(r.conflicts, []);
    assert.equal(policyForNode(db, []).policy, undefined);
  });

  test("several matches: the first by name governs, whatever the input order; the others are conflicts", () => {
    const ps = [
      policy("zeta"),
      policy("alpha", { nodeSelector: { matchLabels: { role: "db" } } }),
      policy("mid"),
      policy("webs-only", { nodeSelector: { matchLabels: { role: "web" } } }),
    ];
    const r = policyForNode(db, ps);
    assert.equal(r.policy?.metadata.name, "alpha");
    assert.deepEqual(
      r.conflicts.map((p) => p.metadata.name),
      ["mid", "zeta"],
    );
    const reversed = policyForNode(db, [...ps].reverse());
    assert.equal(reversed.policy?.metadata.name, "alpha");
    assert.deepEqual(
      reversed.conflicts.map((p) => p.metadata.name),
      ["mid", "zeta"],
    );
  });

  test("does not reorder the caller's list", () => {
    const ps = [policy("b"), policy("a")];
    policyForNode(db, ps);
    assert.deepEqual(
      ps.map((p) => p.metadata.name),
      ["b", "a"],
    );
  });

  test("a node without labels is selected only by selectors that need none", () => {
    const bare = node("n");
    bare.metadata!.labels = undefined;
    const r = policyForNode(bare, [
      policy("needs-role", { nodeSelector: { matchLabels: { role: "db" } } }),
      policy("no-gpu", { nodeSelector: { matchExpressions: [{ key: "gpu", operator: "DoesNotExist" }] } }),
    ]);
    assert.equal(r.policy?.metadata.name, "no-gpu");
  });
});

describe("governingPolicy", () => {
  test("chooses as policyForNode does, over every order of a mixed set of policies", () => {
    const ps = [
      policy("zeta"),
      policy("alpha", { nodeSelector: { matchLabels: { role: "db" } } }),
      policy("mid", { nodeSelector: { matchExpressions: [{ key: "role", operator: "In", values: ["db", "web"] }] } }),
      policy("beta", { nodeSelector: { matchLabels: { role: "web" } } }),
      policy("aa-gpu", { nodeSelector: { matchLabels: { role: "gpu" } } }),
    ];
    const nodes = ["db", "web", "gpu", "none"].map((r) => node(`${r}-1`, { labels: { role: r } }));
    const orders = [ps, [...ps].reverse(), [ps[2]!, ps[0]!, ps[4]!, ps[1]!, ps[3]!]];
    for (const n of nodes)
      for (const o of orders) {
        assert.equal(governingPolicy(n, o), policyForNode(n, o).policy, `${n.metadata?.name} over ${o.map((p) => p.metadata.name)}`);
        for (let k = 0; k <= o.length; k++) assert.equal(governingPolicy(n, o.slice(k)), policyForNode(n, o.slice(k)).policy);
      }
    assert.equal(governingPolicy(nodes[0]!, ps)?.metadata.name, "alpha");
    assert.equal(governingPolicy(nodes[3]!, ps)?.metadata.name, "zeta");
    assert.equal(governingPolicy(nodes[0]!, []), undefined);
  });

  test("matchLabels reads only the selector's own keys", () => {
    const inherited = Object.create({ role: "web" }) as Record<string, string>;
    inherited.zone = "a";
    assert.equal(matchesSelector({ zone: "a", role: "db" }, { matchLabels: inherited }), true);
    assert.equal(matchesSelector({ zone: "b", role: "db" }, { matchLabels: inherited }), false);
  });
});
