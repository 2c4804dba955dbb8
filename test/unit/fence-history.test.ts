// Fence history (issue 28 item 5): a FenceRecord per NodeFence, derived from its status alone — what each episode
// says (when, why, who asked, levels from 1, outcome, counts, evidence), its name and label, retention, and the
// recorder's writes: idempotent (a restarted operator's create finds the record and replaces it with what it is), never
// over another episode's record.
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { ApiException } from "@kubernetes/client-node";
import pino from "pino";
import type { FenceRecord, NodeFence } from "../../src/api/v1alpha1.ts";
import { FenceHistory } from "../../src/controllers/fence-history.ts";
import {
  HISTORY_NODE_LABEL,
  expiredRecords,
  levelsTried,
  nodeLabelValue,
  outcomeOf,
  recordName,
  recordOf,
  releaseCounts,
} from "../../src/decide/fence-history.ts";
import { at, attempt, fence, fencing, releasing, stamp } from "./decide-fixtures.ts";

const UID = "3f2a9c1b-04de-4b6e-9a1f-1234567890ab";
const withUid = (f: NodeFence, uid = UID): NodeFence => ({
  ...f,
  metadata: { ...f.metadata, uid, creationTimestamp: new Date(at(900).toMillis()) },
});
const DNS_SUBDOMAIN = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;

describe("names and labels", () => {
  test("a record is named after its node and its NodeFence's uid: the same episode, the same name; another, another", () => {
    assert.equal(recordName("node-7", UID), "node-7-3f2a9c1b04de");
    assert.equal(recordName("node-7", UID), recordName("node-7", UID));
    assert.notEqual(recordName("node-7", UID), recordName("node-7", "77aa0000-0000-0000-0000-000000000000"));
    const long = `${"a".repeat(120)}.${"b".repeat(131)}`;
    const name = recordName(long, UID);
    assert.ok(name.length <= 253, `${name.length}`);
    assert.match(name, DNS_SUBDOMAIN);
    assert.match(recordName(`${"a".repeat(239)}.b-c`, UID), DNS_SUBDOMAIN, "no dot or dash left before the id");
  });
  test("the node label is the node's name when it fits a label value, else a stable hash", () => {
    assert.equal(nodeLabelValue("node-7.example.com"), "node-7.example.com");
    const long = "n".repeat(64);
    assert.match(nodeLabelValue(long), /^h-[0-9a-f]{40}$/);
    assert.equal(nodeLabelValue(long), nodeLabelValue(long));
    assert.notEqual(nodeLabelValue(long), nodeLabelValue(`${long}x`));
  });
});

