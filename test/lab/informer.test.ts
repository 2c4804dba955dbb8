// The informer against watches that fail the ways production watches fail: refused by the apiserver
// (RBAC allows list but not watch), refused by the network (connections reset), and silently dead (a
// half-open connection that drops every byte). In each, restarts must back off instead of storming,
// and the informer's staleness must grow while it cannot see the cluster (it feeds the storm guard);
// a quiet but healthy watch must stay fresh. And API requests get deadlines that watches do not.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { setTimeout as sleep } from "node:timers/promises";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { CoreV1Api, KubeConfig, PatchStrategy, RbacAuthorizationV1Api, setHeaderOptions, type V1ConfigMap } from "@kubernetes/client-node";
import { Lab } from "../../lab/lab.ts";
import { waitFor } from "../../lab/health.ts";
import { createPki, writeKubeconfig } from "../../lab/pki.ts";
import { paths } from "../../lab/state.ts";
import { TcpProxy } from "../../lab/tcp-proxy.ts";
import { Informer, LIST_PAGE_SIZE } from "../../src/runtime/informer.ts";
import { mapLimit } from "../../src/runtime/map-limit.ts";
import { RequestTimeoutError, withRequestTimeout } from "../../src/kube/deadline.ts";
import { Kube } from "../../src/kube/api.ts";

const NS = "informer";
const path = `/api/v1/namespaces/${NS}/configmaps`;

