// The Nodes this process saw deleted, as it last saw them: a NodeFence that starts after its Node is gone (a cloud
// controller deleted the Node of a terminated VM, the storm guard held while it happened) is decided on these
// labels and fences through this providerID (decide/fence-machine.ts startStep). Memory only, for the process's
// lifetime: a replica that starts after the deletion does not know the Node (docs/safety.md §3 says what then).
// With each, when this process last had a sign of the machine: the Node's deletion, and the deletion of its Lease
// (Kubernetes collects the Lease with its Node through its ownerReference; a live kubelet makes a new one). The fleet
// decision counts a gone Node's silence from the later of them (decide/fleet.ts goneNodeStep).
import type { V1Node } from "@kubernetes/client-node";

/** Deleted Nodes kept, oldest forgotten first: up to about 40 MiB for 5,000 large Nodes (as cached: images dropped). */
export const LAST_SEEN_KEPT = 5_000;

interface Entry {
  node: V1Node;
  /** When this process saw the Node deleted (monotonic ms). */
  deletedAt: number;
  /** When it last saw the node's Lease deleted after that (monotonic ms). */
  leaseGoneAt?: number;
}

export class LastSeenNodes {
  private readonly byName = new Map<string, Entry>();
  private readonly kept: number;
  private readonly mono: () => number;

  constructor(kept = LAST_SEEN_KEPT, mono: () => number = () => performance.now()) {
    this.kept = kept;
    this.mono = mono;
  }

  /** The Node was deleted (or is gone from a relist): remember it as it was last seen, and when. */
  deleted(node: V1Node): void {
    const name = node.metadata?.name;
    if (!name) return;
    this.byName.delete(name);
    this.byName.set(name, { node, deletedAt: this.mono() });
    if (this.byName.size > this.kept) this.byName.delete(this.byName.keys().next().value!);
  }

  /** A Node of that name exists again: the live one is what counts now. */
  present(node: V1Node): void {
    const name = node.metadata?.name;
    if (name) this.byName.delete(name);
  }

  /** The Lease of a remembered Node was deleted: the last sign of the machine is no earlier than now. */
  leaseDeleted(name: string): void {
    const e = this.byName.get(name);
    if (e) e.leaseGoneAt = this.mono();
  }

  /** The deleted Node of that name as last seen; undefined when this process did not see it deleted. */
  get(name: string): V1Node | undefined {
    return this.byName.get(name)?.node;
  }

  /**
   * The latest instant (monotonic ms) this process saw a sign of the remembered Node's machine other than a renewal:
   * the Node's deletion, or its Lease's deletion after it. Undefined when it did not see the Node deleted.
   */
  lastSignAt(name: string): number | undefined {
    const e = this.byName.get(name);
    return e && Math.max(e.deletedAt, e.leaseGoneAt ?? e.deletedAt);
  }

  /** The names of the deleted Nodes remembered. */
  names(): string[] {
    return [...this.byName.keys()];
  }
}
