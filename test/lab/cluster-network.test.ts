// The real-node lab is a cluster for pods the way a user's is (issue 27): Service VIPs through kube-proxy in
// every node (nftables mode), the `kubernetes` Service's endpoint, in-cluster config with a ServiceAccount
// token, webhook Services called by the apiserver, kubectl logs/exec; the BMCs on a management address that
// pods reach, that a BMC fault cuts and a node partition does not; and addresses nobody serves fail on the
// host at once instead of reaching the machine's egress proxy (which "answers" any address).
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, readdirSync } from "node:fs";
import { get as httpsGet } from "node:https";
import { connect } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { Lab } from "../../lab/lab.ts";
import { waitFor } from "../../lab/health.ts";
import { realNodeImages } from "../../lab/images.ts";
import { signServerCert } from "../../lab/pki.ts";
import { RedfishSimulator } from "../../lab/redfish-sim.ts";
import { Ec2Peer } from "../../lab/ec2-peer.ts";
import { WebhookPowerService, labPower, serviceTls } from "../../lab/webhook-power-service.ts";
import { paths } from "../../lab/state.ts";
import { labPodRange } from "../../lab/real/net.ts";
import { nodePaths } from "../../lab/real/config.ts";

const NS = "default";
const run = promisify(execFile);
// IPMI 1.5 Get Channel Authentication Capabilities (RMCP, no session): every IPMI LAN BMC answers it.
const IPMI_PING = "0600ff07000000000000000000092018c88100388e04b5";
const TOKEN = "/var/run/secrets/kubernetes.io/serviceaccount/token";
// busybox's wget crashes (SIGSEGV) when given -T: every time limit here is busybox's timeout applet.

/** How a connection from the host to `ip:port` ends: "connected", or the error code, and how long it took. */
function hostConnect(ip: string, port: number): Promise<{ result: string; ms: number }> {
  const t0 = Date.now();
  return new Promise((resolve) => {
    const s = connect({ host: ip, port, timeout: 5000 });
    s.on("connect", () => {
      s.destroy();
      resolve({ result: "connected", ms: Date.now() - t0 });
    });
    s.on("timeout", () => {
      s.destroy();
      resolve({ result: "timeout", ms: Date.now() - t0 });
    });
    s.on("error", (e: NodeJS.ErrnoException) => resolve({ result: e.code ?? e.message, ms: Date.now() - t0 }));
  });
}

