// The CRDs' `kubectl get` columns answer the first question about each kind: is it Ready, what type, what
// phase; no column repeats the object's name, and no level is shown counted from 0 (status.levelNumber counts from 1).
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { loadYaml } from "@kubernetes/client-node";

interface Column {
  name: string;
  type: string;
  jsonPath: string;
}
interface Crd {
  spec: { names: { kind: string }; versions: { name: string; additionalPrinterColumns?: Column[] }[] };
}

const columns = (file: string): Column[] => {
  const crd = loadYaml<Crd>(readFileSync(new URL(`../../crds/${file}`, import.meta.url), "utf8"));
  return crd.spec.versions.find((v) => v.name === "v1alpha1")!.additionalPrinterColumns ?? [];
};
const READY = '.status.conditions[?(@.type=="Ready")].status';

test("FenceAgent: Type (every agent type), the fence_* Agent, Ready, Age", () => {
  assert.deepEqual(
    columns("stockade.io_fenceagents.yaml").map((c) => [c.name, c.jsonPath]),
    [
      ["Type", ".spec.type"],
      ["Agent", ".spec.agent"],
      ["Ready", READY],
      ["Age", ".metadata.creationTimestamp"],
    ],
  );
});

test("FencingPolicy: Ready first, then what it does and what holds it back", () => {
  const cols = columns("stockade.io_fencingpolicies.yaml");
  assert.deepEqual({ ...cols[0] }, { name: "Ready", type: "string", jsonPath: READY });
  assert.deepEqual(
    cols.map((c) => c.name),
    ["Ready", "Action", "DryRun", "Paused", "StormGuard", "Age"],
  );
});

test("NodeFence: no column repeats the name (the node's); the Level column counts from 1 (status.levelNumber)", () => {
  const cols = columns("stockade.io_nodefences.yaml");
  assert.deepEqual(
    cols.map((c) => c.name),
    ["Phase", "Origin", "Level", "Evidence", "Age"],
  );
  assert.deepEqual(
    { ...cols.find((c) => c.name === "Level") },
    {
      name: "Level",
      type: "integer",
      description: "The escalation level being tried, or the one that confirmed the fence, counted from 1.",
      jsonPath: ".status.levelNumber",
    },
  );
  for (const c of cols) {
    assert.notEqual(c.jsonPath, ".spec.nodeName", c.name);
    assert.notEqual(c.jsonPath, ".status.currentLevel", c.name);
  }
});

test("FenceRecord: its node (the name is the node's and an id), outcome, who asked, evidence, level from 1, when", () => {
  assert.deepEqual(
    columns("stockade.io_fencerecords.yaml").map((c) => [c.name, c.jsonPath]),
    [
      ["Node", ".spec.nodeName"],
      ["Outcome", ".status.outcome"],
      ["Origin", ".spec.origin"],
      ["Evidence", ".status.evidence.method"],
      ["Level", ".status.levelNumber"],
      ["Started", ".status.startTime"],
      ["Ended", ".status.endTime"],
    ],
  );
});

test("no column of any kind is the object's name or a level counted from 0", () => {
  for (const f of [
    "stockade.io_fenceagents.yaml",
    "stockade.io_fencingpolicies.yaml",
    "stockade.io_nodefences.yaml",
    "stockade.io_fencerecords.yaml",
  ])
    for (const c of columns(f)) {
      assert.notEqual(c.jsonPath, ".metadata.name", `${f} ${c.name}`);
      assert.doesNotMatch(c.jsonPath, /currentLevel/, `${f} ${c.name}`);
    }
});
