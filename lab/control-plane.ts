// The lab's control plane on loopback: etcd, kube-apiserver (TLS, client-certificate authn, Node+RBAC
// authz, ServiceAccount tokens), kube-controller-manager (all default controllers, timings tuned for
// tests) and kube-scheduler, each health-checked before the next starts.
import { mkdirSync, writeFileSync, readFileSync, existsSync } from "node:fs";
import { join } from "node:path";
import { repoRoot, type Bins } from "./bins.ts";
import { probe, waitFor } from "./health.ts";
import { isAlive, readRef, startDetached, stop, writeRef } from "./processes.ts";
import { paths, writeState, type LabState, type Timings } from "./state.ts";
import { freeTcpPort, portTaken } from "./ports.ts";

// etcd-proxy sits between kube-apiserver and etcd so a test can partition the two (lab/forwarder.ts).
export const components = ["etcd", "etcd-proxy", "kube-apiserver", "kube-controller-manager", "kube-scheduler"] as const;
export type Component = (typeof components)[number];

// Declared with the lab state that records them (lab/state.ts); exported here with the components they time.
export type { Timings };

export const defaultTimings: Timings = { nodeMonitorGraceSeconds: 10, defaultTolerationSeconds: 5, nodeMonitorPeriodSeconds: 1 };

/** Kubernetes' own defaults (kube-controller-manager, kube-apiserver), for measuring what a stock cluster gets. */
export const kubernetesTimings: Timings = { nodeMonitorGraceSeconds: 50, defaultTolerationSeconds: 300, nodeMonitorPeriodSeconds: 5 };
/** The kubelet's default Lease duration (renewed every quarter of it: 10 s). */
export const KUBERNETES_NODE_LEASE_SECONDS = 40;
/** The identity every kwok process of a lab uses (its client certificate's CN). */
export const KWOK_USER = "stockade-lab-kwok";

// Everything is logged (tests read the operator's requests from it) except the simulated kubelets' Lease renewals:
// a scale lab's 2,000 nodes renew 200 a second, and logging each cost the apiserver more CPU than serving it.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: None
  users: ["${KWOK_USER}"]
  verbs: ["get", "update", "patch"]
  namespaces: ["kube-node-lease"]
  resources: [{ group: "coordination.k8s.io", resources: ["leases"] }]
