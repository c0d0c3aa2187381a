// Kernel events carry CLOCK_MONOTONIC nanoseconds (bpftrace `nsecs`); spans
// carry wall-clock nanoseconds. Node's process.hrtime.bigint() reads the same
// monotonic clock as the kernel, so wall = monotonic + offset, with the offset
// measured here and refreshed (NTP slews the wall clock; monotonic is not
// slewed the same way).
//
// Date.now() only has millisecond resolution, so a plain (hrtime, Date.now())
// pair is off by up to 1 ms. Instead each sample spins until Date.now() ticks
// over: at that instant the wall clock is exactly on a millisecond boundary,
// and the hrtime reads just before and after bound when it happened. Of
// several samples the one with the smallest bracket (RTT) wins.

interface MonotonicClockOptions {
  /** Wall-clock milliseconds; injectable for tests. */
  wallMs?: () => number;
  /** CLOCK_MONOTONIC nanoseconds; injectable for tests. */
  monoNs?: () => bigint;
  /** Samples per measurement; the one with the smallest RTT is kept. */
  samples?: number;
}

interface ClockSample {
  /** wall ns − monotonic ns. */
  offsetNs: bigint;
  /** Width of the bracket the sample was taken in: the offset's uncertainty. */
  rttNs: bigint;
}

export class MonotonicClock {
  readonly #wallMs: () => number;
  readonly #monoNs: () => bigint;
  readonly #samples: number;
  #offsetNs: bigint;
  #lastSample: ClockSample;

  constructor(opts: MonotonicClockOptions = {}) {
    this.#wallMs = opts.wallMs ?? Date.now;
    this.#monoNs = opts.monoNs ?? (() => process.hrtime.bigint());
    this.#samples = Math.max(1, opts.samples ?? 5);
    this.#lastSample = this.measure();
    this.#offsetNs = this.#lastSample.offsetNs;
  }

  /** A fixed offset, for replaying a recording with the offset it was made with. */
  static fixed(offsetNs: bigint): MonotonicClock {
    const clock = new MonotonicClock({ wallMs: () => 0, monoNs: () => 0n, samples: 1 });
    clock.#offsetNs = offsetNs;
    clock.#lastSample = { offsetNs, rttNs: 0n };
    return clock;
  }

  get offsetNs(): bigint {
    return this.#offsetNs;
  }

  /** Replay: from here on, the offset the recorded agent measured anew (a `clock` record). */
  useRecordedOffset(offsetNs: bigint): void {
    this.#offsetNs = offsetNs;
    this.#lastSample = { offsetNs, rttNs: 0n };
  }

  get lastSample(): ClockSample {
    return this.#lastSample;
  }

  /** Kernel CLOCK_MONOTONIC ns → wall-clock ns since the epoch. */
  toWallNs(monoNs: bigint): bigint {
    return monoNs + this.#offsetNs;
  }

  /** Wall-clock ns since the epoch → CLOCK_MONOTONIC ns. */
  toMonoNs(wallNs: bigint): bigint {
    return wallNs - this.#offsetNs;
  }

  /** Takes a new measurement and uses it. Costs up to ~1 ms per sample (spinning to a tick). */
  refresh(): ClockSample {
    this.#lastSample = this.measure();
    this.#offsetNs = this.#lastSample.offsetNs;
    return this.#lastSample;
  }

  measure(): ClockSample {
    let best: ClockSample | null = null;
    for (let i = 0; i < this.#samples; i++) {
      const sample = this.#sampleAtTick();
      if (best === null || sample.rttNs < best.rttNs) best = sample;
    }
    return best ?? this.#sampleAtTick();
  }

  #sampleAtTick(): ClockSample {
    const start = this.#wallMs();
    let before = this.#monoNs();
    // Bounded spin: a wall clock that does not tick (frozen, or a test double)
    // still yields a sample, just a less precise one.
    for (let spins = 0; spins < 1_000_000; spins++) {
      const wall = this.#wallMs();
      const after = this.#monoNs();
      if (wall !== start) {
        const midpoint = before + (after - before) / 2n;
        return { offsetNs: BigInt(wall) * 1_000_000n - midpoint, rttNs: after - before };
      }
      before = after;
    }
    const after = this.#monoNs();
    return { offsetNs: BigInt(start) * 1_000_000n - after, rttNs: 1_000_000n };
  }
}
