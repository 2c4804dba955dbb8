// The agent's side of the isolation decision (decide/isolation.ts): it translates what the loop observed (its own
// fresh NodeFence read with the time it started; one peer round's authenticated answers with the time the round
// started) into the decision's input, keeps the decision's state, and answers the feeding timer and SIGTERM from the
// latest decision. All the rules live in decide/isolation.ts; nothing here extends or shortens feeding on its own.
import {
  decideIsolation,
  initialAgentState,
  mayFeed,
  shutdownAction,
  type AgentConfig,
  type AgentDecision,
  type AgentState,
  type OwnCheck,
} from "../decide/isolation.ts";
import type { PeerAnswer } from "./protocol.ts";

export type IsolationTiming = Omit<AgentConfig, "peers">;

export class Isolation {
  readonly #timing: IsolationTiming;
  #state: AgentState = initialAgentState();
  #feedUntilMs: number | undefined;
  #last: AgentDecision | undefined;

  constructor(timing: IsolationTiming) {
    this.#timing = timing;
  }

  /**
   * One decision. `peers`: the membership (the names of every other record listed while we had the API), as it is
   * now. `answers`: one round's answers, already checked (signed by the named peer, echoing our nonce, about us).
   */
  decide(
    nowMs: number,
    peers: readonly string[],
    own: OwnCheck,
    round?: { startedMs: number; answers: readonly PeerAnswer[] },
  ): AgentDecision {
    const answers = (round?.answers ?? []).map((a) => ({
      from: a.from,
      api: a.api,
      nodeFence: a.nodeFence,
      unreachableForSeconds: a.unreachableForSeconds,
      roundStartedMs: round!.startedMs,
    }));
    const d = decideIsolation({ nowMs, config: { ...this.#timing, peers }, state: this.#state, own, answers });
    this.#state = d.state;
    this.#feedUntilMs = d.feedUntilMs;
    this.#last = d;
    return d;
  }

  /** The feeding timer asks this at every write (never only when an API call returns). */
  mayFeed(nowMs: number): boolean {
    return mayFeed(this.#feedUntilMs, nowMs);
  }

  shutdown(nowMs: number): "disarm" | "let-fire" {
    return shutdownAction(this.#state, { ...this.#timing, peers: [] }, nowMs);
  }

  get fenced(): boolean {
    return this.#state.fencedAtMs !== undefined;
  }

  get state(): AgentState {
    return this.#state;
  }

  get last(): AgentDecision | undefined {
    return this.#last;
  }
}
