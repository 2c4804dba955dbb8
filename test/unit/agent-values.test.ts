// Every parameter value is checked by its type before any agent runs: the reproduced injection
// `ip=127.0.0.1 -p 9999 -L USER` (extra ipmitool flags through fence_ipmilan) never reaches a command line.
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { credentialProblem, hostProblem, normalizeHost, plainProblem, portProblem, usernameProblem } from "../../src/agents/values.ts";
import { ipmiDriver, ipmiRules } from "../../src/agents/ipmi.ts";
import { rulesFromMetadata } from "../../src/agents/fence-agent.ts";
import { parseMetadata } from "../../src/agents/fence-metadata.ts";
import { redact, runOperation } from "../../src/agents/run.ts";

const INJECTION = "127.0.0.1 -p 9999 -L USER";
const fixture = (agent: string) => readFileSync(join(import.meta.dirname, "../fixtures/fence-agents", `${agent}.xml`), "utf8");
const ipmilan = rulesFromMetadata(parseMetadata(fixture("fence_ipmilan")));
const apc = rulesFromMetadata(parseMetadata(fixture("fence_apc")));

describe("value syntax", () => {
  test("hosts: names and IP literals; never whitespace, flags, URLs or bad numbers", () => {
    for (const ok of ["10.0.0.7", "bmc-1.example.com", "bmc-1.example.com.", "BMC1", "::1", "[fe80::1]", "2001:db8::7"])
      assert.equal(hostProblem(ok), undefined, ok);
    for (const bad of [INJECTION, "-oProxyCommand=x", "", "256.1.1.1", "10.0.0", "https://bmc", "bmc_1", "a..b", "bmc\n1", "[10.0.0.1]"])
      assert.notEqual(hostProblem(bad), undefined, JSON.stringify(bad));
    assert.match(hostProblem(INJECTION)!, /whitespace/);
  });

  test("host normalisation makes spellings of one host equal", () => {
    assert.equal(normalizeHost("BMC-1.Example.com."), "bmc-1.example.com");
    assert.equal(normalizeHost("[2001:DB8:0:0:0:0:0:7]"), normalizeHost("2001:db8::7"));
  });

  test("ports, plain strings, user names, credentials", () => {
    for (const p of ["1", "623", "65535"]) assert.equal(portProblem(p), undefined);
    for (const p of ["0", "65536", "-1", "623 ", "0x10", "", "99999999"]) assert.notEqual(portProblem(p), undefined, p);
    assert.equal(plainProblem("a,b=c/d:e"), undefined);
    for (const v of ["a b", "a\tb", "a\nb", "-x", "", "a\u00a0b", "a\u0085b"])
      assert.notEqual(plainProblem(v), undefined, JSON.stringify(v));
    for (const u of ["admin", "DOMAIN\\user", "a.b@c", "op+1"]) assert.equal(usernameProblem(u), undefined, u);
    for (const u of ["-admin", "a b", "a;b", "a'b", "", "x".repeat(65)]) assert.notEqual(usernameProblem(u), undefined, u);
    // A password may hold spaces and quotes inside (it travels on stdin, fence_ipmilan quotes it for ipmitool).
    assert.equal(credentialProblem(`p a"s's`), undefined);
    for (const c of ["pw\n", "a\rb", " pw", "pw ", '"pw"', ""]) assert.notEqual(credentialProblem(c), undefined, JSON.stringify(c));
  });
});

