// src/api/v1alpha1.ts is generated from crds/; this keeps a CRD change from shipping without its types.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { generate, OUTPUT } from "../../tools/gen-api-types.ts";

test("src/api/v1alpha1.ts is what tools/gen-api-types.ts generates from crds/", async () => {
  assert.equal(readFileSync(OUTPUT, "utf8"), await generate(), "src/api/v1alpha1.ts is out of date: run npm run gen:api");
});
