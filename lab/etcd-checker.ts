// The etcd checker: a writer that puts sequential keys through the cluster while faults run and records
// every put the cluster acknowledged, and a verify step that afterwards proves no acknowledged key was
// lost and the cluster still has exactly its original members, all healthy. It talks to the members from
// the host over etcd's v3 JSON gateway (POST /v3/kv/put, /v3/kv/range, /v3/cluster/member/list,
// /v3/maintenance/status) with fetch, so it needs no client library and sees what any client would.
//
// A put that failed or timed out may still have been committed (etcd could have applied it before the
// answer was lost): such a key is "indeterminate" and the writer retries the same key with the same value
// until it is acknowledged, so finding it is fine, and only acknowledged keys must be found.
import { randomBytes } from "node:crypto";
import { setTimeout as sleep } from "node:timers/promises";

// ---- wire format (pure) ------------------------------------------------------------------------------

export const b64 = (s: string): string => Buffer.from(s, "utf8").toString("base64");
export const fromB64 = (s: string | undefined): string => Buffer.from(s ?? "", "base64").toString("utf8");

/** The range_end that selects every key starting with `prefix` (the prefix with its last byte + 1). */
export function prefixRangeEnd(prefix: string): string {
  const bytes = Buffer.from(prefix, "utf8");
  for (let i = bytes.length - 1; i >= 0; i--) {
    if (bytes[i]! < 0xff) {
      const end = Buffer.from(bytes.subarray(0, i + 1));
      end[i]!++;
      return end.toString("base64");
    }
  }
  return Buffer.from([0]).toString("base64"); // all 0xff (or empty): every key from prefix on
}

/** Sequence keys sort in write order (etcd ranges are byte-ordered). */
export function seqKey(prefix: string, seq: number): string {
  return `${prefix}${String(seq).padStart(10, "0")}`;
}

export interface EtcdMember {
  id: string;
  name: string;
  peerURLs: string[];
  clientURLs: string[];
  isLearner: boolean;
}

export interface EtcdStatus {
  endpoint: string;
  memberId: string;
  leader: string;
  raftTerm: string;
  raftIndex: string;
  version: string;
  isLearner: boolean;
  /** Alarms and other errors the member reports (e.g. NOSPACE). */
  errors: string[];
}

interface RawMember {
  ID?: string;
  name?: string;
  peerURLs?: string[];
  clientURLs?: string[];
  isLearner?: boolean;
}

export function parseMembers(body: { members?: RawMember[] }): EtcdMember[] {
  return (body.members ?? []).map((m) => ({
    id: String(m.ID ?? ""),
    name: m.name ?? "",
    peerURLs: [...(m.peerURLs ?? [])].sort(),
    clientURLs: [...(m.clientURLs ?? [])].sort(),
    isLearner: m.isLearner === true,
  }));
}

export function parseStatus(
  endpoint: string,
  body: {
    header?: { member_id?: string };
    leader?: string;
    raftTerm?: string;
    raftIndex?: string;
    version?: string;
    isLearner?: boolean;
    errors?: string[];
  },
): EtcdStatus {
  return {
    endpoint,
    memberId: String(body.header?.member_id ?? ""),
    leader: String(body.leader ?? "0"),
    raftTerm: String(body.raftTerm ?? "0"),
    raftIndex: String(body.raftIndex ?? "0"),
    version: body.version ?? "",
    isLearner: body.isLearner === true,
    errors: body.errors ?? [],
  };
}

// ---- what the writer records, and the judgements (pure) ---------------------------------------------

export interface AckedPut {
  key: string;
  value: string;
  /** The store revision the put was committed at (from the response header). */
  revision: number;
  endpoint: string;
  /** Epoch ms when the acknowledgement arrived. */
  at: number;
}

export interface WriteLog {
  prefix: string;
  /** In acknowledgement order. */
  acked: AckedPut[];
  /** A put sent but never acknowledged (the writer stopped while retrying it): it may or may not exist. */
  pending?: { key: string; value: string };
  attempts: number;
  failures: number;
  lastError?: string;
}

