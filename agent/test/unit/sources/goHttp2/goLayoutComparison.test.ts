// The comparison the Go × x/net matrix test (e2e/goLayoutMatrix.test.ts) fails
// on, over made-up go-layout reports: a binary read as the probe reads it
// passes; a moved field, a missing one, a changed argument, an absent
// function and a family the probe does not know each give one difference.
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import type { GoLayoutReport, LayoutFamily } from "../../../../../testbed/go-matrix/goLayout.ts";
import { differencesFromProbe, PROBED_ROLES, type ProbeLayouts } from "../../../e2e/support/layoutComparison.ts";

const PROBE: ProbeLayouts = { "x/net": { "request.URL": 16, "clientStream.cc": 0, "net.netFD.pfd.Sysfd": 16 } };
const X = "golang.org/x/net/http2.";

function xnetFamily(overrides: Partial<LayoutFamily> = {}): LayoutFamily {
  const rl = { name: "rl", type: `*${X}clientConnReadLoop` };
  return {
    functions: Object.fromEntries(PROBED_ROLES.map((role) => [role, `${X}(*T).${role}`])),
    absent: [],
    signatures: {
      encodeAndWriteHeaders: [{ name: "cs", type: `*${X}clientStream` }, { name: "req", type: "*net/http.Request" }],
      processHeaders: [rl, { name: "f", type: `*${X}MetaHeadersFrame` }],
      processResetStream: [rl, { name: "f", type: `*${X}RSTStreamFrame` }],
      processGoAway: [rl, { name: "f", type: `*${X}GoAwayFrame` }],
      cleanup: [rl],
      writeStreamReset: [{ name: "cc", type: `*${X}ClientConn` }, { name: "streamID", type: "uint32" }, { name: "code", type: `${X}ErrCode` }, { name: "err", type: "error" }],
    },
    sizes: { ClientConn: 432 },
    offsets: { "request.URL": 16, "clientStream.cc": 0 },
    missing: {},
    ...overrides,
  };
}

function report(families: GoLayoutReport["families"], socket: Record<string, number> = { "net.netFD.pfd.Sysfd": 16 }): GoLayoutReport {
  return { binary: "/bin/op", dwarf: true, families, socket: { offsets: socket, missing: {} } };
}

describe("go-layout reports against the probe's reads", { timeout: 10_000 }, () => {
  it("a binary laid out as the probe reads it has no difference; parameters past those read may change", () => {
    assert.deepEqual(differencesFromProbe(report({ "x/net": xnetFamily() }), PROBE), []);
  });

  it("a moved field, in the family or on the way to the socket, is named with both offsets", () => {
    const moved = report({ "x/net": xnetFamily({ offsets: { "request.URL": 32, "clientStream.cc": 0 } }) }, { "net.netFD.pfd.Sysfd": 24 });
    assert.deepEqual(differencesFromProbe(moved, PROBE), [
      "x/net request.URL: probe reads +16, binary has +32",
      "x/net net.netFD.pfd.Sysfd: probe reads +16, binary has +24",
    ]);
  });

  it("a field the binary lacks is missing, with go-layout's reason", () => {
    const missing = report({ "x/net": xnetFamily({ offsets: { "request.URL": 16 }, missing: { "clientStream.cc": "no field cc" } }) });
    assert.deepEqual(differencesFromProbe(missing, PROBE), ["x/net clientStream.cc: probe reads +0, binary: missing (no field cc)"]);
  });

  it("an argument of another type where the probe reads it is a difference", () => {
    const family = xnetFamily();
    family.signatures.encodeAndWriteHeaders = [{ name: "cs", type: `*${X}clientStream` }, { name: "req", type: `*${X}ClientRequest` }];
    assert.deepEqual(differencesFromProbe(report({ "x/net": family }), PROBE), [
      `x/net encodeAndWriteHeaders: argument 2 read as *net/http.Request, binary has *${X}ClientRequest`,
    ]);
  });

  it("a family without some probed function, or unknown to the probe, fails", () => {
    const incomplete = xnetFamily({ absent: ["cleanup"] });
    assert.deepEqual(differencesFromProbe(report({ "x/net": incomplete, internal: xnetFamily() }), PROBE), [
      "x/net: lacks cleanup",
      "internal: the probe program has no layout for this family",
    ]);
  });
});
