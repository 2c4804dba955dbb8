// The pure parts of lab/images.ts: the ustar writer (checked against GNU tar, an independent reader),
// the root filesystem normalizer, the OCI layout (every digest and size, the config's diff_id, the
// index's name annotations), the tags and the cache, and lab/bins.ts's lab programs hash (checked
// against tools/k8s-bins/build.sh's).
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { createHash } from "node:crypto";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, utimesSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { gunzipSync, gzipSync } from "node:zlib";
import {
  buildImage,
  busyboxRootfs,
  containerdNameAnnotation,
  hostPlatform,
  imageTag,
  inspectLayout,
  labImageSpecs,
  mediaTypes,
  normalizeRootfs,
  ociLayout,
  readTar,
  refNameAnnotation,
  sha256,
  tarArchive,
  type ImageSpec,
  type RootfsEntry,
  type TarEntry,
} from "../../lab/images.ts";
import { labProgramsHash, repoRoot } from "../../lab/bins.ts";

const tmp = () => mkdtempSync(join(tmpdir(), "stockade-images-unit-"));
/** The entries of a layout tar's (only) layer. */
const layerOf = (tarPath: string) => {
  const l = inspectLayout(readFileSync(tarPath));
  return readTar(gunzipSync(l.files.get(`blobs/sha256/${l.manifest.layers[0]!.digest.slice("sha256:".length)}`)!));
};
const hex = (b: Buffer | string) => createHash("sha256").update(b).digest("hex");

const sample: TarEntry[] = [
  { path: "bin", type: "dir", mode: 0o755 },
  { path: "bin/tool", type: "file", mode: 0o755, data: Buffer.from("#!/bin/sh\necho hi\n") },
  { path: "bin/sh", type: "symlink", target: "/bin/busybox" },
  { path: "empty", type: "file", mode: 0o600, data: Buffer.alloc(0) },
  { path: "big", type: "file", mode: 0o644, data: Buffer.alloc(512 * 3 + 1, 7) },
  { path: "tmp", type: "dir", mode: 0o1777 },
  // 150 bytes: needs ustar's prefix field
  { path: `${"d".repeat(60)}/${"e".repeat(40)}/${"f".repeat(48)}`, type: "file", mode: 0o644, data: Buffer.from("deep") },
];

