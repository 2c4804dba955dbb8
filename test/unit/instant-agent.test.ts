// The scale bench's instant fence agent (a test double) must be one the operator's real fenceAgent driver accepts
// and that answers like a fence agent: off then status says off, per plug, and nothing else is touched.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { delimiter, join } from "node:path";
import { FenceAgentDriver } from "../../src/agents/fence-agent.ts";
import type { AgentContext } from "../../src/agents/types.ts";
import { INSTANT_AGENT, installInstantAgent } from "../../lab/instant-agent.ts";

let dir: string;
let savedPath: string | undefined;
before(() => {
  dir = mkdtempSync(join(tmpdir(), "stockade-instant-agent-"));
  installInstantAgent(join(dir, "bin"), join(dir, "power"));
  savedPath = process.env.PATH;
  process.env.PATH = `${join(dir, "bin")}${delimiter}${savedPath ?? ""}`;
});
after(() => {
  process.env.PATH = savedPath;
  rmSync(dir, { recursive: true, force: true });
});

const ctx = (plug: string): AgentContext => ({ node: plug, parameters: { plug }, annotations: {}, signal: new AbortController().signal });

test("the instant test double: the real driver powers one plug off and reads it back, the others stay on", async () => {
  const driver = new FenceAgentDriver(INSTANT_AGENT);
  assert.equal(await driver.status(ctx("scale-00001")), "on");
  await driver.power(ctx("scale-00001"), "off");
  assert.equal(await driver.status(ctx("scale-00001")), "off");
  assert.equal(await driver.status(ctx("scale-00002")), "on");
  await driver.power(ctx("scale-00001"), "on");
  assert.equal(await driver.status(ctx("scale-00001")), "on");
  assert.deepEqual(readdirSync(join(dir, "power")), ["scale-00001"]);
  await assert.rejects(driver.power(ctx("../escape"), "off"), /plug missing or not a plain name/);
});
