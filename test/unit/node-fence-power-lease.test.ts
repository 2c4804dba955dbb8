// Issue 31: before each power-off try the NodeFence controller re-reads the Node and its Lease, and measures the
// fresh Lease by what its caches observed (the operator's monotonic clock), never by renewTime's value.
import { test } from "node:test";
import assert from "node:assert/strict";
import type { V1Lease } from "@kubernetes/client-node";
import type { NodeFence } from "../../src/api/v1alpha1.ts";
import { beforePowerCommand } from "../../src/controllers/node-fence/destructive.ts";
import { T0, at, lease, node, policy } from "./decide-fixtures.ts";

const fence: NodeFence = {
  apiVersion: "stockade.io/v1alpha1",
  kind: "NodeFence",
  metadata: { name: "node-1", uid: "uid-f" },
  spec: { nodeName: "node-1", origin: "Automatic" },
  status: { phase: "Fencing", policy: "default" },
};

function guard(observedMs: number) {
  const asked: { node: string; renewTime: unknown }[] = [];
  const c = {
    d: {
      // Silent since T0 on the wall clock (1,000 s), Ready still True: only its Lease can make it partitioned.
      kube: { readNode: async () => node("node-1", { ready: "True", heartbeat: T0 }), readLease: async () => lease("node-1", T0, 40) },
      clock: () => at(1000),
      caches: {
        policies: { list: () => [policy("default")] },
        podsOn: () => [],
        leaseSilentForMs: (n: string, l: V1Lease) => (asked.push({ node: n, renewTime: l.spec?.renewTime }), observedMs),
      },
    },
    leadership: { assertLeading() {} },
  };
  return { check: beforePowerCommand(c as never, fence), asked };
}

test("issue 31: a power-off try is refused while the fresh Lease was not seen unrenewed for its duration, whatever its renewTime", async () => {
  const fresh = guard(0); // the fresh read's renewTime differs from the cache's: seen just now
  await assert.rejects(fresh.check("off"), /heartbeats again/);
  assert.equal(fresh.asked.length, 1, "the caches' observer is asked about the fresh Lease");
  assert.equal(fresh.asked[0]!.node, "node-1");
  await assert.rejects(guard(39_999).check("off"), /heartbeats again/);
  await guard(40_000).check("off"); // seen unrenewed for its 40 s: partitioned by its Lease, the try goes on
});
