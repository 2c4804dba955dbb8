// Agent runs: an attempt is written InProgress, then its operation runs in the background (agent-operations.ts: no
// worker waits on a BMC or a person) and its end re-enqueues the fence, whose next step records the outcome. What runs
// before each power command is beforePowerCommand (destructive.ts).
import type { V1Node } from "@kubernetes/client-node";
import type { FenceAgent, NodeFence } from "../../api/v1alpha1.ts";
import { missingInstanceWitness, PROVIDER_ID_TYPES } from "../../agents/cloud.ts";
import { resolveParameters, secretRefsFor } from "../../agents/parameters.ts";
import { loadRules, storageDriverFor } from "../../agents/registry.ts";
import { redact } from "../../agents/run.ts";
import { checkUniqueTarget } from "../../agents/targets.ts";
import { AgentError } from "../../agents/types.ts";
import { agentRunning, attemptFacts, targetNode, type Step } from "../../decide/fence-machine.ts";
import { errorMessage, isNotFound, type Kube } from "../../kube/api.ts";
import { NotLeaderError } from "../../runtime/leader.ts";
import type { OperationResult } from "./agent-operations.ts";
import { FENCED_CONDITION } from "./conditions.ts";
import type { StepContext, StepHandler } from "./context.ts";
import { powerCommand } from "./destructive.ts";

/** Writes the attempt InProgress, then runs the agent in the background; its end re-enqueues the fence. */
export const runAgent: StepHandler<"runAgent"> = async (c, { fence, node, step }) => {
  const { agent, level, operation: op, timeoutMs } = step;
  const nodeName = fence.spec.nodeName;
  const name = fence.metadata?.name ?? "";
  const agentName = agent.metadata?.name ?? "";
  const index = fence.status?.attempts?.length ?? 0;
  // Leadership before writing: a stale leader must not even start an attempt; nor a replica shutting down.
  c.leadership.assertLeading(`power ${op} of ${nodeName}`);
  if (c.d.inflight?.stopping) throw new NotLeaderError(`shutting down: not starting power ${op} of ${nodeName}`);
  const current = await writeAttempt(c, fence, step);
  c.d.log.info(
    { nodeFence: name, agent: agentName, level: level + 1, operation: op },
    `running ${agent.spec.type} agent ${agentName} (${op}) for ${nodeName}`,
  );
  // The state machine watches for the confirmation (manual) or counts the node's silence (watchdog): nothing to run.
  if ((agent.spec.type === "manual" || agent.spec.type === "watchdog") && op === "off") return current;
  const target = targetNode(current, node);
  c.operations.start(current.metadata?.uid ?? "", name, index, async (signal) => {
    const timer = c.d.metrics?.fenceStep.startTimer({ step: "agent" });
    try {
      return await operate(c, { fence: current, agent, op, target, timeoutMs }, signal);
    } finally {
      timer?.();
    }
  });
  return current;
};

/** The attempt, InProgress, with what the agent is now. */
async function writeAttempt(c: StepContext, fence: NodeFence, step: Extract<Step, { kind: "runAgent" }>): Promise<NodeFence> {
  const { agent, level, operation: op } = step;
  const agentName = agent.metadata?.name ?? "";
  return await c.write(fence, (s) => {
    s.attempts = [
      ...(s.attempts ?? []),
      // What the agent is now, recorded with the attempt: evidence is derived from it, not from the FenceAgent at the confirmation.
      {
        level,
        round: s.round ?? 0,
        agent: agentName,
        ...attemptFacts(agent),
        operation: op,
        startTime: c.now(),
        outcome: "InProgress",
        message: "",
      },
    ];
    // The condition the wait for this operation writes (fence-machine operationStep), in the same write: one round
    // trip less. Not while unfencing, whose condition reason decides the power-on (wait.ts).
    if (s.phase === "Fencing" && agent.spec.type !== "manual" && agent.spec.type !== "watchdog")
      c.cond(s, { type: FENCED_CONDITION, status: "False", ...agentRunning(`${agentName} ${op}`) }, fence);
    return s;
  });
}

interface Run {
  fence: NodeFence;
  agent: FenceAgent;
  op: "off" | "on";
  target: V1Node;
  timeoutMs: number;
}

