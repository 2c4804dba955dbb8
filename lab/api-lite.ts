// A minimal client for the few API calls the BMC power hook makes. The hook runs inside ipmi_sim's
// chassis_control call, so it must answer fast: no client library to load, one HTTPS request each.
import { request } from "node:https";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { paths, type LabState } from "./state.ts";

export function apiRequest(
  s: LabState,
  method: string,
  path: string,
  body?: unknown,
  contentType = "application/json",
): Promise<{ status: number; body: string }> {
  const pki = paths(s.dir).pki;
  return new Promise((resolve, reject) => {
    const req = request(
      `${s.apiserverUrl}${path}`,
      {
        method,
        ca: readFileSync(join(pki, "ca.crt")),
        cert: readFileSync(join(pki, "kwok.crt")),
        key: readFileSync(join(pki, "kwok.key")),
        headers: body === undefined ? {} : { "content-type": contentType },
        timeout: 5000,
      },
      (res) => {
        let text = "";
        res.on("data", (c: Buffer) => (text += c.toString()));
        res.on("end", () => resolve({ status: res.statusCode ?? 0, body: text }));
      },
    );
    req.on("timeout", () => req.destroy(new Error(`${method} ${path} timed out`)));
    req.on("error", reject);
    req.end(body === undefined ? undefined : JSON.stringify(body));
  });
}
