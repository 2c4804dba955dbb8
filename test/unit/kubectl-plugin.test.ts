// kubectl-stockade without a cluster: formatting, the renderings of status and explain over fixtures, the
// command line, and the API error messages against a fake apiserver (no CRDs, "try again later", nothing listening).
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { spawnSync } from "node:child_process";
import { fileURLToPath } from "node:url";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { AddressInfo } from "node:net";
import type { FencingPolicy } from "../../src/api/v1alpha1.ts";
import { age, clip, humanDuration, iso, table } from "../../src/cli/format.ts";
import { renderStatus, statusReport } from "../../src/cli/status.ts";
import { explainReport, renderExplain } from "../../src/cli/explain.ts";
import { describeLevels, historyReport, renderHistory } from "../../src/cli/history.ts";
import type { FenceRecord } from "../../src/api/v1alpha1.ts";
import { policyProblems, volumeSafetyWarnings } from "../../src/cli/check.ts";
import { retryAfterSeconds } from "../../src/cli/cluster.ts";
import { main } from "../../src/cli/kubectl-stockade.ts";
import { podsByNode, type FleetInput } from "../../src/decide/fleet.ts";
import type { V1Lease, V1Pod } from "@kubernetes/client-node";
import type { DateTime } from "luxon";
import { ApiException } from "@kubernetes/client-node";
import { T0, at, fence, fenceMap, lease, leases, node, pod, policy, pvcMap, stsPod, writtenBy } from "./decide-fixtures.ts";

describe("format", () => {
  test("table aligns columns with three spaces and does not pad the last one", () => {
    assert.equal(
      table(
        ["NAME", "PHASE"],
        [
          ["node-1", "Fenced"],
          ["n2", "-"],
        ],
      ),
      "NAME     PHASE\nnode-1   Fenced\nn2       -",
    );
    assert.equal(table(["A", "B", "C"], [["x", "", "z"]]), "A   B   C\nx       z");
  });

  test("humanDuration follows kubectl's", () => {
    const cases: [number, string][] = [
      [0, "0s"],
      [59, "59s"],
      [119, "119s"],
      [120, "2m"],
      [185, "3m5s"],
      [600, "10m"],
      [179 * 60, "179m"],
      [3 * 3600 + 5 * 60, "3h5m"],
      [8 * 3600, "8h"],
      [47 * 3600, "47h"],
      [50 * 3600, "2d2h"],
      [10 * 86400, "10d"],
      [800 * 86400, "2y70d"],
      [9 * 365 * 86400, "9y"],
      [-5, "<invalid>"],
    ];
    for (const [s, want] of cases) assert.equal(humanDuration(s), want, `${s} s`);
  });

  test("age, iso and clip", () => {
    assert.equal(age(T0.toISO(), at(90)), "90s");
    assert.equal(age(undefined, T0), "-");
    assert.equal(iso(at(1.5)), "2026-01-01T00:00:01Z");
    assert.equal(clip("a\n  b", 10), "a b");
    assert.equal(clip("abcdefghijkl", 5), "abcd…");
  });
});

/** node-1 heartbeats; node-2 is silent since T0 (partitioned at T0+6 with a 6 s timeout), with a guarded pod and an opted-out one. */
function world(now = at(8)): FleetInput & { podList: V1Pod[]; leaseMap: ReadonlyMap<string, V1Lease> } {
  const podList = [
    stsPod("db-0", { node: "node-2" }),
    pod("web", { node: "node-2", labels: { "stockade.io/guarded": "false" } }),
    pod("cache", {
      node: "node-2",
      claims: ["data"],
      conditions: [{ type: "NodeDown", status: "True", reason: "NodePartitioned", lastTransitionTime: at(6).toJSDate() }],
    }),
  ];
  const leaseMap = leases(lease("node-1", now.minus({ seconds: 1 }), 8), lease("node-2", T0, 8));
  return {
    now,
    nodes: [node("node-1", { heartbeat: now.minus({ seconds: 1 }) }), node("node-2", { ready: "Unknown", heartbeat: T0 })],
    leases: leaseMap,
    leaseMap,
    pods: podsByNode(podList),
    podList,
    pvcs: pvcMap(),
    pdbs: [],
    policies: [policy("default", { detection: { heartbeatTimeoutSeconds: 6, fenceAfterSeconds: 4, honorPodTolerations: false } })],
    fences: fenceMap(),
    watchStalenessSeconds: 0,
  };
}

