// The cluster as kubectl-stockade sees it: the kubeconfig chosen like kubectl chooses it (--kubeconfig, then
// $KUBECONFIG, then ~/.kube/config, then in-cluster), one list call per kind, and API failures turned into
// messages that say what to do (cluster unreachable, CRDs missing, not allowed).
import { existsSync } from "node:fs";
import { setTimeout as sleep } from "node:timers/promises";
import { homedir } from "node:os";
import { join } from "node:path";
import {
  AdmissionregistrationV1Api,
  ApiException,
  CoordinationV1Api,
  KubeConfig,
  PolicyV1Api,
  type V1Lease,
  type V1Node,
  type V1PersistentVolumeClaim,
  type V1Pod,
  type V1PodDisruptionBudget,
  type V1MutatingWebhookConfiguration,
  type V1ValidatingWebhookConfiguration,
} from "@kubernetes/client-node";
import { GROUP, VERSION, type FenceAgent, type FenceRecord, type FencingPolicy, type NodeFence } from "../api/v1alpha1.ts";
import { HISTORY_NODE_LABEL, nodeLabelValue } from "../decide/fence-history.ts";
import { Kube, errorMessage, statusCode } from "../kube/api.ts";
import { pooled } from "../kube/connections.ts";

/** An error for the user: printed as "error: <message>" and the process exits with `code`. */
import { MUTATING_WEBHOOK, VALIDATING_WEBHOOK } from "../kube/webhook-names.ts";

export class CliError extends Error {
  readonly code: number;
  constructor(message: string, code = 1) {
    super(message);
    this.name = "CliError";
    this.code = code;
  }
}

export interface ConnectOptions {
  kubeconfig?: string;
  context?: string;
}

export function loadKubeConfig(o: ConnectOptions): KubeConfig {
  const env = process.env;
  const kc = new KubeConfig();
  const file = o.kubeconfig;
  try {
    if (file) kc.loadFromFile(file);
    else kc.loadFromDefault();
  } catch (err) {
    const where = file ?? env.KUBECONFIG ?? join(homedir(), ".kube", "config");
    throw new CliError(`cannot load the kubeconfig ${where}: ${(err as Error).message}`);
  }
  const fromFile = !!file || !!env.KUBECONFIG || existsSync(join(homedir(), ".kube", "config")) || !!env.KUBERNETES_SERVICE_HOST;
  if (!fromFile)
    throw new CliError("no kubeconfig found: set KUBECONFIG, pass --kubeconfig PATH, or create ~/.kube/config (as for kubectl)");
  if (o.context) {
    if (!kc.getContextObject(o.context)) {
      const have = kc.getContexts().map((c) => c.name);
      throw new CliError(`context "${o.context}" is not in the kubeconfig (contexts: ${have.join(", ") || "none"})`);
    }
    kc.setCurrentContext(o.context);
  }
  if (!kc.getCurrentCluster())
    throw new CliError(
      `the kubeconfig's current context "${kc.getCurrentContext()}" names no cluster: pass --context or fix the kubeconfig`,
    );
  return pooled(kc);
}

/** The innermost cause's code or message (fetch wraps ECONNREFUSED and friends in "fetch failed"). */
function rootCause(err: unknown): string {
  let e: unknown = err;
  for (let i = 0; i < 5 && e instanceof Error && e.cause; i++) e = e.cause;
  if (e instanceof Error) {
    const code = (e as NodeJS.ErrnoException).code;
    return code && !e.message.includes(code) ? `${code}: ${e.message}` : e.message;
  }
  return String(e);
}

/** What went wrong with an API call, as advice. `what` names the call ("list nodes"). */
export function describeApiError(err: unknown, what: string, server: string): string {
  if (err instanceof CliError) return err.message;
  const code = statusCode(err);
  if (code === 401) return `cannot ${what}: the API server at ${server} did not accept our credentials (401): check the kubeconfig's user`;
  if (code === 403) return `cannot ${what}: ${errorMessage(err)} (ask for RBAC permission to ${what})`;
  if (err instanceof ApiException) return `cannot ${what}: ${errorMessage(err)}`;
  return `cannot reach the Kubernetes API server at ${server} to ${what} (${rootCause(err)}): is the cluster up, and are --kubeconfig / --context right?`;
}

