// The claim lock's fresh namespace list (Kube.listPodsFresh) asks for an uncompressed answer: fetch offers gzip by
// default and the apiserver gzips every answer over 128 KiB, which the grant then paid for twice (the apiserver's
// deflate, the operator's inflate) on its path to the gate's lift (docs/volumes.md, "Measured"). And it stays a read
// at the apiserver's current revision: no resourceVersion, so never one "not older than" a version seen before,
// which could miss a pod created since that uses the claim without the gate (docs/safety.md §1).
import { test } from "node:test";
import assert from "node:assert/strict";
import { createSecureServer } from "node:http2";
import { gzipSync } from "node:zlib";
import type { AddressInfo } from "node:net";
import { KubeConfig } from "@kubernetes/client-node";
import { issueCa, issueServing } from "../../src/admission/certificates.ts";
import { Kube } from "../../src/kube/api.ts";
import { withRequestTimeout } from "../../src/kube/deadline.ts";

test("the fresh pod list asks for an uncompressed answer and reads a compressed one all the same", async () => {
  const now = new Date();
  const ca = issueCa(now);
  const serving = issueServing(ca, ["127.0.0.1"], now);
  const asked: (string | undefined)[] = [];
  const urls: string[] = [];
  let force = false;
  // Like the apiserver: gzip when the client accepts it (the real one only above 128 KiB; here always).
  const server = createSecureServer({ key: serving.key, cert: serving.cert, allowHTTP1: true }, (req, res) => {
    const enc = req.headers["accept-encoding"];
    asked.push(enc);
    urls.push(req.url ?? "");
    const body = JSON.stringify({ kind: "PodList", apiVersion: "v1", items: [{ metadata: { name: "p", namespace: "ns", uid: "u1" } }] });
    res.setHeader("content-type", "application/json");
    if (force || /gzip/.test(enc ?? "")) {
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
    const pods = await kube.listPodsFresh("ns");
    assert.deepEqual(
      pods.map((p) => p.metadata?.uid),
      ["u1"],
    );
    assert.deepEqual(asked, ["identity"], "the list offered no compression");
    assert.deepEqual(urls, ["/api/v1/namespaces/ns/pods"], "a consistent list: no resourceVersion, no resourceVersionMatch");
    // A server (or a proxy in between) that compresses anyway is still read.
    force = true;
    assert.deepEqual(
      (await kube.listPodsFresh("ns")).map((p) => p.metadata?.uid),
      ["u1"],
    );
  } finally {
    server.close();
  }
});
