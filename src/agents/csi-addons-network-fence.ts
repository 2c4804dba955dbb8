// Storage fencing through csi-addons: a NetworkFence (csiaddons.openshift.io/v1alpha1, cluster-scoped) asks the
// storage provider's CSI driver to refuse the node's addresses (Ceph: a blocklist). It cuts the node off its
// volumes; it does NOT stop the machine, so it is never evidence that the machine is off (docs/safety.md): the
// state machine turns it into StorageFenced evidence, which releases volumes only.
//
// csi-addons' documented flow (docs/networkfence.md of kubernetes-csi-addons): fenceState Fenced blocks the CIDRs;
// to unblock, set fenceState Unfenced and wait for the result; deleting a NetworkFence only drops its finalizer,
// it unfences nothing. Its controller writes status.result (Succeeded|Failed) and status.message, whose success
// messages say which operation succeeded ("fencing operation successful" / "unfencing operation successful").
import { isIP } from "node:net";
import { isDeepStrictEqual } from "node:util";
import {
  AgentError,
  type NetworkFence,
  type ParameterRules,
  type StorageAgentContext,
  type StorageFenceDriver,
  type StorageFenceState,
} from "./types.ts";
import { plainProblem } from "./values.ts";
import { fencedStorageClasses, networkFenceName, parameterList as list } from "../decide/storage-fence.ts";

// Decided on by the state machine, so declared in decide/; exported here too, with the rest of the driver.
export { fencedStorageClasses, networkFenceName };

export const NETWORK_FENCE_GROUP = "csiaddons.openshift.io";
export const NETWORK_FENCE_VERSION = "v1alpha1";
/** Labels every NetworkFence Stockade creates: one not carrying them is someone else's and never touched. */
export const NETWORK_FENCE_OWNER_LABEL = "stockade.io/network-fence-for";
/** The FenceAgent whose fence it is (labelled since fences are per agent; a legacy stockade-<node> has none). */
export const NETWORK_FENCE_AGENT_LABEL = "stockade.io/network-fence-agent";
/** csi-addons' own success messages (api/csiaddons/v1alpha1/networkfence_types.go). */
export const FENCE_SUCCESS_MESSAGE = "fencing operation successful";
export const UNFENCE_SUCCESS_MESSAGE = "unfencing operation successful";
/** Spec parameters prefixed so are passed to the driver in spec.parameters (without the prefix). */
export const DRIVER_PARAMETER_PREFIX = "parameter.";

