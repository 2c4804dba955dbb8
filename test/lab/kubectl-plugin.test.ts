// The kubectl plugin on a lab, run as users run it: `node bin/kubectl-stockade …` with KUBECONFIG set, and
// `kubectl stockade …` with bin/ on PATH. The operator is started only for the last test; until then the
// plugin's own reads, writes and live status queries are all that touch the cluster and the BMCs.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { dumpYaml, loadYaml } from "@kubernetes/client-node";
import { promisify } from "node:util";
import { waitFor } from "../../lab/health.ts";
import { repoRoot } from "../../lab/bins.ts";
import { GROUP, VERSION, type NodeFence } from "../../src/api/v1alpha1.ts";
import { Bed, NS } from "../../lab/bed.ts";

const run = promisify(execFile);

interface Result {
  code: number;
  stdout: string;
  stderr: string;
}

describe("kubectl-stockade on the lab", () => {
  let bed: Bed;
  before(async () => {
    bed = await Bed.up({ nodes: 3, name: "kubectl", runtime: "kwok" });
    await bed.policy("default", {});
  });
  after(async () => {
    await bed?.down();
  });

  /** Runs the plugin: `node bin/kubectl-stockade ARGS`, or `kubectl stockade ARGS` found through PATH. */
  async function plugin(args: string[], o: { viaKubectl?: boolean; kubeconfig?: string } = {}): Promise<Result> {
    const env = {
      ...bed.lab.env,
      ...(o.kubeconfig ? { KUBECONFIG: o.kubeconfig } : {}),
      // bin/ for kubectl's plugin discovery; this Node first for the script's `#!/usr/bin/env node`.
      PATH: `${join(repoRoot, "bin")}:${dirname(process.execPath)}:${bed.lab.env.PATH}`,
    };
    const [cmd, argv] = o.viaKubectl
      ? ["kubectl", ["stockade", ...args]]
      : [process.execPath, [join(repoRoot, "bin/kubectl-stockade"), ...args]];
    try {
      const r = await run(cmd, argv, { env, cwd: repoRoot, timeout: 120_000 });
      return { code: 0, stdout: r.stdout, stderr: r.stderr };
    } catch (err) {
      const e = err as { code?: number; stdout?: string; stderr?: string };
      if (typeof e.code !== "number") throw err;
      return { code: e.code, stdout: e.stdout ?? "", stderr: e.stderr ?? "" };
    }
  }

  const show = (r: Result) => `exit ${r.code}\n--- stdout\n${r.stdout}\n--- stderr\n${r.stderr}`;
  const powers = () => bed.lab.nodes().map((n) => bed.lab.machine(n).power);

  test("check: every node's BMC answers a status query through lab-ipmi (via kubectl stockade)", async () => {
    const r = await plugin(["check"], { viaKubectl: true });
    assert.equal(r.code, 0, show(r));
    for (const n of bed.lab.nodes()) assert.match(r.stdout, new RegExp(`lab-ipmi\\s+${n}\\s+OK power=on`), show(r));
    assert.match(r.stdout, /default\s+OK\s+selects 3 node\(s\)/, show(r));
    assert.match(r.stdout, /lab-fence-ipmilan\s+fenceAgent fence_ipmilan\s+OK\s+Unused/, show(r));
    assert.match(r.stdout, /all checks passed/);
    assert.deepEqual(powers(), ["on", "on", "on"]);
  });

  test("check: an unreachable BMC is reported for its node, exits 1, and nothing is powered off", async () => {
    await bed.lab.setBmcReachable("node-3", false);
    try {
      const r = await plugin(["check"]);
      assert.equal(r.code, 1, show(r));
      assert.match(r.stdout, /lab-ipmi\s+node-3\s+FAILED status query of node-3 (failed|timed out)/, show(r));
      assert.match(r.stdout, /lab-ipmi\s+node-1\s+OK power=on/, show(r));
      assert.match(r.stdout, /1 check\(s\) failed/, show(r));
      const one = await plugin(["check", "--node", "node-1"]);
      assert.equal(one.code, 0, show(one));
      assert.doesNotMatch(one.stdout, /node-3\s+(OK|FAILED)/, show(one));
    } finally {
      await bed.lab.setBmcReachable("node-3", true);
    }
    assert.deepEqual(powers(), ["on", "on", "on"]);
  });

  test("explain: a healthy node is Healthy; a missing node is an error", async () => {
    const r = await plugin(["explain", "node-1"]);
    assert.equal(r.code, 0, show(r));
    assert.match(r.stdout, /^Verdict:\s+Healthy$/m, show(r));
    assert.match(r.stdout, /^Policy:\s+default$/m, show(r));
    const missing = await plugin(["explain", "node-9"]);
    assert.equal(missing.code, 1, show(missing));
    assert.match(missing.stderr, /node "node-9" not found/);
  });

  test("fence / unfence: a Manual NodeFence, refused while active, replaced only with --replace once ended", async () => {
    // --dry-run says what would happen and creates nothing; without --yes and no terminal it refuses.
    const dry = await plugin(["fence", "node-3", "--dry-run"]);
    assert.equal(dry.code, 0, show(dry));
    assert.match(dry.stdout, /^ {2}create nodefence\.stockade\.io\/node-3 \(origin Manual, policy default, /m, show(dry));
    assert.match(dry.stdout, /^\(dry run: nothing changed\)$/m, show(dry));
    const noTty = await plugin(["fence", "node-3"]);
    assert.equal(noTty.code, 2, show(noTty));
    assert.match(noTty.stderr, /stdin is not a terminal.*pass --yes/, show(noTty));
    assert.equal(await bed.getFence("node-3"), undefined);

    const r = await plugin(["fence", "node-3", "--yes", "--reason", "suspect disk controller"]);
    assert.equal(r.code, 0, show(r));
    assert.match(
      r.stdout,
      /^nodefence\.stockade\.io\/node-3 created \(origin Manual, policy default, the one that selects the node\)$/m,
      show(r),
    );
    const f = await bed.getFence("node-3");
    assert.equal(f?.spec.origin, "Manual");
    assert.equal(f?.spec.reason, "suspect disk controller");

    const again = await plugin(["fence", "node-3", "--yes"]);
    assert.equal(again.code, 1, show(again));
    assert.match(again.stderr, /already exists and is active/);

    const noTtyUnfence = await plugin(["unfence", "node-3"]);
    assert.equal(noTtyUnfence.code, 2, show(noTtyUnfence));
    assert.notEqual((await bed.getFence("node-3"))?.spec.unfence, true);
    const u = await plugin(["unfence", "node-3", "--yes"], { viaKubectl: true });
    assert.equal(u.code, 0, show(u));
    assert.equal((await bed.getFence("node-3"))?.spec.unfence, true);

    const s = await plugin(["status"]);
    assert.equal(s.code, 0, show(s));
    assert.match(s.stdout, /^node-3\s+\(new\)\s+Manual\s/m, show(s));
    assert.match(s.stdout, /unfence requested: node-3/, show(s));
    assert.match(s.stdout, /^default\s+/m, show(s));

    // As if the operator had finished the episode: the record stays until --replace.
    const cur = (await bed.getFence("node-3"))!;
    await bed.custom.replaceClusterCustomObjectStatus({
      group: GROUP,
      version: VERSION,
      plural: "nodefences",
      name: "node-3",
      body: { ...cur, status: { phase: "Unfenced" } } satisfies NodeFence,
    });
    const ended = await plugin(["fence", "node-3", "--yes"]);
    assert.equal(ended.code, 1, show(ended));
    assert.match(ended.stderr, /ended.*--replace/);
    const replaced = await plugin(["fence", "node-3", "--yes", "--replace", "--policy", "default"]);
    assert.equal(replaced.code, 0, show(replaced));
    const g = await bed.getFence("node-3");
    assert.notEqual(g?.metadata.uid, cur.metadata.uid);
    assert.equal(g?.spec.policy, "default");
    assert.equal(g?.spec.unfence ?? false, false);

    const noPolicy = await plugin(["fence", "node-1", "--policy", "nope"]);
    assert.equal(noPolicy.code, 1, show(noPolicy));
    assert.match(noPolicy.stderr, /FencingPolicy "nope" not found/);
    const noNode = await plugin(["fence", "node-9"]);
    assert.equal(noNode.code, 1, show(noNode));
    assert.match(noNode.stderr, /node "node-9" not found/);
    assert.equal(await bed.getFence("node-1"), undefined);

    // Out of the operator's way for the next test.
    await bed.kubectl("delete", "nodefence", "node-3", "--wait");
    assert.deepEqual(powers(), ["on", "on", "on"]);
  });

  test("roles: a user bound only to stockade-viewer reads everything the plugin shows; stockade-fence-admin fences and unfences, not confirms", async () => {
    await bed.kubectl("apply", "-f", join(repoRoot, "manifests/07-user-roles.yaml"));
    /** A kubeconfig that impersonates USER (kubeconfig's `as`), as a user bound to ROLE alone. */
    const asUser = async (user: string, role: string) => {
      await bed.kubectl("create", "clusterrolebinding", `${user}-only`, `--clusterrole=${role}`, `--user=${user}`);
      const cfg = loadYaml<{ users: { user: Record<string, unknown> }[] }>(readFileSync(bed.lab.env.KUBECONFIG!, "utf8"));
      for (const u of cfg.users) u.user.as = user;
      const path = join(bed.lab.dir, `kubeconfig-${user}`);
      writeFileSync(path, dumpYaml(cfg));
      return path;
    };
    const viewer = await asUser("vera", "stockade-viewer");
    for (const args of [["status"], ["explain", "node-1"], ["history", "node-1"], ["fence", "node-2", "--dry-run"]]) {
      const r = await plugin(args, { kubeconfig: viewer });
      assert.equal(r.code, 0, `${args.join(" ")} as stockade-viewer: ${show(r)}`);
    }
    const json = await plugin(["status", "-o", "json"], { kubeconfig: viewer });
    assert.equal(json.code, 0, show(json));
    assert.deepEqual(
      (JSON.parse(json.stdout) as { nodes: { name: string }[] }).nodes.map((n) => n.name),
      ["node-1", "node-2", "node-3"],
    );
    const denied = await plugin(["fence", "node-2", "--yes"], { kubeconfig: viewer });
    assert.equal(denied.code, 1, show(denied));
    assert.match(denied.stderr, /forbidden|Forbidden/, show(denied));
    assert.equal(await bed.getFence("node-2"), undefined);

    const admin = await asUser("ada", "stockade-fence-admin");
    for (const args of [
      ["status"],
      ["explain", "node-2"],
      ["history", "node-2"],
      ["fence", "node-2", "--yes"],
      ["unfence", "node-2", "--yes"],
    ]) {
      const r = await plugin(args, { kubeconfig: admin });
      assert.equal(r.code, 0, `${args.join(" ")} as stockade-fence-admin: ${show(r)}`);
    }
    assert.equal((await bed.getFence("node-2"))?.spec.unfence, true);
    const noConfirm = await plugin(["confirm", "node-2", "--yes"], { kubeconfig: admin });
    assert.equal(noConfirm.code, 1, show(noConfirm));
    assert.equal((await bed.getFence("node-2"))?.metadata.annotations?.["stockade.io/confirmed-off"], undefined);

    await bed.kubectl("delete", "nodefence", "node-2", "--wait");
    assert.deepEqual(powers(), ["on", "on", "on"]);
  });

  test("a crashed node: explain says Waiting/Fence with its guarded pod; the operator fences it; status shows it all", async () => {
    const pods = await bed.statefulSet("db", 3);
    const victim = pods.find((p) => p.spec?.nodeName === "node-2")!;
    const victimName = `${NS}/${victim.metadata!.name}`;
    // An unguarded pod that tolerates the partition: it keeps its NodeDown condition after the fence.
    await bed.lab.core.createNamespacedPod({
      namespace: NS,
      body: {
        metadata: { name: "plain", labels: { "stockade.io/guarded": "false" } },
        spec: {
          nodeName: "node-2",
          tolerations: [{ key: "node.kubernetes.io/unreachable", operator: "Exists", effect: "NoExecute" }],
          containers: [{ name: "app", image: "registry.k8s.io/pause:3.10" }],
        },
      },
    });
    await waitFor("pod plain Running", async () => {
      const p = await bed.lab.core.readNamespacedPod({ name: "plain", namespace: NS });
      return p.status?.phase === "Running";
    });

    await bed.lab.crash("node-2");
    const seen = new Set<string>();
    const explained = await waitFor(
      "explain node-2 to say Waiting or Fence",
      async () => {
        const r = await plugin(["explain", "node-2"]);
        assert.equal(r.code, 0, show(r));
        const verdict = /^Verdict:\s+(\w+)$/m.exec(r.stdout)?.[1] ?? "";
        seen.add(verdict);
        return verdict === "Waiting" || verdict === "Fence" ? r : undefined;
      },
      { timeoutMs: 60_000, intervalMs: 500 },
    );
    const out = explained.stdout;
    assert.match(out, /^Policy:\s+default$/m, out);
    assert.match(out, /state:\s+Partitioned/, out);
    assert.match(out, new RegExp(`^${victimName}\\s+yes\\s+owned by a StatefulSet\\s+4s \\(fenceAfterSeconds\\)$`, "m"), out);
    assert.match(out, /^default\/plain\s+no\s+opted out by label stockade\.io\/guarded=false/m, out);
    assert.match(out, /no hold: fencing is not held back/, out);
    assert.match(out, /partitioned nodes: node-2/, out);
    assert.ok(![...seen].some((v) => v === "HasFence"), `no NodeFence without the operator (saw ${[...seen].join(", ")})`);
    const s = await plugin(["status"]);
    assert.match(s.stdout, /^node-2\s+Partitioned\s+Unknown\s/m, show(s));
    assert.equal(await bed.getFence("node-2"), undefined);
    assert.equal(bed.lab.machine("node-2").power, "on");

    await bed.startOperator();
    await bed.waitForFence("node-2", (f) => f.status?.phase === "Released", "Released");
    const r = await plugin(["status"], { viaKubectl: true });
    assert.equal(r.code, 0, show(r));
    assert.match(r.stdout, /^node-2\s+Released\s+Automatic\s+1\s+PowerOffConfirmed\s+\S+\s+lab-ipmi \w+ Succeeded/m, show(r));
    assert.match(r.stdout, /^default\/plain\s+node-2\s+\S+\s+NodePartitioned$/m, show(r));
    assert.match(r.stdout, /^default\s+True\s+False\s+False\s+no\s/m, show(r));
    const e = await plugin(["explain", "node-2"]);
    assert.match(e.stdout, /^Verdict:\s+HasFence$/m, show(e));
    assert.match(e.stdout, /^NodeFence: node-2 phase Released, origin Automatic$/m, show(e));
    // Its fence history: this episode, newest first.
    const h = await waitFor("history node-2 to show the episode Released", async () => {
      const r = await plugin(["history", "node-2", "-o", "json"]);
      assert.equal(r.code, 0, show(r));
      const data = JSON.parse(r.stdout) as { episodes: { origin: string; outcome: string; evidence: { method: string } | null }[] };
      return data.episodes[0]?.outcome === "Released" ? data : undefined;
    });
    assert.deepEqual([h.episodes[0]?.origin, h.episodes[0]?.evidence?.method], ["Automatic", "PowerOffConfirmed"]);
    const table = await plugin(["history", "node-2"], { viaKubectl: true });
    assert.match(table.stdout, /^STARTED\s+ENDED\s+ORIGIN\s+OUTCOME/m, show(table));
    assert.match(table.stdout, /\s-\s+Automatic\s+Released\s+PowerOffConfirmed\s+1: lab-ipmi Succeeded\s+[1-9]\d*\s/m, show(table));
  });
});
