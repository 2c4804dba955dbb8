// `kubectl stockade fence NODE` and `unfence NODE`: an administrator's NodeFence, the same object one
// would `kubectl apply` (origin Manual), with the checks kubectl cannot make: the node exists, the policy
// exists, and an existing NodeFence is not silently replaced.
import { userInfo } from "node:os";
import { setTimeout as sleep } from "node:timers/promises";
import { PatchStrategy, setHeaderOptions } from "@kubernetes/client-node";
import type { DateTime } from "luxon";
import { API_VERSION, GROUP, VERSION, type NodeFence } from "../api/v1alpha1.ts";
import { CONFIRMED_OFF_ANNOTATION } from "../agents/manual.ts";
import { quorumRefusal } from "../decide/quorum.ts";
import { policyForNode } from "../decide/selectors.ts";
import { statusCode } from "../kube/api.ts";
import { CliError, describeApiError, type Cluster } from "./cluster.ts";
import { age } from "./format.ts";

/** Phases after which a NodeFence is only a record: deleting it is what allows a new episode. */
export const ENDED_PHASES = new Set(["Failed", "Unfenced"]);

export interface FenceOptions {
  reason?: string;
  policy?: string;
  replace?: boolean;
  /** Say what would happen and change nothing. */
  dryRun?: boolean;
  /** Asked with the plan before anything changes; false stops with nothing changed. */
  confirm?: (plan: string) => Promise<boolean>;
  /** --replace: how long to wait for the old NodeFence to be gone (default REPLACE_TIMEOUT_MS). */
  replaceTimeoutMs?: number;
}

/** How long --replace waits for the deleted NodeFence's finalizer (the operator's cleanup) before giving up. */
export const REPLACE_TIMEOUT_MS = 60_000;

/** Asks before a change; false: nothing is changed. */
export type Confirm = (plan: string) => Promise<boolean>;

function who(): string {
  try {
    return userInfo().username;
  } catch {
    return "an administrator";
  }
}

/** Why an existing NodeFence ended, from its Failed condition when there is one. */
function endedWhy(f: NodeFence): string {
  const failed = f.status?.conditions?.find((c) => c.type === "Failed" && c.status === "True");
  return failed ? `: ${failed.message}` : "";
}

export async function fence(c: Cluster, node: string, o: FenceOptions, now: DateTime): Promise<string> {
  const [n, policies] = await Promise.all([c.node(node), c.policies()]);
  let policy = o.policy;
  if (policy) {
    if (!policies.some((p) => p.metadata?.name === policy))
      throw new CliError(
        `FencingPolicy "${policy}" not found (policies: ${policies.map((p) => p.metadata?.name).join(", ") || "none"}); omit --policy to use the one whose nodeSelector matches the node`,
      );
  } else {
    // The operator would fail the NodeFence with NoPolicy: say so before creating it.
    policy = policyForNode(n, policies).policy?.metadata?.name;
    if (!policy)
      throw new CliError(`no FencingPolicy selects node ${node}, so nothing says how to fence it: pass --policy NAME or create a policy`);
  }
  const lines: string[] = [];
  const plan: string[] = [];
  const governing = policies.find((p) => p.metadata?.name === policy);
  // The operator would not start it (the NodeFence would wait with reason ControlPlaneNode): refuse before creating it.
  const refused = quorumRefusal(n, await c.kubeSystemPodsOn(node), governing);
  if (refused)
    throw new CliError(
      `${refused}. A control-plane or etcd node is fenced only under a policy with spec.allowControlPlane: true (pass --policy NAME for one that selects it); nothing changed`,
    );
  // The operator's fence machine holds only automatic NodeFences for a paused policy, and a policy's dryRun
  // only stops it creating them: a Manual NodeFence is executed either way. Say so before asking.
  if (governing?.spec.paused)
    plan.push(`FencingPolicy ${policy} is paused: that stops automatic fencing only; the operator executes this Manual NodeFence anyway`);
  if (governing?.spec.dryRun)
    plan.push(`FencingPolicy ${policy} has dryRun: that only reports automatic fences; the operator executes this Manual NodeFence anyway`);
  const old = await c.fence(node);
  if (old) {
    const phase = old.status?.phase ?? "";
    const desc = `NodeFence ${node} (phase ${phase || "(new)"}, origin ${old.spec.origin ?? "Manual"}, created ${age(old.metadata?.creationTimestamp, now)} ago)`;
    if (!ENDED_PHASES.has(phase))
      throw new CliError(`${desc} already exists and is active: ${node} is being fenced or is fenced; see kubectl stockade status`);
    if (!o.replace)
      throw new CliError(
        `${desc} exists and ended${endedWhy(old)}: pass --replace to delete it (its episode stays in kubectl stockade history) and fence ${node} again`,
      );
    plan.push(`delete nodefence.${GROUP}/${node} (it is ${phase})`);
  }
  plan.push(
    `create nodefence.${GROUP}/${node} (origin Manual, policy ${policy}${o.policy ? "" : ", the one that selects the node"}): the operator powers ${node} off through the policy's agents and releases its guarded pods`,
  );
  if (o.dryRun) return `Would:\n${plan.map((l) => `  ${l}`).join("\n")}\n(dry run: nothing changed)\n`;
  if (o.confirm && !(await o.confirm(`Fence node ${node}:\n${plan.map((l) => `  ${l}`).join("\n")}\n`)))
    throw new CliError(`not confirmed: nothing changed`);
  if (old) {
    const phase = old.status?.phase ?? "";
    await c.call(`delete NodeFence ${node}`, () => c.kube.deleteNodeFence(old));
    // Its finalizer holds it until the operator has cleaned up after it and written its FenceRecord (the episode's
    // history): the new one can be created only once it is gone.
    const deadline = Date.now() + (o.replaceTimeoutMs ?? REPLACE_TIMEOUT_MS);
    while ((await c.fence(node))?.metadata?.uid === old.metadata?.uid) {
      if (Date.now() >= deadline)
        throw new CliError(
          `NodeFence ${node} is being deleted but is still there after ${Math.round((o.replaceTimeoutMs ?? REPLACE_TIMEOUT_MS) / 1000)} s: its finalizer waits for the operator (is it running? kubectl stockade status); run this again once it is gone`,
        );
      await sleep(500);
    }
    lines.push(`nodefence.${GROUP}/${node} deleted (it was ${phase})`);
  }
  const body: NodeFence = {
    apiVersion: API_VERSION,
    kind: "NodeFence",
    metadata: { name: node },
    spec: {
      nodeName: node,
      origin: "Manual",
      ...(o.policy ? { policy: o.policy } : {}),
      reason: (o.reason ?? `requested by ${who()} with kubectl stockade fence`).slice(0, 1024),
    },
  };
  try {
    await c.raw(() => c.kube.createNodeFence(body));
  } catch (err) {
    // The operator may have created one for a partitioned node in between.
    const other = statusCode(err) === 409 ? await c.fence(node).catch(() => undefined) : undefined;
    if (other)
      throw new CliError(
        `NodeFence ${node} was created meanwhile by someone else (origin ${other.spec.origin}): see kubectl stockade status`,
      );
    throw new CliError(describeApiError(err, `create NodeFence ${node}`, c.server));
  }
  lines.push(
    `nodefence.${GROUP}/${node} created (origin Manual, policy ${policy}${o.policy ? "" : ", the one that selects the node"})`,
    `The operator now powers ${node} off, confirms it, and releases its guarded pods. Follow it with: kubectl stockade status`,
  );
  return lines.join("\n") + "\n";
}

