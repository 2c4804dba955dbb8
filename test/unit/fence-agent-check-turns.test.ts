// The FenceAgent controller checks every agent each minute over every node its policies give it. At 5,000 nodes that
// is most of a second of work: done in one go, it held the operator's event loop (and every fence's round trips) for
// that long. The controller runs it in steps and lets other work run between two.
import { test } from "node:test";
import assert from "node:assert/strict";
import { setImmediate } from "node:timers/promises";
import { DateTime } from "luxon";
import pino from "pino";
import type { V1Node } from "@kubernetes/client-node";
import type { FenceAgent } from "../../src/api/v1alpha1.ts";
import { FenceAgentController, type FenceAgentDeps } from "../../src/controllers/fence-agent.ts";
import { CHECK_CHUNK } from "../../src/agents/targets.ts";
import { policy } from "./decide-fixtures.ts";

test("an agent's check over 3,000 nodes lets the event loop run between its steps, and ends Ready", async () => {
  const nodes: V1Node[] = Array.from({ length: 3000 }, (_, i) => ({ metadata: { name: `node-${i}` } }));
  const agent: FenceAgent = {
    apiVersion: "stockade.io/v1alpha1",
    kind: "FenceAgent",
    metadata: { name: "ipmi", generation: 1 },
    spec: {
      type: "ipmi",
      credentialsSecretRef: { namespace: "stockade-system", name: "bmc" },
      nodeTemplates: { address: "{{ name }}.bmc" },
    },
  };
  const written: FenceAgent[] = [];
  const deps = {
    kube: {
      readSecret: async () => ({ username: "admin", password: "pw" }),
      replaceStatus: async (_: string, a: FenceAgent) => (written.push(a), a),
    },
    caches: { agents: { get: () => agent }, nodes: { list: () => nodes }, policies: { list: () => [policy("default")] } },
    events: { record: async () => {} },
    log: pino({ level: "silent" }),
    clock: () => DateTime.fromISO("2026-11-27T00:00:00Z"),
  } as unknown as FenceAgentDeps;

  let done = false;
  let turns = 0;
  const ticking = (async () => {
    while (!done) {
      await setImmediate();
      turns++;
    }
  })();
  const r = await new FenceAgentController(deps).reconcile("ipmi");
  done = true;
  await ticking;

  assert.deepEqual(r, { requeueAfterMs: 60_000 });
  assert.equal(written.at(-1)?.status?.conditions?.find((c) => c.type === "Ready")?.status, "True");
  // 3,000 nodes' parameters, then 3,000 nodes' targets: a turn of the loop after each step at least.
  assert.ok(turns >= (2 * 3000) / CHECK_CHUNK, `the loop turned ${turns} times during the check`);
});
