// The fence_* stdin contract, checked against a shell-script double on PATH that also describes itself
// (`-o metadata`) like a fencing.py agent, so the operator's metadata-driven rules apply to it.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { chmodSync, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { delimiter, join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { AgentError, type AgentContext } from "../../src/agents/types.ts";
import { FenceAgentDriver, resolveAgent } from "../../src/agents/fence-agent.ts";
import { driverFor } from "../../src/agents/registry.ts";
import { fenceOff, runOperation } from "../../src/agents/run.ts";

const PASSWORD = "Pa55-w0rd-on-stdin-only";

// Records how it was called, then behaves as its "plug" parameter says.
const DOUBLE = `#!/bin/sh
dir=$(dirname "$0")
if [ "$1" = "-o" ] && [ "$2" = "metadata" ]; then
  echo x >> "$dir/metadata-calls"
  cat <<'XML'
<?xml version="1.0" ?>
<resource-agent name="fence_testdouble" shortdesc="A double" >
<parameters>
  <parameter name="action" unique="0" required="1"><getopt mixed="-o, --action=[action]" /><content type="string" default="reboot" /><shortdesc lang="en">Fencing action</shortdesc></parameter>
  <parameter name="ip" unique="0" required="1" obsoletes="ipaddr"><getopt mixed="-a, --ip=[ip]" /><content type="string" /><shortdesc lang="en">IP address or hostname of fencing device</shortdesc></parameter>
  <parameter name="ipaddr" unique="0" required="1" deprecated="1"><getopt mixed="-a, --ip=[ip]" /><content type="string" /><shortdesc lang="en">IP address or hostname of fencing device</shortdesc></parameter>
  <parameter name="ipport" unique="0" required="0"><getopt mixed="-u, --ipport=[port]" /><content type="integer" default="623" /><shortdesc lang="en">TCP/UDP port</shortdesc></parameter>
  <parameter name="username" unique="0" required="0" obsoletes="login"><getopt mixed="-l, --username=[name]" /><content type="string" /><shortdesc lang="en">Login name</shortdesc></parameter>
  <parameter name="password" unique="0" required="0" obsoletes="passwd"><getopt mixed="-p, --password=[password]" /><content type="string" /><shortdesc lang="en">Login password or passphrase</shortdesc></parameter>
  <parameter name="passwd_script" unique="0" required="0" deprecated="1"><getopt mixed="-S, --password-script=[script]" /><content type="string" /><shortdesc lang="en">Script to run to retrieve password</shortdesc></parameter>
  <parameter name="password_script" unique="0" required="0" obsoletes="passwd_script"><getopt mixed="-S, --password-script=[script]" /><content type="string" /><shortdesc lang="en">Script to run to retrieve password</shortdesc></parameter>
  <parameter name="plug" unique="0" required="0" obsoletes="port"><getopt mixed="-n, --plug=[id]" /><content type="string" /><shortdesc lang="en">Physical plug number on device</shortdesc></parameter>
  <parameter name="lanplus" unique="0" required="0"><getopt mixed="-P, --lanplus" /><content type="boolean" default="0" /><shortdesc lang="en">Use Lanplus</shortdesc></parameter>
  <parameter name="method" unique="0" required="0"><getopt mixed="-m, --method=[method]" /><content type="select" default="onoff"><option value="onoff" /><option value="cycle" /></content><shortdesc lang="en">Method to fence</shortdesc></parameter>
  <parameter name="login_timeout" unique="0" required="0"><getopt mixed="--login-timeout=[seconds]" /><content type="second" default="5" /><shortdesc lang="en">Wait X seconds for cmd prompt after login</shortdesc></parameter>
  <parameter name="ipmitool_path" unique="0" required="0"><getopt mixed="--ipmitool-path=[path]" /><content type="string" default="/usr/bin/ipmitool" /><shortdesc lang="en">Path to ipmitool binary</shortdesc></parameter>
</parameters>
<actions><action name="on" /><action name="off" /><action name="status" /><action name="metadata" /></actions>
</resource-agent>
XML
  exit 0
fi
printf '%s\\n' "$@" > "$dir/argv"
ps -o args= -p $$ > "$dir/ps"
tr '\\000' ' ' < /proc/$$/cmdline > "$dir/cmdline"
cat > "$dir/stdin"
echo $$ > "$dir/pid"
action=$(sed -n 's/^action=//p' "$dir/stdin")
mode=$(sed -n 's/^plug=//p' "$dir/stdin")
pw=$(sed -n 's/^password=//p' "$dir/stdin")
case "$mode" in
  on) exit 0 ;;
  off) if [ "$action" = status ]; then exit 2; fi; exit 0 ;;
  fail) echo "2026-01-01 00:00:00,000 ERROR: Failed: Unable to obtain correct plug status (tried password $pw)" >&2; exit 1 ;;
  garbage) echo "Traceback (most recent call last): KeyError: '$pw' %%$%#@!" >&2; echo "@@@ random junk" ; exit 3 ;;
  unreachable) echo "2026-01-01 00:00:00,000 ERROR: Connection timed out" >&2; exit 1 ;;
  privileges) echo "ERROR: Failed: The user does not have the correct privileges to do the requested action." >&2; exit 1 ;;
  hang) sleep 1000 & echo $! > "$dir/child"; wait ;;
  *) echo "unknown mode $mode" >&2; exit 1 ;;
esac
`;

