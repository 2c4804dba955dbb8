// The operator installed in a real-node lab the way a user installs it: its image imported into every node's
// containerd (no registry), a kustomize overlay of manifests/ that only sets the image, `kubectl apply -k`; and
// removed by manifests/README.md's uninstall steps. Tests and `npm run lab -- install` use these.
import { execFile } from "node:child_process";
import { copyFileSync, linkSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join, relative } from "node:path";
import { promisify } from "node:util";
import { AppsV1Api, CoordinationV1Api, loadAllYaml, type V1Deployment, type V1Pod } from "@kubernetes/client-node";
import { repoRoot } from "./bins.ts";
import { waitFor } from "./health.ts";
import { importImages, registryHost } from "./images.ts";
import { operatorImage, type OperatorImage } from "./operator-image.ts";
import { nodePaths } from "./real/config.ts";
import type { Lab } from "./lab.ts";
import { LEADER_LEASE } from "../src/operator.ts";

const run = promisify(execFile);

/** Where the bundle puts the operator (manifests/00-namespace.yaml, 03-deployment.yaml). */
export const OPERATOR_NS = "stockade-system";
export const DEPLOYMENT = "stockade";
export const manifestsDir = join(repoRoot, "manifests");

export type { OperatorImage } from "./operator-image.ts";

/** The name the overlay gives the Deployment's image: the build's own tag under the lab's registry host (a new build is
 * a new pod spec, so a rollout), else `ref`. */
export const overlayRef = (image: OperatorImage) => image.refs.find((r) => r.startsWith(`${registryHost}/`)) ?? image.ref;

export interface Installed {
  /** The image installed (the overlay names overlayRef(image)). */
  image: OperatorImage;
  /** The overlay applied (its directory holds kustomization.yaml). */
  overlay: string;
  /** `Warning:` lines kubectl printed while applying (Pod Security, deprecations): a clean bundle has none. */
  warnings: string[];
  /** Wall time of each step, ms. */
  ms: { import: number; apply: number; ready: number };
}

/** An image tar made by `docker save` (its manifest.json lists the tags): the tag under the lab's registry host, else the first. */
export async function imageFromTar(tar: string): Promise<OperatorImage> {
  const { stdout } = await run("tar", ["-xOf", tar, "manifest.json"], { maxBuffer: 1 << 20 }).catch((err: Error) => {
    throw new Error(`${tar} is not an image saved by docker save (no manifest.json): ${err.message}`);
  });
  const refs = (JSON.parse(stdout) as { RepoTags?: string[] }[]).flatMap((m) => m.RepoTags ?? []);
  const ref = refs.find((r) => r.startsWith("stockade.lab/")) ?? refs[0];
  if (!ref) throw new Error(`${tar} holds no tagged image (docker save <name:tag>)`);
  return { ref, refs, tar };
}

/** The operator image for the lab: $STOCKADE_OPERATOR_IMAGE (a `docker save` tar) if set, else built from the
 * Dockerfile (lab/operator-image.ts, cached by its inputs). */
export async function labOperatorImage(log?: (m: string) => void): Promise<OperatorImage> {
  const tar = process.env.STOCKADE_OPERATOR_IMAGE;
  return tar ? await imageFromTar(tar) : await operatorImage({ log });
}

/** The image the Deployment names, split as kustomize's `images:` does: name, and tag (after the last ':' past the last '/'). */
export function splitImage(ref: string): { name: string; tag: string | undefined } {
  const at = ref.lastIndexOf(":");
  return at > ref.lastIndexOf("/") ? { name: ref.slice(0, at), tag: ref.slice(at + 1) } : { name: ref, tag: undefined };
}

export function deploymentImage(dir = manifestsDir): string {
  const dep = (loadAllYaml(readFileSync(join(dir, "03-deployment.yaml"), "utf8")) as V1Deployment[]).find((d) => d?.kind === "Deployment");
  const image = dep?.spec?.template.spec?.containers[0]?.image;
  if (!image) throw new Error(`no container image in ${join(dir, "03-deployment.yaml")}`);
  return image;
}

/**
 * A user's overlay (manifests/README.md): manifests/ as its only resource, the Deployment's image renamed to `ref`.
 * `resources` is relative to the overlay's directory (kustomize resolves it from there).
 */
export function overlayKustomization(o: { resources: string; image: string; ref: string }): string {
  const from = splitImage(o.image);
  const to = splitImage(o.ref);
  if (!to.tag) throw new Error(`the operator image ${o.ref} has no tag: the overlay pins one`);
  return [
    "apiVersion: kustomize.config.k8s.io/v1beta1",
    "kind: Kustomization",
    `resources: [${JSON.stringify(o.resources)}]`,
    `images: [{ name: ${JSON.stringify(from.name)}, newName: ${JSON.stringify(to.name)}, newTag: ${JSON.stringify(to.tag)} }]`,
    "",
  ].join("\n");
}

