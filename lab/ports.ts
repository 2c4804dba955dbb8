import { createServer } from "node:net";
import { createSocket } from "node:dgram";

/** A free TCP port on 127.0.0.1, as the kernel hands it out (there is a small race until it is bound again). */
export function freeTcpPort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.unref();
    srv.on("error", reject);
    srv.listen(0, "127.0.0.1", () => {
      const addr = srv.address();
      const port = typeof addr === "object" && addr ? addr.port : 0;
      srv.close(() => resolve(port));
    });
  });
}

/** A free UDP port on 127.0.0.1 (IPMI over LAN is UDP). */
export function freeUdpPort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const sock = createSocket("udp4");
    sock.on("error", reject);
    sock.bind(0, "127.0.0.1", () => {
      const port = sock.address().port;
      sock.close(() => resolve(port));
    });
  });
}

/** Distinct free TCP ports (a port the kernel gives twice in one batch is asked for again). */
export async function freeTcpPorts(n: number): Promise<number[]> {
  const ports = new Set<number>();
  while (ports.size < n) ports.add(await freeTcpPort());
  return [...ports];
}