let dir: string;
let savedPath: string | undefined;
const file = (name: string) => readFileSync(join(dir, name), "utf8");
const ctxFor = (mode: string, signal = new AbortController().signal): AgentContext => ({
  node: "node-1",
  parameters: { ip: "10.0.0.1", username: "admin", password: PASSWORD, plug: mode },
  annotations: {},
  signal,
});
const alive = (pid: number) => {
  try {
    process.kill(pid, 0);
    // A zombie still answers signal 0; it is dead for our purpose.
    return !/^\d+ \(.*\) Z/.test(readFileSync(`/proc/${pid}/stat`, "utf8"));
  } catch {
    return false;
  }
};

before(() => {
  dir = mkdtempSync(join(tmpdir(), "stockade-fence-double-"));
  writeFileSync(join(dir, "fence_testdouble"), DOUBLE);
  chmodSync(join(dir, "fence_testdouble"), 0o755);
  savedPath = process.env.PATH;
  process.env.PATH = `${dir}${delimiter}${savedPath ?? ""}`;
});
after(() => {
  process.env.PATH = savedPath;
  rmSync(dir, { recursive: true, force: true });
});

describe("fence agent stdin contract", () => {
  const driver = new FenceAgentDriver("fence_testdouble");

  test("runs with no arguments; action and every parameter go to stdin as key=value lines", async () => {
    await driver.power(ctxFor("on"), "off");
    assert.equal(file("argv"), "\n", "no arguments");
    assert.equal(file("stdin"), `action=off\nip=10.0.0.1\nusername=admin\npassword=${PASSWORD}\nplug=on\n`);
    for (const seen of [file("argv"), file("ps"), file("cmdline")]) assert.ok(!seen.includes(PASSWORD), `password visible in: ${seen}`);
    assert.match(file("ps"), /fence_testdouble/, "ps saw the double");
  });

  test("exit codes: status 0 = on, 2 = off, 1 = failure; off/on 0 = success, anything else failure", async () => {
    assert.equal(await driver.status(ctxFor("on")), "on");
    assert.equal(await driver.status(ctxFor("off")), "off");
    await driver.power(ctxFor("off"), "off");
    await driver.power(ctxFor("on"), "on");
    await assert.rejects(driver.status(ctxFor("fail")), (e: AgentError) => e.kind === "Failed" && /exited with 1/.test(e.message));
    await assert.rejects(driver.power(ctxFor("fail"), "off"), (e: AgentError) => e.kind === "Failed");
    await assert.rejects(driver.power(ctxFor("garbage"), "on"), (e: AgentError) => e.kind === "Failed" && /exited with 3/.test(e.message));
  });

  test("failures carry a short, redacted excerpt of stderr", async () => {
    const e = await driver.status(ctxFor("fail")).catch((x: AgentError) => x);
    assert.ok(e instanceof AgentError);
    assert.match(
      e.message,
      /^fence_testdouble status exited with 1 \(expected 0 = on, 2 = off\): ERROR: Failed: Unable to obtain correct plug status/,
    );
    assert.ok(!e.message.includes(PASSWORD));
    assert.match(e.message, /tried password \*\*\*/);
  });

  test("garbage output and an unexpected status exit code are BadOutput with a clear message", async () => {
    const e = await driver.status(ctxFor("garbage")).catch((x: AgentError) => x);
    assert.ok(e instanceof AgentError);
    assert.equal(e.kind, "BadOutput");
    assert.match(e.message, /fence_testdouble status exited with 3 \(expected 0 = on, 2 = off\): Traceback/);
    assert.ok(!e.message.includes(PASSWORD));
    assert.ok(e.message.length < 400);
  });

  test("the fencing library's standard messages map to error kinds", async () => {
    await assert.rejects(driver.status(ctxFor("unreachable")), (e: AgentError) => e.kind === "Unreachable");
    await assert.rejects(driver.power(ctxFor("privileges"), "off"), (e: AgentError) => e.kind === "AuthFailed");
  });

  test("a hung agent and its children are SIGKILLed when the signal aborts", async () => {
    rmSync(join(dir, "child"), { force: true });
    const ac = new AbortController();
    const p = driver.status(ctxFor("hang", ac.signal));
    for (let i = 0; i < 100 && !existsSync(join(dir, "child")); i++) await sleep(20);
    const pid = Number(file("pid"));
    const child = Number(file("child"));
    assert.ok(alive(pid) && alive(child));
    const t0 = Date.now();
    ac.abort();
    await assert.rejects(p, (e: AgentError) => e.kind === "TimedOut");
    assert.ok(Date.now() - t0 < 500);
    await sleep(100);
    assert.equal(alive(pid), false, "the agent is gone");
    assert.equal(alive(child), false, "its child is gone too");
  });

  test("through the runner: a hung agent is TimedOut at the deadline, messages never hold the password", async () => {
    const t0 = Date.now();
    const r = await runOperation(driver, ctxFor("hang"), "off", { timeoutMs: 500, retries: 2, backoffMs: 10 });
    assert.equal(r.outcome, "TimedOut");
    assert.ok(Date.now() - t0 < 1500, `took ${Date.now() - t0} ms`);
    const fail = await runOperation(driver, ctxFor("fail"), "status", { timeoutMs: 5000, retries: 1, backoffMs: 10 });
    assert.equal(fail.outcome, "Failed");
    assert.equal(fail.tries, 2);
    const off = await fenceOff(driver, ctxFor("off"), { timeoutMs: 5000, retries: 0, backoffMs: 0 });
    assert.deepEqual([off.outcome, off.power], ["Succeeded", "off"]);
    for (const m of [r.message, fail.message, off.message]) assert.ok(!m.includes(PASSWORD), m);
  });

  test("parameters that would break the stdin format are refused", () => {
    assert.match(driver.validate({ ip: "10.0.0.1", password: "a\naction=on" }).join(), /password contains a line break/);
    assert.match(driver.validate({ ip: "10.0.0.1", action: "reboot" }).join(), /action is set by Stockade/);
    assert.match(driver.validate({ ip: "10.0.0.1", "bad key": "x" }).join(), /cannot be passed/);
    assert.deepEqual(driver.validate({ ip: "1.2.3.4", login_timeout: "5", password: "x=y z", lanplus: "yes", method: "CYCLE" }), []);
  });

  test("the reproduced injection ip=127.0.0.1 -p 9999 -L USER is refused before the agent runs", async () => {
    rmSync(join(dir, "stdin"), { force: true });
    const ctx = { ...ctxFor("on"), parameters: { ...ctxFor("on").parameters, ip: "127.0.0.1 -p 9999 -L USER" } };
    assert.match(driver.validate(ctx.parameters).join(), /parameter ip .*whitespace.*, not "127\.0\.0\.1 -p 9999 -L USER"/);
    await assert.rejects(driver.power(ctx, "off"), (e: AgentError) => e.kind === "Config");
    const r = await runOperation(driver, ctx, "status", { timeoutMs: 2000, retries: 2, backoffMs: 0 });
    assert.deepEqual([r.outcome, r.tries], ["Failed", 0]);
    assert.equal(existsSync(join(dir, "stdin")), false, "the agent never ran");
  });

  test("only what the agent's metadata declares, by its declared type; dangerous and deprecated names refused", () => {
    const ok = { ip: "10.0.0.1", password: "pw" };
    const problems = (extra: Record<string, string>) => driver.validate({ ...ok, ...extra }).join("\n");
    assert.match(
      problems({ ipmitool_path: "/bin/sh" }),
      /ipmitool_path runs a program or a shell command on the operator's host: remove it/,
    );
    assert.match(problems({ password_script: "cat /x" }), /password_script runs a program/);
    assert.match(problems({ passwd_script: "cat /x" }), /passwd_script runs a program/, "the deprecated alias shares the verdict");
    assert.match(problems({ ipaddr: "10.0.0.2" }), /ipaddr is a deprecated alias: use ip/);
    assert.match(problems({ mode: "x" }), /mode is not a parameter of fence_testdouble/);
    assert.match(problems({ ipport: "70000" }), /ipport must be a port number 1-65535, not "70000"/);
    assert.match(problems({ lanplus: "maybe" }), /lanplus must be 1 or 0/);
    assert.match(problems({ method: "off" }), /method must be one of onoff, cycle/);
    assert.match(problems({ login_timeout: "5s" }), /login_timeout must be a whole number of seconds/);
    assert.match(problems({ plug: "-1" }), /plug starts with '-'/);
    assert.match(problems({ ip: "bmc_1!" }), /ip must be a host name/);
    assert.match(driver.validate({ password: "pw" }).join(), /fence_testdouble requires parameter ip/);
    const leaked = driver.validate({ ip: "10.0.0.1", password: " secret-with-space " }).join();
    assert.match(leaked, /password starts or ends with whitespace/);
    assert.ok(!leaked.includes("secret-with-space"), "a credential's value is never quoted");
  });

  test("the metadata is read once per executable, and again when the executable changes", () => {
    const calls = () => (existsSync(join(dir, "metadata-calls")) ? file("metadata-calls").trim().split("\n").length : 0);
    const before = calls();
    for (let i = 0; i < 5; i++) driver.validate({ ip: "10.0.0.1" });
    assert.equal(calls(), before, "cached");
    writeFileSync(join(dir, "fence_testdouble"), DOUBLE + "\n# upgraded\n");
    driver.validate({ ip: "10.0.0.1" });
    assert.equal(calls(), before + 1, "read again after the file changed");
  });
});

