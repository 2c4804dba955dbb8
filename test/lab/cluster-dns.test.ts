// The lab's cluster DNS: CoreDNS on the host, reading the apiserver with its own narrow identity, answers
// the StatefulSet names a headless Service publishes (<pod>.<svc>.<ns>.svc.cluster.local) with the pod's
// IP, follows a pod replaced on another node, and answers nothing outside the cluster domain.
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { AppsV1Api, AuthorizationV1Api, type V1Pod } from "@kubernetes/client-node";
import { COREDNS_USER, freeDnsPort, readClusterDns, resolveA, startClusterDns, stopClusterDns } from "../../lab/cluster-dns.ts";
import { waitFor } from "../../lab/health.ts";
import { Lab } from "../../lab/lab.ts";
import { isAlive, readRef } from "../../lab/processes.ts";
import { paths } from "../../lab/state.ts";

const ns = "default";

test("cluster DNS resolves StatefulSet pod names to pod IPs and follows a replaced pod", { timeout: 240_000 }, async (t) => {
  const dir = mkdtempSync(join(tmpdir(), "stockade-dns-"));
  const lab = await Lab.up({ dir, nodes: 2 });
  t.after(async () => {
    await stopClusterDns(lab.state);
    await lab.down();
  });
  const port = await freeDnsPort();
  const dns = await startClusterDns(lab.state, { listen: { address: "127.0.0.1", port } });
  assert.deepEqual(readClusterDns(lab.state), dns);
  const server = { address: "127.0.0.1", port };

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

  const podWithIp = (name: string, notOn?: string) =>
    waitFor(
      `pod ${name} with an IP${notOn ? ` on a node other than ${notOn}` : ""}`,
      async () => {
        const p: V1Pod = await lab.core.readNamespacedPod({ name, namespace: ns });
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

  const web0 = await podWithIp("web-0");
  const web1 = await podWithIp("web-1");
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
  const moved = await podWithIp("web-0", oldNode);
  assert.notEqual(moved.status!.podIP, ip0);
  await resolvesTo(`web-0.web.${ns}.svc.cluster.local`, [moved.status!.podIP!]);

  const ref = readRef(join(paths(dir).pids, "coredns.json"));
  assert.ok(isAlive(ref));
  await stopClusterDns(lab.state);
  assert.equal(isAlive(ref), false, "stopClusterDns stops the process");
  assert.equal(readClusterDns(lab.state), undefined);
});
