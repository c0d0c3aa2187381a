// When a bpftrace exits, the next one starts at once if the last one ran
// healthy (every second blind is a second of lost writes nobody counts), and
// only a crash loop backs off, exponentially, with jitter, up to a cap.
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { restartDelayMs, skippedTicks } from "../../../../src/sources/probe/bpftraceSupervisor.ts";

/** Just below 1: Math.random() never returns 1 itself. */
const HIGH = 1 - Number.EPSILON;
const low = (): number => 0;
const high = (): number => HIGH;

describe("restart delay", () => {
  it("is 100–200 ms after a healthy run, however many restarts came before", () => {
    for (const restarts of [0, 1, 5, 50]) {
      assert.equal(restartDelayMs({ healthy: true, restarts, maxBackoffMs: 30_000 }, low), 100);
      const most = restartDelayMs({ healthy: true, restarts, maxBackoffMs: 30_000 }, high);
      assert.ok(most > 199 && most <= 200, `${most}`);
    }
  });

  it("doubles in a crash loop: half to all of 1 s, 2 s, 4 s, 8 s, 16 s, then the cap", () => {
    const lows = [0, 1, 2, 3, 4, 5, 6, 10].map((restarts) => restartDelayMs({ healthy: false, restarts, maxBackoffMs: 30_000 }, low));
    assert.deepEqual(lows, [500, 1000, 2000, 4000, 8000, 15_000, 15_000, 15_000]);
    const highs = [0, 1, 2, 3, 4, 5, 6].map((restarts) => Math.round(restartDelayMs({ healthy: false, restarts, maxBackoffMs: 30_000 }, high)));
    assert.deepEqual(highs, [1000, 2000, 4000, 8000, 16_000, 30_000, 30_000]);
  });

  it("waits longer after each crash than any jitter of the one before, up to the cap", () => {
    // 1, 2, 4, 8, 16 s stay under the 30 s cap: the next wait's least is this one's most.
    for (let restarts = 0; restarts < 4; restarts++) {
      const longest = restartDelayMs({ healthy: false, restarts, maxBackoffMs: 30_000 }, high);
      const shortestNext = restartDelayMs({ healthy: false, restarts: restarts + 1, maxBackoffMs: 30_000 }, low);
      assert.ok(shortestNext >= longest, `after ${restarts}: ${shortestNext} < ${longest}`);
    }
  });

  it("keeps a crash loop's delay within maxBackoffMs", () => {
    for (let restarts = 0; restarts < 10; restarts++) {
      for (const random of [low, () => 0.5, high]) {
        const delay = restartDelayMs({ healthy: false, restarts, maxBackoffMs: 3000 }, random);
        assert.ok(delay >= 500 && delay <= 3000, `${restarts}: ${delay}`);
      }
    }
    assert.equal(restartDelayMs({ healthy: false, restarts: 9, maxBackoffMs: 3000 }, low), 1500);
  });

  it("takes its jitter from Math.random by default", () => {
    for (let i = 0; i < 100; i++) {
      const delay = restartDelayMs({ healthy: true, restarts: 0, maxBackoffMs: 30_000 });
      assert.ok(delay >= 100 && delay < 200, `${delay}`);
    }
  });
});

// A program's timer tick runs once a second unless the kernel skips it (its
// interrupt landed in another BPF program): the gap between two ticks that
// ran says how many were skipped, counted in lostwrite_probe_missed_runs_total.
describe("skipped ticks", () => {
  const S = 1_000_000_000n;

  it("is none between ticks a second apart, give or take the timer's jitter", () => {
    assert.equal(skippedTicks(10n * S, 11n * S), 0);
    assert.equal(skippedTicks(10n * S, 11n * S + S / 3n), 0);
    assert.equal(skippedTicks(10n * S, 11n * S - S / 3n), 0);
  });

  it("is one less than the seconds between two ticks that ran", () => {
    assert.equal(skippedTicks(10n * S, 12n * S), 1);
    assert.equal(skippedTicks(56_524_895_469_786n, 56_536_454_413_982n), 11);
  });

  it("is none for a tick that is not later than the one before", () => {
    assert.equal(skippedTicks(12n * S, 12n * S), 0);
    assert.equal(skippedTicks(12n * S, 11n * S), 0);
  });
});
