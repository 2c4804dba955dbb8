// Writes fence history (decide/fence-history.ts): each NodeFence's FenceRecord, as part of the NodeFence
// controller's flow, and deletes the records retention no longer keeps. A record is derived from the NodeFence alone,
// so writing it is idempotent: the same episode always writes the same record, and a write repeated after a crash, or
// by the next leader, changes nothing that was right.
import type { Logger } from "pino";
import type { DateTime } from "luxon";
import type { FenceRecord, NodeFence } from "../api/v1alpha1.ts";
import {
  DEFAULT_RETENTION,
  HISTORY_NODE_LABEL,
  expiredRecords,
  hasEpisode,
  nodeLabelValue,
  recordOf,
  type Deleted,
  type Retention,
} from "../decide/fence-history.ts";
import { isConflict, isNotFound, statusCode, type Kube } from "../kube/api.ts";

export interface FenceHistoryDeps {
  kube: Pick<Kube, "createFenceRecord" | "replaceFenceRecord" | "listFenceRecords" | "deleteFenceRecord">;
  log: Logger;
  clock: () => DateTime;
  retention?: Retention;
  /** The uids of the NodeFences that exist (their records are never deleted). */
  liveFences?: () => ReadonlySet<string>;
}

/** How much of a record is compared to tell whether it changed. */
const content = (r: FenceRecord) => JSON.stringify([r.metadata?.labels ?? {}, r.spec, r.status ?? {}]);

export class FenceHistory {
  private readonly d: FenceHistoryDeps;
  /** What this process last wrote for each NodeFence (by uid): an unchanged record is not written again. */
  private readonly written = new Map<string, string>();
  /** The retention run started by the last new record (tests wait for it). */
  private pruning: Promise<number> = Promise.resolve(0);

  constructor(d: FenceHistoryDeps) {
    this.d = d;
  }

  get retention(): Retention {
    return this.d.retention ?? DEFAULT_RETENTION;
  }

  /**
   * Writes the record of this NodeFence's episode as its status says now, unless this process already wrote exactly
   * that. Throws when the apiserver refuses or cannot be reached (the caller decides what that holds back). Returns
   * whether it wrote.
   */
  async sync(fence: NodeFence, deleted?: Deleted): Promise<boolean> {
    const uid = fence.metadata?.uid;
    if (!uid || !hasEpisode(fence)) return false;
    const record = recordOf(fence, deleted);
    const c = content(record);
    const before = this.written.get(uid);
    if (before === c) return false;
    let created = false;
    if (before === undefined)
      // First write in this process: a new episode (one round trip before its first agent runs), or one written before
      // a restart or by a previous leader (409: replaced below; a replace that changes nothing is not stored again).
      try {
        await this.d.kube.createFenceRecord(record);
        created = true;
      } catch (err) {
        if (!isConflict(err)) throw err;
      }
    if (!created)
      try {
        await this.d.kube.replaceFenceRecord(record);
      } catch (err) {
        // The replace tests the NodeFence's uid first: a record of another episode under this name is left alone.
        if (statusCode(err) === 422)
          throw new Error(`FenceRecord ${record.metadata?.name} belongs to another NodeFence (not uid ${uid}): not overwritten`, {
            cause: err,
          });
        // Deleted meanwhile (by hand, or retention while this process thought it current): written again.
        if (!isNotFound(err)) throw err;
        await this.d.kube.createFenceRecord(record);
        created = true;
      }
    this.written.set(uid, c);
    // Retention for the node, off the fence's path (it never throws: a failure is logged, the hourly sweep retries).
    if (created) this.pruning = this.prune(fence.spec.nodeName);
    return true;
  }

  /** Resolves once the retention started by the last new record has run. */
  async settled(): Promise<void> {
    await this.pruning;
  }

  /** The NodeFence is gone: nothing more is written for it. */
  forget(uid: string | undefined): void {
    if (uid) this.written.delete(uid);
  }

  /** Deletes the node's records retention no longer keeps (after a new episode's record was created). */
  async prune(nodeName: string): Promise<number> {
    try {
      const records = (await this.d.kube.listFenceRecords(`${HISTORY_NODE_LABEL}=${nodeLabelValue(nodeName)}`)).filter(
        (r) => r.spec.nodeName === nodeName,
      );
      return await this.delete(records);
    } catch (err) {
      this.d.log.warn({ node: nodeName, err: (err as Error).message }, `could not apply the fence history's retention to ${nodeName}`);
      return 0;
    }
  }

  /** Deletes every record retention no longer keeps (every node: one that is never fenced again too). */
  async sweep(): Promise<number> {
    try {
      return await this.delete(await this.d.kube.listFenceRecords());
    } catch (err) {
      this.d.log.warn({ err: (err as Error).message }, "could not apply the fence history's retention");
      return 0;
    }
  }

  private async delete(records: FenceRecord[]): Promise<number> {
    const live = this.d.liveFences?.() ?? new Set<string>();
    let n = 0;
    for (const r of expiredRecords(records, this.d.clock(), this.retention, live)) {
      if (await this.d.kube.deleteFenceRecord(r)) {
        n++;
        this.d.log.info(
          { record: r.metadata?.name, node: r.spec.nodeName, ended: r.status?.endTime },
          `fence record ${r.metadata?.name} deleted by retention (${this.retention.perNode} per node, ${this.retention.maxAgeDays} days)`,
        );
      }
    }
    return n;
  }
}
