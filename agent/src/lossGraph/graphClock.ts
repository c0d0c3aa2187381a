// The one clock of the loss graph: where the graph is in kernel time
// (CLOCK_MONOTONIC ns, as the probes stamp their lines) and when its next
// tick is due. The live agent moves it with a timer, replay with each record's
// recorded time; both through LossGraph.advance, so a recording replays to
// the same events in the same order as the agent produced them.

/** How often the graph ticks while something waits in it: when correlation windows close. */
export const TICK_MS = 25;
const TICK_NS = BigInt(TICK_MS) * 1_000_000n;

export class GraphClock {
  #nowNs: bigint;
  #nextTickNs: bigint;
  readonly #wallMs: (nowNs: bigint) => number;

  /**
   * Starts at kernel time `startNs`; the first tick is one period later.
   * `wallMs` is wall-clock ms at a kernel time: the live agent's reads the
   * system clock (the default), replay's is the recording's, so that its
   * decisions and exemplar stamps fall where the live agent's did.
   */
  constructor(startNs: bigint, wallMs: (nowNs: bigint) => number = () => Date.now()) {
    this.#nowNs = startNs;
    this.#nextTickNs = startNs + TICK_NS;
    this.#wallMs = wallMs;
  }

  get nowNs(): bigint {
    return this.#nowNs;
  }

  /** Wall-clock ms now, for every time decision in the graph. */
  wallMs(): number {
    return this.#wallMs(this.#nowNs);
  }

  /**
   * Moves to `nowNs`: `tick` runs at every tick time passed on the way, with
   * the clock there, then `at` at `nowNs`.
   */
  advance(nowNs: bigint, tick: () => void, at: () => void): void {
    while (this.#nextTickNs <= nowNs) {
      this.#nowNs = this.#nextTickNs;
      tick();
      this.#nextTickNs += TICK_NS;
    }
    this.#nowNs = nowNs;
    at();
  }
}
