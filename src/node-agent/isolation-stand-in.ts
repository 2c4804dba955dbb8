// STAND-IN for slice A's src/decide/isolation.ts (issue 30): the agent's per-check decision, written to the rules of
// the design so the I/O shell can run and be tested before A lands. agent.ts calls it in ONE place
// (Agent.#apply); at merge that call is swapped for A's function and this file deleted. Conservative where the
// design is silent: a fence seen once is never forgotten (feeding stops for good), and only checks that started
// after the previous confirmation can move it (never backwards).
import type { PeerAnswer } from "./protocol.ts";

export interface IsolationState {
  /** Monotonic ms: start of the latest check that confirmed "no NodeFence that would fence me" (undefined: none yet). */
  lastConfirmationMono: number | undefined;
  /** A check said a NodeFence the operator acts on exists for this node: never feed again. */
  fenceSeen: boolean;
  /** Own API checks failed in a row. */
  failedChecks: number;
}

export const initialIsolation = (): IsolationState => ({ lastConfirmationMono: undefined, fenceSeen: false, failedChecks: 0 });

export type Observation =
  | { kind: "own"; startedMono: number; nodeFence: "absent" | "fence" }
  | { kind: "own-failed"; startedMono: number }
  | {
      kind: "peers";
      startedMono: number;
      /** Answers already checked (signed by the named known peer, echoing our nonce, about us). */
      answers: PeerAnswer[];
      /** Every other record listed while we had the API (the membership), answering or not. */
      knownPeers: number;
      /** F in seconds: how long a peer must have been cut off for its "unreachable" to count. */
      minUnreachableSeconds: number;
    };

const confirmAt = (s: IsolationState, t: number): IsolationState => ({
  ...s,
  lastConfirmationMono: s.lastConfirmationMono === undefined ? t : Math.max(s.lastConfirmationMono, t),
});

export function applyObservation(s: IsolationState, o: Observation): IsolationState {
  if (o.kind === "own-failed") return { ...s, failedChecks: s.failedChecks + 1 };
  if (o.kind === "own") {
    const next = { ...s, failedChecks: 0 };
    return o.nodeFence === "fence" ? { ...next, fenceSeen: true } : confirmAt(next, o.startedMono);
  }
  if (o.answers.some((a) => a.nodeFence === "fence")) return { ...s, fenceSeen: true };
  if (o.answers.some((a) => a.api === "reachable" && a.nodeFence === "absent")) return confirmAt(s, o.startedMono);
  const cutOff = new Set(
    o.answers.filter((a) => a.api === "unreachable" && a.unreachableForSeconds >= o.minUnreachableSeconds).map((a) => a.from),
  );
  return cutOff.size * 2 > o.knownPeers ? confirmAt(s, o.startedMono) : s;
}

/** Whether the watchdog may be fed at `nowMono`: no fence seen and within D of the last confirmation. */
export const mayFeed = (s: IsolationState, nowMono: number, deadlineSeconds: number): boolean =>
  !s.fenceSeen && s.lastConfirmationMono !== undefined && nowMono < s.lastConfirmationMono + deadlineSeconds * 1000;
