import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { BoundedMap, BoundedSet } from "../../src/boundedMap.ts";

void describe("BoundedMap", () => {
  void it("past capacity forgets the oldest entry, counts it and hands it to onEvict", () => {
    const evicted: [string, number][] = [];
    const map = new BoundedMap<string, number>(2, (key, value) => evicted.push([key, value]));
    map.set("a", 1).set("b", 2);
    assert.equal(map.evictions, 0);
    map.set("c", 3);
    assert.deepEqual([...map], [["b", 2], ["c", 3]]);
    assert.deepEqual(evicted, [["a", 1]]);
    assert.equal(map.evictions, 1);
    assert.equal(map.size, 2);
  });

  void it("setting a key already there moves it to the newest and forgets nothing", () => {
    const map = new BoundedMap<string, number>(2);
    map.set("a", 1).set("b", 2).set("a", 10);
    assert.equal(map.evictions, 0);
    assert.deepEqual([...map.keys()], ["b", "a"]);
    map.set("c", 3);
    assert.deepEqual([...map.entries()], [["a", 10], ["c", 3]]);
  });

  void it("a deleted entry frees its room", () => {
    const map = new BoundedMap<number, string>(2);
    map.set(1, "x").set(2, "y");
    assert.ok(map.delete(1));
    map.set(3, "z");
    assert.equal(map.evictions, 0);
    assert.deepEqual([...map.values()], ["y", "z"]);
    map.clear();
    assert.equal(map.size, 0);
  });

  void it("refuses a capacity that is not an integer >= 0; with 0 every entry is forgotten as it is set", () => {
    assert.throws(() => new BoundedMap(-1), RangeError);
    assert.throws(() => new BoundedMap(1.5), RangeError);
    const map = new BoundedMap<string, number>(0);
    map.set("a", 1);
    assert.equal(map.size, 0);
    assert.equal(map.evictions, 1);
  });
});

void describe("BoundedSet", () => {
  void it("forgets the least recently added key past capacity, counted", () => {
    const evicted: number[] = [];
    const set = new BoundedSet<number>(2, (key) => evicted.push(key));
    set.add(1).add(2).add(1).add(3);
    assert.deepEqual([...set.values()], [1, 3]);
    assert.deepEqual(evicted, [2]);
    assert.equal(set.evictions, 1);
    assert.ok(set.has(1) && !set.has(2));
  });
});