describe("recordOf", () => {
  test("a released automatic fence: started, fenced, released, levels counted from 1, evidence, counts, who asked and why", () => {
    const f = withUid(
      fence(
        "node-7",
        releasing({
          phase: "Released",
          startTime: stamp(at(960)),
          releasedTime: stamp(at(999)),
          currentLevel: 1,
          levelNumber: 2,
          attempts: [attempt("ipmi", "TimedOut", 0), attempt("pdu", "Succeeded", 1)],
          podsReleased: 3,
          volumesReleased: 2,
          conditions: [
            {
              type: "Fenced",
              status: "True",
              reason: "PowerOffConfirmed",
              message: "round 1, level 2: pdu",
              lastTransitionTime: stamp(at(995)),
            },
          ],
        }),
        { reason: "no heartbeat since 2026-01-01T00:00:00Z (Ready=Unknown); 3 guarded pod(s) waited 30 s" },
      ),
    );
    f.metadata.managedFields = [{ manager: "stockade", operation: "Update" }];
    const r = recordOf(f);
    assert.equal(r.metadata?.name, "node-7-3f2a9c1b04de");
    assert.deepEqual(r.metadata?.labels, { [HISTORY_NODE_LABEL]: "node-7" });
    assert.deepEqual(r.spec, {
      nodeName: "node-7",
      nodeFence: { name: "node-7", uid: UID },
      origin: "Automatic",
      requestedVia: "stockade",
      policy: "default",
      reason: "no heartbeat since 2026-01-01T00:00:00Z (Ready=Unknown); 3 guarded pod(s) waited 30 s",
    });
    const s = r.status!;
    assert.equal(s.outcome, "Released");
    assert.equal(s.startTime, stamp(at(960)));
    assert.equal(s.fencedTime, stamp(at(995)));
    assert.equal(s.releasedTime, stamp(at(999)));
    assert.equal(s.endTime, undefined, "not ended: the node stays fenced");
    assert.equal(s.levelNumber, 2);
    assert.deepEqual(s.levels, [
      { round: 1, level: 1, agents: [{ name: "ipmi", type: "ipmi", outcome: "TimedOut" }] },
      { round: 1, level: 2, agents: [{ name: "pdu", type: "ipmi", outcome: "Succeeded" }] },
    ]);
    assert.deepEqual(s.evidence, { method: "PowerOffConfirmed", time: stamp(at(995)), agents: ["ipmi"], detail: "off" });
    assert.equal(s.podsReleased, 3);
    assert.equal(s.volumesReleased, 2);
    assert.equal(s.message, "round 1, level 2: pdu");
  });

  test("the episode ends when the fence is unfenced (its time and reason) or deleted (Deleted, at the deletion)", () => {
    const unfenced = withUid(
      fence("node-7", {
        ...releasing({ releasedTime: stamp(at(999)) }),
        phase: "Unfenced",
        unfencedTime: stamp(at(2000)),
        conditions: [
          { type: "Fenced", status: "False", reason: "UnfenceRequested", message: "unfenced", lastTransitionTime: stamp(at(2000)) },
        ],
      }),
    );
    const u = recordOf(unfenced).status!;
    assert.deepEqual([u.outcome, u.endTime, u.endReason], ["Released", stamp(at(2000)), "UnfenceRequested"]);
    // Deleted after it was unfenced: it ended when it was unfenced.
    const ud = recordOf(unfenced, { time: stamp(at(3000)) }).status!;
    assert.deepEqual([ud.endTime, ud.endReason], [stamp(at(2000)), "UnfenceRequested"]);
    const d = recordOf(withUid(fence("node-7", releasing())), { time: stamp(at(3000)) }).status!;
    assert.deepEqual([d.outcome, d.endTime, d.endReason], ["Unfenced", stamp(at(3000)), "Deleted"]);
  });

  test("no startTime yet: the NodeFence's creation; a manual fence: origin Manual", () => {
    const r = recordOf(withUid(fence("node-7", { phase: "Pending" }, { origin: "Manual", reason: "disk" })));
    assert.equal(r.status?.startTime, stamp(at(900)).replace(".000", ""));
    assert.equal(r.spec.origin, "Manual");
    assert.equal(r.status?.outcome, "InProgress");
    assert.equal(r.status?.rounds, 1);
  });
});

describe("outcomeOf", () => {
  const cond = (reason: string) => [{ type: "Fenced", status: "False" as const, reason, message: "", lastTransitionTime: stamp(at(0)) }];
  test("Released wins; NodeRecovered is Cancelled; a failed round is Failed; an ended one otherwise Unfenced; else InProgress", () => {
    assert.equal(
      outcomeOf(fence("n", { ...releasing(), phase: "Unfenced", releasedTime: stamp(at(1)), conditions: cond("NodeRecovered") })),
      "Released",
    );
    assert.equal(outcomeOf(fence("n", { ...fencing(), phase: "Unfenced", conditions: cond("NodeRecovered"), failures: 2 })), "Cancelled");
    assert.equal(outcomeOf(fence("n", { ...fencing(), phase: "Failed", failures: 1 })), "Failed");
    assert.equal(outcomeOf(fence("n", { ...fencing(), phase: "Unfenced", conditions: cond("UnfenceRequested"), failures: 1 })), "Failed");
    assert.equal(outcomeOf(fence("n", { ...fencing(), failures: 1 }), { time: stamp(at(5)) }), "Failed");
    assert.equal(outcomeOf(fence("n", { ...fencing(), phase: "Unfenced", conditions: cond("UnfenceRequested") })), "Unfenced");
    assert.equal(outcomeOf(fence("n", fencing()), { time: stamp(at(5)) }), "Unfenced");
    assert.equal(outcomeOf(fence("n", fencing())), "InProgress");
    assert.equal(outcomeOf(fence("n", { ...fencing(), failures: 1 })), "InProgress", "retried and fencing again");
  });
});

