// The agent monitor against real ipmi_sim BMCs (docs/operate.md, "The agent monitor"): with the operator running,
// the FenceAgent is Ready and Reachable; a BMC whose password is changed on the BMC itself (the Secret not updated,
// as when a person rotates it by hand) shows up within the monitor's period as that node failing with AuthFailed,
// in the FenceAgent's status, an Event and the metric, and nothing is powered off or on; updating the Secret brings
// it back. The policy is live: a failing monitor must not fence (nor must anything else here: the nodes heartbeat).
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { readFileSync, writeFileSync } from "node:fs";
import { CoreV1Api } from "@kubernetes/client-node";
import { Bed, SECRETS_NS } from "../../lab/bed.ts";
import { ipmitool } from "../../lab/bmc.ts";
import { waitFor } from "../../lab/health.ts";
import type { FenceAgent } from "../../src/api/v1alpha1.ts";

const INTERVAL_SECONDS = 10;
const cond = (a: FenceAgent, type: string) => a.status?.conditions?.find((c) => c.type === type);

describe("the agent monitor: a changed BMC password within the period", { timeout: 300_000 }, () => {
  let bed: Bed;
  before(async () => {
    bed = await Bed.up({ nodes: 2, name: "agent-monitor", runtime: "kwok", log: (m) => console.log(`# ${m}`) });
  });
  after(async () => {
    await bed?.down();
  });

  test("Ready and Reachable; the BMC's password changed → AuthFailed, an Event, the metric; the Secret updated → recovered", async () => {
    await bed.kubectl(
      "patch",
      "fenceagent",
      "lab-ipmi",
      "--type=merge",
      "-p",
      JSON.stringify({ spec: { monitor: { intervalSeconds: INTERVAL_SECONDS } } }),
    );
    await bed.policy("monitored", {});
    const op = await bed.startOperator();
    const metricsAt = await waitFor(
      "the operator's metrics address",
      () => bed.operatorLog(op).find((l) => typeof l.metrics === "string")?.metrics as string,
    );
    const scrape = async () => await (await fetch(`http://${metricsAt}/metrics`)).text();

    const healthy = await waitFor(
      "lab-ipmi Ready and Reachable, both nodes answering",
      async () => {
        const a = await bed.agent("lab-ipmi");
        const m = a.status?.monitor;
        return cond(a, "Reachable")?.status === "True" && m?.reachable === 2 && m.observedGeneration === a.metadata?.generation
          ? a
          : undefined;
      },
      { timeoutMs: 90_000, intervalMs: 500 },
    );
    assert.equal(cond(healthy, "Ready")?.status, "True", JSON.stringify(healthy.status));
    assert.deepEqual([healthy.status?.monitor?.intervalSeconds, healthy.status?.monitor?.failing], [INTERVAL_SECONDS, 0]);
    assert.match(await bed.kubectl("get", "fenceagent", "lab-ipmi"), /lab-ipmi\s+ipmi\s+(<none>\s+)?True/);

    // Someone changes node-1's BMC password on the BMC and forgets the Secret.
    const node = bed.lab.state.nodes.find((n) => n.name === "node-1")!;
    const oldPassword = readFileSync(node.bmc.passwordFile, "utf8").trim();
    const newPassword = randomBytes(9).toString("base64url");
    const set = await ipmitool(node, ["user", "set", "password", "2", newPassword]);
    assert.equal(set.code, 0, `ipmitool user set password: ${set.stderr}`);
    writeFileSync(node.bmc.passwordFile, newPassword, { mode: 0o600 }); // the lab's own ipmitool and leak check
    const changedAt = Date.now();
    const failing = await waitFor(
      "node-1 failing with AuthFailed",
      async () => {
        const a = await bed.agent("lab-ipmi");
        return a.status?.monitor?.failures?.some((f) => f.node === "node-1" && f.reason === "AuthFailed") ? a : undefined;
      },
      { timeoutMs: 60_000, intervalMs: 500 },
    );
    const seconds = (Date.now() - changedAt) / 1000;
    console.log(`# AuthFailed in the FenceAgent's status ${seconds.toFixed(1)} s after the password change`);
    // The period, the query's own time (no retry after AuthFailed) and the 5 s coalescing of status writes.
    assert.ok(seconds < INTERVAL_SECONDS + 5 + 10, `took ${seconds} s`);
    assert.deepEqual(
      [cond(failing, "Ready")?.status, cond(failing, "Ready")?.reason, cond(failing, "Reachable")?.reason],
      ["False", "AuthFailed", "AuthFailed"],
    );
    assert.deepEqual([failing.status?.monitor?.reachable, failing.status?.monitor?.failing], [1, 1]);
    assert.match(failing.status!.monitor!.failures![0]!.message, /rejected the credentials of user "admin"/);
    assert.match(await bed.kubectl("get", "fenceagent", "lab-ipmi"), /lab-ipmi\s+ipmi\s+(<none>\s+)?False/);

    const core = bed.lab.kc.makeApiClient(CoreV1Api);
    const events = async (reason: string) =>
      (await core.listNamespacedEvent({ namespace: "default" })).items.filter(
        (e) => e.involvedObject.kind === "FenceAgent" && e.involvedObject.name === "lab-ipmi" && e.reason === reason,
      );
    const lost = await waitFor("a MonitorFailed Event", async () => (await events("MonitorFailed"))[0]);
    assert.equal(lost.type, "Warning");
    assert.match(lost.message ?? "", /^1 node\(s\) can no longer be fenced through FenceAgent lab-ipmi: .*node-1 \(AuthFailed/);
    assert.match(await scrape(), /^stockade_agent_monitor_nodes\{agent="lab-ipmi",result="AuthFailed"\} 1$/m);
    assert.match(await scrape(), /^stockade_agent_monitor_last_run_timestamp_seconds\{agent="lab-ipmi"\} \d/m);

    // The Secret updated: node-1 answers again at its next query.
    await core.replaceNamespacedSecret({
      namespace: SECRETS_NS,
      name: "bmc-node-1",
      body: { metadata: { name: "bmc-node-1", namespace: SECRETS_NS }, stringData: { password: newPassword } },
    });
    const fixedAt = Date.now();
    await waitFor(
      "lab-ipmi Reachable again",
      async () => {
        const a = await bed.agent("lab-ipmi");
        return cond(a, "Reachable")?.status === "True" && cond(a, "Ready")?.status === "True" && a.status?.monitor?.reachable === 2
          ? a
          : undefined;
      },
      { timeoutMs: 60_000, intervalMs: 500 },
    );
    console.log(`# recovered ${((Date.now() - fixedAt) / 1000).toFixed(1)} s after the Secret was updated`);
    const back = await waitFor("a MonitorRecovered Event", async () => (await events("MonitorRecovered"))[0]);
    assert.equal(back.type, "Normal");
    assert.match(back.message ?? "", /node-1/);
    assert.match(await scrape(), /^stockade_agent_monitor_nodes\{agent="lab-ipmi",result="Reachable"\} 2$/m);

    // Status queries only: neither BMC was asked to change the power, no NodeFence was made, no password logged.
    for (const n of ["node-1", "node-2"]) {
      const chassis = bed.lab.bmcRequests(n).chassis;
      assert.ok(
        chassis.some((c) => c.op === "get"),
        `${n}'s BMC was queried`,
      );
      assert.deepEqual(
        chassis.filter((c) => c.op === "set"),
        [],
        `${n}'s BMC was never told to change the power`,
      );
    }
    assert.equal(await bed.getFence("node-1"), undefined);
    assert.deepEqual(bed.leakedSecrets([oldPassword, newPassword]), []);
  });

  test("a BMC that stops answering: Unreachable within the period; answering again: recovered", async () => {
    await bed.lab.setBmcReachable("node-2", false);
    const frozenAt = Date.now();
    let unreachable: FenceAgent;
    try {
      unreachable = await waitFor(
        "node-2 failing with Unreachable",
        async () => {
          const a = await bed.agent("lab-ipmi");
          return a.status?.monitor?.failures?.some((f) => f.node === "node-2" && f.reason === "Unreachable") ? a : undefined;
        },
        { timeoutMs: 90_000, intervalMs: 500 },
      );
    } finally {
      await bed.lab.setBmcReachable("node-2", true);
    }
    // The period, ipmitool's own retransmission (2 × 2 s) twice (the agent's retries: 1) and the status write's coalescing.
    const seconds = (Date.now() - frozenAt) / 1000;
    console.log(`# Unreachable in the FenceAgent's status ${seconds.toFixed(1)} s after the BMC froze`);
    assert.ok(seconds < INTERVAL_SECONDS + 15 + 10, `took ${seconds} s`);
    assert.deepEqual([cond(unreachable, "Ready")?.reason, cond(unreachable, "Reachable")?.status], ["Unreachable", "False"]);
    assert.match(unreachable.status!.monitor!.failures!.find((f) => f.node === "node-2")!.message, /did not answer/);
    await waitFor(
      "lab-ipmi Reachable again",
      async () => {
        const a = await bed.agent("lab-ipmi");
        return cond(a, "Ready")?.status === "True" && a.status?.monitor?.reachable === 2 ? a : undefined;
      },
      { timeoutMs: 60_000, intervalMs: 500 },
    );
    assert.equal(bed.lab.machine("node-2").power, "on", "a status query powers nothing");
  });
});
