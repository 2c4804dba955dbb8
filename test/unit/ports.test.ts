// Lab ports are drawn from below the ephemeral range, so an outgoing connection of a busy machine never
// takes one between its choice and the component binding it.
import { test } from "node:test";
import assert from "node:assert/strict";
import { createServer } from "node:net";
import { candidateRange, ephemeralRange, freeTcpPort, freeTcpPorts, freeUdpPort, portTaken } from "../../lab/ports.ts";

test("the ephemeral range is read from the kernel's format; garbage gives Linux's default", () => {
  assert.deepEqual(ephemeralRange("32768\t60999\n"), [32768, 60999]);
  assert.deepEqual(ephemeralRange("1024 65535"), [1024, 65535]);
  assert.deepEqual(ephemeralRange(""), [32768, 60999]);
  assert.deepEqual(ephemeralRange("nonsense"), [32768, 60999]);
});

test("candidates lie below the ephemeral range; a range reaching down too far leaves the pick to the kernel", () => {
  assert.deepEqual(candidateRange([32768, 60999]), [20000, 32768]);
  assert.equal(candidateRange([1024, 65535]), undefined);
  assert.equal(candidateRange([21000, 65535]), undefined);
});

test("ports handed out are free, distinct and outside the machine's ephemeral range", async () => {
  const [lo, hi] = ephemeralRange();
  const range = candidateRange();
  const tcp = await freeTcpPorts(20);
  const udp = await Promise.all([freeUdpPort(), freeUdpPort(), freeUdpPort()]);
  assert.equal(new Set([...tcp, ...udp]).size, 23, "never the same port twice");
  for (const p of [...tcp, ...udp]) {
    if (range) assert.ok(p >= range[0] && p < range[1] && (p < lo || p > hi), `${p} outside ${lo}-${hi}`);
  }
  // Free: each can be bound right away.
  for (const p of tcp.slice(0, 3)) {
    const srv = createServer();
    await new Promise<void>((resolve, reject) => srv.once("error", reject).listen(p, "127.0.0.1", resolve));
    await new Promise((r) => srv.close(r));
  }
});

test("a port in use is not handed out", async () => {
  const p = await freeTcpPort();
  const srv = createServer();
  await new Promise<void>((resolve) => srv.listen(p, "127.0.0.1", resolve));
  try {
    const more = await freeTcpPorts(50);
    assert.ok(!more.includes(p));
  } finally {
    await new Promise((r) => srv.close(r));
  }
});

test("a component's log line about a taken port is recognised (Go's and Node's wording), others are not", () => {
  assert.ok(
    portTaken(
      `E1126 run.go:72] "command failed" err="failed to create listener: failed to listen on 127.0.0.1:34435: listen tcp 127.0.0.1:34435: bind: address already in use"`,
    ),
  );
  assert.ok(portTaken("Error: listen EADDRINUSE: address already in use 127.0.0.1:4001"));
  assert.ok(!portTaken("timed out after 90000 ms waiting for kube-scheduler to become healthy"));
});
