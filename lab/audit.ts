// The apiserver's audit log of a lab, read back: every file of it (the apiserver rotates it at 200 MB), streamed a
// line at a time (a scale run writes several hundred MB), parsed only where the raw line passes a cheap filter.
import { createReadStream, readdirSync } from "node:fs";
import { dirname, join } from "node:path";
import { createInterface } from "node:readline";
import { paths } from "./state.ts";

/** The fields of an audit event (audit.k8s.io/v1, level Metadata) the lab's readers use. */
export interface AuditEvent {
  stage: string;
  verb: string;
  /** `extra` carries, for a pod's bound ServiceAccount token, authentication.kubernetes.io/pod-name (and -uid, node-name). */
  user: { username: string; extra?: Record<string, string[]> };
  sourceIPs?: string[];
  userAgent?: string;
  objectRef?: { resource?: string; namespace?: string; name?: string; subresource?: string };
  responseStatus?: { code?: number };
  requestReceivedTimestamp: string;
  stageTimestamp: string;
}

/** Every audit event of the lab in `labDir` whose raw line `keep` accepts (default: all), rotated files first. */
export async function* auditEvents(labDir: string, keep: (line: string) => boolean = () => true): AsyncGenerator<AuditEvent> {
  const dir = dirname(paths(labDir).audit);
  // Rotated files are named audit-<time>.log, and sort before the current audit.log.
  const files = readdirSync(dir)
    .filter((n) => n.startsWith("audit") && n.endsWith(".log"))
    .sort();
  for (const f of files)
    for await (const line of createInterface({ input: createReadStream(join(dir, f)) }))
      if (line && keep(line)) yield JSON.parse(line) as AuditEvent;
}