describe("ipmi", () => {
  const good = { address: "10.0.0.7", port: "623", username: "admin", password: "pw" };

  test("typed values: address, port 1-65535, cipher 0-17, interface and privilege enums, user name charset", () => {
    assert.deepEqual(ipmiRules.check(good), []);
    assert.deepEqual(ipmiRules.check({ ...good, cipher: "17", interface: "lan", privilege: "operator" }), []);
    const p = (extra: Record<string, string>) => ipmiRules.check({ ...good, ...extra }).join("\n");
    assert.match(p({ address: INJECTION }), /address contains whitespace or a control character, .*not "127\.0\.0\.1 -p 9999 -L USER"/);
    assert.match(p({ address: "-H" }), /address starts with '-'/);
    assert.match(p({ port: "0" }), /port must be a port number 1-65535/);
    assert.match(p({ cipher: "18" }), /cipher must be an IPMI cipher suite number 0-17/);
    assert.match(p({ interface: "open" }), /interface must be one of lan, lanplus/);
    assert.match(p({ privilege: "ROOT" }), /privilege must be one of CALLBACK, USER, OPERATOR, ADMINISTRATOR, OEM/);
    assert.match(p({ username: "admin -P x" }), /username must be 1-64 letters/);
    assert.match(p({ ip: "10.0.0.7" }), /parameter ip is not an ipmi parameter: ipmi takes address, port/);
    assert.match(
      ipmiRules.check({ username: "a", password: "b" }).join(),
      /address .* is missing: set it in spec\.nodes\.<node>\.parameters/,
    );
  });

  test("the reproduced injection never runs ipmitool: the runner fails before any try", async () => {
    const r = await runOperation(ipmiDriver, { node: "node-1", parameters: { ...good, address: INJECTION }, annotations: {} }, "status", {
      timeoutMs: 2000,
      retries: 2,
      backoffMs: 0,
    });
    assert.deepEqual([r.outcome, r.tries], ["Failed", 0]);
    assert.match(r.message, /not attempted: the ipmi agent is misconfigured: parameter address contains whitespace/);
  });

  test("a password problem never quotes the password", () => {
    const m = ipmiRules.check({ ...good, password: " hunter2 " }).join();
    assert.match(m, /password starts or ends with whitespace/);
    assert.ok(!m.includes("hunter2"));
  });
});

describe("fence agents: values by the type their metadata declares", () => {
  const base = { ip: "10.0.0.7", username: "admin", password: "pw" };
  const p = (rules: typeof ipmilan, extra: Record<string, string>) => rules.check({ ...base, ...extra }).join("\n");

  test("the reproduced injection is refused in ip, and in every other string option", () => {
    assert.match(
      p(ipmilan, { ip: INJECTION }),
      /parameter ip contains whitespace or a control character, .*not "127\.0\.0\.1 -p 9999 -L USER"/,
    );
    assert.match(p(ipmilan, { target: "0x82 -t 0x84" }), /parameter target contains whitespace/);
    assert.match(p(ipmilan, { ipmitool_timeout: "-2" }), /ipmitool_timeout starts with '-'/);
    assert.match(p(apc, { plug: "1 -x" }), /parameter plug contains whitespace/);
  });

  test("integer, second, boolean and select values; ports and hex keys", () => {
    assert.deepEqual(
      ipmilan.check({ ...base, ipport: "6230", lanplus: "1", cipher: "3", privlvl: "ADMINISTRATOR", method: "cycle", delay: "5" }),
      [],
    );
    assert.match(p(ipmilan, { ipport: "70000" }), /ipport must be a port number 1-65535/);
    assert.match(p(ipmilan, { lanplus: "sure" }), /lanplus must be 1 or 0/);
    assert.match(p(ipmilan, { privlvl: "root" }), /privlvl must be one of callback, user, operator, administrator/);
    assert.match(p(ipmilan, { delay: "5s" }), /delay must be a whole number of seconds/);
    assert.match(p(ipmilan, { hexadecimal_kg: "zz" }), /hexadecimal_kg must be 1-40 hexadecimal digits/);
    assert.match(p(ipmilan, { username: "a b" }), /username must be 1-64 letters/);
  });

  test("the new credential kinds are scrubbed from messages like passwords", () => {
    const m = redact("community public-ro, kg 00ff11, snmp pw s3cr3t", {
      community: "public-ro",
      hexadecimal_kg: "00ff11",
      snmp_priv_passwd: "s3cr3t",
    });
    assert.equal(m, "community ***, kg ***, snmp pw ***");
  });

  test("required options from the metadata", () => {
    assert.match(apc.check({ ip: "10.0.0.7", username: "a", password: "b" }).join(), /fence_apc requires parameter plug/);
  });
});
