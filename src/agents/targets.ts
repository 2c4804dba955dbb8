// Two nodes whose parameters point one agent at the same machine (same BMC; same PDU and outlet; same
// hypervisor and VM...) are an error: powering "node-1" off would stop whatever machine that device drives,
// maybe node-2's, and a status query would answer for it. Pure given the agent's rules; no Secret is needed,
// since a Secret may hold only credentials, which never name a machine.
import type { V1Node } from "@kubernetes/client-node";
import type { FencingTarget, ParameterRules } from "./types.ts";
import { resolveSpecParameters, type FenceAgentSpec } from "./parameters.ts";
import { rulesFor } from "./registry.ts";
import { runSteps } from "../runtime/steps.ts";

/** The machine `node`'s parameters point the agent at; undefined when they do not resolve or name none. */
export function targetOf(spec: FenceAgentSpec, node: V1Node, rules: ParameterRules): FencingTarget | undefined {
  const r = resolveSpecParameters(spec, node, rules);
  if (r.errors.length > 0) return undefined;
  return rules.target(r.parameters, node.metadata?.name);
}

/** One scan's targets, reusing those resolved from the same Node version under the same spec and rules. */
interface TargetScan {
  of(node: V1Node): FencingTarget | undefined;
  /** Keeps this scan's targets (only the nodes it saw) for the next scan under the same spec. */
  done(): void;
}

type Resolved = { rv: string; target: FencingTarget | undefined };
/** By rules, then by spec (as JSON), then by node name. */
const resolved = new WeakMap<ParameterRules, Map<string, Map<string, Resolved>>>();
/** Specs remembered per rules, oldest dropped first (an agent edited many times, or many agents of one type): about
 * 1 MiB each at 5,000 nodes. */
const SPECS_KEPT = 8;

/**
 * Resolving every Node's parameters (templates, a fence agent's parameter rules) took 0.1–0.4 s at 5,000 nodes on the
 * project's 2-core machine under load, on the event loop, once per agent run: it held back the NodeFence creates of a
 * burst of failures. A target is reused only for the very Node version it was resolved from (same name and
 * resourceVersion, which the apiserver changes with any change to the object) under an equal spec and the same rules
 * object; a Node without a resourceVersion (built in memory) is resolved every time.
 */
function scanTargets(spec: FenceAgentSpec, rules: ParameterRules): TargetScan {
  let bySpec = resolved.get(rules);
  if (!bySpec) resolved.set(rules, (bySpec = new Map()));
  const key = JSON.stringify(spec);
  const before = bySpec.get(key);
  const now = new Map<string, Resolved>();
  return {
    of(node) {
      const name = node.metadata?.name ?? "";
      const rv = node.metadata?.resourceVersion;
      if (!rv) return targetOf(spec, node, rules);
      const seen = before?.get(name);
      const r = seen?.rv === rv ? seen : { rv, target: targetOf(spec, node, rules) };
      now.set(name, r);
      return r.target;
    },
    done() {
      bySpec.delete(key);
      bySpec.set(key, now);
      if (bySpec.size > SPECS_KEPT) bySpec.delete(bySpec.keys().next().value!);
    },
  };
}

/** Same device, and outlets that overlap (no outlets = the whole device). */
export function sameMachine(a: FencingTarget, b: FencingTarget): boolean {
  if (a.device !== b.device) return false;
  if (a.outlets.length === 0 || b.outlets.length === 0) return true;
  return a.outlets.some((o) => b.outlets.includes(o));
}

const describe = (t: FencingTarget) => `${t.device || "(no address)"}${t.outlets.length ? ` plug ${t.outlets.join(",")}` : ""}`;

export type TargetCheck = { ok: true } | { ok: false; reason: "DuplicateTarget"; nodes: string[]; message: string };

/**
 * Whether `node` is the only Node whose parameters point this agent at its machine. Call it with every Node the
 * operator knows (not only those a policy selects: a mapping that is ambiguous anywhere is not trusted), right
 * before running the agent for `node`. Pure given `rules` (default: rulesFor(spec), which reads a fence agent's
 * metadata once per executable and may throw a Config AgentError).
 */
