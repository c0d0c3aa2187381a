// Where the Go probes read what they read: the byte offsets of the struct
// fields behind each probed function's arguments, as versioned data. Each row
// of HTTP2_LAYOUTS holds for one HTTP/2 family over a range of Go releases
// (and, for golang.org/x/net, of x/net versions), and every range ends at
// releases whose binaries were built and checked: the e2e matrix test
// (goLayoutMatrix) reads these offsets from each cell's DWARF and fails when
// one differs. A binary outside every row is never guessed at: its family is
// left to the socket path, and the reason names its Go and x/net versions.
//
// Between two checked releases a row assumes the fields stayed where they
// were; the matrix includes the releases where the sources changed a struct
// the probes read a field of (docs/go-requests.md).
import type { ModuleVersion } from "./buildInfo.ts";
import type { Http2FamilyName } from "./http2Families.ts";

/** Byte offsets, on amd64, of the fields the probe program reads. */
export interface Http2Layout {
  /** In the request encodeAndWriteHeaders takes (*http.Request, or Go 1.27's *ClientRequest): Method (a string) and URL (*url.URL). */
  requestMethod: number;
  requestUrl: number;
  /** url.URL.Path, a string. */
  urlPath: number;
  /** ClientConn.tconn, a net.Conn (an interface: its data word is 8 further). */
  connTconn: number;
  /** tls.Conn.conn, a net.Conn. */
  tlsConnConn: number;
  /** net.TCPConn's *netFD (its conn's fd), then netFD.pfd.Sysfd. */
  tcpConnFd: number;
  netFdSysfd: number;
  /** clientConnReadLoop.cc and clientStream.cc, each a *ClientConn. */
  readLoopConn: number;
  streamConn: number;
  /** clientStream.ID, the stream's id (a uint32), assigned before its headers are written. */
  streamId: number;
  /** MetaHeadersFrame: its *HeadersFrame and Fields (a slice of hpack.HeaderField). */
  metaHeadersFrame: number;
  metaFields: number;
  /** FrameHeader.StreamID, at the start of every frame type. */
  frameStreamId: number;
  /** hpack.HeaderField: Name and Value, strings. */
  fieldName: number;
  fieldValue: number;
  /** RSTStreamFrame.ErrCode; GoAwayFrame.LastStreamID and ErrCode. */
  rstErrCode: number;
  goAwayLastStreamId: number;
  goAwayErrCode: number;
}

/** What every family's frames, connections and sockets share, Go 1.19 to 1.27. */
const COMMON = {
  urlPath: 56,
  connTconn: 8,
  tlsConnConn: 0,
  tcpConnFd: 0,
  netFdSysfd: 16,
  readLoopConn: 0,
  streamConn: 0,
  streamId: 40,
  metaHeadersFrame: 0,
  metaFields: 8,
  frameStreamId: 8,
  fieldName: 0,
  fieldValue: 16,
  rstErrCode: 12,
  goAwayLastStreamId: 12,
  goAwayErrCode: 16,
} as const;

/** writeRequest's request is an *http.Request: Method first, then URL. */
const HTTP_REQUEST: Http2Layout = { ...COMMON, requestMethod: 0, requestUrl: 16 };

/** Go 1.27's *ClientRequest: a Context (an interface) first, then Method and URL. */
const CLIENT_REQUEST: Http2Layout = { ...COMMON, requestMethod: 16, requestUrl: 32 };

/** An inclusive range of Go 1.x minors, and of golang.org/x/net versions for the x/net family. */
interface VerifiedLayout {
  family: Http2FamilyName;
  goMinors: { from: number; to: number };
  xNet: { from: string; to: string } | null;
  layout: Http2Layout;
}

export const HTTP2_LAYOUTS: readonly VerifiedLayout[] = [
  { family: "std", goMinors: { from: 19, to: 26 }, xNet: null, layout: HTTP_REQUEST },
  { family: "internal", goMinors: { from: 27, to: 27 }, xNet: null, layout: CLIENT_REQUEST },
  { family: "x/net", goMinors: { from: 19, to: 27 }, xNet: { from: "v0.7.0", to: "v0.63.0" }, layout: HTTP_REQUEST },
];

/** "v0.63.0", "v0.64.1-0.20261101-abcdef" (a pseudo-version after v0.64.0) → [0, 63, 0] and whether it is a pre-release of it. */
function parseModuleVersion(version: string): { parts: [number, number, number]; pre: boolean } | null {
  const match = /^v(\d+)\.(\d+)\.(\d+)(-.+)?(?:\+incompatible)?$/.exec(version);
  if (match === null) return null;
  return { parts: [Number(match[1]), Number(match[2]), Number(match[3])], pre: match[4] !== undefined };
}

/** a < b: -1, a == b: 0, a > b: 1, by semver precedence (a pre-release comes before its release). */
export function compareModuleVersions(a: string, b: string): number | null {
  const pa = parseModuleVersion(a);
  const pb = parseModuleVersion(b);
  if (pa === null || pb === null) return null;
  for (let i = 0; i < 3; i++) if (pa.parts[i] !== pb.parts[i]) return pa.parts[i]! < pb.parts[i]! ? -1 : 1;
  if (pa.pre !== pb.pre) return pa.pre ? -1 : 1;
  return 0;
}

/** The x/net whose code was compiled: its replacement's version when go.mod replaced it with another module version. */
function compiledXNet(xNet: ModuleVersion): string {
  const replaced = xNet.replacement?.version;
  return replaced !== undefined && replaced !== "" ? replaced : xNet.version;
}

/**
 * The verified layout of `family` in a binary built with Go 1.`goMinor` and
 * `xNet` (null: no golang.org/x/net in its build info), or why there is none.
 */
export function layoutFor(family: Http2FamilyName, goMinor: number, xNet: ModuleVersion | null): Http2Layout | string {
  const rows = HTTP2_LAYOUTS.filter((row) => row.family === family);
  const version = xNet === null ? null : compiledXNet(xNet);
  for (const row of rows) {
    if (goMinor < row.goMinors.from || goMinor > row.goMinors.to) continue;
    if (row.xNet === null) return row.layout;
    if (version === null) continue;
    const from = compareModuleVersions(version, row.xNet.from);
    const to = compareModuleVersions(version, row.xNet.to);
    if (from !== null && to !== null && from >= 0 && to <= 0) return row.layout;
  }
  const built = `Go 1.${goMinor}${version === null ? "" : ` and golang.org/x/net ${version}`}`;
  const verified = rows.map((row) => `Go 1.${row.goMinors.from}–1.${row.goMinors.to}${row.xNet ? ` with x/net ${row.xNet.from}–${row.xNet.to}` : ""}`).join(", ");
  return `its ${family} HTTP/2 client, built with ${built}, is of no verified layout (verified: ${verified})`;
}
