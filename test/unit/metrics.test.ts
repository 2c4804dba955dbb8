// The state gauges the alerts of manifests/monitoring/prometheus-rule.yaml read.
import { test } from "node:test";
import assert from "node:assert/strict";
import type { NodeFence } from "../../src/api/v1alpha1.ts";
import { IN_PROGRESS_PHASES, Metrics, nodeFencePhases } from "../../src/metrics.ts";

const fence = (name: string, created: string, phase?: NonNullable<NodeFence["status"]>["phase"]): NodeFence =>
  ({
    apiVersion: "stockade.io/v1alpha1",
    kind: "NodeFence",
    metadata: { name, creationTimestamp: created as unknown as Date },
    spec: { nodeName: name },
    ...(phase ? { status: { phase } } : {}),
  }) as NodeFence;

test("NodeFences by phase: how many and the oldest's age; no status yet is Pending", () => {
  const now = Date.parse("2026-11-27T12:00:00Z");
  const phases = nodeFencePhases(
    [
      fence("a", "2026-11-27T11:40:00Z", "Fencing"),
      fence("b", "2026-11-27T11:59:00Z", "Fencing"),
      fence("c", "2026-11-27T11:00:00Z", "Failed"),
      fence("d", "2026-11-27T11:59:30Z"),
    ],
    now,
  );
  assert.deepEqual(Object.fromEntries(phases), {
    Fencing: { count: 2, oldestSeconds: 1200 },
    Failed: { count: 1, oldestSeconds: 3600 },
    Pending: { count: 1, oldestSeconds: 30 },
  });
  assert.deepEqual(Object.fromEntries(nodeFencePhases([], now)), {});
  assert.ok(!(IN_PROGRESS_PHASES as readonly string[]).includes("Failed"));
  assert.ok(!(IN_PROGRESS_PHASES as readonly string[]).includes("Released"));
});

test("the gauges are exported under the names the alerts use", async () => {
  const m = new Metrics();
  m.nodeFences.set({ phase: "Failed" }, 1);
  m.nodeFenceOldest.set({ phase: "Fencing" }, 42);
  m.webhookCertificateExpiry.set({ certificate: "serving" }, 1_800_000_000);
  m.leader.set(1);
  const text = await m.registry.metrics();
  assert.match(text, /^stockade_nodefences\{phase="Failed"\} 1$/m);
  assert.match(text, /^stockade_nodefence_oldest_seconds\{phase="Fencing"\} 42$/m);
  assert.match(text, /^stockade_webhook_certificate_expiry_timestamp_seconds\{certificate="serving"\} 1800000000$/m);
  assert.match(text, /^stockade_leader 1$/m);
});
