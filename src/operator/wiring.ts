// Which cache change enqueues what: the caches' events wired to the controllers' queues.
import type { FenceAgent, FencingPolicy } from "../api/v1alpha1.ts";
import { agentsForPolicyEvent } from "../controllers/fence-agent.ts";
import { FLEET_KEY, fleetReadsChange, type NodeHealthController } from "../controllers/node-health.ts";
import { readyTurnedUnknown } from "../decide/node-health.ts";
import type { Caches } from "../kube/caches.ts";
import { changedBeyondStatus, enqueueFrom, type Controller } from "../runtime/controller.ts";

/** Pod, claim and budget events reach the fleet decision within this, many as one pass. */
const OBJECT_EVENTS_COALESCE_MS = 1_000;
/**
 * A node's Ready turning Unknown ends (or skips) the fleet pass's rest at most this often. A node's own kubelet can
 * write its Ready condition as often as it likes: unbounded, a flapping node would run passes back to back, taking the
 * event loop from every fence under way. At most four hurried passes a second; the node controller marks the nodes of
 * a partition Unknown in batches over a few hundred ms, and at 1 s the rest of a batch waited a whole rest.
 */
const HURRY_MIN_INTERVAL_MS = 250;

export interface Enqueued {
  health: NodeHealthController;
  fleet: Controller;
  fences: Controller;
  agents: Controller;
}

export function wireEnqueues(c: Caches, w: Enqueued): void {
  wireFleet(c, w.fleet, w.health);
  wireFences(c, w.fences);
  enqueueFrom(c.agents, w.agents.queue, (a) => a.metadata?.name);
  enqueueFrom(c.policies, w.agents.queue, (p, old) => agentsForPolicyEvent(c.agents.list(), p, old));
}

/** The fleet pass: one key (FLEET_KEY), run at once for what can make a fence due, coalesced for the rest. */
function wireFleet(c: Caches, fleet: Controller, health: NodeHealthController): void {
  enqueueFrom(c.policies, fleet.queue, () => FLEET_KEY);
  // Nodes at once (a Ready condition turning Unknown is half of a partition), but not a healthy node's routine
  // status write (NodeHealthController.isRoutineNodeUpdate); the pass runs at least every 5 s anyway. Ready turning
  // Unknown does not wait for the pass's rest either: it is what makes a partitioned node's fence due.
  let hurried = -Infinity;
  enqueueFrom(c.nodes, fleet.queue, (n, old) => {
    if (health.isRoutineNodeUpdate(n, old)) return undefined;
    if (readyTurnedUnknown(n, old) && performance.now() - hurried >= HURRY_MIN_INTERVAL_MS) {
      hurried = performance.now();
      fleet.hurry();
    }
    return FLEET_KEY;
  });
  // Pods, claims and budgets change all the time in a big cluster (every pod status update), and one pass of the
  // fleet decision reads them all: their changes reach it within a second, coalesced into one pass.
  const soon = () => fleet.queue.addAfter(FLEET_KEY, OBJECT_EVENTS_COALESCE_MS);
  for (const verb of ["add", "update", "delete"] as const) {
    c.pods.on(verb, soon);
    c.pvcs.on(verb, soon);
    c.pdbs.on(verb, soon);
    c.fences.on(verb, (f, old) => void (fleetReadsChange(f, old) && soon()));
    // Leases: a routine renewal of a healthy node changes no decision (NodeHealthController.isRoutineRenewal).
    // The others are coalesced too: when many nodes renew late (an apiserver or a network that lags), each
    // late renewal ran a whole pass, three a second at 1,000 nodes. The cache already holds the renewal when a
    // pass runs for any other reason, and fencing itself re-reads the Lease (NodeFence creation and release).
    c.leases.on(verb, (l) => void (health.isRoutineRenewal(l) || soon()));
  }
}

/** The NodeFences: each its own key, on its own, its Node's, and its policy's or agents' spec changes. */
function wireFences(c: Caches, fences: Controller): void {
  enqueueFrom(c.fences, fences.queue, (f) => f.metadata?.name);
  enqueueFrom(c.nodes, fences.queue, (n) => (c.fences.get(n.metadata?.name ?? "") ? n.metadata?.name : undefined));
  // A NodeFence reads policies' and agents' specs, never their status: the fleet pass writes a policy's status
  // (partitioned nodes, active fences) at every change, and each such write used to re-run every NodeFence,
  // a fresh read each, in the middle of a burst of failures.
  const allFences = (o: FencingPolicy | FenceAgent, old?: FencingPolicy | FenceAgent) =>
    changedBeyondStatus(o, old) ? c.fences.list().map((f) => f.metadata?.name ?? "") : undefined;
  enqueueFrom(c.policies, fences.queue, allFences);
  enqueueFrom(c.agents, fences.queue, allFences);
}
