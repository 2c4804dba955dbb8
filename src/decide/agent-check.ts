// Whether a FenceAgent can fence the nodes its policies give it, checked before any fence needs it: the driver
// exists, every node's parameters resolve (templates, node map, Secret keys), the driver accepts them, and no two
// nodes resolve to the same machine. The verdicts and their messages are decided here, on what agents/check.ts found
// running the agent's rules and driver over the nodes (the caller fetches the Secrets; missing ones are reported by
// name).
import type { V1Node } from "@kubernetes/client-node";
import type { FenceAgent, FencingPolicy } from "../api/v1alpha1.ts";
import { matchesSelector } from "./selectors.ts";

export interface AgentCheck {
  ok: boolean;
  reason: "Valid" | "Unused" | "InvalidConfiguration" | "SecretNotFound" | "SecretForbidden" | "DuplicateTarget";
  message: string;
  nodes: string[];
}

/** Nodes that resolve to the same machine (agents/targets.ts duplicateTargets). */
export interface SharedTarget {
  target: string;
  nodes: string[];
}

/** The nodes this agent may be asked to fence: those selected by the policies whose escalation names it. */
export function nodesForAgent(agent: FenceAgent, policies: readonly FencingPolicy[], nodes: readonly V1Node[]): V1Node[] {
  const name = agent.metadata?.name;
  const users = policies.filter((p) => p.spec.escalation.some((l) => l.agents.some((a) => a.name === name)));
  return nodes.filter((n) => users.some((p) => matchesSelector(n.metadata?.labels, p.spec.nodeSelector)));
}

/** The agent's type or rules are unknown (the driver lookup's message). */
export const invalidConfiguration = (message: string, nodes: string[]): AgentCheck => ({
  ok: false,
  reason: "InvalidConfiguration",
  message,
  nodes,
});

export const unusedAgent = (nodes: string[]): AgentCheck => ({
  ok: true,
  reason: "Unused",
  message: "no FencingPolicy names this agent for any node",
  nodes,
});

/** The operator may not read some of the agent's Secrets (their keys, namespace/name): nothing else can be checked. */
export const secretForbidden = (keys: readonly string[]): AgentCheck => ({
  ok: false,
  reason: "SecretForbidden",
  message: `the operator may not read Secret ${keys.join(", ")}: keep credentials in the operator's namespace, or grant its ServiceAccount get on secrets there (a Role and RoleBinding)`,
  nodes: [],
});

/**
 * The verdict once every node's parameters were resolved: Secrets missing first (the parameters that need them
 * cannot be checked), then the problems of the others (the first five); undefined when there are neither.
 */
export function parameterVerdict(nodes: string[], missing: ReadonlySet<string>, errors: readonly string[]): AgentCheck | undefined {
  if (missing.size)
    return {
      ok: false,
      reason: "SecretNotFound",
      message: `Secret ${[...missing].sort().join(", ")} does not exist: create it with the agent's credentials (e.g. key "password")`,
      nodes,
    };
  if (errors.length) {
    const more = errors.length > 5 ? ` (and ${errors.length - 5} more)` : "";
    return { ok: false, reason: "InvalidConfiguration", message: errors.slice(0, 5).join("; ") + more, nodes };
  }
  return undefined;
}

/**
 * The verdict on the machines the nodes resolve to: `shared` are the groups among every Node the operator knows; one
 * that includes a node of this agent makes its fence ambiguous (the others may be outside any policy).
 */
export function targetVerdict(nodes: string[], shared: readonly SharedTarget[]): AgentCheck {
  const covered = new Set(nodes);
  const dups = shared.filter((g) => g.nodes.some((n) => covered.has(n)));
  if (dups.length) {
    const shown = dups.slice(0, 5).map((g) => `${g.nodes.join(", ")} all resolve to ${g.target}`);
    const more = dups.length > 5 ? ` (and ${dups.length - 5} more groups)` : "";
    return {
      ok: false,
      reason: "DuplicateTarget",
      message:
        `nodes that would be fenced through the same machine: ${shown.join("; ")}${more}. ` +
        `Fencing one of them could power off another's machine; give each node its own address (or plug) in spec.nodes or a node-restriction.kubernetes.io/ label`,
      nodes,
    };
  }
  return { ok: true, reason: "Valid", message: `parameters resolve for ${nodes.length} node(s)`, nodes };
}