test("levelsTried: per round and level, each agent's last power-off, in the order first tried; power-ons are not levels", () => {
  const levels = levelsTried(
    fencing({
      attempts: [
        attempt("ipmi", "Interrupted", 0),
        attempt("ipmi", "Failed", 0),
        attempt("pdu-a", "Succeeded", 1),
        attempt("pdu-b", "TimedOut", 1),
        attempt("ipmi", "Succeeded", 0, "off", stamp(at(995)), 1),
        attempt("ipmi", "Succeeded", 0, "on", stamp(at(999)), 1),
      ],
    }),
  );
  assert.deepEqual(
    levels.map((l) => [l.round, l.level, l.agents.map((a) => `${a.name} ${a.outcome}`)]),
    [
      [1, 1, ["ipmi Failed"]],
      [1, 2, ["pdu-a Succeeded", "pdu-b TimedOut"]],
      [2, 1, ["ipmi Succeeded"]],
    ],
  );
});

test("releaseCounts: the counters, or, for a status written before them, its list", () => {
  assert.deepEqual(releaseCounts({ podsReleased: 5, volumesReleased: 0, releases: [] }), { pods: 5, volumes: 0 });
  const t = stamp(at(0));
  assert.deepEqual(
    releaseCounts({
      releases: [
        { kind: "Pod", name: "a", action: "ForceDeleted", time: t },
        { kind: "Pod", name: "b", action: "AlreadyGone", time: t },
        { kind: "VolumeAttachment", name: "v", action: "Deleted", time: t },
        { kind: "ClaimLock", name: "c", action: "Broken", time: t },
        { kind: "ClaimLock", name: "d", action: "AlreadyReleased", time: t },
        { kind: "Taint", name: "x", action: "Added", time: t },
      ],
    }),
    { pods: 1, volumes: 2 },
  );
});

const rec = (node: string, i: number, end?: number, uid = `uid-${node}-${i}`): FenceRecord => ({
  apiVersion: "stockade.io/v1alpha1",
  kind: "FenceRecord",
  metadata: { name: `${node}-${i}`, uid: `r-${node}-${i}` },
  spec: { nodeName: node, nodeFence: { name: node, uid } },
  status: { startTime: stamp(at(i * 100)), ...(end !== undefined ? { endTime: stamp(at(end)) } : {}) },
});

describe("expiredRecords", () => {
  const now = at(1000);
  test("past the newest N of a node, ended ones go; a node's count does not touch another node's", () => {
    const records = [rec("a", 1, 150), rec("a", 2, 250), rec("a", 3, 350), rec("a", 4, 450), rec("b", 1, 150)];
    const out = expiredRecords(records, now, { perNode: 2, maxAgeDays: 400 });
    assert.deepEqual(out.map((r) => r.metadata?.name).sort(), ["a-1", "a-2"]);
  });
  test("older than maxAgeDays (by its end) goes, whatever the count", () => {
    const old = rec("a", 1, -40 * 86400);
    const out = expiredRecords([old, rec("a", 2, 250)], now, { perNode: 20, maxAgeDays: 30 });
    assert.deepEqual(
      out.map((r) => r.metadata?.name),
      ["a-1"],
    );
  });
  test("an episode not ended, or whose NodeFence still exists, is never deleted", () => {
    const running = rec("a", 1);
    const ancient = rec("a", 2, -400 * 86400, "live-uid");
    const out = expiredRecords(
      [running, ancient, rec("a", 3, 350), rec("a", 4, 450)],
      now,
      { perNode: 1, maxAgeDays: 1 },
      new Set(["live-uid"]),
    );
    assert.deepEqual(out.map((r) => r.metadata?.name).sort(), ["a-3"]);
  });
});

