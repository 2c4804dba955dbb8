// A real-node lab whose directory was deleted under it (its pid files with it) leaves its apiserver forwarder
// and cluster DNS listening on its slot's host address; deleting and re-creating the network does not free
// the address, and the next lab on the slot could not listen there (a CI run lost six suites to it). Reclaiming
// a stale slot kills what still listens on its address. Needs root, like every real-node lab.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { once } from "node:events";
import { mkdirSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { createServer } from "node:net";
import { SLOTS_DIR, MAX_SLOTS, killSlotListeners, setupSwitch, teardownNet } from "../../lab/real/net.ts";

const listen = (host: string, port: number) =>
  new Promise<string>((resolve) => {
    const srv = createServer();
    srv.once("error", (e: NodeJS.ErrnoException) => resolve(e.code ?? "error"));
    srv.listen(port, host, () => srv.close(() => resolve("ok")));
  });

test("a stale slot's leftover listener holds its address across a network rebuild; reclaiming kills it", async () => {
  const slot = MAX_SLOTS; // labs claim the lowest free slot: this one is out of their way
  const dir = join(SLOTS_DIR, String(slot));
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, "owner"), "/nonexistent/slot-reclaim-test");
  const { hostIp } = setupSwitch(slot);
  const leftover = spawn(
    process.execPath,
    ["-e", `require("node:net").createServer().listen(6443, "${hostIp}", () => console.log("listening"))`],
    { stdio: ["ignore", "pipe", "inherit"] },
  );
  try {
    await once(leftover.stdout!, "data");
    teardownNet(slot);
    setupSwitch(slot);
    assert.equal(await listen(hostIp, 6443), "EADDRINUSE", "the rebuilt network's address is still held");
    const exited = once(leftover, "exit");
    assert.deepEqual(killSlotListeners(slot), [leftover.pid]);
    await exited;
    assert.equal(await listen(hostIp, 6443), "ok");
    assert.deepEqual(killSlotListeners(slot), [], "nothing left to kill");
  } finally {
    leftover.kill("SIGKILL");
    teardownNet(slot);
    rmSync(dir, { recursive: true, force: true });
  }
});
