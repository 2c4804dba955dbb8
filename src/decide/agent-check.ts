// Whether a FenceAgent can fence the nodes its policies give it, checked before any fence needs it:
// the driver exists, every node's parameters resolve (templates, node map, Secret keys), the driver
// accepts them, and no two nodes resolve to the same machine. Pure given the agent's rules (a fence
// agent's metadata is read once per executable; the controller loads it first without blocking); the
// caller fetches the Secrets (missing ones are reported by name).
import type { V1Node } from "@kubernetes/client-node";
import type { FenceAgent, FencingPolicy } from "../api/v1alpha1.ts";
import { resolveParameters, secretKey, secretRefsFor } from "../agents/parameters.ts";
import { driverFor, rulesFor, storageDriverFor } from "../agents/registry.ts";
import { CHECK_CHUNK, duplicateTargetsInSteps } from "../agents/targets.ts";
import type { ParameterRules } from "../agents/types.ts";
import { runSteps } from "../runtime/steps.ts";
import { matchesSelector } from "./selectors.ts";

export interface AgentCheck {
  ok: boolean;
  reason: "Valid" | "Unused" | "InvalidConfiguration" | "SecretNotFound" | "SecretForbidden" | "DuplicateTarget";
  message: string;
  nodes: string[];
}

/** The nodes this agent may be asked to fence: those selected by the policies whose escalation names it. */
export function nodesForAgent(agent: FenceAgent, policies: readonly FencingPolicy[], nodes: readonly V1Node[]): V1Node[] {
  const name = agent.metadata?.name;
  const users = policies.filter((p) => p.spec.escalation.some((l) => l.agents.some((a) => a.name === name)));
  return nodes.filter((n) => users.some((p) => matchesSelector(n.metadata?.labels, p.spec.nodeSelector)));
}

/**
 * `nodes` are those the policies give this agent; `allNodes` (default: `nodes`) every Node the operator knows,
 * for the duplicate-target check: a node outside any policy that resolves to the same machine still makes the
 * mapping ambiguous.
 */
export function checkAgent(
  agent: FenceAgent,
  nodes: readonly V1Node[],
  secrets: ReadonlyMap<string, Record<string, string> | undefined>,
  allNodes: readonly V1Node[] = nodes,
): AgentCheck {
  return runSteps(checkAgentInSteps(agent, nodes, secrets, allNodes));
}

/**
 * checkAgent in steps: it yields after every CHECK_CHUNK nodes, so that the operator, which checks every agent each
 * minute, does not hold its event loop for the whole check (most of a second at 5,000 nodes): the round trips of a
 * fence under way go on between two steps.
 */
export function* checkAgentInSteps(
  agent: FenceAgent,
  nodes: readonly V1Node[],
  secrets: ReadonlyMap<string, Record<string, string> | undefined>,
  allNodes: readonly V1Node[] = nodes,
): Generator<void, AgentCheck> {
  const names = nodes.map((n) => n.metadata?.name ?? "");
  let driver;
  let rules: ParameterRules | undefined;
  try {
    // A storage fence has no power driver; its parameters are checked the same way.
    driver = storageDriverFor(agent.spec.type) ?? driverFor(agent.spec.type, agent.spec.agent);
    rules = rulesFor(agent.spec);
  } catch (err) {
    return { ok: false, reason: "InvalidConfiguration", message: (err as Error).message, nodes: names };
  }
  if (!nodes.length) return { ok: true, reason: "Unused", message: "no FencingPolicy names this agent for any node", nodes: names };
  const missing = new Set<string>();
  const errors: string[] = [];
  let i = 0;
  for (const n of nodes) {
    if (++i % CHECK_CHUNK === 0) yield;
    const name = n.metadata?.name ?? "";
    const refs = secretRefsFor(agent.spec, name);
    const absent = refs.filter((r) => secrets.get(secretKey(r)) === undefined);
    for (const r of absent) missing.add(secretKey(r));
    if (absent.length) continue;
    const have = new Map(refs.map((r) => [secretKey(r), secrets.get(secretKey(r)) ?? {}] as const));
    const r = resolveParameters(agent.spec, n, have, rules ?? null);
    if ("errors" in r) errors.push(...r.errors);
    else errors.push(...driver.validate(r.parameters).map((e) => `node ${name}: ${e}`));
  }
  if (missing.size)
    return {
      ok: false,
      reason: "SecretNotFound",
      message: `Secret ${[...missing].sort().join(", ")} does not exist: create it with the agent's credentials (e.g. key "password")`,
      nodes: names,
    };
  if (errors.length) {
    const more = errors.length > 5 ? ` (and ${errors.length - 5} more)` : "";
    return { ok: false, reason: "InvalidConfiguration", message: errors.slice(0, 5).join("; ") + more, nodes: names };
  }
  const covered = new Set(names);
  const dups = (yield* duplicateTargetsInSteps(agent.spec, allNodes, rules)).filter((g) => g.nodes.some((n) => covered.has(n)));
  if (dups.length) {
    const shown = dups.slice(0, 5).map((g) => `${g.nodes.join(", ")} all resolve to ${g.target}`);
    const more = dups.length > 5 ? ` (and ${dups.length - 5} more groups)` : "";
    return {
      ok: false,
      reason: "DuplicateTarget",
      message:
        `nodes that would be fenced through the same machine: ${shown.join("; ")}${more}. ` +
        `Fencing one of them could power off another's machine; give each node its own address (or plug) in spec.nodes or a node-restriction.kubernetes.io/ label`,
      nodes: names,
    };
  }
  return { ok: true, reason: "Valid", message: `parameters resolve for ${names.length} node(s)`, nodes: names };
}
