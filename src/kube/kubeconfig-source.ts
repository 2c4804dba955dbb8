// Where the operator finds its cluster, decided from the flags, the environment and which files exist, in the
// order controller-runtime uses: --kubeconfig, $KUBECONFIG, the in-cluster service account, ~/.kube/config.
// Without any of them the answer is a message that says how to get one, not an "Invalid URL" from a URL built
// out of unset variables.
import { join } from "node:path";

export const SERVICE_ACCOUNT_TOKEN = "/var/run/secrets/kubernetes.io/serviceaccount/token";

export type KubeconfigSource = { kind: "file"; path: string } | { kind: "in-cluster" } | { kind: "none"; message: string };

export function kubeconfigSource(o: {
  /** --kubeconfig, or else $KUBECONFIG (parseConfig's `kubeconfig`). */
  kubeconfig: string | undefined;
  env: Record<string, string | undefined>;
  home: string | undefined;
  exists: (path: string) => boolean;
}): KubeconfigSource {
  if (o.kubeconfig) return { kind: "file", path: o.kubeconfig };
  const { KUBERNETES_SERVICE_HOST: host, KUBERNETES_SERVICE_PORT: port } = o.env;
  if (host && port) {
    if (o.exists(SERVICE_ACCOUNT_TOKEN)) return { kind: "in-cluster" };
    return {
      kind: "none",
      message:
        `running in a pod (KUBERNETES_SERVICE_HOST=${host}) without a service account token at ${SERVICE_ACCOUNT_TOKEN}: ` +
        "run it with the ServiceAccount stockade of manifests/ (automountServiceAccountToken must not be false), " +
        "or mount a kubeconfig and set KUBECONFIG",
    };
  }
  const home = o.home ? join(o.home, ".kube", "config") : undefined;
  if (home && o.exists(home)) return { kind: "file", path: home };
  return {
    kind: "none",
    message:
      "no Kubernetes cluster configured: neither --kubeconfig nor KUBECONFIG is set, " +
      `${home ? `there is no ${home}` : "HOME is not set"}, and this is not a pod (no KUBERNETES_SERVICE_HOST). ` +
      "Point KUBECONFIG at a cluster's kubeconfig (KUBECONFIG=/path/to/kubeconfig npm start), " +
      "or run `npm run demo` for a local lab cluster with Stockade fencing a node in it",
  };
}
