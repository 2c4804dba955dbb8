// The install bundle (manifests/) against a real apiserver: it applies whole to a fresh cluster, the
// server-side dry runs accept it and the examples, the Deployment's pods pass Pod Security "restricted";
// and its RBAC is proven sufficient and minimal: the operator runs as the bundle's ServiceAccount through
// a crash, a release, an unfence and a second fence of the same node, and the apiserver's audit log shows
// no request of it forbidden and every (group, resource, verb) granted used. A custom verb (attest) is never a
// request, so the audit log cannot show it used: it is proven needed by taking it away and seeing the
// operator's status write refused by the admission policy, and sufficient by giving it back.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdtempSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import {
  AppsV1Api,
  KubeConfig,
  loadAllYaml,
  StorageV1Api,
  type KubernetesObject,
  type V1PolicyRule,
  type V1RoleRef,
  type RbacV1Subject,
} from "@kubernetes/client-node";
import { Lab } from "../../lab/lab.ts";
import { repoRoot } from "../../lab/bins.ts";
import { waitFor } from "../../lab/health.ts";
import { paths } from "../../lab/state.ts";
import { refusal } from "../../lab/refusal.ts";
import { Bed, NETWORK_FENCES, SECRETS_NS } from "../../lab/bed.ts";
import { NetworkFenceDouble } from "../../lab/test-doubles/csi-addons-network-fence.ts";
import { GROUP, VERSION, type FenceRecord, type NodeFence } from "../../src/api/v1alpha1.ts";
import { HISTORY_NODE_LABEL, nodeLabelValue } from "../../src/decide/fence-history.ts";
import { LOCK_ANNOTATION, formatLock, isGated, parseLock } from "../../src/decide/claim-lock.ts";
import { ADMISSION_POLICY, ATTEST_VERB } from "../../src/kube/admission-check.ts";
import { errorMessage, Kube, statusCode } from "../../src/kube/api.ts";

const run = promisify(execFile);
const MANIFESTS = join(repoRoot, "manifests");
const EXAMPLES = join(MANIFESTS, "examples");
const OPERATOR_USER = "system:serviceaccount:stockade-system:stockade";
/** The verbs a request can carry; any other verb in a role is checked by an admission policy's authorizer. */
const REST_VERBS = new Set(["get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"]);

/** Every object of the YAML files directly in dir (what `kubectl apply -f dir` applies). */
function objectsIn(dir: string): (KubernetesObject & { rules?: V1PolicyRule[]; roleRef?: V1RoleRef; subjects?: RbacV1Subject[] })[] {
  return readdirSync(dir)
    .filter((f) => /\.ya?ml$/.test(f))
    .sort()
    .flatMap((f) => (loadAllYaml(readFileSync(join(dir, f), "utf8")) as KubernetesObject[]).filter(Boolean));
}

/** kubectl without throwing: exit code and both streams. */
async function kubectl(lab: Lab, ...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  try {
    const r = await run("kubectl", args, { env: lab.env, maxBuffer: 16 << 20 });
    return { code: 0, stdout: r.stdout, stderr: r.stderr };
  } catch (e) {
    const err = e as { code?: number; stdout?: string; stderr?: string };
    return { code: typeof err.code === "number" ? err.code : -1, stdout: err.stdout ?? "", stderr: err.stderr ?? String(e) };
  }
}

/** `kubectl apply` prints "<kind>/<name> <what>" per object: the lines saying `what`. */
const linesSaying = (out: string, what: string) => out.split("\n").filter((l) => l.endsWith(` ${what}`));
/** stderr without kubectl's non-fatal warnings. */
const errorsIn = (stderr: string) =>
  stderr
    .split("\n")
    .filter((l) => l.trim() && !l.startsWith("Warning:"))
    .join("\n");

