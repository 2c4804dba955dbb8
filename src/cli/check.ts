// `kubectl stockade check`: will fencing work when it is needed? Every FencingPolicy names agents that
// exist, every FenceAgent resolves for the nodes its policies give it (the operator's own check), and each
// of those nodes' fencing devices answers a live power *status* query through the same driver and runner
// the operator uses. Never off, never on: a check must not fence anything.
import type { V1MutatingWebhookConfiguration, V1Node, V1ValidatingWebhookConfiguration } from "@kubernetes/client-node";
import type { FenceAgent, FencingPolicy } from "../api/v1alpha1.ts";
import { resolveParameters, secretKey, secretRefsFor } from "../agents/parameters.ts";
import { driverFor, storageDriverFor } from "../agents/registry.ts";
import { networkFenceName, stateOf } from "../agents/csi-addons-network-fence.ts";
import { networkFenceApi } from "../kube/network-fence.ts";
import type { Kube } from "../kube/api.ts";
import { runOperation } from "../agents/run.ts";
import { checkAgent } from "../agents/check.ts";
import { nodesForAgent } from "../decide/agent-check.ts";
import { matchesSelector } from "../decide/selectors.ts";
import type { Cluster } from "./cluster.ts";
import { CliError } from "./cluster.ts";
import { table } from "./format.ts";
import { mapLimit } from "../runtime/map-limit.ts";

export interface CheckOptions {
  /** Query only this node's agents. */
  node?: string;
  /** Overrides each agent's timeoutSeconds for the live query. */
  timeoutSeconds?: number;
}

type Secrets = Map<string, Record<string, string> | undefined>;

/** Problems of a policy that make fencing under it fail: the agents it names must exist. */
export function policyProblems(p: FencingPolicy, agents: ReadonlySet<string>): string[] {
  return p.spec.escalation.flatMap((l, i) =>
    l.agents.filter((a) => !agents.has(a.name)).map((a) => `level ${i + 1} names FenceAgent ${a.name}, which does not exist`),
  );
}

/** The flag that stops kube-controller-manager from force-detaching volumes of an unhealthy node after 6 minutes. */
export const FORCE_DETACH_FLAG = "--disable-force-detach-on-timeout";

/**
 * Warnings about the second line of defence (docs/volumes.md): the webhooks installed, with a CA, failing
 * closed; kube-controller-manager not force-detaching on its own (where its command line can be seen).
 */
export function volumeSafetyWarnings(
  w: { mutating?: V1MutatingWebhookConfiguration; validating?: V1ValidatingWebhookConfiguration; error?: string },
  kcm: string[][] | undefined,
): string[] {
  const out: string[] = [];
  if (w.error) out.push(`cannot read the webhook configurations: ${w.error}`);
  const configs: [string, string, { failurePolicy?: string; clientConfig: { caBundle?: string } }[] | undefined][] = [
    [
      "MutatingWebhookConfiguration stockade-claim-lock",
      "pods that use ReadWriteOnce claims start without the claim lock",
      w.mutating?.webhooks,
    ],
    ["ValidatingWebhookConfiguration stockade-force-delete", "force deletes of guarded pods are not checked", w.validating?.webhooks],
  ];
  for (const [name, risk, hooks] of configs) {
    if (!hooks) {
      if (!w.error) out.push(`${name} is not installed: ${risk} (kubectl apply -f manifests/08-webhooks.yaml)`);
      continue;
    }
    if (hooks.some((h) => !h.clientConfig.caBundle))
      out.push(`${name} has no caBundle yet: is the operator running? (it writes it at start)`);
    if (hooks.some((h) => h.failurePolicy === "Ignore")) out.push(`${name} has failurePolicy Ignore: while the operator is down, ${risk}`);
  }
  if (kcm === undefined) out.push(`cannot read kube-system pods to check kube-controller-manager for ${FORCE_DETACH_FLAG}`);
  else if (!kcm.length)
    out.push(
      `kube-controller-manager's flags are not visible here: make sure it runs with ${FORCE_DETACH_FLAG} (else it force-detaches a partitioned node's volumes after 6 minutes, whatever the claim lock says)`,
    );
  else
    for (const cmd of kcm) {
      const flag = cmd.find((a) => a === FORCE_DETACH_FLAG || a.startsWith(`${FORCE_DETACH_FLAG}=`));
      if (!flag || /=(false|0)$/i.test(flag))
        out.push(
          `kube-controller-manager runs without ${FORCE_DETACH_FLAG}: it force-detaches a partitioned node's volumes after 6 minutes, whatever the claim lock says (docs/volumes.md)`,
        );
    }
  return out;
}

