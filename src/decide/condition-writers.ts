// Who set a node condition, and whether the policy trusts that writer (spec.triggers.nodeConditions[].trustedWriters).
// A node's conditions are written by whoever may update nodes/status: its kubelet (held to its own Node by
// NodeRestriction), but also node-problem-detector and many CNI agents, whose ServiceAccounts may patch every node's
// status. A condition trigger therefore counts only when the condition's status was set by a writer the administrator
// listed for that trigger.
//
// Kubernetes records writers in metadata.managedFields: one entry per field manager (and operation and subresource),
// each with the set of fields it owns (fieldsV1). An Update gives its manager the fields whose value it changed; an
// Apply gives its manager every field it applied, shared with any other applier of the same value. So the owners of a
// condition's `status` are who set the value it has now. The condition is trusted only when EVERY owner of its status
// is listed: a co-owner the administrator did not list may have set the value first, and a trusted one applying the
// same value afterwards must not hide it. No recorded owner (managedFields absent or stripped) is no trust either.
//
// A field manager's name is what the writing client says it is (and a client may rewrite managedFields), so this tells
// apart the writers that name themselves, not one that lies: docs/safety.md §2 says what that leaves.
import type { V1ManagedFieldsEntry, V1Node } from "@kubernetes/client-node";

type Fields = Record<string, unknown>;

const isFields = (x: unknown): x is Fields => typeof x === "object" && x !== null && !Array.isArray(x);

/** The condition type a fieldsV1 list key names (`k:{"type":"KernelDeadlock"}`), or undefined for any other key. */
function keyType(key: string): string | undefined {
  if (!key.startsWith("k:")) return undefined;
  try {
    const k = JSON.parse(key.slice(2)) as unknown;
    return isFields(k) && typeof k.type === "string" ? k.type : undefined;
  } catch {
    return undefined;
  }
}

/** An entry in a format other than FieldsV1 (none exists today): what it owns cannot be read, so it may own anything. */
const unreadable = (e: V1ManagedFieldsEntry) => e.fieldsType !== undefined && e.fieldsType !== "FieldsV1";

/** The condition types whose `status` this managedFields entry owns. */
function ownedStatusTypes(e: V1ManagedFieldsEntry): string[] {
  const fields: unknown = e.fieldsV1;
  if (!isFields(fields)) return [];
  const status = fields["f:status"];
  const conditions = isFields(status) ? status["f:conditions"] : undefined;
  if (!isFields(conditions)) return [];
  const out: string[] = [];
  for (const [key, item] of Object.entries(conditions)) {
    const type = keyType(key);
    if (type !== undefined && isFields(item) && "f:status" in item) out.push(type);
  }
  return out;
}

/** The field managers that own the status of the node's condition of this type: sorted, each once. */
export function conditionWriters(node: V1Node | undefined, type: string): string[] {
  const out = new Set<string>();
  for (const e of node?.metadata?.managedFields ?? []) if (unreadable(e) || ownedStatusTypes(e).includes(type)) out.add(e.manager ?? "");
  return [...out].sort();
}

export interface ConditionTrust {
  trusted: boolean;
  /** Every field manager that owns the condition's status ("" for an entry without a manager). */
  writers: string[];
  /** Those the trigger does not list: the reason it is not trusted (with `writers` empty: no writer recorded). */
  untrusted: string[];
}

/** Whether the node's condition of this type was set only by writers in `trusted` (none listed: nothing is trusted). */
export function conditionTrust(node: V1Node | undefined, type: string, trusted: readonly string[] | undefined): ConditionTrust {
  const writers = conditionWriters(node, type);
  const untrusted = writers.filter((w) => !(trusted ?? []).includes(w));
  return { trusted: writers.length > 0 && untrusted.length === 0 && (trusted?.length ?? 0) > 0, writers, untrusted };
}

/**
 * What the operator's Node cache keeps of managedFields: for each entry that owns some condition's status, its manager,
 * operation and subresource and only those ownerships (no time: the kubelet's entry would change on every heartbeat).
 * The rest of managedFields is a large part of every Node, and nothing else reads it. Same shape as the apiserver's,
 * so the same reading serves a cached Node and one read fresh.
 */
export function conditionOwnership(entries: readonly V1ManagedFieldsEntry[] | undefined): V1ManagedFieldsEntry[] | undefined {
  const out: V1ManagedFieldsEntry[] = [];
  for (const e of entries ?? []) {
    if (unreadable(e)) {
      out.push({ manager: e.manager, operation: e.operation, subresource: e.subresource, fieldsType: e.fieldsType });
      continue;
    }
    const types = ownedStatusTypes(e);
    if (!types.length) continue;
    const conditions: Fields = {};
    for (const t of types) conditions[`k:${JSON.stringify({ type: t })}`] = { "f:status": {} };
    out.push({
      manager: e.manager,
      operation: e.operation,
      ...(e.subresource ? { subresource: e.subresource } : {}),
      fieldsType: "FieldsV1",
      fieldsV1: { "f:status": { "f:conditions": conditions } },
    });
  }
  return out.length ? out : undefined;
}
