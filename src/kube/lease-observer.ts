// When the operator saw each node Lease's renewal, on its own monotonic clock: the node controller's way of measuring a
// Lease (kube-controller-manager's probeTimestamp), never from the renewTime's value. A kubelet writes renewTime with
// its node's clock: a healthy node 40 s behind writes renewTimes that already look expired, and an operator whose wall
// clock jumps forward sees every Lease as old. What the operator saw change, and when, is neither.
//
// And only over time in which this replica could see (kube/sight.ts): after a gap of its own (a watch down, the
// apiserver or etcd down, a relist, a change of leader) a renewTime unchanged since before proves nothing of the node —
// its kubelet could not renew either — so every silence counts again from the end of the gap.
import type { V1Lease } from "@kubernetes/client-node";
import { Sight } from "./sight.ts";

type RenewTime = Date | string | undefined | null;

/** A renewTime as epoch milliseconds (a Date from a list, a string from a watch: the same value either way). */
function keyOf(v: RenewTime): number | undefined {
  if (v === undefined || v === null) return undefined;
  const ms = typeof v === "string" ? Date.parse(v) : v.getTime();
  return Number.isNaN(ms) ? undefined : ms;
}

export class LeaseObserver {
  /**
   * Per node: the renewTime last seen (epoch ms, and as given: the same string again is not parsed again, the fleet
   * pass asks for every node on every pass), and the monotonic instant it was first seen.
   */
  private readonly seen = new Map<string, { raw: RenewTime; renewTime: number | undefined; at: number }>();
  private readonly mono: () => number;
  /** When this replica could see: from the first sync of the leases cache on, less every gap. */
  readonly sight: Sight;

  constructor(mono: () => number = () => performance.now(), sight: Sight = new Sight({ mono })) {
    this.mono = mono;
    this.sight = sight;
  }

  /** A Lease added or updated in the cache (also while the first list fills it). */
  observe(lease: V1Lease): void {
    const node = lease.metadata?.name;
    if (node !== undefined) this.record(node, lease.spec?.renewTime);
  }

  /** A Lease deleted: a new one of that name is a new observation. */
  forget(lease: V1Lease): void {
    const node = lease.metadata?.name;
    if (node !== undefined) this.seen.delete(node);
  }

  /**
   * The leases cache has its first list: values seen before count as seen now. A restarted operator so waits a whole
   * leaseDuration before a Lease can count as expired, as the node controller does after its own restart.
   */
  synced(): void {
    this.sight.synced();
  }

  /**
   * How long (ms, monotonic) the node's Lease has had this renewTime as far as this process saw, counted only since
   * it could last see without a gap (0 while it cannot). A renewTime other than the one recorded (a fresh read newer
   * than the cache, or a node never seen) is recorded as seen now: 0.
   */
  silentForMs(node: string, renewTime: RenewTime): number {
    const now = this.mono();
    const since = this.record(node, renewTime, now);
    const seeing = this.sight.seeingSince();
    return seeing === undefined ? 0 : Math.max(0, now - Math.max(since, seeing));
  }

  private record(node: string, raw: RenewTime, now = this.mono()): number {
    const s = this.seen.get(node);
    if (s !== undefined && typeof raw === "string" && s.raw === raw) return s.at;
    const renewTime = keyOf(raw);
    if (s !== undefined && s.renewTime === renewTime) {
      s.raw = raw;
      return s.at;
    }
    this.seen.set(node, { raw, renewTime, at: now });
    return now;
  }
}
