import { request } from "node:https";
import { request as httpRequest } from "node:http";
import { readFileSync } from "node:fs";
import { setTimeout as sleep } from "node:timers/promises";
import { connect } from "node:net";

export interface TlsClient {
  ca: string;
  cert?: string;
  key?: string;
}

/** GET a URL (https with the lab CA and optionally a client cert); resolves to the status code, 0 on connection failure. */
export function probe(url: string, tls?: TlsClient, timeoutMs = 2000): Promise<{ status: number; body: string }> {
  return new Promise((resolve) => {
    const u = new URL(url);
    const opts = {
      timeout: timeoutMs,
      ...(tls && u.protocol === "https:"
        ? {
            ca: readFileSync(tls.ca),
            ...(tls.cert ? { cert: readFileSync(tls.cert), key: readFileSync(tls.key!) } : {}),
            // kube-controller-manager and kube-scheduler serve a self-signed cert of their own.
            rejectUnauthorized: !url.includes("/healthz") || !!tls.cert,
          }
        : {}),
    };
    const req = (u.protocol === "https:" ? request : httpRequest)(u, opts, (res) => {
      let body = "";
      res.on("data", (c: Buffer) => (body += c.toString()));
      res.on("end", () => resolve({ status: res.statusCode ?? 0, body }));
    });
    req.on("timeout", () => req.destroy());
    req.on("error", () => resolve({ status: 0, body: "" }));
    req.end();
  });
}

export async function waitFor<T>(
  what: string,
  fn: () => Promise<T | undefined | false> | T | undefined | false,
  o: { timeoutMs?: number; intervalMs?: number; onTimeout?: () => string } = {},
): Promise<T> {
  const deadline = Date.now() + (o.timeoutMs ?? 60_000);
  let lastErr: unknown;
  for (;;) {
    try {
      const v = await fn();
      if (v !== undefined && v !== false) return v;
    } catch (e) {
      lastErr = e;
    }
    if (Date.now() > deadline) {
      const extra = o.onTimeout?.() ?? (lastErr ? ` (last error: ${(lastErr as Error).message})` : "");
      throw new Error(`timed out after ${o.timeoutMs ?? 60_000} ms waiting for ${what}${extra}`);
    }
    await sleep(o.intervalMs ?? 200);
  }
}

/** Whether something accepts TCP connections at host:port (within timeoutMs). */
export function tcpOpen(host: string, port: number, timeoutMs = 1000): Promise<boolean> {
  return new Promise((resolve) => {
    const sock = connect({ host, port, timeout: timeoutMs });
    const done = (ok: boolean) => {
      sock.destroy();
      resolve(ok);
    };
    sock.once("connect", () => done(true));
    sock.once("timeout", () => done(false));
    sock.once("error", () => done(false));
  });
}
