// The admission webhooks, served over HTTPS by every replica (the apiserver reaches whichever is ready):
//   POST /claim-gate    mutating: adds the claim-lock scheduling gate to new pods that use a guarded claim
//   POST /force-delete  validating: refuses deletes and evictions of guarded pods that would remove them at once
// Answers come from the caches, except the force-delete check, which reads the pod (evictions), Node, Lease and
// NodeFence fresh: allowing that delete is as destructive as Stockade's own release. Certificates: certificates.ts.
// Anyone who can reach the Service can POST a review here (the apiserver does not authenticate itself to webhooks by
// default), so answering makes no API write at all: no Events. A decision is logged, counted, carried in the
// response's message and warnings, and recorded by the apiserver itself in its audit log (auditAnnotations).
import { createServer, type Server } from "node:https";
import type { AddressInfo } from "node:net";
import { createSecureContext } from "node:tls";
import type { V1PersistentVolumeClaim, V1Pod } from "@kubernetes/client-node";
import { DateTime } from "luxon";
import type { Logger } from "pino";
import { fencedSince, heartbeatsNow } from "../decide/claim-lock.ts";
import { fenceNotEnded, gateClaims, guardScope, guardedWhy } from "../decide/scope.ts";
import { isNotFound, type Kube } from "../kube/api.ts";
import type { Caches } from "../kube/caches.ts";
import type { Metrics } from "../metrics.ts";
import { gatePod } from "./claim-gate.ts";
import { checkForceDelete, effectiveGracePeriod } from "./force-delete.ts";

export const GATE_PATH = "/claim-gate";
export const FORCE_DELETE_PATH = "/force-delete";
/** Largest AdmissionReview accepted (a pod is far smaller; the apiserver's own limit is 3 MiB). */
const MAX_BODY = 4 * 1024 * 1024;
/**
 * Force-delete checks reading the API at once, at most. Each makes up to four GETs; a caller flooding the endpoint
 * with crafted reviews gets refusals (429: clients such as kubectl drain retry) instead of making the operator a
 * multiplier of its traffic to the apiserver. Real force deletes are rare; a drain's evictions come a few at a time.
 */
export const MAX_FRESH_CHECKS = 32;

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
  dryRun?: boolean;
}

interface AdmissionResponse {
  uid: string;
  allowed: boolean;
  status?: { code: number; reason: string; message: string };
  patchType?: "JSONPatch";
  patch?: string;
  warnings?: string[];
  /** Recorded by the apiserver in the request's audit event, as force-delete.stockade.io/<key>. */
  auditAnnotations?: Record<string, string>;
}

export interface AdmissionDeps {
  kube: Kube;
  caches: Caches;
  log: Logger;
  metrics?: Metrics;
  clock?: () => DateTime;
}

