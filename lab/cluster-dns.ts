// Cluster DNS for the lab: CoreDNS on the host, not as a pod (the lab runs no kube-proxy, so a Service VIP
// in front of a DNS pod would reach nothing). Its kubernetes plugin reads the apiserver with a client
// certificate of its own whose RBAC is exactly what the plugin lists and watches, and it answers
// <domain> (cluster.local) on the address the lab gives it; every other name gets NXDOMAIN, so nothing a pod
// asks ever leaves the machine. Real nodes point their kubelets' clusterDNS at that address (port 53:
// a resolv.conf nameserver has no port).
import { Resolver } from "node:dns/promises";
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createSocket } from "node:dgram";
import { createServer, isIPv6 } from "node:net";
import { join } from "node:path";
import { KubeConfig, RbacAuthorizationV1Api, type V1ClusterRole, type V1ClusterRoleBinding } from "@kubernetes/client-node";
import { binPaths } from "./bins.ts";
import { probe, waitFor } from "./health.ts";
import { createPki, writeKubeconfig } from "./pki.ts";
import { freeTcpPort } from "./ports.ts";
import { isAlive, readRef, startDetached, stop, writeRef } from "./processes.ts";
import { appendEvent, paths, type LabState } from "./state.ts";

export const CLUSTER_DOMAIN = "cluster.local";
/** The identity CoreDNS uses towards the apiserver (CN of its client certificate). */
export const COREDNS_USER = "stockade-lab-coredns";
const RBAC_NAME = "stockade-lab:coredns";

export interface ClusterDnsOptions {
  /**
   * Where CoreDNS answers, UDP and TCP. With real nodes: the host's bridge address and port 53 (the
   * default), which is what the kubelets' `clusterDNS` names.
   */
  listen: { address: string; port?: number };
  /** The cluster domain (kubelet `clusterDomain`); default cluster.local. */
  domain?: string;
  /** TTL of the answers, seconds (default 1: a replaced pod's new IP is seen at once; there is no cache). */
  ttlSeconds?: number;
  /** How long to wait for CoreDNS to have synced with the apiserver (default 30 s). */
  timeoutMs?: number;
}

/** A running cluster DNS, as `startClusterDns` started it (also kept in <lab>/coredns/endpoint.json). */
export interface ClusterDns {
  address: string;
  port: number;
  domain: string;
  /** CoreDNS's `ready` endpoint: 200 once its kubernetes plugin has synced. */
  readyUrl: string;
}

export interface CorefileInput {
  address: string;
  port: number;
  domain: string;
  kubeconfig: string;
  readyPort: number;
  ttlSeconds: number;
}

/** The Corefile: the cluster domain from the kubernetes plugin, NXDOMAIN for everything else. */
export function corefile(c: CorefileInput): string {
  if (!/^[a-z0-9]([a-z0-9.-]*[a-z0-9])?$/.test(c.domain)) throw new Error(`invalid cluster domain "${c.domain}"`);
  if (!Number.isInteger(c.port) || c.port < 1 || c.port > 65535) throw new Error(`invalid DNS port ${c.port}`);
  if (!Number.isInteger(c.ttlSeconds) || c.ttlSeconds < 0 || c.ttlSeconds > 3600) throw new Error(`invalid TTL ${c.ttlSeconds}`);
  if (/\s/.test(c.kubeconfig)) throw new Error(`the kubeconfig path must not contain whitespace: ${c.kubeconfig}`);
  return `${c.domain}:${c.port} {
    bind ${c.address}
    errors
    log . {
        class error
    }
    ready 127.0.0.1:${c.readyPort}
    kubernetes ${c.domain} {
        kubeconfig ${c.kubeconfig} stockade-lab
        ttl ${c.ttlSeconds}
    }
}

.:${c.port} {
    bind ${c.address}
    errors
    template ANY ANY {
        rcode NXDOMAIN
    }
}
`;
}

/** The RBAC CoreDNS's kubernetes plugin needs: list/watch of what it serves from, nothing else. */
export function corednsRbac(user = COREDNS_USER): { role: V1ClusterRole; binding: V1ClusterRoleBinding } {
  return {
    role: {
      apiVersion: "rbac.authorization.k8s.io/v1",
      kind: "ClusterRole",
      metadata: { name: RBAC_NAME },
      rules: [
        { apiGroups: [""], resources: ["services", "pods", "namespaces"], verbs: ["list", "watch"] },
        { apiGroups: ["discovery.k8s.io"], resources: ["endpointslices"], verbs: ["list", "watch"] },
      ],
    },
    binding: {
      apiVersion: "rbac.authorization.k8s.io/v1",
      kind: "ClusterRoleBinding",
      metadata: { name: RBAC_NAME },
      roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "ClusterRole", name: RBAC_NAME },
      subjects: [{ apiGroup: "rbac.authorization.k8s.io", kind: "User", name: user }],
    },
  };
}

const dnsPaths = (s: LabState) => {
  const dir = join(s.dir, "coredns");
  return {
    dir,
    corefile: join(dir, "Corefile"),
    endpoint: join(dir, "endpoint.json"),
    kubeconfig: join(paths(s.dir).kubeconfigs, "coredns.kubeconfig"),
    pid: join(paths(s.dir).pids, "coredns.json"),
    log: join(paths(s.dir).logs, "coredns.log"),
  };
};

