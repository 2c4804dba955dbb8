// The operator image as users get it: built by `npm run image` (lab/operator-image.ts: our own dockerd, the
// repository's Dockerfile, no registry) and run the way manifests/03-deployment.yaml runs it — read-only root,
// uid 65532. Inside it: `--help`, `ipmitool -V`, ipmitool powering off a BMC (ipmi_sim) on loopback, and test/lab/image-check.mjs, which loads every operator module
// and drives each cloud SDK (EC2, Azure compute + identity, Google compute) to a request against a closed port,
// so a file the image's pruning removed that a fence needs fails here. The tar imports with `ctr`.
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFile, spawn, type ChildProcess } from "node:child_process";
import { randomBytes } from "node:crypto";
import { createSocket } from "node:dgram";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { promisify } from "node:util";
import { repoRoot } from "../../lab/bins.ts";
import { importImages } from "../../lab/images.ts";
import { deploymentImage, docker, dockerDir, ensureDockerd, operatorImage } from "../../lab/operator-image.ts";

const run = promisify(execFile);
const log = (m: string) => console.log(`# ${m}`);
const maxBytes = 250e6;
/** An OpenIPMI ipmi_sim on a free loopback UDP port whose chassis power is a file (lab/bmc.ts has the lab's). */
async function startBmc(): Promise<{ port: number; password: string; dir: string; proc: ChildProcess }> {
  const dir = mkdtempSync(join(tmpdir(), "stockade-image-bmc-"));
  const port = await new Promise<number>((resolve) => {
    const s = createSocket("udp4").bind(0, "127.0.0.1", () => {
      const p = s.address().port;
      s.close(() => resolve(p));
    });
  });
  const password = randomBytes(9).toString("base64url");
  const power = join(dir, "power");
  writeFileSync(power, "1");
  const hook = join(dir, "chassis.sh");
  writeFileSync(
    hook,
    `#!/bin/sh\ncase "$1" in\n  get) echo "power:$(cat ${power})" ;;\n  set) [ "$2" = power ] && echo "$3" > ${power} ;;\nesac\n`,
    { mode: 0o755 },
  );
  writeFileSync(
    join(dir, "lan.conf"),
    `name "image-test"\nset_working_mc 0x20\n  startlan 1\n    addr 127.0.0.1 ${port}\n    priv_limit admin\n${["callback", "user", "operator", "admin"].map((l) => `    allowed_auths_${l} none md2 md5 straight\n`).join("")}    guid ${randomBytes(16).toString("hex")}\n  endlan\n  chassis_control "${hook}"\n  user 2 true "fencer" "${password}" admin 10 none md2 md5 straight\n`,
  );
  writeFileSync(
    join(dir, "bmc.emu"),
    "mc_setbmc 0x20\nmc_add 0x20 0 no-device-sdrs 0x23 9 8 0x9f 0x1291 0xf02 persist_sdr\nmc_enable 0x20\n",
  );
  mkdirSync(join(dir, "state"));
  const proc = spawn("ipmi_sim", ["-c", join(dir, "lan.conf"), "-f", join(dir, "bmc.emu"), "-s", join(dir, "state"), "-n", "--nopersist"], {
    cwd: dir,
    stdio: "ignore",
  });
  // Up once the host's ipmitool gets an answer.
  for (let i = 0; ; i++) {
    const ok = await run("ipmitool", [
      "-I",
      "lanplus",
      "-H",
      "127.0.0.1",
      "-p",
      String(port),
      "-U",
      "fencer",
      "-P",
      password,
      "-C",
      "3",
      "-N",
      "1",
      "-R",
      "1",
      "chassis",
      "power",
      "status",
    ]).then(
      () => true,
      () => false,
    );
    if (ok) break;
    if (i >= 20) {
      proc.kill("SIGTERM");
      throw new Error(`ipmi_sim did not answer on 127.0.0.1:${port}`);
    }
    await sleep(250);
  }
  return { port, password, dir, proc };
}

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

    await t.test("ipmitool in the image powers a BMC on loopback (IPMI 2.0 lanplus, as the ipmi agent calls it)", async () => {
      const bmc = await startBmc();
      try {
        // The ipmi agent's arguments (src/agents/ipmi.ts), the password in IPMI_PASSWORD as it passes it.
        const ipmi = (command: string[]) =>
          docker(host, [
            ...runArgs.map((a) => (a === "none" ? "host" : a)),
            "-e",
            `IPMI_PASSWORD=${bmc.password}`,
            "--entrypoint",
            "ipmitool",
            ref,
            ...[
              "-I",
              "lanplus",
              "-H",
              "127.0.0.1",
              "-p",
              String(bmc.port),
              "-U",
              "fencer",
              "-C",
              "3",
              "-L",
              "ADMINISTRATOR",
              "-E",
              "-R",
              "2",
              "-N",
              "2",
            ],
            ...command,
          ]);
        assert.match(await ipmi(["chassis", "power", "status"]), /Chassis Power is on/);
        assert.match(await ipmi(["chassis", "power", "off"]), /Chassis Power Control: Down\/Off/);
        assert.match(await ipmi(["chassis", "power", "status"]), /Chassis Power is off/);
      } finally {
        bmc.proc.kill("SIGTERM");
        rmSync(bmc.dir, { recursive: true, force: true });
      }
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