// Also the per-node allow-list of the CRD (tools/gen-fence-agent-rules.ts): only cidrs varies per node.
export const NETWORK_FENCE_PARAMETERS = [
  "networkFenceClassName",
  "driver",
  "secretName",
  "secretNamespace",
  "cidrs",
  "nodeAddresses",
  "storageClasses",
];
/** The kubelet-reported address types the nodeAddresses parameter may name. */
const ADDRESS_TYPES = ["InternalIP", "ExternalIP"];
const DNS_LABEL = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;
const DNS_SUBDOMAIN = /^(?=.{1,253}$)[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;

/**
 * The name versions before per-agent NetworkFences used (one stockade-<node> shared by every storage agent). Never
 * created any more; a fence of that name with our node label (and no agent label) is lifted by any storage agent's
 * unfence of that node, so that an upgrade loses no fence it held.
 */
export function legacyNetworkFenceName(node: string): string {
  const name = `stockade-${node}`;
  return name.length <= 253 ? name : name.slice(0, 253);
}

/** A CIDR in canonical-enough form (a bare address gets /32 or /128), or a problem. */
export function parseCidr(value: string): { cidr: string } | { problem: string } {
  const [addr, bits, ...rest] = value.split("/");
  const family = isIP(addr ?? "");
  if (!family || rest.length) return { problem: `${JSON.stringify(value)} is not an IP address or CIDR` };
  const max = family === 4 ? 32 : 128;
  if (bits === undefined) return { cidr: `${addr}/${max}` };
  if (!/^\d{1,3}$/.test(bits) || Number(bits) > max) return { problem: `${JSON.stringify(value)} has a prefix length outside 0-${max}` };
  // A short prefix fences far more than one node: refused (a /0 would cut the whole cluster off its storage).
  if (Number(bits) < (family === 4 ? 24 : 64))
    return { problem: `${JSON.stringify(value)} covers more than a node's addresses (prefix shorter than /${family === 4 ? 24 : 64})` };
  return { cidr: `${addr}/${bits}` };
}

function check(p: Record<string, string>): string[] {
  const problems: string[] = [];
  for (const k of Object.keys(p))
    if (!NETWORK_FENCE_PARAMETERS.includes(k) && !k.startsWith(DRIVER_PARAMETER_PREFIX))
      problems.push(
        `parameter ${k} is not a csiAddonsNetworkFence parameter: it takes ${NETWORK_FENCE_PARAMETERS.join(", ")} and ${DRIVER_PARAMETER_PREFIX}<key> (docs/api.md)`,
      );
  const cls = p.networkFenceClassName ?? "";
  const driver = p.driver ?? "";
  if (!cls && !driver)
    problems.push(
      "parameter networkFenceClassName (a NetworkFenceClass) or driver (the CSI driver, with secretName and secretNamespace) is required",
    );
  if (cls && !DNS_SUBDOMAIN.test(cls)) problems.push(`parameter networkFenceClassName must be an object name, not ${JSON.stringify(cls)}`);
  if (driver && !DNS_SUBDOMAIN.test(driver)) problems.push(`parameter driver must be a CSI driver name, not ${JSON.stringify(driver)}`);
  if (!cls && driver && (!p.secretName || !p.secretNamespace))
    problems.push("parameters secretName and secretNamespace are required with driver (csi-addons needs the driver's Secret)");
  if (p.secretName && !DNS_SUBDOMAIN.test(p.secretName)) problems.push(`parameter secretName must be an object name`);
  if (p.secretNamespace && !DNS_LABEL.test(p.secretNamespace)) problems.push(`parameter secretNamespace must be a namespace name`);
  for (const [k, v] of Object.entries(p))
    if (k.startsWith(DRIVER_PARAMETER_PREFIX) && plainProblem(v)) problems.push(`parameter ${k} ${plainProblem(v)}`);
  const classes = list(p.storageClasses);
  if (!classes.length)
    problems.push(
      "parameter storageClasses is required: the StorageClasses whose volumes this NetworkFence cuts off (only their volumes are released on its evidence)",
    );
  for (const c of classes)
    if (!DNS_SUBDOMAIN.test(c)) problems.push(`parameter storageClasses: ${JSON.stringify(c)} is not a StorageClass name`);
  for (const c of list(p.cidrs)) {
    const r = parseCidr(c);
    if ("problem" in r) problems.push(`parameter cidrs: ${r.problem}`);
  }
  for (const t of list(p.nodeAddresses))
    if (!ADDRESS_TYPES.includes(t))
      problems.push(`parameter nodeAddresses takes ${ADDRESS_TYPES.join(", ")} (comma-separated), not ${JSON.stringify(t)}`);
  if (!list(p.cidrs).length && !list(p.nodeAddresses).length)
    problems.push(
      "parameter cidrs is missing: set the node's addresses in spec.nodes.<node>.parameters.cidrs (or a nodeTemplates entry from a node-restriction.kubernetes.io/ label); to fence the addresses the node's kubelet reports instead, set nodeAddresses: InternalIP (docs/safety.md: a kubelet chooses those)",
    );
  return problems;
}

/** The CIDRs to fence: the administrator's, plus the kubelet-reported addresses only where nodeAddresses asks for them. */
export function fenceCidrs(ctx: Pick<StorageAgentContext, "parameters" | "addresses">): string[] {
  const out = list(ctx.parameters.cidrs).flatMap((c) => {
    const r = parseCidr(c);
    return "cidr" in r ? [r.cidr] : [];
  });
  const types = list(ctx.parameters.nodeAddresses);
  for (const a of ctx.addresses ?? [])
    if (types.includes(a.type)) {
      const r = parseCidr(a.address);
      if ("cidr" in r) out.push(r.cidr);
    }
  return [...new Set(out)].sort();
}

export const networkFenceRules: ParameterRules = {
  subject: "csiAddonsNetworkFence",
  verdict: (name) =>
    NETWORK_FENCE_PARAMETERS.includes(name) || name.startsWith(DRIVER_PARAMETER_PREFIX) ? { kind: "allowed" } : undefined,
  credentials: [],
  check,
  // Two nodes whose administrator-set CIDRs are the same would fence each other's storage.
  target: (p) => {
    const cidrs = fenceCidrs({ parameters: p });
    return cidrs.length ? { device: `networkfence ${cidrs.join(",")}`, outlets: [] } : undefined;
  },
};

/** A label value naming an object (label values are at most 63 characters: longer names are cut; the object name is exact). */
const labelValue = (name: string) => name.slice(0, 63).replace(/[^A-Za-z0-9]+$/, "");

/** The NetworkFence object for one agent's fence of a node. */
export function desiredNetworkFence(ctx: StorageAgentContext, state: "Fenced" | "Unfenced"): NetworkFence {
  const p = ctx.parameters;
  const driverParams = Object.fromEntries(
    Object.entries(p)
      .filter(([k]) => k.startsWith(DRIVER_PARAMETER_PREFIX))
      .map(([k, v]) => [k.slice(DRIVER_PARAMETER_PREFIX.length), v]),
  );
  return {
    apiVersion: `${NETWORK_FENCE_GROUP}/${NETWORK_FENCE_VERSION}`,
    kind: "NetworkFence",
    metadata: {
      name: networkFenceName(ctx.agent, ctx.node),
      labels: { [NETWORK_FENCE_OWNER_LABEL]: labelValue(ctx.node), [NETWORK_FENCE_AGENT_LABEL]: labelValue(ctx.agent) },
    },
    spec: {
      fenceState: state,
      cidrs: fenceCidrs(ctx),
      ...(p.networkFenceClassName
        ? { networkFenceClassName: p.networkFenceClassName }
        : {
            driver: p.driver,
            secret: { name: p.secretName, namespace: p.secretNamespace },
            ...(Object.keys(driverParams).length ? { parameters: driverParams } : {}),
          }),
    },
  };
}

/** Ours: labelled for this node and this agent. */
function ours(nf: NetworkFence, ctx: Pick<StorageAgentContext, "node" | "agent">): boolean {
  const l = nf.metadata?.labels ?? {};
  return l[NETWORK_FENCE_OWNER_LABEL] === labelValue(ctx.node) && l[NETWORK_FENCE_AGENT_LABEL] === labelValue(ctx.agent);
}

/** A fence of this node made by a version before per-agent fences: our node label, no agent label. */
function legacyOurs(nf: NetworkFence, node: string): boolean {
  const l = nf.metadata?.labels ?? {};
  return l[NETWORK_FENCE_OWNER_LABEL] === labelValue(node) && l[NETWORK_FENCE_AGENT_LABEL] === undefined;
}

/**
 * The spec fields csi-addons makes immutable (CEL self == oldSelf): which backend fences, and how it is reached. A
 * NetworkFence that differs there is another backend's fence (or our agent's old settings): never adopted.
 */
export function immutableDifferences(have: NetworkFence["spec"], want: NetworkFence["spec"]): string[] {
  const out: string[] = [];
  const cmp = (what: string, a: unknown, b: unknown) => {
    if (!isDeepStrictEqual(a, b)) out.push(`${what} ${JSON.stringify(a)} (wanted ${JSON.stringify(b)})`);
  };
  cmp("networkFenceClassName", have.networkFenceClassName ?? "", want.networkFenceClassName ?? "");
  cmp("driver", have.driver ?? "", want.driver ?? "");
  cmp(
    "secret",
    { name: have.secret?.name ?? "", namespace: have.secret?.namespace ?? "" },
    {
      name: want.secret?.name ?? "",
      namespace: want.secret?.namespace ?? "",
    },
  );
  cmp("parameters", have.parameters ?? {}, want.parameters ?? {});
  return out;
}

function kubeOf(ctx: StorageAgentContext) {
  if (!ctx.kube) throw new AgentError("Config", "csiAddonsNetworkFence needs the Kubernetes API, which this caller does not give");
  return ctx.kube;
}

/** This agent's NetworkFence for the node, refused when the object of that name is not Stockade's. */
async function existing(ctx: StorageAgentContext): Promise<NetworkFence | undefined> {
  const name = networkFenceName(ctx.agent, ctx.node);
  const nf = await kubeOf(ctx).get(name, ctx.signal);
  if (nf && !ours(nf, ctx))
    throw new AgentError(
      "Config",
      `NetworkFence ${name} exists and is not Stockade's fence of ${ctx.node} by FenceAgent ${ctx.agent} (labels ${NETWORK_FENCE_OWNER_LABEL}=${labelValue(ctx.node)}, ${NETWORK_FENCE_AGENT_LABEL}=${labelValue(ctx.agent)}): Stockade never changes another's fence; remove it or let its owner manage ${ctx.node}`,
    );
  return nf;
}

/** The node's fence made by an older version, if there is one of ours (another's of that name is left alone). */
async function legacy(ctx: StorageAgentContext): Promise<NetworkFence | undefined> {
  const nf = await kubeOf(ctx).get(legacyNetworkFenceName(ctx.node), ctx.signal);
  return nf && legacyOurs(nf, ctx.node) ? nf : undefined;
}

/**
 * Changes a NetworkFence's spec, clearing its status first. csi-addons records no generation with its result (no
 * observedGeneration, no conditions: internal/controller/csiaddons/networkfence_controller.go), so a result written
 * for the old spec would read as the answer to the new one (a CIDR added: "fencing operation successful" at once).
 * Cleared, then changed, each write on the resourceVersion the one before returned: csi-addons writes its status on
 * the resourceVersion it read (a conflict once either write landed) and reconciles only on a new generation, so any
 * result present afterwards was written for this spec (or a later one).
 */
async function rewrite(ctx: StorageAgentContext, nf: NetworkFence, spec: NetworkFence["spec"]): Promise<void> {
  const kube = kubeOf(ctx);
  const cleared = nf.status && Object.keys(nf.status).length ? await kube.replaceStatus({ ...nf, status: {} }, ctx.signal) : nf;
  await kube.replace({ ...cleared, spec }, ctx.signal);
}

async function fence(ctx: StorageAgentContext): Promise<void> {
  const want = desiredNetworkFence(ctx, "Fenced");
  if (!want.spec.cidrs.length)
    throw new AgentError(
      "Config",
      `no address to fence for ${ctx.node}: set parameter cidrs (or nodeAddresses, and check the Node's status.addresses)`,
    );
  const kube = kubeOf(ctx);
  const name = want.metadata.name;
  const nf = await existing(ctx);
  if (!nf) {
    await kube.create(want, ctx.signal);
    return;
  }
  if (nf.metadata?.deletionTimestamp)
    throw new AgentError("Failed", `NetworkFence ${name} is being deleted: waiting for it to go before fencing again`);
  const diff = immutableDifferences(nf.spec, want.spec);
  if (diff.length) {
    // Lifted and confirmed so: it holds nothing, and goes (the next try creates it with the agent's settings).
    if (nf.spec?.fenceState === "Unfenced" && stateOf(nf) === "unfenced") {
      await kube.delete(name, nf.metadata?.uid, ctx.signal);
      throw new AgentError(
        "Failed",
        `NetworkFence ${name} was made with other settings (${diff.join(", ")}) and is unfenced: deleted, to be made again`,
      );
    }
    // Held: lifting it to change settings would unfence a node whose volumes may have been released.
    throw new AgentError(
      "Config",
      `NetworkFence ${name} (${nf.spec?.fenceState}) was made with other settings than FenceAgent ${ctx.agent} has now: ${diff.join(", ")}; csi-addons makes those immutable and Stockade never lifts a fence to change them: restore the agent's settings, or unfence the NodeFence (which lifts it as it was made) and fence again`,
    );
  }
  // cidrs may change: a wider set is kept while it is fenced (an address the node had is never let back in).
  const cidrs = [...new Set([...(nf.spec?.fenceState === "Fenced" ? (nf.spec?.cidrs ?? []) : []), ...want.spec.cidrs])].sort();
  if (nf.spec?.fenceState === "Fenced" && isDeepStrictEqual(cidrs, [...(nf.spec?.cidrs ?? [])].sort())) return;
  await rewrite(ctx, nf, { ...nf.spec, fenceState: "Fenced", cidrs });
}

/** Lifts one NetworkFence the documented way: Unfenced (as it was fenced), then, once csi-addons confirmed, deleted. */
async function lift(ctx: StorageAgentContext, nf: NetworkFence): Promise<void> {
  if (nf.spec?.fenceState !== "Unfenced") {
    await rewrite(ctx, nf, { ...nf.spec, fenceState: "Unfenced" });
    return;
  }
  if (stateOf(nf) === "unfenced" && !nf.metadata?.deletionTimestamp)
    await kubeOf(ctx).delete(nf.metadata?.name ?? "", nf.metadata?.uid, ctx.signal);
}

/** Unfence: this agent's fence of the node and a legacy stockade-<node> (deletion alone unfences nothing). */
async function unfence(ctx: StorageAgentContext): Promise<void> {
  const nf = await existing(ctx);
  if (nf) await lift(ctx, nf);
  const old = await legacy(ctx);
  if (old) await lift(ctx, old);
}

/**
 * What a NetworkFence says, strictly: fenced only when csi-addons reported the fence operation for fenceState Fenced.
 * Its result is judged against the spec it is there with: Stockade clears it with each change (rewrite), and a
 * condition naming an older generation (csi-addons writes none today) makes it pending.
 */
export function stateOf(nf: NetworkFence | undefined): StorageFenceState {
  if (!nf) return "unfenced";
  const gen = nf.metadata?.generation;
  if (gen !== undefined && (nf.status?.conditions ?? []).some((c) => c.observedGeneration !== undefined && c.observedGeneration < gen))
    return "pending";
  const r = nf.status?.result;
  const m = nf.status?.message ?? "";
  if (nf.spec?.fenceState === "Fenced") {
    if (r === "Succeeded" && m === FENCE_SUCCESS_MESSAGE) return "fenced";
    if (r === "Failed") return "failed";
    return "pending";
  }
  if (r === "Succeeded" && m === UNFENCE_SUCCESS_MESSAGE) return "unfenced";
  if (r === "Failed") return "failed";
  return "pending";
}

function failed(nf: NetworkFence): never {
  throw new AgentError(
    "Failed",
    `NetworkFence ${nf.metadata?.name} (${nf.spec?.fenceState}): csi-addons reported Failed: ${nf.status?.message ?? "(no message)"}`,
  );
}

async function state(ctx: StorageAgentContext): Promise<StorageFenceState> {
  const nf = await existing(ctx);
  const s = stateOf(nf);
  if (s === "failed") failed(nf!);
  // Unfenced is final only once our object is gone too (unfence() deletes it after the unfence succeeded), and the
  // node's legacy fence with it.
  if (s !== "unfenced") return s;
  if (nf) return "pending";
  const old = await legacy(ctx);
  if (old && stateOf(old) === "failed") failed(old);
  return old ? "pending" : "unfenced";
}

export const networkFenceDriver: StorageFenceDriver = {
  type: "csiAddonsNetworkFence",
  fences: "storage",
  validate: check,
  fence,
  unfence,
  state,
};