/** A scripted FenceRecord API: the calls in order, the records stored by name. */
function recordApi(o: { failCreate?: boolean } = {}) {
  const calls: string[] = [];
  const stored = new Map<string, FenceRecord>();
  let uids = 0;
  const notFound = () => new ApiException(404, "NotFound", {}, {});
  const kube = {
    createFenceRecord: async (r: FenceRecord) => {
      calls.push(`create ${r.metadata?.name}`);
      if (o.failCreate) throw new ApiException(500, "boom", {}, {});
      if (stored.has(r.metadata?.name ?? "")) throw new ApiException(409, "AlreadyExists", {}, {});
      // As the apiserver returns it: keys in its own order, metadata filled in.
      const back = JSON.parse(
        JSON.stringify({
          status: r.status,
          spec: r.spec,
          kind: r.kind,
          apiVersion: r.apiVersion,
          metadata: { ...r.metadata, uid: `rec-${++uids}` },
        }),
      );
      stored.set(r.metadata?.name ?? "", back);
      return back as FenceRecord;
    },
    replaceFenceRecord: async (r: FenceRecord) => {
      calls.push(`replace ${r.metadata?.name}`);
      const old = stored.get(r.metadata?.name ?? "");
      if (!old) throw notFound();
      if (old.spec.nodeFence.uid !== r.spec.nodeFence.uid) throw new ApiException(422, "test failed", {}, {});
      stored.set(r.metadata?.name ?? "", {
        ...old,
        metadata: { ...old.metadata, labels: r.metadata?.labels },
        spec: r.spec,
        status: r.status,
      });
      return stored.get(r.metadata?.name ?? "")!;
    },
    listFenceRecords: async (selector?: string) => {
      calls.push(`list ${selector ?? ""}`);
      return [...stored.values()].filter(
        (r) => !selector || selector === `${HISTORY_NODE_LABEL}=${r.metadata?.labels?.[HISTORY_NODE_LABEL]}`,
      );
    },
    deleteFenceRecord: async (r: FenceRecord) => {
      calls.push(`delete ${r.metadata?.name}`);
      return stored.delete(r.metadata?.name ?? "");
    },
  };
  return { kube, calls, stored };
}

