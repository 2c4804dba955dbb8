// The NodeFence controller's Events: on the NodeFence, and on its Node when one is given.
import type { V1Node } from "@kubernetes/client-node";
import { API_VERSION, type NodeFence } from "../../api/v1alpha1.ts";
import type { EventRecorder } from "../../runtime/events.ts";
import type { InFlight } from "../../runtime/in-flight.ts";

/**
 * Events are best-effort (the recorder never throws) and the fence's next step must not wait for them: each was a
 * round trip per step. Shutdown waits for them (inflight) so that they are not lost with the process.
 */
export function announce(inflight: InFlight | undefined, events: Promise<void>[]): void {
  void inflight?.track(Promise.all(events));
}

export function fenceEvents(
  recorder: EventRecorder,
  fence: NodeFence,
  type: "Normal" | "Warning",
  reason: string,
  message: string,
  node?: V1Node,
): Promise<void>[] {
  const out = [
    recorder.record(
      { apiVersion: API_VERSION, kind: "NodeFence", name: fence.metadata?.name ?? "", uid: fence.metadata?.uid },
      type,
      reason,
      message,
    ),
  ];
  if (node)
    out.push(
      recorder.record({ apiVersion: "v1", kind: "Node", name: node.metadata?.name ?? "", uid: node.metadata?.uid }, type, reason, message),
    );
  return out;
}
