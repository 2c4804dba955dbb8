// The Grafana dashboard only charts metrics the operator exports.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { repoRoot } from "../../lab/bins.ts";
import { Metrics } from "../../src/metrics.ts";

test("every stockade_* series in manifests/grafana/stockade-dashboard.json is exported", async () => {
  const dash = JSON.parse(readFileSync(join(repoRoot, "manifests/grafana/stockade-dashboard.json"), "utf8")) as {
    panels: { title: string; targets: { expr: string }[] }[];
  };
  const exported = new Set((await new Metrics().registry.getMetricsAsJSON()).map((m) => m.name));
  const used = new Set(
    dash.panels
      .flatMap((p) => p.targets.flatMap((t) => t.expr.match(/stockade_\w+/g) ?? []))
      .map((n) => n.replace(/_(bucket|sum|count)$/, "")),
  );
  assert.ok(used.size >= 10, `the dashboard charts ${used.size} metrics`);
  for (const n of used) assert.ok(exported.has(n), `${n} is charted but not exported`);
  for (const n of exported) if (n.startsWith("stockade_")) assert.ok(used.has(n), `${n} is exported but not charted`);
});
