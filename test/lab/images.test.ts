// The lab's images really run: built by lab/images.ts, imported into a throwaway containerd (Debian's
// 1.6, its own root/state/sockets/runc root under a temp dir) with `ctr images import`, listed, and run
// with runc: busybox prints, each program image carries its binary and a shell, etcd's binaries
// answer, and the pause image holds as PID 1 until SIGTERM, then exits 0. Nothing is ever pulled: the
// references name a registry host that does not resolve.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { execFile, spawn } from "node:child_process";
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { promisify } from "node:util";
import { buildLabImages, imageRefs, importImages, inspectLayout, type LabImages } from "../../lab/images.ts";
import { startDetached, stop, type ProcRef } from "../../lab/processes.ts";

const run = promisify(execFile);
const log = (m: string) => console.log(`# ${m}`);

/** A containerd 1.6 config (version 2) whose every path is under `dir` (../shared/notes/real-nodes.md). */
function containerdConfig(dir: string, pauseRef: string): string {
  const cri = 'plugins."io.containerd.grpc.v1.cri"';
  const q = JSON.stringify;
  return `version = 2
root = ${q(join(dir, "root"))}
state = ${q(join(dir, "state"))}
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]

[grpc]
  address = ${q(join(dir, "containerd.sock"))}
[ttrpc]
  address = ${q(join(dir, "containerd.sock.ttrpc"))}

[plugins."io.containerd.internal.v1.opt"]
  path = ${q(join(dir, "opt"))}

[${cri}]
  sandbox_image = ${q(pauseRef)}
  restrict_oom_score_adj = true
  disable_apparmor = true
  netns_mounts_under_state_dir = true
  [${cri}.containerd]
    default_runtime_name = "runc"
    [${cri}.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [${cri}.containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = ${q(join(dir, "runc"))}
  [${cri}.cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = ${q(join(dir, "cni"))}
`;
}

/** Mount points at or under `dir`, deepest first (mountinfo escapes spaces and such as \\ooo). */
function mountsUnder(dir: string): string[] {
  const unescape = (s: string) => s.replace(/\\([0-7]{3})/g, (_, o: string) => String.fromCharCode(parseInt(o, 8)));
  return readFileSync("/proc/self/mountinfo", "utf8")
    .split("\n")
    .map((l) => unescape(l.split(" ")[4] ?? ""))
    .filter((m) => m === dir || m.startsWith(`${dir}/`))
    .sort((a, b) => b.split("/").length - a.split("/").length || b.length - a.length);
}

/** Pids whose command line names `needle` (the shims of our containerd name its socket). */
function pidsMentioning(needle: string): number[] {
  const out: number[] = [];
  for (const p of readdirSync("/proc")) {
    if (!/^\d+$/.test(p) || Number(p) === process.pid) continue;
    try {
      if (readFileSync(`/proc/${p}/cmdline`, "utf8").split("\0").includes(needle)) out.push(Number(p));
    } catch {
      // gone meanwhile
    }
  }
  return out;
}