describe("manifests/ on a fresh lab", () => {
  let lab: Lab;
  before(async () => {
    lab = await Lab.up({ dir: mkdtempSync(join(tmpdir(), "stockade-manifests-")), nodes: 2 });
  });
  after(async () => {
    await lab?.down();
  });

  test("kubectl apply -f manifests/ installs the bundle whole; the server-side dry runs accept it and the examples", async () => {
    const objects = objectsIn(MANIFESTS);
    assert.ok(!readdirSync(MANIFESTS).includes("kustomization.yaml"), "kubectl apply -f would try to apply a kustomization.yaml");
    const inOwnNamespace = objects.filter((o) => o.metadata?.namespace === "stockade-system").length;

    // A dry run persists nothing, the namespace included: on a fresh cluster the objects that live in it can
    // only be refused for that reason, and everything else must pass.
    const fresh = await kubectl(lab, "apply", "--server-side", "--dry-run=server", "-f", MANIFESTS);
    const notFound = errorsIn(fresh.stderr)
      .split("\n")
      .filter((l) => l.includes('namespaces "stockade-system" not found'));
    assert.equal(notFound.length, inOwnNamespace, fresh.stderr);
    assert.equal(errorsIn(fresh.stderr).split("\n").length, inOwnNamespace, `only the missing namespace is refused:\n${fresh.stderr}`);
    assert.equal(linesSaying(fresh.stdout, "serverside-applied (server dry run)").length, objects.length - inOwnNamespace, fresh.stdout);

    const applied = await kubectl(lab, "apply", "-f", MANIFESTS);
    assert.equal(applied.code, 0, applied.stderr);
    assert.equal(linesSaying(applied.stdout, "created").length, objects.length, applied.stdout);
    const again = await kubectl(lab, "apply", "-f", MANIFESTS);
    assert.equal(again.code, 0, again.stderr);
    // Re-applying is how users upgrade. (kubectl always sends a PodDisruptionBudget's selector, patch strategy
    // "replace", and so reports it "configured"; the apiserver finds nothing to change.)
    const unchanged = again.stdout
      .split("\n")
      .filter((l) => l.endsWith(" unchanged") || l === "poddisruptionbudget.policy/stockade configured");
    assert.equal(unchanged.length, objects.length, `a second apply changes nothing:\n${again.stdout}`);

    const dry = await kubectl(lab, "apply", "--server-side", "--dry-run=server", "-f", MANIFESTS);
    assert.equal(dry.code, 0, dry.stderr);
    assert.equal(errorsIn(dry.stderr), "");
    assert.equal(linesSaying(dry.stdout, "serverside-applied (server dry run)").length, objects.length, dry.stdout);

    // Pod Security "restricted" is enforced in stockade-system: the ReplicaSet could create both pods. (There is
    // no image; kwok reports the pods Running and Ready anyway.)
    const apps = lab.kc.makeApiClient(AppsV1Api);
    const dep = await waitFor(
      "Deployment stockade with 2 ready replicas",
      async () => {
        const d = await apps.readNamespacedDeployment({ name: "stockade", namespace: "stockade-system" });
        return d.status?.readyReplicas === 2 ? d : undefined;
      },
      { timeoutMs: 60_000 },
    );
    assert.equal(dep.spec?.template.spec?.priorityClassName, "system-cluster-critical");
    const failed = await lab.core.listNamespacedEvent({ namespace: "stockade-system", fieldSelector: "reason=FailedCreate" });
    assert.deepEqual(
      failed.items.map((e) => e.message),
      [],
    );

    const examples = objectsIn(EXAMPLES);
    const ex = await kubectl(lab, "apply", "--dry-run=server", "-f", EXAMPLES);
    assert.equal(ex.code, 0, ex.stderr);
    assert.equal(linesSaying(ex.stdout, "created (server dry run)").length, examples.length, ex.stdout);
  });
});

interface AuditEvent {
  verb?: string;
  stage?: string;
  requestURI?: string;
  user?: { username?: string };
  objectRef?: { resource?: string; subresource?: string; namespace?: string; name?: string; apiGroup?: string };
  responseStatus?: { code?: number };
}

/** One thing the bundle lets the operator do; namespace undefined for a ClusterRole's grants. */
interface Grant {
  group: string;
  resource: string;
  verb: string;
  namespace: string | undefined;
  names: string[] | undefined;
}

/** What the bundle grants the operator's ServiceAccount: the rules of the roles bound to it (not the roles for people). */
function grantsOf(objects: ReturnType<typeof objectsIn>): Grant[] {
  const bound = new Set(
    objects
      .filter((b) => b.kind === "ClusterRoleBinding" || b.kind === "RoleBinding")
      .filter((b) =>
        b.subjects?.some((s) => s.kind === "ServiceAccount" && `system:serviceaccount:${s.namespace}:${s.name}` === OPERATOR_USER),
      )
      .map(
        (b) =>
          `${b.roleRef?.kind}/${b.kind === "RoleBinding" && b.roleRef?.kind === "Role" ? b.metadata?.namespace : ""}/${b.roleRef?.name}`,
      ),
  );
  const out: Grant[] = [];
  for (const o of objects) {
    if (o.kind !== "ClusterRole" && o.kind !== "Role") continue;
    if (!bound.has(`${o.kind}/${o.kind === "Role" ? o.metadata?.namespace : ""}/${o.metadata?.name}`)) continue;
    const namespace = o.kind === "Role" ? o.metadata?.namespace : undefined;
    for (const r of o.rules ?? [])
      for (const group of r.apiGroups ?? [])
        for (const resource of r.resources ?? [])
          for (const verb of r.verbs) out.push({ group, resource, verb, namespace, names: r.resourceNames });
  }
  return out;
}