/** The operator's pods, newest last. */
export async function operatorPods(lab: Lab): Promise<V1Pod[]> {
  const pods = (await lab.core.listNamespacedPod({ namespace: OPERATOR_NS, labelSelector: "app.kubernetes.io/name=stockade" })).items;
  return pods.sort((a, b) => String(a.metadata?.creationTimestamp).localeCompare(String(b.metadata?.creationTimestamp)));
}

/**
 * The leader: the Lease's holder identity is `<pod>_<suffix>` (src/operator/leadership.ts); undefined while nobody
 * holds it, or while the holder is not among `among` (default: every operator pod, listed now).
 */
export async function leaderPod(lab: Lab, among?: V1Pod[]): Promise<V1Pod | undefined> {
  const lease = await lab.kc
    .makeApiClient(CoordinationV1Api)
    .readNamespacedLease({ namespace: OPERATOR_NS, name: LEADER_LEASE })
    .catch(() => undefined);
  const holder = lease?.spec?.holderIdentity;
  if (!holder) return undefined;
  return (among ?? (await operatorPods(lab))).find((p) => holder.startsWith(`${p.metadata?.name}_`));
}

/** Both replicas Ready (and no old one left), one of them holding the Lease. */
export async function waitForOperator(lab: Lab, timeoutMs = 180_000): Promise<{ pods: V1Pod[]; leader: V1Pod }> {
  const apps = lab.kc.makeApiClient(AppsV1Api);
  return await waitFor(
    "the operator's replicas Ready and a leader",
    async () => {
      const d = await apps.readNamespacedDeployment({ namespace: OPERATOR_NS, name: DEPLOYMENT });
      const want = d.spec?.replicas ?? 1;
      const st = d.status;
      if ((st?.observedGeneration ?? 0) < (d.metadata?.generation ?? 0)) return undefined;
      if (st?.updatedReplicas !== want || st?.readyReplicas !== want || st?.replicas !== want) return undefined;
      const pods = (await operatorPods(lab)).filter((p) => !p.metadata?.deletionTimestamp);
      // The holder must be one of them: an old replica still terminating may hold the Lease until it lets go.
      const leader = await leaderPod(lab, pods);
      return pods.length === want && leader ? { pods, leader } : undefined;
    },
    { timeoutMs, intervalMs: 500 },
  );
}

/**
 * Whether the webhooks answer through their Service: a server-side dry-run of a pod that mounts a claim goes
 * through the claim-lock webhook (failurePolicy Fail: refused while no replica answers). Returns kubectl's error.
 */
export async function webhookRefusal(lab: Lab, namespace = "default"): Promise<string | undefined> {
  const pod = {
    apiVersion: "v1",
    kind: "Pod",
    metadata: { name: "stockade-webhook-probe", namespace },
    spec: {
      containers: [{ name: "c", image: lab.state.real?.pauseImage ?? "registry.k8s.io/pause:3.10" }],
      volumes: [{ name: "data", persistentVolumeClaim: { claimName: "stockade-webhook-probe" } }],
    },
  };
  const file = join(lab.dir, "webhook-probe.json");
  writeFileSync(file, JSON.stringify(pod));
  try {
    await run("kubectl", ["create", "--dry-run=server", "-f", file, "-o", "name"], { env: lab.env });
    return undefined;
  } catch (err) {
    return ((err as { stderr?: string }).stderr ?? String(err)).trim();
  }
}

/**
 * The operator image in every node's containerd (in parallel, no registry), as `overlayRef(image)`: `image`, or the
 * lab's (labOperatorImage). The lab keeps its own link to the tar (the build cache keeps one tar per inputs).
 */
export async function importOperatorImage(lab: Lab, o: { image?: OperatorImage; log?: (m: string) => void }): Promise<OperatorImage> {
  const log = o.log ?? (() => {});
  let image = o.image ?? (await labOperatorImage(log));
  // The build cache keeps one tar (a build for other inputs, e.g. another worktree's, deletes it): the lab holds its own link.
  const tar = join(lab.dir, "operator-image.tar");
  const pin = () => {
    rmSync(tar, { force: true });
    try {
      linkSync(image.tar, tar);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== "EXDEV") throw err;
      copyFileSync(image.tar, tar);
    }
  };
  try {
    pin();
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== "ENOENT" || process.env.STOCKADE_OPERATOR_IMAGE) throw err;
    log(`${image.tar} is gone (a build for other inputs replaced it): building again`);
    image = await operatorImage({ log });
    pin();
  }
  log(`importing ${overlayRef(image)} into ${lab.nodes().length} nodes' containerd`);
  await Promise.all(
    lab.nodes().map((n) => importImages("ctr", nodePaths(lab.machineDir(n)).containerdSocket, [tar], { timeoutMs: 300_000 })),
  );
  return image;
}

