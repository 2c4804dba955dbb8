// Kube.readAgentRecord, against a stand-in apiserver on loopback (a test double answering one path with a chosen
// status): a record that is not there or that the operator may not read (403: the node agent's manifests, which grant
// the read, are not installed) is no record — never evidence, and never an error that would stop a policy's other
// levels — while any other failure is thrown (the step's read fails and is retried).
import { test } from "node:test";
import assert from "node:assert/strict";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { KubeConfig } from "@kubernetes/client-node";
import { Kube } from "../../src/kube/api.ts";

test("readAgentRecord: 404 and 403 are no record, a 500 is thrown, a 200 is the record", async () => {
  let code = 200;
  const paths: string[] = [];
  const server = createServer((req, res) => {
    paths.push(req.url ?? "");
    const body =
      code === 200
        ? { kind: "Lease", apiVersion: "coordination.k8s.io/v1", metadata: { name: "n1", namespace: "stockade-node-agent" } }
        : { kind: "Status", apiVersion: "v1", status: "Failure", code, reason: code === 403 ? "Forbidden" : "NotFound" };
    res.writeHead(code, { "content-type": "application/json" }).end(JSON.stringify(body));
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  try {
    const kc = new KubeConfig();
    kc.loadFromOptions({
      clusters: [{ name: "c", server: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, skipTLSVerify: true }],
      users: [{ name: "u" }],
      contexts: [{ name: "x", cluster: "c", user: "u" }],
      currentContext: "x",
    });
    const kube = new Kube(kc);
    assert.equal((await kube.readAgentRecord("n1"))?.metadata?.name, "n1");
    assert.equal(paths.at(-1), "/apis/coordination.k8s.io/v1/namespaces/stockade-node-agent/leases/n1");
    code = 404;
    assert.equal(await kube.readAgentRecord("n1"), undefined);
    code = 403;
    assert.equal(await kube.readAgentRecord("n1"), undefined);
    code = 500;
    await assert.rejects(kube.readAgentRecord("n1"));
  } finally {
    server.closeAllConnections();
    server.close();
  }
});
