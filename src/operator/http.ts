// The operator's plain HTTP endpoints (health: /healthz and /readyz; metrics: /metrics).
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import type { Logger } from "pino";

/** A response: status code, content type, body. */
export type Reply = [number, string, string];

/** Serves `handler` (given the request's path, without its query) on `bind`; resolves once listening. */
export async function serve(
  log: Logger,
  what: string,
  bind: { host: string; port: number },
  handler: (path: string) => Promise<Reply>,
): Promise<Server> {
  const server = createServer((req, res) => {
    handler((req.url ?? "").split("?")[0] ?? "").then(
      ([code, type, body]) => res.writeHead(code, { "content-type": type }).end(body),
      (err: unknown) => res.writeHead(500).end(`${String(err)}\n`),
    );
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", (err) => reject(new Error(`cannot listen on ${bind.host}:${bind.port} for ${what}: ${err.message}`)));
    server.listen(bind.port, bind.host, () => resolve());
  });
  const a = server.address() as AddressInfo;
  log.info(
    { [what]: `${a.address}:${a.port}`, address: `${a.address}:${a.port}` },
    `serving ${what === "health" ? "/healthz and /readyz" : "/metrics"}`,
  );
  return server;
}

/** Where a server listens, port 0 resolved ("host:port"). */
export function listenAddress(s: Server): string {
  const a = s.address() as AddressInfo;
  return `${a.address}:${a.port}`;
}
