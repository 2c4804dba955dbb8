// Where each NodeFence creation of a scale bench's burst spent its time, from a kept lab directory (`npm run
// bench:scale -- --keep`): the operator's log gives the decision ("Fence" verdict), the apiserver's audit log when
// each of the operator's requests was received and answered. Prints, per creation and over all of them: decision →
// fresh GETs (Node, Lease) received, the GETs at the apiserver, GETs answered → create received, the create at the
// apiserver. Time between the apiserver's answers and the operator's next request is the operator's own. Before all
// that, due → decision: the fence is due at the node's last heartbeat + the timeout + the pods' wait (from the
// decision's partitionedSince + the wait its message states), or when the node controller's status write that turned
// Ready Unknown was answered, if later (the audit log; the operator fences only a node both say is gone).
//   npm run bench:creation-split -- <lab dir> [--user stockade-lab-admin]
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { auditEvents } from "../lab/audit.ts";

const { values, positionals } = parseArgs({ allowPositionals: true, options: { user: { type: "string", default: "stockade-lab-admin" } } });
const dir = positionals[0];
if (!dir) throw new Error("usage: npm run bench:creation-split -- <lab dir> [--user NAME]");

const decided = new Map<string, number>();
const dueByTimeout = new Map<string, number>();
for (const line of readFileSync(join(dir, "logs", "operator-1.log"), "utf8").split("\n")) {
  if (!line.includes('"verdict":"Fence"')) continue;
  const l = JSON.parse(line) as { node?: string; time: number; partitionedSince?: string; msg?: string };
  if (!l.node || decided.has(l.node)) continue;
  decided.set(l.node, l.time);
  // The pods' wait, as the decision itself states it ("… guarded pod(s) waited 10 s").
  const waitS = Number(/waited (\d+) s/.exec(l.msg ?? "")?.[1] ?? NaN);
  dueByTimeout.set(l.node, Date.parse(l.partitionedSince ?? "") + waitS * 1000);
}
// The node controller's last status write before each decision (after the node went silent): Ready turning Unknown.
const markedUnknown = new Map<string, number>();
const byNodeController = (line: string) => line.includes("node-controller") && line.includes('"ResponseComplete"');
for await (const e of auditEvents(dir, byNodeController)) {
  const name = e.objectRef?.name ?? "";
  const at = decided.get(name);
  if (at === undefined || e.objectRef?.resource !== "nodes" || e.objectRef.subresource !== "status" || !/update|patch/.test(e.verb))
    continue;
  const answered = Date.parse(e.stageTimestamp);
  if (answered <= at && answered > dueByTimeout.get(name)! - 60_000) markedUnknown.set(name, answered);
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

const keys = ["dueToDecision", "total", "toGets", "getsAtApiserver", "toCreate", "createAtApiserver"] as const;
const rows: ({ node: string } & Record<(typeof keys)[number], number>)[] = [];
for (const [node, at] of decided) {
  const c = created.get(node);
  const g = gets.get(node);
  if (!c || !g?.length) continue;
  const sent = Math.min(...g.map((x) => x[0]));
  const answered = Math.max(...g.map((x) => x[1]));
  rows.push({
    node,
    // NaN where the audit log holds no such write (one rotated away): left out of that segment's figures.
    dueToDecision: markedUnknown.has(node) ? at - Math.max(dueByTimeout.get(node)!, markedUnknown.get(node)!) : NaN,
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
  "slowest creations (ms): node, due → decision, decision → created in all, decision → GETs received, GETs at the apiserver, → create received, create at the apiserver",
);
for (const r of rows.slice(0, 8)) console.log(`  ${r.node}: ${keys.map((k) => r[k]).join(", ")}`);
const of = (k: (typeof keys)[number]) => rows.map((r) => r[k]).filter((x) => !Number.isNaN(x));
const at = (k: (typeof keys)[number], p: number) => {
  const v = of(k).sort((a, b) => a - b);
  return v[Math.min(v.length - 1, Math.ceil(p * v.length) - 1)];
};
console.log(
  `over ${rows.length} creations (ms; ${rows.filter((r) => (markedUnknown.get(r.node) ?? 0) > dueByTimeout.get(r.node)!).length} due when the node controller marked them Unknown, the others at the timeout):`,
);
for (const k of keys)
  console.log(
    `  ${k}: mean ${(of(k).reduce((a, x) => a + x, 0) / of(k).length).toFixed(0)} over ${of(k).length}, p50 ${at(k, 0.5)}, max ${at(k, 1)}`,
  );
