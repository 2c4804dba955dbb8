// The node agent installed in a real-node lab the way a user installs it (manifests/node-agent/, `kubectl apply -k` of
// an overlay), with the two changes the lab needs and says so: the container is not privileged (this machine refuses
// privileged containers) and reaches the lab's watchdog of its node through a read-only hostPath (lab/watchdog.ts)
// instead of /dev/watchdog; and its timings are the lab's fast ones unless given.
import { execFile } from "node:child_process";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join, relative } from "node:path";
import { promisify } from "node:util";
import { AppsV1Api, CoordinationV1Api, loadAllYaml, type V1DaemonSet } from "@kubernetes/client-node";
import { NODE_AGENT_NAMESPACE, parseNodeAgentRecord, type NodeAgentRecord } from "../src/decide/node-agent-record.ts";
import { repoRoot } from "./bins.ts";
import { waitFor } from "./health.ts";
import { importOperatorImage, overlayRef, splitImage, type OperatorImage } from "./operator-install.ts";
import { WATCHDOG_DEVICE, WATCHDOG_HOST_PATH, WATCHDOG_TIMEOUT_FILE } from "./watchdog.ts";
import type { Lab } from "./lab.ts";

const run = promisify(execFile);

export const nodeAgentManifests = join(repoRoot, "manifests/node-agent");
export const NODE_AGENT_DAEMONSET = "stockade-node-agent";

/** The agent's promise in the lab: c, N, F, D and the peer timeout (decide/isolation.ts checkAgentConfig holds them). */
export interface AgentTimings {
  checkIntervalSeconds: number;
  failedChecksBeforePeers: number;
  controlPlaneDownSeconds: number;
  deadlineSeconds: number;
  peerTimeoutSeconds: number;
}

/**
 * c = 2 s, N = 2, F = 6 s, peer timeout 1 s: D ≥ 2·2 + 6 + 2·1 = 12 s; D = 12 s. F − 2 s (the operator's doubt
 * threshold) stays above the 2 s between renewals, or every agent would look silent to the operator between two.
 */
export const LAB_AGENT_TIMINGS: AgentTimings = {
  checkIntervalSeconds: 2,
  failedChecksBeforePeers: 2,
  controlPlaneDownSeconds: 6,
  deadlineSeconds: 12,
  peerTimeoutSeconds: 1,
};

function daemonSetImage(): string {
  const yaml = readFileSync(join(nodeAgentManifests, "02-daemonset.yaml"), "utf8");
  const ds = (loadAllYaml(yaml) as V1DaemonSet[]).find((d) => d?.kind === "DaemonSet");
  const image = ds?.spec?.template.spec?.containers[0]?.image;
  if (!image) throw new Error(`no container image in ${join(nodeAgentManifests, "02-daemonset.yaml")}`);
  return image;
}

/** The lab's overlay of manifests/node-agent/: the image, the lab watchdog through a hostPath, not privileged, timings. */
export function nodeAgentOverlay(o: { resources: string; image: string; ref: string; timings: AgentTimings }): string {
  const from = splitImage(o.image);
  const to = splitImage(o.ref);
  if (!to.tag) throw new Error(`the operator image ${o.ref} has no tag: the overlay pins one`);
  const t = o.timings;
  const patch = {
    apiVersion: "apps/v1",
    kind: "DaemonSet",
    metadata: { name: NODE_AGENT_DAEMONSET, namespace: NODE_AGENT_NAMESPACE },
    spec: {
      template: {
        spec: {
          containers: [
            {
              name: "node-agent",
              args: [
                "node-agent",
                `--watchdog-device=${WATCHDOG_DEVICE}`,
                `--watchdog-timeout-file=${WATCHDOG_TIMEOUT_FILE}`,
                `--check-interval-seconds=${t.checkIntervalSeconds}`,
                `--failed-checks-before-peers=${t.failedChecksBeforePeers}`,
                `--control-plane-down-seconds=${t.controlPlaneDownSeconds}`,
                `--deadline-seconds=${t.deadlineSeconds}`,
                `--peer-timeout-seconds=${t.peerTimeoutSeconds}`,
              ],
              securityContext: { privileged: false },
              volumeMounts: [{ name: "lab-watchdog", mountPath: WATCHDOG_HOST_PATH, readOnly: true }],
            },
          ],
          volumes: [{ name: "lab-watchdog", hostPath: { path: WATCHDOG_HOST_PATH, type: "Directory" } }],
        },
      },
    },
  };
  return [
    "apiVersion: kustomize.config.k8s.io/v1beta1",
    "kind: Kustomization",
    `resources: [${JSON.stringify(o.resources)}]`,
    `images: [{ name: ${JSON.stringify(from.name)}, newName: ${JSON.stringify(to.name)}, newTag: ${JSON.stringify(to.tag)} }]`,
    `patches: [{ patch: ${JSON.stringify(JSON.stringify(patch))} }]`,
    "",
  ].join("\n");
}

