import { test } from "node:test";
import assert from "node:assert/strict";
import { createServer, connect, type Socket } from "node:net";
import { once } from "node:events";
import { setTimeout as sleep } from "node:timers/promises";
import { TcpProxy } from "../../lab/tcp-proxy.ts";
import { tcpOpen } from "../../lab/health.ts";
import { freeTcpPort } from "../../lab/ports.ts";

async function echoServer() {
  const srv = createServer((s) => {
    s.on("error", () => {});
    s.pipe(s);
  });
  srv.listen(0, "127.0.0.1");
  await once(srv, "listening");
  return srv;
}

function roundTrip(port: number, msg: string, waitMs = 500): Promise<string> {
  return new Promise((resolve) => {
    const c: Socket = connect(port, "127.0.0.1");
    let got = "";
    c.on("data", (d) => (got += d.toString()));
    c.on("error", () => resolve(`error:${got}`));
    c.on("connect", () => c.write(msg));
    setTimeout(() => {
      c.destroy();
      resolve(got);
    }, waitMs);
  });
}

test("the API proxy passes traffic, cuts it off, black-holes it and restores it", async () => {
  const srv = await echoServer();
  const port = (srv.address() as { port: number }).port;
  const proxy = await new TcpProxy("127.0.0.1", port).start();
  try {
    assert.equal(await roundTrip(proxy.port, "hello"), "hello");

    const open = connect(proxy.port, "127.0.0.1");
    await once(open, "connect");
    open.on("error", () => {});
    const closed = new Promise((resolve) => open.on("close", resolve));
    proxy.cut();
    await closed; // existing connections are reset
    assert.match(await roundTrip(proxy.port, "x"), /^error:|^$/, "new connections fail");

    proxy.blackhole();
    assert.equal(await roundTrip(proxy.port, "silence"), "", "bytes vanish both ways");

    proxy.restore();
    await sleep(10);
    assert.equal(await roundTrip(proxy.port, "back"), "back");
  } finally {
    await proxy.stop();
    await new Promise((resolve) => srv.close(resolve));
  }
});

test("stall: nothing moves while stalled, and nothing is lost: every byte arrives in order after restore", async () => {
  const srv = await echoServer();
  const proxy = await new TcpProxy("127.0.0.1", (srv.address() as { port: number }).port).start();
  const c = connect(proxy.port, "127.0.0.1");
  await once(c, "connect");
  let got = "";
  c.on("data", (d) => (got += d.toString()));
  c.write("a");
  await sleep(100);
  assert.equal(got, "a");
  proxy.stall();
  c.write("b");
  c.write("c");
  await sleep(300);
  assert.equal(got, "a", "no byte crosses a stalled proxy");
  proxy.restore();
  await sleep(300);
  assert.equal(got, "abc", "the stalled bytes arrive after restore, in order (a blackhole would have lost them)");
  c.destroy();
  await proxy.stop();
  srv.close();
});

test("the lab's readiness probe: tcpOpen sees the proxy listening and a closed port as closed; a probe's dropped connection leaves the proxy forwarding", async () => {
  const echo = await echoServer();
  const target = (echo.address() as { port: number }).port;
  const proxy = await new TcpProxy("127.0.0.1", target).start(0, "127.0.0.1");
  try {
    assert.equal(await tcpOpen("127.0.0.1", proxy.port), true);
    assert.equal(await tcpOpen("127.0.0.1", proxy.port), true);
    assert.equal(await roundTrip(proxy.port, "still here"), "still here");
  } finally {
    await proxy.stop();
    echo.close();
  }
  const closed = await freeTcpPort();
  assert.equal(await tcpOpen("127.0.0.1", closed), false);
});
