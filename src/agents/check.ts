// Runs a FenceAgent's configuration check (decide/agent-check.ts decides the verdict): looks up its driver and
// rules, resolves every node's parameters with the Secrets the caller fetched, asks the driver to validate them, and
// finds the nodes that resolve to the same machine. A fence agent's metadata is read once per executable; the
// controller loads it first without blocking.
import type { V1Node } from "@kubernetes/client-node";
import type { FenceAgent } from "../api/v1alpha1.ts";
import { invalidConfiguration, parameterVerdict, targetVerdict, unusedAgent, type AgentCheck } from "../decide/agent-check.ts";
import { runSteps } from "../runtime/steps.ts";
import { resolveParameters, secretKey, secretRefsFor } from "./parameters.ts";
import { driverFor, rulesFor, storageDriverFor } from "./registry.ts";
import { CHECK_CHUNK, duplicateTargetsInSteps } from "./targets.ts";
import type { ParameterRules } from "./types.ts";

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
    return invalidConfiguration((err as Error).message, names);
  }
  if (!nodes.length) return unusedAgent(names);
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
  const bad = parameterVerdict(names, missing, errors);
  if (bad) return bad;
  return targetVerdict(names, yield* duplicateTargetsInSteps(agent.spec, allNodes, rules));
}