describe("explain", () => {
  test("a node partitioned for less than its pods' wait is Waiting, with its guarded pods and why", () => {
    const out = renderExplain(world(), "node-2");
    assert.match(out, /^Verdict:\s+Waiting$/m);
    assert.match(out, /^Policy:\s+default$/m);
    assert.match(out, /state:\s+Partitioned/);
    assert.match(out, /partitioned since: 2026-01-01T00:00:06Z \(2s ago\)/);
    assert.match(out, /^default\/db-0\s+yes\s+owned by a StatefulSet\s+4s \(fenceAfterSeconds\)$/m);
    assert.match(out, /^default\/cache\s+yes\s+uses ReadWriteOnce claim data\s+4s/m);
    assert.match(out, /^default\/web\s+no\s+opted out by label/m);
    assert.match(out, /no hold: fencing is not held back/);
    assert.match(out, /^ {2}pods: every namespace; force-delete guard on; claim lock on$/m);
  });

  test("explain says what the policy's scope is and which of the guard and the claim lock act (issue 28)", () => {
    const w = world();
    const withPolicy = (spec: Partial<FencingPolicy["spec"]>) =>
      renderExplain({ ...w, policies: [{ ...w.policies[0]!, spec: { ...w.policies[0]!.spec, ...spec } }] }, "node-2");
    assert.match(withPolicy({ dryRun: true }), /pods: every namespace; force-delete guard off \(a dry run\); claim lock off \(a dry run\)/);
    assert.match(
      withPolicy({ guardedPods: { namespaces: ["shop"] }, forceDeleteGuard: false }),
      /pods: namespaces shop; force-delete guard off \(forceDeleteGuard: false\); claim lock on/,
    );
    assert.match(withPolicy({ guardedPods: { namespaces: ["shop"] } }), /^default\/db-0\s+no\s+outside the policy's namespaces/m);
  });

  test("issue 31: explain says which signal made the node partitioned: its Lease's expiry, or the node controller", () => {
    // node-2 Ready=True, silent since T0, its 8 s Lease's renewTime T0 + 8 s passed on the wall clock.
    const w = world(at(9));
    const silent = { ...w, nodes: [w.nodes[0]!, node("node-2", { ready: "True", heartbeat: T0 })] };
    // The CLI watches no Lease: it shows the wall-clock estimate, labelled so, never a decision the operator would not make.
    const cli = renderExplain(silent, "node-2");
    assert.match(cli, /state:\s+Suspect \(silent, but Ready is not Unknown yet; whether its Lease expired only the operator can tell/);
    assert.match(
      cli,
      /lease expires:\s+2026-01-01T00:00:08Z .*\(wall-clock estimate: renewTime, on the node's clock, \+ leaseDurationSeconds;/,
    );
    assert.doesNotMatch(cli, /partitioned by:/);
    assert.equal((explainReport(silent, "node-2").health as { partitionedBy: string | null }).partitionedBy, null);
    // Given the operator's observation (the Lease seen unrenewed for 9 s): partitioned by its Lease.
    const byLease = { ...silent, leaseSilentMs: () => 9_000 };
    const out = renderExplain(byLease, "node-2");
    assert.match(out, /state:\s+Partitioned/);
    assert.match(out, /lease expires:\s+2026-01-01T00:00:08Z/);
    assert.match(
      out,
      /partitioned by:\s+Lease: its Lease was not renewed for its leaseDurationSeconds 8, as this operator observed \(renewTime 2026-01-01T00:00:00.000Z, on the node's clock\)/,
    );
    assert.match(out, /waitForNodeController false/);
    const r = explainReport(byLease, "node-2").health as { partitionedBy: string; leaseExpires: string };
    assert.equal(r.partitionedBy, "Lease");
    assert.equal(r.leaseExpires, "2026-01-01T00:00:08Z");
    // The same node under waitForNodeController: silent, not partitioned; and Ready=Unknown: the node controller.
    const waiting = {
      ...byLease,
      policies: [policy("default", { detection: { heartbeatTimeoutSeconds: 6, fenceAfterSeconds: 4, waitForNodeController: true } })],
    };
    assert.match(renderExplain(waiting, "node-2"), /state:\s+Suspect \(silent, but Ready is not Unknown yet\)/);
    assert.match(renderExplain(w, "node-2"), /partitioned by:\s+NodeController: the node controller marked it Ready=Unknown/);
    assert.equal((explainReport(w, "node-2").health as { partitionedBy: string }).partitionedBy, "NodeController");
  });

  test("-o: explainReport gives the verdict, why and health as data", () => {
    const r = explainReport(world(), "node-2");
    assert.equal(r.verdict, "Waiting");
    assert.equal(r.policy, "default");
    assert.deepEqual((r.health as { state: string; partitionedSince: string }).partitionedSince, "2026-01-01T00:00:06Z");
    assert.equal(explainReport(world(at(11)), "node-2").verdict, "Fence");
    assert.throws(() => explainReport(world(), "node-9"), /node "node-9" not found/);
  });

  test("once the wait is over it is Fence; a healthy node is Healthy; a fenced one HasFence; an unknown one an error", () => {
    assert.match(renderExplain(world(at(11)), "node-2"), /^Verdict:\s+Fence$/m);
    assert.match(renderExplain(world(at(11)), "node-1"), /^Verdict:\s+Healthy$/m);
    const w = { ...world(at(11)), fences: fenceMap(fence("node-2", { phase: "Fencing", currentLevel: 0 })) };
    const out = renderExplain(w, "node-2");
    assert.match(out, /^Verdict:\s+HasFence$/m);
    assert.match(out, /^NodeFence: node-2 phase Fencing, origin Automatic$/m);
    assert.throws(() => renderExplain(w, "node-9"), /node "node-9" not found/);
  });

  test("a node no policy selects says so", () => {
    // Without a policy the default 40 s heartbeat timeout applies.
    const w = { ...world(at(50)), policies: [] };
    const out = renderExplain(w, "node-2");
    assert.match(out, /^Verdict:\s+NoPolicy$/m);
    assert.match(out, /^Policy:\s+none/m);
  });

  test("storm guard holds are listed", () => {
    const w = world(at(11));
    w.policies = [policy("default", { detection: { heartbeatTimeoutSeconds: 6, fenceAfterSeconds: 4 }, guards: { maxUnhealthyNodes: 0 } })];
    const out = renderExplain({ ...w, nodes: [...w.nodes, node("node-3", { ready: "Unknown", heartbeat: T0 })] }, "node-2");
    assert.match(out, /^Verdict:\s+Held$/m);
    assert.match(out, /HOLD TooManyUnhealthyNodes: /);
  });
});

describe("explain: condition triggers and control-plane nodes (issue 28 items 3 and 4)", () => {
  /** node-1 heartbeats with KernelDeadlock=True, recorded by the operator as held since T0+2; a guarded pod on it. */
  function sickWorld(now: DateTime, labels: Record<string, string> = {}, writer = "node-problem-detector"): FleetInput {
    const w = world(now);
    const n = node("node-1", { heartbeat: now.minus({ seconds: 1 }), labels });
    n.status!.conditions!.push({ type: "KernelDeadlock", status: "True", reason: "DockerHung", lastTransitionTime: T0.toJSDate() });
    writtenBy(n, "KernelDeadlock", writer);
    const p = policy("default", {
      detection: { heartbeatTimeoutSeconds: 6, fenceAfterSeconds: 4, honorPodTolerations: false },
      triggers: {
        nodeConditions: [
          { type: "Ready", status: "False", forSeconds: 300, trustedWriters: ["kubelet"] },
          { type: "KernelDeadlock", status: "True", forSeconds: 60, trustedWriters: ["node-problem-detector"] },
        ],
      },
    });
    p.status = {
      heldConditions: [
        { node: "node-1", type: "KernelDeadlock", status: "True", since: at(2).toUTC().toISO()!, lastTransitionTime: T0.toUTC().toISO()! },
      ],
    };
    // node-1 alone: with the silent node-2 too, two of two nodes unhealthy would be a storm.
    return { ...w, nodes: [n], policies: [p], pods: podsByNode([...w.podList, stsPod("db-1", { node: "node-1" })]) };
  }

  test("each trigger: held since when (the operator's record), how long, how long left — or not held", () => {
    const out = renderExplain(sickWorld(at(42)), "node-1");
    assert.match(out, /^Verdict:\s+Waiting$/m);
    assert.match(
      out,
      /condition triggers: Ready=False for 300 s set by kubelet, KernelDeadlock=True for 60 s set by node-problem-detector/,
    );
    assert.match(out, /^ {2}Ready=False for 300 s: not held \(Ready=True\)$/m);
    assert.match(out, /^ {2}KernelDeadlock=True for 60 s: HELD since 2026-01-01T00:00:02\.000Z \(40 s\); 20 s left$/m);
    assert.match(out, /^Control plane: no /m);
    const r = explainReport(sickWorld(at(42)), "node-1");
    assert.deepEqual(r.triggers, [
      { type: "KernelDeadlock", status: "True", forSeconds: 60, heldSince: "2026-01-01T00:00:02.000Z", heldSeconds: 40, secondsLeft: 20 },
    ]);
    assert.match(renderExplain(sickWorld(at(62)), "node-1"), /^Verdict:\s+Fence$/m);
  });

  test("issue 41 item 4: a condition set by a writer the trigger does not list is shown ignored, and never due", () => {
    const out = renderExplain(sickWorld(at(600), {}, "calico-node"), "node-1");
    assert.match(out, /^Verdict:\s+Healthy$/m);
    assert.match(
      out,
      /^ {2}KernelDeadlock=True for 60 s: held now, IGNORED: set by calico-node, not in trustedWriters \(node-problem-detector\)$/m,
    );
  });

  test("a control-plane node due for fencing: verdict ControlPlane, and why", () => {
    const out = renderExplain(sickWorld(at(62), { "node-role.kubernetes.io/control-plane": "" }), "node-1");
    assert.match(out, /^Verdict:\s+ControlPlane$/m);
    assert.match(out, /^Why:\s+node-1 is not fenced: it is a control-plane node .*quorum/m);
    assert.match(out, /^Control plane: yes: it is a control-plane node \(label node-role\.kubernetes\.io\/control-plane\); never fenced/m);
    assert.equal(
      explainReport(sickWorld(at(62), { "node-role.kubernetes.io/control-plane": "" }), "node-1").controlPlane,
      "it is a control-plane node (label node-role.kubernetes.io/control-plane)",
    );
  });

  test("a NodeFence a condition triggered names its trigger", () => {
    const w = {
      ...sickWorld(at(62)),
      fences: fenceMap(
        fence("node-1", { phase: "Fencing" }, { trigger: { nodeCondition: { type: "KernelDeadlock", status: "True", forSeconds: 60 } } }),
      ),
    };
    const out = renderExplain(w, "node-1");
    assert.match(out, /^ {2}trigger: {6}condition KernelDeadlock=True held for 60 s$/m);
    assert.match(out, /^ {2}KernelDeadlock=True for 60 s: held now \(not counted while its NodeFence runs\)$/m);
  });
});

describe("status", () => {
  test("lists the partitioned node, the NodeFences, the pods with NodeDown and the policies' conditions", () => {
    const w = world(at(20));
    const p = policy("default", { detection: { heartbeatTimeoutSeconds: 6 } });
    p.status = {
      conditions: [
        { type: "Ready", status: "True", reason: "Accepted", message: "", lastTransitionTime: T0.toISO() ?? "" },
        {
          type: "StormGuard",
          status: "True",
          reason: "ZonePartitioned",
          message: "zone a is silent",
          lastTransitionTime: T0.toISO() ?? "",
        },
      ],
      partitionedNodes: ["node-2"],
      activeFences: 1,
    };
    const f = fence("node-2", {
      phase: "Fencing",
      currentLevel: 1,
      attempts: [{ level: 1, agent: "pdu", operation: "off", startTime: at(15).toISO() ?? "", outcome: "InProgress" }],
    });
    f.metadata.creationTimestamp = at(12).toJSDate();
    const out = renderStatus({ now: at(20), nodes: w.nodes, leases: w.leaseMap, pods: w.podList, policies: [p], fences: fenceMap(f) });
    // -o json|yaml: the same answers as data, the level counted from 1 as in the table.
    const data = statusReport({ now: at(20), nodes: w.nodes, leases: w.leaseMap, pods: w.podList, policies: [p], fences: fenceMap(f) });
    const nodes = data.nodes as { name: string; health: string; policy: string }[];
    assert.deepEqual(
      nodes.filter((n) => n.health !== "Healthy").map((n) => [n.name, n.health, n.policy]),
      [["node-2", "Partitioned", "default"]],
    );
    assert.deepEqual(
      (data.nodeFences as { name: string; phase: string; level: number }[]).map((x) => [x.name, x.phase, x.level]),
      [["node-2", "Fencing", 2]],
    );
    const pols = data.fencingPolicies as { name: string; ready: string; stormGuard: string; partitionedNodes: string[] }[];
    assert.deepEqual(
      pols.map((x) => [x.name, x.ready, x.stormGuard, x.partitionedNodes]),
      [["default", "True", "True", ["node-2"]]],
    );
    assert.match(out, /^node-2\s+Partitioned\s+Unknown\s+20s ago\s+14s ago\s+6s\s+default$/m);
    assert.doesNotMatch(out, /^node-1\s/m);
    assert.match(out, /^node-2\s+Fencing\s+Automatic\s+2\s+-\s+8s\s+pdu off InProgress 5s ago$/m);
    assert.match(out, /^default\/cache\s+node-2\s+14s\s+NodePartitioned$/m);
    assert.match(out, /^default\s+True\s+True \(ZonePartitioned\)\s+-\s+no\s+node-2\s+1$/m);
    assert.match(out, /default StormGuard=True ZonePartitioned: zone a is silent/);
  });

  test("all quiet", () => {
    const out = renderStatus({
      now: T0,
      nodes: [node("n", { heartbeat: T0 })],
      leases: leases(),
      pods: [],
      policies: [],
      fences: fenceMap(),
    });
    assert.match(out, /all 1 node\(s\) heartbeating/);
    assert.match(out, /NODEFENCES\nnone/);
    assert.match(out, /FENCINGPOLICIES\nnone/);
  });
});

test("check: a policy naming a missing agent is a problem", () => {
  const p = policy("p", { escalation: [{ agents: [{ name: "ipmi" }] }, { agents: [{ name: "pdu-a" }, { name: "ipmi" }] }] });
  assert.deepEqual(policyProblems(p, new Set(["ipmi"])), ["level 2 names FenceAgent pdu-a, which does not exist"]);
  assert.deepEqual(policyProblems(p, new Set(["ipmi", "pdu-a"])), []);
});

test("retryAfterSeconds: 429 and 503 with Retry-After are retried, others not", () => {
  assert.equal(retryAfterSeconds(new ApiException(429, "", "", { "retry-after": "1" })), 1);
  assert.equal(retryAfterSeconds(new ApiException(429, "", "", {})), 1);
  assert.equal(retryAfterSeconds(new ApiException(429, "", "", { "Retry-After": "60" })), 5);
  assert.equal(retryAfterSeconds(new ApiException(503, "", "", { "retry-after": "2" })), 2);
  assert.equal(retryAfterSeconds(new ApiException(503, "", "", {})), undefined);
  assert.equal(retryAfterSeconds(new ApiException(404, "", "", {})), undefined);
  assert.equal(retryAfterSeconds(new Error("x")), undefined);
});

/** Runs main() with its output captured. */
async function cli(argv: string[]): Promise<{ code: number; out: string; err: string }> {
  let out = "";
  let err = "";
  const code = await main(argv, { out: (s) => (out += s), err: (s) => (err += s) });
  return { code, out, err };
}

describe("command line", () => {
  test("-o takes json or yaml, on status and explain only", async () => {
    const bad = await cli(["status", "-o", "wide"]);
    assert.equal(bad.code, 2);
    assert.match(bad.err, /-o must be json or yaml, not "wide"/);
    const notHere = await cli(["fence", "node-1", "-o", "json"]);
    assert.equal(notHere.code, 2);
    assert.match(notHere.err, /fence does not take --output/);
  });

  test("fence asks first: no terminal without --yes is refused (exit 2), an answer other than yes changes nothing", async () => {
    const dir = mkdtempSync(join(tmpdir(), "stockade-cli-"));
    const server = createServer((req: IncomingMessage, res: ServerResponse) => {
      const url = req.url ?? "";
      res.setHeader("Content-Type", "application/json");
      if (req.method !== "GET") {
        res.statusCode = 500;
        res.end(JSON.stringify({ kind: "Status", message: `unexpected ${req.method} ${url}` }));
        return;
      }
      if (url.startsWith("/api/v1/nodes/node-1"))
        res.end(JSON.stringify({ apiVersion: "v1", kind: "Node", metadata: { name: "node-1", labels: {} } }));
      else if (url.startsWith("/api/v1/nodes/cp-1"))
        res.end(
          JSON.stringify({
            apiVersion: "v1",
            kind: "Node",
            metadata: { name: "cp-1", labels: { "node-role.kubernetes.io/control-plane": "" } },
          }),
        );
      else if (url.startsWith("/api/v1/namespaces/kube-system/pods?"))
        res.end(JSON.stringify({ apiVersion: "v1", kind: "PodList", metadata: {}, items: [] }));
      else if (url.includes("fencingpolicies"))
        res.end(
          JSON.stringify({
            apiVersion: "stockade.io/v1alpha1",
            kind: "FencingPolicyList",
            metadata: {},
            items: [{ apiVersion: "stockade.io/v1alpha1", kind: "FencingPolicy", metadata: { name: "default" }, spec: { paused: true } }],
          }),
        );
      else if (url.includes("nodefences"))
        res.end(JSON.stringify({ apiVersion: "stockade.io/v1alpha1", kind: "NodeFenceList", metadata: {}, items: [] }));
      else {
        res.statusCode = 404;
        res.end(JSON.stringify({ kind: "Status", code: 404, message: `not found ${url}` }));
      }
    });
    await new Promise<void>((ok) => server.listen(0, "127.0.0.1", ok));
    try {
      const port = (server.address() as AddressInfo).port;
      const kubeconfig = join(dir, "config");
      writeFileSync(
        kubeconfig,
        `apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: "http://127.0.0.1:${port}", insecure-skip-tls-verify: true}}]\nusers: [{name: u, user: {}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n`,
      );
      const asked: string[] = [];
      const run = async (argv: string[], answer: string | undefined) => {
        let out = "";
        let err = "";
        const code = await main([...argv, "--kubeconfig", kubeconfig], {
          out: (x) => (out += x),
          err: (x) => (err += x),
          ask: async (q) => {
            asked.push(q);
            return answer;
          },
        });
        return { code, out, err };
      };
      const noTty = await run(["fence", "node-1"], undefined);
      assert.equal(noTty.code, 2, noTty.err);
      assert.match(noTty.err, /stdin is not a terminal.*pass --yes/);
      const no = await run(["fence", "node-1"], "n");
      assert.equal(no.code, 1, no.err);
      assert.match(no.err, /not confirmed: nothing changed/);
      // The question shows the plan, and that a paused policy does not stop a Manual NodeFence.
      assert.match(asked[1]!, /^Fence node node-1:\n/);
      assert.match(
        asked[1]!,
        /FencingPolicy default is paused: that stops automatic fencing only; the operator executes this Manual NodeFence anyway/,
      );
      assert.match(asked[1]!, /create nodefence\.stockade\.io\/node-1 \(origin Manual, policy default/);
      assert.match(asked[1]!, /Proceed\? Type "yes": $/);
      const dry = await run(["fence", "node-1", "--dry-run"], "yes");
      assert.equal(dry.code, 0, dry.err);
      assert.equal(asked.length, 2, "--dry-run asks nothing");
      assert.match(dry.out, /^Would:\n {2}FencingPolicy default is paused/);
      assert.match(dry.out, /\(dry run: nothing changed\)\n$/);
      // A control-plane node is refused before anything is asked (issue 28 item 4), --dry-run or not.
      for (const argv of [
        ["fence", "cp-1", "--yes"],
        ["fence", "cp-1", "--dry-run"],
      ]) {
        const cp = await run(argv, "yes");
        assert.equal(cp.code, 1, cp.err);
        assert.match(
          cp.err,
          /cp-1 is not fenced: it is a control-plane node \(label node-role\.kubernetes\.io\/control-plane\), and losing it may break the control plane's quorum; FencingPolicy default does not set spec\.allowControlPlane\. .*nothing changed/,
        );
      }
      assert.equal(asked.length, 2, "nothing asked for the control-plane node");
      // No write reached the server: it answers 500 to anything but GET, and nothing failed that way.
    } finally {
      server.close();
    }
  });

  test("fence --replace waits until the old NodeFence is gone (its finalizer: the operator's cleanup) before creating the new one", async () => {
    const oldFence = { ...fence("node-1", { phase: "Unfenced" }, { origin: "Manual" }), metadata: { name: "node-1", uid: "old-uid" } };
    let gets = 0;
    let deletedAt = -1;
    const order: string[] = [];
    await withApiserver(
      (req, res) => {
        const url = req.url ?? "";
        res.setHeader("Content-Type", "application/json");
        if (url.startsWith("/api/v1/nodes/node-1"))
          return res.end(JSON.stringify({ apiVersion: "v1", kind: "Node", metadata: { name: "node-1", labels: {} } }));
        // The control-plane check: no etcd mirror pod on node-1.
        if (url.startsWith("/api/v1/namespaces/kube-system/pods?")) return res.end(JSON.stringify({ kind: "PodList", items: [] }));
        if (url.includes("fencingpolicies"))
          return res.end(
            JSON.stringify({
              items: [{ apiVersion: "stockade.io/v1alpha1", kind: "FencingPolicy", metadata: { name: "default" }, spec: {} }],
            }),
          );
        if (url.includes("nodefences") && req.method === "GET") {
          gets++;
          // Still there for three reads after its delete: the finalizer.
          const there = deletedAt < 0 || gets - deletedAt <= 3;
          return res.end(JSON.stringify({ items: there ? [oldFence] : [] }));
        }
        if (url.includes("nodefences") && req.method === "DELETE") {
          order.push("delete");
          deletedAt = gets;
          return res.end(JSON.stringify({ kind: "Status", status: "Success" }));
        }
        if (url.includes("nodefences") && req.method === "POST") {
          order.push(`create after ${gets - deletedAt} reads`);
          res.writeHead(201);
          return res.end(JSON.stringify(fence("node-1")));
        }
        res.writeHead(404);
        res.end(JSON.stringify({ kind: "Status", code: 404, message: `not found ${url}` }));
      },
      async (server) => {
        const r = await cli(["fence", "node-1", "--replace", "--yes", "--kubeconfig", kubeconfig(server)]);
        assert.equal(r.code, 0, r.err);
        assert.deepEqual(order, ["delete", "create after 4 reads"], "created only once a read no longer shows the old one");
        assert.match(r.out, /deleted \(it was Unfenced\)[\s\S]*created \(origin Manual/);
      },
    );
  });

  test("version prints package.json's version and the Node.js running it, without a cluster", async () => {
    const pkg = JSON.parse(readFileSync(new URL("../../package.json", import.meta.url), "utf8")) as { version: string };
    const r = await cli(["version", "--kubeconfig", "/nonexistent"]);
    assert.equal(r.code, 0, r.err);
    assert.equal(r.out, `kubectl-stockade ${pkg.version} (Node.js ${process.versions.node})\n`);
  });

  test("bin/kubectl-stockade on a Node.js older than engines says which version is needed", { skip: !existsSync("/usr/bin/node") }, () => {
    const old = spawnSync("/usr/bin/node", ["--version"], { encoding: "utf8" }).stdout.trim();
    const pkg = JSON.parse(readFileSync(new URL("../../package.json", import.meta.url), "utf8")) as { engines: { node: string } };
    const min = Number(/^>=(\d+)/.exec(pkg.engines.node)?.[1]);
    if (Number(old.slice(1).split(".")[0]) >= min) return; // this machine's /usr/bin/node is new enough: nothing to show
    const r = spawnSync("/usr/bin/node", [fileURLToPath(new URL("../../bin/kubectl-stockade", import.meta.url)), "version"], {
      encoding: "utf8",
    });
    assert.equal(r.status, 1);
    assert.equal(r.stdout, "");
    assert.match(r.stderr, new RegExp(`this is Node\\.js ${old.slice(1).replaceAll(".", "\\.")} `));
    assert.match(r.stderr, new RegExp(`needs Node\\.js ${pkg.engines.node}`));
    assert.match(r.stderr, new RegExp(`Install Node\\.js ${min} from https://nodejs\\.org/`));
  });

  test("--help for the plugin and each command", async () => {
    const top = await cli(["--help"]);
    assert.equal(top.code, 0);
    for (const c of ["status", "fence NODE", "unfence NODE", "explain NODE", "history NODE", "check"])
      assert.match(top.out, new RegExp(`^  ${c}\\s`, "m"));
    for (const c of ["status", "fence", "unfence", "explain", "history", "check", "version"]) {
      const r = await cli([c, "--help"]);
      assert.equal(r.code, 0, c);
      assert.match(r.out, new RegExp(`^Usage: kubectl stockade ${c}`), c);
      if (c !== "version") assert.match(r.out, /--kubeconfig PATH/);
    }
  });

  test("usage errors exit 2 and say what is wrong", async () => {
    const cases: [string[], RegExp][] = [
      [[], /Usage: kubectl stockade COMMAND/],
      [["frob"], /unknown command "frob"/],
      [["fence"], /fence takes exactly one NODE/],
      [["explain", "a", "b"], /explain takes exactly one NODE/],
      [["history"], /history takes exactly one NODE/],
      [["history", "n", "--reason", "x"], /history does not take --reason/],
      [["status", "--reason", "x"], /status does not take --reason/],
      [["check", "--timeout", "0"], /--timeout must be a whole number of seconds from 1 to 600/],
      [["status", "--bogus"], /Unknown option '--bogus'/],
    ];
    for (const [argv, re] of cases) {
      const r = await cli(argv);
      assert.equal(r.code, 2, argv.join(" "));
      assert.match(r.err, re, argv.join(" "));
    }
  });

  test("a missing kubeconfig or context is an error", async () => {
    const r = await cli(["status", "--kubeconfig", "/nonexistent/kubeconfig"]);
    assert.equal(r.code, 1);
    assert.match(r.err, /cannot load the kubeconfig \/nonexistent\/kubeconfig/);
    const file = kubeconfig("http://127.0.0.1:9");
    const c = await cli(["status", "--kubeconfig", file, "--context", "other"]);
    assert.equal(c.code, 1);
    assert.match(c.err, /context "other" is not in the kubeconfig \(contexts: test\)/);
  });

  test("no cluster listening: says it cannot reach the API server", async () => {
    const port = await freePort();
    const r = await cli(["status", "--kubeconfig", kubeconfig(`http://127.0.0.1:${port}`)]);
    assert.equal(r.code, 1);
    assert.match(
      r.err,
      new RegExp(`cannot reach the Kubernetes API server at http://127\\.0\\.0\\.1:${port} to list .*ECONNREFUSED.*--context right\\?`),
    );
  });

  test("no CRDs: says to install them; a 429 is retried", async () => {
    let tooMany = 0;
    let crds = false;
    await withApiserver(
      (req, res) => {
        const url = req.url ?? "";
        res.setHeader("Content-Type", "application/json");
        if (url.startsWith("/api/v1/nodes") && tooMany-- > 0) {
          res.writeHead(429, { "Retry-After": "1" });
          return res.end(JSON.stringify({ kind: "Status", code: 429, message: "storage is (re)initializing" }));
        }
        if ((url.startsWith("/apis/stockade.io/") && !crds) || /^\/api\/v1\/nodes\/[^?]/.test(url)) {
          res.writeHead(404);
          return res.end(JSON.stringify({ kind: "Status", code: 404, message: "the server could not find the requested resource" }));
        }
        res.writeHead(200);
        res.end(JSON.stringify({ items: [] }));
      },
      async (server) => {
        const r = await cli(["status", "--kubeconfig", kubeconfig(server)]);
        assert.equal(r.code, 1, r.err);
        assert.match(
          r.err,
          /the (fencingpolicies|nodefences)\.stockade\.io CRD is not installed .*: install Stockade's CRDs \(kubectl apply -f crds\//,
        );
        const e = await cli(["explain", "node-1", "--kubeconfig", kubeconfig(server)]);
        assert.equal(e.code, 1, e.err);
        assert.match(e.err, /node "node-1" not found/);

        crds = true;
        tooMany = 1;
        const ok = await cli(["status", "--kubeconfig", kubeconfig(server)]);
        assert.equal(ok.code, 0, ok.err);
        assert.equal(tooMany, -1, "the 429 was retried");
        assert.match(ok.out, /all 0 node\(s\) heartbeating/);
      },
    );
  });
});

const episode = (
  uid: string,
  o: { start: number; end?: number; outcome: string; reason: string; origin?: "Manual" | "Automatic" },
): FenceRecord => ({
  apiVersion: "stockade.io/v1alpha1",
  kind: "FenceRecord",
  metadata: { name: `node-7-${uid}`, labels: { "stockade.io/node": "node-7" } },
  spec: { nodeName: "node-7", nodeFence: { name: "node-7", uid }, origin: o.origin ?? "Automatic", policy: "default", reason: o.reason },
  status: {
    outcome: o.outcome as "Released",
    startTime: at(o.start).toISO() ?? "",
    ...(o.end !== undefined ? { endTime: at(o.end).toISO() ?? "", endReason: "UnfenceRequested" } : {}),
    evidence: { method: "PowerOffConfirmed", agents: ["ipmi"] },
    levelNumber: 2,
    levels: [
      { round: 1, level: 1, agents: [{ name: "ipmi", outcome: "TimedOut" }] },
      { round: 1, level: 2, agents: [{ name: "pdu", outcome: "Succeeded" }] },
    ],
    podsReleased: 3,
    volumesReleased: 1,
  },
});

describe("history", () => {
  const older = episode("aaa", { start: 100, end: 500, outcome: "Released", reason: "no heartbeat since 00:01" });
  const newer = episode("bbb", { start: 900, outcome: "Failed", reason: "suspect disk", origin: "Manual" });
  test("every kept episode of the node, newest first: when, origin, outcome, evidence, levels from 1, counts, reason", () => {
    const out = renderHistory({ now: at(1000), node: "node-7", records: [older, newer], fence: undefined });
    const lines = out.split("\n");
    assert.match(lines[0]!, /FENCE HISTORY OF node-7: 2 episode\(s\), newest first/);
    assert.match(lines[1]!, /^STARTED\s+ENDED\s+ORIGIN\s+OUTCOME\s+EVIDENCE\s+LEVELS\s+PODS\s+VOLUMES\s+REASON$/);
    assert.match(lines[2]!, /Manual\s+Failed\s+PowerOffConfirmed\s+1: ipmi TimedOut; 2: pdu Succeeded\s+3\s+1\s+suspect disk/);
    assert.match(lines[3]!, /\(UnfenceRequested\)\s+Automatic\s+Released\s+PowerOffConfirmed .*no heartbeat since 00:01/);
    assert.equal(describeLevels([{ round: 2, level: 1, agents: [{ name: "ipmi", outcome: "Succeeded" }] }]), "round 2, 1: ipmi Succeeded");
  });
  test("a NodeFence started without a record yet is said; no record at all is said", () => {
    const f = fence("node-7", { phase: "Fencing" });
    f.metadata.uid = "ccc";
    const out = renderHistory({ now: at(1000), node: "node-7", records: [], fence: f });
    assert.match(out, /none kept/);
    assert.match(out, /NodeFence node-7 \(phase Fencing\) has no FenceRecord yet/);
    f.metadata.uid = "aaa";
    assert.doesNotMatch(renderHistory({ now: at(1000), node: "node-7", records: [older], fence: f }), /no FenceRecord yet/);
  });
  test("-o: historyReport gives every episode as data, newest first", () => {
    const r = historyReport({ now: at(1000), node: "node-7", records: [older, newer], fence: undefined }) as {
      episodes: { outcome: string; level: number; ended: string | null; origin: string; podsReleased: number }[];
    };
    assert.deepEqual(
      r.episodes.map((e) => [e.outcome, e.origin, e.level, e.ended !== null, e.podsReleased]),
      [
        ["Failed", "Manual", 2, false, 3],
        ["Released", "Automatic", 2, true, 3],
      ],
    );
  });
  test("history NODE -o json lists the node's FenceRecords by its label and keeps only that node's", async () => {
    const other = { ...episode("ddd", { start: 1, outcome: "Released", reason: "x" }), spec: { ...older.spec, nodeName: "node-77" } };
    const seen: string[] = [];
    await withApiserver(
      (req, res) => {
        const url = req.url ?? "";
        seen.push(url);
        res.setHeader("Content-Type", "application/json");
        res.writeHead(200);
        if (url.startsWith("/apis/stockade.io/v1alpha1/fencerecords")) return res.end(JSON.stringify({ items: [older, other, newer] }));
        res.end(JSON.stringify({ items: [] }));
      },
      async (server) => {
        const r = await cli(["history", "node-7", "-o", "json", "--kubeconfig", kubeconfig(server)]);
        assert.equal(r.code, 0, r.err);
        const data = JSON.parse(r.out) as { node: string; episodes: { record: string }[] };
        assert.equal(data.node, "node-7");
        assert.deepEqual(
          data.episodes.map((e) => e.record),
          ["node-7-bbb", "node-7-aaa"],
        );
        assert.ok(
          seen.some(
            (u) => u.startsWith("/apis/stockade.io/v1alpha1/fencerecords") && u.includes("labelSelector=stockade.io%2Fnode%3Dnode-7"),
          ),
          seen.join(" "),
        );
      },
    );
  });
});

/** A loopback port nobody listens on. */
async function freePort(): Promise<number> {
  const s = createServer();
  await new Promise<void>((resolve) => s.listen(0, "127.0.0.1", resolve));
  const port = (s.address() as AddressInfo).port;
  await new Promise((resolve) => s.close(resolve));
  return port;
}

function kubeconfig(server: string): string {
  const file = join(mkdtempSync(join(tmpdir(), "stockade-kubectl-plugin-")), "kubeconfig");
  writeFileSync(
    file,
    JSON.stringify({
      apiVersion: "v1",
      kind: "Config",
      clusters: [{ name: "test", cluster: { server, "insecure-skip-tls-verify": true } }],
      users: [{ name: "test", user: { token: "t" } }],
      contexts: [{ name: "test", context: { cluster: "test", user: "test" } }],
      "current-context": "test",
    }),
  );
  return file;
}

async function withApiserver(handler: (req: IncomingMessage, res: ServerResponse) => void, fn: (url: string) => Promise<void>) {
  const server = createServer(handler);
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  try {
    await fn(`http://127.0.0.1:${(server.address() as AddressInfo).port}`);
  } finally {
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  }
}

test("check: volume-safety warnings — webhooks missing, without a CA, failing open; the force-detach flag", () => {
  const hook = (caBundle?: string, failurePolicy = "Fail") => ({
    name: "x",
    clientConfig: { caBundle },
    failurePolicy,
    sideEffects: "None",
    admissionReviewVersions: ["v1"],
  });
  const good = { mutating: { webhooks: [hook("Q0E=")] }, validating: { webhooks: [hook("Q0E=")] } };
  const kcmOk = [["kube-controller-manager", "--disable-force-detach-on-timeout=true"]];
  assert.deepEqual(volumeSafetyWarnings(good, kcmOk), []);
  assert.deepEqual(volumeSafetyWarnings(good, [["kube-controller-manager", "--disable-force-detach-on-timeout"]]), []);
  const none = volumeSafetyWarnings({}, kcmOk);
  assert.equal(none.length, 2);
  assert.match(none[0]!, /stockade-claim-lock is not installed: pods that use ReadWriteOnce claims start without the claim lock/);
  assert.match(volumeSafetyWarnings({ ...good, mutating: { webhooks: [hook(undefined)] } }, kcmOk)[0]!, /no caBundle yet/);
  assert.match(volumeSafetyWarnings({ ...good, validating: { webhooks: [hook("Q0E=", "Ignore")] } }, kcmOk)[0]!, /failurePolicy Ignore/);
  assert.match(volumeSafetyWarnings(good, [["kube-controller-manager", "--v=2"]])[0]!, /runs without --disable-force-detach-on-timeout/);
  assert.match(volumeSafetyWarnings(good, [["kube-controller-manager", "--disable-force-detach-on-timeout=false"]])[0]!, /runs without/);
  assert.match(volumeSafetyWarnings(good, [])[0]!, /flags are not visible here/);
  assert.match(volumeSafetyWarnings(good, undefined)[0]!, /cannot read kube-system pods/);
});