test("tarArchive writes ustar that GNU tar reads: names, types, modes, owners, mtime, link targets, contents", () => {
  const dir = tmp();
  try {
    const tar = tarArchive(sample);
    assert.equal(tar.length % 512, 0);
    writeFileSync(join(dir, "a.tar"), tar);
    const listing = execFileSync("tar", ["--numeric-owner", "--full-time", "-tvf", join(dir, "a.tar")], {
      encoding: "utf8",
      env: { ...process.env, TZ: "UTC" },
    })
      .trim()
      .split("\n");
    assert.equal(listing.length, sample.length);
    assert.match(listing[0]!, /^drwxr-xr-x 0\/0 +0 1970-01-01 00:00:00 bin\/$/);
    assert.match(listing[1]!, /^-rwxr-xr-x 0\/0 +18 1970-01-01 00:00:00 bin\/tool$/);
    assert.match(listing[2]!, /^lrwxrwxrwx 0\/0 +0 1970-01-01 00:00:00 bin\/sh -> \/bin\/busybox$/);
    assert.match(listing[3]!, /^-rw------- 0\/0 +0 .* empty$/);
    assert.match(listing[4]!, /^-rw-r--r-- 0\/0 +1537 .* big$/);
    assert.match(listing[5]!, /^drwxrwxrwt 0\/0 +0 .* tmp\/$/);
    assert.ok(listing[6]!.endsWith(` ${sample[6]!.path}`), listing[6]);
    const out = join(dir, "x");
    mkdirSync(out);
    execFileSync("tar", ["-xf", join(dir, "a.tar"), "-C", out]);
    assert.equal(readFileSync(join(out, "bin/tool"), "utf8"), "#!/bin/sh\necho hi\n");
    assert.deepEqual(readFileSync(join(out, "big")), Buffer.alloc(1537, 7));
    assert.equal(readFileSync(join(out, sample[6]!.path), "utf8"), "deep");
    assert.deepEqual(readTar(tar), sample, "our reader gives back what was written");
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test("tarArchive is deterministic and refuses what ustar cannot hold", () => {
  assert.deepEqual(tarArchive(sample), tarArchive(sample));
  assert.throws(() => tarArchive([{ path: "x".repeat(101), type: "file", mode: 0o644, data: Buffer.alloc(0) }]), /too long/);
  assert.throws(() => tarArchive([{ path: "l", type: "symlink", target: "/".repeat(101) }]), /too long/);
  const corrupt = tarArchive(sample);
  corrupt[10] = corrupt[10]! ^ 1;
  assert.throws(() => readTar(corrupt), /checksum/);
});

test("normalizeRootfs: relative paths, parents added, byte-wise order, conflicts refused", () => {
  const files: Record<string, Buffer> = { "/host/a": Buffer.from("A") };
  const read = (p: string) => files[p] ?? assert.fail(`unexpected read of ${p}`);
  const got = normalizeRootfs(
    [
      { path: "/usr/local/bin/a", type: "file", source: "/host/a", mode: 0o755 },
      { path: "/usr", type: "dir", mode: 0o700 }, // explicit beats the implicit parent
      { path: "/etc/passwd", type: "file", data: "root\n" },
      { path: "bin/sh", type: "symlink", target: "/bin/busybox" },
      { path: "/usr-x", type: "dir" },
    ],
    read,
  );
  assert.deepEqual(
    got.map((e) => [e.path, e.type, "mode" in e ? e.mode.toString(8) : e.target]),
    [
      ["bin", "dir", "755"],
      ["bin/sh", "symlink", "/bin/busybox"],
      ["etc", "dir", "755"],
      ["etc/passwd", "file", "644"],
      ["usr", "dir", "700"],
      ["usr-x", "dir", "755"],
      ["usr/local", "dir", "755"],
      ["usr/local/bin", "dir", "755"],
      ["usr/local/bin/a", "file", "755"],
    ],
  );
  const a = got.find((e) => e.path === "usr/local/bin/a");
  assert.ok(a?.type === "file" && a.data.toString() === "A");
  const f = (path: string): RootfsEntry => ({ path, type: "file", data: "" });
  assert.throws(() => normalizeRootfs([f("/a"), f("a")]), /given twice/);
  assert.throws(() => normalizeRootfs([f("/a"), f("/a/b")]), /is a file and the parent of a\/b/);
  assert.throws(() => normalizeRootfs([f("/a/../etc/shadow")]), /bad path/);
  assert.throws(() => normalizeRootfs([f("/")]), /bad path/);
});

test("ociLayout: blobs named by their sha256 with the sizes the descriptors give, diff_id of the uncompressed layer, named index", () => {
  const layer = tarArchive(normalizeRootfs([{ path: "/pause", type: "file", data: "binary", mode: 0o755 }]));
  const gz = gzipSync(layer);
  const ref = "stockade.lab/pause:0123456789abcdef";
  const platform = { os: "linux" as const, architecture: "amd64" };
  const l = inspectLayout(tarArchive(ociLayout(ref, { Entrypoint: ["/pause"] }, platform, layer, gz).entries));

  assert.deepEqual(JSON.parse(l.files.get("oci-layout")!.toString()), { imageLayoutVersion: "1.0.0" });
  const blobs = [...l.files].filter(([p]) => p.startsWith("blobs/sha256/"));
  assert.equal(blobs.length, 3, "config, manifest, layer");
  for (const [path, data] of blobs) assert.equal(hex(data), path.slice("blobs/sha256/".length), `${path}: content matches its name`);

  assert.equal(l.index.manifests.length, 1);
  const m = l.index.manifests[0]!;
  assert.equal(m.mediaType, mediaTypes.manifest);
  assert.deepEqual(m.annotations, { [refNameAnnotation]: ref, [containerdNameAnnotation]: ref });
  assert.deepEqual(m.platform, platform);
  const blobOf = (d: { digest: string; size: number }) => {
    const b = l.files.get(`blobs/sha256/${d.digest.replace("sha256:", "")}`);
    assert.ok(b, `blob ${d.digest} present`);
    assert.equal(b.length, d.size, `size of ${d.digest}`);
    return b;
  };
  blobOf(m);
  assert.equal(l.manifest.config.mediaType, mediaTypes.config);
  blobOf(l.manifest.config);
  assert.equal(l.manifest.layers.length, 1);
  assert.equal(l.manifest.layers[0]!.mediaType, mediaTypes.layer);
  const layerBlob = blobOf(l.manifest.layers[0]!);

  assert.deepEqual(
    l.config.rootfs,
    { type: "layers", diff_ids: [`sha256:${hex(gunzipSync(layerBlob))}`] },
    "diff_id = sha256 of the uncompressed layer",
  );
  assert.equal(l.config.rootfs.diff_ids[0], sha256(layer));
  assert.equal(l.config.architecture, "amd64");
  assert.equal(l.config.os, "linux");
  assert.deepEqual(l.config.config.Entrypoint, ["/pause"]);
  assert.match(l.config.config.Env?.[0] ?? "", /^PATH=.*\/usr\/local\/bin/);
  assert.equal(l.id, l.manifest.config.digest);
});

test("imageTag: stable for equal inputs and entry order, changed by any content, mode, path, config or name", () => {
  const digests: Record<string, string> = { "/b": "sha256:1" };
  const d = (s: string) => digests[s]!;
  const platform = { os: "linux" as const, architecture: "amd64" };
  const base: ImageSpec = {
    name: "x",
    rootfs: [
      { path: "/bin/b", type: "file", source: "/b", mode: 0o755 },
      { path: "/etc/f", type: "file", data: "one" },
      { path: "/bin/sh", type: "symlink", target: "/bin/b" },
    ],
    config: { Cmd: ["sh"] },
  };
  const tag = imageTag(base, platform, d);
  assert.match(tag, /^[0-9a-f]{16}$/);
  assert.equal(imageTag({ ...base, rootfs: [...base.rootfs].reverse() }, platform, d), tag);
  const variants: ImageSpec[] = [
    { ...base, name: "y" },
    { ...base, config: { Cmd: ["ash"] } },
    { ...base, rootfs: [{ ...base.rootfs[0]!, mode: 0o700 } as RootfsEntry, ...base.rootfs.slice(1)] },
    { ...base, rootfs: [{ ...base.rootfs[0]!, path: "/bin/c" } as RootfsEntry, ...base.rootfs.slice(1)] },
    { ...base, rootfs: [base.rootfs[0]!, { path: "/etc/f", type: "file", data: "two" }, base.rootfs[2]!] },
    { ...base, rootfs: [...base.rootfs.slice(0, 2), { path: "/bin/sh", type: "symlink", target: "/bin/c" }] },
  ];
  for (const v of variants) assert.notEqual(imageTag(v, platform, d), tag, JSON.stringify(v));
  assert.notEqual(imageTag(base, { ...platform, architecture: "arm64" }, d), tag);
  digests["/b"] = "sha256:2";
  assert.notEqual(imageTag(base, platform, d), tag, "a changed host file is a new tag");
});

test("buildImage: a tar per content under <cache>/images, reused as is, a new tag when a file changes", async () => {
  const cache = tmp();
  try {
    const bin = join(cache, "prog");
    writeFileSync(bin, "version 1");
    const spec: ImageSpec = {
      name: "prog",
      rootfs: [{ path: "/usr/local/bin/prog", type: "file", source: bin, mode: 0o755 }],
      config: { Entrypoint: ["/usr/local/bin/prog"] },
    };
    const a = await buildImage(spec, { cache });
    assert.match(a.ref, /^stockade\.lab\/prog:[0-9a-f]{16}$/);
    assert.equal(a.tar, join(cache, "images", `prog-${a.ref.split(":")[1]}.tar`));
    const l = inspectLayout(readFileSync(a.tar));
    assert.equal(l.index.manifests[0]!.annotations?.[refNameAnnotation], a.ref);
    assert.equal(l.config.architecture, hostPlatform().architecture);
    assert.deepEqual(
      layerOf(a.tar).map((e) => [e.path, e.type === "file" ? `${e.mode.toString(8)}:${e.data}` : e.type]),
      [
        ["usr", "dir"],
        ["usr/local", "dir"],
        ["usr/local/bin", "dir"],
        ["usr/local/bin/prog", "755:version 1"],
      ],
    );

    const mtime = statSync(a.tar).mtimeMs;
    utimesSync(a.tar, new Date(0), new Date(0));
    const again = await buildImage(spec, { cache });
    assert.deepEqual(again, a);
    assert.equal(statSync(a.tar).mtimeMs, 0, "the cached tar is not rewritten");
    assert.ok(mtime > 0);

    writeFileSync(bin, "version 2");
    const b = await buildImage(spec, { cache });
    assert.notEqual(b.ref, a.ref, "changed content, new tag");
    const prog = layerOf(b.tar).find((e) => e.path === "usr/local/bin/prog");
    assert.equal(prog?.type === "file" && prog.data.toString(), "version 2");
    assert.ok(statSync(a.tar).isFile(), "the old tag's tar stays (another checkout may use it)");
  } finally {
    rmSync(cache, { recursive: true, force: true });
  }
});

test("buildImage remembers file hashes by stat: an unchanged file is not read again", async () => {
  const cache = tmp();
  try {
    const bin = join(cache, "prog");
    writeFileSync(bin, "v");
    const spec: ImageSpec = { name: "prog", rootfs: [{ path: "/prog", type: "file", source: bin }], config: {} };
    const a = await buildImage(spec, { cache });
    const memoFile = join(cache, "images", "file-digests.json");
    const memo = JSON.parse(readFileSync(memoFile, "utf8")) as Record<string, { key: string; digest: string }>;
    assert.equal(memo[bin]?.digest, sha256("v"));
    // Poison the remembered digest. Re-hashing would give a's tag, whose tar exists; using the memo
    // gives another tag, whose cold build then reads the file and catches the lie.
    memo[bin]!.digest = sha256("something else");
    writeFileSync(memoFile, JSON.stringify(memo));
    await assert.rejects(buildImage(spec, { cache }), /prog changed while building stockade\.lab\/prog:/);
    assert.deepEqual(await buildImage(spec, { cache }), a, "the bad memo entry was dropped: the next build hashes afresh");
  } finally {
    rmSync(cache, { recursive: true, force: true });
  }
});

test("labImageSpecs: pause alone, busybox with applets and /etc, one image per program, etcd with both binaries", () => {
  const specs = labImageSpecs({
    busybox: "/host/busybox",
    applets: ["bin/sh", "bin/busybox", "usr/bin/awk", "sbin/ifconfig"],
    programs: { pause: "/c/pause", ledger: "/c/ledger" },
    etcd: "/c/etcd",
    etcdctl: "/c/etcdctl",
  });
  const byName = Object.fromEntries(specs.map((s) => [s.name, s]));
  assert.deepEqual(Object.keys(byName).sort(), ["busybox", "etcd", "ledger", "pause"]);
  assert.deepEqual(byName.pause!.rootfs, [{ path: "/pause", type: "file", source: "/c/pause", mode: 0o755 }]);
  assert.deepEqual(byName.pause!.config, { Entrypoint: ["/pause"] });

  const bb = byName.busybox!.rootfs;
  assert.deepEqual(
    bb.find((e) => e.path === "/bin/busybox"),
    { path: "/bin/busybox", type: "file", source: "/host/busybox", mode: 0o755 },
  );
  assert.equal(bb.filter((e) => e.path.endsWith("busybox")).length, 1, "busybox is not its own applet link");
  for (const a of ["bin/sh", "usr/bin/awk", "sbin/ifconfig"])
    assert.deepEqual(
      bb.find((e) => e.path === a),
      { path: a, type: "symlink", target: "/bin/busybox" },
    );
  assert.deepEqual(
    bb.find((e) => e.path === "/tmp"),
    { path: "/tmp", type: "dir", mode: 0o1777 },
  );
  assert.match(String((bb.find((e) => e.path === "/etc/passwd") as { data: string }).data), /^root:x:0:0:/);
  assert.match(String((bb.find((e) => e.path === "/etc/group") as { data: string }).data), /^root:x:0:/);
  normalizeRootfs(bb, () => Buffer.alloc(0)); // no conflicts

  const ledger = byName.ledger!;
  assert.deepEqual(ledger.rootfs.slice(0, bb.length), bb, "a program image includes busybox");
  assert.deepEqual(ledger.rootfs.at(-1), { path: "/usr/local/bin/ledger", type: "file", source: "/c/ledger", mode: 0o755 });
  assert.deepEqual(ledger.config, { Entrypoint: ["/usr/local/bin/ledger"] });
  const etcdFiles = byName.etcd!.rootfs.filter((e) => e.path.startsWith("/usr/local/bin/"));
  assert.deepEqual(
    etcdFiles.map((e) => e.path),
    ["/usr/local/bin/etcd", "/usr/local/bin/etcdctl"],
  );

  assert.throws(() => labImageSpecs({ busybox: "/b", applets: [], programs: { ledger: "/l" }, etcd: "/e", etcdctl: "/c" }), /no pause/);
  assert.throws(
    () => labImageSpecs({ busybox: "/b", applets: [], programs: { pause: "/p", etcd: "/l" }, etcd: "/e", etcdctl: "/c" }),
    /clashes/,
  );
  assert.ok(busyboxRootfs("/b", []).length > 0);
});

test("labProgramsHash equals tools/k8s-bins/build.sh's, and follows a content change", () => {
  const script = join(repoRoot, "tools/k8s-bins/build.sh");
  assert.equal(labProgramsHash(), execFileSync("bash", [script, "--programs-hash"], { encoding: "utf8" }).trim());
  const dir = tmp();
  try {
    mkdirSync(join(dir, "a"));
    writeFileSync(join(dir, "go.mod"), "module x\n");
    writeFileSync(join(dir, "a", "main.go"), "package main\n");
    const shell = () =>
      execFileSync("bash", ["-c", "find . -type f -print0 | LC_ALL=C sort -z | xargs -0 -r sha256sum | sha256sum | cut -c1-16"], {
        cwd: dir,
        encoding: "utf8",
      }).trim();
    assert.equal(labProgramsHash(dir), shell());
    const before = labProgramsHash(dir);
    writeFileSync(join(dir, "a", "main.go"), "package main // changed\n");
    assert.notEqual(labProgramsHash(dir), before);
    assert.equal(labProgramsHash(dir), shell());
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
