// The fence agent allow-list: parsed from each agent's own metadata, filtered by one rule (no option that runs a
// program or names a file, no deprecated alias), and the same lists in the operator and in the CRD.
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { parseMetadata, verdictFor, unusableAgent } from "../../src/agents/fence-metadata.ts";
import { rulesFromMetadata } from "../../src/agents/fence-agent.ts";
import { REFUSED_PARAMETERS, REVIEWED_PARAMETERS, SECRET_ONLY_PARAMETERS } from "../../src/agents/reviewed-fence-parameters.ts";
import { CRD_FILE, REVIEWED_FILE, crdSource, lists, review, reviewedSource } from "../../tools/gen-fence-agent-rules.ts";

const fixture = (agent: string) => readFileSync(join(import.meta.dirname, "../fixtures/fence-agents", `${agent}.xml`), "utf8");
const ipmilan = parseMetadata(fixture("fence_ipmilan"));
const virsh = parseMetadata(fixture("fence_virsh"));
/** The options of issue 8, item 9, and their aliases. */
const DANGEROUS = [
  "passwd_script",
  "password_script",
  "ipmitool_path",
  "ssh_path",
  "sudo_path",
  "identity_file",
  "ssh_options",
  "debug_file",
  "debug",
];

describe("metadata", () => {
  test("parses names, types, defaults, select options, aliases and actions", () => {
    assert.equal(ipmilan.name, "fence_ipmilan");
    assert.deepEqual(ipmilan.parameters.get("ipport"), {
      name: "ipport",
      type: "integer",
      options: [],
      default: "623",
      required: false,
      deprecated: false,
      getopt: "-u, --ipport=[port]",
      placeholder: "port",
      description: "TCP/UDP port to use for connection with device",
    });
    assert.deepEqual(ipmilan.parameters.get("privlvl")?.options, ["callback", "user", "operator", "administrator"]);
    assert.equal(ipmilan.parameters.get("ip")?.obsoletes, "ipaddr");
    assert.equal(ipmilan.parameters.get("ipaddr")?.deprecated, true);
    assert.ok(ipmilan.actions.has("off") && ipmilan.actions.has("status"));
    assert.throws(() => parseMetadata("usage: fence_ack_manual <nodename>"), /not fence agent metadata/);
  });
});

describe("the rule", () => {
  test("every option of the issue is refused with why, under each of its names", () => {
    for (const m of [ipmilan, virsh])
      for (const name of DANGEROUS.filter((d) => m.parameters.has(d))) {
        const v = verdictFor(m, name);
        assert.ok(v?.kind === "refused" && /runs a program|names a file/.test(v.reason), `${m.name} ${name}: ${JSON.stringify(v)}`);
      }
    assert.ok(["ipmitool_path", "sudo_path", "passwd_script", "password_script", "debug_file"].every((d) => ipmilan.parameters.has(d)));
    assert.ok(["ssh_path", "identity_file", "ssh_options"].every((d) => virsh.parameters.has(d)));
  });

  test("deprecated aliases are refused in favour of their replacement; action and lying options too", () => {
    assert.deepEqual(verdictFor(ipmilan, "ipaddr"), { kind: "refused", category: "deprecated", reason: "is a deprecated alias: use ip" });
    assert.deepEqual(verdictFor(ipmilan, "passwd"), {
      kind: "refused",
      category: "deprecated",
      reason: "is a deprecated alias: use password",
    });
    assert.equal(verdictFor(virsh, "port")?.kind, "refused", "port is plug's old name");
    assert.match(JSON.stringify(verdictFor(ipmilan, "action")), /set by Stockade/);
    assert.match(JSON.stringify(verdictFor(virsh, "missing_as_off")), /proof that the machine is off/);
    assert.match(JSON.stringify(verdictFor(ipmilan, "help")), /exit 0 without fencing/);
  });

  test("credentials: only a Secret may supply password and the like; username may come from either", () => {
    assert.deepEqual(verdictFor(ipmilan, "password"), { kind: "credential", secretOnly: true });
    assert.deepEqual(verdictFor(ipmilan, "hexadecimal_kg"), { kind: "credential", secretOnly: true });
    assert.deepEqual(verdictFor(ipmilan, "username"), { kind: "credential", secretOnly: false });
    assert.deepEqual([...rulesFromMetadata(ipmilan).credentials].sort(), ["hexadecimal_kg", "password", "username"]);
  });

  test("a name the installed agent declares but this Stockade version did not review is refused", () => {
    const rules = rulesFromMetadata(ipmilan, new Set(["ip", "password"]));
    assert.deepEqual(rules.verdict("ip"), { kind: "allowed" });
    assert.match(JSON.stringify(rules.verdict("lanplus")), /not among the fence agent parameters this Stockade version reviewed/);
  });

  test("an agent without a status action is unusable", () => {
    const kdump = { ...ipmilan, name: "fence_kdump", actions: new Set(["off", "monitor"]) };
    assert.match(unusableAgent(kdump)!, /fence_kdump has no status action/);
    assert.equal(unusableAgent(ipmilan), undefined);
  });

  test("the committed lists are consistent: refused and allowed are disjoint, every secret-only name is allowed", () => {
    for (const n of Object.keys(REFUSED_PARAMETERS)) assert.ok(!REVIEWED_PARAMETERS.has(n), n);
    for (const n of SECRET_ONLY_PARAMETERS) assert.ok(REVIEWED_PARAMETERS.has(n), n);
    for (const d of DANGEROUS) assert.ok(d in REFUSED_PARAMETERS, d);
    assert.ok(REVIEWED_PARAMETERS.has("ssh"), "the ssh switch selects no program, file or argument (docs/api.md)");
  });
});

test("docs/api.md names every refused option", () => {
  const docs = readFileSync(join(import.meta.dirname, "../../docs/api.md"), "utf8");
  const missing = Object.keys(REFUSED_PARAMETERS).filter((n) => /^[a-z_]+$/.test(n) && !docs.includes(`\`${n}\``));
  assert.deepEqual(missing, []);
});

const installed = existsSync("/usr/sbin/fence_ipmilan");
describe("generated from the installed agents", { skip: !installed && "fence-agents is not installed (/usr/sbin/fence_ipmilan)" }, () => {
  test("every installed agent: the issue's options are refused wherever declared; the committed lists and CRD match the generator", async () => {
    const r = await review();
    assert.ok(r.agents.size >= 80, `expected the Debian fence-agents set, found ${r.agents.size} agents`);
    for (const m of r.agents.values())
      for (const name of DANGEROUS.filter((d) => m.parameters.has(d)))
        assert.equal(verdictFor(m, name)?.kind, "refused", `${m.name} ${name}`);
    const l = lists(r);
    assert.equal(
      readFileSync(REVIEWED_FILE, "utf8"),
      await reviewedSource(l),
      "src/agents/reviewed-fence-parameters.ts is stale: npm run gen:fence-rules",
    );
    assert.equal(
      readFileSync(CRD_FILE, "utf8"),
      await crdSource(l),
      "the generated rules in crds/stockade.io_fenceagents.yaml are stale: npm run gen:fence-rules",
    );
  });
});
