// The lab's cluster DNS: CoreDNS on the host, reading the apiserver with its own narrow identity, answers
// the StatefulSet names a headless Service publishes (<pod>.<svc>.<ns>.svc.cluster.local) with the pod's
// IP, follows a pod replaced on another node, and answers nothing outside the cluster domain.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { existsSync, mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { AppsV1Api, AuthorizationV1Api, type V1Pod } from "@kubernetes/client-node";
import {
  COREDNS_USER,
  freeDnsPort,
  readClusterDns,
  resolveA,
  startClusterDns,
  stopClusterDns,
  type ClusterDns,
} from "../../lab/cluster-dns.ts";
import { createEtcdWorkload, etcdMemberHost, etcdPodEndpoints, etcdWorkload } from "../../lab/etcd-workload.ts";
import { waitFor } from "../../lab/health.ts";
import { Lab } from "../../lab/lab.ts";
import { isAlive, readRef } from "../../lab/processes.ts";
import { paths } from "../../lab/state.ts";

const ns = "default";
let dir: string;
let lab: Lab;
let dns: ClusterDns;
let server: { address: string; port: number };

before(async () => {
  dir = mkdtempSync(join(tmpdir(), "stockade-dns-"));
  lab = await Lab.up({ dir, nodes: 2 });
  const port = await freeDnsPort();
  dns = await startClusterDns(lab.state, { listen: { address: "127.0.0.1", port } });
  server = { address: "127.0.0.1", port };
});
after(async () => {
  if (lab) {
    await stopClusterDns(lab.state);
    await lab.down();
  }
});

const podWithIp = (namespace: string, name: string, notOn?: string) =>
  waitFor(
    `pod ${namespace}/${name} with an IP${notOn ? ` on a node other than ${notOn}` : ""}`,
    async () => {
      const p: V1Pod = await lab.core.readNamespacedPod({ name, namespace });
      return p.status?.podIP && !p.metadata?.deletionTimestamp && p.spec?.nodeName !== notOn ? p : undefined;
    },
    { timeoutMs: 60_000, intervalMs: 250 },
  );
const resolvesTo = (name: string, ips: string[]) =>
  waitFor(
    `${name} to resolve to ${ips.join(", ")}`,
    async () => {
      const got = (await resolveA(server, name).catch(() => [] as string[])).sort();
      return JSON.stringify(got) === JSON.stringify([...ips].sort()) ? got : undefined;
    },
    { timeoutMs: 30_000, intervalMs: 250 },
  );

test("cluster DNS resolves StatefulSet pod names to pod IPs and follows a replaced pod", { timeout: 180_000 }, async () => {
  assert.deepEqual(readClusterDns(lab.state), dns);

  // Its identity may list/watch what it serves from, and nothing else.
  const authz = lab.kc.makeApiClient(AuthorizationV1Api);
  const can = async (verb: string, resource: string, group = "") =>
    (
      await authz.createSubjectAccessReview({
        body: { spec: { user: COREDNS_USER, resourceAttributes: { verb, resource, group } } },
      })
    ).status?.allowed === true;
  assert.equal(await can("watch", "endpointslices", "discovery.k8s.io"), true);
  assert.equal(await can("list", "services"), true);
  assert.equal(await can("list", "secrets"), false, "CoreDNS must not read secrets");
  assert.equal(await can("get", "pods"), false, "list/watch only");
  assert.equal(await can("create", "pods"), false);

  await lab.core.createNamespacedService({
    namespace: ns,
    body: {
      metadata: { name: "web" },
      spec: {
        clusterIP: "None",
        publishNotReadyAddresses: true,
        selector: { app: "web" },
        ports: [{ name: "http", port: 80 }],
      },
    },
  });
  const apps = lab.kc.makeApiClient(AppsV1Api);
  await apps.createNamespacedStatefulSet({
    namespace: ns,
    body: {
      metadata: { name: "web" },
      spec: {
        serviceName: "web",
        replicas: 2,
        podManagementPolicy: "Parallel",
        selector: { matchLabels: { app: "web" } },
        template: {
          metadata: { labels: { app: "web" } },
          spec: { containers: [{ name: "web", image: "busybox", imagePullPolicy: "Never" }] },
        },
      },
    },
  });

  const web0 = await podWithIp(ns, "web-0");
  const web1 = await podWithIp(ns, "web-1");
  const ip0 = web0.status!.podIP!;
  const ip1 = web1.status!.podIP!;
  assert.notEqual(ip0, ip1);
  await resolvesTo(`web-0.web.${ns}.svc.cluster.local`, [ip0]);
  await resolvesTo(`web-1.web.${ns}.svc.cluster.local`, [ip1]);
  await resolvesTo(`web.${ns}.svc.cluster.local`, [ip0, ip1]);

  // Names that do not exist, in the cluster domain or outside it: NXDOMAIN (ENOTFOUND), never forwarded.
  await assert.rejects(resolveA(server, `web-7.web.${ns}.svc.cluster.local`), { code: "ENOTFOUND" });
  await assert.rejects(resolveA(server, "example.com"), { code: "ENOTFOUND" });

  // web-0 replaced on the other node (a new pod CIDR, so a new IP): its name follows at once.
  const oldNode = web0.spec!.nodeName!;
  await lab.core.patchNode({ name: oldNode, body: [{ op: "add", path: "/spec/unschedulable", value: true }] });
  await lab.core.deleteNamespacedPod({ name: "web-0", namespace: ns });
  const moved = await podWithIp(ns, "web-0", oldNode);
  assert.notEqual(moved.status!.podIP, ip0);
  await resolvesTo(`web-0.web.${ns}.svc.cluster.local`, [moved.status!.podIP!]);

  await lab.core.patchNode({ name: oldNode, body: [{ op: "replace", path: "/spec/unschedulable", value: false }] });
});

test(
  "the etcd workload on the lab: claims bind to their SAN volumes, members' peer names resolve to their pods",
  { timeout: 120_000 },
  async () => {
    const namespace = "db";
    await lab.core.createNamespace({ body: { metadata: { name: namespace } } });
    const w = etcdWorkload({ namespace, image: "stockade.lab/etcd:test", labDir: dir });
    await createEtcdWorkload(lab.kc, w);
    assert.ok(
      w.hostDirs.every((d) => existsSync(d)),
      "the SAN directories exist on the host",
    );
    for (const [i, pod] of w.pods.entries()) {
      const claim = await waitFor(
        `claim data-${pod} bound`,
        async () => {
          const c = await lab.core.readNamespacedPersistentVolumeClaim({ name: `data-${pod}`, namespace });
          return c.status?.phase === "Bound" ? c : undefined;
        },
        { timeoutMs: 30_000, intervalMs: 250 },
      );
      assert.equal(claim.spec!.volumeName, w.volumes[i]!.metadata!.name, "bound to its own pre-bound PV");
    }
    const ips: string[] = [];
    for (const pod of w.pods) {
      const p = await podWithIp(namespace, pod);
      ips.push(p.status!.podIP!);
      await resolvesTo(etcdMemberHost({ namespace }, pod), [p.status!.podIP!]);
    }
    assert.deepEqual(
      await etcdPodEndpoints(lab.kc, w),
      ips.map((ip) => `http://${ip}:2379`),
    );
  },
);

test("stopClusterDns stops CoreDNS", async () => {
  const ref = readRef(join(paths(dir).pids, "coredns.json"));
  assert.ok(isAlive(ref));
  await stopClusterDns(lab.state);
  assert.equal(isAlive(ref), false);
  assert.equal(readClusterDns(lab.state), undefined);
});