/**
 * Installs the operator as a user would: imports `image` into every node's containerd (in parallel), applies an
 * overlay of manifests/ naming it, and waits until both replicas are Ready, the Lease is held and the webhooks
 * answer. Real nodes only (the pods run there).
 */
export async function installOperator(lab: Lab, o: { image?: OperatorImage; log?: (m: string) => void }): Promise<Installed> {
  const log = o.log ?? (() => {});
  if (!lab.state.real) throw new Error("installing the operator in-cluster needs real nodes (npm run lab -- up --runtime real)");
  let t = Date.now();
  const image = await importOperatorImage(lab, o);
  const ms = { import: Date.now() - t, apply: 0, ready: 0 };

  const overlay = join(lab.dir, "operator-overlay");
  mkdirSync(overlay, { recursive: true });
  writeFileSync(
    join(overlay, "kustomization.yaml"),
    overlayKustomization({ resources: relative(overlay, manifestsDir), image: deploymentImage(), ref: overlayRef(image) }),
  );
  log(`kubectl apply -k ${overlay}`);
  t = Date.now();
  // The CRDs and the objects of their kinds are not applied together: nothing in the bundle is a custom resource.
  const { stderr } = await run("kubectl", ["apply", "-k", overlay], { env: lab.env, maxBuffer: 16 << 20 });
  ms.apply = Date.now() - t;
  const warnings = stderr.split("\n").filter((l) => l.startsWith("Warning:"));
  for (const w of warnings) log(w);

  t = Date.now();
  const { leader } = await waitForOperator(lab);
  await waitFor("the operator's webhooks answering through their Service", async () => ((await webhookRefusal(lab)) ? undefined : true), {
    timeoutMs: 60_000,
    intervalMs: 500,
  });
  ms.ready = Date.now() - t;
  log(
    `operator Ready in ${(ms.ready / 1000).toFixed(1)} s (leader ${leader.metadata?.name} on ${leader.spec?.nodeName}); import ${(ms.import / 1000).toFixed(1)} s`,
  );
  return { image, overlay, warnings, ms };
}

/**
 * manifests/README.md's uninstall, step by step, so that the cluster never refuses pods and nothing hangs: no new
 * automatic fence (FencingPolicies deleted), fenced nodes unfenced and their NodeFences deleted while the operator
 * still runs to drop their finalizers, then the webhooks (failurePolicy Fail) before the operator stops, then the rest.
 */
export async function uninstallOperator(
  lab: Lab,
  o: {
    log?: (m: string) => void;
    timeoutMs?: number;
    /** Awaited after each step, named (tests create pods there: the cluster must admit them at every step). */
    after?: (step: string) => Promise<void>;
  } = {},
): Promise<void> {
  const log = o.log ?? (() => {});
  const after = o.after ?? (async () => {});
  const timeout = `${Math.round((o.timeoutMs ?? 180_000) / 1000)}s`;
  const kubectl = async (...args: string[]) => (await run("kubectl", args, { env: lab.env, maxBuffer: 16 << 20 })).stdout;
  const crdsServed = await kubectl("get", "crd", "nodefences.stockade.io", "--ignore-not-found", "-o", "name");
  if (crdsServed.trim()) {
    log("deleting FencingPolicies (no new automatic fence)");
    await kubectl("delete", "fencingpolicies", "--all", "--wait", `--timeout=${timeout}`);
    await after("fencingpolicies deleted");
    const fences = JSON.parse(await kubectl("get", "nodefences", "-o", "json")) as {
      items: { metadata: { name: string }; status?: { phase?: string } }[];
    };
    for (const f of fences.items.filter((x) => x.status?.phase !== "Unfenced")) {
      log(`unfencing ${f.metadata.name}`);
      await kubectl("patch", "nodefence", f.metadata.name, "--type=merge", "-p", '{"spec":{"unfence":true}}');
    }
    for (const f of fences.items)
      await kubectl("wait", `nodefence/${f.metadata.name}`, "--for=jsonpath={.status.phase}=Unfenced", `--timeout=${timeout}`).catch(
        (err: { stderr?: string }) => {
          if (!/NotFound|not found/.test(err.stderr ?? "")) throw new Error(`NodeFence ${f.metadata.name} not Unfenced: ${err.stderr}`);
        },
      );
    await after("nodes unfenced");
    log("deleting NodeFences (the operator drops their finalizers)");
    await kubectl("delete", "nodefences", "--all", "--wait", `--timeout=${timeout}`);
    await after("nodefences deleted");
  }
  log("deleting the webhooks, then the bundle");
  await kubectl("delete", "-f", join(manifestsDir, "08-webhooks.yaml"), "--ignore-not-found");
  await after("webhooks deleted");
  await kubectl("delete", "-f", manifestsDir, "--ignore-not-found", "--wait", `--timeout=${timeout}`);
  await after("bundle deleted");
}
