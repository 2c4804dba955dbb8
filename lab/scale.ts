// The scale lab (issue 12): many simulated nodes and pods on the lab's real control plane, for bench/scale.ts.
// The lab's own nodes (each with its own kwok process and ipmi_sim BMC) stay as they are; on top of them one kwok
// process simulates N more, chosen by a label, with the kubelet's real Lease timing (40 s, renewed every 10 s).
// Silencing nodes takes the label away at once: kwok stops simulating them, so their Leases stop being renewed,
// as when machines die. Run it on Kubernetes' timings (lab/control-plane.ts kubernetesTimings): the lab's fast
// node-monitor grace (10 s) would take nodes renewing every 10 s for dead. Pods are created pre-bound (spec.nodeName set), many requests at a time: the scheduler
// would bind a few hundred a second here, and it is not what the bench measures.
import { randomUUID } from "node:crypto";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { CoordinationV1Api, PatchStrategy, setHeaderOptions, type V1Node, type V1Pod } from "@kubernetes/client-node";
import { mapLimit } from "../src/runtime/map-limit.ts";
import { waitFor } from "./health.ts";
import { kwokConfig } from "./kwok-config.ts";
import type { Lab } from "./lab.ts";
import { startDetached, writeRef } from "./processes.ts";
import { paths } from "./state.ts";
import { scaleKwokPidFile, stopScaleKwok } from "./scale-kwok.ts";

export { stopScaleKwok };

/** Nodes the scale kwok simulates carry this label with value "on"; "silent" ones are left alone. */
export const SCALE_LABEL = "lab.stockade.io/scale";
/** The kubelet's default Lease (renewed every quarter of it). */
export const SCALE_LEASE_SECONDS = 40;
/** Requests the scale kwok has in flight per kind of work (Lease renewals, pod stages, node stages). */
export const KWOK_PARALLELISM = 32;

const mergePatch = setHeaderOptions("Content-Type", PatchStrategy.MergePatch);
const pidFile = (lab: Lab) => scaleKwokPidFile(lab.dir);

export const scaleNodeName = (i: number) => `scale-${String(i + 1).padStart(5, "0")}`;

/** Creates `count` Node objects spread over `zones` (round-robin) for the scale kwok to simulate. */
export async function addScaleNodes(lab: Lab, count: number, zones: readonly string[], width = 32): Promise<string[]> {
  const names = Array.from({ length: count }, (_, i) => scaleNodeName(i));
  await mapLimit(names, width, (name, i) => {
    const body: V1Node = {
      metadata: {
        name,
        labels: {
          [SCALE_LABEL]: "on",
          "kubernetes.io/hostname": name,
          "kubernetes.io/os": "linux",
          "topology.kubernetes.io/zone": zones[i % zones.length]!,
          type: "kwok",
        },
        annotations: { "kwok.x-k8s.io/node": "fake" },
      },
    };
    return lab.core.createNode({ body });
  });
  return names;
}

/**
 * Starts the one kwok process that simulates every node labelled SCALE_LABEL=on (stopped by the lab's down), its
 * Leases `leaseSeconds` long and renewed every quarter of that (kwok's rule, as the kubelet's). A restart keeps the
 * nodes' bootID: a new one would make every node look rebooted.
 */
export function startScaleKwok(lab: Lab, leaseSeconds = SCALE_LEASE_SECONDS): void {
  const s = lab.state;
  const config = join(lab.dir, "scale-kwok.yaml");
  const bootFile = join(lab.dir, "scale-kwok.boot-id");
  const bootID = existsSync(bootFile) ? readFileSync(bootFile, "utf8").trim() : randomUUID();
  writeFileSync(bootFile, bootID);
  // kwok renews 4 Leases and plays 4 pod stages at a time by default: at a round trip of 20 ms that is 200 renewals a
  // second, exactly what 2,000 nodes need every 10 s, so any slower answer made the nodes late.
  const options = [
    "apiVersion: config.kwok.x-k8s.io/v1alpha1",
    "kind: KwokConfiguration",
    "options:",
    `  nodeLeaseParallelism: ${KWOK_PARALLELISM}`,
    `  podPlayStageParallelism: ${KWOK_PARALLELISM}`,
    `  nodePlayStageParallelism: ${KWOK_PARALLELISM}`,
  ].join("\n");
  writeFileSync(config, `${options}\n---\n${kwokConfig(s.kwokStages, bootID)}`);
  const ref = startDetached({
    cmd: s.kwok,
    logFile: join(paths(lab.dir).logs, "kwok-scale.log"),
    args: [
      `--kubeconfig=${join(paths(lab.dir).kubeconfigs, "kwok.kubeconfig")}`,
      `--config=${config}`,
      `--manage-nodes-with-label-selector=${SCALE_LABEL}=on`,
      `--node-lease-duration-seconds=${leaseSeconds}`,
      "--cidr=10.200.0.0/16",
    ],
  });
  writeRef(pidFile(lab), ref);
}

/**
 * Restarts the scale kwok with Leases of `leaseSeconds` and waits until every scale node's Lease has been renewed
 * with that duration by the new process. Used by the bench to populate on slower renewals and measure on the
 * kubelet's. Returns how long it took.
 */
