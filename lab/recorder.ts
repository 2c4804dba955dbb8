// A timeline of what happened, for asserting order ("no replacement pod before the old node's power
// went off"): Pod and Node watch events as they arrive, merged with the lab's own event log (power
// changes, boots, faults). Times are this machine's clock, in milliseconds.
import { openSync, readSync, closeSync, existsSync } from "node:fs";
import { CoreV1Api, type V1Node, type V1Pod } from "@kubernetes/client-node";
import { Informer } from "../src/runtime/informer.ts";
import { claimNames, podTokens } from "../src/decide/claim-lock.ts";
import type { Lab } from "./lab.ts";
import { paths, type LabEvent } from "./state.ts";

export type TimelineEntry =
  | {
      t: number;
      source: "pod";
      type: "add" | "update" | "delete";
      namespace: string;
      name: string;
      uid: string;
      node?: string;
      phase?: string;
      ready?: string;
      deleting: boolean;
      labels: Record<string, string>;
      /** PVCs the pod mounts, and the fencing token it was granted for each (stockade.io/claim-tokens). */
      claims?: string[];
      tokens?: Record<string, number>;
    }
  | { t: number; source: "node"; type: "add" | "update" | "delete"; name: string; ready?: string; bootID?: string; taints: string[] }
  | { t: number; source: "lab"; kind: LabEvent["kind"]; node?: string; detail: Record<string, unknown> };

export class Recorder {
  readonly entries: TimelineEntry[] = [];
  private pods: Informer<V1Pod>;
  private nodes: Informer<V1Node>;
  private offset = 0;
  private tailTimer: NodeJS.Timeout | undefined;
  private readonly eventsFile: string;

  constructor(lab: Lab) {
    const core = lab.kc.makeApiClient(CoreV1Api);
    this.eventsFile = paths(lab.dir).events;
    this.pods = new Informer<V1Pod>({ kc: lab.kc, path: "/api/v1/pods", list: () => core.listPodForAllNamespaces() });
    this.nodes = new Informer<V1Node>({ kc: lab.kc, path: "/api/v1/nodes", list: () => core.listNode() });
    for (const type of ["add", "update", "delete"] as const) {
      this.pods.on(type, (p) =>
        this.entries.push({
          t: Date.now(),
          source: "pod",
          type,
          namespace: p.metadata?.namespace ?? "",
          name: p.metadata?.name ?? "",
          uid: p.metadata?.uid ?? "",
          node: p.spec?.nodeName,
          phase: p.status?.phase,
          ready: p.status?.conditions?.find((c) => c.type === "Ready")?.status,
          deleting: !!p.metadata?.deletionTimestamp,
          labels: p.metadata?.labels ?? {},
          claims: claimNames(p),
          tokens: podTokens(p),
        }),
      );
      this.nodes.on(type, (n) =>
        this.entries.push({
          t: Date.now(),
          source: "node",
          type,
          name: n.metadata?.name ?? "",
          ready: n.status?.conditions?.find((c) => c.type === "Ready")?.status,
          bootID: n.status?.nodeInfo?.bootID,
          taints: (n.spec?.taints ?? []).map((x) => `${x.key}:${x.effect}`),
        }),
      );
    }
  }

  async start(): Promise<this> {
    // Only lab events from now on: the log is appended while we watch.
    this.offset = existsSync(this.eventsFile) ? readAll(this.eventsFile, 0).end : 0;
    await Promise.all([this.pods.start(), this.nodes.start()]);
    this.tailTimer = setInterval(() => this.tail(), 100);
    return this;
  }

  stop(): void {
    this.tail();
    clearInterval(this.tailTimer);
    this.pods.stop();
    this.nodes.stop();
  }

  private tail(): void {
    if (!existsSync(this.eventsFile)) return;
    const { text, end } = readAll(this.eventsFile, this.offset);
    const complete = text.lastIndexOf("\n") + 1;
    for (const line of text.slice(0, complete).split("\n").filter(Boolean)) {
      const e = JSON.parse(line) as LabEvent;
      this.entries.push({ t: Date.parse(e.time), source: "lab", kind: e.kind, node: e.node, detail: e.detail });
    }
    this.offset = end - Buffer.byteLength(text.slice(complete));
  }

  /** Entries in time order (lab events are read up to 100 ms after they happen; order is by their own time). */
  timeline(): TimelineEntry[] {
    this.tail();
    return [...this.entries].sort((a, b) => a.t - b.t);
  }

  first(pred: (e: TimelineEntry) => boolean): TimelineEntry | undefined {
    return this.timeline().find(pred);
  }

  /** A readable dump for failure messages. */
  format(since = 0): string {
    return this.timeline()
      .filter((e) => e.t >= since)
      .map((e) => {
        const ts = new Date(e.t).toISOString().slice(11, 23);
        if (e.source === "lab") return `${ts} lab   ${e.kind} ${e.node ?? ""} ${JSON.stringify(e.detail)}`;
        if (e.source === "node") return `${ts} node  ${e.type} ${e.name} ready=${e.ready} taints=${e.taints.join(",")}`;
        return `${ts} pod   ${e.type} ${e.namespace}/${e.name} node=${e.node} phase=${e.phase} ready=${e.ready}${e.deleting ? " deleting" : ""}`;
      })
      .join("\n");
  }
}

function readAll(file: string, from: number): { text: string; end: number } {
  const fd = openSync(file, "r");
  try {
    const chunks: Buffer[] = [];
    const buf = Buffer.alloc(64 * 1024);
    let pos = from;
    for (;;) {
      const n = readSync(fd, buf, 0, buf.length, pos);
      if (n <= 0) break;
      chunks.push(Buffer.from(buf.subarray(0, n)));
      pos += n;
    }
    return { text: Buffer.concat(chunks).toString("utf8"), end: pos };
  } finally {
    closeSync(fd);
  }
}
