import assert from "node:assert/strict";
import { describe, it, mock } from "node:test";
import { startAdaptiveTicker } from "../../src/adaptiveTicker.ts";

describe("adaptive ticker", { timeout: 10_000 }, () => {
  it("runs every busyMs while busy, every idleMs when idle, and within busyMs of a wake", () => {
    mock.timers.enable({ apis: ["setTimeout", "Date"] });
    try {
      let work = 2;
      let runs = 0;
      const ticker = startAdaptiveTicker(
        () => {
          runs++;
          if (work > 0) work--;
        },
        () => work > 0,
        25,
        1000,
        () => Date.now(),
      );
      mock.timers.tick(25);
      mock.timers.tick(25);
      assert.equal(runs, 2, "two busy runs, 25 ms apart");
      mock.timers.tick(975);
      assert.equal(runs, 2, "idle: nothing before a second has passed");
      mock.timers.tick(25);
      assert.equal(runs, 3, "idle: one run a second");
      work = 1;
      mock.timers.tick(100);
      ticker.wake();
      mock.timers.tick(24);
      assert.equal(runs, 3);
      mock.timers.tick(1);
      assert.equal(runs, 4, "a wake brings the next run within 25 ms");
      mock.timers.tick(1000);
      assert.equal(runs, 5, "idle again after the work is done");
      ticker.stop();
      ticker.wake();
      mock.timers.tick(5000);
      assert.equal(runs, 5, "stopped: no run, a wake does not restart it");
    } finally {
      mock.timers.reset();
    }
  });

  it("keeps ticking when a run throws", () => {
    mock.timers.enable({ apis: ["setTimeout", "Date"] });
    try {
      let runs = 0;
      const ticker = startAdaptiveTicker(
        () => {
          runs++;
          throw new Error("boom");
        },
        () => true,
        25,
        1000,
        () => Date.now(),
      );
      assert.throws(() => mock.timers.tick(25), /boom/);
      assert.throws(() => mock.timers.tick(25), /boom/);
      assert.equal(runs, 2);
      ticker.stop();
    } finally {
      mock.timers.reset();
    }
  });
});