/**
 * Seconds to wait before trying again when the apiserver asks us to (429, or 503 with Retry-After, as
 * client-go retries: e.g. "storage is (re)initializing" right after a CRD changes); undefined otherwise.
 */
export function retryAfterSeconds(err: unknown): number | undefined {
  if (!(err instanceof ApiException)) return undefined;
  const raw = Object.entries(err.headers ?? {}).find(([k]) => k.toLowerCase() === "retry-after")?.[1];
  const header = raw !== undefined && /^\d+$/.test(raw.trim()) ? Number(raw) : undefined;
  if (err.code === 429 || (err.code === 503 && header !== undefined)) return Math.min(Math.max(header ?? 1, 1), 5);
  return undefined;
}

const RETRIES = 5;

const CRD_HINT = "install Stockade's CRDs (kubectl apply -f crds/ from the Stockade repository, or the manifests/ bundle) and try again";

export class Cluster {
  readonly kc: KubeConfig;
  readonly kube: Kube;
  readonly server: string;
  private readonly coordination: CoordinationV1Api;
  private readonly policy: PolicyV1Api;

  constructor(kc: KubeConfig) {
    this.kc = kc;
    this.kube = new Kube(kc);
    this.server = kc.getCurrentCluster()?.server ?? "(no server)";
    this.coordination = kc.makeApiClient(CoordinationV1Api);
    this.policy = kc.makeApiClient(PolicyV1Api);
  }

  /** One API call, retried while the apiserver says "try again later" (it did not process the request). */
  async raw<T>(fn: () => Promise<T>): Promise<T> {
    for (let i = 0; ; i++) {
      try {
        return await fn();
      } catch (err) {
        const wait = retryAfterSeconds(err);
        if (wait === undefined || i >= RETRIES) throw err;
        await sleep(wait * 1000);
      }
    }
  }

  /** Runs one API call; failures become CliErrors that say what to do. */
  async call<T>(what: string, fn: () => Promise<T>): Promise<T> {
    try {
      return await this.raw(fn);
    } catch (err) {
      throw new CliError(describeApiError(err, what, this.server));
    }
  }

  nodes(): Promise<V1Node[]> {
    return this.call("list nodes", async () => (await this.kube.core.listNode()).items);
  }

  /** The node, or a CliError saying it does not exist. */
  async node(name: string): Promise<V1Node> {
    const n = await this.call(`get node ${name}`, () => this.kube.readNode(name));
    if (!n) throw new CliError(`node "${name}" not found (kubectl get nodes lists them)`);
    return n;
  }

  /** Node Leases by node name. */
  async leases(): Promise<Map<string, V1Lease>> {
    const items = await this.call(
      "list node Leases in kube-node-lease",
      async () => (await this.coordination.listNamespacedLease({ namespace: "kube-node-lease" })).items,
    );
    return new Map(items.map((l) => [l.metadata?.name ?? "", l] as const));
  }

  pods(): Promise<V1Pod[]> {
    return this.call("list pods in all namespaces", async () => (await this.kube.core.listPodForAllNamespaces()).items);
  }

  /** The kube-system pods bound to this node (where a static etcd member's mirror pod is). */
  kubeSystemPodsOn(node: string): Promise<V1Pod[]> {
    return this.call(
      `list pods in kube-system on node ${node}`,
      async () => (await this.kube.core.listNamespacedPod({ namespace: "kube-system", fieldSelector: `spec.nodeName=${node}` })).items,
    );
  }

  /** Claims by "namespace/name". */
  async pvcs(): Promise<Map<string, V1PersistentVolumeClaim>> {
    const items = await this.call(
      "list PersistentVolumeClaims in all namespaces",
      async () => (await this.kube.core.listPersistentVolumeClaimForAllNamespaces()).items,
    );
    return new Map(items.map((c) => [`${c.metadata?.namespace}/${c.metadata?.name}`, c] as const));
  }

