// The fence agents against real peers: OpenIPMI ipmi_sim BMCs whose power control really powers the
// simulated machines, driven by ipmitool directly and by Debian's fence_ipmilan (with its parameters resolved
// from the lab's real Node objects and checked against its real metadata). Also what a node's own kubelet may
// write on its Node under NodeRestriction, on the lab's real apiserver: the facts docs/api.md relies on.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync, spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { ApiException, CoreV1Api, KubeConfig, PatchStrategy, setHeaderOptions } from "@kubernetes/client-node";
import { Lab } from "../../lab/lab.ts";
import { createPki, writeKubeconfig } from "../../lab/pki.ts";
import { paths } from "../../lab/state.ts";
import { driverFor } from "../../src/agents/registry.ts";
import { resolveParameters, type FenceAgentSpec } from "../../src/agents/parameters.ts";
import { fenceOff, runOperation, type RunContext, type RunOptions } from "../../src/agents/run.ts";
import { CONFIRMED_OFF_ANNOTATION } from "../../src/agents/manual.ts";

const opts: RunOptions = { timeoutMs: 20_000, retries: 1, backoffMs: 500 };
const log = (m: string) => console.log(`# ${m}`);

async function timed<T>(label: string, f: () => Promise<T>): Promise<T> {
  const t0 = Date.now();
  const r = await f();
  log(`${label}: ${Date.now() - t0} ms ${JSON.stringify(r)}`);
  return r;
}

/** Processes whose command line mentions the BMC's port: a killed agent must leave none behind. */
function processesFor(port: number): string[] {
  const ps = execFileSync("ps", ["-eo", "pid=,args="], { encoding: "utf8" });
  return ps.split("\n").filter((l) => /fence_ipmilan|ipmitool/.test(l) && l.includes(String(port)) && !l.includes("ps -eo"));
}