const mergePatch = setHeaderOptions("Content-Type", PatchStrategy.MergePatch);

export async function unfence(c: Cluster, node: string, confirm?: Confirm): Promise<string> {
  const f = await c.fence(node);
  if (!f) throw new CliError(`no NodeFence ${node}: node ${node} is not fenced, nothing to unfence`);
  const phase = f.status?.phase ?? "";
  if (phase === "Unfenced") return `NodeFence ${node} is already Unfenced; nothing to do\n`;
  if (f.spec.unfence) return `NodeFence ${node} already has spec.unfence=true (phase ${phase || "(new)"}); the operator is on it\n`;
  if (
    confirm &&
    !(await confirm(
      `Unfence node ${node} (NodeFence phase ${phase || "(new)"}): the operator powers it back on and removes its fenced taint\n`,
    ))
  )
    throw new CliError(`not confirmed: nothing changed`);
  await c.call(`patch NodeFence ${node}`, () =>
    c.kube.custom.patchClusterCustomObject(
      {
        group: GROUP,
        version: VERSION,
        plural: "nodefences",
        name: node,
        // The resourceVersion makes this a compare-and-swap: a concurrent change is not overwritten.
        body: { metadata: { resourceVersion: f.metadata?.resourceVersion }, spec: { unfence: true } },
      },
      mergePatch,
    ),
  );
  return `nodefence.${GROUP}/${node} patched (spec.unfence=true): the operator powers ${node} on and removes its fenced taint\n`;
}

/**
 * `confirm NODE`: for a manual FenceAgent, the administrator says the machine is off by annotating the
 * NodeFence stockade.io/confirmed-off=NODE (the value is the node's name, so a copied annotation cannot
 * confirm another node). The admission policy requires the `confirm` verb on nodefences and a partitioned node.
 */
export async function confirmOff(c: Cluster, node: string, confirm?: Confirm): Promise<string> {
  const f = await c.fence(node);
  if (!f) throw new CliError(`no NodeFence ${node}: there is no fence of ${node} to confirm`);
  const phase = f.status?.phase ?? "";
  if (ENDED_PHASES.has(phase)) throw new CliError(`NodeFence ${node} ended (phase ${phase}): there is nothing to confirm`);
  if (f.metadata?.annotations?.[CONFIRMED_OFF_ANNOTATION] === node) return `NodeFence ${node} is already confirmed off; nothing to do\n`;
  if (
    confirm &&
    !(await confirm(
      `Confirm that machine ${node} is powered off (annotate NodeFence ${node} ${CONFIRMED_OFF_ANNOTATION}=${node}): its guarded pods and volumes are then released elsewhere. Only confirm what you have checked at the machine.\n`,
    ))
  )
    throw new CliError(`not confirmed: nothing changed`);
  await c.call(`annotate NodeFence ${node}`, () =>
    c.kube.custom.patchClusterCustomObject(
      {
        group: GROUP,
        version: VERSION,
        plural: "nodefences",
        name: node,
        body: { metadata: { resourceVersion: f.metadata?.resourceVersion, annotations: { [CONFIRMED_OFF_ANNOTATION]: node } } },
      },
      mergePatch,
    ),
  );
  return `nodefence.${GROUP}/${node} annotated (${CONFIRMED_OFF_ANNOTATION}=${node}): the operator now treats ${node} as off\n`;
}