const resourceOf = (e: AuditEvent) => `${e.objectRef?.resource ?? ""}${e.objectRef?.subresource ? `/${e.objectRef.subresource}` : ""}`;
const groupOf = (e: AuditEvent) => e.objectRef?.apiGroup ?? "";
const show = (g: Grant) =>
  `${g.group || "core"} ${g.resource} ${g.verb}${g.namespace ? ` in ${g.namespace}` : ""}${g.names ? ` ${JSON.stringify(g.names)}` : ""}`;

describe("RBAC: the operator as the bundle's ServiceAccount", () => {
  let bed: Bed;
  before(async () => {
    bed = await Bed.up({ nodes: 3, name: "rbac", runtime: "kwok" });
  });
  after(async () => {
    await bed?.down();
  });

  const released = (f: NodeFence) => f.status?.phase === "Released";

  test("through a crash, release, unfence and a second fence: never forbidden, every grant used", async () => {
    // The bed made stockade-system and the FenceAgents' per-node Secrets in it; the bundle labels the
    // namespace and adds the ServiceAccount and its RBAC.
    const applied = await kubectl(bed.lab, "apply", "-f", MANIFESTS);
    assert.equal(applied.code, 0, applied.stderr);
    const token = (await bed.kubectl("create", "token", "stockade", "-n", SECRETS_NS, "--duration=1h")).trim();
    const cluster = bed.lab.kc.getCurrentCluster();
    assert.ok(cluster, "the lab's admin kubeconfig names a cluster");
    const kubeconfig = join(bed.lab.dir, "stockade-sa.kubeconfig");
    writeFileSync(
      kubeconfig,
      JSON.stringify({
        apiVersion: "v1",
        kind: "Config",
        clusters: [
          {
            name: "lab",
            cluster: {
              server: cluster.server,
              ...(cluster.caData ? { "certificate-authority-data": cluster.caData } : { "certificate-authority": cluster.caFile }),
            },
          },
        ],
        users: [{ name: "stockade", user: { token } }],
        contexts: [{ name: "stockade", context: { cluster: "lab", user: "stockade" } }],
        "current-context": "stockade",
      }),
      { mode: 0o600 },
    );
    const t0 = new Date();
    // The bundle's webhooks, pointed at the operator on this host (no Service endpoints in the lab).
    await bed.installWebhooks();

    await bed.policy("default", {});
    await bed.startOperator({ leaderElect: true, kubeconfig });
    await waitFor("the operator to lead", () => bed.operatorLogs().includes("controllers running"), { timeoutMs: 30_000 });

    // Crash: the node of db-0 is fenced through IPMI, db-0 and a VolumeAttachment are released.
    const pods = await bed.statefulSet("db", 2);
    const victim = pods.find((p) => p.metadata?.name === "db-0")!;
    const node = victim.spec!.nodeName!;
    // A guarded pod that can only run on that node: it returns there after the unfence, so the node can be
    // fenced a second time, which replaces the Unfenced NodeFence (nodefences delete).
    await bed.statefulSet("pin", 1, { nodeSelector: { "kubernetes.io/hostname": node } });
    // A pod on a guarded claim on that node: gated at creation, granted (pvcs get/update, pods get/list/update),
    // its lock broken by the fence's release (pvcs update again).
    await bed.lab.core.createPersistentVolume({
      body: {
        metadata: { name: "pv-rbac-claim" },
        spec: {
          capacity: { storage: "1Mi" },
          accessModes: ["ReadWriteOnce"],
          hostPath: { path: "/tmp/stockade-rbac-claim" },
          claimRef: { namespace: "default", name: "rbac-claim" },
        },
      },
    });
    await bed.lab.core.createNamespacedPersistentVolumeClaim({
      namespace: "default",
      body: {
        metadata: { name: "rbac-claim" },
        spec: { accessModes: ["ReadWriteOnce"], storageClassName: "", resources: { requests: { storage: "1Mi" } } },
      },
    });
    const claimPod = await bed.lab.core.createNamespacedPod({
      namespace: "default",
      body: {
        metadata: { name: "rbac-claim-pod" },
        spec: {
          nodeSelector: { "kubernetes.io/hostname": node },
          containers: [{ name: "c", image: "registry.k8s.io/pause:3.10" }],
          volumes: [{ name: "v", persistentVolumeClaim: { claimName: "rbac-claim" } }],
        },
      },
    });
    assert.ok(isGated(claimPod), "gated by the webhook");
    await waitFor(
      "rbac-claim-pod granted and Running",
      async () => (await bed.lab.core.readNamespacedPod({ name: "rbac-claim-pod", namespace: "default" })).status?.phase === "Running",
      { timeoutMs: 60_000 },
    );
    // An eviction with grace 0 of a guarded pod on a healthy node: the force-delete guard reads the pod (pods get)
    // and refuses it.
    const evicted = pods.find((p) => p.metadata?.name === "db-1")!;
    const evictionRefusal = await refusal(
      bed.lab.core.createNamespacedPodEviction({
        name: "db-1",
        namespace: evicted.metadata!.namespace!,
        body: { metadata: { name: "db-1", namespace: evicted.metadata!.namespace! }, deleteOptions: { gracePeriodSeconds: 0 } },
      }),
    );
    assert.match(evictionRefusal?.message ?? "allowed", /kubectl stockade fence/, "the guard refused the eviction");
    await bed.lab.kc.makeApiClient(StorageV1Api).createVolumeAttachment({
      body: {
        metadata: { name: `va-db-0-${node}` },
        spec: { attacher: "lab.csi.stockade.io", nodeName: node, source: { persistentVolumeName: "pv-db-0" } },
      },
    });
    await bed.lab.crash(node);
    await bed.waitForReplacement("db-0", victim.metadata!.uid!);
    const first = await bed.waitForFence(node, released, "Released");
    assert.ok(first.status?.releases?.some((r) => r.kind === "VolumeAttachment"));
    assert.ok(
      first.status?.releases?.some((r) => r.kind === "ClaimLock" && r.action === "Broken"),
      "the claim lock was broken",
    );
    await bed.unfence(node);

    // The second fence also puts up a csi-addons storage fence (a mixed level: the IPMI power-off is the proof),
    // which the unfence lifts: networkfences get and create, then update (Unfenced) and delete.
    await bed.installNetworkFenceCrd();
    const csiAddons = new NetworkFenceDouble(bed.lab.kc, bed.lab.dir, () => undefined).start();
    await bed.create("fenceagents", {
      metadata: { name: "lab-netfence" },
      spec: {
        type: "csiAddonsNetworkFence",
        parameters: { networkFenceClassName: "lab-san", storageClasses: "lab-san" },
        nodes: Object.fromEntries(bed.lab.nodes().map((n, i) => [n, { parameters: { cidrs: `10.250.0.${i + 1}` } }])),
        timeoutSeconds: 15,
        retries: 1,
      },
    });
    await bed.kubectl("delete", "fencingpolicy", "default");
    await bed.policy("default", { escalation: [{ agents: [{ name: "lab-ipmi" }, { name: "lab-netfence" }] }] });

    // The same node again, once pin-0 runs there again.
    await waitFor(
      `pin-0 Running on ${node} again`,
      async () => {
        const p = (await bed.pods("pin"))[0];
        return p?.spec?.nodeName === node && p.status?.phase === "Running" ? p : undefined;
      },
      { timeoutMs: 60_000 },
    );
    // Fence history: an ended record of this node from long ago (past the 400 days kept) is deleted by the retention
    // that runs when the next episode's record is created (fencerecords list, delete).
    const stale: FenceRecord = {
      apiVersion: `${GROUP}/${VERSION}`,
      kind: "FenceRecord",
      metadata: { name: `${node}-000000000000`, labels: { [HISTORY_NODE_LABEL]: nodeLabelValue(node) } },
      spec: { nodeName: node, nodeFence: { name: node, uid: "00000000-0000-0000-0000-000000000000" }, origin: "Manual" },
      status: { outcome: "Released", startTime: "2020-01-01T00:00:00Z", endTime: "2020-01-02T00:00:00Z", endReason: "Deleted" },
    };
    await bed.custom.createClusterCustomObject({ group: GROUP, version: VERSION, plural: "fencerecords", body: stale });
    await bed.lab.crash(node);
    const second = await bed.waitForFence(
      node,
      (f) => released(f) && f.metadata?.uid !== first.metadata?.uid,
      "Released (a new NodeFence)",
    );
    assert.equal(second.spec.origin, "Automatic");
    assert.equal(second.status?.evidence?.method, "PowerOffConfirmed", "a level with a power agent proves the machine off");
    const history = async () =>
      (
        (await bed.custom.listClusterCustomObject({ group: GROUP, version: VERSION, plural: "fencerecords" })) as { items: FenceRecord[] }
      ).items.filter((r) => r.spec.nodeName === node);
    await waitFor("the stale FenceRecord deleted by retention, both episodes kept", async () => {
      const uids = (await history()).map((r) => r.spec.nodeFence.uid).sort();
      return JSON.stringify(uids) === JSON.stringify([first.metadata!.uid!, second.metadata!.uid!].sort()) || undefined;
    });
    await bed.unfence(node);
    await waitFor(
      "the storage fence lifted and removed",
      async () =>
        (await bed.custom.listClusterCustomObject(NETWORK_FENCES).then((l) => (l as { items: unknown[] }).items.length === 0)) || undefined,
      { timeoutMs: 30_000 },
    );
    csiAddons.stop();
    // A replica that must serve one more name renews the serving certificate (secrets update).
    await bed.killOperator("SIGTERM");
    await bed.startOperator({ leaderElect: true, kubeconfig, extraArgs: ["--webhook-hosts", "127.0.0.1,localhost"] });
    await waitFor(
      "the serving certificate renewed",
      () => /renewing the webhook serving certificate: it does not name localhost/.test(bed.operatorLogs()),
      {
        timeoutMs: 30_000,
      },
    );
    await bed.killOperator("SIGTERM"); // steps down: releases the leader Lease
    assert.deepEqual((await bed.invariant()).violations, []);

    const audit = readFileSync(paths(bed.lab.dir).audit, "utf8")
      .split("\n")
      .filter((l) => l.trim())
      .map((l) => JSON.parse(l) as AuditEvent)
      .filter((e) => e.user?.username === OPERATOR_USER);
    assert.ok(audit.length > 0, `no request by ${OPERATOR_USER} in the audit log`);
    const forbidden = audit.filter((e) => e.responseStatus?.code === 403 || e.responseStatus?.code === 401);
    assert.deepEqual(
      forbidden.map((e) => `${e.verb} ${e.requestURI} → ${e.responseStatus?.code}`),
      [],
      "requests of the operator that were refused",
    );

    const grants = grantsOf(objectsIn(MANIFESTS));
    // A streamed list (a watch with sendInitialEvents) is each informer's list where the server offers it; `list` stays
    // granted for the servers that do not (Kubernetes 1.33: the informer pages instead), so such a watch uses it.
    const streamedList = (e: AuditEvent) => e.verb === "watch" && /[?&]sendInitialEvents=true/.test(e.requestURI ?? "");
    const uses = (g: Grant) =>
      audit.filter(
        (e) =>
          (e.verb === g.verb || (g.verb === "list" && streamedList(e))) &&
          groupOf(e) === g.group &&
          resourceOf(e) === g.resource &&
          (g.namespace === undefined || e.objectRef?.namespace === g.namespace) &&
          (g.names === undefined || g.names.includes(e.objectRef?.name ?? "")),
      ).length;
    // A verb that is not a REST verb is never requested: an admission policy asks the authorizer for it.
    const requested = grants.filter((g) => REST_VERBS.has(g.verb));
    const custom = grants.filter((g) => !REST_VERBS.has(g.verb));
    const table = requested.map((g) => `${String(uses(g)).padStart(6)}  ${show(g)}`);
    console.log(`requests by ${OPERATOR_USER} since ${t0.toISOString()}, per grant:\n${table.join("\n")}`);
    assert.deepEqual(
      requested.filter((g) => uses(g) === 0).map(show),
      [],
      "granted but never used: remove the grant, or make the scenario exercise it",
    );
    // And the converse, so a new call shows up here before it shows up as a 403 in a cluster.
    const covered = (e: AuditEvent) =>
      grants.some(
        (g) =>
          e.verb === g.verb &&
          groupOf(e) === g.group &&
          resourceOf(e) === g.resource &&
          (g.namespace === undefined || e.objectRef?.namespace === g.namespace),
      );
    assert.deepEqual(
      [...new Set(audit.filter((e) => e.objectRef && !covered(e)).map((e) => `${e.verb} ${groupOf(e) || "core"} ${resourceOf(e)}`))],
      [],
    );

    // The custom verbs: each must be proven needed here, since the audit log cannot show it used.
    assert.deepEqual(
      custom.map(show),
      [`stockade.io claimlocks ${ATTEST_VERB}`, `stockade.io nodefences ${ATTEST_VERB}`],
      "a custom verb without a proof below",
    );
    // attest — manifests/06-admission-policy.yaml checks it on every write to nodefences/status. The operator's
    // own status write (Kube.replaceStatus of the fence's current status) is allowed with the bundle's RBAC,
    // refused by the policy once the ClusterRole lacks the verb, and allowed again when it is back.
    const kc = new KubeConfig();
    kc.loadFromFile(kubeconfig);
    const operator = new Kube(kc);
    const writeStatus = async (): Promise<unknown> => {
      try {
        await operator.replaceStatus("nodefences", (await bed.getFence(node))!);
        return undefined;
      } catch (e) {
        return e;
      }
    };
    assert.equal(await writeStatus(), undefined);
    const role = objectsIn(MANIFESTS).find((o) => o.kind === "ClusterRole" && o.metadata?.name === "stockade")!;
    const withoutAttest = join(bed.lab.dir, "clusterrole-without-attest.json");
    writeFileSync(
      withoutAttest,
      JSON.stringify({
        ...role,
        rules: role.rules!.map((r) => ({ ...r, verbs: r.verbs.filter((v) => v !== ATTEST_VERB) })).filter((r) => r.verbs.length),
      }),
    );
    const removed = await kubectl(bed.lab, "apply", "-f", withoutAttest);
    assert.equal(removed.code, 0, removed.stderr);
    const refused = await waitFor(
      "the operator's status write refused without attest",
      async () => {
        const e = await writeStatus();
        return statusCode(e) === 403 ? errorMessage(e) : undefined;
      },
      { timeoutMs: 30_000, intervalMs: 250 },
    );
    assert.match(refused, new RegExp(`ValidatingAdmissionPolicy '${ADMISSION_POLICY}'.*needs the RBAC verb "${ATTEST_VERB}"`));
    const restored = await kubectl(bed.lab, "apply", "-f", join(MANIFESTS, "02-rbac.yaml"));
    assert.equal(restored.code, 0, restored.stderr);
    await waitFor("the operator's status write allowed again", async () => (await writeStatus()) === undefined, {
      timeoutMs: 30_000,
      intervalMs: 250,
    });

    // attest on claimlocks — manifests/06-admission-policy.yaml checks it on every change of a claim's lock record:
    // the operator's rewrite of the record is allowed with the bundle's RBAC, refused without the verb.
    const writeLock = async (): Promise<unknown> => {
      try {
        const pvc = await operator.core.readNamespacedPersistentVolumeClaim({ name: "rbac-claim", namespace: "default" });
        const lock = parseLock(pvc);
        assert.ok(lock.ok && lock.lock, "the claim has a lock record");
        await operator.casAnnotateClaim(pvc, { [LOCK_ANNOTATION]: formatLock({ ...lock.lock, time: new Date().toISOString() }) });
        return undefined;
      } catch (e) {
        return e;
      }
    };
    assert.equal(await writeLock(), undefined);
    const removed2 = await kubectl(bed.lab, "apply", "-f", withoutAttest);
    assert.equal(removed2.code, 0, removed2.stderr);
    const refusedLock = await waitFor(
      "the operator's lock write refused without attest",
      async () => {
        const e = await writeLock();
        return statusCode(e) === 403 ? errorMessage(e) : undefined;
      },
      { timeoutMs: 30_000, intervalMs: 250 },
    );
    assert.match(refusedLock, /ValidatingAdmissionPolicy 'stockade-claim-lock-authority'.*only Stockade writes it/);
    const restored2 = await kubectl(bed.lab, "apply", "-f", join(MANIFESTS, "02-rbac.yaml"));
    assert.equal(restored2.code, 0, restored2.stderr);
    await waitFor("the operator's lock write allowed again", async () => (await writeLock()) === undefined, {
      timeoutMs: 30_000,
      intervalMs: 250,
    });
  });
});