describe("fence agents against simulated BMCs", { timeout: 120_000 }, () => {
  let lab: Lab;
  let ipmiCtx: RunContext;
  let fenceCtx: RunContext;
  let passwords: string[];

  before(async () => {
    lab = await Lab.up({ dir: mkdtempSync(join(tmpdir(), "stockade-agents-")), nodes: 2 });
    const b1 = lab.bmcEndpoint("node-1");
    const b2 = lab.bmcEndpoint("node-2");
    const pw1 = readFileSync(b1.passwordFile, "utf8").trim();
    const pw2 = readFileSync(b2.passwordFile, "utf8").trim();
    passwords = [pw1, pw2];
    ipmiCtx = {
      node: "node-1",
      parameters: { address: b1.address, port: String(b1.port), username: b1.username, password: pw1 },
      annotations: {},
    };
    // As the operator does: fence_ipmilan's parameters from a FenceAgent spec over the real Node (the lab labels
    // each Node with its BMC under node-restriction.kubernetes.io/) and the credentials Secret.
    const spec: FenceAgentSpec = {
      type: "fenceAgent",
      agent: "fence_ipmilan",
      parameters: { username: b2.username, lanplus: "1", cipher: "3" },
      nodeTemplates: {
        ip: '{{ labels["node-restriction.kubernetes.io/bmc-host"] }}',
        ipport: '{{ labels["node-restriction.kubernetes.io/bmc-port"] }}',
      },
      credentialsSecretRef: { namespace: "stockade-system", name: "bmc" },
    };
    const resolved = resolveParameters(spec, await lab.node("node-2"), new Map([["stockade-system/bmc", { password: `${pw2}\n` }]]));
    assert.ok("parameters" in resolved, JSON.stringify(resolved));
    assert.deepEqual(resolved.parameters, {
      ip: b2.address,
      ipport: String(b2.port),
      username: b2.username,
      password: pw2,
      lanplus: "1",
      cipher: "3",
    });
    fenceCtx = { node: "node-2", parameters: resolved.parameters, annotations: {} };
  });
  after(async () => {
    await lab?.setBmcReachable("node-1", true).catch(() => {});
    await lab?.down();
  });

  const noPassword = (m: string) => {
    for (const pw of passwords) assert.ok(!m.includes(pw), `a password leaked into: ${m}`);
  };

  test("ipmi: status on → fence off (confirmed, the machine is really off) → status off → on", async () => {
    const ipmi = driverFor("ipmi");
    const s1 = await timed("ipmi status", () => runOperation(ipmi, ipmiCtx, "status", opts));
    assert.deepEqual([s1.outcome, s1.power], ["Succeeded", "on"]);
    const off = await timed("ipmi fenceOff", () => fenceOff(ipmi, ipmiCtx, opts));
    assert.equal(off.outcome, "Succeeded", off.message);
    assert.equal(off.message, "power off of node-1 confirmed by status query");
    assert.equal(lab.machine("node-1").power, "off");
    const s2 = await runOperation(ipmi, ipmiCtx, "status", opts);
    assert.deepEqual([s2.outcome, s2.power], ["Succeeded", "off"]);
    const on = await timed("ipmi on", () => runOperation(ipmi, ipmiCtx, "on", opts));
    assert.equal(on.outcome, "Succeeded", on.message);
    assert.equal((await runOperation(ipmi, ipmiCtx, "status", opts)).power, "on");
    // The BMC acknowledges "on" and says on at once; the machine boots a moment later (lab/bmc.ts).
    for (let i = 0; i < 150 && lab.machine("node-1").power !== "on"; i++) await sleep(200);
    assert.equal(lab.machine("node-1").power, "on");
  });

  test("fenceAgent fence_ipmilan: status on → fence off → status off → on", async () => {
    const fa = driverFor("fenceAgent", "fence_ipmilan");
    assert.deepEqual(fa.validate(fenceCtx.parameters), []);
    const s1 = await timed("fence_ipmilan status", () => runOperation(fa, fenceCtx, "status", opts));
    assert.deepEqual([s1.outcome, s1.power], ["Succeeded", "on"], s1.message);
    const off = await timed("fence_ipmilan fenceOff", () => fenceOff(fa, fenceCtx, opts));
    assert.equal(off.outcome, "Succeeded", off.message);
    assert.equal(lab.machine("node-2").power, "off");
    assert.equal((await runOperation(fa, fenceCtx, "status", opts)).power, "off");
    const on = await timed("fence_ipmilan on", () => runOperation(fa, fenceCtx, "on", opts));
    assert.equal(on.outcome, "Succeeded", on.message);
    assert.equal(lab.machine("node-2").power, "on");
  });

  test("a wrong password: AuthFailed from ipmi at once, a clear failure from fence_ipmilan, no password in either", async () => {
    const wrong = "Wr0ng-Passw0rd";
    const ipmi = await timed("ipmi wrong password", () =>
      runOperation(driverFor("ipmi"), { ...ipmiCtx, parameters: { ...ipmiCtx.parameters, password: wrong } }, "status", opts),
    );
    assert.equal(ipmi.outcome, "Failed");
    assert.equal(ipmi.tries, 1, "credentials will not fix themselves: no retry");
    assert.match(
      ipmi.message,
      /\(AuthFailed\): BMC 127\.0\.0\.1:\d+ rejected the credentials of user "admin": check username and password/,
    );
    const fa = await timed("fence_ipmilan wrong password", () =>
      runOperation(
        driverFor("fenceAgent", "fence_ipmilan"),
        { ...fenceCtx, parameters: { ...fenceCtx.parameters, password: wrong } },
        "status",
        {
          ...opts,
          retries: 0,
        },
      ),
    );
    assert.equal(fa.outcome, "Failed");
    assert.match(fa.message, /fence_ipmilan status exited with 1 .*Unable to obtain correct plug status/);
    for (const m of [ipmi.message, fa.message]) {
      noPassword(m);
      assert.ok(!m.includes(wrong), m);
    }
  });

  test("a frozen BMC: ipmi says Unreachable within seconds; a hung fence_ipmilan is killed at the deadline", async () => {
    const port = lab.bmcEndpoint("node-1").port;
    await lab.setBmcReachable("node-1", false);
    try {
      const ipmi = driverFor("ipmi");
      const t0 = Date.now();
      const once = await timed("ipmi frozen BMC, no retry", () => runOperation(ipmi, ipmiCtx, "status", { ...opts, retries: 0 }));
      assert.equal(once.outcome, "Failed");
      assert.match(once.message, /\(Unreachable\): BMC 127\.0\.0\.1:\d+ did not answer/);
      assert.ok(Date.now() - t0 < 8000, "ipmitool's own retransmits give up within a few seconds");
      const deadline = await timed("ipmi frozen BMC, fenceOff with a 6 s deadline", () =>
        fenceOff(ipmi, ipmiCtx, { timeoutMs: 6000, retries: 5, backoffMs: 500 }),
      );
      assert.equal(deadline.outcome, "TimedOut");
      assert.match(deadline.message, /timed out after 6 s .*Unreachable/);

      const fa = driverFor("fenceAgent", "fence_ipmilan");
      const frozenCtx = {
        ...fenceCtx,
        node: "node-1",
        parameters: { ...fenceCtx.parameters, ipport: String(port), password: passwords[0]! },
      };
      const t1 = Date.now();
      const r = await timed("fence_ipmilan frozen BMC, 3 s deadline", () =>
        runOperation(fa, frozenCtx, "status", { timeoutMs: 3000, retries: 2, backoffMs: 500 }),
      );
      assert.equal(r.outcome, "TimedOut");
      assert.ok(Date.now() - t1 < 4000);
      noPassword(r.message);
      await sleep(200);
      assert.deepEqual(processesFor(port), [], "the agent and its ipmitool were killed");
    } finally {
      await lab.setBmcReachable("node-1", true);
    }
    assert.equal((await runOperation(driverFor("ipmi"), ipmiCtx, "status", opts)).power, "on", "the BMC answers again");
  });

  test("the reproduced injection: fence_ipmilan passes ip=127.0.0.1 -p 9999 -L USER to ipmitool as flags; Stockade refuses it", async () => {
    const injected = "127.0.0.1 -p 9999 -L USER";
    // The installed agent by hand, as the issue reproduced it: the flags reach ipmitool's command line.
    const input = [
      "action=status",
      `ip=${injected}`,
      "username=admin",
      "password=x",
      "lanplus=1",
      "cipher=3",
      "verbose=1",
      "ipmitool_timeout=1",
      "",
    ];
    // Its first command line is logged at once; do not wait for its retries against nothing.
    const raw = spawnSync("/usr/sbin/fence_ipmilan", [], {
      input: input.join("\n"),
      encoding: "utf8",
      timeout: 6000,
      killSignal: "SIGKILL",
    });
    assert.match(raw.stderr, /Executing: \S*ipmitool -I lanplus -H 127\.0\.0\.1 -p 9999 -L USER -p 623/, raw.stderr);
    // Through Stockade: refused before anything runs.
    const fa = driverFor("fenceAgent", "fence_ipmilan");
    const ctx = { ...fenceCtx, parameters: { ...fenceCtx.parameters, ip: injected } };
    assert.match(fa.validate(ctx.parameters).join(), /parameter ip contains whitespace/);
    const r = await runOperation(fa, ctx, "status", opts);
    assert.deepEqual([r.outcome, r.tries], ["Failed", 0]);
    const dangerous: Record<string, string>[] = [
      { ipmitool_path: "/bin/sh" },
      { passwd_script: "id" },
      { sudo_path: "/bin/sh" },
      { debug_file: "/tmp/x" },
    ];
    for (const bad of dangerous) {
      const m = fa.validate({ ...fenceCtx.parameters, ...bad }).join();
      assert.match(m, /runs a program or a shell command|names a file/, JSON.stringify(bad));
    }
  });

  test("NodeRestriction: a kubelet may write its Node's annotations and ordinary labels, not node-restriction.kubernetes.io/ labels, nor delete the Node; providerID only once", async () => {
    const pki = createPki(paths(lab.dir).pki, [{ name: "kubelet-node-1", cn: "system:node:node-1", groups: ["system:nodes"] }]);
    const file = join(lab.dir, "kubelet-node-1.kubeconfig");
    writeKubeconfig(file, {
      server: lab.kc.getCurrentCluster()!.server,
      caCert: pki.caCert,
      ...pki.client("kubelet-node-1"),
      user: "system:node:node-1",
    });
    const kc = new KubeConfig();
    kc.loadFromFile(file);
    const kubelet = kc.makeApiClient(CoreV1Api);
    const merge = setHeaderOptions("Content-Type", PatchStrategy.MergePatch);
    const patch = (name: string, body: object) => kubelet.patchNode({ name, body }, merge);
    const refused = async (p: Promise<unknown>, what: string): Promise<string> => {
      try {
        await p;
      } catch (e) {
        if (e instanceof ApiException) return `${e.code} ${String(e.body)}`;
        throw e;
      }
      assert.fail(`${what} was allowed`);
    };
    // Allowed: exactly what a template must therefore never read.
    await patch("node-1", { metadata: { annotations: { "bmc.example.com/address": "10.6.6.6" } } });
    await patch("node-1", { metadata: { labels: { "bmc.example.com/address": "10.6.6.6" } } });
    const n1 = await lab.node("node-1");
    assert.equal(n1.metadata?.annotations?.["bmc.example.com/address"], "10.6.6.6");
    assert.equal(n1.metadata?.labels?.["bmc.example.com/address"], "10.6.6.6");
    // Refused: the labels templates may read, set by the lab (an administrator) at creation.
    const own = await refused(
      patch("node-1", { metadata: { labels: { "node-restriction.kubernetes.io/bmc-port": "1" } } }),
      "changing a node-restriction label",
    );
    assert.match(own, /^403 .*is not allowed to modify labels: node-restriction\.kubernetes\.io\/bmc-port/);
    const removed = await refused(
      patch("node-1", { metadata: { labels: { "node-restriction.kubernetes.io/bmc-host": null } } }),
      "removing one",
    );
    assert.match(removed, /^403 .*node-restriction\.kubernetes\.io\/bmc-host/);
    assert.match(await refused(patch("node-2", { metadata: { annotations: { x: "y" } } }), "another Node"), /^403 /);
    assert.match(await refused(kubelet.deleteNode({ name: "node-1" }), "deleting its own Node"), /^403 /);
    // providerID: the kubelet may set it while empty (the nuance docs/api.md notes), then nobody may change it.
    await patch("node-1", { spec: { providerID: "kwok://node-1" } });
    const again = await refused(patch("node-1", { spec: { providerID: "kwok://node-2" } }), "changing providerID");
    assert.match(again, /^422 .*node updates may not change providerID except from \\"\\" to valid/);
    await lab.core.patchNode(
      {
        name: "node-1",
        body: { metadata: { annotations: { "bmc.example.com/address": null }, labels: { "bmc.example.com/address": null } } },
      },
      merge,
    );
  });

  test("manual: status is unknown until the NodeFence carries the confirmation for this node", async () => {
    const manual = driverFor("manual");
    const ctx = { node: "node-1", parameters: {}, annotations: {} };
    assert.equal((await runOperation(manual, ctx, "status", opts)).power, "unknown");
    const confirmed = { ...ctx, annotations: { [CONFIRMED_OFF_ANNOTATION]: "node-1" } };
    assert.equal((await runOperation(manual, confirmed, "status", opts)).power, "off");
    const r = await fenceOff(manual, confirmed, opts);
    assert.deepEqual(
      [r.outcome, r.message],
      ["Succeeded", `node-1 confirmed off by the administrator (annotation ${CONFIRMED_OFF_ANNOTATION})`],
    );
  });
});
