// Who decides which machine a node's parameters point at: templates may read only what a node's kubelet cannot
// write, and a credentials Secret may add credentials only, never override the spec.
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import type { V1Node } from "@kubernetes/client-node";
import { renderTemplate, resolveParameters, secretRefsFor, PROTECTED_LABEL, type FenceAgentSpec } from "../../src/agents/parameters.ts";
import { ipmiRules } from "../../src/agents/ipmi.ts";
import { rulesFromMetadata } from "../../src/agents/fence-agent.ts";
import { parseMetadata } from "../../src/agents/fence-metadata.ts";

const fixture = (agent: string) => readFileSync(join(import.meta.dirname, "../fixtures/fence-agents", `${agent}.xml`), "utf8");
const ipmilan = rulesFromMetadata(parseMetadata(fixture("fence_ipmilan")));

const node: V1Node = {
  metadata: {
    name: "node-1",
    labels: {
      "topology.kubernetes.io/zone": "a",
      rack: "r7",
      "node-restriction.kubernetes.io/bmc-host": "10.0.0.7",
      "bmc.node-restriction.kubernetes.io/port": "6231",
    },
    annotations: { "bmc.example.com/address": "10.6.6.6" },
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
  assert.ok("errors" in r, `expected errors, got ${JSON.stringify(r)}`);
  return r.errors;
}

describe("templates read only what a node's kubelet cannot write", () => {
  test("name, providerID and node-restriction.kubernetes.io/ labels (and subdomains), with surrounding text", () => {
    assert.deepEqual(renderTemplate("a", "{{name}}", node), { value: "node-1" });
    assert.deepEqual(renderTemplate("a", "{{   providerID }}", node), { value: "kwok://node-1" });
    assert.deepEqual(renderTemplate("a", '{{ labels["node-restriction.kubernetes.io/bmc-host"] }}', node), { value: "10.0.0.7" });
    assert.deepEqual(renderTemplate("a", "{{labels[ 'bmc.node-restriction.kubernetes.io/port' ]}}", node), { value: "6231" });
    assert.deepEqual(renderTemplate("a", "https://{{ name }}.bmc.example.com/x", node), { value: "https://node-1.bmc.example.com/x" });
    assert.deepEqual(renderTemplate("a", "plain", node), { value: "plain" });
  });

  test("annotations are refused, saying that the kubelet can write them and what to use instead", () => {
    const r = renderTemplate("address", '{{ annotations["bmc.example.com/address"] }}', node);
    assert.ok("error" in r, "an annotation must not resolve");
    assert.match(r.error, /nodeTemplates\.address .* for node node-1: annotations cannot be used/);
    assert.match(r.error, /a node's kubelet may write it on its own Node, so a compromised node could point Stockade at another machine/);
    assert.match(r.error, /spec\.nodes\.node-1\.parameters, or in a label under node-restriction\.kubernetes\.io\//);
  });

  test("labels outside node-restriction.kubernetes.io/ are refused, even ones that exist", () => {
    for (const key of [
      "rack",
      "topology.kubernetes.io/zone",
      "node-restriction.kubernetes.io.evil.com/x",
      "xnode-restriction.kubernetes.io/x",
    ]) {
      const r = renderTemplate("address", `{{ labels["${key}"] }}`, node);
      assert.ok("error" in r, key);
      assert.match(r.error, new RegExp(`label "${key.replaceAll(".", "\\.")}" is not under node-restriction\\.kubernetes\\.io/`));
    }
    assert.ok(PROTECTED_LABEL.test("node-restriction.kubernetes.io/a") && PROTECTED_LABEL.test("a.b.node-restriction.kubernetes.io/c"));
  });

  test("a missing label or providerID names the template, the node and the key", () => {
    const l = renderTemplate("rack", '{{ labels["node-restriction.kubernetes.io/nope"] }}', node);
    assert.ok(
      "error" in l && /nodeTemplates\.rack .*node-1: node node-1 has no label "node-restriction\.kubernetes\.io\/nope"/.test(l.error),
    );
    const p = renderTemplate("id", "{{ providerID }}", { metadata: { name: "n" } });
    assert.ok("error" in p && /no spec\.providerID/.test(p.error));
  });

  test("unknown syntax is an error that says what is supported", () => {
    for (const t of ["{{ spec.podCIDR }}", "{{ labels[rack] }}", "{{ name", "name }}", "{{ }}", '{{ labels["a"] | upper }}']) {
      const r = renderTemplate("x", t, node);
      assert.ok("error" in r, `template ${t} should be refused`);
      assert.match(r.error, /nodeTemplates\.x/);
    }
    const r = renderTemplate("x", "{{ spec.podCIDR }}", node);
    assert.ok(
      "error" in r && /unsupported expression "spec\.podCIDR"/.test(r.error) && /node-restriction\.kubernetes\.io\/<key>/.test(r.error),
    );
  });
});

describe("resolveParameters", () => {
  const spec: FenceAgentSpec = {
    type: "ipmi",
    parameters: { cipher: "3", port: "623", address: "shared-address" },
    nodeTemplates: {
      address: '{{ labels["node-restriction.kubernetes.io/bmc-host"] }}',
      port: '{{ labels["bmc.node-restriction.kubernetes.io/port"] }}',
    },
    nodes: { "node-1": { parameters: { port: "6232" } } },
    credentialsSecretRef: shared,
  };
  const secrets = new Map([["stockade-system/bmc", { password: "s3cret", username: "admin" }]]);

  test("precedence: shared < templates < nodes[node].parameters; the Secret adds credentials", () => {
    assert.deepEqual(ok(resolveParameters(spec, node, secrets, ipmiRules)), {
      cipher: "3",
      address: "10.0.0.7", // template over the shared value
      port: "6232", // node entry over the template
      username: "admin", // from the Secret
      password: "s3cret",
    });
    const other: V1Node = { ...node, metadata: { ...node.metadata, name: "node-2" } };
    assert.equal(ok(resolveParameters(spec, other, secrets, ipmiRules)).port, "6231", "no node entry: the template wins");
  });

  test("a Secret key can never silently override a value the spec set", () => {
    const s: FenceAgentSpec = { ...spec, parameters: { ...spec.parameters, username: "from-spec" } };
    const errs = errors(resolveParameters(s, node, secrets, ipmiRules));
    assert.deepEqual(errs, [
      "username is set both in spec.parameters and in Secret stockade-system/bmc (credentialsSecretRef, credentials for node node-1): keep it in one place (a Secret never overrides the spec)",
    ]);
    const perNode: FenceAgentSpec = { ...spec, nodes: { "node-1": { parameters: { username: "x" } } } };
    assert.match(
      errors(resolveParameters(perNode, node, secrets, ipmiRules))[0]!,
      /username is set both in spec\.nodes\.node-1\.parameters and in Secret/,
    );
  });

  test("a Secret may supply only credentials: an address, a port or a script in it is an error naming the key", () => {
    const bad = new Map([["stockade-system/bmc", { password: "pw", address: "10.9.9.9", port: "1" }]]);
    const errs = errors(resolveParameters(spec, node, bad, ipmiRules));
    assert.equal(errs.length, 2);
    assert.match(
      errs[0]!,
      /Secret stockade-system\/bmc .* has key address, which is not a credential of ipmi: a credentials Secret may hold only username, password; move address to spec\.nodes\.node-1\.parameters/,
    );
    assert.match(errs[1]!, /has key port, which is not a credential of ipmi/);

    const fa: FenceAgentSpec = { type: "fenceAgent", agent: "fence_ipmilan", parameters: { ip: "10.0.0.1" }, credentialsSecretRef: shared };
    const fas = (data: Record<string, string>) =>
      errors(resolveParameters(fa, node, new Map([["stockade-system/bmc", data]]), ipmilan)).join("\n");
    assert.match(fas({ password: "pw", ip: "10.6.6.6" }), /has key ip, which is not a credential of fence_ipmilan/);
    assert.match(fas({ password: "pw", ipport: "9999" }), /has key ipport, which is not a credential/);
    assert.match(
      fas({ password_script: "cat /x" }),
      /has key password_script, which is not a credential of fence_ipmilan: password_script runs a program/,
    );
    assert.match(
      fas({ passwd: "pw" }),
      /has key passwd, which is not a credential of fence_ipmilan: passwd is a deprecated alias: use password/,
    );
    assert.deepEqual(
      ok(
        resolveParameters(
          fa,
          node,
          new Map([["stockade-system/bmc", { password: "pw\n", username: "u", hexadecimal_kg: "00ff" }]]),
          ipmilan,
        ),
      ),
      {
        ip: "10.0.0.1",
        password: "pw",
        username: "u",
        hexadecimal_kg: "00ff",
      },
    );
  });

  test("a credential only a Secret may hold is refused in the spec, from any layer", () => {
    const s: FenceAgentSpec = { type: "fenceAgent", agent: "fence_ipmilan", nodes: { "node-1": { parameters: { password: "in-spec" } } } };
    assert.deepEqual(errors(resolveParameters(s, node, new Map(), ipmilan)), [
      "spec.nodes.node-1.parameters sets password, a credential: put it in the Secret named by credentialsSecretRef, never in the spec",
    ]);
    const t: FenceAgentSpec = { type: "fenceAgent", agent: "fence_ipmilan", nodeTemplates: { hexadecimal_kg: "{{ name }}" } };
    assert.match(
      errors(resolveParameters(t, node, new Map(), ipmilan))[0]!,
      /spec\.nodeTemplates\.hexadecimal_kg sets hexadecimal_kg, a credential/,
    );
  });

  test("a node's own credentialsSecretRef replaces the shared one; secretRefsFor lists what to fetch", () => {
    const s: FenceAgentSpec = { ...spec, nodes: { "node-1": { credentialsSecretRef: own } } };
    assert.deepEqual(secretRefsFor(s, "node-1"), [own]);
    assert.deepEqual(secretRefsFor(s, "node-2"), [shared]);
    assert.deepEqual(secretRefsFor({ type: "manual" }, "node-1"), []);
    const both = new Map<string, Record<string, string>>([
      ["stockade-system/bmc", { password: "shared-pw" }],
      ["stockade-system/bmc-node-1", { password: "own-pw\n" }],
    ]);
    assert.equal(
      ok(resolveParameters(s, node, both, ipmiRules)).password,
      "own-pw",
      "the trailing newline of a --from-file Secret is dropped",
    );
  });

  test("a missing Secret, an empty one, and template errors are all reported together", () => {
    const s: FenceAgentSpec = { ...spec, nodeTemplates: { address: '{{ annotations["x"] }}', rack: "{{ nope }}" } };
    const errs = errors(resolveParameters(s, node, new Map(), ipmiRules));
    assert.equal(errs.length, 3);
    assert.match(errs.join("\n"), /Secret stockade-system\/bmc \(credentialsSecretRef, credentials for node node-1\) was not found/);
    assert.match(errs.join("\n"), /nodeTemplates\.address .*node-1: annotations cannot be used/);
    assert.match(errs.join("\n"), /nodeTemplates\.rack .*unsupported expression "nope"/);
    assert.match(errors(resolveParameters(spec, node, new Map([["stockade-system/bmc", {}]]), ipmiRules))[0]!, /has no keys/);
  });

  test("without rules given, they come from the type; a missing fence agent is an error, not a throw", () => {
    assert.deepEqual(ok(resolveParameters({ type: "manual", parameters: { a: "1" } }, node, new Map())), { a: "1" });
    assert.equal(ok(resolveParameters(spec, node, secrets)).address, "10.0.0.7");
    assert.match(
      errors(resolveParameters({ type: "fenceAgent", agent: "fence_not_installed_here" }, node, new Map()))[0]!,
      /was not found/,
    );
  });

  test("the resolver does not modify the spec", () => {
    const copy = structuredClone(spec);
    resolveParameters(spec, node, secrets, ipmiRules);
    assert.deepEqual(spec, copy);
  });
});