export async function retimeScaleKwok(lab: Lab, nodes: readonly string[], leaseSeconds: number, timeoutMs = 300_000): Promise<number> {
  const t0 = Date.now();
  const coordination = lab.kc.makeApiClient(CoordinationV1Api);
  await stopScaleKwok(lab.dir);
  // kwok's Lease holder is new in every process, so the new one would wait for each old Lease to expire (a whole
  // Lease period without renewals: the node controller would take the nodes for dead). Removed, they are created
  // anew at once, as the lab does when a node reboots.
  await mapLimit(nodes, 32, async (name) => {
    try {
      await coordination.deleteNamespacedLease({ name, namespace: "kube-node-lease" });
    } catch (err) {
      if ((err as { code?: number }).code !== 404) throw err;
    }
  });
  startScaleKwok(lab, leaseSeconds);
  const want = new Set(nodes);
  await waitFor(
    `every scale Lease renewed as ${leaseSeconds} s`,
    async () => {
      const list = await coordination.listNamespacedLease({ namespace: "kube-node-lease" });
      const done = list.items.filter(
        (l) =>
          want.has(l.metadata?.name ?? "") &&
          l.spec?.leaseDurationSeconds === leaseSeconds &&
          new Date(l.spec?.renewTime ?? 0).getTime() >= t0,
      ).length;
      return done === want.size;
    },
    { timeoutMs, intervalMs: 2000 },
  );
  return Date.now() - t0;
}

export interface ScalePods {
  /** Pods created, by name. */
  total: number;
  /** The guarded ones (labelled stockade.io/guarded=true, as a StatefulSet member or claim holder would be). */
  guarded: string[];
}

/**
 * Creates `count` pods bound round-robin to `nodes`; one in `guardedEvery` is guarded (5% at 20), spread so that
 * every node holds some once each has `guardedEvery` pods (a node without one is never fenced). The others look
 * like Deployment pods (labels, one container, requests) and are never guarded.
 */
export async function addScalePods(
  lab: Lab,
  o: { count: number; nodes: readonly string[]; namespace: string; guardedEvery?: number; width?: number },
): Promise<ScalePods> {
  const every = o.guardedEvery ?? 20;
  const guarded: string[] = [];
  const names = Array.from({ length: o.count }, (_, i) => `pod-${String(i + 1).padStart(6, "0")}`);
  await mapLimit(names, o.width ?? 48, async (name, i) => {
    // Pod i goes to node i % N in round floor(i / N); guarding i % every === round % every staggers the guarded
    // ones over the nodes (i % every alone would put them all on the nodes whose index is a multiple of it).
    const isGuarded = i % every === Math.floor(i / o.nodes.length) % every;
    if (isGuarded) guarded.push(name);
    const body: V1Pod = {
      metadata: {
        name,
        labels: { app: `app-${i % 500}`, "pod-template-hash": "5d8f7c9b6", ...(isGuarded ? { "stockade.io/guarded": "true" } : {}) },
      },
      spec: {
        nodeName: o.nodes[i % o.nodes.length]!,
        containers: [
          {
            name: "app",
            image: "registry.example/app:1.0",
            resources: { requests: { cpu: "10m", memory: "16Mi" } },
            ports: [{ containerPort: 8080, name: "http" }],
          },
        ],
        terminationGracePeriodSeconds: 30,
      },
    };
    // The created pods are not kept: at 150,000 they held 2 GiB of the bench's memory.
    await lab.core.createNamespacedPod({ namespace: o.namespace, body });
  });
  return { total: o.count, guarded };
}

/** Silences `nodes` at the same moment (one label change each, all in flight at once); returns when all took. */
export async function silence(lab: Lab, nodes: readonly string[]): Promise<void> {
  await mapLimit(nodes, nodes.length, (name) =>
    lab.core.patchNode({ name, body: { metadata: { labels: { [SCALE_LABEL]: "silent" } } } }, mergePatch),
  );
}

/**
 * Makes sure kwok stopped renewing the silenced nodes' Leases: one renewal period (and some) after `since`, a node
 * whose Lease was renewed after it is relabeled on and silent again, up to `rounds` times. kwok stops a node when its
 * watch (filtered by the label) delivers the node's leaving; at 5,000 nodes it once kept renewing 13 of 50 for
 * minutes (its watch was likely being re-established when the labels changed; the change is not delivered again).
 * Returns the nodes relabeled, and those still renewed after the last round.
 */
export async function confirmSilence(
  lab: Lab,
  nodes: readonly string[],
  since: number,
  o: { rounds?: number; renewalMs?: number } = {},
): Promise<{ relabeled: string[]; stillRenewed: string[] }> {
  const coordination = lab.kc.makeApiClient(CoordinationV1Api);
  const renewalMs = o.renewalMs ?? (SCALE_LEASE_SECONDS / 4) * 1000;
  const rounds = o.rounds ?? 2;
  const relabeled = new Set<string>();
  let pending = [...nodes];
  let after = since;
  if (!pending.length) return { relabeled: [], stillRenewed: [] };
  for (let round = 0; ; round++) {
    await sleep(Math.max(0, after + renewalMs + 3_000 - Date.now()));
    const renewed = await mapLimit(pending, 16, async (name) => {
      const l = await coordination.readNamespacedLease({ name, namespace: "kube-node-lease" });
      return new Date(l.spec?.renewTime ?? 0).getTime() > after + 2_000 ? name : undefined;
    });
    pending = renewed.filter((n): n is string => !!n);
    if (!pending.length || round === rounds) return { relabeled: [...relabeled], stillRenewed: pending };
    after = Date.now();
    for (const name of pending) {
      relabeled.add(name);
      await lab.core.patchNode({ name, body: { metadata: { labels: { [SCALE_LABEL]: "on" } } } }, mergePatch);
      await lab.core.patchNode({ name, body: { metadata: { labels: { [SCALE_LABEL]: "silent" } } } }, mergePatch);
    }
  }
}