- level: Metadata
`;

function args(s: LabState, c: Component, bins: Bins, t: Timings): { cmd: string; args: string[] } {
  const p = paths(s.dir);
  const pki = (f: string) => join(p.pki, f);
  const kc = (n: string) => join(p.kubeconfigs, `${n}.kubeconfig`);
  switch (c) {
    case "etcd": {
      const client = `http://127.0.0.1:${s.ports.etcd}`;
      const peer = `http://127.0.0.1:${s.ports.etcdPeer}`;
      return {
        cmd: bins.etcd,
        args: [
          "--name=lab",
          `--data-dir=${p.etcdData}`,
          `--listen-client-urls=${client}`,
          `--advertise-client-urls=${client}`,
          `--listen-peer-urls=${peer}`,
          `--initial-advertise-peer-urls=${peer}`,
          `--initial-cluster=lab=${peer}`,
          "--unsafe-no-fsync",
          "--quota-backend-bytes=2147483648",
          "--log-level=warn",
        ],
      };
    }
    case "etcd-proxy":
      return { cmd: s.nodeBin, args: [join(repoRoot, "lab/forwarder.ts"), "127.0.0.1", String(s.ports.etcdProxy), String(s.ports.etcd)] };
    case "kube-apiserver":
      if (!existsSync(join(s.dir, "audit-policy.yaml"))) writeFileSync(join(s.dir, "audit-policy.yaml"), auditPolicy);
      return {
        cmd: bins.kubeApiserver,
        args: [
          `--etcd-servers=http://127.0.0.1:${s.ports.etcdProxy}`,
          "--bind-address=127.0.0.1",
          "--advertise-address=127.0.0.1",
          `--secure-port=${s.ports.apiserver}`,
          `--tls-cert-file=${pki("apiserver.crt")}`,
          `--tls-private-key-file=${pki("apiserver.key")}`,
          `--client-ca-file=${pki("ca.crt")}`,
          `--service-account-key-file=${pki("sa.pub")}`,
          `--service-account-signing-key-file=${pki("sa.key")}`,
          "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
          "--authorization-mode=Node,RBAC",
          "--enable-admission-plugins=NodeRestriction",
          "--service-cluster-ip-range=10.96.0.0/16",
          "--allow-privileged=true",
          // The "kubernetes" Service endpoint reconciler would fight over a loopback advertise address.
          "--endpoint-reconciler-type=none",
          `--default-not-ready-toleration-seconds=${t.defaultTolerationSeconds}`,
          `--default-unreachable-toleration-seconds=${t.defaultTolerationSeconds}`,
          `--audit-policy-file=${join(s.dir, "audit-policy.yaml")}`,
          `--audit-log-path=${p.audit}`,
          "--audit-log-maxsize=200",
          "--profiling=false",
          ...(s.runtime === "real"
            ? [
                // Webhooks and aggregated APIs at a ready pod's IP (the host routes every pod subnet; no kube-proxy there).
                "--enable-aggregator-routing=true",
                // kubectl logs/exec: the kubelets have no DNS names, and refuse a client without a lab-CA certificate
                // (their serving certificates are self-signed, as kubeadm's are by default: not verified).
                "--kubelet-preferred-address-types=InternalIP,Hostname",
                `--kubelet-client-certificate=${pki("apiserver-kubelet-client.crt")}`,
                `--kubelet-client-key=${pki("apiserver-kubelet-client.key")}`,
              ]
            : []),
          ...(s.apiserverFeatureGates?.length ? [`--feature-gates=${s.apiserverFeatureGates.join(",")}`] : []),
        ],
      };
    case "kube-controller-manager":
      mkdirSync(join(s.dir, "certs", "kcm"), { recursive: true });
      return {
        cmd: bins.kubeControllerManager,
        args: [
          `--kubeconfig=${kc("kube-controller-manager")}`,
          `--authentication-kubeconfig=${kc("kube-controller-manager")}`,
          `--authorization-kubeconfig=${kc("kube-controller-manager")}`,
          "--bind-address=127.0.0.1",
          `--secure-port=${s.ports.controllerManager}`,
          `--cert-dir=${join(s.dir, "certs", "kcm")}`,
          "--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics",
          "--leader-elect=false",
          `--root-ca-file=${pki("ca.crt")}`,
          `--service-account-private-key-file=${pki("sa.key")}`,
          "--use-service-account-credentials=true",
          `--node-monitor-period=${t.nodeMonitorPeriodSeconds ?? 1}s`,
          `--node-monitor-grace-period=${t.nodeMonitorGraceSeconds}s`,
          // The hardening docs/volumes.md asks for: no force detach of a silent node's volumes after 6 minutes.
          `--disable-force-detach-on-timeout=${!t.forceDetachOnTimeout}`,
          "--profiling=false",
        ],
      };
    case "kube-scheduler":
      mkdirSync(join(s.dir, "certs", "scheduler"), { recursive: true });
      return {
        cmd: bins.kubeScheduler,
        args: [
          `--kubeconfig=${kc("kube-scheduler")}`,
          `--authentication-kubeconfig=${kc("kube-scheduler")}`,
          `--authorization-kubeconfig=${kc("kube-scheduler")}`,
          "--bind-address=127.0.0.1",
          `--secure-port=${s.ports.scheduler}`,
          `--cert-dir=${join(s.dir, "certs", "scheduler")}`,
          "--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics",
          "--leader-elect=false",
          "--profiling=false",
        ],
      };
  }
}

