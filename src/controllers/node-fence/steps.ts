// The NodeFence's steps (decide/fence-machine.ts Step), each to the handler that performs it. To change what one
// step does, change its handler; what each may call that is destructive is in destructive.ts.
import type { NodeFence } from "../../api/v1alpha1.ts";
import type { Performed, StepContext, StepHandler, StepInput } from "./context.ts";
import { addFinalizer, finalize } from "./finalize.ts";
import { begin, confirmed, escalate, interrupted, reenter, retry, roundFailed, start } from "./fencing.ts";
import { markNode, unmarkNode } from "./marks.ts";
import { recordOutcome, runAgent } from "./power.ts";
import { release, released } from "./release.ts";
import { cancel, startUnfence } from "./unfence.ts";

const STEPS: { [K in Performed["kind"]]: StepHandler<K> } = {
  addFinalizer,
  finalize,
  start,
  begin,
  cancel,
  interrupted,
  runAgent,
  recordOutcome,
  escalate,
  roundFailed,
  retry,
  confirmed,
  reenter,
  markNode,
  release,
  released,
  startUnfence,
  unmarkNode,
};

/** Performs the step with its handler; returns the stored NodeFence (undefined once it is gone). */
export function perform(c: StepContext, x: StepInput<Performed["kind"]>): Promise<NodeFence | undefined> {
  // Each handler is typed for its own kind: the table guarantees that x.step is of the kind it is looked up by.
  const handler = STEPS[x.step.kind] as StepHandler<Performed["kind"]>;
  return handler(c, x);
}
