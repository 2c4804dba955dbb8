// The scale bench runs the operator under the Deployment's memory limit (lab/memory-cgroup.ts), because Node.js
// sizes its heap from the limit it finds at start: measured without one, the operator is a process no container
// runs (a 128 MiB young generation on a 24 GiB host).
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { createMemoryCgroup, memoryQuantityBytes } from "../../lab/memory-cgroup.ts";

test("memory quantities read as Kubernetes writes them; anything else is refused", () => {
  assert.equal(memoryQuantityBytes("512Mi"), 512 * 2 ** 20);
  assert.equal(memoryQuantityBytes("2Gi"), 2 * 2 ** 30);
  assert.equal(memoryQuantityBytes("1G"), 1e9);
  assert.equal(memoryQuantityBytes("1000000"), 1e6);
  assert.throws(() => memoryQuantityBytes("512MB"), /not a memory quantity: 512MB \(e\.g\. 512Mi\)/);
});

test("a process started in a 512Mi memory cgroup sizes its heap from it, as the operator's container does", () => {
  const cg = createMemoryCgroup(`stockade-test-${process.pid}`, memoryQuantityBytes("512Mi"));
  try {
    const probe =
      "const v = require('v8'); console.log(JSON.stringify({ limit: v.getHeapStatistics().heap_size_limit, constrained: process.constrainedMemory() }))";
    const run = (args: string[]) =>
      JSON.parse(execFileSync(args[0]!, args.slice(1), { encoding: "utf8" })) as { limit: number; constrained: number };
    const inside = run(["/bin/sh", "-c", 'echo $$ > "$0" && exec "$@"', cg.procs, process.execPath, "-e", probe]);
    const outside = run([process.execPath, "-e", probe]);
    assert.equal(inside.constrained, 512 * 2 ** 20);
    assert.ok(inside.limit < 300 * 2 ** 20, `heap limit in the cgroup: ${inside.limit / 2 ** 20} MiB`);
    assert.ok(outside.limit > inside.limit, `outside: ${outside.limit / 2 ** 20} MiB`);
  } finally {
    cg.remove();
  }
});
