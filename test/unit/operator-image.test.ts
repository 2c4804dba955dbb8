// The operator image's pure parts: the cache key over the build's inputs, the Deployment's image name and the
// Dockerfile's NODE_IMAGE default (lab/operator-image.ts).
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { repoRoot } from "../../lab/bins.ts";
import { deploymentImage, imageKey, nodeImageDefault } from "../../lab/operator-image.ts";

test("imageKey: order-independent, changes with any name, content or the extra input", () => {
  const files = [
    { path: "Dockerfile", data: "FROM x" },
    { path: "src/main.ts", data: Buffer.from("console.log(1)") },
  ];
  const k = imageKey(files, "24.21.0");
  assert.match(k, /^[0-9a-f]{16}$/);
  assert.equal(imageKey([...files].reverse(), "24.21.0"), k);
  assert.notEqual(imageKey([files[0]!, { path: "src/main.ts", data: "console.log(2)" }], "24.21.0"), k);
  assert.notEqual(imageKey([files[0]!, { path: "src/other.ts", data: "console.log(1)" }], "24.21.0"), k);
  assert.notEqual(imageKey(files, "24.22.0"), k);
  // Name and contents are delimited: moving bytes between them is a different key.
  assert.notEqual(imageKey([{ path: "ab", data: "c" }]), imageKey([{ path: "a", data: "bc" }]));
});

test("deploymentImage: the one container image of a Deployment manifest", () => {
  assert.equal(deploymentImage(readFileSync(join(repoRoot, "manifests/03-deployment.yaml"), "utf8")), "ghcr.io/stockade-io/stockade:0.1.0");
  assert.equal(deploymentImage('spec:\n  containers:\n    - name: a\n      image: "r.example/a:1" # pinned\n'), "r.example/a:1");
  assert.equal(deploymentImage("containers:\n  - image: r/a:1\n  - image: r/a:1\n"), "r/a:1");
  assert.throws(
    () => deploymentImage("containers:\n  - image: r/a:1\n  - image: r/b:1\n"),
    /exactly one container image.*found 2: r\/a:1, r\/b:1/,
  );
  assert.throws(() => deploymentImage("kind: Deployment\n"), /found 0: none/);
});

test("nodeImageDefault: the Dockerfile's ARG NODE_IMAGE default", () => {
  assert.equal(nodeImageDefault(readFileSync(join(repoRoot, "Dockerfile"), "utf8")), "node:24-bookworm-slim");
  assert.equal(nodeImageDefault("ARG X=1\nARG NODE_IMAGE=my.registry/node:24\nFROM ${NODE_IMAGE}\n"), "my.registry/node:24");
  assert.throws(() => nodeImageDefault("ARG NODE_IMAGE\nFROM x\n"), /no `ARG NODE_IMAGE=<image>` default/);
});