/** One live status query; the verdict line and whether it passed. */
async function query(
  agent: FenceAgent,
  node: V1Node,
  secrets: Secrets,
  o: CheckOptions,
  kube?: Kube,
): Promise<{ ok: boolean; result: string }> {
  const name = node.metadata?.name ?? "";
  const storage = storageDriverFor(agent.spec.type);
  if (storage) {
    // A storage fence has no power state: check its parameters and read (never write) its NetworkFence.
    const r = resolveParameters(agent.spec, node, new Map());
    if ("errors" in r) return { ok: false, result: `FAILED ${r.errors.join("; ")}` };
    const problems = storage.validate(r.parameters);
    if (problems.length) return { ok: false, result: `FAILED ${problems.join("; ")}` };
    if (!kube) return { ok: true, result: "OK storage fence: parameters resolve" };
    try {
      const nfName = networkFenceName(agent.metadata?.name ?? "", name);
      const nf = await networkFenceApi(kube).get(nfName, AbortSignal.timeout((o.timeoutSeconds ?? 30) * 1000));
      return {
        ok: true,
        result: `OK storage fence: NetworkFence ${nfName} ${nf ? `is ${stateOf(nf)}` : "absent (not fenced)"}`,
      };
    } catch (err) {
      return { ok: false, result: `FAILED ${(err as Error).message}` };
    }
  }
  let driver;
  try {
    driver = driverFor(agent.spec.type, agent.spec.agent);
  } catch (err) {
    return { ok: false, result: `FAILED ${(err as Error).message}` };
  }
  if (driver.type === "manual") return { ok: true, result: "SKIPPED manual agent: an administrator powers the machine off and confirms" };
  if (driver.type === "watchdog")
    return { ok: true, result: "SKIPPED watchdog agent: the node's own agent holds its watchdog; nothing to query" };
  const have = new Map<string, Record<string, string>>();
  for (const ref of secretRefsFor(agent.spec, name)) {
    const data = secrets.get(secretKey(ref));
    if (data) have.set(secretKey(ref), data);
  }
  const r = resolveParameters(agent.spec, node, have);
  if ("errors" in r) return { ok: false, result: `FAILED ${r.errors.join("; ")}` };
  const res = await runOperation(driver, { node: name, parameters: r.parameters, annotations: {} }, "status", {
    timeoutMs: (o.timeoutSeconds ?? agent.spec.timeoutSeconds ?? 30) * 1000,
    retries: agent.spec.retries ?? 2,
    backoffMs: (agent.spec.retryBackoffSeconds ?? 1) * 1000,
  });
  if (res.outcome !== "Succeeded") return { ok: false, result: `FAILED ${res.message}` };
  if (res.power !== "on" && res.power !== "off")
    return { ok: false, result: `FAILED the device answered but not with a power state (${res.power}): an off could not be confirmed` };
  return { ok: true, result: `OK power=${res.power}` };
}

