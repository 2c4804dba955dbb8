// What a simulated BMC received, read from the BMC's side: who sent each datagram, and which of them made a
// chassis request. ipmi_sim runs with -d and logs every datagram it receives with its source address and the
// time ("Raw LAN receive from: <s>.<us>" then the raw sockaddr); the payload is encrypted (RMCP+, cipher suite 3)
// so the log cannot say what a datagram asked for. The chassis_control hook logs each get/set with the time
// (lab/bmc.ts). ipmi_sim handles one datagram at a time and waits for the hook, so the datagram that asked
// for a chassis request is the last one received before the hook ran: that is its sender.

export interface BmcDatagram {
  /** ms since the epoch. */
  t: number;
  address: string;
  port: number;
}

export interface ChassisRequest {
  t: number;
  op: "get" | "set";
  /** The hook's arguments after op, e.g. "power 0". */
  args: string;
  /** The datagram that carried it (undefined only if the log has none before it). */
  from: BmcDatagram | undefined;
}

/** A struct sockaddr as ipmi_sim dumps it (hex bytes): family (host order), port (network order), address. */
export function parseSockaddr(bytes: number[]): { address: string; port: number } {
  const family = bytes[0]! | (bytes[1]! << 8);
  const port = (bytes[2]! << 8) | bytes[3]!;
  if (family === 2) return { address: bytes.slice(4, 8).join("."), port };
  if (family === 10) {
    const words = [];
    for (let i = 8; i < 24; i += 2) words.push(((bytes[i]! << 8) | bytes[i + 1]!).toString(16));
    return { address: words.join(":"), port };
  }
  return { address: `family-${family}`, port };
}

/** Every datagram an ipmi_sim -d log shows it received, in order. */
export function parseBmcDatagrams(log: string): BmcDatagram[] {
  const out: BmcDatagram[] = [];
  for (const m of log.matchAll(/Raw LAN receive from: (\d+)\.(\d{1,6})\s+((?:[0-9a-f]{2}[ \t]*)+)/g)) {
    const bytes = m[3]!
      .trim()
      .split(/\s+/)
      .map((h) => parseInt(h, 16));
    out.push({ t: Number(m[1]) * 1000 + Number(m[2]!.padStart(6, "0")) / 1000, ...parseSockaddr(bytes) });
  }
  return out;
}

/** The chassis hook's log: `<s>.<ns> get|set <args>` per line. */
export function parseChassisLog(log: string): Omit<ChassisRequest, "from">[] {
  const out: Omit<ChassisRequest, "from">[] = [];
  for (const line of log.split("\n")) {
    const m = /^(\d+)\.(\d+) (get|set)\s*(.*)$/.exec(line.trim());
    if (m) out.push({ t: Number(m[1]) * 1000 + Number(`0.${m[2]}`) * 1000, op: m[3] as "get" | "set", args: m[4]!.trim() });
  }
  return out;
}

/** Each chassis request with the datagram that carried it: the last one received before the hook ran. */
export function attributeChassisRequests(datagrams: BmcDatagram[], requests: Omit<ChassisRequest, "from">[]): ChassisRequest[] {
  const sorted = [...datagrams].sort((a, b) => a.t - b.t);
  return requests.map((r) => {
    let from: BmcDatagram | undefined;
    for (const d of sorted) {
      if (d.t > r.t) break;
      from = d;
    }
    return { ...r, from };
  });
}

/** A power-changing request ("set power 0", "set power 1", "set reset 1", soft-off "set shutdown 1"). */
export function isPowerCommand(r: ChassisRequest): boolean {
  return r.op === "set" && /\b(power|reset|shutdown) \d/.test(r.args);
}
