import { describe, test } from "node:test";
import assert from "node:assert/strict";
import type { V1Node } from "@kubernetes/client-node";
import { renderTemplate, resolveParameters, secretRefsFor, type FenceAgentSpec } from "../../src/agents/parameters.ts";

const node: V1Node = {
  metadata: {
    name: "node-1",
    labels: { "topology.kubernetes.io/zone": "a", rack: "r7" },
    annotations: { "lab.stockade.io/bmc-address": "10.0.0.7" },
  },
  spec: { providerID: "kwok://node-1" },
};
const shared = { namespace: "stockade-system", name: "bmc" };
const own = { namespace: "stockade-system", name: "bmc-node-1" };

function ok(r: ReturnType<typeof resolveParameters>): Record<string, string> {
  assert.ok("parameters" in r, `expected parameters, got errors: ${"errors" in r ? r.errors.join("; ") : ""}`);
  return r.parameters;
}
function errors(r: ReturnType<typeof resolveParameters>): string[] {
  assert.ok("errors" in r, "expected errors");
  return r.errors;
}

describe("templates", () => {
  test("name, providerID, labels and annotations, whitespace-tolerant, with surrounding text", () => {
    assert.deepEqual(renderTemplate("a", "{{name}}", node), { value: "node-1" });
    assert.deepEqual(renderTemplate("a", "{{   providerID }}", node), { value: "kwok://node-1" });
    assert.deepEqual(renderTemplate("a", '{{ labels["rack"] }}', node), { value: "r7" });
    assert.deepEqual(renderTemplate("a", "{{labels[ 'topology.kubernetes.io/zone' ]}}", node), { value: "a" });
    assert.deepEqual(renderTemplate("a", 'https://{{ annotations["lab.stockade.io/bmc-address"] }}:{{ name }}/x', node), {
      value: "https://10.0.0.7:node-1/x",
    });
    assert.deepEqual(renderTemplate("a", "plain", node), { value: "plain" });
  });

  test("a missing label or annotation names the template, the node and the key", () => {
    const r = renderTemplate("address", '{{ annotations["bmc/ip"] }}', node);
    assert.ok("error" in r);
    assert.match(r.error, /nodeTemplates\.address/);
    assert.match(r.error, /node-1/);
    assert.match(r.error, /no annotation "bmc\/ip"/);
    const l = renderTemplate("rack", '{{ labels["nope"] }}', node);
    assert.ok("error" in l && /no label "nope"/.test(l.error));
    const p = renderTemplate("id", "{{ providerID }}", { metadata: { name: "n" } });
    assert.ok("error" in p && /no spec\.providerID/.test(p.error));
  });

  test("unknown syntax is an error that says what is supported", () => {
    for (const t of ["{{ spec.podCIDR }}", "{{ labels[rack] }}", "{{ name", "name }}", "{{ }}", '{{ labels["a"] | upper }}']) {
      const r = renderTemplate("x", t, node);
      assert.ok("error" in r, `template ${t} should be refused`);
      assert.match(r.error, /nodeTemplates\.x/);
      assert.match(r.error, /node-1/);
    }
    const r = renderTemplate("x", "{{ spec.podCIDR }}", node);
    assert.ok("error" in r && /unsupported expression "spec\.podCIDR"/.test(r.error) && /labels\["key"\]/.test(r.error));
  });
});

describe("resolveParameters", () => {
  const spec: FenceAgentSpec = {
    type: "ipmi",
    parameters: { username: "shared", cipher: "3", port: "623", address: "shared-address" },
    nodeTemplates: { address: '{{ annotations["lab.stockade.io/bmc-address"] }}', port: '1{{ labels["rack"] }}' },
    nodes: { "node-1": { parameters: { port: "6231" } } },
    credentialsSecretRef: shared,
  };

  test("precedence: shared < templates < nodes[node].parameters < credentials Secret", () => {
    const secrets = new Map([["stockade-system/bmc", { password: "s3cret", username: "admin" }]]);
    assert.deepEqual(ok(resolveParameters(spec, node, secrets)), {
      username: "admin", // from the Secret
      cipher: "3",
      address: "10.0.0.7", // template over the shared value
      port: "6231", // node entry over the template
      password: "s3cret",
    });
    // Another node: no node entry, so the template wins over the shared port.
    const other: V1Node = { ...node, metadata: { ...node.metadata, name: "node-2" } };
    assert.equal(ok(resolveParameters(spec, other, secrets)).port, "1r7");
  });

  test("a node's own credentialsSecretRef replaces the shared one; secretRefsFor lists what to fetch", () => {
    const s: FenceAgentSpec = { ...spec, nodes: { "node-1": { credentialsSecretRef: own } } };
    assert.deepEqual(secretRefsFor(s, "node-1"), [own]);
    assert.deepEqual(secretRefsFor(s, "node-2"), [shared]);
    assert.deepEqual(secretRefsFor({ type: "manual" }, "node-1"), []);
    const secrets = new Map<string, Record<string, string>>([
      ["stockade-system/bmc", { password: "shared-pw" }],
      ["stockade-system/bmc-node-1", { password: "own-pw\n", extra_key: "k" }],
    ]);
    const p = ok(resolveParameters(s, node, secrets));
    assert.equal(p.password, "own-pw", "the trailing newline of a --from-file Secret is dropped");
    assert.equal(p.extra_key, "k", "every key of the Secret becomes a parameter");
  });

  test("a missing Secret, an empty one, and template errors are all reported together", () => {
    const s: FenceAgentSpec = { ...spec, nodeTemplates: { address: '{{ annotations["x"] }}', rack: "{{ nope }}" } };
    const errs = errors(resolveParameters(s, node, new Map()));
    assert.equal(errs.length, 3);
    assert.match(errs.join("\n"), /Secret stockade-system\/bmc \(credentialsSecretRef, credentials for node node-1\) was not found/);
    assert.match(errs.join("\n"), /nodeTemplates\.address .*node-1.*no annotation "x"/);
    assert.match(errs.join("\n"), /nodeTemplates\.rack .*unsupported expression "nope"/);
    assert.match(errors(resolveParameters(spec, node, new Map([["stockade-system/bmc", {}]])))[0]!, /has no keys/);
  });

  test("no Secret needed, no templates: just the shared parameters", () => {
    assert.deepEqual(ok(resolveParameters({ type: "manual", parameters: { a: "1" } }, node, new Map())), { a: "1" });
    assert.deepEqual(ok(resolveParameters({ type: "manual" }, node, new Map())), {});
  });

  test("the resolver does not modify the spec", () => {
    const copy = structuredClone(spec);
    resolveParameters(spec, node, new Map([["stockade-system/bmc", { password: "x" }]]));
    assert.deepEqual(spec, copy);
  });
});