describe("images without a registry, in a real containerd", { timeout: 300_000 }, () => {
  const dir = mkdtempSync(join(tmpdir(), "stockade-images-"));
  const sock = join(dir, "containerd.sock");
  let containerd: ProcRef | undefined;
  let images: LabImages;
  const ctr = (...args: string[]) => run("ctr", ["--address", sock, "--namespace", "k8s.io", ...args], { timeout: 60_000 });
  /** `ctr run --rm` of a fresh container; resolves with its output (ctr exits with the task's code). */
  const ctrRun = async (ref: string, ...cmd: string[]) => {
    const id = `t${Date.now().toString(36)}${Math.random().toString(36).slice(2, 6)}`;
    const { stdout } = await ctr("run", "--rm", "--runc-root", join(dir, "runc"), "--fifo-dir", join(dir, "fifo"), ref, id, ...cmd);
    return stdout;
  };

  before(async () => {
    let t0 = Date.now();
    images = await buildLabImages();
    log(`images built (or found) in ${Date.now() - t0} ms: ${JSON.stringify(imageRefs(images))}`);
    writeFileSync(join(dir, "config.toml"), containerdConfig(dir, images.pause.ref));
    containerd = startDetached({ cmd: "containerd", args: ["--config", join(dir, "config.toml")], logFile: join(dir, "containerd.log") });
    t0 = Date.now();
    for (;;) {
      if (
        existsSync(sock) &&
        (await ctr("version").then(
          () => true,
          () => false,
        ))
      )
        break;
      if (Date.now() - t0 > 20_000) throw new Error(`containerd did not answer on ${sock}; see ${join(dir, "containerd.log")}`);
      await sleep(100);
    }
    log(`containerd up in ${Date.now() - t0} ms`);
  });

  after(async () => {
    // Tasks first, through containerd; then containerd; then whatever it left (shims, runc state, mounts).
    const tasks = await ctr("tasks", "ls", "-q").then(
      (r) => r.stdout.split("\n").filter(Boolean),
      () => [],
    );
    for (const id of tasks) {
      await ctr("tasks", "kill", "--all", "--signal", "SIGKILL", id).catch(() => {});
      await ctr("tasks", "rm", "--force", id).catch(() => {});
      await ctr("containers", "rm", id).catch(() => {});
    }
    await stop(containerd);
    for (const pid of pidsMentioning(sock)) process.kill(pid, "SIGKILL");
    const runcRoot = join(dir, "runc", "k8s.io");
    if (existsSync(runcRoot)) {
      const list = await run("runc", ["--root", runcRoot, "list", "-q"]).then(
        (r) => r.stdout.split("\n").filter(Boolean),
        () => [],
      );
      for (const id of list) await run("runc", ["--root", runcRoot, "delete", "--force", id]).catch(() => {});
    }
    for (const m of mountsUnder(dir)) await run("umount", [m]).catch(() => run("umount", ["-l", m]));
    assert.deepEqual(mountsUnder(dir), [], "no mount left under the temp dir");
    rmSync(dir, { recursive: true, force: true });
  });

  test("ctr imports every image under its reference, and containerd's CRI takes them as its own", async () => {
    const t0 = Date.now();
    await importImages(
      "ctr",
      sock,
      Object.values(images).map((i) => i.tar),
    );
    log(`imported ${Object.keys(images).length} images in ${Date.now() - t0} ms`);
    for (const i of Object.values(images)) assert.match(i.ref, /^stockade\.lab\/[a-z0-9._-]+:[0-9a-f]{16}$/);
    // The CRI plugin reacts to each import by recording the image under its ID (the config digest,
    // what a kubelet reports as imageID) and labelling it managed: that is the CRI seeing the image.
    const refs = Object.values(images).map((i) => i.ref);
    const ids = Object.values(images).map((i) => inspectLayout(readFileSync(i.tar)).id);
    const expected = [...refs, ...ids].sort();
    let listing: string;
    for (const deadline = Date.now() + 10_000; ; await sleep(100)) {
      listing = (await ctr("images", "ls")).stdout;
      const names = listing
        .split("\n")
        .slice(1)
        .filter(Boolean)
        .map((l) => l.split(/\s+/)[0])
        .sort();
      if (JSON.stringify(names) === JSON.stringify(expected)) break;
      if (Date.now() > deadline) assert.deepEqual(names, expected, "images by reference and by ID, nothing else");
    }
    for (const r of refs) {
      const line = listing.split("\n").find((l) => l.startsWith(`${r} `)) ?? "";
      assert.match(line, /io\.cri-containerd\.image=managed/, `${r} is managed by the CRI plugin`);
    }
    // Complete: every blob of every image is in the content store.
    const check = (await ctr("images", "check")).stdout;
    for (const r of refs) assert.match(check, new RegExp(`^${r.replace(/[.]/g, "\\.")}\\s.*complete`, "m"));
  });

  test("an import that gets no answer is cut off at its deadline, naming the address", async () => {
    // ctr itself would wait 10 s to dial a missing socket; the deadline comes first.
    const nowhere = join(dir, "nowhere.sock");
    await assert.rejects(importImages("ctr", nowhere, [images.busybox.tar], { timeoutMs: 3000 }), (e: Error) =>
      e.message.includes(`containerd at ${nowhere} failed: no answer within 3000 ms`),
    );
  });

  test("busybox runs: a shell, its applets, /etc/passwd and a writable /tmp", async () => {
    const out = await ctrRun(images.busybox.ref, "sh", "-c", "echo hello from $(id -un); echo x > /tmp/f && cat /tmp/f; ls /bin/busybox");
    assert.equal(out, "hello from root\nx\n/bin/busybox\n");
  });

  test("each program image carries its binary at /usr/local/bin and a shell", async () => {
    const programs = Object.keys(images).filter((n) => !["pause", "busybox", "etcd"].includes(n));
    log(`program images: ${programs.join(", ") || "(none besides pause)"}`);
    for (const name of programs) {
      const out = await ctrRun(images[name]!.ref, "sh", "-c", `test -x /usr/local/bin/${name} && echo ok`);
      assert.equal(out, "ok\n", name);
    }
  });

  test("etcd image: etcd and etcdctl run", async () => {
    assert.match(await ctrRun(images.etcd.ref, "etcd", "--version"), /etcd Version: \d+\.\d+\.\d+/);
    assert.match(await ctrRun(images.etcd.ref, "etcdctl", "version"), /etcdctl version: \d+\.\d+\.\d+/);
  });

  test("pause image: runs as PID 1 until SIGTERM, then exits 0", async () => {
    const id = "pause-sigterm";
    const child = spawn(
      "ctr",
      [
        "--address",
        sock,
        "--namespace",
        "k8s.io",
        "run",
        "--rm",
        "--runc-root",
        join(dir, "runc"),
        "--fifo-dir",
        join(dir, "fifo"),
        images.pause.ref,
        id,
      ],
      {
        stdio: ["ignore", "pipe", "pipe"],
      },
    );
    let stderr = "";
    child.stderr.on("data", (d: Buffer) => (stderr += d.toString()));
    const exited = new Promise<number | null>((resolve) => child.on("exit", (code) => resolve(code)));
    const t0 = Date.now();
    for (;;) {
      const ls = (await ctr("tasks", "ls")).stdout;
      if (new RegExp(`^${id}\\s+\\d+\\s+RUNNING`, "m").test(ls)) break;
      if (Date.now() - t0 > 20_000) throw new Error(`pause never ran: ${ls} ${stderr}`);
      await sleep(100);
    }
    await sleep(500);
    assert.match(
      (await ctr("tasks", "ls")).stdout,
      new RegExp(`^${id}\\s+\\d+\\s+RUNNING`, "m"),
      "still running: it does not exit on its own",
    );
    const ps = (await ctr("tasks", "ps", id)).stdout;
    assert.equal(ps.trim().split("\n").length, 2, `one process in the container: ${ps}`);
    await ctr("tasks", "kill", "--signal", "SIGTERM", id);
    assert.equal(await exited, 0, `exit code after SIGTERM (stderr: ${stderr})`);
    assert.match(stderr, /Shutting down, got signal: terminated/);
  });
});