/** Prints the report through `write` as it goes; resolves to whether everything passed. */
export async function check(c: Cluster, o: CheckOptions, write: (s: string) => void): Promise<boolean> {
  const [nodes, policies, agents] = await Promise.all([c.nodes(), c.policies(), c.agents()]);
  if (o.node && !nodes.some((n) => n.metadata?.name === o.node))
    throw new CliError(`node "${o.node}" not found (kubectl get nodes lists them)`);
  let failures = 0;
  const agentNames = new Set(agents.map((a) => a.metadata?.name ?? ""));
  const byName = <T extends { metadata?: { name?: string } }>(xs: T[]) =>
    [...xs].sort((a, b) => (a.metadata?.name ?? "").localeCompare(b.metadata?.name ?? ""));

  write("FENCINGPOLICIES\n");
  if (!policies.length) write("none: no node is fenced automatically\n");
  const rows = byName(policies).map((p) => {
    const problems = policyProblems(p, agentNames);
    failures += problems.length ? 1 : 0;
    const selected = nodes.filter((n) => matchesSelector(n.metadata?.labels, p.spec.nodeSelector)).length;
    const levels = p.spec.escalation.map((l) => l.agents.map((a) => a.name).join("+")).join(" -> ");
    const info = `selects ${selected} node(s); escalation ${levels}${selected ? "" : " (warning: selects no node)"}`;
    return [p.metadata?.name ?? "", problems.length ? "FAILED" : "OK", problems.length ? problems.join("; ") : info];
  });
  if (rows.length) write(table(["NAME", "RESULT", "DETAIL"], rows) + "\n");
  const unselected = nodes.filter((n) => !policies.some((p) => matchesSelector(n.metadata?.labels, p.spec.nodeSelector)));
  if (policies.length && unselected.length)
    write(`note: no policy selects ${unselected.map((n) => n.metadata?.name).join(", ")}: Stockade never fences them automatically\n`);

  write("\nFENCEAGENTS\n");
  const secrets: Secrets = new Map();
  const targets: { agent: FenceAgent; node: V1Node }[] = [];
  const agentRows: string[][] = [];
  for (const a of byName(agents)) {
    const covered = nodesForAgent(a, policies, nodes);
    for (const n of covered)
      for (const ref of secretRefsFor(a.spec, n.metadata?.name ?? "")) {
        const key = secretKey(ref);
        if (!secrets.has(key)) secrets.set(key, await c.secret(ref.namespace, ref.name));
      }
    const r = checkAgent(a, covered, secrets, nodes);
    if (!r.ok) failures++;
    const type = a.spec.type === "fenceAgent" ? `fenceAgent ${a.spec.agent ?? "?"}` : a.spec.type;
    agentRows.push([a.metadata?.name ?? "", type, r.ok ? "OK" : "FAILED", `${r.reason}: ${r.message}`]);
    for (const n of covered) if (!o.node || n.metadata?.name === o.node) targets.push({ agent: a, node: n });
  }
  write(agentRows.length ? table(["NAME", "TYPE", "RESULT", "DETAIL"], agentRows) + "\n" : "none: nothing can fence a node\n");
  if (!agents.length && policies.length) failures++;

  write("\nLIVE STATUS QUERIES (status only, from this machine: nothing is powered off or on)\n");
  if (o.node && !targets.length) {
    failures++;
    write(`FAILED no FencingPolicy's escalation covers node ${o.node}: nothing could fence it\n`);
  } else if (!targets.length) write("none: no FenceAgent is named by a policy that selects a node\n");
  else {
    const results = await mapLimit(targets, 4, (t) => query(t.agent, t.node, secrets, o, c.kube));
    failures += results.filter((r) => !r.ok).length;
    write(
      table(
        ["AGENT", "NODE", "RESULT"],
        targets.map((t, i) => [t.agent.metadata?.name ?? "", t.node.metadata?.name ?? "", results[i]?.result ?? ""]),
      ) + "\n",
    );
  }
  write("\nVOLUME SAFETY (claim lock, force-delete guard, force detach)\n");
  const warnings = volumeSafetyWarnings(await c.webhooks(), await c.controllerManagerCommands());
  write(warnings.length ? warnings.map((w) => `warning: ${w}\n`).join("") : "OK\n");
  write(failures ? `\n${failures} check(s) failed\n` : "\nall checks passed\n");
  return failures === 0;
}
