// Free ports for the lab's servers. A port is chosen now and bound later (a component starts seconds
// after the ports are chosen), so the port must not be taken meanwhile. The kernel's own pick (bind to 0)
// comes from the ephemeral range, the same range every outgoing connection of the machine draws its
// local port from: under a busy test run one of them took a scheduler's port before it bound
// ("bind: address already in use"). Ports are therefore drawn at random from below that range, where
// only an explicit bind can take them, and never handed out twice by one process.
import { createServer } from "node:net";
import { createSocket } from "node:dgram";
import { readFileSync } from "node:fs";
import { randomInt } from "node:crypto";

/** Lowest port drawn: above the registered ports Kubernetes and its peers use by default (10250–10259). */
const FLOOR = 20_000;
/** Fewer candidates than this below the ephemeral range: the kernel's pick is as good. */
const MIN_CANDIDATES = 2_000;

/** The machine's ephemeral (outgoing) range, [low, high]. */
export function ephemeralRange(text = readOr("/proc/sys/net/ipv4/ip_local_port_range")): [number, number] {
  const [lo, hi] = text.trim().split(/\s+/).map(Number);
  return Number.isInteger(lo) && Number.isInteger(hi) ? [lo!, hi!] : [32_768, 60_999];
}

function readOr(file: string): string {
  try {
    return readFileSync(file, "utf8");
  } catch {
    return "";
  }
}

/** The range ports are drawn from, [low, high), or undefined when the kernel should pick. */
export function candidateRange([lo]: [number, number] = ephemeralRange()): [number, number] | undefined {
  return lo - FLOOR >= MIN_CANDIDATES ? [FLOOR, lo] : undefined;
}

const given = new Set<number>();

function tryTcp(port: number): Promise<number | undefined> {
  return new Promise((resolve) => {
    const srv = createServer();
    srv.unref();
    srv.on("error", () => resolve(undefined));
    srv.listen(port, "127.0.0.1", () => {
      const addr = srv.address();
      const got = typeof addr === "object" && addr ? addr.port : undefined;
      srv.close(() => resolve(got));
    });
  });
}

function tryUdp(port: number): Promise<number | undefined> {
  return new Promise((resolve) => {
    const sock = createSocket("udp4");
    sock.on("error", () => {
      sock.close();
      resolve(undefined);
    });
    sock.bind(port, "127.0.0.1", () => {
      const got = sock.address().port;
      sock.close(() => resolve(got));
    });
  });
}

async function pick(tryBind: (port: number) => Promise<number | undefined>, what: string): Promise<number> {
  const range = candidateRange();
  for (let i = 0; i < 200; i++) {
    const port = await tryBind(range ? randomInt(range[0], range[1]) : 0);
    if (port !== undefined && !given.has(port)) {
      given.add(port);
      return port;
    }
  }
  throw new Error(`no free ${what} port on 127.0.0.1 after 200 tries`);
}

/** A free TCP port on 127.0.0.1, outside the ephemeral range where it has one. */
export function freeTcpPort(): Promise<number> {
  return pick(tryTcp, "TCP");
}

/** A free UDP port on 127.0.0.1 (IPMI over LAN is UDP). */
export function freeUdpPort(): Promise<number> {
  return pick(tryUdp, "UDP");
}

/** Distinct free TCP ports. */
export async function freeTcpPorts(n: number): Promise<number[]> {
  const ports: number[] = [];
  while (ports.length < n) ports.push(await freeTcpPort());
  return ports;
}

/** Whether a component's log says it could not bind its port: worth a retry on another one. */
export function portTaken(log: string): boolean {
  return /address already in use|EADDRINUSE/i.test(log);
}
