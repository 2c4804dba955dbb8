// manifests/Kustomization makes the bundle a kustomize base (`kubectl apply -k`, or a user's overlay listing the
// directory) without changing what `kubectl apply -f manifests/` applies. Runs the lab's kubectl offline: no cluster.
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, relative } from "node:path";
import { promisify } from "node:util";
import { loadAllYaml, type V1DaemonSet } from "@kubernetes/client-node";
import { ensureBins, repoRoot } from "../../lab/bins.ts";
import { LAB_AGENT_TIMINGS, nodeAgentManifests, nodeAgentOverlay } from "../../lab/node-agent-install.ts";
import { deploymentImage, overlayKustomization, splitImage } from "../../lab/operator-install.ts";
import { WATCHDOG_DEVICE, WATCHDOG_HOST_PATH } from "../../lab/watchdog.ts";

const run = promisify(execFile);
const manifests = join(repoRoot, "manifests");
type Obj = { apiVersion: string; kind: string; metadata: { name: string; namespace?: string } };
const key = (o: Obj) => `${o.apiVersion} ${o.kind} ${o.metadata.namespace ?? ""}/${o.metadata.name}`;
const byKey = (objs: Obj[]) => new Map(objs.map((o) => [key(o), o]));
// kubectl must not find a cluster: both commands are meant to work without one.
const offline = { ...process.env, KUBECONFIG: "/dev/null" };

/** The files `kubectl apply -f manifests/` reads: every .yaml/.yml/.json file in the directory (not examples/). */
const appliedFiles = () =>
  readdirSync(manifests, { withFileTypes: true })
    .filter((e) => e.isFile() && /\.(ya?ml|json)$/.test(e.name))
    .map((e) => e.name)
    .sort();

test("manifests/Kustomization lists exactly the files `kubectl apply -f manifests/` applies, in their order", () => {
  const k = loadAllYaml(readFileSync(join(manifests, "Kustomization"), "utf8"))[0] as { kind: string; resources: string[] };
  assert.equal(k.kind, "Kustomization");
  assert.deepEqual(k.resources, appliedFiles(), "a manifest file is missing from manifests/Kustomization's resources (or listed but gone)");
});

test("`kubectl kustomize manifests/` yields the objects of the 00…08 files, unchanged", async () => {
  const { stdout } = await run(ensureBins().kubectl, ["kustomize", manifests], { env: offline, maxBuffer: 64 << 20 });
  const built = byKey((loadAllYaml(stdout) as Obj[]).filter(Boolean));
  const files = byKey(appliedFiles().flatMap((f) => (loadAllYaml(readFileSync(join(manifests, f), "utf8")) as Obj[]).filter(Boolean)));
  assert.deepEqual([...built.keys()].sort(), [...files.keys()].sort());
  for (const [k, o] of files) assert.deepEqual(built.get(k), o, `${k} differs after kustomize`);
});

test("`kubectl … -f manifests/` does not read Kustomization (it has apiVersion and kind, so it would be applied)", async () => {
  // `annotate --local` reads the directory with the same file visitor as `apply -f`, and needs no server.
  const { stdout } = await run(ensureBins().kubectl, ["annotate", "--local", "-f", manifests, "stockade.io/probe=1", "-o", "yaml"], {
    env: offline,
    maxBuffer: 64 << 20,
  });
  const objs = (loadAllYaml(stdout) as Obj[]).filter(Boolean);
  assert.ok(!objs.some((o) => o.kind === "Kustomization"), "kubectl -f read manifests/Kustomization");
  const files = appliedFiles().flatMap((f) => (loadAllYaml(readFileSync(join(manifests, f), "utf8")) as Obj[]).filter(Boolean));
  assert.deepEqual(objs.map(key).sort(), files.map(key).sort());
});

