import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { CounterDeltas } from "../../../../src/sources/probe/counterDeltas.ts";

describe("counter deltas", { timeout: 10_000 }, () => {
  it("adds only growth, survives a new bpftrace instance, and forgets a pid", () => {
    const deltas = new CounterDeltas();
    assert.deepEqual(deltas.update("writes", [{ key: [1], value: 5n }]), [{ key: [1], delta: 5n }]);
    assert.deepEqual(deltas.update("writes", [{ key: [1], value: 8n }]), [{ key: [1], delta: 3n }]);
    assert.deepEqual(deltas.update("writes", [{ key: [1], value: 8n }]), []);
    deltas.reset();
    assert.deepEqual(deltas.update("writes", [{ key: [1], value: 2n }]), [{ key: [1], delta: 2n }]);
    deltas.forget(1);
    assert.deepEqual(deltas.update("writes", [{ key: [1], value: 1n }]), [{ key: [1], delta: 1n }]);
  });

  it("is bounded and counts what it could not track", () => {
    const deltas = new CounterDeltas(2);
    deltas.update("writes", [1, 2, 3].map((pid) => ({ key: [pid], value: 1n })));
    assert.equal(deltas.dropped, 1);
  });

  it("names a pid's entries in the maps keyed pid, syscall, errno, for the kernel to delete one by one", () => {
    const counters = new CounterDeltas();
    counters.update("failedSends", [
      { key: [10, 44, 104], value: 3n },
      { key: [10, -1, 32], value: 1n },
      { key: [11, 44, 104], value: 5n },
    ]);
    counters.update("transient", [{ key: [10, 1, 11], value: 2n }]);
    counters.update("writes", [{ key: [10], value: 9n }]);
    assert.deepEqual(
      counters.syscallKeysOf(10).sort((a, b) => a.map.localeCompare(b.map) || a.nr - b.nr),
      [
        { map: "failedSends", pid: 10, nr: -1, errno: 32 },
        { map: "failedSends", pid: 10, nr: 44, errno: 104 },
        { map: "transient", pid: 10, nr: 1, errno: 11 },
      ],
    );
    assert.deepEqual(counters.syscallKeysOf(12), []);
  });

  it("forgets every baseline of a pid, and only its: a later print of the same key counts from zero", () => {
    const counters = new CounterDeltas();
    counters.update("failedSends", [{ key: [10, 44, 104], value: 3n }, { key: [11, 44, 104], value: 5n }]);
    counters.update("writes", [{ key: [10], value: 9n }, { key: [101], value: 4n }]);
    counters.forget(10);
    assert.deepEqual(counters.syscallKeysOf(10), []);
    // The kernel deleted the entries: a pid reused later starts at zero, and all of it is new.
    assert.deepEqual(counters.update("failedSends", [{ key: [10, 44, 104], value: 2n }, { key: [11, 44, 104], value: 5n }]), [{ key: [10, 44, 104], delta: 2n }]);
    // Pid 101 is not pid 10.
    assert.deepEqual(counters.update("writes", [{ key: [101], value: 6n }]), [{ key: [101], delta: 2n }]);
  });
});