export interface FoundKey {
  value: string;
  modRevision: number;
}

export interface KeyFindings {
  /** Acknowledged and not found: a lost committed write. */
  lost: string[];
  /** Found with another value, or at a revision older than its acknowledgement. */
  wrong: Array<{ key: string; want: string; got: string; ackedRevision: number; modRevision: number }>;
  /** Found but never written by this writer (neither acknowledged nor pending). */
  unexpected: string[];
}

export function compareKeys(log: WriteLog, found: ReadonlyMap<string, FoundKey>): KeyFindings {
  const lost: string[] = [];
  const wrong: KeyFindings["wrong"] = [];
  const acked = new Set<string>();
  for (const a of log.acked) {
    acked.add(a.key);
    const f = found.get(a.key);
    if (!f) lost.push(a.key);
    // A timed-out earlier attempt of the same put may commit after the acknowledged one (same value, later
    // revision); an older revision would mean the acknowledged write itself is gone.
    else if (f.value !== a.value || f.modRevision < a.revision)
      wrong.push({ key: a.key, want: a.value, got: f.value, ackedRevision: a.revision, modRevision: f.modRevision });
  }
  const unexpected = [...found.keys()].filter((k) => !acked.has(k) && k !== log.pending?.key);
  return { lost, wrong, unexpected };
}

/** One writer's sequential puts must be acknowledged at strictly increasing revisions (linearizability). */
export function checkAckOrder(log: WriteLog): string[] {
  const out: string[] = [];
  for (let i = 1; i < log.acked.length; i++) {
    const a = log.acked[i - 1]!;
    const b = log.acked[i]!;
    if (b.revision <= a.revision) out.push(`put ${b.key} acknowledged at revision ${b.revision}, not after ${a.key}'s ${a.revision}`);
  }
  return out;
}

const describe = (m: EtcdMember) => `${m.name || "(unstarted)"} (${m.id})`;

/** The member list must be exactly the original one: same IDs, names and peer URLs, all started voters. */
export function compareMembers(want: readonly EtcdMember[], got: readonly EtcdMember[]): string[] {
  const out: string[] = [];
  const byId = new Map(got.map((m) => [m.id, m]));
  for (const w of want) {
    const g = byId.get(w.id);
    if (!g) {
      out.push(`member ${describe(w)} is missing from the member list`);
      continue;
    }
    if (g.name !== w.name) out.push(`member ${w.id} is named "${g.name}", was "${w.name}"`);
    if (g.peerURLs.join(",") !== w.peerURLs.join(","))
      out.push(`member ${describe(w)} has peer URLs ${g.peerURLs.join(",")}, was ${w.peerURLs.join(",")}`);
    if (g.isLearner) out.push(`member ${describe(w)} is a learner`);
    if (!g.name || g.clientURLs.length === 0) out.push(`member ${describe(w)} has not started (no name or client URLs published)`);
  }
  const wantIds = new Set(want.map((m) => m.id));
  for (const g of got) if (!wantIds.has(g.id)) out.push(`member ${describe(g)} was not an original member`);
  return out;
}

export type StatusResult = EtcdStatus | { endpoint: string; error: string };

/** Healthy: every endpoint answers, every original member answers on some endpoint, one leader among them, no alarms. */
export function judgeHealth(want: readonly EtcdMember[], results: readonly StatusResult[]): string[] {
  const out: string[] = [];
  const ok: EtcdStatus[] = [];
  for (const r of results) {
    if ("error" in r) out.push(`endpoint ${r.endpoint} did not answer: ${r.error}`);
    else ok.push(r);
  }
  const answered = new Set(ok.map((s) => s.memberId));
  for (const w of want) if (!answered.has(w.id)) out.push(`member ${describe(w)} answered on no endpoint`);
  const wantIds = new Set(want.map((m) => m.id));
  const leaders = new Set(ok.map((s) => s.leader));
  if (leaders.size > 1) out.push(`members disagree on the leader: ${ok.map((s) => `${s.memberId}→${s.leader}`).join(", ")}`);
  for (const s of ok) {
    if (s.leader === "0") out.push(`member ${s.memberId} at ${s.endpoint} has no leader`);
    else if (!wantIds.has(s.leader)) out.push(`member ${s.memberId} at ${s.endpoint} follows ${s.leader}, not an original member`);
    if (s.isLearner) out.push(`member ${s.memberId} at ${s.endpoint} is a learner`);
    if (s.errors.length) out.push(`member ${s.memberId} at ${s.endpoint} reports: ${s.errors.join("; ")}`);
  }
  return out;
}