function healthUrl(s: LabState, c: Component): string {
  switch (c) {
    case "etcd":
      return `http://127.0.0.1:${s.ports.etcd}/health`;
    case "etcd-proxy":
      return `http://127.0.0.1:${s.ports.etcdProxy}/health`;
    case "kube-apiserver":
      return `${s.apiserverUrl}/readyz`;
    case "kube-controller-manager":
      return `https://127.0.0.1:${s.ports.controllerManager}/healthz`;
    case "kube-scheduler":
      return `https://127.0.0.1:${s.ports.scheduler}/healthz`;
  }
}

export function pidFile(s: LabState, c: Component): string {
  return join(paths(s.dir).pids, `${c}.json`);
}

export function logFile(s: LabState, c: Component): string {
  return join(paths(s.dir).logs, `${c}.log`);
}

export async function healthy(s: LabState, c: Component): Promise<boolean> {
  const p = paths(s.dir);
  const admin = { ca: join(p.pki, "ca.crt"), cert: join(p.pki, "admin.crt"), key: join(p.pki, "admin.key") };
  const r = await probe(healthUrl(s, c), c === "kube-apiserver" ? admin : { ca: admin.ca });
  return r.status === 200 && (!c.startsWith("etcd") || r.body.includes('"health":"true"'));
}

/** The last lines of a log file, or "(no log)". */
export function tail(file: string, lines = 15): string {
  try {
    return readFileSync(file, "utf8").trimEnd().split("\n").slice(-lines).join("\n");
  } catch {
    return "(no log)";
  }
}

export async function startComponent(s: LabState, c: Component, bins: Bins, t: Timings, timeoutMs = 90_000): Promise<void> {
  const { cmd, args: a } = args(s, c, bins, t);
  const ref = startDetached({ cmd, args: a, logFile: logFile(s, c) });
  writeRef(pidFile(s, c), ref);
  // A component that exits fails at once (waitFor would poll a thrown error until its deadline).
  const state = await waitFor(`${c} to become healthy`, async () => (!isAlive(ref) ? "exited" : (await healthy(s, c)) && "healthy"), {
    timeoutMs,
    intervalMs: 250,
    onTimeout: () => `\n--- last lines of ${logFile(s, c)} ---\n${tail(logFile(s, c))}`,
  });
  if (state === "exited") throw new Error(`${c} exited\n--- last lines of ${logFile(s, c)} ---\n${tail(logFile(s, c))}`);
}

export async function stopComponent(s: LabState, c: Component): Promise<void> {
  await stop(readRef(pidFile(s, c)), 10_000);
}

export function componentAlive(s: LabState, c: Component): boolean {
  return isAlive(readRef(pidFile(s, c)));
}

/** The ports each component binds, where only components started after it are told of them. The
 * apiserver's is also in the kubeconfigs written before it starts: its caller rewrites them (`rebound`). */
const REBINDABLE: Record<Component, (keyof LabState["ports"])[]> = {
  etcd: ["etcd", "etcdPeer"],
  "etcd-proxy": ["etcdProxy"],
  "kube-apiserver": ["apiserver"],
  "kube-controller-manager": ["controllerManager"],
  "kube-scheduler": ["scheduler"],
};

/** Starts a component; one whose port was taken between choosing and binding it gets new ports and
 * another try. `rebound` runs after new ports are chosen, before the next try (the apiserver's clients'
 * kubeconfigs name its address). */
export async function startWithFreshPorts(
  s: LabState,
  c: Component,
  bins: Bins,
  log: (msg: string) => void,
  rebound: () => void = () => {},
): Promise<void> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await startComponent(s, c, bins, s.timings);
    } catch (e) {
      const keys = REBINDABLE[c];
      if (attempt >= 3 || !portTaken((e as Error).message)) throw e;
      await stopComponent(s, c);
      for (const k of keys) s.ports[k] = await freeTcpPort();
      if (c === "kube-apiserver") s.apiserverUrl = `https://127.0.0.1:${s.ports.apiserver}`;
      writeState(s);
      rebound();
      log(`${c}: its port was taken before it bound it; starting it again on ${keys.map((k) => s.ports[k]).join(", ")}`);
    }
  }
}
