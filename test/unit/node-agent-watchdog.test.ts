// The watchdog device module against a plain file standing in for /dev/watchdog: feeds are written, the magic close
// writes "V", an unhealthy stop closes without "V", and a missing device or timeout is never armed.
import { test } from "node:test";
import assert from "node:assert/strict";
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { defaultTimeoutFile, Feeder, feedPeriodMs, Watchdog } from "../../src/node-agent/watchdog.ts";

function fakeDevice(timeout = "60\n") {
  const dir = mkdtempSync(join(tmpdir(), "wd-"));
  const device = join(dir, "watchdog");
  const timeoutFile = join(dir, "timeout");
  writeFileSync(device, "");
  writeFileSync(timeoutFile, timeout);
  return { device, timeoutFile, dir };
}

test("feeds write one byte each; the magic close writes V last", () => {
  const { device, timeoutFile } = fakeDevice();
  const o = Watchdog.open(device, timeoutFile);
  assert.ok(o.armed);
  assert.equal(o.timeoutSeconds, 60);
  o.watchdog.feed();
  o.watchdog.feed();
  o.watchdog.disarm();
  assert.equal(readFileSync(device, "latin1"), "\0\0V");
  assert.equal(o.watchdog.open, false);
  assert.throws(() => o.watchdog.feed(), /closed/);
});

test("an unhealthy stop closes without V (the watchdog stays armed)", () => {
  const { device, timeoutFile } = fakeDevice();
  const o = Watchdog.open(device, timeoutFile);
  assert.ok(o.armed);
  o.watchdog.feed();
  o.watchdog.closeArmed();
  o.watchdog.disarm(); // already closed: writes nothing
  assert.equal(readFileSync(device, "latin1"), "\0");
});

test("a missing device is reported, not created, and not armed", () => {
  const { dir, timeoutFile } = fakeDevice();
  const device = join(dir, "nope");
  const o = Watchdog.open(device, timeoutFile);
  assert.equal(o.armed, false);
  assert.match(!o.armed ? o.problem : "", /cannot open the watchdog device .*nope/);
  assert.equal(existsSync(device), false);
});

test("an unreadable or invalid timeout is never assumed: not armed, device not opened", () => {
  const { device, dir } = fakeDevice();
  const missing = Watchdog.open(device, join(dir, "absent"));
  assert.equal(missing.armed, false);
  assert.match(!missing.armed ? missing.problem : "", /cannot read the watchdog timeout/);
  for (const bad of ["", "0", "-1", "ten", "1.5"]) {
    const f = fakeDevice(bad);
    const o = Watchdog.open(f.device, f.timeoutFile);
    assert.equal(o.armed, false, `timeout ${JSON.stringify(bad)}`);
    assert.equal(readFileSync(f.device, "latin1"), "");
  }
  assert.equal(defaultTimeoutFile("/dev/watchdog1"), "/sys/class/watchdog/watchdog1/timeout");
});

test("the feeder asks before every write and never feeds past the deadline", () => {
  let now = 0;
  const deadline = 1000;
  let fed = 0;
  const f = new Feeder(
    { feed: () => fed++ },
    (t) => t < deadline,
    () => now,
    () => assert.fail("no error expected"),
  );
  assert.equal(f.tick(), true);
  now = 999;
  assert.equal(f.tick(), true);
  now = 1000;
  assert.equal(f.tick(), false);
  assert.equal(fed, 2);
  assert.equal(f.withheld, 1);
});

test("a failing write is reported, not thrown; the period is min(T/3, c)", () => {
  const errors: unknown[] = [];
  const f = new Feeder(
    {
      feed: () => {
        throw new Error("EIO");
      },
    },
    () => true,
    () => 0,
    (e) => errors.push(e),
  );
  assert.equal(f.tick(), false);
  assert.equal(errors.length, 1);
  assert.equal(feedPeriodMs(60, 5), 5000);
  assert.equal(feedPeriodMs(9, 5), 3000);
});
