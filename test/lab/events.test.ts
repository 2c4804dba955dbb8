// EventRecorder against a real apiserver: Events are valid core/v1 Events, land where kubectl describe
// looks, repeats aggregate into one Event, and a dead apiserver never makes record() throw.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { mkdtemp } from "node:fs/promises";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { KubeConfig, type CoreV1Event } from "@kubernetes/client-node";
import { Lab } from "../../lab/lab.ts";
import { COMBINED_PREFIX, EventRecorder, MAX_SIMILAR, type RecordOutcome } from "../../src/runtime/events.ts";
import type { Log } from "../../src/runtime/controller.ts";

type Entry = { level: string; obj: object; msg: string };
function memoryLog(): Log & { entries: Entry[] } {
  const entries: Entry[] = [];
  const at = (level: string) => (obj: object, msg: string) => void entries.push({ level, obj, msg });
  return { entries, info: at("info"), warn: at("warn"), error: at("error"), debug: at("debug") };
}

describe("EventRecorder", () => {
  let lab: Lab;
  before(async () => {
    lab = await Lab.up({ dir: await mkdtemp(join(tmpdir(), "stockade-events-")), nodes: 1 });
  });
  after(async () => {
    await lab?.down();
  });

  const eventsFor = async (namespace: string, kind: string, name: string): Promise<CoreV1Event[]> =>
    (
      await lab.core.listNamespacedEvent({ namespace, fieldSelector: `involvedObject.kind=${kind},involvedObject.name=${name}` })
    ).items.filter((e) => e.reportingComponent === "stockade");

  test("an Event on the Node goes to namespace default and a repeat bumps its count", async () => {
    const node = await lab.core.readNode({ name: "node-1" });
    const outcomes: RecordOutcome[] = [];
    const log = memoryLog();
    const rec = new EventRecorder({ kc: lab.kc, log, instance: "test-instance", onRecord: (o) => outcomes.push(o) });
    const ref = { apiVersion: "v1", kind: "Node", name: "node-1", uid: node.metadata!.uid! };

    await rec.record(ref, "Warning", "NodeUnreachable", "node-1 stopped heartbeating");
    let events = await eventsFor("default", "Node", "node-1");
    assert.equal(events.length, 1);
    const [e] = events;
    assert.equal(e!.type, "Warning");
    assert.equal(e!.reason, "NodeUnreachable");
    assert.equal(e!.message, "node-1 stopped heartbeating");
    assert.equal(e!.count, 1);
    assert.equal(e!.source?.component, "stockade");
    assert.equal(e!.reportingInstance, "test-instance");
    assert.equal(e!.involvedObject.uid, ref.uid);
    assert.equal(e!.involvedObject.namespace, undefined);
    assert.ok(e!.firstTimestamp && e!.lastTimestamp && e!.eventTime);

    await rec.record(ref, "Warning", "NodeUnreachable", "node-1 stopped heartbeating");
    events = await eventsFor("default", "Node", "node-1");
    assert.equal(events.length, 1, "the repeat was aggregated");
    assert.equal(events[0]!.count, 2);
    assert.equal(events[0]!.metadata.name, e!.metadata.name);

    await rec.record(ref, "Normal", "NodeFenced", "powered off via BMC");
    events = await eventsFor("default", "Node", "node-1");
    assert.equal(events.length, 2, "a different reason is a different Event");
    assert.deepEqual(
      outcomes.map((o) => [o.action, o.error === undefined]),
      [
        ["create", true],
        ["patch", true],
        ["create", true],
      ],
    );
    assert.deepEqual(log.entries, []);
  });

  test("an Event on a namespaced object goes to its namespace; concurrent repeats still aggregate", async () => {
    const rec = new EventRecorder({ kc: lab.kc, log: memoryLog() });
    const pod = { apiVersion: "v1", kind: "Pod", name: "web-0", namespace: "kube-system", uid: "0b3c2b5e-0000-4000-8000-000000000001" };
    const long = "x".repeat(5000);
    await Promise.all([1, 2, 3].map(() => rec.record(pod, "Normal", "PodReleased", long)));
    const events = await eventsFor("kube-system", "Pod", "web-0");
    assert.equal(events.length, 1);
    assert.equal(events[0]!.count, 3);
    assert.equal(events[0]!.involvedObject.namespace, "kube-system");
    assert.ok(events[0]!.message!.length <= 1024 && events[0]!.message!.endsWith("..."));
  });

  test("past MAX_SIMILAR different messages of one reason on one object, the rest fold into one combined Event (issue 26 item 5)", async () => {
    const rec = new EventRecorder({ kc: lab.kc, log: memoryLog() });
    const fence = { apiVersion: "stockade.io/v1alpha1", kind: "NodeFence", name: "node-loop", uid: "0b3c2b5e-0000-4000-8000-000000000002" };
    // A fence re-entering every round: each message names its round, none repeats.
    for (let round = 1; round <= MAX_SIMILAR + 15; round++)
      await rec.record(
        fence,
        "Warning",
        "HeartbeatAfterFence",
        `release stopped: round ${round}: the node heartbeat after it was confirmed fenced`,
      );
    await rec.record(fence, "Warning", "FenceFailed", "another reason is its own Event");
    const events = await eventsFor("default", "NodeFence", "node-loop");
    const loop = events.filter((e) => e.reason === "HeartbeatAfterFence");
    assert.equal(loop.length, MAX_SIMILAR + 1, "the first ten, then one combined");
    const combined = loop.filter((e) => e.message?.startsWith(COMBINED_PREFIX));
    assert.equal(combined.length, 1);
    assert.equal(combined[0]!.count, 15);
    assert.equal(
      combined[0]!.message,
      `${COMBINED_PREFIX}release stopped: round ${MAX_SIMILAR + 15}: the node heartbeat after it was confirmed fenced`,
    );
    assert.equal(events.filter((e) => e.reason === "FenceFailed").length, 1);
  });

  test("recording through an unreachable apiserver logs and does not throw", async () => {
    // A port that was free a moment ago: connections are refused.
    const server = createServer();
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    const { port } = server.address() as { port: number };
    await new Promise((resolve) => server.close(resolve));
    const kc = new KubeConfig();
    kc.loadFromOptions({
      clusters: [{ name: "dead", server: `https://127.0.0.1:${port}`, skipTLSVerify: true }],
      users: [{ name: "u", token: "t" }],
      contexts: [{ name: "dead", cluster: "dead", user: "u" }],
      currentContext: "dead",
    });
    const log = memoryLog();
    const outcomes: RecordOutcome[] = [];
    const rec = new EventRecorder({ kc, log, onRecord: (o) => outcomes.push(o) });
    await rec.record({ apiVersion: "v1", kind: "Node", name: "node-1" }, "Warning", "FenceFailed", "no BMC");
    await rec.record({ apiVersion: "v1", kind: "Node", name: "node-1" }, "Warning", "FenceFailed", "no BMC");
    assert.equal(outcomes.length, 2);
    assert.ok(outcomes.every((o) => o.action === "create" && o.error !== undefined));
    assert.equal(log.entries.filter((e) => e.level === "warn").length, 2);
    assert.match(log.entries[0]!.msg, /FenceFailed on Node node-1 failed/);
  });
});
