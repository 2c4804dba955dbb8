// The Nodes this process saw deleted, as it last saw them: a NodeFence that starts after its Node is gone (a cloud
// controller deleted the Node of a terminated VM, the storm guard held while it happened) is decided on these
// labels and fences through this providerID (decide/fence-machine.ts startStep). Memory only, for the process's
// lifetime: a replica that starts after the deletion does not know the Node (docs/safety.md §3 says what then).
import type { V1Node } from "@kubernetes/client-node";

/** Deleted Nodes kept, oldest forgotten first: a few MiB at most, even for a cluster that replaces its nodes often. */
export const LAST_SEEN_KEPT = 5_000;

export class LastSeenNodes {
  private readonly byName = new Map<string, V1Node>();
  private readonly kept: number;

  constructor(kept = LAST_SEEN_KEPT) {
    this.kept = kept;
  }

  /** The Node was deleted (or is gone from a relist): remember it as it was last seen. */
  deleted(node: V1Node): void {
    const name = node.metadata?.name;
    if (!name) return;
    this.byName.delete(name);
    this.byName.set(name, node);
    if (this.byName.size > this.kept) this.byName.delete(this.byName.keys().next().value!);
  }

  /** A Node of that name exists again: the live one is what counts now. */
  present(node: V1Node): void {
    const name = node.metadata?.name;
    if (name) this.byName.delete(name);
  }

  /** The deleted Node of that name as last seen; undefined when this process did not see it deleted. */
  get(name: string): V1Node | undefined {
    return this.byName.get(name);
  }

  /** The names of the deleted Nodes remembered. */
  names(): string[] {
    return [...this.byName.keys()];
  }
}
