// src/api/v1alpha1.ts is generated from crds/; this keeps a CRD change from shipping without its types.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import type { FenceAgentSpec, NodeFenceStatusAttempts } from "../../src/api/v1alpha1.ts";
import { generate, OUTPUT } from "../../tools/gen-api-types.ts";

test("src/api/v1alpha1.ts is what tools/gen-api-types.ts generates from crds/", async () => {
  assert.equal(readFileSync(OUTPUT, "utf8"), await generate(), "src/api/v1alpha1.ts is out of date: run npm run gen:api");
});

test("a NodeFence attempt's agentType accepts every FenceAgent type (else recording an attempt of a new type would fail every status write)", () => {
  type AgentType = FenceAgentSpec["type"];
  type Recorded = NonNullable<NodeFenceStatusAttempts["agentType"]>;
  // Both ways at compile time (npm run typecheck), and the enums' text in the generated types at run time.
  const same: [AgentType] extends [Recorded] ? ([Recorded] extends [AgentType] ? true : false) : false = true;
  assert.ok(same);
  const types = readFileSync(OUTPUT, "utf8");
  const agentEnum = /\n {2}type: ("[^;\n]+");/.exec(types)?.[1];
  const recordedEnum = /\n {2}agentType\?: ("[^;\n]+");/.exec(types)?.[1];
  assert.ok(agentEnum);
  assert.equal(recordedEnum, agentEnum);
});
