// The NodeFence phases the fleet decision and the force-delete guard's scope read (a module of their own: the scope is
// read by the fleet's decision of gone Nodes, and must not import the fleet).
export const ACTIVE_PHASES = new Set(["", "Pending", "Fencing"]);
/** Phases in which the node is fenced or being fenced: its pods keep NodeDown and it is not re-assessed. */
export const HOLDING_PHASES = new Set(["", "Pending", "Fencing", "Fenced", "Releasing", "Released", "Failed", "Unfencing"]);

/** Phases in which the node is confirmed fenced. */
export const FENCED_PHASES = new Set(["Fenced", "Releasing", "Released", "Unfencing"]);
