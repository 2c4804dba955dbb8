// What the NodeFence controller's steps share: its dependencies, the agent operations, and the few helpers every
// step uses (the status write, conditions, Events). A step handler gets this with the fence, the read its step was
// decided on and its logger (StepInput), and nothing else.
import type { V1Lease, V1Node } from "@kubernetes/client-node";
import type { Logger } from "pino";
import type { NodeFence, NodeFenceStatus } from "../../api/v1alpha1.ts";
import type { Step } from "../../decide/fence-machine.ts";
import type { Condition } from "../../kube/conditions.ts";
import type { Leadership } from "../../runtime/leader.ts";
import type { AgentOperations } from "./agent-operations.ts";
import type { NodeFenceDeps } from "./deps.ts";
import type { HistoryRecorder } from "./history.ts";

export type Status = NodeFenceStatus;
export type FenceCondition = Omit<Condition, "lastTransitionTime" | "observedGeneration">;
export type Release = NonNullable<Status["releases"]>[number];

export interface StepContext {
  readonly d: NodeFenceDeps;
  readonly leadership: Leadership;
  readonly operations: AgentOperations;
  readonly history: HistoryRecorder;
  now(): string;
  /** The guarded status write (status.ts); returns the stored object. */
  write(fence: NodeFence, change: (s: Status) => Status): Promise<NodeFence>;
  cond(s: Status, c: FenceCondition, fence: NodeFence): Status;
  event(fence: NodeFence, type: "Normal" | "Warning", reason: string, message: string, node?: V1Node): Promise<void>[];
  announce(events: Promise<void>[]): void;
}

/** The steps a handler performs (a wait and done are the reconcile loop's own). */
export type Performed = Exclude<Step, { kind: "done" | "wait" }>;

export interface StepInput<K extends Performed["kind"]> {
  fence: NodeFence;
  node: V1Node | undefined;
  lease: V1Lease | undefined;
  step: Extract<Step, { kind: K }>;
  log: Logger;
}

export type StepHandler<K extends Performed["kind"]> = (c: StepContext, x: StepInput<K>) => Promise<NodeFence | undefined>;
