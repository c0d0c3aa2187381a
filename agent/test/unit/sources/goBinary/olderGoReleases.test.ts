// Go releases the local toolchain cannot build, from synthetic ELF files: Go
// 1.17 (register ABI, but the 1.16 pclntab and the pointer-format build info)
// is read, and left to the socket path since no layout of its HTTP/2 client
// is verified; Go 1.16 and older are turned down by version, and so is a
// 1.16-layout table whose version cannot be read. The same files check the
// decisions that need odd tables: a name that is only the tail of another
// function's name, a family with a function missing, an entry that is not code.
import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, describe, it } from "node:test";
import { HTTP2_FUNCTIONS, HTTP2_SYMBOLS } from "../../../../src/sources/goBinary/http2Families.ts";
import { inspectGoBinary, type GoBinaryReport } from "../../../../src/sources/goBinary/inspectGoBinary.ts";
import { syntheticFileOffset, syntheticGoElf, syntheticVaddr, type SyntheticFunction, type SyntheticGoSpec } from "./syntheticGoElf.ts";

const XNET = HTTP2_SYMBOLS["x/net"];
/** The x/net family at 0x100, 0x180, …, after main.main at 0x40. */
const XNET_FUNCTIONS: SyntheticFunction[] = HTTP2_FUNCTIONS.map((fn, i) => ({ name: XNET[fn], at: 0x100 + i * 0x80 }));
const MAIN: SyntheticFunction = { name: "main.main", at: 0x40 };
// A fork vendored under another path: its name ends in a wanted name and comes
// first in the name table; the wanted function must still be the one found.
const DECOY: SyntheticFunction = { name: `example.com/fork/${XNET.encodeAndWriteHeaders}`, at: 0x20 };
const MODULES = ["path\texample.com/operator", "mod\texample.com/operator\t(devel)\t", "dep\tgolang.org/x/net\tv0.0.0-20210805182204-aaa1db679c0d\th1:abc="];
/** A release and x/net of a verified layout, claimed by files whose point is how their table is read. */
const VERIFIED_MODULES = ["path\texample.com/operator", "mod\texample.com/operator\t(devel)\t", "dep\tgolang.org/x/net\tv0.7.0\th1:abc="];

describe("inspectGoBinary on Go releases before 1.18", () => {
  const dir = mkdtempSync(path.join(os.tmpdir(), "lostwrite-oldgo-"));
  after(() => rmSync(dir, { recursive: true, force: true }));
  let files = 0;
  const inspect = (spec: SyntheticGoSpec): Promise<GoBinaryReport> => {
    const file = path.join(dir, `binary-${files++}`);
    writeFileSync(file, syntheticGoElf(spec));
    return inspectGoBinary(file);
  };
  const reason = (report: GoBinaryReport): string => (report.ok ? assert.fail("expected a rejection") : report.reason);

  it("reads Go 1.17's pointer-format build info, and leaves its client to the socket path: no layout verified for it, by version", async () => {
    const report = await inspect({ magic: "go1.16", goVersion: "go1.17.13", modules: MODULES, functions: [DECOY, MAIN, ...XNET_FUNCTIONS] });
    assert.equal(
      reason(report),
      "its x/net HTTP/2 client, built with Go 1.17 and golang.org/x/net v0.0.0-20210805182204-aaa1db679c0d, is of no verified layout (verified: Go 1.19–1.27 with x/net v0.7.0–v0.63.0)",
    );
    assert.equal(report.ok || report.unverifiedLayout, true);
  });

  it("reads the 1.16 pclntab with absolute entries, found by scanning", async () => {
    const report = await inspect({ magic: "go1.16", goVersion: "go1.19.13", modules: VERIFIED_MODULES, functions: [DECOY, MAIN, ...XNET_FUNCTIONS] });
    if (!report.ok) assert.fail(report.reason);
    assert.equal(report.goVersion, "go1.19.13");
    assert.equal(report.pclntabLayout, "go1.16");
    assert.equal(report.pclntabFoundBy, "scan");
    assert.deepEqual(report.xNet, { path: "golang.org/x/net", version: "v0.7.0", replacement: null });
    assert.deepEqual(report.families.map((f) => f.name), ["x/net"]);
    for (const [i, fn] of HTTP2_FUNCTIONS.entries()) {
      const expected = XNET_FUNCTIONS[i]!;
      assert.deepEqual(report.families[0]!.functions[fn], {
        symbol: XNET[fn],
        vaddr: syntheticVaddr(expected),
        fileOffset: syntheticFileOffset(expected),
        // No symbols, but no JLS after the synthetic stack check either: probed at the entry.
        probeOffset: syntheticFileOffset(expected),
        branchVaddr: null,
      });
    }
  });

  it("turns down Go 1.16 by its version: arguments are on the stack", async () => {
    const report = await inspect({ magic: "go1.16", goVersion: "go1.16.15", functions: [MAIN, ...XNET_FUNCTIONS] });
    assert.match(reason(report), /^built with go1\.16\.15: too old for the register ABI/);
  });

  it("turns down a 1.16-layout table without build info: 1.16 and 1.17 cannot be told apart", async () => {
    const report = await inspect({ magic: "go1.16", goVersion: null, functions: [MAIN, ...XNET_FUNCTIONS] });
    assert.match(reason(report), /cannot tell whether the register ABI is used/);
  });

  it("names a pre-1.16 table as too old rather than as not Go", async () => {
    const report = await inspect({ magic: "go1.2", goVersion: null, functions: [MAIN, ...XNET_FUNCTIONS] });
    assert.match(reason(report), /^Go 1\.2–1\.15 pclntab: too old/);
  });

  it("reports a family with a function missing as an unknown layout, naming what is missing", async () => {
    const functions = XNET_FUNCTIONS.filter((fn) => fn.name !== XNET.writeStreamReset);
    const report = await inspect({ magic: "go1.16", goVersion: "go1.17.1", functions: [MAIN, ...functions] });
    assert.equal(reason(report), "HTTP/2 client of an unknown layout: x/net lacks writeStreamReset");
  });

  it("refuses an entry whose bytes are not a Go function's start", async () => {
    const functions = XNET_FUNCTIONS.map((fn) => (fn.name === XNET.processGoAway ? { ...fn, noStackCheck: true } : fn));
    const report = await inspect({ magic: "go1.16", goVersion: "go1.19.1", modules: VERIFIED_MODULES, functions: [MAIN, ...functions] });
    assert.match(reason(report), /processGoAway at 0x[0-9a-f]+ does not begin with Go's amd64 stack check/);
  });
});