  pdbs(): Promise<V1PodDisruptionBudget[]> {
    return this.call(
      "list PodDisruptionBudgets in all namespaces",
      async () => (await this.policy.listPodDisruptionBudgetForAllNamespaces()).items,
    );
  }

  private async custom<T>(plural: string, labelSelector?: string): Promise<T[]> {
    try {
      const list = (await this.raw(() =>
        this.kube.custom.listClusterCustomObject({ group: GROUP, version: VERSION, plural, labelSelector }),
      )) as {
        items: T[];
      };
      return list.items;
    } catch (err) {
      if (statusCode(err) === 404)
        throw new CliError(`the ${plural}.${GROUP} CRD is not installed in the cluster at ${this.server}: ${CRD_HINT}`);
      throw new CliError(describeApiError(err, `list ${plural}.${GROUP}`, this.server));
    }
  }

  policies(): Promise<FencingPolicy[]> {
    return this.custom<FencingPolicy>("fencingpolicies");
  }

  agents(): Promise<FenceAgent[]> {
    return this.custom<FenceAgent>("fenceagents");
  }

  /** A node's fence history: its FenceRecords (by the node's label, then by its exact name). */
  async records(node: string): Promise<FenceRecord[]> {
    const items = await this.custom<FenceRecord>("fencerecords", `${HISTORY_NODE_LABEL}=${nodeLabelValue(node)}`);
    return items.filter((r) => r.spec.nodeName === node);
  }

  /** NodeFences by name (= node name). */
  async fences(): Promise<Map<string, NodeFence>> {
    const items = await this.custom<NodeFence>("nodefences");
    return new Map(items.map((f) => [f.metadata?.name ?? "", f] as const));
  }

  /** One NodeFence, or undefined; a missing CRD is an error, not an absent NodeFence. */
  async fence(name: string): Promise<NodeFence | undefined> {
    const fences = await this.fences();
    return fences.get(name);
  }

  /** A Secret's data, undefined when it does not exist; other failures (403…) throw a CliError. */
  async secret(namespace: string, name: string): Promise<Record<string, string> | undefined> {
    try {
      return await this.raw(() => this.kube.readSecret(namespace, name));
    } catch (err) {
      if (statusCode(err) === 404) return undefined;
      throw new CliError(describeApiError(err, `read Secret ${namespace}/${name}`, this.server));
    }
  }

  /** The webhook configurations of the claim lock and the force-delete guard; undefined when absent or unreadable. */
  async webhooks(): Promise<{ mutating?: V1MutatingWebhookConfiguration; validating?: V1ValidatingWebhookConfiguration; error?: string }> {
    const api = this.kc.makeApiClient(AdmissionregistrationV1Api);
    const out: { mutating?: V1MutatingWebhookConfiguration; validating?: V1ValidatingWebhookConfiguration; error?: string } = {};
    const read = async <T>(what: string, fn: () => Promise<T>): Promise<T | undefined> => {
      try {
        return await this.raw(fn);
      } catch (err) {
        if (statusCode(err) !== 404) out.error = describeApiError(err, what, this.server);
        return undefined;
      }
    };
    out.mutating = await read("read MutatingWebhookConfiguration stockade-claim-lock", () =>
      api.readMutatingWebhookConfiguration({ name: MUTATING_WEBHOOK }),
    );
    out.validating = await read("read ValidatingWebhookConfiguration stockade-force-delete", () =>
      api.readValidatingWebhookConfiguration({ name: VALIDATING_WEBHOOK }),
    );
    return out;
  }

  /**
   * The command lines of kube-controller-manager where the cluster shows them (kubeadm-style static pods in
   * kube-system); [] when none is visible (a managed control plane), undefined when they cannot be read.
   */
  async controllerManagerCommands(): Promise<string[][] | undefined> {
    try {
      const pods = await this.raw(() =>
        this.kube.core.listNamespacedPod({ namespace: "kube-system", labelSelector: "component=kube-controller-manager" }),
      );
      return pods.items.flatMap((p) =>
        (p.spec?.containers ?? [])
          .filter((c) => c.name === "kube-controller-manager")
          .map((c) => [...(c.command ?? []), ...(c.args ?? [])]),
      );
    } catch {
      return undefined;
    }
  }
}
