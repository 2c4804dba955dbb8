// Which FenceAgents are checked again after a FencingPolicy event: the check reads the policy's spec (which nodes
// each agent serves), never its status, which the fleet pass rewrites at every change of a burst of failures.
import { test } from "node:test";
import assert from "node:assert/strict";
import type { FencingPolicy } from "../../src/api/v1alpha1.ts";
import { agentsForPolicyEvent } from "../../src/controllers/fence-agent.ts";
import { agent, policy } from "./decide-fixtures.ts";

const agents = [agent("ipmi"), agent("pdu")];
const base = { ...policy("default"), metadata: { name: "default", generation: 1, resourceVersion: "1" } } as FencingPolicy;

test("a new or deleted policy, or a change of its spec, checks every agent again", () => {
  assert.deepEqual(agentsForPolicyEvent(agents, base), ["ipmi", "pdu"], "new (or deleted: no previous object)");
  const spec = {
    ...base,
    metadata: { ...base.metadata, generation: 2, resourceVersion: "2" },
    spec: { ...base.spec, nodeSelector: { matchLabels: { rack: "a" } } },
  };
  assert.deepEqual(agentsForPolicyEvent(agents, spec as FencingPolicy, base), ["ipmi", "pdu"]);
  const labels = { ...base, metadata: { ...base.metadata, resourceVersion: "3", labels: { team: "db" } } };
  assert.deepEqual(agentsForPolicyEvent(agents, labels, base), ["ipmi", "pdu"], "metadata too");
});

test("a write of the policy's status alone checks none", () => {
  const status = {
    ...base,
    metadata: { ...base.metadata, resourceVersion: "4" },
    status: { partitionedNodes: ["node-1"], activeFences: 1 },
  };
  assert.deepEqual(agentsForPolicyEvent(agents, status as FencingPolicy, base), []);
});
