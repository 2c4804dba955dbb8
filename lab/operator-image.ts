// The operator image, built here from the repository's Dockerfile with no registry: our own dockerd
// (tools/image/dockerd.sh: isolated from the host's firewall, left running and reused), the Dockerfile's
// NODE_IMAGE made locally when absent (tools/image/node-base.sh), `docker build`, and `docker save` to a
// Docker-archive tar that `ctr images import` takes. The tar is cached under a hash of the build's inputs,
// so a warm call with nothing changed touches neither dockerd nor the network.
//
// Functional core: the cache key, the Deployment's image name and the Dockerfile's NODE_IMAGE default are pure.
import { execFile } from "node:child_process";
import { createHash } from "node:crypto";
import { chmodSync, existsSync, mkdirSync, readFileSync, readdirSync, renameSync, rmSync, statSync } from "node:fs";
import { join, relative } from "node:path";
import { promisify } from "node:util";
import { cacheDir, repoRoot } from "./bins.ts";
import { registryHost } from "./images.ts";

const run = promisify(execFile);

/** The docker.io package's own client: a newer one may come first on PATH, and it must match our dockerd. */
export const dockerClient = "/usr/bin/docker";

/** What the build reads (the Dockerfile COPYs these; .dockerignore admits only them): the cache key's inputs. */
export const imageInputs = [
  "Dockerfile",
  ".dockerignore",
  "package.json",
  "package-lock.json",
  "tsconfig.json",
  "tsconfig.build.json",
  "src",
  "tools/image",
];

export interface InputFile {
  path: string; // relative to the repository, "/"-separated
  data: Buffer | string;
}

/** Hash of the build's inputs: names and contents, independent of the order they were read in. */
export function imageKey(files: readonly InputFile[], extra = ""): string {
  const h = createHash("sha256").update(`stockade-image-v1\0${extra}\0`);
  for (const f of [...files].sort((a, b) => (a.path < b.path ? -1 : a.path > b.path ? 1 : 0))) {
    const data = typeof f.data === "string" ? Buffer.from(f.data) : f.data;
    h.update(`${f.path}\0${data.length}\0`).update(data);
  }
  return h.digest("hex").slice(0, 16);
}

