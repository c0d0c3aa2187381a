// The uprobe programs render byte for byte as they did: the Go HTTP/2 and
// TLS programs for a fixed input against agent/test/fixtures/programs/,
// written by the renderers as they stood before their text was reorganised
// (one renderer for the part every uprobe program shares, the TLS probes in
// a .bt template). A change of the programs themselves shows here as a diff
// to review; such a change updates the fixture in the same commit.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { describe, it } from "node:test";
import { HTTP2_LAYOUTS } from "../../../../src/sources/goBinary/http2Layouts.ts";
import { HTTP2_FAMILY_NAMES, HTTP2_FUNCTIONS, HTTP2_SYMBOLS, type Http2Function } from "../../../../src/sources/goBinary/http2Families.ts";
import { renderGoProgram } from "../../../../src/sources/goHttp2/goProbeProgram.ts";
import { renderTlsProgram } from "../../../../src/sources/tls/tlsProbeProgram.ts";
import { KERNEL_OFFSETS } from "../../../kernelOffsets.ts";
import { repoPath } from "../../../repoPath.ts";

const fixture = (name: string): string => readFileSync(repoPath(`agent/test/fixtures/programs/${name}`), "utf8");

// Probed past the entry, as in a binary without symbols.
const location = (symbol: string, at: number) => ({ symbol, vaddr: 0x400000 + at, fileOffset: at, probeOffset: at + 4, branchVaddr: 0x400000 + at + 4 });
const families = HTTP2_FAMILY_NAMES.map((name, f) => ({
  name,
  layout: HTTP2_LAYOUTS.find((row) => row.family === name)!.layout,
  functions: Object.fromEntries(HTTP2_FUNCTIONS.map((fn, i) => [fn, location(HTTP2_SYMBOLS[name][fn], 0x1000 * (f + 1) + 0x10 * i)])) as Record<Http2Function, ReturnType<typeof location>>,
}));

/** The first line where two texts differ, to read in a failure. */
function firstDifference(want: string, got: string): string {
  const a = want.split("\n");
  const b = got.split("\n");
  const i = a.findIndex((line, n) => line !== b[n]);
  const at = i === -1 ? a.length : i;
  return `line ${at + 1}:\n  expected ${JSON.stringify(a[at])}\n  got      ${JSON.stringify(b[at])}`;
}

const RENDERED = {
  "go-http2.bt": () => renderGoProgram({ binary: "/proc/9/fd/12", families, programId: 3, pids: [42, 7], execWatch: true, kernelOffsets: KERNEL_OFFSETS }),
  "tls.bt": () => renderTlsProgram({ library: "/host/proc/42/root/usr/lib/x86_64-linux-gnu/libssl.so.3", programId: 4, pids: [42, 7, 42], execWatch: false }),
  "tls-exec-watch.bt": () => renderTlsProgram({ library: "/proc/1/fd/3", programId: 0, pids: [], execWatch: true }),
};

void describe("the rendered uprobe programs", () => {
  for (const [name, render] of Object.entries(RENDERED)) {
    void it(`${name}: byte for byte as before`, () => {
      const want = fixture(name);
      const got = render();
      if (got !== want) assert.fail(`agent/test/fixtures/programs/${name} differs at ${firstDifference(want, got)}`);
    });
  }
});
