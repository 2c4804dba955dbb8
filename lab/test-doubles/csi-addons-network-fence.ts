// Test double of the csi-addons controller's NetworkFence reconciler (kubernetes-csi-addons), for the lab: no
// csi-addons controller and no storage provider that could fence run here. It speaks the real API — NetworkFence
// objects of csiaddons.openshift.io/v1alpha1 through the kube-apiserver, with the CRD of
// test/fixtures/csiaddons.openshift.io_networkfences.yaml — and answers as csi-addons' controller does: a finalizer
// on first sight, status.result Succeeded with its "fencing operation successful" / "unfencing operation successful"
// message for each generation of the spec (it reconciles on generation changes only), Failed with a message on a
// driver error, and on deletion it only removes its finalizer (deleting unfences nothing).
//
// What it does NOT do: cut anything. The lab's "SAN" is a host directory bind-mounted into containers (hostPath), which
// a node-scoped network rule cannot reach, and a writer holding its file open keeps writing through a read-only
// remount. It records each fence it "applied" as a lab event (kind storage-fence) so the invariant checker knows
// when the storage side claimed the node cut off; the ledger checker still checks what the writers really wrote.
import { CustomObjectsApi, type KubeConfig } from "@kubernetes/client-node";
import { appendEvent } from "../state.ts";
import type { NetworkFence } from "../../src/agents/types.ts";

const group = "csiaddons.openshift.io";
const version = "v1alpha1";
const plural = "networkfences";
const FINALIZER = "csiaddons.openshift.io/network-fence";

/** succeed: answer every request; fail: answer Failed (the driver refused); silent: never answer. */
export type NetworkFenceMode = "succeed" | "fail" | "silent";

type Obj = NetworkFence & { metadata: NetworkFence["metadata"] & { generation?: number; finalizers?: string[] } };

export class NetworkFenceDouble {
  mode: NetworkFenceMode = "succeed";
  /** The mode per NetworkFenceClass (one storage backend's controller answering, another's not); else `mode`. */
  readonly classModes = new Map<string, NetworkFenceMode>();
  /** Every status this double wrote, in order (for assertions). */
  readonly answers: { name: string; fenceState: string; result: string; cidrs: string[] }[] = [];
  private readonly api: CustomObjectsApi;
  private readonly answered = new Map<string, number>();
  private timer: NodeJS.Timeout | undefined;
  private busy = false;
  private readonly labDir: string;
  private readonly nodeOf: (cidr: string) => string | undefined;

  /** nodeOf: the lab node an address belongs to (what the storage side would see), for the lab's event log. */
  constructor(kc: KubeConfig, labDir: string, nodeOf: (cidr: string) => string | undefined) {
    this.api = kc.makeApiClient(CustomObjectsApi);
    this.labDir = labDir;
    this.nodeOf = nodeOf;
  }

  start(intervalMs = 200): this {
    this.timer = setInterval(() => void this.pass(), intervalMs);
    return this;
  }

  stop(): void {
    clearInterval(this.timer);
  }

  private async pass(): Promise<void> {
    if (this.busy) return;
    this.busy = true;
    try {
      const list = (await this.api.listClusterCustomObject({ group, version, plural })) as { items: Obj[] };
      for (const nf of list.items) await this.reconcile(nf).catch(() => undefined); // a conflict: next pass
    } catch {
      /* the apiserver restarting: next pass */
    } finally {
      this.busy = false;
    }
  }

  private async reconcile(nf: Obj): Promise<void> {
    const name = nf.metadata.name;
    const fins = nf.metadata.finalizers ?? [];
    if (nf.metadata.deletionTimestamp) {
      if (fins.includes(FINALIZER))
        await this.api.replaceClusterCustomObject({
          group,
          version,
          plural,
          name,
          body: { ...nf, metadata: { ...nf.metadata, finalizers: fins.filter((f) => f !== FINALIZER) } },
        });
      return;
    }
    // By uid: a NetworkFence deleted and made again under its name starts again at generation 1.
    const key = `${nf.metadata.uid}`;
    const mode = this.classModes.get(nf.spec.networkFenceClassName ?? "") ?? this.mode;
    if (mode === "silent" || this.answered.get(key) === nf.metadata.generation) return;
    let cur = nf;
    if (!fins.includes(FINALIZER))
      cur = (await this.api.replaceClusterCustomObject({
        group,
        version,
        plural,
        name,
        body: { ...nf, metadata: { ...nf.metadata, finalizers: [...fins, FINALIZER] } },
      })) as Obj;
    const fenced = cur.spec.fenceState !== "Unfenced";
    const status =
      mode === "fail"
        ? { result: "Failed" as const, message: "rpc error: code = Internal desc = test double: the storage provider refused the fence" }
        : { result: "Succeeded" as const, message: fenced ? "fencing operation successful" : "unfencing operation successful" };
    await this.api.replaceClusterCustomObjectStatus({ group, version, plural, name, body: { ...cur, status } });
    this.answered.set(key, cur.metadata.generation ?? 0);
    this.answers.push({ name, fenceState: cur.spec.fenceState, result: status.result, cidrs: cur.spec.cidrs });
    if (status.result !== "Succeeded") return;
    for (const node of new Set(cur.spec.cidrs.flatMap((c) => this.nodeOf(c) ?? [])))
      appendEvent(this.labDir, {
        kind: "storage-fence",
        node,
        detail: { state: cur.spec.fenceState, networkFence: name, cidrs: cur.spec.cidrs },
      });
  }
}