// ---- talking to etcd ----------------------------------------------------------------------------------

export class EtcdRequestError extends Error {
  readonly status: number;
  constructor(message: string, status: number) {
    super(message);
    this.status = status;
  }
}

/** One POST to the v3 JSON gateway; throws on a transport error, a timeout or a non-200 answer. */
export async function etcdCall<T>(endpoint: string, path: string, body: unknown, timeoutMs = 3000): Promise<T> {
  let res: Response;
  try {
    res = await fetch(`${endpoint.replace(/\/$/, "")}${path}`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify(body),
      signal: AbortSignal.timeout(timeoutMs),
    });
  } catch (e) {
    const err = e as Error & { cause?: { code?: string; message?: string } };
    const why = err.name === "TimeoutError" ? `timed out after ${timeoutMs} ms` : (err.cause?.code ?? err.cause?.message ?? err.message);
    throw new EtcdRequestError(`${endpoint}${path}: ${why}`, 0);
  }
  const text = await res.text();
  if (res.status !== 200) {
    let msg = text.trim();
    try {
      msg = (JSON.parse(text) as { message?: string }).message ?? msg;
    } catch {
      /* not JSON */
    }
    throw new EtcdRequestError(`${endpoint}${path}: HTTP ${res.status}: ${msg}`, res.status);
  }
  return JSON.parse(text) as T;
}

export async function etcdPut(
  endpoint: string,
  key: string,
  value: string,
  timeoutMs = 5000,
): Promise<{ revision: number; memberId: string }> {
  const r = await etcdCall<{ header?: { revision?: string; member_id?: string } }>(
    endpoint,
    "/v3/kv/put",
    { key: b64(key), value: b64(value) },
    timeoutMs,
  );
  const revision = Number(r.header?.revision);
  if (!Number.isSafeInteger(revision) || revision <= 0)
    throw new EtcdRequestError(`${endpoint}/v3/kv/put: no revision in ${JSON.stringify(r)}`, 200);
  return { revision, memberId: String(r.header?.member_id ?? "") };
}

/** Every key under `prefix`, read linearizably (through the leader's quorum), page by page. */
export async function etcdRangePrefix(endpoint: string, prefix: string, timeoutMs = 5000): Promise<Map<string, FoundKey>> {
  const out = new Map<string, FoundKey>();
  const end = prefixRangeEnd(prefix);
  let from = b64(prefix);
  for (;;) {
    const r = await etcdCall<{ kvs?: Array<{ key?: string; value?: string; mod_revision?: string }>; more?: boolean }>(
      endpoint,
      "/v3/kv/range",
      { key: from, range_end: end, limit: 1000 },
      timeoutMs,
    );
    const kvs = r.kvs ?? [];
    for (const kv of kvs) out.set(fromB64(kv.key), { value: fromB64(kv.value), modRevision: Number(kv.mod_revision ?? 0) });
    if (!r.more || kvs.length === 0) return out;
    from = Buffer.concat([Buffer.from(kvs.at(-1)!.key ?? "", "base64"), Buffer.from([0])]).toString("base64");
  }
}

/** The member list as the cluster's quorum sees it (linearizable: a member cut off from the quorum fails). */
export async function etcdMemberList(endpoint: string, timeoutMs = 3000): Promise<EtcdMember[]> {
  return parseMembers(await etcdCall(endpoint, "/v3/cluster/member/list", { linearizable: true }, timeoutMs));
}

export async function etcdStatus(endpoint: string, timeoutMs = 3000): Promise<EtcdStatus> {
  return parseStatus(endpoint, await etcdCall(endpoint, "/v3/maintenance/status", {}, timeoutMs));
}

