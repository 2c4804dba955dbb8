// The BMC's side of who asked for what (lab/bmc-log.ts), on text as ipmi_sim -d and the chassis hook write it.
import { test } from "node:test";
import assert from "node:assert/strict";
import { attributeChassisRequests, isPowerCommand, parseBmcDatagrams, parseChassisLog, parseSockaddr } from "../../lab/bmc-log.ts";

// ipmi_sim 2.0.33 -d, its console lines ending "\n\r" (shortened: the send dumps are longer; addresses edited).
// Two senders: a pod at 10.103.2.5 port 38881 (0x97e1), then the management address 10.250.3.2 port 34110 (0x853e).
const simLog = [
  "mc_enable 0x20",
  "\r> Raw LAN receive from: 1795806285.939472",
  "\r 02 00 97 e1 0a 67 02 05 00 00 00 00 00 00 00 00",
  "\r Receive message: 1795806285.939607",
  "\r 06 00 ff 07 00 00 00 00 00 00 00 00 00 09 20 18 c8 81 00 38 8e 04 b5",
  "\rRaw LAN send to: 1795806285.939625",
  "\r 02 00 97 e1 0a 67 02 05 00 00 00 00 00 00 00 00 01 00 00 00",
  "\rRaw LAN msg:",
  "\r",
  "\rRaw LAN receive from: 1795806285.948927",
  "\r 02 00 97 e1 0a 67 02 05 00 00 00 00 00 00 00 00",
  "\r Receive message: 1795806285.948940",
  "\r 06 00 ff 07 06 c0 02 00 00 00 08 00 00 00 20 00 05 5e 23 9b",
  "\rRaw LAN receive from: 1795806285.958773",
  "\r 02 00 97 e1 0a 67 02 05 00 00 00 00 00 00 00 00",
  "\rRaw LAN receive from: 1795806286.008819",
  "\r 02 00 85 3e 0a fa 03 02 00 00 00 00 00 00 00 00",
  "\r Receive message: 1795806286.008900",
  "",
].join("\n");
const chassisLog = "1795806285.956726408 set power 0\n1795806286.019156382 get power\n";

test("a datagram's source and time, as ipmi_sim -d logs it", () => {
  const d = parseBmcDatagrams(simLog);
  assert.equal(d.length, 4, "receives only: sends and messages are not datagrams received");
  assert.deepEqual(d[0], { t: 1795806285939.472, address: "10.103.2.5", port: 38881 });
  assert.deepEqual(d.at(-1), { t: 1795806286008.819, address: "10.250.3.2", port: 34110 });
});

test("sockaddr: IPv4, IPv6, other families", () => {
  assert.deepEqual(parseSockaddr([2, 0, 0x02, 0x6f, 127, 0, 0, 1]), { address: "127.0.0.1", port: 623 });
  const v6 = [10, 0, 0x02, 0x6f, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
  assert.deepEqual(parseSockaddr(v6), { address: "0:0:0:0:0:0:0:1", port: 623 });
  assert.equal(parseSockaddr([1, 0, 0, 0]).address, "family-1");
});

test("each chassis request is attributed to the last datagram received before the hook ran", () => {
  const reqs = attributeChassisRequests(parseBmcDatagrams(simLog), parseChassisLog(chassisLog));
  assert.equal(reqs.length, 2);
  assert.equal(reqs[0]!.op, "set");
  assert.equal(reqs[0]!.args, "power 0");
  assert.ok(Math.abs(reqs[0]!.t - 1795806285956.726) < 0.001);
  assert.deepEqual(reqs[0]!.from, { t: 1795806285948.927, address: "10.103.2.5", port: 38881 }, "not the later datagram at .958773");
  assert.equal(reqs[1]!.from?.address, "10.250.3.2");
  assert.ok(isPowerCommand(reqs[0]!));
  assert.ok(!isPowerCommand(reqs[1]!), "a status query changes nothing");
});

test("a request before any datagram has no sender; power commands are power, reset and soft-off sets", () => {
  const [r] = attributeChassisRequests([], parseChassisLog("1.5 set power 1"));
  assert.equal(r!.from, undefined);
  const set = (args: string) => ({ t: 0, op: "set" as const, args, from: undefined });
  assert.ok(isPowerCommand(set("power 1")) && isPowerCommand(set("reset 1")) && isPowerCommand(set("shutdown 1")));
  assert.ok(!isPowerCommand(set("boot 2")) && !isPowerCommand(set("identify 1")));
});
