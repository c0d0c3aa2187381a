// Damaged binaries never make the inspection throw: random bytes changed in
// the ELF headers, the pclntab or the build info of a small Go-shaped file
// each end in a report, inspectable or turned down with a reason. Seeded, so a
// failure replays.
import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, describe, it } from "node:test";
import { HTTP2_FUNCTIONS, HTTP2_SYMBOLS } from "../../../../src/sources/goBinary/http2Families.ts";
import { inspectGoBinary } from "../../../../src/sources/goBinary/inspectGoBinary.ts";
import { syntheticGoElf } from "./syntheticGoElf.ts";

/** mulberry32: small, seedable, good enough to pick bytes. */
function random(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const pristine = syntheticGoElf({
  magic: "go1.16",
  goVersion: "go1.17.13",
  modules: ["dep\tgolang.org/x/net\tv0.1.0\th1:abc="],
  functions: HTTP2_FUNCTIONS.map((fn, i) => ({ name: HTTP2_SYMBOLS["x/net"][fn], at: 0x100 + i * 0x80 })),
});

describe("inspectGoBinary on damaged binaries", () => {
  const dir = mkdtempSync(path.join(os.tmpdir(), "lostwrite-corrupt-"));
  after(() => rmSync(dir, { recursive: true, force: true }));

  it("answers with a report for every one of 600 damaged copies", async () => {
    const next = random(0x60b1);
    // The ELF and program headers, the pclntab (0x2000 on), the build info (the last page).
    const regions: [number, number][] = [
      [0, 232],
      [0x2000, 0x2000 + 0x400],
      [pristine.length - 0x200, pristine.length],
    ];
    const file = path.join(dir, "damaged");
    let rejected = 0;
    for (let round = 0; round < 600; round++) {
      const copy = Buffer.from(pristine);
      const [start, end] = regions[round % regions.length]!;
      for (let flips = 1 + Math.floor(next() * 4); flips > 0; flips--) {
        copy[Math.max(0, Math.min(copy.length - 1, start + Math.floor(next() * (end - start))))] = Math.floor(next() * 256);
      }
      writeFileSync(file, copy);
      const report = await inspectGoBinary(file);
      if (!report.ok) {
        rejected++;
        assert.ok(report.reason.length > 0, `round ${round}`);
        assert.doesNotMatch(report.reason, /^unexpected error/, `round ${round}: ${report.reason}`);
      }
    }
    assert.ok(rejected > 100, `only ${rejected} of 600 damaged copies were turned down`);
  });
});
