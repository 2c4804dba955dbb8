// API requests reuse their connections: client-node 2.0 opened a new TCP connection and TLS handshake for every
// request (a new undici Agent each time); src/kube/connections.ts keeps one HTTP/1.1 pool per TLS identity, a new
// one when the certificates change, and every request keeps its deadline (src/kube/deadline.ts).
import { test } from "node:test";
import assert from "node:assert/strict";
import { createSecureServer } from "node:http2";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { AddressInfo } from "node:net";
import tls from "node:tls";
import { CoreV1Api, KubeConfig } from "@kubernetes/client-node";
import { issueCa, issueServing } from "../../src/admission/certificates.ts";
import { RequestTimeoutError, withRequestTimeout } from "../../src/kube/deadline.ts";

test("API requests share a connection; a new CA file gets a new pool; a hanging request still meets its deadline", async () => {
  const now = new Date();
  const ca = issueCa(now);
  const serving = issueServing(ca, ["127.0.0.1"], now);
  let connections = 0;
  const versions = new Set<string>();
  // A server that speaks HTTP/2 to whoever offers it, as the apiserver does: the pool must stay on HTTP/1.1.
  const server = createSecureServer({ key: serving.key, cert: serving.cert, allowHTTP1: true }, (req, res) => {
    versions.add(req.httpVersion);
    if (req.url?.includes("/nodes/hang")) return; // never answers
    res.setHeader("content-type", "application/json");
    res.end(JSON.stringify({ kind: "Node", apiVersion: "v1", metadata: { name: "n" } }));
  });
  server.on("secureConnection", () => connections++);
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", () => r()));
  try {
    const caFile = join(mkdtempSync(join(tmpdir(), "stockade-conn-")), "ca.crt");
    writeFileSync(caFile, ca.cert);
    const kc = new KubeConfig();
    kc.loadFromOptions({
      clusters: [{ name: "c", server: `https://127.0.0.1:${(server.address() as AddressInfo).port}`, caFile }],
      users: [{ name: "u", token: "t" }],
      contexts: [{ name: "x", cluster: "c", user: "u" }],
      currentContext: "x",
    });
    const api = withRequestTimeout(kc, 300).makeApiClient(CoreV1Api);
    for (let i = 0; i < 10; i++) assert.equal((await api.readNode({ name: "n" })).metadata?.name, "n");
    // Back to back, undici may open a second connection while the first one's socket is being released: not ten.
    assert.ok(connections <= 2, `10 requests one after the other: ${connections} connections`);
    assert.deepEqual([...versions], ["1.1"], "HTTP/1.1: a shared HTTP/2 session broken by a network fault was never replaced");
    const before = connections;

    // A rotated CA bundle (the old CA and another): new TLS material, a new pool; then reused again.
    writeFileSync(caFile, ca.cert + issueCa(now).cert);
    for (let i = 0; i < 5; i++) await api.readNode({ name: "n" });
    assert.ok(
      connections - before >= 1 && connections - before <= 2,
      `the new CA bundle gets a pool of its own: ${connections - before} new`,
    );

    const t0 = Date.now();
    await assert.rejects(
      api.readNode({ name: "hang" }),
      (err: unknown) => err instanceof RequestTimeoutError || /300|within/.test(String(err)),
    );
    assert.ok(Date.now() - t0 < 5_000, "the deadline ended it");
    assert.equal((await api.readNode({ name: "n" })).metadata?.name, "n", "the pool still serves after an aborted request");
  } finally {
    server.close();
  }
});

test("a pool's connections share one TLS context, and still verify the server against the kubeconfig's CA", async () => {
  const now = new Date();
  const ca = issueCa(now);
  const serving = issueServing(ca, ["127.0.0.1"], now);
  let connections = 0;
  // Answers late, so that concurrent requests each need a connection of their own.
  const server = createSecureServer({ key: serving.key, cert: serving.cert, allowHTTP1: true }, (_req, res) => {
    res.setHeader("content-type", "application/json");
    setTimeout(() => res.end(JSON.stringify({ kind: "Node", apiVersion: "v1", metadata: { name: "n" } })), 100);
  });
  server.on("secureConnection", () => connections++);
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", () => r()));
  const made = tls.createSecureContext;
  let contexts = 0;
  tls.createSecureContext = (o) => (contexts++, made(o));
  try {
    const config = (caData: string) => {
      const kc = new KubeConfig();
      kc.loadFromOptions({
        clusters: [{ name: "c", server: `https://127.0.0.1:${(server.address() as AddressInfo).port}`, caData }],
        users: [{ name: "u", token: "t" }],
        contexts: [{ name: "x", cluster: "c", user: "u" }],
        currentContext: "x",
      });
      return withRequestTimeout(kc, 5_000).makeApiClient(CoreV1Api);
    };
    const api = config(Buffer.from(ca.cert).toString("base64"));
    const read = await Promise.all(Array.from({ length: 6 }, () => api.readNode({ name: "n" })));
    assert.deepEqual(
      read.map((n) => n.metadata?.name),
      Array(6).fill("n"),
    );
    assert.ok(connections >= 3, `six concurrent requests opened ${connections} connections`);
    assert.equal(contexts, 1, `${connections} connections, ${contexts} TLS contexts built`);

    // The shared context carries the CA: a kubeconfig that trusts another CA is refused by the same server.
    const other = config(Buffer.from(issueCa(now).cert).toString("base64"));
    await assert.rejects(other.readNode({ name: "n" }), (err: unknown) =>
      /certificate/i.test(`${String(err)} ${String((err as Error).cause)}`),
    );
  } finally {
    tls.createSecureContext = made;
    server.close();
  }
});
