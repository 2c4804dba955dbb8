// Leader election when things go wrong, checked on the apiserver's audit log (each replica has its own
// client certificate, so its requests carry its user name):
// - the leader's connection to the API goes silent (a blackholed proxy: requests hang, nothing is
//   refused): it stops leading and exits within the renew deadline of its last successful renewal,
//   the other replica takes over only once the Lease expired, and the cut-off one writes nothing after;
// - the leader gets SIGTERM in the middle of a fence attempt: it finishes the attempt and records its
//   outcome, still holding the Lease, and only then releases the Lease.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { once } from "node:events";
import { readFileSync } from "node:fs";
import { setTimeout as sleep } from "node:timers/promises";
import type { ChildProcess } from "node:child_process";
import { CoordinationV1Api } from "@kubernetes/client-node";
import { Bed, SECRETS_NS } from "../lab/bed.ts";
import { waitFor } from "../lab/health.ts";
import { paths } from "../lab/state.ts";
import { TcpProxy } from "../lab/tcp-proxy.ts";

const LEASE_DURATION_MS = 15_000;
const RENEW_DEADLINE_MS = 10_000;

interface AuditEvent {
  stage: string;
  verb: string;
  user: { username: string };
  objectRef?: { resource?: string; subresource?: string; namespace?: string; name?: string };
  responseStatus?: { code?: number };
  requestReceivedTimestamp: string;
}