/** The one image a Deployment manifest runs (`image:` of its containers), e.g. ghcr.io/stockade-io/stockade:0.1.0. */
export function deploymentImage(yaml: string): string {
  const images = new Set<string>();
  for (const m of yaml.matchAll(/^[ \t]*(?:-[ \t]+)?image:[ \t]*["']?([^\s"'#]+)["']?[ \t]*(?:#.*)?$/gm)) images.add(m[1]!);
  if (images.size !== 1) {
    throw new Error(
      `expected exactly one container image in the Deployment manifest, found ${images.size}: ${[...images].join(", ") || "none"}`,
    );
  }
  return [...images][0]!;
}

/** The default of the Dockerfile's `ARG NODE_IMAGE=…` (the base image name a plain `docker build .` uses). */
export function nodeImageDefault(dockerfile: string): string {
  const m = /^ARG[ \t]+NODE_IMAGE=["']?([^\s"']+)/m.exec(dockerfile);
  if (!m) throw new Error("the Dockerfile has no `ARG NODE_IMAGE=<image>` default");
  return m[1]!;
}

/** The Node.js version this repository runs (the `node` devDependency's), which the local base image carries. */
export function repoNodeVersion(root = repoRoot): string {
  return (JSON.parse(readFileSync(join(root, "node_modules/node/package.json"), "utf8")) as { version: string }).version;
}

function readInputs(root: string): InputFile[] {
  const out: InputFile[] = [];
  const walk = (p: string): void => {
    const st = statSync(p, { throwIfNoEntry: false });
    if (!st) return;
    if (st.isDirectory()) for (const e of readdirSync(p).sort()) walk(join(p, e));
    else if (st.isFile()) out.push({ path: relative(root, p).split("\\").join("/"), data: readFileSync(p) });
  };
  for (const i of imageInputs) walk(join(root, i));
  return out;
}

export interface OperatorImage {
  /** The Deployment's image name first, then stockade.lab/stockade:<key>. */
  ref: string;
  refs: string[];
  /** Docker-archive tar holding both names (`ctr images import` / `docker load`). */
  tar: string;
}

/** Tars kept: the newest few, as worktrees with different sources build side by side. */
const keepTars = 3;

/** Deletes all but the `keep` newest operator image tars (by mtime), never `current`. */
function pruneOld(dir: string, keep: number, current: string): void {
  const tars = readdirSync(dir)
    .filter((f) => /^stockade-[0-9a-f]{16}\.tar$/.test(f))
    .map((f) => ({ p: join(dir, f), t: statSync(join(dir, f)).mtimeMs }))
    .sort((a, b) => b.t - a.t);
  for (const { p } of tars.slice(keep)) if (p !== current) rmSync(p, { force: true });
}

export function imagesDir(): string {
  return join(cacheDir(), "images");
}

export function dockerDir(): string {
  return join(cacheDir(), "docker");
}

/** Starts (or finds) our dockerd; returns its DOCKER_HOST. */
export async function ensureDockerd(): Promise<string> {
  const { stdout } = await run("bash", [join(repoRoot, "tools/image/dockerd.sh"), "start", dockerDir()]);
  return stdout.trim();
}

/** Stops our dockerd and unmounts what it left under its directory. */
export async function stopDockerd(): Promise<void> {
  await run("bash", [join(repoRoot, "tools/image/dockerd.sh"), "stop", dockerDir()]);
}

export async function docker(host: string, args: string[], opts: { env?: NodeJS.ProcessEnv } = {}): Promise<string> {
  try {
    const { stdout } = await run(dockerClient, ["-H", host, ...args], { maxBuffer: 64 << 20, env: opts.env ?? process.env });
    return stdout;
  } catch (e) {
    const err = e as { stderr?: string; stdout?: string; message: string };
    const tail = `${err.stdout ?? ""}${err.stderr ?? ""}`.trim().split("\n").slice(-25).join("\n");
    throw new Error(`docker ${args.slice(0, 2).join(" ")} failed:\n${tail || err.message}`, { cause: e });
  }
}

/**
 * Builds the operator image unless a tar for the current inputs exists (or `rebuild`), and returns it.
 * The dockerd is left running for the next build (its layer cache makes a src-only change cheap).
 */
export async function operatorImage(o: { log?: (m: string) => void; rebuild?: boolean } = {}): Promise<OperatorImage> {
  const log = o.log ?? (() => {});
  if (!existsSync(dockerClient)) throw new Error(`${dockerClient} is missing: install Debian's docker.io (npm run setup does)`);
  const dockerfile = readFileSync(join(repoRoot, "Dockerfile"), "utf8");
  const name = deploymentImage(readFileSync(join(repoRoot, "manifests/03-deployment.yaml"), "utf8"));
  const nodeVersion = repoNodeVersion();
  const key = imageKey(readInputs(repoRoot), nodeVersion);
  const refs = [name, `${registryHost}/stockade:${key}`];
  const dir = imagesDir();
  const tar = join(dir, `stockade-${key}.tar`);
  if (existsSync(tar) && !o.rebuild) return { ref: refs[0]!, refs, tar };

  const host = await ensureDockerd();
  const base = nodeImageDefault(dockerfile);
  const major = /:(\d+)/.exec(base)?.[1];
  if (major && major !== nodeVersion.split(".")[0]) {
    throw new Error(`the Dockerfile's NODE_IMAGE ${base} is Node.js ${major}, this repository runs ${nodeVersion}: align them`);
  }
  const haveBase = await docker(host, ["image", "inspect", base]).then(
    () => true,
    () => false,
  );
  if (!haveBase) {
    log(`making the base image ${base} (Debian bookworm minbase + Node.js ${nodeVersion}), ~1 min`);
    await run(
      "bash",
      [
        join(repoRoot, "tools/image/node-base.sh"),
        host,
        nodeVersion,
        join(dockerDir(), "base-work"),
        base,
        `${registryHost}/node:${nodeVersion}`,
      ],
      { maxBuffer: 16 << 20 },
    ).catch((e: { stderr?: string; message: string }) => {
      throw new Error(`making the base image ${base} failed: ${e.stderr?.trim() || e.message}`, { cause: e });
    });
  }
  log(`building ${refs.join(", ")}`);
  // --network host: our dockerd has no bridge, so a RUN step (npm ci, apt-get) has no other network.
  await docker(host, ["build", "--network", "host", "-t", refs[1]!, repoRoot], { env: { ...process.env, DOCKER_BUILDKIT: "1" } });
  mkdirSync(dir, { recursive: true });
  const tmp = `${tar}.tmp-${process.pid}`;
  // Other worktrees share this dockerd and directory: the Deployment's name is tagged and saved under a lock, so a
  // tar never holds another build's image under that name.
  const d = (args: string) => `${dockerClient} -H '${host}' ${args}`;
  await run(
    "flock",
    [join(dir, ".operator-image.lock"), "sh", "-c", `${d(`tag ${refs[1]} ${refs[0]}`)} && ${d(`save -o '${tmp}' ${refs.join(" ")}`)}`],
    {
      maxBuffer: 16 << 20,
    },
  ).catch((e: { stderr?: string; message: string }) => {
    throw new Error(`saving ${refs.join(", ")} failed: ${e.stderr?.trim() || e.message}`, { cause: e });
  });
  chmodSync(tmp, 0o644);
  renameSync(tmp, tar);
  pruneOld(dir, keepTars, tar);
  // Images whose tar is gone pin layers nothing uses; an hour's grace spares one another build is still saving.
  const kept = new Set(readdirSync(dir).map((f) => /^stockade-([0-9a-f]{16})\.tar$/.exec(f)?.[1]));
  const listed = await docker(host, ["images", "--format", "{{.Repository}}:{{.Tag}}\t{{.CreatedAt}}", `${registryHost}/stockade`]);
  const stale = listed
    .split("\n")
    .map((l) => l.split("\t"))
    .filter(
      ([r, at]) => r && at && !kept.has(r.split(":")[1]) && Date.now() - Date.parse(at.split(" ").slice(0, 2).join("T") + "Z") > 3600_000,
    )
    .map(([r]) => r!);
  if (stale.length > 0) await docker(host, ["rmi", ...stale]).catch(() => {});
  return { ref: refs[0]!, refs, tar };
}
