// manifests/monitoring/prometheus-rule.yaml alerts only on what the operator really exports: every metric (and
// label matcher) in every expression is registered by its metrics registry, and every alert says how bad it is,
// what happened and what to do (a runbook section that exists in docs/operate.md).
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { loadAllYaml } from "@kubernetes/client-node";
import { Metrics } from "../../src/metrics.ts";

const root = join(import.meta.dirname, "../..");
const operate = readFileSync(join(root, "docs/operate.md"), "utf8");

interface Rule {
  alert?: string;
  expr: string;
  for?: string;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
}
const [ruleFile] = loadAllYaml(readFileSync(join(root, "manifests/monitoring/prometheus-rule.yaml"), "utf8")) as {
  apiVersion: string;
  kind: string;
  metadata: { name: string; namespace: string };
  spec: { groups: { name: string; rules: Rule[] }[] };
}[];
const rules = ruleFile!.spec.groups.flatMap((g) => g.rules);

/** Series names the registry exposes, each with the label names a matcher may use. */
function exported(): Map<string, Set<string>> {
  // Labels Prometheus adds to every scraped series (its target labels), usable in any matcher.
  const target = ["job", "instance", "namespace", "pod", "service", "endpoint", "container"];
  const out = new Map<string, Set<string>>();
  for (const m of new Metrics().registry.getMetricsAsArray()) {
    const labels = new Set([...((m as unknown as { labelNames?: string[] }).labelNames ?? []), ...target]);
    const type = m.constructor.name;
    if (type === "Histogram") {
      out.set(`${m.name}_bucket`, new Set([...labels, "le"]));
      out.set(`${m.name}_sum`, labels);
      out.set(`${m.name}_count`, labels);
    } else if (type === "Summary") {
      out.set(m.name, new Set([...labels, "quantile"]));
      out.set(`${m.name}_sum`, labels);
      out.set(`${m.name}_count`, labels);
    } else out.set(m.name, labels);
  }
  return out;
}

const KEYWORDS = new Set([
  "and",
  "or",
  "unless",
  "bool",
  "offset",
  "by",
  "without",
  "on",
  "ignoring",
  "group_left",
  "group_right",
  "inf",
  "nan",
]);

/** The metric names and the label names of their matchers in a PromQL expression (functions and keywords left out). */
function selectors(expr: string): { metric: string; labels: string[] }[] {
  let e = expr.replace(/"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'/g, '""'); // strings may hold anything
  e = e.replace(/\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)/g, " "); // grouping labels
  e = e.replace(/\[[^\]]*\]/g, " "); // ranges and subqueries
  const out: { metric: string; labels: string[] }[] = [];
  e = e.replace(/([a-zA-Z_:][a-zA-Z0-9_:]*)?\s*\{([^}]*)\}/g, (_, metric: string | undefined, body: string) => {
    const labels = [...body.matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)/g)].map((m) => m[1]!);
    const name = labels.includes("__name__") ? undefined : metric;
    out.push({ metric: name ?? "", labels: labels.filter((l) => l !== "__name__") });
    return " ";
  });
  for (const m of e.matchAll(/(?<![\w.:])([a-zA-Z_:][a-zA-Z0-9_:]*)(?![\w:])(?!\s*\()/g))
    if (!KEYWORDS.has(m[1]!.toLowerCase())) out.push({ metric: m[1]!, labels: [] });
  return out;
}

/** Why the expression names something the operator does not export, or [] when it names only what it does. */
function unknownIn(expr: string, series: Map<string, Set<string>>): string[] {
  const problems: string[] = [];
  const used = selectors(expr);
  if (!used.some((s) => s.metric)) problems.push("no metric at all");
  for (const s of used) {
    const labels = series.get(s.metric);
    if (!labels) problems.push(`metric ${s.metric || "(selected by labels only)"} is not exported`);
    else for (const l of s.labels) if (!labels.has(l)) problems.push(`${s.metric} has no label ${l}`);
  }
  return problems;
}

test("the checker reads PromQL: metrics, matchers, functions, groupings, ranges", () => {
  assert.deepEqual(selectors('max by (phase) (rate(stockade_x_total{phase=~"A|B", agent!="y"}[5m])) > 0 or vector(0)'), [
    { metric: "stockade_x_total", labels: ["phase", "agent"] },
  ]);
  assert.deepEqual(selectors("min(a_seconds) - time() < 14 * 86400 and on(pod) b"), [
    { metric: "a_seconds", labels: [] },
    { metric: "b", labels: [] },
  ]);
  const series = exported();
  assert.deepEqual(unknownIn("max(stockade_leader) < 1", series), []);
  assert.deepEqual(unknownIn("max(stockade_no_such_metric) > 0", series), ["metric stockade_no_such_metric is not exported"]);
  assert.deepEqual(unknownIn('max(stockade_leader{phase="x"}) > 0', series), ["stockade_leader has no label phase"]);
  assert.deepEqual(unknownIn("up == 0", series), ["metric up is not exported"]);
  assert.deepEqual(unknownIn("vector(1) > 0", series), ["no metric at all"]);
  assert.deepEqual(unknownIn("histogram_quantile(0.9, sum by (le) (rate(stockade_fence_duration_seconds_bucket[5m])))", series), []);
});

test("every alert's expression uses only metrics and labels the operator exports", () => {
  assert.equal(ruleFile!.kind, "PrometheusRule");
  assert.equal(ruleFile!.apiVersion, "monitoring.coreos.com/v1");
  assert.equal(ruleFile!.metadata.namespace, "stockade-system");
  const series = exported();
  for (const r of rules) assert.deepEqual(unknownIn(r.expr, series), [], `${r.alert}: ${r.expr}`);
});

test("the alerts cover what a person must act on, each with severity, summary and a runbook in docs/operate.md", () => {
  assert.deepEqual(rules.map((r) => r.alert).sort(), [
    "StockadeAdmissionPolicyMissing",
    "StockadeFenceFailed",
    "StockadeFenceStuck",
    "StockadeGuardedPodsOnMissingNode",
    "StockadeNoLeader",
    "StockadeNodeCannotBeFenced",
    "StockadeStormGuardHolding",
    "StockadeWebhookCertificateExpiring",
  ]);
  for (const r of rules) {
    assert.match(r.labels?.severity ?? "", /^(critical|warning|info)$/, `${r.alert}: severity`);
    assert.ok((r.annotations?.summary ?? "").length > 20, `${r.alert}: summary`);
    assert.ok((r.annotations?.description ?? "").length > 20, `${r.alert}: description`);
    const anchor = /^docs\/operate\.md#([a-z0-9-]+): \S/.exec(r.annotations?.runbook ?? "")?.[1];
    assert.equal(anchor, r.alert!.toLowerCase(), `${r.alert}: runbook names its section in docs/operate.md`);
    assert.match(operate, new RegExp(`^### ${r.alert}$`, "m"), `docs/operate.md has a section ${r.alert}`);
  }
});
