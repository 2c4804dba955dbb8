// The one Kubernetes capability a storage fence gets (agents/types.ts NetworkFenceApi): csi-addons NetworkFences,
// get/create/replace/delete, nothing else. Reads race the agent's signal so its deadline ends the wait; writes do not:
// each ends at the API request deadline (kube/deadline.ts: no later than another replica could lead), so a write of a
// withdrawn fence has landed or failed by the time its operation ends, and a lift that follows cannot run before it.
import type { KubernetesObject } from "@kubernetes/client-node";
import { NETWORK_FENCE_GROUP as group, NETWORK_FENCE_VERSION as version } from "../agents/csi-addons-network-fence.ts";
import { AgentError, type NetworkFence, type NetworkFenceApi } from "../agents/types.ts";
import { errorMessage, isNotFound, type Kube } from "./api.ts";

const plural = "networkfences";

function raced<T>(p: Promise<T>, signal: AbortSignal): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    if (signal.aborted) return reject(signal.reason);
    const onAbort = () => reject(signal.reason);
    signal.addEventListener("abort", onAbort, { once: true });
    p.then(resolve, reject).finally(() => signal.removeEventListener("abort", onAbort));
  });
}

/** API errors as AgentErrors: 403 is AuthFailed (RBAC), 404 on the resource is Config (csi-addons not installed). */
function classify(what: string, err: unknown): AgentError {
  if (err instanceof AgentError) return err;
  const code = (err as { code?: number }).code;
  const msg = `${what}: ${errorMessage(err)}`;
  if (code === 401 || code === 403) return new AgentError("AuthFailed", `${msg} (grant the operator networkfences.csiaddons.openshift.io)`);
  if (code === 404) return new AgentError("Config", `${msg} (is csi-addons installed? its NetworkFence CRD is missing)`);
  if (code === 409) return new AgentError("Failed", `${msg} (changed meanwhile: tried again)`);
  return new AgentError("Unreachable", msg);
}

export function networkFenceApi(kube: Kube): NetworkFenceApi {
  const c = kube.custom;
  return {
    async get(name, signal) {
      try {
        return (await raced(c.getClusterCustomObject({ group, version, plural, name }), signal)) as NetworkFence;
      } catch (err) {
        if (isNotFound(err) && !String(errorMessage(err)).includes("the server could not find the requested resource")) return undefined;
        if (signal.aborted) throw err;
        throw classify(`reading NetworkFence ${name}`, err);
      }
    },
    async create(nf) {
      try {
        await c.createClusterCustomObject({ group, version, plural, body: nf as KubernetesObject });
      } catch (err) {
        throw classify(`creating NetworkFence ${nf.metadata.name}`, err);
      }
    },
    async replace(nf) {
      try {
        return (await c.replaceClusterCustomObject({
          group,
          version,
          plural,
          name: nf.metadata.name,
          body: nf as KubernetesObject,
        })) as NetworkFence;
      } catch (err) {
        throw classify(`updating NetworkFence ${nf.metadata.name}`, err);
      }
    },
    async replaceStatus(nf) {
      try {
        return (await c.replaceClusterCustomObjectStatus({
          group,
          version,
          plural,
          name: nf.metadata.name,
          body: nf as KubernetesObject,
        })) as NetworkFence;
      } catch (err) {
        throw classify(`clearing the status of NetworkFence ${nf.metadata.name}`, err);
      }
    },
    async delete(name, uid) {
      try {
        await c.deleteClusterCustomObject({ group, version, plural, name, body: { preconditions: { uid } } });
      } catch (err) {
        if (isNotFound(err)) return;
        throw classify(`deleting NetworkFence ${name}`, err);
      }
    },
  };
}
