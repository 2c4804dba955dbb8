// The admission policy (manifests/06-admission-policy.yaml) on a real apiserver, with users that hold exactly
// the RBAC they would in practice: client certificates minted from the lab CA, bound to the bundle's roles or
// to the narrowest role an attack needs, and the operator's own ServiceAccount token.
//   - update on nodefences/status without the verb "attest" cannot forge a fence's status;
//   - patch/create on nodefences without the verb "confirm" cannot confirm a manual fence;
//   - with the verbs both work, and so does the operator's ServiceAccount;
//   - a node's own identity can write nothing on a NodeFence;
//   - without the policy, the forgeries go through (what the policy is for).
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import type { ApiException } from "@kubernetes/client-node";
import {
  AdmissionregistrationV1Api,
  CoreV1Api,
  CustomObjectsApi,
  KubeConfig,
  PatchStrategy,
  setHeaderOptions,
} from "@kubernetes/client-node";
import { Lab } from "../../lab/lab.ts";
import { refusal, type Refusal } from "../../lab/refusal.ts";
import { repoRoot } from "../../lab/bins.ts";
import { waitFor } from "../../lab/health.ts";
import { createPki, writeKubeconfig } from "../../lab/pki.ts";
import { paths } from "../../lab/state.ts";
import { GROUP, VERSION, type NodeFence } from "../../src/api/v1alpha1.ts";
import { CONFIRMED_OFF_ANNOTATION } from "../../src/agents/manual.ts";
import { ADMISSION_BINDING, ADMISSION_POLICY, checkAdmissionPolicy } from "../../src/kube/admission-check.ts";
import { Kube } from "../../src/kube/api.ts";
import { CLAIM_GATE, LOCK_ANNOTATION } from "../../src/decide/claim-lock.ts";

const run = promisify(execFile);
const MANIFESTS = join(repoRoot, "manifests");
const merge = setHeaderOptions("Content-Type", PatchStrategy.MergePatch);

/** The status a forger wants: the fence confirmed by power-off and the release under way. */
const forgedStatus = (node: string) => ({
  phase: "Releasing",
  policy: "default",
  evidence: {
    method: "PowerOffConfirmed",
    time: new Date().toISOString(),
    agents: ["lab-ipmi"],
    detail: `chassis power of ${node} is off`,
  },
});

