// The claim lock's fresh namespace list (Kube.listPodsFresh) is a read at the apiserver's current revision: no
// resourceVersion, so never one "not older than" a version seen before, which could miss a pod created since that
// reaches the claim without the gate (docs/safety.md §1). Its answer is read whether or not the apiserver
// compressed it (it gzips answers over 128 KiB for a client that offers gzip, as fetch does).
import { test } from "node:test";
import assert from "node:assert/strict";
import { createSecureServer } from "node:http2";
import { gzipSync } from "node:zlib";
import type { AddressInfo } from "node:net";
import { KubeConfig } from "@kubernetes/client-node";
import { issueCa, issueServing } from "../../src/admission/certificates.ts";
import { Kube } from "../../src/kube/api.ts";
import { withRequestTimeout } from "../../src/kube/deadline.ts";

test("the grant's namespace list is a consistent read, and a compressed answer is read as a plain one", async () => {
  const now = new Date();
  const ca = issueCa(now);
  const serving = issueServing(ca, ["127.0.0.1"], now);
  const urls: string[] = [];
  let gzip = false;
  const server = createSecureServer({ key: serving.key, cert: serving.cert, allowHTTP1: true }, (req, res) => {
    urls.push(req.url ?? "");
    const body = JSON.stringify({ kind: "PodList", apiVersion: "v1", items: [{ metadata: { name: "p", namespace: "ns", uid: "u1" } }] });
    res.setHeader("content-type", "application/json");
    if (gzip && /gzip/.test(req.headers["accept-encoding"] ?? "")) {
      res.setHeader("content-encoding", "gzip");
      res.end(gzipSync(body));
    } else res.end(body);
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", () => r()));
  try {
    const kc = new KubeConfig();
    kc.loadFromOptions({
      clusters: [
        {
          name: "c",
          server: `https://127.0.0.1:${(server.address() as AddressInfo).port}`,
          caData: Buffer.from(ca.cert).toString("base64"),
        },
      ],
      users: [{ name: "u", token: "t" }],
      contexts: [{ name: "x", cluster: "c", user: "u" }],
      currentContext: "x",
    });
    const kube = new Kube(withRequestTimeout(kc, 5_000));
    for (const compressed of [false, true]) {
      gzip = compressed;
      assert.deepEqual(
        (await kube.listPodsFresh("ns")).map((p) => p.metadata?.uid),
        ["u1"],
        compressed ? "gzipped" : "plain",
      );
    }
    assert.deepEqual(
      urls,
      Array(2).fill("/api/v1/namespaces/ns/pods"),
      "no resourceVersion, no resourceVersionMatch: the current revision",
    );
  } finally {
    server.close();
  }
});
