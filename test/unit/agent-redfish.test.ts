// The pure parts of the native Redfish driver: parameters, PowerState, system discovery, Reset's allowable
// values, task monitors and error classification. The wire is tested against the lab's Redfish simulator and
// the independent Go emulator (test/lab/redfish-*.test.ts).
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { caBundleProblem } from "../../src/agents/values.ts";
import {
  allowedFromActionInfo,
  chooseResetType,
  classifyStatus,
  classifyTransport,
  parseBody,
  pickSystem,
  powerFromState,
  redfishDriver,
  redfishMessage,
  redfishRules,
  resetAction,
  taskStep,
} from "../../src/agents/redfish.ts";
import { AgentError, isPermanent } from "../../src/agents/types.ts";
import { driverFor, rulesFor } from "../../src/agents/registry.ts";

const W = "Redfish service https://10.0.0.7:443";
const base = { address: "10.0.0.7", username: "fence", password: "s3cret pass" };

function selfSignedPem(): string {
  const dir = mkdtempSync(join(tmpdir(), "stockade-unit-redfish-"));
  try {
    execFileSync(
      "openssl",
      ["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=unit-ca", "-keyout", "k.pem", "-out", "c.pem"],
      {
        cwd: dir,
        stdio: "ignore",
      },
    );
    return readFileSync(join(dir, "c.pem"), "utf8");
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

const thrown = (f: () => unknown): AgentError => {
  try {
    f();
  } catch (e) {
    assert.ok(e instanceof AgentError, String(e));
    return e;
  }
  assert.fail("did not throw");
};

describe("redfish parameters", () => {
  test("a complete set passes; the registry knows the type", () => {
    assert.deepEqual(redfishRules.check(base), []);
    assert.deepEqual(
      redfishRules.check({ ...base, port: "8443", systemId: "System.Embedded.1", authMethod: "basic", insecureSkipVerify: "false" }),
      [],
    );
    assert.equal(driverFor("redfish"), redfishDriver);
    assert.equal(rulesFor({ type: "redfish" }), redfishRules);
  });

  test("missing and malformed values are named with the fix", () => {
    const p = redfishRules.check({
      port: "99999",
      systemId: "../Managers/1",
      authMethod: "digest",
      insecureSkipVerify: "yes",
      cipher: "3",
    });
    const all = p.join("\n");
    assert.match(all, /parameter cipher is not a redfish parameter/);
    assert.match(all, /parameter address .* is missing/);
    assert.match(all, /parameter username is missing/);
    assert.match(all, /parameter password is missing: put a password key in the Secret/);
    assert.match(all, /parameter port must be a port number/);
    assert.match(all, /parameter systemId must be a Redfish resource Id/);
    assert.match(all, /authMethod must be one of session, basic/);
    assert.match(all, /insecureSkipVerify must be "true" or "false"/);
    assert.match(redfishRules.check({ ...base, address: "https://bmc" }).join(), /parameter address must be a host name/);
  });

  test("caBundle: PEM certificates only, and not together with insecureSkipVerify", () => {
    const pem = selfSignedPem();
    assert.equal(caBundleProblem(pem), undefined);
    assert.equal(caBundleProblem(pem + pem), undefined);
    assert.match(caBundleProblem("not a pem") ?? "", /no PEM certificate/);
    assert.match(caBundleProblem("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----") ?? "", /certificate 1 does not parse/);
    assert.deepEqual(redfishRules.check({ ...base, caBundle: pem }), []);
    assert.match(redfishRules.check({ ...base, caBundle: pem, insecureSkipVerify: "true" }).join(), /contradict/);
    assert.match(redfishRules.check({ ...base, caBundle: "garbage" }).join(), /parameter caBundle holds no PEM/);
  });

  test("verdicts: password only from a Secret; username and caBundle (no secret) from either", () => {
    assert.deepEqual(redfishRules.verdict("password"), { kind: "credential", secretOnly: true });
    assert.deepEqual(redfishRules.verdict("caBundle"), { kind: "credential", secretOnly: false });
    assert.deepEqual(redfishRules.verdict("username"), { kind: "credential", secretOnly: false });
    assert.deepEqual(redfishRules.verdict("systemId"), { kind: "allowed" });
    assert.equal(redfishRules.verdict("ipport"), undefined);
  });

  test("target: the BMC, and the system on a BMC of several", () => {
    assert.deepEqual(redfishRules.target({ address: "BMC-1.example.com.", port: "443" }), { device: "bmc-1.example.com:443", outlets: [] });
    assert.deepEqual(redfishRules.target({ address: "[fd00::0:7]" }), { device: "fd00::7:443", outlets: [] });
    assert.deepEqual(redfishRules.target({ address: "10.0.0.7", systemId: "2" }), { device: "10.0.0.7:443", outlets: ["2"] });
    assert.equal(redfishRules.target({ port: "443" }), undefined);
  });
});

describe("redfish answers", () => {
  test("PowerState: On/PoweringOn are on, Off is off, PoweringOff and anything else are errors, never off", () => {
    assert.deepEqual(powerFromState("On", W), { kind: "state", power: "on" });
    assert.deepEqual(powerFromState("PoweringOn", W), { kind: "state", power: "on" });
    assert.deepEqual(powerFromState("Off", W), { kind: "state", power: "off" });
    const off = powerFromState("PoweringOff", W);
    assert.ok(off.kind === "error" && off.error.kind === "Failed" && /not off yet/.test(off.error.message));
    for (const v of ["off", "OFF", null, undefined, 0, "Paused"]) {
      const r = powerFromState(v, W);
      assert.ok(r.kind === "error" && r.error.kind === "BadOutput", `${String(v)}: ${JSON.stringify(r)}`);
    }
  });

  test("garbage JSON is BadOutput; an empty body is {}", () => {
    assert.deepEqual(parseBody("", "x"), {});
    assert.equal(thrown(() => parseBody("<html>login</html>", "the service root")).kind, "BadOutput");
    assert.equal(thrown(() => parseBody("[1,2]", "the service root")).kind, "BadOutput");
  });

  test("system discovery: the only one, the named one, never a guess among several", () => {
    const one = { Members: [{ "@odata.id": "/redfish/v1/Systems/437XR1138R2" }] };
    const two = { Members: [{ "@odata.id": "/redfish/v1/Systems/1" }, { "@odata.id": "/redfish/v1/Systems/System.Embedded.2/" }] };
    assert.equal(pickSystem(one, "", W), "/redfish/v1/Systems/437XR1138R2");
    assert.equal(pickSystem(two, "System.Embedded.2", W), "/redfish/v1/Systems/System.Embedded.2/");
    const several = thrown(() => pickSystem(two, "", W));
    assert.equal(several.kind, "Config");
    assert.match(several.message, /manages 2 systems \(1, System\.Embedded\.2\): set parameter systemId/);
    const missing = thrown(() => pickSystem(two, "3", W));
    assert.ok(missing.kind === "Config" && /has no system "3": its systems are 1, System\.Embedded\.2/.test(missing.message));
    assert.equal(thrown(() => pickSystem({ Members: [] }, "", W)).kind, "Failed");
    assert.equal(thrown(() => pickSystem({}, "", W)).kind, "BadOutput");
  });

  test("Reset: ForceOff and On checked against the allowable values (or the ActionInfo's)", () => {
    const sys = {
      Actions: {
        "#ComputerSystem.Reset": {
          target: "/redfish/v1/Systems/1/Actions/ComputerSystem.Reset",
          "ResetType@Redfish.AllowableValues": ["On", "ForceOff", "GracefulShutdown", "ForceRestart"],
        },
      },
    };
    const a = resetAction(sys, W);
    assert.equal(a.target, "/redfish/v1/Systems/1/Actions/ComputerSystem.Reset");
    assert.equal(chooseResetType("off", a.allowed, W), "ForceOff");
    assert.equal(chooseResetType("on", a.allowed, W), "On");
    assert.equal(chooseResetType("on", ["ForceOn", "ForceOff"], W), "ForceOn");
    // A BMC that lists nothing is asked for the standard values.
    assert.equal(chooseResetType("off", undefined, W), "ForceOff");
    const graceful = thrown(() => chooseResetType("off", ["On", "GracefulShutdown"], W));
    assert.ok(graceful.kind === "Config" && /does not allow ResetType ForceOff \(it allows On, GracefulShutdown\)/.test(graceful.message));
    const info = resetAction(
      { Actions: { "#ComputerSystem.Reset": { target: "/t", "@Redfish.ActionInfo": "/redfish/v1/Systems/1/ResetActionInfo" } } },
      W,
    );
    assert.deepEqual(info, { target: "/t", allowed: undefined, actionInfo: "/redfish/v1/Systems/1/ResetActionInfo" });
    assert.deepEqual(allowedFromActionInfo({ Parameters: [{ Name: "ResetType", AllowableValues: ["On", "ForceOff"] }] }), [
      "On",
      "ForceOff",
    ]);
    assert.equal(allowedFromActionInfo({ Parameters: [] }), undefined);
    assert.equal(thrown(() => resetAction({ Actions: {} }, W)).kind, "Failed");
  });

  test("task monitors: 202 or a running TaskState waits; Exception and Killed fail; Completed is done", () => {
    assert.deepEqual(taskStep(202, {}, undefined, W), { kind: "running", afterMs: 500 });
    assert.deepEqual(taskStep(202, {}, "5", W), { kind: "running", afterMs: 2000 });
    assert.deepEqual(taskStep(200, { TaskState: "Running" }, "0", W), { kind: "running", afterMs: 500 });
    assert.deepEqual(taskStep(200, { TaskState: "Completed", TaskStatus: "OK" }, undefined, W), { kind: "done" });
    assert.deepEqual(taskStep(204, {}, undefined, W), { kind: "done" });
    for (const state of ["Exception", "Killed", "Cancelled"]) {
      const s = taskStep(200, { TaskState: state, Messages: [{ MessageId: "Base.1.8.GeneralError", Message: "PSU fault" }] }, undefined, W);
      assert.ok(
        s.kind === "failed" &&
          s.error.kind === "Failed" &&
          s.error.message.includes(`ended ${state}`) &&
          s.error.message.includes("PSU fault"),
        JSON.stringify(s),
      );
    }
    const critical = taskStep(200, { TaskState: "Completed", TaskStatus: "Critical" }, undefined, W);
    assert.equal(critical.kind, "failed");
    assert.equal(taskStep(200, { TaskState: "Weird" }, undefined, W).kind, "failed");
  });
});

describe("redfish errors", () => {
  const ext = JSON.stringify({
    error: {
      code: "Base.1.8.GeneralError",
      message: "A general error has occurred.",
      "@Message.ExtendedInfo": [
        { MessageId: "Base.1.8.ActionParameterNotSupported", Message: "The parameter ResetType for the action Reset is not supported." },
      ],
    },
  });

  test("the Redfish message is quoted", () => {
    assert.equal(
      redfishMessage(JSON.parse(ext)),
      "The parameter ResetType for the action Reset is not supported. (Base.1.8.ActionParameterNotSupported)",
    );
    assert.equal(redfishMessage({ error: { message: "plain" } }), "plain");
    assert.equal(redfishMessage({}), undefined);
    const e = classifyStatus(400, ext, W, "Reset ForceOff", "fence");
    assert.equal(e.kind, "Failed");
    assert.match(
      e.message,
      /refused Reset ForceOff \(HTTP 400\): "The parameter ResetType .* not supported\. \(Base\.1\.8\.ActionParameterNotSupported\)"/,
    );
  });

  test("401 and 403 are AuthFailed (permanent); 5xx and 409 may be retried; a redirect is Config", () => {
    const auth = classifyStatus(401, "", W, "a session login", "fence");
    assert.ok(auth.kind === "AuthFailed" && isPermanent(auth) && /rejected the credentials of user "fence"/.test(auth.message));
    assert.equal(classifyStatus(403, ext, W, "Reset", "fence").kind, "AuthFailed");
    assert.ok(!isPermanent(classifyStatus(503, "<html>busy</html>", W, "Reset", "fence")));
    assert.match(classifyStatus(503, "<html>busy</html>", W, "Reset", "fence").message, /HTTP 503\): "<html>busy<\/html>"/);
    assert.equal(classifyStatus(409, "", W, "Reset", "fence").kind, "Failed");
    assert.equal(classifyStatus(301, "", W, "Reset", "fence").kind, "Config");
  });

  test("transport: refused connections are Unreachable; a certificate mismatch is Config and says so", () => {
    const errno = (code: string, message = code) => Object.assign(new Error(message), { code });
    assert.equal(classifyTransport(errno("ECONNREFUSED"), W, false).kind, "Unreachable");
    assert.equal(classifyTransport(errno("ECONNRESET", "socket hang up"), W, false).kind, "Unreachable");
    assert.equal(classifyTransport(errno("ENOTFOUND"), W, false).kind, "Unreachable");
    const tls = classifyTransport(errno("UNABLE_TO_VERIFY_LEAF_SIGNATURE", "unable to verify the first certificate"), W, true);
    assert.equal(tls.kind, "Config");
    assert.match(tls.message, /presented a certificate that does not verify against the caBundle given \(UNABLE_TO_VERIFY_LEAF_SIGNATURE/);
    assert.match(tls.message, /nothing was sent to it/);
    assert.match(
      classifyTransport(errno("ERR_TLS_CERT_ALTNAME_INVALID"), W, false).message,
      /operator's trusted root CAs \(no caBundle is set\)/,
    );
    assert.match(classifyTransport(errno("ERR_SSL_WRONG_VERSION_NUMBER"), W, false).message, /does not speak HTTPS/);
  });

  test("the driver refuses bad parameters before any request, with the password redacted", async () => {
    const ctx = { node: "n", parameters: { ...base, port: "0" }, annotations: {}, signal: new AbortController().signal };
    await assert.rejects(
      redfishDriver.status(ctx),
      (e: AgentError) => e.kind === "Config" && /port must be a port number/.test(e.message) && !e.message.includes("s3cret"),
    );
  });

  test("a refused connection is Unreachable within the request", async () => {
    const ctx = {
      node: "n",
      parameters: { ...base, address: "127.0.0.1", port: "1" },
      annotations: {},
      signal: new AbortController().signal,
    };
    await assert.rejects(
      redfishDriver.status(ctx),
      (e: AgentError) => e.kind === "Unreachable" && /did not answer \(ECONNREFUSED\)/.test(e.message),
    );
  });
});