export function checkUniqueTarget(
  agentName: string,
  spec: FenceAgentSpec,
  node: V1Node,
  nodes: readonly V1Node[],
  rules: ParameterRules | undefined = rulesFor(spec),
): TargetCheck {
  if (!rules) return { ok: true };
  const name = node.metadata?.name ?? "";
  // The node to fence may come from a fresh read: resolved as it is, never from what was remembered.
  const mine = targetOf(spec, node, rules);
  if (!mine) return { ok: true };
  const scan = scanTargets(spec, rules);
  const others: string[] = [];
  for (const n of nodes) {
    const t = scan.of(n);
    const other = n.metadata?.name ?? "";
    if (other !== name && t !== undefined && sameMachine(mine, t)) others.push(other);
  }
  scan.done();
  others.sort();
  if (others.length === 0) return { ok: true };
  return {
    ok: false,
    reason: "DuplicateTarget",
    nodes: others,
    message:
      `FenceAgent ${agentName} resolves node ${name} and ${others.join(", ")} to the same machine (${describe(mine)}): ` +
      `fencing ${name} through it could power off another node's machine and confirm the wrong one; ` +
      `give each node its own address (or plug) in spec.nodes or in a node-restriction.kubernetes.io/ label`,
  };
}

/** Every group of two or more nodes that share a machine, for the FenceAgent's Ready condition. */
export function duplicateTargets(
  spec: FenceAgentSpec,
  nodes: readonly V1Node[],
  rules: ParameterRules | undefined,
): { target: string; nodes: string[] }[] {
  return runSteps(duplicateTargetsInSteps(spec, nodes, rules));
}

/** Nodes whose target is resolved between two yields of a check in steps: a few milliseconds of work. */
export const CHECK_CHUNK = 250;

/**
 * duplicateTargets in steps: it yields after every CHECK_CHUNK nodes resolved, so that a caller on the event loop can
 * let other work run in between (at 5,000 nodes the whole check is most of a second on this project's 2-core machine).
 */
export function* duplicateTargetsInSteps(
  spec: FenceAgentSpec,
  nodes: readonly V1Node[],
  rules: ParameterRules | undefined,
): Generator<void, { target: string; nodes: string[] }[]> {
  if (!rules) return [];
  // By device first: thousands of nodes, few sharing a device.
  const byDevice = new Map<string, { name: string; target: FencingTarget }[]>();
  const scan = scanTargets(spec, rules);
  let i = 0;
  for (const n of nodes) {
    if (++i % CHECK_CHUNK === 0) yield;
    const target = scan.of(n);
    if (!target) continue;
    const list = byDevice.get(target.device) ?? [];
    list.push({ name: n.metadata?.name ?? "", target });
    byDevice.set(target.device, list);
  }
  scan.done();
  const groups: { target: string; nodes: string[] }[] = [];
  for (const list of byDevice.values()) if (list.length > 1) groups.push(...sharedMachines(list));
  return groups.sort((a, b) => a.nodes[0]!.localeCompare(b.nodes[0]!));
}

/**
 * The groups of one device's nodes: in name order, each node not yet grouped with every later one that shares its
 * machine. Outlets are indexed: one device driving thousands of machines by plug (a hypervisor and its VMs, the scale
 * lab's test double) would otherwise compare every pair (12.5 million pairs at 5,000 nodes).
 */
function sharedMachines(list: { name: string; target: FencingTarget }[]): { target: string; nodes: string[] }[] {
  list.sort((a, b) => a.name.localeCompare(b.name));
  let whole: number[] = []; // no outlets: the whole device, the same machine as every other entry
  const byOutlet = new Map<string, number[]>();
  list.forEach((e, i) => {
    if (e.target.outlets.length === 0) whole.push(i);
    for (const o of new Set(e.target.outlets)) {
      const at = byOutlet.get(o);
      if (at) at.push(i);
      else byOutlet.set(o, [i]);
    }
  });
  const seen = new Set<number>();
  const groups: { target: string; nodes: string[] }[] = [];
  list.forEach((a, i) => {
    if (seen.has(i)) return;
    const candidates =
      a.target.outlets.length === 0 ? list.keys() : new Set([...whole, ...a.target.outlets.flatMap((o) => byOutlet.get(o)!)]);
    const same = [...candidates].filter((j) => j !== i && !seen.has(j) && sameMachine(a.target, list[j]!.target)).sort((x, y) => x - y);
    if (same.length === 0) return;
    for (const j of [i, ...same]) seen.add(j);
    whole = whole.filter((j) => !seen.has(j));
    groups.push({ target: describe(a.target), nodes: [a.name, ...same.map((j) => list[j]!.name)] });
  });
  return groups;
}