describe("e2e: leader safety", () => {
  let bed: Bed;
  let proxy: TcpProxy;
  before(async () => {
    bed = await Bed.up({ nodes: 3, name: "leader-safety" });
    await bed.policy("default", { guards: { maxUnhealthyNodes: 1 } });
    proxy = await new TcpProxy("127.0.0.1", bed.lab.state.ports.apiserver).start();
  });
  after(async () => {
    await proxy?.stop();
    await bed?.down();
  });

  const holder = async () =>
    (await bed.lab.kc.makeApiClient(CoordinationV1Api).readNamespacedLease({ name: "stockade-operator", namespace: SECRETS_NS })).spec
      ?.holderIdentity ?? "";

  /** Successful requests by `user` that write (not read or watch), in order, with the time the apiserver received them. */
  const writesBy = (user: string) =>
    readFileSync(paths(bed.lab.dir).audit, "utf8")
      .split("\n")
      .filter((l) => l.includes(`"${user}"`))
      .map((l) => JSON.parse(l) as AuditEvent)
      .filter((e) => e.user.username === user && e.stage === "ResponseComplete" && ["create", "update", "patch", "delete"].includes(e.verb))
      .map((e) => ({ ...e, t: Date.parse(e.requestReceivedTimestamp), ok: (e.responseStatus?.code ?? 0) < 300 }))
      .sort((a, b) => a.t - b.t);
  const isLease = (e: AuditEvent) => e.objectRef?.resource === "leases" && e.objectRef.name === "stockade-operator";
  const logTime = (c: ChildProcess, msg: RegExp) => bed.operatorLog(c).find((l) => msg.test(l.msg))?.time;

  /** Starts a replica with its own user; its instance id is e2e-operator-N (N = how many were started). */
  const replica = async (user: string, server?: string) => {
    const child = await bed.startOperator({ leaderElect: true, kubeconfig: bed.operatorKubeconfig(user, server) });
    return { child, user, leads: new RegExp(`^e2e-operator-${bed.operators.length}(_|$)`) };
  };
  const waitToLead = (r: { user: string; leads: RegExp }) =>
    waitFor(`${r.user} to lead`, async () => (r.leads.test(await holder()) ? true : undefined), { timeoutMs: 30_000 });

  let leader: Awaited<ReturnType<typeof replica>> | undefined;

  test("a leader whose API connection goes silent stops within the renew deadline; the other takes over only after the Lease expired", async () => {
    const ra = await replica("stockade-replica-a", proxy.url);
    await waitToLead(ra);
    const rb = await replica("stockade-replica-b");
    const [a, b, A, B] = [ra.child, rb.child, ra.user, rb.user];
    await sleep(5_000); // B has seen A renew
    const cutAt = Date.now();
    proxy.blackhole();
    const exited = once(a, "exit");
    await Promise.race([
      exited,
      sleep(RENEW_DEADLINE_MS + 15_000).then(() => Promise.reject(new Error("A still runs 25 s after the cut"))),
    ]);
    const exitAt = Date.now();
    await waitToLead(rb);
    proxy.restore(); // whatever A still had in flight could now reach the apiserver
    await sleep(3_000);

    const lost = logTime(a, /^lost leadership/);
    const became = logTime(b, /^became leader/);
    const aWrites = writesBy(A);
    const lastRenew = aWrites.filter((e) => isLease(e) && e.ok).at(-1)!;
    const takeover = writesBy(B).find((e) => isLease(e) && e.ok)!;
    const timeline = `cut ${cutAt}, A's last renewal received ${lastRenew?.t}, A lost ${lost}, A exited ${exitAt}, B took over (received) ${takeover?.t}, B leads ${became}`;
    console.log(
      `leader cut off: stopped ${((lost! - lastRenew.t) / 1000).toFixed(1)} s after its last renewal, ` +
        `the other took over ${((takeover.t - lastRenew.t) / 1000).toFixed(1)} s after it`,
    );
    assert.ok(lost && became && lastRenew && takeover, timeline);
    assert.equal(a.exitCode, 1, "A exited because it lost leadership");
    assert.ok(lastRenew.t <= cutAt, timeline);
    // A's renewal was sent before the apiserver received it, and A stops renew deadline after sending it.
    assert.ok(lost - lastRenew.t <= RENEW_DEADLINE_MS + 500, `A stopped within the renew deadline: ${timeline}`);
    assert.ok(exitAt - lastRenew.t <= RENEW_DEADLINE_MS + 2_000, `A exited right after: ${timeline}`);
    // B saw A's last record no earlier than the apiserver received it, and waited a lease duration from then.
    assert.ok(takeover.t >= lastRenew.t + LEASE_DURATION_MS - 50, `B waited for the Lease to expire: ${timeline}`);
    assert.ok(became > lost, timeline);
    assert.deepEqual(
      aWrites.filter((e) => e.t >= lost),
      [],
      "A made no API write after it stopped leading",
    );
    leader = rb;
  });

  test("SIGTERM in the middle of a fence attempt: the attempt's outcome is recorded before the Lease is released", async () => {
    if (!leader) {
      leader = await replica("stockade-replica-d"); // run on its own (--test-name-pattern)
      await waitToLead(leader);
    }
    const rc = await replica("stockade-replica-c");
    const [follower, C, B] = [rc.child, rc.user, leader.user];
    const pods = await bed.statefulSet("db", 1);
    const node = pods[0]!.spec!.nodeName!;
    await bed.lab.setBmcReachable(node, false); // the attempt hangs on the BMC
    await bed.lab.crash(node);
    await bed.waitForFence(node, (f) => (f.status?.attempts ?? []).some((x) => x.outcome === "InProgress"), "has an attempt in progress");
    const term = Date.now();
    const l = leader.child;
    const exited = once(l, "exit");
    l.kill("SIGTERM");
    await sleep(2_000);
    assert.equal(l.exitCode, null, "still finishing its attempt");
    await bed.lab.setBmcReachable(node, true);
    await Promise.race([exited, sleep(45_000).then(() => Promise.reject(new Error("the leader did not stop within 45 s of SIGTERM")))]);
    assert.equal(l.exitCode, 0, "drained and stopped cleanly");
    const f = await bed.waitForFence(node, (x) => x.status?.phase === "Released", "Released", 120_000);
    await waitToLead(rc);

    const bWrites = writesBy(B).filter((e) => e.ok);
    const release = bWrites.filter(isLease).at(-1)!;
    const fenceWrites = bWrites.filter((e) => e.objectRef?.resource === "nodefences" && e.t >= term);
    const takeover = writesBy(C).find((e) => isLease(e) && e.ok);
    const first = (f.status?.attempts ?? [])[0];
    const timeline = `SIGTERM ${term}, B's NodeFence writes after it ${fenceWrites.map((e) => e.t).join(",")}, B's Lease release ${release?.t}, C took over ${takeover?.t}`;
    assert.ok(
      first && first.outcome !== "InProgress" && first.outcome !== "Interrupted",
      `the old leader recorded its attempt: ${JSON.stringify(first)}`,
    );
    assert.ok(fenceWrites.length >= 1, `the old leader wrote the attempt's outcome after SIGTERM: ${timeline}`);
    assert.ok(release.t > fenceWrites.at(-1)!.t, `the Lease was released after the last NodeFence write: ${timeline}`);
    assert.ok(logTime(l, /^released the leader Lease/), "it says it released the Lease");
    assert.ok(takeover && takeover.t >= release.t, `the follower took over after the release: ${timeline}`);
    assert.ok(takeover.t - release.t < 5_000, `and at once, not after the Lease expired: ${timeline}`);
    assert.equal(follower.exitCode, null);
    assert.deepEqual((await bed.invariant()).violations, []);
  });
});