export type Endpoints = readonly string[] | (() => readonly string[] | Promise<readonly string[]>);

/** The endpoints now; a function that takes longer than `timeoutMs` (e.g. an apiserver call during a partition) counts as failed. */
async function current(e: Endpoints, timeoutMs = 5000): Promise<readonly string[]> {
  if (typeof e !== "function") return e;
  const ac = new AbortController();
  try {
    return await Promise.race([
      Promise.resolve(e()),
      sleep(timeoutMs, undefined, { signal: ac.signal }).then(() => {
        throw new Error(`the endpoints function did not answer within ${timeoutMs} ms`);
      }),
    ]);
  } finally {
    ac.abort();
  }
}

/** The first answer of `fn` over the endpoints, in order; throws with every endpoint's error if none answers. */
async function firstAnswer<T>(endpoints: readonly string[], fn: (endpoint: string) => Promise<T>): Promise<T> {
  const errors: string[] = [];
  for (const e of endpoints) {
    try {
      return await fn(e);
    } catch (err) {
      errors.push((err as Error).message);
    }
  }
  throw new Error(endpoints.length ? errors.join("; ") : "no endpoints");
}

/** The original members, to compare with after the faults: read before any fault, with every member started. */
export async function etcdBaseline(endpoints: Endpoints, o: { members?: number; timeoutMs?: number } = {}): Promise<EtcdMember[]> {
  const deadline = Date.now() + (o.timeoutMs ?? 30_000);
  let last: string;
  for (;;) {
    try {
      const members = await firstAnswer(await current(endpoints), (e) => etcdMemberList(e));
      const started = members.filter((m) => m.name && m.clientURLs.length > 0);
      if (started.length === members.length && (o.members === undefined || members.length === o.members)) return members;
      last = `${started.length} of ${members.length} members started`;
    } catch (e) {
      last = (e as Error).message;
    }
    if (Date.now() > deadline) throw new Error(`etcd baseline: no complete member list within ${o.timeoutMs ?? 30_000} ms (${last})`);
    await sleep(250);
  }
}

// ---- the writer --------------------------------------------------------------------------------------

export interface EtcdWriterOptions {
  endpoints: Endpoints;
  /** Key prefix; default a fresh one per writer, so runs never see each other's keys. */
  prefix?: string;
  requestTimeoutMs?: number;
  /** Pause between acknowledged puts (default 0: as fast as the cluster acknowledges). */
  intervalMs?: number;
  /** Pause after a failed put before retrying it on the next endpoint (default 100). */
  retryMs?: number;
}

/** Puts <prefix><seq> = <prefix>#<seq>, one at a time, each retried (same key, same value) until acknowledged. */
export class EtcdWriter {
  private readonly o: EtcdWriterOptions;
  private readonly log: WriteLog;
  private stopping = false;
  private loop: Promise<void> | undefined;

  constructor(o: EtcdWriterOptions) {
    this.o = o;
    this.log = { prefix: o.prefix ?? `/stockade-checker/${randomBytes(4).toString("hex")}/`, acked: [], attempts: 0, failures: 0 };
  }

  get prefix(): string {
    return this.log.prefix;
  }

  start(): this {
    if (this.loop) throw new Error("the etcd writer is already running");
    this.loop = this.run();
    return this;
  }

  /** A copy of what has been recorded so far. */
  snapshot(): WriteLog {
    return { ...this.log, acked: [...this.log.acked], pending: this.log.pending && { ...this.log.pending } };
  }

  /** Stops after the put in flight (it is recorded as pending if unacknowledged) and returns the log. */
  async stop(): Promise<WriteLog> {
    this.stopping = true;
    await this.loop;
    return this.snapshot();
  }

