import { test } from "node:test";
import assert from "node:assert/strict";
import { etcdMemberArgs, etcdMemberHost, etcdWorkload } from "../../lab/etcd-workload.ts";

const w = etcdWorkload({
  namespace: "db",
  image: "stockade.lab/etcd:abc",
  labDir: "/tmp/lab",
  tolerations: [{ key: "k", operator: "Exists", effect: "NoExecute", tolerationSeconds: 5 }],
});
const pod = w.statefulSet.spec!.template.spec!;
const c = pod.containers[0]!;
const arg = (flag: string) => c.args!.find((a) => a.startsWith(`--${flag}=`))?.slice(flag.length + 3);

test("the Service is headless and publishes members before they are ready", () => {
  assert.equal(w.service.metadata!.name, "etcd");
  assert.equal(w.service.spec!.clusterIP, "None");
  assert.equal(w.service.spec!.publishNotReadyAddresses, true);
  assert.deepEqual(w.service.spec!.selector, w.statefulSet.spec!.selector!.matchLabels);
  assert.deepEqual(w.statefulSet.spec!.template.metadata!.labels, w.statefulSet.spec!.selector!.matchLabels);
});

test("3 members started in parallel, named by the headless Service, never pulled", () => {
  const s = w.statefulSet.spec!;
  assert.equal(s.replicas, 3);
  assert.equal(s.serviceName, "etcd");
  assert.equal(s.podManagementPolicy, "Parallel");
  assert.equal(c.image, "stockade.lab/etcd:abc");
  assert.equal(c.imagePullPolicy, "Never");
  assert.deepEqual(pod.tolerations, [{ key: "k", operator: "Exists", effect: "NoExecute", tolerationSeconds: 5 }]);
  assert.deepEqual(w.pods, ["etcd-0", "etcd-1", "etcd-2"]);
  assert.equal(c.livenessProbe, undefined, "no liveness probe restarting members during faults");
});

test("members find each other by their StatefulSet DNS names; each names itself through $(POD_NAME)", () => {
  assert.equal(arg("initial-cluster"), [0, 1, 2].map((i) => `etcd-${i}=http://etcd-${i}.etcd.db.svc.cluster.local:2380`).join(","));
  assert.equal(arg("name"), "$(POD_NAME)");
  assert.equal(arg("initial-advertise-peer-urls"), "http://$(POD_NAME).etcd.db.svc.cluster.local:2380");
  assert.equal(arg("advertise-client-urls"), "http://$(POD_NAME).etcd.db.svc.cluster.local:2379");
  assert.equal(arg("listen-client-urls"), "http://0.0.0.0:2379");
  assert.equal(arg("initial-cluster-state"), "new");
  assert.equal(arg("initial-cluster-token"), "db-etcd");
  assert.deepEqual(c.env, [{ name: "POD_NAME", valueFrom: { fieldRef: { fieldPath: "metadata.name" } } }]);
  assert.equal(etcdMemberHost({ namespace: "db" }, "etcd-1"), "etcd-1.etcd.db.svc.cluster.local");
});

test("each member's data is on its own ReadWriteOnce claim data-etcd-<i>, pre-bound to a SAN hostPath PV", () => {
  const t = w.statefulSet.spec!.volumeClaimTemplates![0]!;
  assert.equal(t.metadata!.name, "data");
  assert.deepEqual(t.spec!.accessModes, ["ReadWriteOnce"]);
  assert.equal(t.spec!.storageClassName, "lab-san");
  assert.equal(arg("data-dir")!.startsWith(c.volumeMounts![0]!.mountPath + "/"), true, "the data dir is on the volume");
  assert.deepEqual(
    w.volumes.map((v) => [v.spec!.claimRef!.namespace, v.spec!.claimRef!.name, v.spec!.hostPath!.path, v.spec!.storageClassName]),
    [0, 1, 2].map((i) => ["db", `data-etcd-${i}`, `/tmp/lab/san/db/data-etcd-${i}`, "lab-san"]),
  );
  assert.ok(w.volumes.every((v) => v.spec!.accessModes!.join() === "ReadWriteOnce" && v.spec!.persistentVolumeReclaimPolicy === "Retain"));
  assert.equal(new Set(w.volumes.map((v) => v.metadata!.name)).size, 3);
  assert.deepEqual(
    w.hostDirs,
    w.volumes.map((v) => v.spec!.hostPath!.path),
  );
});

test("options: name, members, domain, fsync; bad input refused", () => {
  const o = etcdWorkload({
    namespace: "x",
    image: "i",
    labDir: "/l",
    name: "kv",
    members: 5,
    clusterDomain: "lab.test",
    unsafeNoFsync: true,
  });
  assert.equal(o.statefulSet.spec!.replicas, 5);
  const a = o.statefulSet.spec!.template.spec!.containers[0]!.args!;
  assert.ok(a.includes("--unsafe-no-fsync"));
  assert.ok(
    a.some((x) => x === "--initial-cluster=" + [0, 1, 2, 3, 4].map((i) => `kv-${i}=http://kv-${i}.kv.x.svc.lab.test:2380`).join(",")),
  );
  assert.ok(!c.args!.includes("--unsafe-no-fsync"), "fsync by default");
  assert.throws(() => etcdWorkload({ namespace: "x", image: "i", labDir: "/l", members: 0 }), /from 1 to 9/);
  assert.throws(() => etcdWorkload({ namespace: "x", image: "", labDir: "/l" }), /image is required/);
});

test("etcdMemberArgs: the flags a loopback member gets", () => {
  const a = etcdMemberArgs({
    name: "m0",
    dataDir: "/d",
    peerUrl: "http://127.0.0.1:2",
    clientUrl: "http://127.0.0.1:1",
    listenPeerUrl: "http://127.0.0.1:2",
    listenClientUrl: "http://127.0.0.1:1",
    initialCluster: "m0=http://127.0.0.1:2",
    clusterToken: "t",
  });
  assert.deepEqual(a, [
    "--name=m0",
    "--data-dir=/d",
    "--listen-peer-urls=http://127.0.0.1:2",
    "--listen-client-urls=http://127.0.0.1:1",
    "--initial-advertise-peer-urls=http://127.0.0.1:2",
    "--advertise-client-urls=http://127.0.0.1:1",
    "--initial-cluster=m0=http://127.0.0.1:2",
    "--initial-cluster-token=t",
    "--initial-cluster-state=new",
    "--heartbeat-interval=200",
    "--election-timeout=2000",
  ]);
});
