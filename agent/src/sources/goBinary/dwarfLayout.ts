// A family's layout as one binary's DWARF gives it: each offset the probe
// program reads, found by following the probed functions' own parameters to
// their struct types, so the request type is whatever encodeAndWriteHeaders
// takes (*http.Request, Go 1.27's *ClientRequest) and a changed signature shows as
// a parameter that is not where the probes read it. The socket chain below
// the connection (crypto/tls, net, internal/poll) is found by type name.
import type { DwarfTypes, DwarfStruct } from "./dwarfTypes.ts";
import { HTTP2_SYMBOLS, type Http2FamilyName } from "./http2Families.ts";
import type { Http2Layout } from "./http2Layouts.ts";

/** A field the layout needs and the binary's DWARF does not have where the probes read it. */
class Missing extends Error {}

/** Follows typedefs and one pointer to the struct behind a type. */
function structBehind(types: DwarfTypes, type: number | null, what: string): DwarfStruct {
  let at = type;
  for (let hops = 0; at !== null && hops < 4; hops++) {
    const found = types.structs.get(at);
    if (found !== undefined) return found;
    at = types.targets.get(at) ?? null;
  }
  throw new Missing(`${what}: no struct type`);
}

function member(struct: DwarfStruct, name: string): { offset: number; type: number | null } {
  const found = struct.members.get(name);
  if (found === undefined) throw new Missing(`${struct.name} has no field ${name}`);
  return found;
}

/** An embedded field: named after its type, which net/http's bundled copy renamed with an "http2" prefix. */
function embedded(struct: DwarfStruct, typeName: string): { offset: number; type: number | null } {
  return struct.members.get(typeName) ?? struct.members.get(`http2${typeName}`) ?? member(struct, typeName);
}

function namedStruct(types: DwarfTypes, name: string): DwarfStruct {
  const at = types.structsByName.get(name);
  if (at === undefined) throw new Missing(`no type ${name}`);
  return types.structs.get(at)!;
}

/** The first two parameters of a probed function: the probes read them from AX and BX, so both must be pointers (or, for writeStreamReset, the 4-byte stream id). */
function firstTwo(types: DwarfTypes, symbol: string): [number | null, number | null] {
  const params = types.functions.get(symbol);
  if (params === undefined || params.length < 2) throw new Missing(`${symbol}: no parameters in the DWARF`);
  return [params[0]!.type, params[1]!.type];
}

