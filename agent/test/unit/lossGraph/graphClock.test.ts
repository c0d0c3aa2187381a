// The loss graph's one clock: a tick at every period passed, at the tick's
// time, then the work due at the time asked for; replay and the live timer
// both move it this way.
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { GraphClock, TICK_MS } from "../../../src/lossGraph/graphClock.ts";

const TICK_NS = BigInt(TICK_MS) * 1_000_000n;

describe("GraphClock", () => {
  it("ticks at every period passed, at that time, then runs `at` at the time asked for", () => {
    const clock = new GraphClock(1_000n);
    const seen: string[] = [];
    const advance = (ns: bigint): void => clock.advance(ns, () => seen.push(`tick ${clock.nowNs}`), () => seen.push(`at ${clock.nowNs}`));
    advance(1_000n + TICK_NS - 1n);
    advance(1_000n + 3n * TICK_NS);
    assert.deepEqual(seen, [
      `at ${1_000n + TICK_NS - 1n}`,
      `tick ${1_000n + TICK_NS}`,
      `tick ${1_000n + 2n * TICK_NS}`,
      `tick ${1_000n + 3n * TICK_NS}`,
      `at ${1_000n + 3n * TICK_NS}`,
    ]);
  });

  it("tells wall time at its own time when given how (replay), the system's otherwise", () => {
    const recorded = new GraphClock(0n, (nowNs) => Number(nowNs / 1_000_000n) + 5);
    recorded.advance(2n * TICK_NS, () => {}, () => {});
    assert.equal(recorded.wallMs(), 2 * TICK_MS + 5);
    const live = new GraphClock(0n);
    const before = Date.now();
    assert.ok(live.wallMs() >= before && live.wallMs() <= Date.now());
  });
});