describe("informer: refused and dead watches", () => {
  let lab: Lab;
  let proxy: TcpProxy;
  let viaProxy: KubeConfig;
  before(async () => {
    lab = await Lab.up({ dir: mkdtempSync(join(tmpdir(), "stockade-informer-")), nodes: 1 });
    await lab.core.createNamespace({ body: { metadata: { name: NS } } });
    proxy = await new TcpProxy("127.0.0.1", lab.state.ports.apiserver).start();
    viaProxy = new KubeConfig();
    viaProxy.loadFromFile(lab.writeKubeconfig(join(lab.dir, "via-proxy.kubeconfig"), proxy.url));
  });
  after(async () => {
    await proxy?.stop();
    await lab?.down();
  });

  /** Runs for `ms`, sampling the informer's staleness; returns the restarts and errors seen meanwhile. */
  async function observe(inf: Informer<V1ConfigMap>, errors: number[], ms: number) {
    const [restarts0, errors0] = [inf.restarts, errors.length];
    let maxStaleMs = 0;
    for (const end = Date.now() + ms; Date.now() < end;) {
      maxStaleMs = Math.max(maxStaleMs, inf.staleForMs());
      await sleep(250);
    }
    return { restarts: inf.restarts - restarts0, delays: errors.slice(errors0), maxStaleMs };
  }

  const report = (what: string, r: { restarts: number; delays: number[]; maxStaleMs: number }, seconds: number) =>
    console.log(
      `${what}: ${r.restarts} restarts and ${r.delays.length} warnings in ${seconds} s (${(r.restarts / seconds).toFixed(2)} restarts/s), ` +
        `backoff ${r.delays.join(",")} ms, staleness up to ${(r.maxStaleMs / 1000).toFixed(1)} s`,
    );

  /** Creates namespace `ns` holding `count` ConfigMaps cm-0 … (plus the kube-root-ca.crt every namespace gets). */
  async function namespaceWithConfigMaps(ns: string, count: number): Promise<number> {
    await lab.core.createNamespace({ body: { metadata: { name: ns } } });
    await mapLimit(
      Array.from({ length: count }, (_, i) => `cm-${i}`),
      32,
      (name) => lab.core.createNamespacedConfigMap({ namespace: ns, body: { metadata: { name }, data: { k: "v" } } }),
    );
    return count;
  }

  const growing = (delays: number[]) => delays.every((d, i) => i === 0 || d >= delays[i - 1]!);

  test("a quiet, healthy watch stays fresh: no restarts, staleness under the storm guard's 60 s", async () => {
    const errors: number[] = [];
    const inf = new Informer<V1ConfigMap>({
      kc: lab.kc,
      path,
      list: () => lab.core.listNamespacedConfigMap({ namespace: NS }),
      onError: (_e, ms) => errors.push(ms),
    });
    await inf.start();
    const r = await observe(inf, errors, 70_000); // nothing changes: client-node re-watches every 30 s of silence
    inf.stop();
    report("quiet watch", r, 70);
    assert.equal(r.restarts, 0);
    assert.deepEqual(r.delays, []);
    assert.ok(r.maxStaleMs < 35_000, `staleness up to ${r.maxStaleMs} ms`);
  });

  test(
    "API requests through a half-open connection fail at their deadline; a watch through the same config is not cut",
    { timeout: 60_000 },
    async () => {
      const timed = withRequestTimeout(viaProxy, 2_000);
      const core = timed.makeApiClient(CoreV1Api);
      const inf = new Informer<V1ConfigMap>({ kc: timed, path, list: () => core.listNamespacedConfigMap({ namespace: NS }) });
      // With data: a ConfigMap with nothing but a name has no managedFields to drop.
      await lab.core.createNamespacedConfigMap({ namespace: NS, body: { metadata: { name: "listed" }, data: { k: "v" } } });
      await inf.start();
      await sleep(4_000);
      try {
        await lab.core.createNamespacedConfigMap({ namespace: NS, body: { metadata: { name: "past-the-deadline" }, data: { k: "v" } } });
        await waitFor("the watch to deliver past-the-deadline", () => !!inf.get("past-the-deadline", NS), { timeoutMs: 10_000 });
        assert.equal(inf.restarts, 0, "the watch outlived the request deadline");
        // The apiserver sends managedFields with both; the cache keeps neither (memory at scale).
        for (const name of ["listed", "past-the-deadline"])
          assert.ok((await lab.core.readNamespacedConfigMap({ name, namespace: NS })).metadata?.managedFields?.length, name);
        assert.equal(inf.get("listed", NS)?.metadata?.managedFields, undefined, "from the list");
        assert.equal(inf.get("past-the-deadline", NS)?.metadata?.managedFields, undefined, "from the watch");
      } finally {
        inf.stop(); // a running informer keeps the test process alive
      }

      proxy.blackhole();
      const t0 = performance.now();
      const err = await core.readNamespace({ name: NS }).then(
        () => undefined,
        (e: unknown) => e,
      );
      const took = performance.now() - t0;
      proxy.restore();
      assert.ok(err instanceof RequestTimeoutError, `rejected with ${String(err)}`);
      assert.match(err.message, /no answer from the Kubernetes API within 2 s \(GET \/api\/v1\/namespaces\/informer\)/);
      assert.ok(took >= 1_900 && took < 5_000, `failed after ${took} ms`);

      // The claim lock's plain-JSON list goes through the same config, so it has the same deadline.
      proxy.blackhole();
      const t1 = performance.now();
      const err2 = await new Kube(timed).listPodsFresh(NS).then(
        () => undefined,
        (e: unknown) => e,
      );
      const took2 = performance.now() - t1;
      proxy.restore();
      assert.ok(err2 instanceof RequestTimeoutError, `rejected with ${String(err2)}`);
      assert.ok(took2 >= 1_900 && took2 < 5_000, `failed after ${took2} ms`);
      assert.deepEqual(await new Kube(timed).listPodsFresh(NS), [], "and answers once the connection is back");
    },
  );

  test("a first list longer than a page is read in pages of LIST_PAGE_SIZE, and every object is in the cache", async () => {
    const ns = "informer-pages";
    const count = await namespaceWithConfigMaps(ns, 2 * LIST_PAGE_SIZE + 100);
    const pages: { limit: number; _continue?: string }[] = [];
    const inf = new Informer<V1ConfigMap>({
      kc: lab.kc,
      path: `/api/v1/namespaces/${ns}/configmaps`,
      list: (page) => (pages.push(page), lab.core.listNamespacedConfigMap({ namespace: ns, ...page })),
    });
    await inf.start();
    inf.stop();
    // Every namespace also gets its kube-root-ca.crt ConfigMap.
    assert.equal(inf.list().filter((c) => c.metadata?.name?.startsWith("cm-")).length, count);
    assert.equal(pages.length, 3, "three pages");
    assert.ok(pages.every((p) => p.limit === LIST_PAGE_SIZE));
    assert.equal(pages[0]!._continue, undefined);
    assert.ok(pages[1]!._continue && pages[2]!._continue, "later pages continue the first");
  });

  test("a streamed first list (WatchList): the cache takes the whole state at its end bookmark, no page listed, later changes on the same watch", async () => {
    const ns = "informer-stream";
    const count = await namespaceWithConfigMaps(ns, 2 * LIST_PAGE_SIZE + 100);
    let lists = 0;
    const errors: unknown[] = [];
    const inf = new Informer<V1ConfigMap>({
      kc: lab.kc,
      path: `/api/v1/namespaces/${ns}/configmaps`,
      list: () => (lists++, lab.core.listNamespacedConfigMap({ namespace: ns })),
      streamingList: true,
      onError: (e) => errors.push(e),
    });
    let adds = 0;
    inf.on("add", () => adds++);
    try {
      await inf.start();
      assert.equal(lists, 0, "nothing listed in pages");
      assert.deepEqual(errors, []);
      assert.equal(inf.list().filter((c) => c.metadata?.name?.startsWith("cm-")).length, count);
      assert.equal(adds, count + 1, "handlers saw each object (and kube-root-ca.crt) added once");
      assert.equal(inf.get("cm-0", ns)?.metadata?.managedFields, undefined, "streamed objects are trimmed like listed ones");
      assert.ok(inf.staleForMs() < 5_000, `fresh at sync (${inf.staleForMs()} ms)`);
      await lab.core.createNamespacedConfigMap({ namespace: ns, body: { metadata: { name: "after-sync" }, data: { k: "v" } } });
      await waitFor("the stream to deliver after-sync", () => !!inf.get("after-sync", ns), { timeoutMs: 10_000 });
      assert.equal(inf.restarts, 0);
      assert.equal(inf.streaming, true);
    } finally {
      inf.stop();
    }
  });

  test("list allowed, watch forbidden by RBAC: restarts back off (a successful list does not reset the backoff)", async () => {
    const pki = createPki(paths(lab.dir).pki, [{ name: "list-only", cn: "stockade-list-only", groups: [] }]);
    const file = join(lab.dir, "list-only.kubeconfig");
    writeKubeconfig(file, { server: lab.state.apiserverUrl, caCert: pki.caCert, ...pki.client("list-only"), user: "stockade-list-only" });
    const rbac = lab.kc.makeApiClient(RbacAuthorizationV1Api);
    await rbac.createClusterRole({
      body: { metadata: { name: "list-only" }, rules: [{ apiGroups: [""], resources: ["configmaps"], verbs: ["list"] }] },
    });
    await rbac.createClusterRoleBinding({
      body: {
        metadata: { name: "list-only" },
        roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "ClusterRole", name: "list-only" },
        subjects: [{ apiGroup: "rbac.authorization.k8s.io", kind: "User", name: "stockade-list-only" }],
      },
    });
    const kc = new KubeConfig();
    kc.loadFromFile(file);
    const core = kc.makeApiClient(CoreV1Api);
    await waitFor("RBAC to allow the list", async () => !!(await core.listNamespacedConfigMap({ namespace: NS })));
    const errors: number[] = [];
    const inf = new Informer<V1ConfigMap>({
      kc,
      path,
      list: () => core.listNamespacedConfigMap({ namespace: NS }),
      onError: (_e, ms) => errors.push(ms),
    });
    await inf.start();
    const r = await observe(inf, errors, 30_000);
    inf.stop();
    report("watch forbidden", r, 30);
    assert.ok(inf.hasSynced, "the list itself worked");
    // 250 ms doubling: 0.25+0.5+1+2+4+8+16 s = 31.75 s, so at most 7 restarts in 30 s (the bug: ~4 a second).
    assert.ok(r.restarts <= 7, `${r.restarts} restarts in 30 s`);
    assert.ok(growing(r.delays) && Math.max(...r.delays) >= 8000, `backoff grows: ${r.delays.join(",")}`);
  });

  test("connections reset (the proxy cuts them): restarts back off, staleness grows, and it recovers", async () => {
    const core = viaProxy.makeApiClient(CoreV1Api);
    const errors: number[] = [];
    const inf = new Informer<V1ConfigMap>({
      kc: viaProxy,
      path,
      list: () => core.listNamespacedConfigMap({ namespace: NS }),
      onError: (_e, ms) => errors.push(ms),
    });
    await inf.start();
    await lab.core.createNamespacedConfigMap({ namespace: NS, body: { metadata: { name: "before-cut" } } });
    await waitFor("the informer to see before-cut", () => !!inf.get("before-cut", NS));
    proxy.cut();
    const r = await observe(inf, errors, 30_000);
    report("connections reset", r, 30);
    proxy.restore();
    await lab.core.createNamespacedConfigMap({ namespace: NS, body: { metadata: { name: "after-cut" } } });
    await waitFor("the informer to recover and see after-cut", () => !!inf.get("after-cut", NS), { timeoutMs: 45_000 });
    const staleAfter = inf.staleForMs();
    inf.stop();
    assert.ok(r.restarts <= 7, `${r.restarts} restarts in 30 s`);
    assert.ok(growing(r.delays) && Math.max(...r.delays) >= 8000, `backoff grows: ${r.delays.join(",")}`);
    assert.ok(r.maxStaleMs >= 25_000, `staleness grows while the watch is dead (max ${r.maxStaleMs} ms)`);
    assert.ok(staleAfter < 5_000, `fresh again after recovery (${staleAfter} ms)`);
  });

  test("a half-open connection (the proxy drops every byte): staleness grows, the watchdog relists", async () => {
    const timed = withRequestTimeout(viaProxy, 3_000);
    const core = timed.makeApiClient(CoreV1Api);
    let lists = 0;
    const errors: number[] = [];
    const inf = new Informer<V1ConfigMap>({
      kc: timed,
      path,
      list: () => (lists++, core.listNamespacedConfigMap({ namespace: NS })),
      staleAfterMs: 5_000,
      onError: (_e, ms) => errors.push(ms),
    });
    await inf.start();
    await waitFor("the informer to be synced", () => inf.hasSynced);
    const listsBefore = lists;
    proxy.blackhole();
    await lab.core.createNamespacedConfigMap({ namespace: NS, body: { metadata: { name: "during-blackhole" } } });
    const r = await observe(inf, errors, 20_000);
    report("half-open", r, 20);
    proxy.restore();
    await waitFor("the informer to see during-blackhole", () => !!inf.get("during-blackhole", NS), { timeoutMs: 45_000 });
    const staleAfter = inf.staleForMs();
    inf.stop();
    assert.ok(r.maxStaleMs >= 15_000, `staleness grows while the connection is dead (max ${r.maxStaleMs} ms)`);
    assert.ok(lists > listsBefore, "the silent watch was relisted");
    assert.ok(r.restarts <= 8, `${r.restarts} restarts in 20 s`);
    assert.ok(staleAfter < 5_000, `fresh again after recovery (${staleAfter} ms)`);
  });

  test("an index follows adds, relabels and deletes, on the watch and across a relist", async () => {
    const ns = "informer-index";
    await lab.core.createNamespace({ body: { metadata: { name: ns } } });
    const names = Array.from({ length: 10 }, (_, i) => `cm-${i}`);
    for (const [i, name] of names.entries())
      await lab.core.createNamespacedConfigMap({ namespace: ns, body: { metadata: { name, labels: { node: i % 2 ? "b" : "a" } } } });
    const relabel = (name: string, node: string) =>
      lab.core.patchNamespacedConfigMap(
        { namespace: ns, name, body: { metadata: { labels: { node } } } },
        setHeaderOptions("Content-Type", PatchStrategy.MergePatch),
      );
    const timed = withRequestTimeout(viaProxy, 3_000);
    const core = timed.makeApiClient(CoreV1Api);
    let lists = 0;
    const inf = new Informer<V1ConfigMap>({
      kc: timed,
      path: `/api/v1/namespaces/${ns}/configmaps`,
      list: (page) => (lists++, core.listNamespacedConfigMap({ namespace: ns, ...page })),
      staleAfterMs: 3_000,
    });
    inf.addIndex("node", (c) => c.metadata?.labels?.node);
    const indexed = (v: string) =>
      inf
        .byIndex("node", v)
        .map((c) => c.metadata!.name!)
        .sort();
    // The index must always say what a scan of the whole cache says.
    const scanned = (v: string) =>
      inf
        .list()
        .filter((c) => c.metadata?.labels?.node === v)
        .map((c) => c.metadata!.name!)
        .sort();
    // And the unique index by name, which oneByIndex reads, what get says.
    inf.addIndex("name", (c) => c.metadata?.name);
    const agrees = () =>
      ["a", "b", "c"].every((v) => JSON.stringify(indexed(v)) === JSON.stringify(scanned(v))) &&
      [...names, "cm-new"].every((n) => inf.oneByIndex("name", n) === inf.get(n, ns));
    try {
      await inf.start();
      assert.deepEqual(indexed("a"), ["cm-0", "cm-2", "cm-4", "cm-6", "cm-8"]);
      assert.throws(() => inf.byIndex("zone", "a"), /has no index zone/);
      assert.throws(() => inf.oneByIndex("zone", "a"), /has no index zone/);
      assert.equal(inf.oneByIndex("name", "cm-3")?.metadata?.labels?.node, "b");
      assert.equal(inf.oneByIndex("name", "cm-new"), undefined);
      // An index added after the sync indexes what the cache already holds.
      inf.addIndex("parity", (c) => String(Number(c.metadata?.name?.slice(3)) % 2));
      assert.equal(inf.byIndex("parity", "1").length, 5);
      assert.throws(() => inf.addIndex("node", () => undefined), /already has an index node/);

      const rev = inf.revision;
      await relabel("cm-0", "b");
      await lab.core.deleteNamespacedConfigMap({ namespace: ns, name: "cm-1" });
      await lab.core.createNamespacedConfigMap({ namespace: ns, body: { metadata: { name: "cm-new", labels: { node: "c" } } } });
      await waitFor(
        "the watch to deliver the changes",
        () => !inf.get("cm-1", ns) && !!inf.get("cm-new", ns) && indexed("b").includes("cm-0"),
        {
          timeoutMs: 10_000,
        },
      );
      assert.ok(inf.revision > rev, "the revision moved with the cache");
      assert.deepEqual(indexed("a"), ["cm-2", "cm-4", "cm-6", "cm-8"]);
      assert.deepEqual(indexed("c"), ["cm-new"]);
      assert.equal(inf.oneByIndex("name", "cm-0")?.metadata?.labels?.node, "b", "the replaced object, not the old one");
      assert.equal(inf.oneByIndex("name", "cm-1"), undefined, "deleted");
      assert.ok(agrees(), "index and scan agree after watch events");

      // Changes the watch never delivers: the relist must drop and move them in the index as in the cache.
      proxy.blackhole();
      const listsBefore = lists;
      await lab.core.deleteNamespacedConfigMap({ namespace: ns, name: "cm-2" });
      await lab.core.deleteNamespacedConfigMap({ namespace: ns, name: "cm-new" });
      await relabel("cm-4", "c");
      await waitFor("the watchdog to relist", () => lists > listsBefore, { timeoutMs: 20_000 });
      proxy.restore();
      await waitFor("the relist to land", () => !inf.get("cm-2", ns) && !inf.get("cm-new", ns), { timeoutMs: 45_000 });
      assert.deepEqual(indexed("a"), ["cm-6", "cm-8"]);
      assert.deepEqual(indexed("c"), ["cm-4"]);
      assert.ok(agrees(), "index and scan agree after a relist");
    } finally {
      proxy.restore();
      inf.stop();
    }
  });

  // Last: it restarts the apiserver.
  test("a server that refuses streamed lists (WatchList off, as Kubernetes 1.33): pages at once, says why, keeps watching", async () => {
    await lab.restartApiserver({ featureGates: ["WatchList=false"] });
    let lists = 0;
    const errors: { err: unknown; ms: number }[] = [];
    const inf = new Informer<V1ConfigMap>({
      kc: lab.kc,
      path,
      list: () => (lists++, lab.core.listNamespacedConfigMap({ namespace: NS })),
      streamingList: true,
      onError: (err, ms) => errors.push({ err, ms }),
    });
    try {
      const t0 = performance.now();
      await inf.start();
      const took = performance.now() - t0;
      assert.equal(lists, 1, "listed in pages instead");
      assert.equal(errors.length, 1, `said once: ${errors.map((e) => String(e.err)).join("; ")}`);
      assert.match(
        String(errors[0]!.err),
        /streamed list of \/api\/v1\/namespaces\/informer\/configmaps refused \(.+\): listing in pages from now on/,
      );
      assert.equal(errors[0]!.ms, 0, "no backoff: waiting would not mend it");
      assert.ok(took < 5_000, `synced in ${took} ms`);
      assert.equal(inf.streaming, false);
      assert.ok(inf.get("listed", NS), "the listed state is in the cache");
      await lab.core.createNamespacedConfigMap({ namespace: NS, body: { metadata: { name: "after-refusal" }, data: { k: "v" } } });
      await waitFor("the watch to deliver after-refusal", () => !!inf.get("after-refusal", NS), { timeoutMs: 10_000 });
      assert.equal(inf.restarts, 0);
    } finally {
      inf.stop();
      await lab.restartApiserver({ featureGates: [] });
    }
  });
});
