import assert from "node:assert/strict";
import { test } from "node:test";
import { MonotonicClock } from "../../../src/correlate/monotonicClock.ts";

void test("converts the real monotonic clock to wall time within a millisecond, and back", () => {
  const clock = new MonotonicClock();
  const mono = process.hrtime.bigint();
  const wallMs = Date.now();
  const converted = clock.toWallNs(mono);
  const diffMs = Number(converted / 1_000_000n) - wallMs;
  assert.ok(Math.abs(diffMs) <= 2, `converted time is ${diffMs} ms off`);
  assert.equal(clock.toMonoNs(converted), mono);
  assert.ok(clock.lastSample.rttNs < 5_000_000n, `rtt ${clock.lastSample.rttNs} ns`);
});

void test("samples at the wall clock's tick and keeps the smallest bracket", () => {
  // A fake wall clock ticking every 1 ms of a fake monotonic clock that
  // advances 100 µs per read, except the reads of one sample that are slow.
  let mono = 7_000_000_000n;
  let reads = 0;
  const offsetNs = 1_800_000_000_000_000_000n;
  const clock = new MonotonicClock({
    monoNs: () => {
      reads++;
      mono += reads > 40 && reads < 60 ? 900_000n : 100_000n;
      return mono;
    },
    wallMs: () => Number((mono + offsetNs) / 1_000_000n),
    samples: 5,
  });
  const { rttNs } = clock.lastSample;
  assert.equal(rttNs, 100_000n);
  const errorNs = clock.offsetNs - offsetNs;
  assert.ok(errorNs >= -100_000n && errorNs <= 100_000n, `offset off by ${errorNs} ns`);
});

void test("refresh follows a wall clock that was stepped", () => {
  let stepMs = 0;
  const clock = new MonotonicClock({ wallMs: () => Date.now() + stepMs, samples: 2 });
  const before = clock.offsetNs;
  stepMs = 5_000;
  clock.refresh();
  const movedMs = Number(clock.offsetNs - before) / 1e6;
  assert.ok(Math.abs(movedMs - 5_000) < 2, `offset moved ${movedMs} ms`);
});

void test("a fixed clock (replay) converts with exactly the recorded offset", () => {
  const clock = MonotonicClock.fixed(123n);
  assert.equal(clock.toWallNs(1_000n), 1_123n);
  assert.equal(clock.toMonoNs(1_123n), 1_000n);
});
