// The operator image as users get it: built by `npm run image` (lab/operator-image.ts: our own dockerd, the
// repository's Dockerfile, no registry) and run the way manifests/03-deployment.yaml runs it — read-only root,
// uid 65532. Inside it: `--help`, `ipmitool -V`, and test/lab/image-check.mjs, which loads every operator module
// and drives each cloud SDK (EC2, Azure compute + identity, Google compute) to a request against a closed port,
// so a file the image's pruning removed that a fence needs fails here. The tar imports with `ctr`.
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { promisify } from "node:util";
import { repoRoot } from "../../lab/bins.ts";
import { importImages } from "../../lab/images.ts";
import { deploymentImage, docker, dockerDir, ensureDockerd, operatorImage } from "../../lab/operator-image.ts";

const run = promisify(execFile);
const log = (m: string) => console.log(`# ${m}`);
const maxBytes = 250e6;
const runArgs = ["run", "--rm", "--network", "none", "--read-only", "--user", "65532", "--cap-drop", "ALL"];

test(
  "the operator image: ≤ 250 MB, runs read-only as 65532, every agent's modules and SDKs load in it",
  { timeout: 20 * 60_000 },
  async (t) => {
    const started = Date.now();
    const img = await operatorImage({ log });
    log(`image ${img.refs.join(", ")} → ${img.tar} in ${((Date.now() - started) / 1000).toFixed(1)} s`);
    assert.equal(img.ref, deploymentImage(readFileSync(join(repoRoot, "manifests/03-deployment.yaml"), "utf8")));
    assert.ok(existsSync(img.tar));

    const host = await ensureDockerd();
    const ref = img.refs[1]!;
    // A cached tar outlives a wiped dockerd: loading it back is the tar's own check.
    if (
      !(await docker(host, ["image", "inspect", ref]).then(
        () => true,
        () => false,
      ))
    )
      await docker(host, ["load", "-i", img.tar]);
    const [size, user] = (await docker(host, ["image", "inspect", "-f", "{{.Size}} {{.Config.User}}", ref])).trim().split(" ");
    log(`size ${(Number(size) / 1e6).toFixed(1)} MB, user ${user}`);
    assert.ok(Number(size) <= maxBytes, `the image is ${(Number(size) / 1e6).toFixed(1)} MB, more than ${maxBytes / 1e6} MB`);
    assert.equal(user, "65532:65532");

    await t.test("--help", async () => {
      const out = await docker(host, [...runArgs, ref, "--help"]);
      assert.match(out, /^Usage: /m);
      assert.match(out, /--kubeconfig/);
    });

    await t.test("ipmitool -V", async () => {
      const out = await docker(host, [...runArgs, "--entrypoint", "ipmitool", ref, "-V"]);
      assert.match(out, /^ipmitool version 1\.8\.\d+/);
    });

    await t.test("every operator module loads; each cloud SDK reaches a request", async () => {
      const script = join(repoRoot, "test/lab/image-check.mjs");
      const out = await docker(host, [
        ...runArgs,
        "-v",
        `${script}:/app/image-check.mjs:ro`,
        "--entrypoint",
        "node",
        ref,
        "/app/image-check.mjs",
      ]);
      const r = JSON.parse(out.trim().split("\n").at(-1)!) as { modules: number; agents: string[]; sdk: Record<string, string> };
      log(`${r.modules} modules; ${JSON.stringify(r.sdk)}`);
      assert.ok(r.modules > 50, `only ${r.modules} modules in dist`);
      for (const a of ["agents/ipmi.js", "agents/redfish.js", "agents/aws.js", "agents/azure.js", "agents/gcp.js", "agents/fence-agent.js"])
        assert.ok(r.agents.includes(a), a);
      assert.deepEqual(Object.keys(r.sdk).sort(), [
        "azure.defaultCredential",
        "azure.virtualMachines.get",
        "ec2.DescribeInstances",
        "ec2.defaultCredentialChain",
        "gcp.instances.get",
      ]);
      assert.match(r.sdk["ec2.DescribeInstances"]!, /ECONNREFUSED/);
      assert.match(r.sdk["gcp.instances.get"]!, /ECONNREFUSED/);
    });

    await t.test("the tar imports with ctr, under both names", async () => {
      // Into our dockerd's own containerd, in a namespace of this test's, removed after.
      const address = join(dockerDir(), "exec/containerd/containerd.sock");
      const ns = `stockade-image-test-${process.pid}`;
      const ctr = async (args: string[]) => (await run("ctr", ["--address", address, "--namespace", ns, ...args])).stdout;
      try {
        const t0 = Date.now();
        await importImages("ctr", address, [img.tar], { namespace: ns });
        log(`ctr images import: ${((Date.now() - t0) / 1000).toFixed(1)} s`);
        const names = (await ctr(["images", "ls", "-q"])).trim().split("\n");
        for (const r of img.refs)
          assert.ok(
            names.some((n) => n === r || n === `docker.io/${r}`),
            `${r} not among ${names.join(", ")}`,
          );
      } finally {
        const names = (await ctr(["images", "ls", "-q"]).catch(() => "")).trim().split("\n").filter(Boolean);
        if (names.length) await ctr(["images", "rm", ...names]).catch(() => {});
        await ctr(["namespaces", "rm", ns]).catch(() => {});
      }
    });
  },
);