/** The layout of `family` in the binary `types` was read from, or why it cannot be told. */
export function layoutFromDwarf(types: DwarfTypes, family: Http2FamilyName): Http2Layout | string {
  const symbols = HTTP2_SYMBOLS[family];
  try {
    const [streamType, requestType] = firstTwo(types, symbols.encodeAndWriteHeaders);
    const stream = structBehind(types, streamType, `${symbols.encodeAndWriteHeaders}'s stream`);
    const request = structBehind(types, requestType, `${symbols.encodeAndWriteHeaders}'s request`);
    const url = structBehind(types, member(request, "URL").type, `${request.name}.URL`);
    const streamId = member(stream, "ID");
    if (streamId.type === null || types.baseSizes.get(streamId.type) !== 4) throw new Missing(`${stream.name}.ID is not a 4-byte stream id`);

    const [connType, resetIdType] = firstTwo(types, symbols.writeStreamReset);
    if (resetIdType === null || types.baseSizes.get(resetIdType) !== 4) throw new Missing(`${symbols.writeStreamReset}: its second parameter is not a 4-byte stream id`);
    const conn = structBehind(types, connType, `${symbols.writeStreamReset}'s connection`);
    if (structBehind(types, member(stream, "cc").type, `${stream.name}.cc`).name !== conn.name) throw new Missing(`${stream.name}.cc is not a *${conn.name}`);

    const [readLoopType, metaType] = firstTwo(types, symbols.processHeaders);
    const readLoop = structBehind(types, readLoopType, `${symbols.processHeaders}'s read loop`);
    const meta = structBehind(types, metaType, `${symbols.processHeaders}'s frame`);
    const headersFrame = structBehind(types, embedded(meta, "HeadersFrame").type, `${meta.name}.HeadersFrame`);
    const frameHeader = embedded(headersFrame, "FrameHeader");
    const frameStreamId = frameHeader.offset + member(structBehind(types, frameHeader.type, `${headersFrame.name}.FrameHeader`), "StreamID").offset;
    const fields = structBehind(types, member(meta, "Fields").type, `${meta.name}.Fields`); // the slice: array, len, cap
    const field = structBehind(types, member(fields, "array").type, `${fields.name}'s elements`);

    const rst = structBehind(types, firstTwo(types, symbols.processResetStream)[1], `${symbols.processResetStream}'s frame`);
    const goAway = structBehind(types, firstTwo(types, symbols.processGoAway)[1], `${symbols.processGoAway}'s frame`);
    for (const frame of [rst, goAway]) {
      const header = embedded(frame, "FrameHeader");
      const id = header.offset + member(structBehind(types, header.type, `${frame.name}.FrameHeader`), "StreamID").offset;
      if (id !== frameStreamId) throw new Missing(`${frame.name}'s StreamID is at ${id}, not at ${frameStreamId} as in ${headersFrame.name}`);
    }
    if (receiverOf(types, symbols.cleanup) !== readLoop.name) throw new Missing(`${symbols.cleanup} is not a method of ${readLoop.name}`);

    const tcpConn = namedStruct(types, "net.TCPConn");
    const netConn = structBehind(types, member(tcpConn, "conn").type, "net.TCPConn.conn");
    const netFd = namedStruct(types, "net.netFD");
    const pollFd = structBehind(types, member(netFd, "pfd").type, "net.netFD.pfd");
    return {
      requestMethod: member(request, "Method").offset,
      requestUrl: member(request, "URL").offset,
      urlPath: member(url, "Path").offset,
      connTconn: member(conn, "tconn").offset,
      tlsConnConn: member(namedStruct(types, "crypto/tls.Conn"), "conn").offset,
      tcpConnFd: member(tcpConn, "conn").offset + member(netConn, "fd").offset,
      netFdSysfd: member(netFd, "pfd").offset + member(pollFd, "Sysfd").offset,
      readLoopConn: member(readLoop, "cc").offset,
      streamConn: member(stream, "cc").offset,
      streamId: streamId.offset,
      metaHeadersFrame: embedded(meta, "HeadersFrame").offset,
      metaFields: member(meta, "Fields").offset,
      frameStreamId,
      fieldName: member(field, "Name").offset,
      fieldValue: member(field, "Value").offset,
      rstErrCode: member(rst, "ErrCode").offset,
      goAwayLastStreamId: member(goAway, "LastStreamID").offset,
      goAwayErrCode: member(goAway, "ErrCode").offset,
    };
  } catch (error) {
    if (error instanceof Missing) return `its ${family} HTTP/2 client's DWARF: ${error.message}`;
    throw error;
  }
}

/** The struct a method's first parameter (its receiver) points at. */
function receiverOf(types: DwarfTypes, symbol: string): string {
  const params = types.functions.get(symbol);
  if (params === undefined || params.length === 0) throw new Missing(`${symbol}: no parameters in the DWARF`);
  return structBehind(types, params[0]!.type, `${symbol}'s receiver`).name;
}

/** The fields where a DWARF layout and the verified table differ, e.g. ["requestUrl: 16 in the table, 24 in the binary"]. */
export function layoutDifferences(table: Http2Layout, binary: Http2Layout): string[] {
  return (Object.keys(table) as (keyof Http2Layout)[]).filter((key) => table[key] !== binary[key]).map((key) => `${key}: ${table[key]} in the table, ${binary[key]} in the binary`);
}