function tail(file: string, lines = 15): string {
  try {
    return readFileSync(file, "utf8").trimEnd().split("\n").slice(-lines).join("\n");
  } catch {
    return "(no log)";
  }
}

async function applyRbac(s: LabState): Promise<void> {
  const kc = new KubeConfig();
  kc.loadFromFile(paths(s.dir).kubeconfig);
  const rbac = kc.makeApiClient(RbacAuthorizationV1Api);
  const { role, binding } = corednsRbac();
  const conflict = (e: unknown) => (e as { code?: number }).code === 409;
  await rbac.createClusterRole({ body: role }).catch(async (e: unknown) => {
    if (!conflict(e)) throw e;
    await rbac.replaceClusterRole({ name: RBAC_NAME, body: role });
  });
  await rbac.createClusterRoleBinding({ body: binding }).catch(async (e: unknown) => {
    if (!conflict(e)) throw e;
    await rbac.replaceClusterRoleBinding({ name: RBAC_NAME, body: binding });
  });
}

/**
 * Starts CoreDNS for the lab `s` and waits until its kubernetes plugin has synced (so a name that exists
 * resolves from the first query). Idempotent per lab: a running one is stopped first.
 */
export async function startClusterDns(s: LabState, o: ClusterDnsOptions): Promise<ClusterDns> {
  const d = dnsPaths(s);
  const domain = o.domain ?? CLUSTER_DOMAIN;
  const port = o.listen.port ?? 53;
  await stopClusterDns(s);
  mkdirSync(d.dir, { recursive: true });

  const pki = createPki(paths(s.dir).pki, [{ name: "coredns", cn: COREDNS_USER, groups: [] }]);
  writeKubeconfig(d.kubeconfig, { server: s.apiserverUrl, caCert: pki.caCert, ...pki.client("coredns"), user: COREDNS_USER });
  await applyRbac(s);

  const readyPort = await freeTcpPort();
  writeFileSync(
    d.corefile,
    corefile({ address: o.listen.address, port, domain, kubeconfig: d.kubeconfig, readyPort, ttlSeconds: o.ttlSeconds ?? 1 }),
  );
  const dns: ClusterDns = { address: o.listen.address, port, domain, readyUrl: `http://127.0.0.1:${readyPort}/ready` };
  const ref = startDetached({ cmd: binPaths().coredns, args: ["-conf", d.corefile], logFile: d.log, cwd: d.dir });
  writeRef(d.pid, ref);
  try {
    await waitFor(
      "CoreDNS to be ready (synced with the apiserver)",
      async () => {
        if (!isAlive(ref)) throw new Error("CoreDNS exited");
        return (await probe(dns.readyUrl)).status === 200;
      },
      { timeoutMs: o.timeoutMs ?? 30_000, intervalMs: 200 },
    );
  } catch (e) {
    await stop(ref, 2000);
    throw new Error(`${(e as Error).message}\n--- last lines of ${d.log} ---\n${tail(d.log)}`, { cause: e });
  }
  writeFileSync(d.endpoint, JSON.stringify(dns));
  appendEvent(s.dir, { kind: "lab", detail: { action: "cluster-dns-started", address: dns.address, port, domain } });
  return dns;
}

/** Stops the lab's CoreDNS if it runs (safe to call on any lab, any number of times). */
export async function stopClusterDns(s: LabState): Promise<void> {
  const d = dnsPaths(s);
  await stop(readRef(d.pid), 5000);
  rmSync(d.endpoint, { force: true });
}

/** The running cluster DNS of the lab, or undefined. */
export function readClusterDns(s: LabState): ClusterDns | undefined {
  const d = dnsPaths(s);
  if (!isAlive(readRef(d.pid)) || !existsSync(d.endpoint)) return undefined;
  return JSON.parse(readFileSync(d.endpoint, "utf8")) as ClusterDns;
}

/** A's of `name` asked of the given DNS server directly (no search list, one try). */
export async function resolveA(server: { address: string; port: number }, name: string, timeoutMs = 2000): Promise<string[]> {
  const r = new Resolver({ timeout: timeoutMs, tries: 1 });
  r.setServers([isIPv6(server.address) ? `[${server.address}]:${server.port}` : `${server.address}:${server.port}`]);
  return r.resolve4(name);
}

/** A port free for both UDP and TCP on `address` (DNS serves both), for tests and loopback labs. */
export async function freeDnsPort(address = "127.0.0.1"): Promise<number> {
  for (let i = 0; i < 50; i++) {
    const port = await freeTcpPort();
    const udpFree = await new Promise<boolean>((resolve) => {
      const sock = createSocket(isIPv6(address) ? "udp6" : "udp4").once("error", () => resolve(false));
      sock.bind(port, address, () => sock.close(() => resolve(true)));
    });
    const tcpFree = await new Promise<boolean>((resolve) => {
      const srv = createServer().once("error", () => resolve(false));
      srv.listen(port, address, () => srv.close(() => resolve(true)));
    });
    if (udpFree && tcpFree) return port;
  }
  throw new Error(`no port free for both UDP and TCP on ${address} after 50 tries`);
}
