// Images without a registry: the lab's pods run images built here as OCI image layout tars and
// imported into each node's containerd (`ctr images import`), never pulled. Names are under a
// registry host that cannot resolve (stockade.lab), tagged with a hash of their content, so a changed
// input is a new image and a pull, if one were ever attempted, fails instead of fetching something else.
//
// Functional core: a ustar writer, the root filesystem normalizer and the OCI layout are pure.
// Why our own ustar writer rather than GNU tar: the same writer makes the layer and the outer layout
// tar, entries come from anywhere (host files, generated text, symlinks) without staging a tree on
// disk, and ownership, mtime and order are deterministic by construction, not by flags.
import { execFile, execFileSync } from "node:child_process";
import { createHash } from "node:crypto";
import { existsSync, mkdirSync, readFileSync, renameSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { promisify } from "node:util";
import { gzip } from "node:zlib";
import { binPaths, cacheDir, ensureLabPrograms, repoRoot } from "./bins.ts";

export const registryHost = "stockade.lab";
export const busyboxPath = "/bin/busybox";

// ---------------------------------------------------------------------------------------------------
// Root filesystem description

export type RootfsEntry =
  | { path: string; type: "file"; source: string; mode?: number } // contents of a host file
  | { path: string; type: "file"; data: string | Buffer; mode?: number }
  | { path: string; type: "dir"; mode?: number }
  | { path: string; type: "symlink"; target: string };

/** One entry of a tar archive: a relative path without trailing slash, contents resolved. */
export type TarEntry =
  | { path: string; type: "file"; mode: number; data: Buffer }
  | { path: string; type: "dir"; mode: number }
  | { path: string; type: "symlink"; target: string };

/** The parts of an OCI image config the lab sets (names as in the OCI spec's `config`). */
export interface ImageConfig {
  Entrypoint?: string[];
  Cmd?: string[];
  Env?: string[];
  WorkingDir?: string;
}

export interface ImageSpec {
  /** Repository under the registry host: `stockade.lab/<name>`. */
  name: string;
  rootfs: RootfsEntry[];
  config: ImageConfig;
}

export interface Platform {
  os: "linux";
  architecture: string;
}

const defaultPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/** Go's name for this machine's architecture (the lab's binaries are built for it). */
export function hostPlatform(): Platform {
  const arch: Record<string, string> = { x64: "amd64", arm64: "arm64", arm: "arm", ppc64: "ppc64le", s390x: "s390x", riscv64: "riscv64" };
  const architecture = arch[process.arch];
  if (!architecture) throw new Error(`images: no OCI architecture known for node's process.arch ${process.arch}`);
  return { os: "linux", architecture };
}

/** Byte-wise order (what `LC_ALL=C sort` gives), so the order never depends on a locale. */
const byBytes = (a: string, b: string) => Buffer.compare(Buffer.from(a), Buffer.from(b));

function cleanPath(p: string): string {
  const parts = p.split("/").filter((s) => s !== "" && s !== ".");
  if (parts.length === 0 || parts.some((s) => s === "..") || p.includes("\0")) {
    throw new Error(`images: bad path in a root filesystem: ${JSON.stringify(p)} (needs a name, no '..')`);
  }
  return parts.join("/");
}

/**
 * Resolves a root filesystem description into tar entries: paths made relative, missing parent
 * directories added (0755), sorted byte-wise (parents first). A path given twice, or a file used as
 * a directory, is an error: an image must not depend on which of two entries wins.
 */
export function normalizeRootfs(entries: readonly RootfsEntry[], read: (source: string) => Buffer = readFileSync): TarEntry[] {
  const out = new Map<string, TarEntry>();
  const implicit = new Set<string>();
  for (const e of entries) {
    const path = cleanPath(e.path);
    const prev = out.get(path);
    if (prev && !(implicit.has(path) && e.type === "dir")) throw new Error(`images: ${path} is given twice in a root filesystem`);
    implicit.delete(path);
    if (e.type === "dir") out.set(path, { path, type: "dir", mode: e.mode ?? 0o755 });
    else if (e.type === "symlink") out.set(path, { path, type: "symlink", target: e.target });
    else {
      const data = "source" in e ? read(e.source) : Buffer.from(e.data);
      out.set(path, { path, type: "file", mode: e.mode ?? 0o644, data });
    }
    const parts = path.split("/");
    for (let i = 1; i < parts.length; i++) {
      const parent = parts.slice(0, i).join("/");
      const p = out.get(parent);
      if (p && p.type !== "dir") throw new Error(`images: ${parent} is a ${p.type} and the parent of ${path}`);
      if (!p) {
        out.set(parent, { path: parent, type: "dir", mode: 0o755 });
        implicit.add(parent);
      }
    }
  }
  return [...out.values()].sort((a, b) => byBytes(a.path, b.path));
}

// ---------------------------------------------------------------------------------------------------
// ustar

const BLOCK = 512;

function octal(value: number, width: number): string {
  const s = value.toString(8);
  if (s.length > width - 1) throw new Error(`images: ${value} does not fit a tar header field`);
  return s.padStart(width - 1, "0") + "\0";
}

/** Splits a path into ustar's prefix (≤ 155 bytes) and name (≤ 100 bytes) at a slash. */
function splitName(path: string): [prefix: string, name: string] {
  if (Buffer.byteLength(path) <= 100) return ["", path];
  for (let i = path.indexOf("/"); i >= 0; i = path.indexOf("/", i + 1)) {
    const prefix = path.slice(0, i);
    const name = path.slice(i + 1);
    if (Buffer.byteLength(prefix) <= 155 && Buffer.byteLength(name) <= 100 && name) return [prefix, name];
  }
  throw new Error(`images: path too long for a ustar header: ${path}`);
}

function header(e: TarEntry): Buffer {
  const h = Buffer.alloc(BLOCK);
  const [prefix, name] = splitName(e.type === "dir" ? `${e.path}/` : e.path);
  const put = (s: string, off: number, len: number) => {
    if (Buffer.byteLength(s) > len) throw new Error(`images: ${JSON.stringify(s)} too long for a tar header field`);
    h.write(s, off, len, "utf8");
  };
  put(name, 0, 100);
  put(octal(e.type === "symlink" ? 0o777 : e.mode & 0o7777, 8), 100, 8);
  put(octal(0, 8), 108, 8); // uid: root, numeric only
  put(octal(0, 8), 116, 8); // gid
  put(octal(e.type === "file" ? e.data.length : 0, 12), 124, 12);
  put(octal(0, 12), 136, 12); // mtime: the epoch, so equal inputs give equal bytes
  h.fill(" ", 148, 156); // checksum is computed over these spaces
  put(e.type === "file" ? "0" : e.type === "dir" ? "5" : "2", 156, 1);
  if (e.type === "symlink") put(e.target, 157, 100);
  put("ustar\0", 257, 6);
  put("00", 263, 2);
  put(octal(0, 8), 329, 8); // devmajor
  put(octal(0, 8), 337, 8); // devminor
  put(prefix, 345, 155);
  let sum = 0;
  for (const b of h) sum += b;
  put(sum.toString(8).padStart(6, "0") + "\0 ", 148, 8);
  return h;
}

/** A POSIX ustar archive of the entries, in the given order, ending with two zero blocks. */
export function tarArchive(entries: readonly TarEntry[]): Buffer {
  const parts: Buffer[] = [];
  for (const e of entries) {
    parts.push(header(e));
    if (e.type === "file") {
      parts.push(e.data);
      const pad = (BLOCK - (e.data.length % BLOCK)) % BLOCK;
      if (pad) parts.push(Buffer.alloc(pad));
    }
  }
  parts.push(Buffer.alloc(2 * BLOCK));
  return Buffer.concat(parts);
}

/**
 * Reads a ustar archive (what tarArchive writes; enough for checking a layout, not a general reader:
 * no PAX or GNU extensions).
 */
export function readTar(tar: Buffer): TarEntry[] {
  const out: TarEntry[] = [];
  const str = (off: number, len: number) => {
    const b = tar.subarray(off, off + len);
    const nul = b.indexOf(0);
    return b.subarray(0, nul < 0 ? len : nul).toString("utf8");
  };
  for (let off = 0; off + BLOCK <= tar.length;) {
    if (tar.subarray(off, off + BLOCK).every((b) => b === 0)) break;
    let sum = 0;
    for (let i = 0; i < BLOCK; i++) sum += i >= 148 && i < 156 ? 32 : tar[off + i]!;
    if (parseInt(str(off + 148, 8).trim(), 8) !== sum) throw new Error(`images: bad tar header checksum at offset ${off}`);
    if (str(off + 257, 6) !== "ustar") throw new Error(`images: not a ustar header at offset ${off}`);
    const prefix = str(off + 345, 155);
    const path = (prefix ? `${prefix}/` : "") + str(off, 100);
    const mode = parseInt(str(off + 100, 8), 8);
    const size = parseInt(str(off + 124, 12), 8);
    const type = str(off + 156, 1);
    const target = str(off + 157, 100);
    const data = off + BLOCK;
    if (data + size > tar.length) throw new Error(`images: tar truncated in ${path}`);
    if (type === "0" || type === "") out.push({ path, type: "file", mode, data: Buffer.from(tar.subarray(data, data + size)) });
    else if (type === "5") out.push({ path: path.replace(/\/$/, ""), type: "dir", mode });
    else if (type === "2") out.push({ path, type: "symlink", target });
    else throw new Error(`images: unsupported tar entry type ${JSON.stringify(type)} for ${path}`);
    off = data + Math.ceil(size / BLOCK) * BLOCK;
  }
  return out;
}

// ---------------------------------------------------------------------------------------------------
// OCI image layout

export const mediaTypes = {
  index: "application/vnd.oci.image.index.v1+json",
  manifest: "application/vnd.oci.image.manifest.v1+json",
  config: "application/vnd.oci.image.config.v1+json",
  layer: "application/vnd.oci.image.layer.v1.tar+gzip",
} as const;

/** The annotation `ctr images import` names an image by (a full reference is kept as is). */
export const refNameAnnotation = "org.opencontainers.image.ref.name";
/** containerd's own name annotation, which its importer prefers; set too, to the same reference. */
export const containerdNameAnnotation = "io.containerd.image.name";

export interface Descriptor {
  mediaType: string;
  digest: string;
  size: number;
  annotations?: Record<string, string>;
  platform?: Platform;
}

export const sha256 = (b: Buffer | string) => `sha256:${createHash("sha256").update(b).digest("hex")}`;

function descriptor(mediaType: string, blob: Buffer): Descriptor {
  return { mediaType, digest: sha256(blob), size: blob.length };
}

export interface Layout {
  /** The files of the layout (oci-layout, index.json, blobs/sha256/*), ready for tarArchive. */
  entries: TarEntry[];
  manifest: Descriptor;
  config: Descriptor;
  layer: Descriptor;
  diffId: string;
}

/**
 * The OCI image layout of a one-layer image: `layer` is the uncompressed tar (its digest is the
 * config's diff_id), `gzipped` its compressed form (the blob). The index names the image `ref`.
 */
export function ociLayout(ref: string, config: ImageConfig, platform: Platform, layer: Buffer, gzipped: Buffer): Layout {
  const diffId = sha256(layer);
  const configBlob = Buffer.from(
    JSON.stringify({
      created: "1970-01-01T00:00:00Z",
      architecture: platform.architecture,
      os: platform.os,
      config: { Env: [defaultPath], WorkingDir: "/", ...config },
      rootfs: { type: "layers", diff_ids: [diffId] },
      history: [{ created: "1970-01-01T00:00:00Z", created_by: "stockade lab/images.ts" }],
    }),
  );
  const configDesc = descriptor(mediaTypes.config, configBlob);
  const layerDesc = descriptor(mediaTypes.layer, gzipped);
  const manifestBlob = Buffer.from(
    JSON.stringify({ schemaVersion: 2, mediaType: mediaTypes.manifest, config: configDesc, layers: [layerDesc] }),
  );
  const manifestDesc = descriptor(mediaTypes.manifest, manifestBlob);
  const index = {
    schemaVersion: 2,
    mediaType: mediaTypes.index,
    manifests: [{ ...manifestDesc, annotations: { [containerdNameAnnotation]: ref, [refNameAnnotation]: ref }, platform }],
  };
  const blob = (d: Descriptor, data: Buffer): TarEntry => ({
    path: `blobs/sha256/${d.digest.slice("sha256:".length)}`,
    type: "file",
    mode: 0o644,
    data,
  });
  const entries: TarEntry[] = [
    { path: "oci-layout", type: "file", mode: 0o644, data: Buffer.from(JSON.stringify({ imageLayoutVersion: "1.0.0" })) },
    { path: "index.json", type: "file", mode: 0o644, data: Buffer.from(JSON.stringify(index)) },
    { path: "blobs", type: "dir", mode: 0o755 },
    { path: "blobs/sha256", type: "dir", mode: 0o755 },
    blob(configDesc, configBlob),
    blob(manifestDesc, manifestBlob),
    blob(layerDesc, gzipped),
  ];
  return { entries, manifest: manifestDesc, config: configDesc, layer: layerDesc, diffId };
}

/** What an image layout tar holds, parsed: for checks and for callers that need the image ID. */
export interface InspectedLayout {
  files: Map<string, Buffer>;
  index: { manifests: Descriptor[] };
  manifest: { config: Descriptor; layers: Descriptor[] };
  config: { architecture: string; os: string; config: ImageConfig; rootfs: { type: string; diff_ids: string[] } };
  /** The image ID, as the CRI and kubelet report it: the config's digest. */
  id: string;
}

export function inspectLayout(tar: Buffer): InspectedLayout {
  const files = new Map(readTar(tar).flatMap((e) => (e.type === "file" ? [[e.path, e.data] as const] : [])));
  const json = <T>(path: string): T => {
    const b = files.get(path);
    if (!b) throw new Error(`images: the layout has no ${path}`);
    return JSON.parse(b.toString("utf8")) as T;
  };
  const blob = (digest: string) => `blobs/sha256/${digest.replace(/^sha256:/, "")}`;
  const index = json<InspectedLayout["index"]>("index.json");
  const first = index.manifests[0];
  if (!first) throw new Error("images: the layout's index lists no manifest");
  const manifest = json<InspectedLayout["manifest"]>(blob(first.digest));
  const config = json<InspectedLayout["config"]>(blob(manifest.config.digest));
  return { files, index, manifest, config, id: manifest.config.digest };
}

// ---------------------------------------------------------------------------------------------------
// Tags: a hash of everything that makes the image, without reading big files on a warm cache

/** Bumped when the way an image is made changes (writer, config defaults), so old tags are not reused. */
const FORMAT = 1;

/** Hashes of host files, remembered by (device, inode, size, mtime): a warm build only stat()s them. */
class FileDigests {
  private readonly file: string;
  private memo: Record<string, { key: string; digest: string }>;
  private dirty = false;
  constructor(file: string) {
    this.file = file;
    try {
      this.memo = JSON.parse(readFileSync(file, "utf8")) as typeof this.memo;
    } catch {
      this.memo = {};
    }
  }
  digest(path: string): string {
    const st = statSync(path, { bigint: true });
    if (!st.isFile()) throw new Error(`images: ${path} is not a regular file`);
    const key = `${st.dev}:${st.ino}:${st.size}:${st.mtimeNs}:${st.ctimeNs}`;
    const hit = this.memo[path];
    if (hit?.key === key) return hit.digest;
    const digest = sha256(readFileSync(path));
    this.memo[path] = { key, digest };
    this.dirty = true;
    return digest;
  }
  forget(path: string): void {
    delete this.memo[path];
    this.dirty = true;
  }
  save(): void {
    if (!this.dirty) return;
    const tmp = `${this.file}.${process.pid}.tmp`;
    writeFileSync(tmp, JSON.stringify(this.memo));
    renameSync(tmp, this.file); // a concurrent writer's entries may be lost: they are only recomputed
    this.dirty = false;
  }
}

/**
 * The image's tag: 16 hex digits of a hash over its name, config, platform and every entry (a host
 * file by the sha256 of its contents). Pure given `digestOf`.
 */
export function imageTag(spec: ImageSpec, platform: Platform, digestOf: (source: string) => string): string {
  const entries = spec.rootfs.map((e) =>
    e.type === "file"
      ? {
          path: cleanPath(e.path),
          type: e.type,
          mode: e.mode ?? 0o644,
          digest: "source" in e ? digestOf(e.source) : sha256(Buffer.from(e.data)),
        }
      : { ...e, path: cleanPath(e.path) },
  );
  entries.sort((a, b) => byBytes(a.path, b.path));
  const description = JSON.stringify({ format: FORMAT, name: spec.name, config: spec.config, platform, entries });
  return createHash("sha256").update(description).digest("hex").slice(0, 16);
}

export interface LabImage {
  name: string;
  /** The reference pods use (with `imagePullPolicy: Never`): `stockade.lab/<name>:<tag>`. */
  ref: string;
  /** The OCI layout tar to import. */
  tar: string;
}

export const imageRef = (name: string, tag: string) => `${registryHost}/${name}:${tag}`;

const gzipAsync = promisify(gzip);

/**
 * Builds one image's layout tar under `<cache>/images/<name>-<tag>.tar` unless it is already there.
 * The tar is written to a temporary name and renamed, so a tar that exists is complete.
 */
export async function buildImage(spec: ImageSpec, opts: { cache?: string } = {}): Promise<LabImage> {
  const digests = new FileDigests(join(imagesDir(opts.cache), "file-digests.json"));
  try {
    return await build(spec, imagesDir(opts.cache), digests);
  } finally {
    digests.save();
  }
}

function imagesDir(cache = cacheDir()): string {
  const dir = join(cache, "images");
  mkdirSync(dir, { recursive: true });
  return dir;
}

async function build(spec: ImageSpec, dir: string, digests: FileDigests): Promise<LabImage> {
  if (!/^[a-z0-9]+(?:[._-][a-z0-9]+)*$/.test(spec.name))
    throw new Error(`images: bad image name ${JSON.stringify(spec.name)} (lowercase letters, digits, . _ -)`);
  const platform = hostPlatform();
  const tag = imageTag(spec, platform, (s) => digests.digest(s));
  const image = { name: spec.name, ref: imageRef(spec.name, tag), tar: join(dir, `${spec.name}-${tag}.tar`) };
  if (existsSync(image.tar)) return image;

  // Cold: read what was hashed, and refuse if a file changed in between (the tag would lie).
  const read = (source: string) => {
    const data = readFileSync(source);
    if (sha256(data) !== digests.digest(source)) {
      digests.forget(source); // the next build hashes it afresh
      throw new Error(`images: ${source} changed while building ${image.ref}; build again`);
    }
    return data;
  };
  const layer = tarArchive(normalizeRootfs(spec.rootfs, read));
  const gzipped = await gzipAsync(layer);
  const layout = ociLayout(image.ref, spec.config, platform, layer, gzipped);
  const tmp = `${image.tar}.${process.pid}.tmp`;
  writeFileSync(tmp, tarArchive(layout.entries));
  renameSync(tmp, image.tar);
  return image;
}

// ---------------------------------------------------------------------------------------------------
// The lab's images

/** busybox and its applets as symlinks at the places `busybox --list-full` gives, a minimal /etc. */
export function busyboxRootfs(busybox: string, applets: readonly string[]): RootfsEntry[] {
  const self = cleanPath(busyboxPath);
  return [
    { path: busyboxPath, type: "file", source: busybox, mode: 0o755 },
    ...applets.filter((a) => cleanPath(a) !== self).map((a): RootfsEntry => ({ path: a, type: "symlink", target: busyboxPath })),
    { path: "/tmp", type: "dir", mode: 0o1777 },
    { path: "/root", type: "dir", mode: 0o700 },
    { path: "/etc/passwd", type: "file", data: "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n" },
    { path: "/etc/group", type: "file", data: "root:x:0:\nnogroup:x:65534:\n" },
  ];
}

/** The specs of the lab's images. Pure: inputs are paths and busybox's applet list. */
export function labImageSpecs(inputs: {
  busybox: string;
  applets: readonly string[];
  programs: Record<string, string>; // lab program name → binary (pause among them)
  etcd: string;
  etcdctl: string;
}): ImageSpec[] {
  const bb = busyboxRootfs(inputs.busybox, inputs.applets);
  const pause = inputs.programs.pause;
  if (!pause) throw new Error("images: the lab programs have no pause (lab/programs/pause)");
  const specs: ImageSpec[] = [
    { name: "pause", rootfs: [{ path: "/pause", type: "file", source: pause, mode: 0o755 }], config: { Entrypoint: ["/pause"] } },
    { name: "busybox", rootfs: bb, config: { Cmd: ["sh"] } },
    {
      name: "etcd",
      rootfs: [
        ...bb,
        { path: "/usr/local/bin/etcd", type: "file", source: inputs.etcd, mode: 0o755 },
        { path: "/usr/local/bin/etcdctl", type: "file", source: inputs.etcdctl, mode: 0o755 },
      ],
      config: { Entrypoint: ["/usr/local/bin/etcd"] },
    },
  ];
  for (const [name, bin] of Object.entries(inputs.programs).sort(([a], [b]) => byBytes(a, b))) {
    if (name === "pause") continue;
    if (specs.some((s) => s.name === name)) throw new Error(`images: lab program ${name} clashes with the ${name} image`);
    specs.push({
      name,
      rootfs: [...bb, { path: `/usr/local/bin/${name}`, type: "file", source: bin, mode: 0o755 }],
      config: { Entrypoint: [`/usr/local/bin/${name}`] },
    });
  }
  return specs;
}

/** The lab's images by name: pause, busybox, etcd, and one per lab program (ledger, ...). */
export type LabImages = { pause: LabImage; busybox: LabImage; etcd: LabImage } & Record<string, LabImage>;

/**
 * Builds (or finds in the cache) every image the lab's real nodes run, building the lab programs and
 * etcd/etcdctl first if they are missing. A warm call stat()s its inputs and spawns `busybox --list-full`.
 */
export async function buildLabImages(opts: { cache?: string } = {}): Promise<LabImages> {
  if (!existsSync(busyboxPath)) throw new Error(`images: ${busyboxPath} is missing: install Debian's busybox-static (npm run setup)`);
  const bins = binPaths();
  if (!existsSync(bins.etcd) || !existsSync(bins.etcdctl)) {
    execFileSync("bash", [join(repoRoot, "tools/k8s-bins/build.sh"), "etcd", "etcdctl"], { stdio: ["ignore", "inherit", "inherit"] });
  }
  const applets = execFileSync(busyboxPath, ["--list-full"], { encoding: "utf8" }).split("\n").filter(Boolean);
  const specs = labImageSpecs({ busybox: busyboxPath, applets, programs: ensureLabPrograms(), etcd: bins.etcd, etcdctl: bins.etcdctl });
  const dir = imagesDir(opts.cache);
  const digests = new FileDigests(join(dir, "file-digests.json"));
  const out: Record<string, LabImage> = {};
  try {
    for (const spec of specs) out[spec.name] = await build(spec, dir, digests);
  } finally {
    digests.save();
  }
  return out as LabImages;
}

/** name → reference, e.g. { pause: "stockade.lab/pause:3f2a…", busybox: …, etcd: …, ledger: … }. */
export function imageRefs(images: Record<string, LabImage>): Record<string, string> {
  return Object.fromEntries(Object.entries(images).map(([n, i]) => [n, i.ref]));
}

const execFileAsync = promisify(execFile);

/**
 * Imports layout tars into a containerd's `k8s.io` namespace, where its CRI plugin (and so the
 * kubelet) sees them. `ctr images import` unpacks into the snapshotter by default, so a pod's first
 * start does not pay for it; no pull is involved (the content is all in the tar). Each import gets
 * `timeoutMs` (default 120 s; the etcd image takes ~1 s here): a hung containerd fails the call.
 */
export async function importImages(
  ctr: string,
  containerdAddress: string,
  tars: readonly string[],
  opts: { namespace?: string; snapshotter?: string; timeoutMs?: number } = {},
): Promise<void> {
  for (const tar of tars) {
    const args = ["--address", containerdAddress, "--namespace", opts.namespace ?? "k8s.io", "images", "import"];
    if (opts.snapshotter) args.push("--snapshotter", opts.snapshotter);
    args.push(tar);
    try {
      await execFileAsync(ctr, args, { maxBuffer: 1 << 20, timeout: opts.timeoutMs ?? 120_000, killSignal: "SIGKILL" });
    } catch (err) {
      const e = err as { stderr?: string; message: string; killed?: boolean };
      const why = e.killed ? `no answer within ${opts.timeoutMs ?? 120_000} ms` : (e.stderr || e.message).trim();
      throw new Error(`images: importing ${tar} into containerd at ${containerdAddress} failed: ${why}`, {
        cause: err,
      });
    }
  }
}

/** What a real-node lab needs: the sandbox image, the tars every node imports, and each image's reference. */
export async function realNodeImages(
  log?: (msg: string) => void,
): Promise<{ pauseImage: string; tars: string[]; refs: Record<string, string> }> {
  log?.("building the lab's images (cached by content)");
  const images = await buildLabImages();
  return { pauseImage: images.pause.ref, tars: Object.values(images).map((i) => i.tar), refs: imageRefs(images) };
}