describe("the real-node lab as a cluster for pods", () => {
  let lab: Lab;
  let images: Record<string, string>;
  const kubectl = async (args: string[], input?: string) => {
    const child = run("kubectl", args, { env: lab.env, timeout: 60_000 });
    if (input !== undefined) child.child.stdin!.end(input);
    return child.then(
      ({ stdout, stderr }) => ({ code: 0, stdout, stderr }),
      (e: { code?: number; stdout?: string; stderr?: string; message: string }) => ({
        code: typeof e.code === "number" ? e.code : 1,
        stdout: e.stdout ?? "",
        stderr: e.stderr ?? e.message,
      }),
    );
  };
  const apply = async (...objects: object[]) => {
    const r = await kubectl(["apply", "-f", "-"], JSON.stringify({ apiVersion: "v1", kind: "List", items: objects }));
    assert.equal(r.code, 0, r.stderr);
  };
  const exec = (pod: string, script: string) => kubectl(["exec", "-n", NS, pod, "--", "sh", "-c", script]);
  const pod = (name: string, node: string, image: string, script: string, extra: Record<string, unknown> = {}) => ({
    apiVersion: "v1",
    kind: "Pod",
    metadata: { name, namespace: NS, labels: { app: name } },
    spec: {
      nodeName: node,
      terminationGracePeriodSeconds: 0,
      containers: [{ name: "c", image, imagePullPolicy: "Never", command: ["sh", "-c", script], ...extra }],
    },
  });
  const waitRunning = (...names: string[]) =>
    waitFor(
      `pods ${names.join(", ")} Running`,
      async () => {
        const ps = await Promise.all(names.map((name) => lab.core.readNamespacedPod({ name, namespace: NS })));
        return ps.every((p) => p.status?.containerStatuses?.[0]?.state?.running) || undefined;
      },
      { timeoutMs: 60_000, intervalMs: 200 },
    );
  const bmcOf = (node: string) => {
    const b = lab.state.nodes.find((n) => n.name === node)!.bmc;
    return `${b.address}:${b.port}`;
  };

  before(async () => {
    const imgs = await realNodeImages();
    lab = await Lab.up({ dir: mkdtempSync(join(tmpdir(), "stockade-net-")), nodes: 3, runtime: "real", images: imgs });
    images = lab.state.real!.images;
    await lab.waitForDefaultServiceAccount(NS);
    await apply(pod("client", "node-1", images.netprobe!, "echo client-started; exec sleep 3600"));
    await waitRunning("client");
  });
  after(async () => {
    await lab?.down();
  });

  test("from the host, an unserved ClusterIP and an unserved pod address fail locally within a second", async () => {
    const podRange = labPodRange(lab.state.real!.slot); // 10.<100+S>.0.0/16; the nodes' /24s are .1-.3
    for (const ip of ["10.96.213.7", podRange.replace(/\.0\.0\/16$/, ".200.7")]) {
      const { result, ms } = await hostConnect(ip, 443);
      assert.ok(
        ["EHOSTUNREACH", "ENETUNREACH"].includes(result),
        `${ip}:443 from the host: ${result} (the egress proxy answers if no route stops it)`,
      );
      assert.ok(ms < 1000, `${ip}:443 failed after ${ms} ms`);
    }
  });

  test("a pod's in-cluster config reaches the apiserver at 10.96.0.1 with its ServiceAccount token; an unallocated ClusterIP fails in its node", async () => {
    const review = JSON.stringify({ apiVersion: "authentication.k8s.io/v1", kind: "SelfSubjectReview" });
    for (const host of ["$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT", "kubernetes.default.svc"]) {
      const r = await exec(
        "client",
        `timeout 5 wget -qO- --no-check-certificate --header "Authorization: Bearer $(cat ${TOKEN})" --header "Content-Type: application/json" ` +
          `--post-data '${review}' https://${host}/apis/authentication.k8s.io/v1/selfsubjectreviews`,
      );
      assert.equal(r.code, 0, `${host}: ${r.stderr}`);
      const who = JSON.parse(r.stdout) as { status: { userInfo: { username: string } } };
      assert.equal(who.status.userInfo.username, "system:serviceaccount:default:default", host);
    }
    const env = await exec("client", "echo $KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT");
    assert.equal(env.stdout.trim(), "10.96.0.1:443");
    // An unallocated ClusterIP fails in the pod's node too (no default route there: nothing leaks to the host).
    const unserved = await exec("client", "timeout 3 wget -qO- http://10.96.213.7/");
    assert.notEqual(unserved.code, 0);
    assert.match(unserved.stderr, /unreachable|refused/i, "a fast failure, not the 3 s timeout");
  });

  test("kubectl logs and kubectl exec reach the kubelets of real nodes", async () => {
    const logs = await kubectl(["logs", "-n", NS, "client"]);
    assert.equal(logs.code, 0, logs.stderr);
    assert.equal(logs.stdout.trim(), "client-started");
    const r = await exec("client", "hostname; cat /proc/1/cmdline | tr '\\0' ' '");
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.stdout, "client\nsleep 3600 ", "the pod's own hostname and PID 1");
  });

  test("a ClusterIP Service over pods on two nodes answers from a pod on a third", async () => {
    const web = (name: string, node: string) => ({
      ...pod(name, node, images.busybox!, "mkdir -p /www && hostname > /www/index.html && exec httpd -f -p 8080 -h /www"),
      metadata: { name, namespace: NS, labels: { app: "web" } },
    });
    await apply(web("web-2", "node-2"), web("web-3", "node-3"), {
      apiVersion: "v1",
      kind: "Service",
      metadata: { name: "web", namespace: NS },
      spec: { selector: { app: "web" }, ports: [{ port: 80, targetPort: 8080 }] },
    });
    await waitRunning("web-2", "web-3");
    const seen = await waitFor(
      "answers from both backends through the Service",
      async () => {
        const r = await exec("client", "for i in $(seq 30); do timeout 2 wget -qO- http://web.default.svc/; done");
        const names = new Set(r.stdout.split("\n").filter(Boolean));
        return names.has("web-2") && names.has("web-3") ? names : undefined;
      },
      { timeoutMs: 30_000, intervalMs: 500 },
    );
    assert.deepEqual([...seen].sort(), ["web-2", "web-3"]);
  });

  test("the apiserver calls a webhook Service whose backend is a pod", async () => {
    const pki = paths(lab.dir).pki;
    const cert = signServerCert(pki, "netprobe-webhook", "DNS:netprobe-webhook.default.svc");
    const backend = pod("netprobe-webhook", "node-2", images.netprobe!, "exec netprobe webhook :8443 /tls/tls.crt /tls/tls.key", {
      env: [{ name: "POD_NAME", valueFrom: { fieldRef: { fieldPath: "metadata.name" } } }],
      volumeMounts: [{ name: "tls", mountPath: "/tls" }],
    });
    await apply(
      {
        apiVersion: "v1",
        kind: "Secret",
        metadata: { name: "netprobe-webhook-tls", namespace: NS },
        type: "kubernetes.io/tls",
        stringData: { "tls.crt": readFileSync(cert.cert, "utf8"), "tls.key": readFileSync(cert.key, "utf8") },
      },
      { ...backend, spec: { ...backend.spec, volumes: [{ name: "tls", secret: { secretName: "netprobe-webhook-tls" } }] } },
      {
        apiVersion: "v1",
        kind: "Service",
        metadata: { name: "netprobe-webhook", namespace: NS },
        spec: { selector: { app: "netprobe-webhook" }, ports: [{ port: 443, targetPort: 8443 }] },
      },
    );
    await waitRunning("netprobe-webhook");
    await apply({
      apiVersion: "admissionregistration.k8s.io/v1",
      kind: "ValidatingWebhookConfiguration",
      metadata: { name: "netprobe" },
      webhooks: [
        {
          name: "netprobe.lab.stockade.io",
          clientConfig: {
            service: { name: "netprobe-webhook", namespace: NS, path: "/validate", port: 443 },
            caBundle: Buffer.from(readFileSync(join(pki, "ca.crt"))).toString("base64"),
          },
          rules: [{ operations: ["CREATE"], apiGroups: [""], apiVersions: ["v1"], resources: ["configmaps"] }],
          objectSelector: { matchLabels: { "netprobe-test": "deny" } },
          failurePolicy: "Fail",
          sideEffects: "None",
          admissionReviewVersions: ["v1"],
          timeoutSeconds: 5,
        },
      ],
    });
    let last = "";
    await waitFor(
      "the webhook's denial",
      async () => {
        const name = `denied-${Date.now()}`;
        const r = await kubectl(
          ["create", "-f", "-"],
          JSON.stringify({ apiVersion: "v1", kind: "ConfigMap", metadata: { name, namespace: NS, labels: { "netprobe-test": "deny" } } }),
        );
        last = r.stderr;
        return r.code !== 0 && /denied by netprobe on netprobe-webhook/.test(r.stderr) ? true : undefined;
      },
      { timeoutMs: 30_000, intervalMs: 500, onTimeout: () => `; last answer: ${last}` },
    );
    const allowed = await kubectl(["create", "configmap", "-n", NS, "not-selected"]);
    assert.equal(allowed.code, 0, allowed.stderr);
    await kubectl(["delete", "validatingwebhookconfiguration", "netprobe"]);
  });

  test("a pod reaches a node's BMC on the management address, and not while the BMC is unreachable", async () => {
    assert.equal(lab.state.nodes[1]!.bmc.address, lab.managementAddress);
    assert.notEqual(lab.managementAddress, lab.state.real!.hostIp);
    const probe = () => exec("client", `netprobe udp ${bmcOf("node-2")} ${IPMI_PING} 1500`);
    const ok = await probe();
    assert.equal(ok.code, 0, ok.stderr);
    assert.match(ok.stdout.trim(), /^0600ff07/, "an RMCP/IPMI answer");
    await lab.setBmcReachable("node-2", false);
    try {
      const cut = await probe();
      assert.notEqual(cut.code, 0, `the frozen BMC answered: ${cut.stdout}`);
      assert.match(cut.stderr, /no reply/);
    } finally {
      await lab.setBmcReachable("node-2", true);
    }
    assert.equal((await probe()).code, 0);
  });

  test("the Redfish simulator, the EC2 peer and the webhook power service on the management address answer pods", async () => {
    const host = lab.managementAddress;
    const redfish = await RedfishSimulator.start(lab.state, "node-2", { host });
    const ec2 = await Ec2Peer.start(join(lab.dir, "ec2"), { host });
    const tls = serviceTls(lab.dir, host);
    const power = new WebhookPowerService({ keys: ["k".repeat(32)], backend: labPower(lab.dir), tls: { cert: tls.cert, key: tls.key } });
    try {
      const powerUrl = await power.listen(0, host);
      assert.equal(redfish.address, host);
      assert.ok(ec2.url.startsWith(`http://${host}:`), ec2.url);
      assert.ok(powerUrl.startsWith(`https://${host}:`), powerUrl);
      // From the host, each certificate verifies for that address against its CA.
      const root = await new Promise<string>((resolve, reject) => {
        const req = httpsGet({ host, port: redfish.port, path: "/redfish/v1", ca: redfish.caBundle }, (res) => {
          let body = "";
          res.on("data", (c: Buffer) => (body += c.toString()));
          res.on("end", () => resolve(body));
        });
        req.on("error", reject);
      });
      assert.match(root, /"RedfishVersion"/);
      // From a pod on node-1: the Redfish service root, a request moto answers through the glue, a GET the power
      // service refuses (POST only) — each logged by the peer, so each was reached.
      const r = await exec("client", `netprobe get https://${host}:${redfish.port}/redfish/v1`);
      assert.equal(r.code, 0, r.stderr);
      assert.match(r.stdout, /^200\n.*"RedfishVersion"/s);
      const calls = ec2.glue.calls.length;
      const e = await exec("client", `netprobe get "${ec2.url}/?Action=DescribeRegions&Version=2016-11-15"`);
      assert.equal(e.code, 0, e.stderr);
      assert.equal(ec2.glue.calls.length, calls + 1, "the EC2 glue saw the pod's request");
      const w = await exec("client", `netprobe get ${powerUrl}`);
      assert.equal(w.code, 0, w.stderr);
      assert.match(w.stdout, /^405\n/);
      assert.deepEqual(
        power.requests.map((x) => [x.status, x.note]),
        [[405, "POST only"]],
      );
    } finally {
      await power.close();
      await ec2.stop();
      await redfish.stop();
    }
  });

  test("a partitioned node's pod loses the apiserver (Service VIP, established watch included) but still reaches its BMC", async () => {
    await apply({
      apiVersion: "rbac.authorization.k8s.io/v1",
      kind: "RoleBinding",
      metadata: { name: "default-view", namespace: NS },
      roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "ClusterRole", name: "view" },
      subjects: [{ kind: "ServiceAccount", name: "default", namespace: NS }],
    });
    const wget = `wget -q --no-check-certificate --header "Authorization: Bearer $(cat ${TOKEN})"`;
    const script = [
      `${wget} -O- "https://10.96.0.1/api/v1/namespaces/${NS}/configmaps?watch=1&labelSelector=probe%3Dwatch" &`,
      "while :; do",
      `  if timeout 2 ${wget} -O /dev/null https://10.96.0.1/version; then echo API-OK; else echo API-FAIL; fi`,
      `  if netprobe udp ${bmcOf("node-3")} ${IPMI_PING} 1000 >/dev/null; then echo BMC-OK; else echo BMC-FAIL; fi`,
      "  sleep 0.5",
      "done",
    ].join("\n");
    await apply(pod("cutoff", "node-3", images.netprobe!, script));
    await waitRunning("cutoff");
    const uid = (await lab.core.readNamespacedPod({ name: "cutoff", namespace: NS })).metadata!.uid!;
    // Read from the node's disk: with the node cut off, `kubectl logs` cannot reach its kubelet.
    const logDir = join(nodePaths(join(paths(lab.dir).node("node-3").dir, "machine")).podLogs, `${NS}_cutoff_${uid}`, "c");
    const lines = () => {
      if (!existsSync(logDir)) return [];
      return readdirSync(logDir)
        .filter((f) => f.endsWith(".log"))
        .flatMap((f) => readFileSync(join(logDir, f), "utf8").split("\n"))
        .filter(Boolean)
        .map((l) => l.split(" ").slice(3).join(" "));
    };
    const createWatched = (name: string) =>
      lab.core.createNamespacedConfigMap({ namespace: NS, body: { metadata: { name, labels: { probe: "watch" } } } });
    await createWatched("watched-before");
    await waitFor(
      "the pod's watch event and both probes answering",
      () => {
        const ls = lines();
        return (ls.some((l) => l.includes('"name":"watched-before"')) && ls.includes("API-OK") && ls.includes("BMC-OK")) || undefined;
      },
      { timeoutMs: 30_000, intervalMs: 200 },
    );

    await lab.partition("node-3");
    const cutAt = lines().length;
    await createWatched("watched-after");
    // Three failed calls in a row: the cut is in force (a call under way at the cut may still have finished).
    // The probes alternate, so the third API-FAIL can land before the third BMC probe: wait for both.
    const after = await waitFor(
      "the pod's apiserver calls failing and three BMC probes since",
      () => {
        const ls = lines().slice(cutAt);
        const api = ls.filter((l) => l.startsWith("API-"));
        const sinceFail = ls.slice(Math.max(0, ls.indexOf("API-FAIL")));
        const bmcSince = sinceFail.filter((l) => l.startsWith("BMC-")).length;
        return api.slice(-3).join() === "API-FAIL,API-FAIL,API-FAIL" && bmcSince >= 3 ? ls : undefined;
      },
      { timeoutMs: 30_000, intervalMs: 200 },
    );
    const firstFail = after.indexOf("API-FAIL");
    assert.ok(!after.slice(firstFail).includes("API-OK"), `an apiserver call succeeded after the cut: ${after.join(" ")}`);
    const bmc = after.slice(firstFail).filter((l) => l.startsWith("BMC-"));
    assert.ok(bmc.length >= 3 && bmc.every((l) => l === "BMC-OK"), `the BMC from the cut-off pod: ${bmc.join(" ")}`);
    // The watch opened before the cut (an established connection) receives nothing after it.
    await new Promise((r) => setTimeout(r, 3000));
    assert.ok(!lines().some((l) => l.includes('"name":"watched-after"')), "the watch kept receiving events through the partition");
  });
});
