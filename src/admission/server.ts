// The admission webhooks, served over HTTPS by every replica (the apiserver reaches whichever is ready):
//   POST /claim-gate    mutating: adds the claim-lock scheduling gate to new pods that use a guarded claim
//   POST /force-delete  validating: refuses unsafe force deletes (and evictions asking for grace 0) of guarded pods
// Answers come from the caches, except the force-delete check, which reads the Node and NodeFence fresh:
// allowing that delete is as destructive as Stockade's own release. Certificates: admission/certificates.ts.
import { createServer, type Server } from "node:https";
import type { AddressInfo } from "node:net";
import { createSecureContext } from "node:tls";
import type { V1PersistentVolumeClaim, V1Pod } from "@kubernetes/client-node";
import type { Logger } from "pino";
import { claimGuard, claimNames, claimPolicy, fencedSince } from "../decide/claim-lock.ts";
import { isGuarded } from "../decide/guarded-pods.ts";
import { isNotFound, type Kube } from "../kube/api.ts";
import type { Caches } from "../kube/caches.ts";
import type { Metrics } from "../metrics.ts";
import { objectRef, type EventRecorder } from "../runtime/events.ts";
import { gatePod } from "./claim-gate.ts";
import { checkForceDelete } from "./force-delete.ts";

export const GATE_PATH = "/claim-gate";
export const FORCE_DELETE_PATH = "/force-delete";
/** Largest AdmissionReview accepted (a pod is far smaller; the apiserver's own limit is 3 MiB). */
const MAX_BODY = 4 * 1024 * 1024;

interface AdmissionRequest {
  uid: string;
  kind?: { kind?: string };
  resource?: { resource?: string };
  subResource?: string;
  operation?: string;
  namespace?: string;
  name?: string;
  userInfo?: { username?: string; groups?: string[] };
  object?: unknown;
  oldObject?: unknown;
  options?: { gracePeriodSeconds?: number } | null;
}

interface AdmissionResponse {
  uid: string;
  allowed: boolean;
  status?: { code: number; reason: string; message: string };
  patchType?: "JSONPatch";
  patch?: string;
  warnings?: string[];
}

export interface AdmissionDeps {
  kube: Kube;
  caches: Caches;
  events: EventRecorder;
  log: Logger;
  metrics?: Metrics;
}

export class AdmissionServer {
  private readonly d: AdmissionDeps;
  private server: Server | undefined;
  /** The users Stockade itself acts as (its ServiceAccount), allowed to force-delete after a fence. */
  operatorUsers: readonly string[] = [];

  constructor(d: AdmissionDeps) {
    this.d = d;
  }

  async listen(bind: { host: string; port: number }, tls: { cert: string; key: string }): Promise<string> {
    const server = createServer({ cert: tls.cert, key: tls.key, minVersion: "TLSv1.2" }, (req, res) => {
      const chunks: Buffer[] = [];
      let size = 0;
      req.on("data", (c: Buffer) => {
        size += c.length;
        if (size > MAX_BODY) req.destroy();
        else chunks.push(c);
      });
      req.on("end", () => {
        const path = (req.url ?? "").split("?")[0];
        if (req.method !== "POST" || (path !== GATE_PATH && path !== FORCE_DELETE_PATH)) {
          res.writeHead(404, { "content-type": "text/plain" }).end("not found\n");
          return;
        }
        let review: { apiVersion?: string; request?: AdmissionRequest };
        try {
          review = JSON.parse(Buffer.concat(chunks).toString("utf8"));
          if (!review.request?.uid) throw new Error("no request.uid");
        } catch (err) {
          res.writeHead(400, { "content-type": "text/plain" }).end(`not an AdmissionReview: ${(err as Error).message}\n`);
          return;
        }
        const request = review.request;
        const answer = path === GATE_PATH ? this.gate(request) : this.forceDelete(request);
        answer
          .catch((err: unknown): AdmissionResponse => {
            // Fail closed: an answer we cannot give is a refusal, never a pod let through unprotected.
            this.d.metrics?.admissionRequests.inc({ webhook: path.slice(1), outcome: "error" });
            this.d.log.error({ err, uid: request.uid, path }, `admission ${path} failed: ${(err as Error).message}`);
            return deny(request.uid, 500, "InternalError", `Stockade could not decide: ${(err as Error).message}; try again`);
          })
          .then((response) => {
            res
              .writeHead(200, { "content-type": "application/json" })
              .end(JSON.stringify({ apiVersion: review.apiVersion ?? "admission.k8s.io/v1", kind: "AdmissionReview", response }));
          });
      });
    });
    await new Promise<void>((resolve, reject) => {
      server.once("error", (err) =>
        reject(new Error(`cannot listen on ${bind.host}:${bind.port} for the admission webhooks: ${err.message}`)),
      );
      // reusePort: replicas on one host (the lab) share the port the way a Service spreads over pods.
      server.listen({ port: bind.port, host: bind.host, reusePort: process.platform === "linux" }, () => resolve());
    });
    this.server = server;
    const a = server.address() as AddressInfo;
    return `${a.address}:${a.port}`;
  }

  /** Serves new connections with a renewed certificate. */
  reload(tls: { cert: string; key: string }): void {
    this.server?.setSecureContext({ cert: tls.cert, key: tls.key, minVersion: "TLSv1.2" });
    // Validate now rather than on the next handshake.
    createSecureContext({ cert: tls.cert, key: tls.key });
  }

  close(): Promise<void> {
    const s = this.server;
    if (!s) return Promise.resolve();
    s.closeAllConnections();
    return new Promise((r) => s.close(() => r()));
  }

  private pvcLookup(namespace: string): (name: string) => V1PersistentVolumeClaim | undefined {
    return (name) => this.d.caches.pvcs.get(name, namespace);
  }