/** One agent operation: checks, credentials, parameters, then the command; never throws (a failure is its outcome). */
async function operate(c: StepContext, x: Run, signal: AbortSignal): Promise<Omit<OperationResult, "state">> {
  const { agent, op, target } = x;
  const agentName = agent.metadata?.name ?? "";
  let secretValues: string[] = [];
  try {
    const storage = storageDriverFor(agent.spec.type);
    // A storage lift finds its fence by agent and node and undoes it as it was made: it needs no parameters, so
    // an agent misconfigured since (or from the start: its fence may still have gone out) can still lift it.
    const lifting = !!storage && op === "on";
    // A lift of an aborted fence of ours runs after that fence's write has landed or failed, never before it.
    if (lifting) await c.operations.settled(x.fence.metadata?.uid ?? "");
    const rules = await loadRules(agent.spec);
    // No node chooses its own executioner: an agent that would reach the machine of another node too is not run.
    const unique = lifting ? { ok: true as const } : checkUniqueTarget(agentName, agent.spec, target, c.d.caches.nodes.list(), rules);
    if (!unique.ok) throw new AgentError("Config", unique.message);
    const secrets = await readSecrets(c.d.kube, agent, x.fence.spec.nodeName);
    secretValues = [...secrets.values()].flatMap((m) => Object.values(m));
    const resolved = resolveParameters(agent.spec, target, secrets, rules);
    if ("errors" in resolved && !lifting) throw new AgentError("Config", `FenceAgent ${agentName}: ${resolved.errors.join("; ")}`);
    const parameters = "errors" in resolved ? {} : resolved.parameters;
    // A cloud's "this instance does not exist" counts as off only against a witness: another Node's instance that the
    // same parameters see (agents/cloud.ts; docs/safety.md §3). Its parameters need no Secret of its own.
    const missingInstance =
      op === "off" && PROVIDER_ID_TYPES.includes(agent.spec.type)
        ? missingInstanceWitness({
            type: agent.spec.type,
            parameters,
            target,
            nodes: c.d.caches.nodes.list(),
            resolve: (n) => {
              const w = resolveParameters(agent.spec, n, secrets, rules);
              return "errors" in w ? undefined : w.parameters;
            },
            device: (p) => rules?.target(p, target.metadata?.name)?.device,
          })
        : undefined;
    const r = await powerCommand(c, {
      fence: x.fence,
      agent,
      op,
      parameters,
      target,
      timeoutMs: x.timeoutMs,
      signal,
      ...(missingInstance ? { missingInstance } : {}),
    });
    return { outcome: r.outcome, message: redact(r.message, secretValues) };
  } catch (err) {
    const message = redact(err instanceof Error ? err.message : String(err), secretValues);
    return { outcome: err instanceof AgentError && err.kind === "Cancelled" ? "Cancelled" : "Failed", message };
  }
}

/** The Secrets the agent's parameters name for this node, by namespace/name. */
async function readSecrets(kube: Kube, agent: FenceAgent, nodeName: string): Promise<Map<string, Record<string, string>>> {
  const agentName = agent.metadata?.name ?? "";
  const secrets = new Map<string, Record<string, string>>();
  for (const r of secretRefsFor(agent.spec, nodeName)) {
    try {
      secrets.set(`${r.namespace}/${r.name}`, await kube.readSecret(r.namespace, r.name));
    } catch (err) {
      throw new AgentError(
        "Config",
        isNotFound(err)
          ? `Secret ${r.namespace}/${r.name} named by FenceAgent ${agentName} does not exist: create it with the agent's credentials (e.g. key "password")`
          : `cannot read Secret ${r.namespace}/${r.name}: ${errorMessage(err)}`,
        { cause: err },
      );
    }
  }
  return secrets;
}

/** An agent operation ended: its outcome goes into the attempt, and the operation is forgotten. */
export const recordOutcome: StepHandler<"recordOutcome"> = async (c, { fence, node, step, log }) => {
  const a = fence.status?.attempts?.[step.index];
  const next = await c.write(fence, (s) => {
    const x = s.attempts?.[step.index];
    if (x) Object.assign(x, { outcome: step.outcome, endTime: c.now(), message: step.message.slice(0, 2048) });
    if (step.watchdog) s.watchdog = step.watchdog;
    return s;
  });
  c.operations.forget(fence.metadata?.uid ?? "", step.index);
  const type = a?.agentType ?? c.d.caches.agents.get(a?.agent ?? "")?.spec.type;
  c.d.metrics?.attempts.inc({ agent: a?.agent ?? "", type: type ?? "", operation: a?.operation ?? "", outcome: step.outcome });
  const ok = step.outcome === "Succeeded";
  const msg = `level ${(a?.level ?? 0) + 1}, ${a?.agent} (${type ?? "?"}) ${a?.operation}: ${step.outcome}: ${step.message}`;
  (ok ? log.info.bind(log) : log.warn.bind(log))({ outcome: step.outcome }, `agent ${msg}`);
  c.announce(c.event(next, ok ? "Normal" : "Warning", ok ? "AgentSucceeded" : "AgentFailed", msg, node));
  return next;
};