describe("FenceHistory", () => {
  const log = pino({ level: "silent" });
  const history = (api: ReturnType<typeof recordApi>, live = new Set<string>()) =>
    new FenceHistory({ kube: api.kube, log, clock: () => at(1000), retention: { perNode: 1, maxAgeDays: 400 }, liveFences: () => live });

  test("a new episode: created (one call), then retention for its node; the same status again writes nothing; a change replaces it", async () => {
    const api = recordApi();
    const h = history(api);
    const f = withUid(fence("node-7", fencing({ startTime: stamp(at(950)) })));
    assert.equal(await h.sync(f), true);
    await h.settled();
    assert.deepEqual(api.calls, ["create node-7-3f2a9c1b04de", `list ${HISTORY_NODE_LABEL}=node-7`]);
    assert.equal(await h.sync(f), false);
    assert.equal(api.calls.length, 2, "unchanged: no call at all");
    const next = withUid(fence("node-7", releasing({ startTime: stamp(at(950)), phase: "Released", releasedTime: stamp(at(999)) })));
    assert.equal(await h.sync(next), true);
    assert.equal(api.calls.at(-1), "replace node-7-3f2a9c1b04de");
    assert.equal(api.stored.get("node-7-3f2a9c1b04de")?.status?.outcome, "Released");
  });

  test("a restarted operator: its create finds the record (409) and replaces it with what the NodeFence says now", async () => {
    const api = recordApi();
    const f = withUid(fence("node-7", releasing({ phase: "Released", releasedTime: stamp(at(999)) })));
    await history(api).sync(f);
    const before = structuredClone(api.stored.get("node-7-3f2a9c1b04de"));
    api.calls.length = 0;
    await history(api).sync(f);
    assert.deepEqual(api.calls, ["create node-7-3f2a9c1b04de", "replace node-7-3f2a9c1b04de"], "the create refused (409), then replaced");
    assert.deepEqual(api.stored.get("node-7-3f2a9c1b04de"), before, "idempotent: the same record");
    api.calls.length = 0;
    const unfenced = withUid(fence("node-7", { ...f.status, phase: "Unfenced", unfencedTime: stamp(at(1500)) }));
    assert.equal(await history(api).sync(unfenced), true);
    assert.deepEqual(api.calls, ["create node-7-3f2a9c1b04de", "replace node-7-3f2a9c1b04de"]);
    assert.equal(api.stored.get("node-7-3f2a9c1b04de")?.status?.endTime, stamp(at(1500)));
  });

  test("a record deleted meanwhile is created again; a record of another NodeFence under the name is never overwritten", async () => {
    const api = recordApi();
    const h = history(api);
    const f = withUid(fence("node-7", fencing()));
    await h.sync(f);
    api.stored.clear();
    await h.sync(withUid(fence("node-7", releasing())));
    await h.settled();
    assert.deepEqual(api.calls.slice(-3), [
      "replace node-7-3f2a9c1b04de",
      "create node-7-3f2a9c1b04de",
      `list ${HISTORY_NODE_LABEL}=node-7`,
    ]);
    const other = withUid(fence("node-7", fencing()), "3f2a9c1b-04de-ffff-ffff-ffffffffffff");
    await assert.rejects(history(api).sync(other), /belongs to another NodeFence/);
    assert.equal(api.stored.get("node-7-3f2a9c1b04de")?.spec.nodeFence.uid, UID);
  });

  test("a NodeFence the operator has not started has no episode: nothing written", async () => {
    const api = recordApi();
    assert.equal(await history(api).sync(withUid(fence("node-7"))), false);
    assert.deepEqual(api.calls, []);
  });

  test("a new episode's record prunes the node's ended records past the retention, never one still running or live", async () => {
    const api = recordApi();
    const live = new Set<string>();
    const h = history(api, live);
    // Two ended episodes of node-7 and one of node-8, written earlier.
    for (const [node, uid, start] of [
      ["node-7", "a1000000-0000-0000-0000-000000000001", 100],
      ["node-7", "a2000000-0000-0000-0000-000000000002", 200],
      ["node-8", "a3000000-0000-0000-0000-000000000003", 100],
    ] as const) {
      await h.sync(
        withUid(fence(node, { ...fencing({ startTime: stamp(at(start)) }), phase: "Unfenced", unfencedTime: stamp(at(start + 50)) }), uid),
      );
      await h.settled();
    }
    const names = () => [...api.stored.keys()].sort();
    assert.deepEqual(
      names(),
      ["node-7-a20000000000", "node-8-a30000000000"],
      "perNode 1: node-7's older one went when the newer was created",
    );
    const current = withUid(fence("node-7", fencing({ startTime: stamp(at(900)) })), "b4000000-0000-0000-0000-000000000004");
    live.add(current.metadata.uid!);
    await h.sync(current);
    await h.settled();
    assert.deepEqual(
      names(),
      ["node-7-b40000000000", "node-8-a30000000000"],
      "the running one stays, the ended one of node-7 goes, node-8's stays",
    );
    assert.equal(await h.sweep(), 0, "nothing more to delete");
  });

  test("the apiserver failing: sync throws, and the next sync tries again (nothing recorded as written)", async () => {
    const api = recordApi({ failCreate: true });
    const h = history(api);
    const f = withUid(fence("node-7", fencing()));
    await assert.rejects(h.sync(f), /boom|500/);
    await assert.rejects(h.sync(f), /boom|500/);
    assert.equal(api.calls.filter((c) => c.startsWith("create")).length, 2);
  });
});