describe("finding the agent", () => {
  test("an executable that does not describe itself as a fence agent is refused", () => {
    writeFileSync(join(dir, "fence_notanagent"), "#!/bin/sh\necho usage: fence_notanagent nodename\nexit 1\n");
    chmodSync(join(dir, "fence_notanagent"), 0o755);
    assert.match(driverFor("fenceAgent", "fence_notanagent").validate({}).join(), /fence_notanagent -o metadata exited with 1/);
  });

  test("a missing agent is a Config error that says to install fence-agents", async () => {
    const d = driverFor("fenceAgent", "fence_not_installed_here");
    assert.match(d.validate({}).join(), /install the fence-agents package/);
    const r = await runOperation(d, ctxFor("on"), "status", { timeoutMs: 1000, retries: 2, backoffMs: 0 });
    assert.deepEqual([r.outcome, r.tries], ["Failed", 0]);
    assert.match(r.message, /fence_not_installed_here was not found .*install the fence-agents package/);
  });

  test("names must be bare fence_* names: no paths, no shell", () => {
    for (const bad of ["/usr/sbin/fence_ipmilan", "fence_x;rm -rf /", "../fence_x", "ipmitool", "fence_IPMI", ""]) {
      assert.throws(
        () => driverFor("fenceAgent", bad),
        (e: AgentError) => e.kind === "Config",
        bad,
      );
      assert.equal(resolveAgent(bad), undefined);
    }
    assert.throws(
      () => driverFor("telnet"),
      (e: AgentError) => e.kind === "Config" && /unknown agent type "telnet"/.test(e.message),
    );
  });

  test("PATH first, then /usr/sbin and /sbin even when PATH lacks them", { skip: !existsSync("/usr/sbin/fence_ipmilan") }, () => {
    assert.equal(resolveAgent("fence_testdouble"), join(dir, "fence_testdouble"));
    assert.equal(resolveAgent("fence_ipmilan", "/nonexistent"), "/usr/sbin/fence_ipmilan");
  });
});
