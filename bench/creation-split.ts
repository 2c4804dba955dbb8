// Where each NodeFence creation of a scale bench's burst spent its time, from a kept lab directory (`npm run
// bench:scale -- --keep`): the operator's log gives the decision ("Fence" verdict), the apiserver's audit log when
// each of the operator's requests was received and answered. Prints, per creation and over all of them: decision →
// fresh GETs (Node, Lease) received, the GETs at the apiserver, GETs answered → create received, the create at the
// apiserver. Time between the apiserver's answers and the operator's next request is the operator's own.
//   npm run bench:creation-split -- <lab dir> [--user stockade-lab-admin]
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { auditEvents } from "../lab/audit.ts";

const { values, positionals } = parseArgs({ allowPositionals: true, options: { user: { type: "string", default: "stockade-lab-admin" } } });
const dir = positionals[0];
if (!dir) throw new Error("usage: npm run bench:creation-split -- <lab dir> [--user NAME]");

const decided = new Map<string, number>();
for (const line of readFileSync(join(dir, "logs", "operator-1.log"), "utf8").split("\n")) {
  if (!line.includes('"verdict":"Fence"')) continue;
  const l = JSON.parse(line) as { node?: string; time: number };
  if (l.node && !decided.has(l.node)) decided.set(l.node, l.time);
}

type Span = [received: number, answered: number];
const created = new Map<string, Span>();
const gets = new Map<string, Span[]>();
const byUser = (line: string) => line.includes(values.user!) && line.includes('"ResponseComplete"');
for await (const e of auditEvents(dir, byUser)) {
  const name = e.objectRef?.name ?? "";
  const at = decided.get(name);
  if (e.user.username !== values.user || at === undefined) continue;
  const span: Span = [Date.parse(e.requestReceivedTimestamp), Date.parse(e.stageTimestamp)];
  if (span[0] < at) continue;
  const r = e.objectRef?.resource;
  if (e.verb === "create" && r === "nodefences" && !created.has(name)) created.set(name, span);
  if (e.verb === "get" && (r === "nodes" || r === "leases") && !e.objectRef?.subresource) {
    const g = gets.get(name) ?? [];
    if (g.length < 2) g.push(span);
    gets.set(name, g);
  }
}

const keys = ["total", "toGets", "getsAtApiserver", "toCreate", "createAtApiserver"] as const;
const rows: ({ node: string } & Record<(typeof keys)[number], number>)[] = [];
for (const [node, at] of decided) {
  const c = created.get(node);
  const g = gets.get(node);
  if (!c || !g?.length) continue;
  const sent = Math.min(...g.map((x) => x[0]));
  const answered = Math.max(...g.map((x) => x[1]));
  rows.push({
    node,
    total: c[1] - at,
    toGets: sent - at,
    getsAtApiserver: answered - sent,
    toCreate: c[0] - answered,
    createAtApiserver: c[1] - c[0],
  });
}
if (!rows.length) throw new Error(`no creation found in ${dir}/logs (decisions: ${decided.size}; was the audit log kept?)`);
rows.sort((a, b) => b.total - a.total);
console.log(
  "slowest creations (ms): node, in all, decision → GETs received, GETs at the apiserver, → create received, create at the apiserver",
);
for (const r of rows.slice(0, 8)) console.log(`  ${r.node}: ${keys.map((k) => r[k]).join(", ")}`);
const at = (k: (typeof keys)[number], p: number) => {
  const v = rows.map((r) => r[k]).sort((a, b) => a - b);
  return v[Math.min(v.length - 1, Math.ceil(p * v.length) - 1)];
};
console.log(`over ${rows.length} creations (ms):`);
for (const k of keys)
  console.log(`  ${k}: mean ${(rows.reduce((a, r) => a + r[k], 0) / rows.length).toFixed(0)}, p50 ${at(k, 0.5)}, max ${at(k, 1)}`);
