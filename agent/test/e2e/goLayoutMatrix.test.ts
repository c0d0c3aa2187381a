// The offsets the Go HTTP/2 probes read, against the ground truth of real
// binaries: testbed/go-operator built for every cell of the Go × x/net matrix
// (testbed/go-matrix: Debian's Go 1.19 with its x/net 0.7.0, Go 1.26 with
// x/net 0.30, 0.43, 0.53 and 0.63, Go 1.27 with x/net 0.63, plain and with
// -tags http2legacy), each read by testbed/go-layout from its DWARF. A cell
// fails when any family its binary links is read at an offset, or through an
// argument, other than the one the probe program uses today, or is a family
// the probe program does not know: the probes would read garbage there.
//
// Builds are cached under $TMPDIR/lostwrite-go-matrix (testbed/README.md has
// the cold and cached times); without Go the test skips, except under CI=true,
// where it fails as every e2e test does.
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { inspectGoBinary } from "../../src/sources/goBinary/inspectGoBinary.ts";
import { buildCell } from "../../../testbed/go-matrix/buildCell.ts";
import { MATRIX_CELLS, type MatrixCell } from "../../../testbed/go-matrix/cells.ts";
import { cellToolchainMissing } from "../../../testbed/go-matrix/cellToolchain.ts";
import { goLayout, goLayoutBinary } from "../../../testbed/go-matrix/goLayout.ts";
import { goUnavailable } from "../../../testbed/goBuild.ts";
import { differencesFromProbe, type ProbeLayouts } from "./support/layoutComparison.ts";
import { layoutMatrixTable, type CellResult } from "./support/layoutTable.ts";

/**
 * What agent/src/sources/goHttp2/goProbeProgram.ts reads today, copied from
 * its program text (it exports no offsets): every read, as the number the
 * probe adds to the pointer it holds. The same for both families it knows.
 * The agent's own table, HTTP2_LAYOUTS in agent/src/sources/goHttp2/http2Layouts.ts,
 * is to replace this object: import it as PROBE_LAYOUTS (if it is keyed by
 * more than the family, differencesFromProbe is where it is looked up).
 */
const TODAYS_READS = {
  // writeHeaders: the request writeRequest was given, and its URL.
  "request.Method": 0,
  "request.URL": 16,
  "url.URL.Path": 56,
  // cc.tconn's data word (a *tls.Conn), then down to the descriptor.
  "ClientConn.tconn.data": 16,
  "tls.Conn.conn.data": 8,
  "net.TCPConn.fd": 0,
  "net.netFD.pfd.Sysfd": 16,
  // processHeaders, processResetStream, processGoAway, cleanup: rl.cc.
  "clientConnReadLoop.cc": 0,
  "MetaHeadersFrame.HeadersFrame": 0,
  "MetaHeadersFrame.Fields": 8,
  "MetaHeadersFrame.Fields.len": 16,
  "HeadersFrame.StreamID": 8,
  "HeaderField.Name": 0,
  "HeaderField.Value": 16,
  "RSTStreamFrame.StreamID": 8,
  "RSTStreamFrame.ErrCode": 12,
  "GoAwayFrame.LastStreamID": 12,
  "GoAwayFrame.ErrCode": 16,
  // abortStream: cs.cc.
  "clientStream.cc": 0,
} as const;
const PROBE_LAYOUTS: ProbeLayouts = { std: TODAYS_READS, "x/net": TODAYS_READS };

const goMissing = goUnavailable();
/** Without Go: skip, except under CI=true, where `before` fails on it. */
const skip = goMissing !== null && process.env.CI !== "true" ? goMissing : false;

/** A cell whose toolchain is not installed (Debian's Go 1.19) is skipped outside CI; under CI it fails. */
function cellSkip(cell: MatrixCell): string | false {
  const missing = cellToolchainMissing(cell);
  return missing !== null && process.env.CI !== "true" ? missing : false;
}

async function agentSees(binary: string): Promise<string> {
  const report = await inspectGoBinary(binary);
  if (!report.ok) return `none: ${report.reason}`;
  return report.families.map((f) => f.name).join(", ");
}

// The cold matrix is about 7 minutes on 2 cores; runTests.ts allows a file 10.
describe("HTTP/2 offsets the Go probes read, across Go × x/net builds", { skip, timeout: 590_000 }, () => {
  const results: CellResult[] = [];

  before(async () => {
    if (goMissing !== null) throw new Error(`e2e test cannot run: ${goMissing}`);
    await goLayoutBinary();
  });

  after(() => {
    if (results.length > 0) console.log(`\n${layoutMatrixTable(results, PROBE_LAYOUTS)}\n`);
  });

  for (const cell of MATRIX_CELLS) {
    it(`${cell.id}: every HTTP/2 family linked is read where the probe reads`, { skip: cellSkip(cell), timeout: 300_000 }, async () => {
      const missing = cellToolchainMissing(cell);
      if (missing !== null) throw new Error(`e2e test cannot run: ${missing}`);
      const build = await buildCell(cell);
      const layout = await goLayout(build.symbols);
      const differences = differencesFromProbe(layout, PROBE_LAYOUTS);
      results.push({ build, layout, agentSees: await agentSees(build.stripped), differences });

      assert.ok(layout.dwarf, `${build.symbols} has DWARF`);
      assert.ok(layout.goVersion?.startsWith(cell.toolchain.version), `built with ${cell.toolchain.version}, the binary says ${layout.goVersion}`);
      // GOPATH mode records no modules: Debian's x/net is known by its package.
      if (cell.toolchain.kind !== "debian") assert.equal(layout.xNet, cell.xNet);
      assert.ok(Object.keys(layout.families).length > 0, "an HTTP/2 client is linked");
      assert.deepEqual(differences, [], `${cell.id}: the probe's reads differ from the binary's layout`);
    });
  }
});