  private async run(): Promise<void> {
    let next = 0; // round-robin over the endpoints; moves on after each failure
    for (let seq = 1; !this.stopping; seq++) {
      const key = seqKey(this.log.prefix, seq);
      const value = `${this.log.prefix}#${seq}`;
      this.log.pending = { key, value };
      while (!this.stopping) {
        const endpoints = await current(this.o.endpoints, this.o.requestTimeoutMs).catch(() => [] as readonly string[]);
        const endpoint = endpoints.length ? endpoints[next % endpoints.length]! : undefined;
        this.log.attempts++;
        try {
          if (!endpoint) throw new Error("no endpoints");
          const r = await etcdPut(endpoint, key, value, this.o.requestTimeoutMs ?? 5000);
          this.log.acked.push({ key, value, revision: r.revision, endpoint, at: Date.now() });
          this.log.pending = undefined;
          break;
        } catch (e) {
          this.log.failures++;
          this.log.lastError = (e as Error).message;
          next++;
          await sleep(this.o.retryMs ?? 100);
        }
      }
      if (this.o.intervalMs) await sleep(this.o.intervalMs);
    }
  }
}

// ---- the verify step ---------------------------------------------------------------------------------

export interface EtcdVerdict {
  ok: boolean;
  /** Every violation, in words. */
  problems: string[];
  lost: string[];
  keys: KeyFindings;
  acked: number;
  found: number;
  members: EtcdMember[] | undefined;
  statuses: StatusResult[];
}

export interface VerifyOptions {
  endpoints: Endpoints;
  log: WriteLog;
  /** The original members (etcdBaseline before the faults). */
  members: readonly EtcdMember[];
  /** How long the cluster may take to become healthy again after the faults (default 60 s). */
  settleTimeoutMs?: number;
  requestTimeoutMs?: number;
}

/**
 * After the faults: waits up to settleTimeoutMs for every member to be healthy under one leader, then
 * reads the member list and every key back through the quorum. Reports everything it finds wrong.
 */
export async function verifyEtcd(o: VerifyOptions): Promise<EtcdVerdict> {
  const t = o.requestTimeoutMs ?? 5000;
  const deadline = Date.now() + (o.settleTimeoutMs ?? 60_000);
  let statuses: StatusResult[];
  let health: string[];
  for (;;) {
    const endpoints = await current(o.endpoints, t).catch(() => [] as readonly string[]);
    statuses = await Promise.all(endpoints.map((e) => etcdStatus(e, t).catch((err: Error) => ({ endpoint: e, error: err.message }))));
    health = endpoints.length ? judgeHealth(o.members, statuses) : ["no endpoints to check"];
    if (health.length === 0 || Date.now() > deadline) break;
    await sleep(500);
  }
  const problems = [...health];
  const endpoints = await current(o.endpoints, t).catch(() => [] as readonly string[]);

  let members: EtcdMember[] | undefined;
  try {
    members = await firstAnswer(endpoints, (e) => etcdMemberList(e, t));
    problems.push(...compareMembers(o.members, members));
  } catch (e) {
    problems.push(`no endpoint answered the member list: ${(e as Error).message}`);
  }

  let keys: KeyFindings = { lost: [], wrong: [], unexpected: [] };
  let found = 0;
  try {
    const kvs = await firstAnswer(endpoints, (e) => etcdRangePrefix(e, o.log.prefix, t));
    found = kvs.size;
    keys = compareKeys(o.log, kvs);
    if (keys.lost.length) problems.push(`${keys.lost.length} acknowledged keys lost (first: ${keys.lost.slice(0, 5).join(", ")})`);
    for (const w of keys.wrong.slice(0, 5))
      problems.push(`key ${w.key} holds "${w.got}" at revision ${w.modRevision}, acknowledged "${w.want}" at ${w.ackedRevision}`);
    if (keys.wrong.length > 5) problems.push(`…and ${keys.wrong.length - 5} more keys with the wrong value`);
    if (keys.unexpected.length)
      problems.push(`${keys.unexpected.length} keys nobody wrote (first: ${keys.unexpected.slice(0, 5).join(", ")})`);
  } catch (e) {
    problems.push(`no endpoint answered the read-back, so no acknowledged key could be checked: ${(e as Error).message}`);
  }
  problems.push(...checkAckOrder(o.log));
  return { ok: problems.length === 0, problems, lost: keys.lost, keys, acked: o.log.acked.length, found, members, statuses };
}
