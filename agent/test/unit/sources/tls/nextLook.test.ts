// When a target without OpenSSL yet is looked at again: every few ms through
// the first seconds after its exec (a one-shot script maps libssl and is gone
// within tens of ms), then twice as long each time, up to a minute; a target
// found running by a scan backs off from its first look.
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { nextLook, type NextLook } from "../../../../src/sources/tls/tlsProbes.ts";

const OPTIONS = { recheckIntervalMs: 10, youngMs: 3000 };

/** The waits between the looks of a target that never maps OpenSSL, each look on time, until `untilMs`. */
function waits(atExec: boolean, untilMs: number): number[] {
  const out: number[] = [];
  let now = 0;
  let next: NextLook | undefined;
  while (now < untilMs) {
    next = nextLook(next, now, atExec, OPTIONS);
    out.push(next.dueMs - now);
    now = next.dueMs;
  }
  return out;
}

void describe("nextLook", { timeout: 10_000 }, () => {
  it("looks every 10 ms through the first 3 s after an exec, then backs off by doubling", () => {
    const atExec = waits(true, 10 * 60_000);
    const young = atExec.filter((w, i) => i < 300);
    assert.deepEqual(new Set(young), new Set([10]), "300 looks 10 ms apart while young");
    assert.deepEqual(atExec.slice(300, 306), [10, 20, 40, 80, 160, 320]);
    assert.equal(Math.max(...atExec), 60_000, "never more than a minute apart");
  });

  it("backs off from the first look for a target found running", () => {
    assert.deepEqual(waits(false, 1000).slice(0, 7), [10, 20, 40, 80, 160, 320, 640]);
  });

  it("a late look while young does not end the frequent ones", () => {
    const first = nextLook(undefined, 0, true, OPTIONS);
    const late = nextLook(first, 2500, true, OPTIONS);
    assert.equal(late.dueMs, 2510);
    assert.equal(nextLook(late, 3000, true, OPTIONS).dueMs, 3010, "no longer young: the backing off starts at the shortest wait");
  });
});
