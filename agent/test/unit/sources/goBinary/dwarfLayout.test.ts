// A family's layout from a binary's DWARF: every offset the probes read, found
// through the probed functions' own parameters; anything not where the probes
// read it refuses the family, naming what differs. The type tables here are
// built by hand, shaped as Go writes them (embedded fields named after their
// type; net/http's bundled copy prefixes those names with "http2"); real
// binaries are inspectGoBinary.test.ts's.
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { layoutDifferences, layoutFromDwarf } from "../../../../src/sources/goBinary/dwarfLayout.ts";
import type { DwarfTypes } from "../../../../src/sources/goBinary/dwarfTypes.ts";
import { HTTP2_SYMBOLS } from "../../../../src/sources/goBinary/http2Families.ts";
import { HTTP2_LAYOUTS } from "../../../../src/sources/goBinary/http2Layouts.ts";

type Members = Record<string, [offset: number, type?: string]>;

/** A DWARF type table from struct definitions by name; pointers to them are "*Name", uint32 is a base type. */
function typesOf(structs: Record<string, Members>, functions: Record<string, string[]>): DwarfTypes {
  const types: DwarfTypes = { structs: new Map(), structsByName: new Map(), targets: new Map(), baseSizes: new Map(), functions: new Map() };
  const ids = new Map<string, number>();
  const idOf = (name: string): number => {
    if (!ids.has(name)) ids.set(name, ids.size + 1);
    return ids.get(name)!;
  };
  types.baseSizes.set(idOf("uint32"), 4);
  for (const [name, members] of Object.entries(structs)) {
    types.structs.set(idOf(name), { name, members: new Map(Object.entries(members).map(([m, [offset, type]]) => [m, { offset, type: type ? idOf(type) : null }])) });
    types.structsByName.set(name, idOf(name));
    types.targets.set(idOf(`*${name}`), idOf(name));
  }
  for (const [fn, params] of Object.entries(functions)) types.functions.set(fn, params.map((type, i) => ({ name: `p${i}`, type: idOf(type) })));
  return types;
}

const P = "golang.org/x/net/http2.";
const X = HTTP2_SYMBOLS["x/net"];
const SOCKETS = {
  "crypto/tls.Conn": { conn: [0] },
  "net.TCPConn": { conn: [0, "net.conn"] },
  "net.conn": { fd: [0] },
  "net.netFD": { pfd: [0, "internal/poll.FD"] },
  "internal/poll.FD": { Sysfd: [16] },
} satisfies Record<string, Members>;

function xNetTypes(change: (structs: Record<string, Members>) => void = () => {}): DwarfTypes {
  const structs: Record<string, Members> = {
    ...SOCKETS,
    "net/http.Request": { Method: [0], URL: [16, "*net/url.URL"] },
    "net/url.URL": { Path: [56] },
    [`${P}clientStream`]: { cc: [0, `*${P}ClientConn`], ID: [40, "uint32"] },
    [`${P}ClientConn`]: { tconn: [8] },
    [`${P}clientConnReadLoop`]: { cc: [0] },
    [`${P}MetaHeadersFrame`]: { HeadersFrame: [0, `*${P}HeadersFrame`], Fields: [8, "[]hpack.HeaderField"] },
    "[]hpack.HeaderField": { array: [0, "*hpack.HeaderField"], len: [8], cap: [16] },
    "hpack.HeaderField": { Name: [0], Value: [16] },
    [`${P}FrameHeader`]: { StreamID: [8] },
    [`${P}HeadersFrame`]: { FrameHeader: [0, `${P}FrameHeader`] },
    [`${P}RSTStreamFrame`]: { FrameHeader: [0, `${P}FrameHeader`], ErrCode: [12] },
    [`${P}GoAwayFrame`]: { FrameHeader: [0, `${P}FrameHeader`], LastStreamID: [12], ErrCode: [16] },
  };
  change(structs);
  return typesOf(structs, {
    [X.encodeAndWriteHeaders]: [`*${P}clientStream`, "*net/http.Request"],
    [X.processHeaders]: [`*${P}clientConnReadLoop`, `*${P}MetaHeadersFrame`],
    [X.processResetStream]: [`*${P}clientConnReadLoop`, `*${P}RSTStreamFrame`],
    [X.processGoAway]: [`*${P}clientConnReadLoop`, `*${P}GoAwayFrame`],
    [X.cleanup]: [`*${P}clientConnReadLoop`, "uint32"],
    [X.writeStreamReset]: [`*${P}ClientConn`, "uint32"],
  });
}

const table = HTTP2_LAYOUTS.find((row) => row.family === "x/net")!.layout;

void describe("layoutFromDwarf", { timeout: 10_000 }, () => {
  it("reads every offset through the probed functions' parameters: the verified layout, where the binary agrees", () => {
    const layout = layoutFromDwarf(xNetTypes(), "x/net");
    if (typeof layout === "string") assert.fail(layout);
    assert.deepEqual(layoutDifferences(table, layout), []);
  });

  it("takes the binary's word where a field moved, and says where it differs from the table", () => {
    const layout = layoutFromDwarf(xNetTypes((s) => (s["net/http.Request"]!.URL = [24, "*net/url.URL"])), "x/net");
    if (typeof layout === "string") assert.fail(layout);
    assert.deepEqual(layoutDifferences(table, layout), ["requestUrl: 16 in the table, 24 in the binary"]);
  });

  it("refuses a family whose DWARF lacks a field the probes read, naming it", () => {
    assert.equal(layoutFromDwarf(xNetTypes((s) => delete s[`${P}ClientConn`]!.tconn), "x/net"), `its x/net HTTP/2 client's DWARF: ${P}ClientConn has no field tconn`);
  });

  it("refuses frames whose stream ids are not where the headers frame's is: one offset serves them all", () => {
    assert.equal(
      layoutFromDwarf(xNetTypes((s) => (s[`${P}RSTStreamFrame`]!.FrameHeader = [8, `${P}FrameHeader`])), "x/net"),
      `its x/net HTTP/2 client's DWARF: ${P}RSTStreamFrame's StreamID is at 16, not at 8 as in ${P}HeadersFrame`,
    );
  });

  it("refuses a family whose probed function is not in the DWARF", () => {
    assert.match(layoutFromDwarf(xNetTypes(), "internal") as string, /^its internal HTTP\/2 client's DWARF: net\/http\/internal\/http2\.\(\*clientStream\)\.encodeAndWriteHeaders: no parameters/);
  });
});