test("a user's overlay of manifests/ (lab/operator-install.ts writes the lab's) changes the Deployment's image and nothing else", async () => {
  const dir = join(mkdtempSync(join(tmpdir(), "stockade-overlay-")), "overlay");
  mkdirSync(dir);
  const image = deploymentImage();
  assert.deepEqual(splitImage("registry.example:5000/team/stockade:1.2"), { name: "registry.example:5000/team/stockade", tag: "1.2" });
  assert.deepEqual(splitImage("registry.example:5000/stockade"), { name: "registry.example:5000/stockade", tag: undefined });
  writeFileSync(
    join(dir, "kustomization.yaml"),
    overlayKustomization({ resources: relative(dir, manifests), image, ref: "stockade.lab/stockade:0123abcd" }),
  );
  const kubectl = ensureBins().kubectl;
  const [base, over] = await Promise.all(
    [manifests, dir].map(async (d) => (await run(kubectl, ["kustomize", d], { env: offline, maxBuffer: 64 << 20 })).stdout),
  );
  const images = (text: string) => [...text.matchAll(/^\s+image: (\S+)$/gm)].map((m) => m[1]);
  assert.deepEqual(images(base!), [image]);
  assert.deepEqual(images(over!), ["stockade.lab/stockade:0123abcd"]);
  assert.equal(over, base!.replace(`image: ${image}`, "image: stockade.lab/stockade:0123abcd"));
});

test("manifests/node-agent/Kustomization lists its files; the lab's overlay changes the image, the watchdog's path, privileged and the timings only", async () => {
  const dir = join(mkdtempSync(join(tmpdir(), "stockade-overlay-")), "node-agent-overlay");
  mkdirSync(dir);
  const files = readdirSync(nodeAgentManifests)
    .filter((f) => /\.(ya?ml|json)$/.test(f))
    .sort();
  const k = loadAllYaml(readFileSync(join(nodeAgentManifests, "Kustomization"), "utf8"))[0] as { resources: string[] };
  assert.deepEqual(k.resources, files);
  const image = (loadAllYaml(readFileSync(join(nodeAgentManifests, "02-daemonset.yaml"), "utf8")) as V1DaemonSet[])[0]!.spec!.template.spec!
    .containers[0]!.image!;
  writeFileSync(
    join(dir, "kustomization.yaml"),
    nodeAgentOverlay({
      resources: relative(dir, nodeAgentManifests),
      image,
      ref: "stockade.lab/stockade:0123abcd",
      timings: LAB_AGENT_TIMINGS,
    }),
  );
  const kubectl = ensureBins().kubectl;
  const [base, over] = await Promise.all(
    [nodeAgentManifests, dir].map(async (d) =>
      (loadAllYaml((await run(kubectl, ["kustomize", d], { env: offline, maxBuffer: 64 << 20 })).stdout) as Obj[]).filter(Boolean),
    ),
  );
  assert.deepEqual(over!.map(key), base!.map(key), "the same objects");
  const ds = (objs: Obj[]) => objs.find((o) => o.kind === "DaemonSet") as unknown as V1DaemonSet;
  const [b, o] = [ds(base!), ds(over!)];
  const [bc, oc] = [b.spec!.template.spec!.containers[0]!, o.spec!.template.spec!.containers[0]!];
  assert.equal(oc.image, "stockade.lab/stockade:0123abcd");
  assert.equal(bc.securityContext?.privileged, true);
  assert.equal(oc.securityContext?.privileged, false);
  assert.equal(oc.securityContext?.readOnlyRootFilesystem, true, "the rest of the securityContext is kept");
  const plain = (x: unknown): unknown => JSON.parse(JSON.stringify(x));
  assert.deepEqual(plain(oc.volumeMounts), [{ name: "lab-watchdog", mountPath: WATCHDOG_HOST_PATH, readOnly: true }]);
  assert.deepEqual(plain(o.spec!.template.spec!.volumes), [
    { name: "lab-watchdog", hostPath: { path: WATCHDOG_HOST_PATH, type: "Directory" } },
  ]);
  assert.ok(oc.args!.includes(`--watchdog-device=${WATCHDOG_DEVICE}`) && oc.args!.includes("--deadline-seconds=12"), oc.args!.join(" "));
  assert.deepEqual(oc.env, bc.env, "the environment is the manifest's");
  // Everything else as the manifest says.
  const strip = (d: V1DaemonSet) => {
    const c = structuredClone(d);
    const cc = c.spec!.template.spec!.containers[0]!;
    delete cc.image;
    delete cc.args;
    delete cc.securityContext;
    delete cc.volumeMounts;
    delete c.spec!.template.spec!.volumes;
    return c;
  };
  assert.deepEqual(strip(o), strip(b));
  for (const kind of ["Namespace", "ServiceAccount", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"])
    assert.deepEqual(
      over!.filter((x) => x.kind === kind),
      base!.filter((x) => x.kind === kind),
      `${kind} unchanged`,
    );
});
