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
import { HTTP2_FAMILY_NAMES } from "../../src/sources/goBinary/http2Families.ts";
import { layoutFor, type Http2Layout } from "../../src/sources/goBinary/http2Layouts.ts";
import { inspectGoBinary } from "../../src/sources/goBinary/inspectGoBinary.ts";
import { buildCell } from "../../../testbed/go-matrix/buildCell.ts";
import { MATRIX_CELLS, type MatrixCell } from "../../../testbed/go-matrix/cells.ts";
import { cellSkip, cellToolchainMissing } from "../../../testbed/go-matrix/cellToolchain.ts";
import { goLayout, goLayoutBinary } from "../../../testbed/go-matrix/goLayout.ts";
import { goUnavailable } from "../../../testbed/goBuild.ts";
import { differencesFromProbe, type ProbeLayouts } from "./support/layoutComparison.ts";
import { layoutMatrixTable, type CellResult } from "./support/layoutTable.ts";

/**
 * What the probe program reads in a cell's binary, by go-layout's names: the
 * agent's verified layout (http2Layouts.ts) for the cell's Go release and
 * x/net version, for every family that table has a row for. A family it has
 * none for shows as unknown to the probe.
 */
function probeLayoutsFor(cell: MatrixCell): ProbeLayouts {
  const goMinor = Number(/^go1\.(\d+)/.exec(cell.toolchain.version)![1]);
  const xNet = { path: "golang.org/x/net", version: cell.xNet, replacement: null };
  const layouts: ProbeLayouts = {};
  for (const family of HTTP2_FAMILY_NAMES) {
    const layout = layoutFor(family, goMinor, xNet);
    if (typeof layout !== "string") layouts[family] = probeReads(layout);
  }
  return layouts;
}

/** An Http2Layout as the numbers the probe adds to the pointers it holds (interfaces: their data word, 8 further). */
function probeReads(l: Http2Layout): Record<string, number> {
  return {
    "request.Method": l.requestMethod,
    "request.URL": l.requestUrl,
    "url.URL.Path": l.urlPath,
    "ClientConn.tconn.data": l.connTconn + 8,
    "tls.Conn.conn.data": l.tlsConnConn + 8,
    "net.TCPConn.fd": l.tcpConnFd,
    "net.netFD.pfd.Sysfd": l.netFdSysfd,
    "clientConnReadLoop.cc": l.readLoopConn,
    "clientStream.ID": l.streamId,
    "MetaHeadersFrame.HeadersFrame": l.metaHeadersFrame,
    "MetaHeadersFrame.Fields": l.metaFields,
    "MetaHeadersFrame.Fields.len": l.metaFields + 8,
    "HeadersFrame.StreamID": l.frameStreamId,
    "HeaderField.Name": l.fieldName,
    "HeaderField.Value": l.fieldValue,
    "RSTStreamFrame.StreamID": l.frameStreamId,
    "RSTStreamFrame.ErrCode": l.rstErrCode,
    "GoAwayFrame.LastStreamID": l.goAwayLastStreamId,
    "GoAwayFrame.ErrCode": l.goAwayErrCode,
    "clientStream.cc": l.streamConn,
  };
}

const goMissing = goUnavailable();
/** Without Go: skip, except under CI=true, where `before` fails on it. */
const skip = goMissing !== null && process.env.CI !== "true" ? goMissing : false;

/** What the agent follows in a binary: each family and where its layout came from, or why none. */
async function agentSees(binary: string): Promise<string> {
  const report = await inspectGoBinary(binary);
  if (!report.ok) return `none: ${report.reason}`;
  return report.families.map((f) => `${f.name} (${f.layoutFrom})`).join(", ");
}

// The cold matrix is about 7 minutes on 2 cores; runTests.ts allows a file 10.
describe("HTTP/2 offsets the Go probes read, across Go × x/net builds", { skip, timeout: 590_000 }, () => {
  const results: CellResult[] = [];

  before(async () => {
    if (goMissing !== null) throw new Error(`e2e test cannot run: ${goMissing}`);
    await goLayoutBinary();
  });

  after(() => {
    if (results.length > 0) console.log(`\n${layoutMatrixTable(results)}\n`);
  });

  for (const cell of MATRIX_CELLS) {
    it(`${cell.id}: every HTTP/2 family linked is read where the probe reads`, { skip: cellSkip(cell), timeout: 300_000 }, async () => {
      const missing = cellToolchainMissing(cell);
      if (missing !== null) throw new Error(`e2e test cannot run: ${missing}`);
      const build = await buildCell(cell);
      const layout = await goLayout(build.symbols);
      const probe = probeLayoutsFor(cell);
      const differences = differencesFromProbe(layout, probe);
      const [stripped, symbols] = [await agentSees(build.stripped), await agentSees(build.symbols)];
      results.push({ build, layout, agentSees: `${stripped}; with symbols: ${symbols}`, differences, probe });

      assert.ok(layout.dwarf, `${build.symbols} has DWARF`);
      assert.ok(layout.goVersion?.startsWith(cell.toolchain.version), `built with ${cell.toolchain.version}, the binary says ${layout.goVersion}`);
      // GOPATH mode records no modules: Debian's x/net is known by its package.
      if (cell.toolchain.kind !== "debian") assert.equal(layout.xNet, cell.xNet);
      assert.ok(Object.keys(layout.families).length > 0, "an HTTP/2 client is linked");
      assert.deepEqual(differences, [], `${cell.id}: the probe's reads differ from the binary's layout`);
      // The agent follows every family linked, in the stripped build by the table, with symbols by the DWARF.
      const linked = Object.keys(layout.families).sort();
      const followed = async (binary: string): Promise<string[]> => {
        const report = await inspectGoBinary(binary);
        return report.ok ? report.families.map((f) => `${f.name} ${f.layoutFrom} ${f.differsFromTable.join(" ")}`.trim()).sort() : [report.reason];
      };
      // Debian's GOPATH build records no x/net version: stripped, its x/net client has nothing to tell its layout by.
      const strippedExpected = cell.toolchain.kind === "debian" ? linked.filter((f) => f !== "x/net") : linked;
      assert.deepEqual(await followed(build.stripped), strippedExpected.map((f) => `${f} table`), `${cell.id}: stripped`);
      assert.deepEqual(await followed(build.symbols), linked.map((f) => `${f} dwarf`), `${cell.id}: with symbols`);
    });
  }
});