export class AdmissionServer {
  private readonly d: AdmissionDeps;
  private server: Server | undefined;
  /** Force-delete checks under way (MAX_FRESH_CHECKS). */
  private checks = 0;
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
    // Only pods in the scope of a live policy that keeps the claim lock (decide/scope.ts). Until the caches have
    // synced, every exclusive claim counts as guarded: the gate is lifted later if not. And, whatever the policies
    // say, a claim another pod uses on a node whose NodeFence has not ended (a pilot stopped mid-fence: the
    // replacement must not start beside the instance being fenced); the cache is enough here, since the gate only
    // delays, and the claim-lock controller lifts it on fresh reads.
    const { caches } = this.d;
    const fenced = caches.fences.list().filter(fenceNotEnded);
    const pods = fenced.flatMap((f) => caches.podsOn(f.metadata?.name ?? "").filter((p) => p.metadata?.namespace === ns));
    const fences = new Map(fenced.map((f) => [f.metadata?.name ?? "", f]));
    const { scope, held } = gateClaims({
      pod,
      pvc: this.pvcLookup(ns),
      policies: caches.synced ? caches.policies.list() : undefined,
      pods,
      fence: (n) => fences.get(n),
    });
    if (!scope.covered && !held.length) {
      this.d.metrics?.admissionRequests.inc({ webhook: "claim-gate", outcome: "allowed" });
      return { uid: r.uid, allowed: true };
    }
    const answer = gatePod(pod, this.pvcLookup(ns), scope.covered ? scope.claims : undefined, held);
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
    let grace: number | undefined;
    let pod: V1Pod | undefined;
    if (r.operation === "DELETE" && !r.subResource) {
      // The apiserver sends the pod as stored: its phase and grace period decide the effective grace without a read.
      pod = r.oldObject as V1Pod | undefined;
      grace = r.options?.gracePeriodSeconds ?? undefined;
      if (!pod || effectiveGracePeriod(grace, pod) !== 0) return { uid: r.uid, allowed: true };
    } else if (r.operation === "CREATE" && r.subResource === "eviction") {
      // An eviction deletes through the store without a DELETE admission of its own, with the grace period the
      // apiserver derives from the pod (0 for a Failed/Succeeded one whatever was asked): read the pod to know.
      grace = (r.object as { deleteOptions?: { gracePeriodSeconds?: number } } | undefined)?.deleteOptions?.gracePeriodSeconds;
    } else return { uid: r.uid, allowed: true };
    if (this.checks >= MAX_FRESH_CHECKS) {
      this.d.metrics?.admissionRequests.inc({ webhook: "force-delete", outcome: "error" });
      return deny(r.uid, 429, "TooManyRequests", `Stockade is checking ${this.checks} deletes already; try again`);
    }
    this.checks++;
    try {
      return await this.checkDelete(r, pod, grace);
    } finally {
      this.checks--;
    }
  }

  private async checkDelete(r: AdmissionRequest, given: V1Pod | undefined, grace: number | undefined): Promise<AdmissionResponse> {
    const { kube, caches } = this.d;
    let pod = given;
    if (!pod) {
      try {
        pod = await kube.core.readNamespacedPod({ name: r.name ?? "", namespace: r.namespace ?? "" });
      } catch (err) {
        if (!isNotFound(err)) throw err;
      }
      if (!pod || effectiveGracePeriod(grace, pod) !== 0) return { uid: r.uid, allowed: true };
    }
    const ns = pod.metadata?.namespace ?? r.namespace ?? "";
    const pvc = this.pvcLookup(ns);
    const policies = caches.synced ? caches.policies.list() : undefined;
    const node = pod.spec?.nodeName;
    // Could any policy guard it at all (the most a policy guards: decide/scope.ts narrows)? Then read fresh, all
    // three: which policy selects the node is decided on its labels as they are now (a node just labelled into a
    // policy is covered at once), and a fence's fingerprint is compared with the Node and Lease as they are now.
    const mayBeGuarded = !!guardedWhy(pod, undefined, pvc) && (!policies || policies.length > 0 || caches.fences.list().length > 0);
    const [nodeObj, lease, fence] =
      node && mayBeGuarded
        ? await Promise.all([kube.readNode(node), kube.readLease(node), kube.getNodeFence(node)])
        : [undefined, undefined, undefined];
    const scope = node && mayBeGuarded ? guardScope({ pod, node: nodeObj, fence, policies, pvc }) : undefined;
    const guarded = scope?.covered ? scope.guarded : undefined;
    const now = this.d.clock?.() ?? DateTime.utc();
    const user = r.userInfo?.username ?? "";
    const answer = checkForceDelete({
      pod,
      username: user,
      gracePeriodSeconds: grace,
      guarded,
      ...(scope?.covered && scope.policy ? { policy: scope.policy } : {}),
      ...(scope?.covered && scope.fencePhase ? { fencePhase: scope.fencePhase } : {}),
      ...(scope?.covered ? { coveredBy: scope.why } : {}),
      operatorUsers: this.operatorUsers,
      nodeExists: !!nodeObj,
      nodeHeartbeats: heartbeatsNow(nodeObj, lease, now),
      fencedSince: fencedSince(fence, nodeObj, lease),
    });
    const name = `${ns}/${pod.metadata?.name}`;
    const dryRun = r.dryRun ? " (dry run)" : "";
    if (!answer.allowed) {
      this.d.metrics?.admissionRequests.inc({ webhook: "force-delete", outcome: "denied" });
      this.d.log.warn({ pod: name, user, dryRun: !!r.dryRun }, `refused a force delete of ${name} by ${user}${dryRun}`);
      return { ...deny(r.uid, 403, "Forbidden", answer.message), auditAnnotations: { decision: "refused", reason: answer.message } };
    }
    this.d.metrics?.admissionRequests.inc({ webhook: "force-delete", outcome: "allowed" });
    if (answer.acknowledged !== undefined) {
      const msg = `${user} force-deleted pod ${name} on node ${node}, which is not confirmed fenced, acknowledging the risk of two instances at once: "${answer.acknowledged}"`;
      this.d.log.warn({ pod: name, user, dryRun: !!r.dryRun }, `${msg}${dryRun}`);
      return {
        uid: r.uid,
        allowed: true,
        warnings: [`Stockade: ${msg}`],
        auditAnnotations: { decision: "acknowledged", acknowledged: answer.acknowledged, reason: msg },
      };
    }
    const why = answer.why === "not guarded" && scope && !scope.covered ? `not guarded: ${scope.why}` : answer.why;
    return { uid: r.uid, allowed: true, auditAnnotations: { decision: "allowed", reason: why } };
  }
}

function deny(uid: string, code: number, reason: string, message: string): AdmissionResponse {
  return { uid, allowed: false, status: { code, reason, message } };
}
