// What the state machine knows of storage fences (agents/csi-addons-network-fence.ts drives them): which FenceAgent
// types fence storage rather than power, the StorageClasses an agent says it covers, and the NetworkFence's name.
// Here, at the bottom, because evidence and the lift of held fences are decided on them.
import { createHash } from "node:crypto";

/** Types that fence storage, not power: their success is StorageFenced evidence, never "the machine is off". */
export const STORAGE_FENCE_TYPES: readonly string[] = ["csiAddonsNetworkFence"];
export const isStorageFence = (type: string | undefined): boolean => STORAGE_FENCE_TYPES.includes(type ?? "");

/** A comma-separated parameter's items, trimmed, empty ones dropped. */
export const parameterList = (v: string | undefined) =>
  (v ?? "")
    .split(",")
    .map((s) => s.trim())
    .filter(Boolean);

/** The StorageClasses a FenceAgent of this type says its fence covers (from its shared parameters). */
export const fencedStorageClasses = (parameters: Record<string, string> | undefined): string[] =>
  parameterList(parameters?.storageClasses).sort();

/**
 * The NetworkFence's name for one agent's fence of one node: deterministic, so a retry or a new leader finds the one
 * already made, and its own per agent — two storage agents (two backends) never share, adopt or answer for each
 * other's fence. Readable (stockade-<agent>-<node>, cut to fit) and exact (a hash of both names: "a-b"+"c" and
 * "a"+"b-c" differ), within the 253 characters of an object name.
 */
export function networkFenceName(agent: string, node: string): string {
  const hash = createHash("sha256").update(`${agent}\n${node}`).digest("hex").slice(0, 10);
  const readable = `stockade-${agent}-${node}`.slice(0, 253 - hash.length - 1).replace(/[^a-z0-9]+$/, "");
  return `${readable}-${hash}`;
}