  private async gate(r: AdmissionRequest): Promise<AdmissionResponse> {
    const pod = r.object as V1Pod | undefined;
    if (r.operation !== "CREATE" || r.kind?.kind !== "Pod" || !pod) return { uid: r.uid, allowed: true };
    const ns = r.namespace ?? pod.metadata?.namespace ?? "";
    pod.metadata = { ...pod.metadata, namespace: ns };
    // Until the caches have synced, every exclusive claim counts as guarded: the gate is lifted later if not.
    const policy = claimPolicy(this.d.caches.synced ? this.d.caches.policies.list() : undefined);
    const answer = gatePod(pod, this.pvcLookup(ns), policy);
    const name = pod.metadata?.name || `${pod.metadata?.generateName ?? ""}*`;
    if (!answer.allowed) {
      this.d.metrics?.admissionRequests.inc({ webhook: "claim-gate", outcome: "denied" });
      this.d.log.info({ pod: `${ns}/${name}` }, `refused pod ${ns}/${name}: ${answer.message}`);
      return deny(r.uid, 422, "Invalid", answer.message);
    }
    this.d.metrics?.admissionRequests.inc({ webhook: "claim-gate", outcome: answer.gated ? "gated" : "allowed" });
    if (!answer.patch.length) return { uid: r.uid, allowed: true };
    this.d.log.debug({ pod: `${ns}/${name}`, why: answer.why }, `gating pod ${ns}/${name} until it holds ${answer.why}`);
    return { uid: r.uid, allowed: true, patchType: "JSONPatch", patch: Buffer.from(JSON.stringify(answer.patch)).toString("base64") };
  }

  private async forceDelete(r: AdmissionRequest): Promise<AdmissionResponse> {
    const { kube, caches } = this.d;
    let pod: V1Pod | undefined;
    let grace: number | undefined;
    if (r.operation === "DELETE" && !r.subResource) {
      pod = r.oldObject as V1Pod | undefined;
      grace = r.options?.gracePeriodSeconds;
    } else if (r.operation === "CREATE" && r.subResource === "eviction") {
      const eviction = r.object as { deleteOptions?: { gracePeriodSeconds?: number } } | undefined;
      grace = eviction?.deleteOptions?.gracePeriodSeconds;
      if (grace === 0) {
        try {
          pod = await kube.core.readNamespacedPod({ name: r.name ?? "", namespace: r.namespace ?? "" });
        } catch (err) {
          if (!isNotFound(err)) throw err;
        }
      }
    }
    if (!pod || grace !== 0) return { uid: r.uid, allowed: true };
    const ns = pod.metadata?.namespace ?? r.namespace ?? "";
    const pvcs = new Map(caches.pvcs.list(ns).map((p) => [`${ns}/${p.metadata?.name}`, p] as const));
    const policy = claimPolicy(caches.synced ? caches.policies.list() : undefined);
    const fencing = isGuarded(pod, mergedGuardedPods(caches), pvcs);
    const claim = claimNames(pod).find((c) => claimGuard(caches.pvcs.get(c, ns), policy).guarded);
    const guarded = fencing.guarded ? fencing.why : claim ? `uses guarded claim ${claim}` : undefined;
    const node = pod.spec?.nodeName;
    const [nodeObj, fence] = node && guarded ? await Promise.all([kube.readNode(node), kube.getNodeFence(node)]) : [undefined, undefined];
    const answer = checkForceDelete({
      pod,
      username: r.userInfo?.username ?? "",
      gracePeriodSeconds: grace,
      guarded,
      operatorUsers: this.operatorUsers,
      nodeExists: !!nodeObj,
      fencedSince: fencedSince(fence, nodeObj),
    });
    const name = `${ns}/${pod.metadata?.name}`;
    if (!answer.allowed) {
      this.d.metrics?.admissionRequests.inc({ webhook: "force-delete", outcome: "denied" });
      this.d.log.warn({ pod: name, user: r.userInfo?.username }, `refused a force delete of ${name} by ${r.userInfo?.username}`);
      await this.d.events.record(podRef(pod), "Warning", "ForceDeleteRefused", `${r.userInfo?.username}: ${answer.message}`);
      return deny(r.uid, 403, "Forbidden", answer.message);
    }
    this.d.metrics?.admissionRequests.inc({ webhook: "force-delete", outcome: "allowed" });
    if (answer.acknowledged !== undefined) {
      const msg = `${r.userInfo?.username} force-deleted pod ${name} on node ${node}, which is not confirmed fenced, acknowledging the risk of two instances at once: "${answer.acknowledged}"`;
      this.d.log.warn({ pod: name, user: r.userInfo?.username }, msg);
      await this.d.events.record(podRef(pod), "Warning", "ForceDeleteAcknowledged", msg);
      return { uid: r.uid, allowed: true, warnings: [`Stockade: ${msg}`] };
    }
    return { uid: r.uid, allowed: true };
  }
}

function mergedGuardedPods(caches: Caches): { statefulSets: boolean; readWriteOnceVolumes: boolean } {
  const ps = caches.synced ? caches.policies.list() : [];
  if (!ps.length) return { statefulSets: true, readWriteOnceVolumes: true };
  return {
    statefulSets: ps.some((p) => p.spec?.guardedPods?.statefulSets ?? true),
    readWriteOnceVolumes: ps.some((p) => p.spec?.guardedPods?.readWriteOnceVolumes ?? true),
  };
}

const podRef = (p: V1Pod) => objectRef("Pod", p);

function deny(uid: string, code: number, reason: string, message: string): AdmissionResponse {
  return { uid, allowed: false, status: { code, reason, message } };
}