describe("admission policy: who may write a NodeFence's status and confirm a manual fence", () => {
  let lab: Lab;
  let admin: CustomObjectsApi;
  const as: Record<string, CustomObjectsApi> = {};
  const coreAs: Record<string, CoreV1Api> = {};
  let operatorKube: Kube;
  let node: string;

  const kubectl = async (...args: string[]) => (await run("kubectl", args, { env: lab.env })).stdout;
  const get = async (name: string) =>
    (await admin.getClusterCustomObject({ group: GROUP, version: VERSION, plural: "nodefences", name })) as NodeFence;
  const fenceBody = (name: string, annotations?: Record<string, string>) => ({
    apiVersion: `${GROUP}/${VERSION}`,
    kind: "NodeFence",
    metadata: { name, ...(annotations ? { annotations } : {}) },
    spec: { nodeName: name, reason: "admission test" },
  });
  const create = (api: CustomObjectsApi, name: string, annotations?: Record<string, string>, dryRun?: string) =>
    api.createClusterCustomObject({ group: GROUP, version: VERSION, plural: "nodefences", body: fenceBody(name, annotations), dryRun });
  const patch = (api: CustomObjectsApi, name: string, body: object, dryRun?: string) =>
    api.patchClusterCustomObject({ group: GROUP, version: VERSION, plural: "nodefences", name, body, dryRun }, merge);
  const annotate = (api: CustomObjectsApi, name: string, value: string | null, dryRun?: string) =>
    patch(api, name, { metadata: { annotations: { [CONFIRMED_OFF_ANNOTATION]: value } } }, dryRun);
  /** A status write as update (PUT, what the operator sends) of the object read now, with `status` replaced. */
  const replaceStatus = async (api: CustomObjectsApi, name: string, status: object, dryRun?: string) => {
    const f = await get(name);
    return api.replaceClusterCustomObjectStatus({
      group: GROUP,
      version: VERSION,
      plural: "nodefences",
      name,
      body: { ...f, status },
      dryRun,
    });
  };
  const patchStatus = (api: CustomObjectsApi, name: string, status: object) =>
    api.patchClusterCustomObjectStatus({ group: GROUP, version: VERSION, plural: "nodefences", name, body: { status } }, merge);

  before(async () => {
    lab = await Lab.up({ dir: mkdtempSync(join(tmpdir(), "stockade-admission-")), nodes: 1 });
    node = lab.nodes()[0]!;
    admin = lab.kc.makeApiClient(CustomObjectsApi);
    await kubectl("apply", "-f", MANIFESTS);
    await waitFor("NodeFences served", () => kubectl("get", "nodefences").then(() => true), { timeoutMs: 60_000, intervalMs: 250 });

    // People, as client certificates of the lab CA, each with exactly the RBAC of their role.
    const users = ["forger", "attester", "requester", "confirmer", "kubelet"];
    const pki = createPki(paths(lab.dir).pki, [
      ...users.filter((u) => u !== "kubelet").map((u) => ({ name: `user-${u}`, cn: u, groups: [] })),
      // What a node's kubelet authenticates as (Node authorizer + the default RBAC).
      { name: "user-kubelet", cn: `system:node:${node}`, groups: ["system:nodes"] },
    ]);
    for (const u of users) {
      const file = join(lab.dir, `${u}.kubeconfig`);
      writeKubeconfig(file, { server: lab.kc.getCurrentCluster()!.server, caCert: pki.caCert, ...pki.client(`user-${u}`), user: u });
      const kc = new KubeConfig();
      kc.loadFromFile(file);
      as[u] = kc.makeApiClient(CustomObjectsApi);
      coreAs[u] = kc.makeApiClient(CoreV1Api);
    }
    // forger: what "anyone who can write nodefences/status" has; attester: the same plus the custom verb.
    const statusWriter = (name: string, verbs: string[]) => ({
      apiVersion: "rbac.authorization.k8s.io/v1",
      kind: "ClusterRole",
      metadata: { name },
      rules: [
        { apiGroups: [GROUP], resources: ["nodefences"], verbs: ["get", ...verbs] },
        { apiGroups: [GROUP], resources: ["nodefences/status"], verbs: ["update", "patch"] },
      ],
    });
    const rbac = join(lab.dir, "test-rbac.json");
    writeFileSync(
      rbac,
      JSON.stringify({
        apiVersion: "v1",
        kind: "List",
        items: [
          statusWriter("test-status-writer", []),
          statusWriter("test-attester", ["attest"]),
          // kubectl create clusterrole refuses a resource the server does not serve; the policy only asks the authorizer.
          {
            apiVersion: "rbac.authorization.k8s.io/v1",
            kind: "ClusterRole",
            metadata: { name: "test-claimlock-attester" },
            rules: [{ apiGroups: [GROUP], resources: ["claimlocks"], verbs: ["attest"] }],
          },
        ],
      }),
    );
    await kubectl("apply", "-f", rbac);
    // For the claim lock: editing pods and claims (what a namespace's users have), and attest on claimlocks.
    await kubectl("create", "clusterrole", "test-pod-editor", "--verb=get,create,update,patch", "--resource=pods,persistentvolumeclaims");
    await kubectl("create", "clusterrolebinding", "forger-pods", "--clusterrole=test-pod-editor", "--user=forger");
    await kubectl("create", "clusterrolebinding", "attester-pods", "--clusterrole=test-pod-editor", "--user=attester");
    await kubectl("create", "clusterrolebinding", "attester-claimlocks", "--clusterrole=test-claimlock-attester", "--user=attester");
    await kubectl("create", "clusterrolebinding", "forger", "--clusterrole=test-status-writer", "--user=forger");
    await kubectl("create", "clusterrolebinding", "attester", "--clusterrole=test-attester", "--user=attester");
    // requester and confirmer: the bundle's roles for people (manifests/07-user-roles.yaml).
    await kubectl("create", "clusterrolebinding", "requester", "--clusterrole=stockade-fence-admin", "--user=requester");
    await kubectl("create", "clusterrolebinding", "confirmer-admin", "--clusterrole=stockade-fence-admin", "--user=confirmer");
    await kubectl("create", "clusterrolebinding", "confirmer", "--clusterrole=stockade-fence-confirmer", "--user=confirmer");

    // The operator: a token of the bundle's ServiceAccount, with the bundle's RBAC.
    const token = (await kubectl("create", "token", "stockade", "-n", "stockade-system", "--duration=1h")).trim();
    const kc = new KubeConfig();
    kc.loadFromOptions({
      clusters: [{ name: "lab", server: lab.kc.getCurrentCluster()!.server, caFile: pki.caCert }],
      users: [{ name: "stockade", token }],
      contexts: [{ name: "stockade", cluster: "lab", user: "stockade" }],
      currentContext: "stockade",
    });
    operatorKube = new Kube(kc);

    // RBAC bindings and the policy reach the apiserver's caches a moment after they are written: wait, with dry
    // runs (admission runs, nothing is stored), until each user gets the answer their role and the policy give.
    await create(admin, node);
    const settles = async (what: string, req: () => Promise<unknown>, ok: (r: Refusal | undefined) => boolean) => {
      let last: Refusal | undefined;
      await waitFor(what, async () => ok((last = await refusal(req()))), {
        timeoutMs: 30_000,
        intervalMs: 250,
        onTimeout: () => `: last answer ${JSON.stringify(last ?? "allowed")}`,
      });
    };
    await settles(
      "the policy refusing the forger",
      () => replaceStatus(as.forger!, node, forgedStatus(node), "All"),
      (r) => r?.code === 403 && r.message.includes(ADMISSION_POLICY),
    );
    await settles(
      "the requester allowed to patch",
      () => patch(as.requester!, node, { spec: { reason: "x" } }, "All"),
      (r) => !r,
    );
    await settles(
      "the confirmer allowed to confirm",
      () => annotate(as.confirmer!, node, node, "All"),
      (r) => !r,
    );
    await settles(
      "the attester allowed to write status",
      () => replaceStatus(as.attester!, node, {}, "All"),
      (r) => !r,
    );
  });
  after(async () => {
    await lab?.down();
  });

  test("the policy type-checks against the NodeFence schema, and the operator's check finds it in force", async () => {
    const api = lab.kc.makeApiClient(AdmissionregistrationV1Api);
    const policy = await waitFor(
      "the policy's type check",
      async () => {
        const p = await api.readValidatingAdmissionPolicy({ name: ADMISSION_POLICY });
        return p.status?.observedGeneration === p.metadata?.generation && p.status?.typeChecking ? p : undefined;
      },
      { timeoutMs: 30_000 },
    );
    assert.deepEqual(policy.status?.typeChecking?.expressionWarnings ?? [], []);
    assert.deepEqual(await checkAdmissionPolicy(lab.kc), []);
  });

  test("update on nodefences/status without attest cannot forge a fence's status", async (t) => {
    const before = await get(node);
    for (const write of [
      () => replaceStatus(as.forger!, node, forgedStatus(node)),
      () => patchStatus(as.forger!, node, forgedStatus(node)),
    ]) {
      const r = await refusal(write());
      assert.equal(r?.code, 403, JSON.stringify(r));
      assert.match(r.message, new RegExp(`ValidatingAdmissionPolicy '${ADMISSION_POLICY}'`));
      assert.match(r.message, /forger may not write its status/);
      assert.match(r.message, /needs the RBAC verb "attest" on nodefences\.stockade\.io/);
      assert.match(r.message, /verbs: \[attest\]/, "says how to grant it");
      t.diagnostic(r.message);
    }
    // Neither a harmless-looking field: status.bootID alone would make the operator conclude BootIDChanged.
    assert.equal((await refusal(patchStatus(as.forger!, node, { phase: "Fencing", bootID: "forged" })))?.code, 403);
    assert.deepEqual((await get(node)).status, before.status, "the status is untouched");
  });

  test("patch and create on nodefences without confirm cannot confirm a manual fence; plain create and unfence stay allowed", async (t) => {
    // Asking for a fence is plain create (and it cannot carry status: the status subresource drops it).
    const other = "admission-other";
    await create(as.requester!, other);
    const r1 = await refusal(annotate(as.requester!, other, other));
    assert.equal(r1?.code, 403, JSON.stringify(r1));
    assert.match(r1.message, /requester may not set, change or remove the annotation stockade\.io\/confirmed-off/);
    assert.match(r1.message, /needs the RBAC verb "confirm" on nodefences\.stockade\.io/);
    assert.match(r1.message, /kubectl create clusterrolebinding <name> --clusterrole=stockade-fence-confirmer --user=requester/);
    t.diagnostic(r1.message);
    // Nor create one that already carries the confirmation.
    const r2 = await refusal(create(as.requester!, "admission-preconfirmed", { [CONFIRMED_OFF_ANNOTATION]: "admission-preconfirmed" }));
    assert.equal(r2?.code, 403, JSON.stringify(r2));
    assert.match(r2.message, /needs the RBAC verb "confirm"/);
    await assert.rejects(get("admission-preconfirmed"), "not created");
    // Other annotations and spec changes are plain patch; spec.unfence needs no verb of its own.
    await patch(as.requester!, other, { metadata: { annotations: { "example.com/ticket": "INC-1" } }, spec: { unfence: true } });
    assert.equal((await get(other)).spec.unfence, true);
    assert.equal((await get(other)).metadata?.annotations?.[CONFIRMED_OFF_ANNOTATION], undefined);
  });

  test("with the verbs: attest writes status, confirm sets, changes and removes the confirmation", async () => {
    await replaceStatus(as.attester!, node, forgedStatus(node));
    assert.equal((await get(node)).status?.evidence?.method, "PowerOffConfirmed");
    await patchStatus(as.attester!, node, { phase: "Fenced" });
    assert.equal((await get(node)).status?.phase, "Fenced");

    await annotate(as.confirmer!, node, node);
    assert.equal((await get(node)).metadata?.annotations?.[CONFIRMED_OFF_ANNOTATION], node);
    // Once set, removing it is refused to the requester too (a confirmation is not withdrawn by just anyone).
    const r = await refusal(annotate(as.requester!, node, null));
    assert.equal(r?.code, 403, JSON.stringify(r));
    // A confirmation must name the node: anything else is refused at once, whoever asks.
    const wrong = await refusal(annotate(as.confirmer!, node, "some-other-node"));
    assert.equal(wrong?.code, 422, JSON.stringify(wrong));
    assert.match(wrong.message, new RegExp(`must be the node name "${node}".*not "some-other-node"`));
    await annotate(as.confirmer!, node, null);
    assert.equal((await get(node)).metadata?.annotations?.[CONFIRMED_OFF_ANNOTATION], undefined);
    // And create one that carries it.
    await create(as.confirmer!, "admission-confirmed", { [CONFIRMED_OFF_ANNOTATION]: "admission-confirmed" });
    assert.equal((await get("admission-confirmed")).metadata?.annotations?.[CONFIRMED_OFF_ANNOTATION], "admission-confirmed");
    // The confirmer's other writes on a confirmed NodeFence need nothing more; the operator's status writes
    // on it neither need confirm (the annotation does not change).
    await patch(as.confirmer!, "admission-confirmed", { spec: { reason: "confirmed by dc-ops" } });
  });

  test("the operator's ServiceAccount, with the bundle's RBAC, writes status, may withdraw a confirmation but never give one", async () => {
    const f = await operatorKube.getNodeFence("admission-confirmed");
    assert.ok(f);
    const written = await operatorKube.replaceStatus("nodefences", { ...f, status: { phase: "Pending", policy: "default" } });
    assert.equal(written.status?.phase, "Pending");
    // It may not confirm: that is a person's word. Its patch (finalizers) is refused by the policy here.
    const r = await refusal(annotate(operatorKube.custom, node, node));
    assert.equal(r?.code, 403, JSON.stringify(r));
    assert.match(r.message, /needs the RBAC verb "confirm"/);
    // It may withdraw one a heartbeat proved wrong (reenter): removing the annotation can only delay a release.
    const confirmed = (await operatorKube.getNodeFence("admission-confirmed"))!;
    const withdrawn = await operatorKube.patchNodeFenceMetadata(confirmed, { annotations: { [CONFIRMED_OFF_ANNOTATION]: null } });
    assert.equal(withdrawn.metadata?.annotations?.[CONFIRMED_OFF_ANNOTATION], undefined);
    // And it keeps its finalizer on the objects it manages.
    const finalized = await operatorKube.patchNodeFenceMetadata(withdrawn, { finalizers: ["stockade.io/node-cleanup"] });
    assert.deepEqual(finalized.metadata?.finalizers, ["stockade.io/node-cleanup"]);
    await operatorKube.patchNodeFenceMetadata(finalized, { finalizers: [] });
  });

  test("a node's own identity (system:node:<name>) can write nothing on a NodeFence", async () => {
    for (const write of [
      () => annotate(as.kubelet!, node, node),
      () => patchStatus(as.kubelet!, node, forgedStatus(node)),
      () => replaceStatus(as.kubelet!, node, forgedStatus(node)),
      () => create(as.kubelet!, "admission-by-kubelet"),
    ]) {
      const r = await refusal(write());
      assert.equal(r?.code, 403, JSON.stringify(r));
      assert.match(r.message, new RegExp(`User "system:node:${node}" cannot`), "refused by the authorizer, before admission");
    }
  });

  test("claim lock: only attest on claimlocks writes a claim's lock record or lifts a pod's claim-lock gate", async () => {
    const core = lab.core;
    // No PVC volume: the claim-lock webhook does not see it; the gate is set by hand, as the webhook would.
    await core.createNamespacedPod({
      namespace: "default",
      body: { metadata: { name: "gated" }, spec: { schedulingGates: [{ name: CLAIM_GATE }], containers: [{ name: "c", image: "x" }] } },
    });
    await core.createNamespacedPersistentVolumeClaim({
      namespace: "default",
      body: {
        metadata: { name: "locked", annotations: { [LOCK_ANNOTATION]: '{"v":1,"token":3,"time":"2026-01-01T00:00:00Z"}' } },
        spec: { accessModes: ["ReadWriteOnce"], resources: { requests: { storage: "1Mi" } } },
      },
    });
    const ungate = (api: CoreV1Api) =>
      api.patchNamespacedPod({
        name: "gated",
        namespace: "default",
        body: [{ op: "remove", path: "/spec/schedulingGates/0" }],
        dryRun: "All",
      });
    const relock = (api: CoreV1Api) =>
      api.patchNamespacedPersistentVolumeClaim(
        {
          name: "locked",
          namespace: "default",
          body: {
            metadata: {
              annotations: { [LOCK_ANNOTATION]: '{"v":1,"token":99,"holder":{"pod":"mine","uid":"u"},"time":"2026-01-01T00:00:00Z"}' },
            },
          },
          dryRun: "All",
        },
        merge,
      );
    const other = (api: CoreV1Api) =>
      api.patchNamespacedPersistentVolumeClaim(
        { name: "locked", namespace: "default", body: { metadata: { annotations: { team: "db" } } }, dryRun: "All" },
        merge,
      );
    const gate = await refusal(ungate(coreAs.forger!));
    assert.equal(gate?.code, 403);
    assert.match(gate!.message, /stockade-claim-gate-authority.*may not remove the scheduling gate stockade\.io\/claim-lock/);
    const lock = await refusal(relock(coreAs.forger!));
    assert.equal(lock?.code, 403);
    assert.match(lock!.message, /stockade-claim-lock-authority.*only Stockade writes it/);
    assert.equal(await refusal(other(coreAs.forger!)), undefined, "other annotations stay the users'");
    assert.equal(await refusal(ungate(coreAs.attester!)), undefined);
    assert.equal(await refusal(relock(coreAs.attester!)), undefined);
    assert.equal(await refusal(ungate(operatorKube.core)), undefined, "the operator's ServiceAccount may");
  });

  test("the claim lock's fresh pod list: plain JSON with the bundle's RBAC; a refusal is an ApiException with its code", async () => {
    await lab.core.createNamespacedPod({
      namespace: "default",
      body: { metadata: { name: "listed" }, spec: { nodeName: node, containers: [{ name: "c", image: "stockade.lab/none:1" }] } },
    });
    const pods = await operatorKube.listPodsFresh("default");
    const listed = pods.find((p) => p.metadata?.name === "listed");
    assert.ok(listed, "the pod just created is in the list");
    assert.equal(listed.spec?.nodeName, node);
    assert.equal(typeof listed.metadata?.creationTimestamp, "string", "timestamps stay RFC 3339 text");
    const kc = new KubeConfig();
    kc.loadFromFile(join(lab.dir, "forger.kubeconfig"));
    await assert.rejects(new Kube(kc).listPodsFresh("default"), (e: ApiException<unknown>) => e.code === 403);
    assert.deepEqual(await operatorKube.listPodsFresh("no-such-namespace"), [], "an empty namespace lists nothing");
  });

  test("without the policy, the same forgeries go through (and the operator's check says so)", async () => {
    await kubectl("delete", "validatingadmissionpolicybinding", ADMISSION_BINDING);
    assert.match(
      (await checkAdmissionPolicy(lab.kc)).join("\n"),
      new RegExp(`ValidatingAdmissionPolicyBinding ${ADMISSION_BINDING} is not installed`),
    );
    await kubectl("delete", "validatingadmissionpolicy", ADMISSION_POLICY);
    assert.match(
      (await checkAdmissionPolicy(lab.kc)).join("\n"),
      new RegExp(`ValidatingAdmissionPolicy ${ADMISSION_POLICY} is not installed`),
    );
    await waitFor(
      "the policy out of force",
      async () => (await refusal(replaceStatus(as.forger!, node, forgedStatus(node), "All"))) === undefined,
      {
        timeoutMs: 30_000,
        intervalMs: 250,
      },
    );

    await replaceStatus(as.forger!, node, { ...forgedStatus(node), phase: "Releasing" });
    assert.equal((await get(node)).status?.evidence?.method, "PowerOffConfirmed", "the forger wrote the evidence");
    await annotate(as.requester!, node, node);
    assert.equal((await get(node)).metadata?.annotations?.[CONFIRMED_OFF_ANNOTATION], node, "the requester confirmed");
    await create(as.requester!, "admission-preconfirmed", { [CONFIRMED_OFF_ANNOTATION]: "admission-preconfirmed" });
    assert.equal((await get("admission-preconfirmed")).metadata?.annotations?.[CONFIRMED_OFF_ANNOTATION], "admission-preconfirmed");
  });
});