/** Every node's record as last listed, parsed (unusable ones as problems). */
export async function nodeAgentRecords(lab: Lab): Promise<{ records: Map<string, NodeAgentRecord>; problems: string[] }> {
  const leases = await lab.kc.makeApiClient(CoordinationV1Api).listNamespacedLease({ namespace: NODE_AGENT_NAMESPACE });
  const records = new Map<string, NodeAgentRecord>();
  const problems: string[] = [];
  for (const l of leases.items) {
    const p = parseNodeAgentRecord(l);
    if (p.ok) records.set(p.record.node, p.record);
    else problems.push(`${p.node}: ${p.problem}`);
  }
  return { records, problems };
}

/** Imports the operator image (the agent's too), applies the overlay and waits for every node's record, armed. */
export async function installNodeAgent(
  lab: Lab,
  o: { image?: OperatorImage; timings?: AgentTimings; log?: (m: string) => void; timeoutMs?: number } = {},
): Promise<{ image: OperatorImage; overlay: string }> {
  const log = o.log ?? (() => {});
  if (!lab.state.real) throw new Error("installing the node agent needs real nodes (npm run lab -- up --runtime real)");
  const image = await importOperatorImage(lab, o);
  const overlay = join(lab.dir, "node-agent-overlay");
  mkdirSync(overlay, { recursive: true });
  writeFileSync(
    join(overlay, "kustomization.yaml"),
    nodeAgentOverlay({
      resources: relative(overlay, nodeAgentManifests),
      image: daemonSetImage(),
      ref: overlayRef(image),
      timings: o.timings ?? LAB_AGENT_TIMINGS,
    }),
  );
  log(`kubectl apply -k ${overlay}`);
  await run("kubectl", ["apply", "-k", overlay], { env: lab.env, maxBuffer: 16 << 20 });
  await waitForArmedAgents(lab, lab.nodes(), o.timeoutMs ?? 180_000);
  return { image, overlay };
}

/** The DaemonSet's pods Ready on every node and each named node's record saying armed. */
export async function waitForArmedAgents(lab: Lab, nodes: readonly string[], timeoutMs = 120_000): Promise<Map<string, NodeAgentRecord>> {
  const apps = lab.kc.makeApiClient(AppsV1Api);
  return await waitFor(
    `the node agents Ready and armed on ${nodes.join(", ")}`,
    async () => {
      const ds = await apps.readNamespacedDaemonSet({ namespace: NODE_AGENT_NAMESPACE, name: NODE_AGENT_DAEMONSET });
      const st = ds.status;
      if (!st || st.numberReady !== st.desiredNumberScheduled || st.updatedNumberScheduled !== st.desiredNumberScheduled) return undefined;
      const { records } = await nodeAgentRecords(lab);
      return nodes.every((n) => records.get(n)?.armed) ? records : undefined;
    },
    { timeoutMs, intervalMs: 500 },
  );
}
