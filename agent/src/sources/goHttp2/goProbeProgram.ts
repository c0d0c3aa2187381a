// The bpftrace program that reads one Go binary's HTTP/2 client requests,
// reporting for the followed pids only (followedPids.ts). Its lines are the
// goHttp2 family of probeLines.ts. What it does and why, where its uprobes
// go, what it prints and costs, and what it assumes of the kernel:
// probes/go_http2.bt, the template rendered here once per binary, each
// function's section once per HTTP/2 family it links, with that family's
// offsets (goBinary/http2Layouts.ts, or the binary's DWARF): the e2e tests
// run these probes on real binaries of every family, and on kubectl.
import type { FunctionLocation, Http2Family, ProbePlacement } from "../goBinary/inspectGoBinary.ts";
import { HTTP2_FUNCTIONS, type Http2FamilyName, type Http2Function } from "../goBinary/http2Families.ts";
import { probeSymbolName } from "../goBinary/probeSymbolFile.ts";
import type { Http2Layout } from "../goBinary/http2Layouts.ts";
import { ANNOUNCE, FOLLOWED, renderUprobeProgram, type FollowedPidsOptions } from "../probe/followedPids.ts";
import { OFFSETOF } from "../probe/kernelBtf.ts";
import { templateSections } from "../probe/probeProgram.ts";

/** Longest piece of a path printed in one line; keeps a printf's stack use under bpftrace's 512 bytes. */
export const PATH_PART_BYTES = 120;

/** Path pieces printed at most: the first two and the last, so a status write is told even in a path longer than that. */
export const PATH_PARTS = 3;

/**
 * Slots per connection for requests in flight in the kernel (go_http2.bt,
 * IN FLIGHT): a power of two. A connection's end walks them all; a request
 * whose slot an older stream holds has its path printed at once.
 */
const INFLIGHT_SLOTS = 16;

/** How long after a rejection the program goes on printing a process's 2xx answers with their paths, past the correlation window: the agent's hold and lag. */
const ANSWER_WATCH_MARGIN_MS = 10_000;

/** What the Go programs add to bpftrace's environment: strings as long as a path piece. */
export const GO_PROBE_ENV = { BPFTRACE_STRLEN: String(PATH_PART_BYTES + 8) } as const;

interface GoProbeTarget extends Omit<FollowedPidsOptions, "onThreadExit"> {
  /** What bpftrace attaches to: the binary through a path that outlives its processes, e.g. /proc/<agent>/fd/12. */
  binary: string;
  families: readonly Pick<Http2Family, "name" | "functions" | "layout">[];
  /**
   * "entry" (the binary has a symbol table): each uprobe is given as the
   * function's virtual address. bpftrace 0.17 reads `uprobe:FILE:0xN` as an
   * address and looks it up in the symbol table: a file offset that happens
   * to fall inside another function's addresses (any offset past 0x401000,
   * so in every binary larger than about 4 MiB, as a controller-runtime
   * manager is) is refused as a probe inside that function. The address
   * resolves to the function itself. "named branch": each uprobe is given by
   * the name probeSymbolName gives its stack check's jump, which a debug file
   * of the binary defines (probeSymbolFile.ts). Without a symbol table (or
   * when omitted) the number is the file offset, which is what bpftrace
   * takes then.
   */
  probePlacement?: ProbePlacement;
  /**
   * The correlation window (ms, default the correlator's 10 s): how long a
   * rejected write waits for a 2xx of the same write, which the program
   * prints with its path only that long after a rejection of the process.
   */
  correlationWindowMs?: number;
  /**
   * The running kernel's field offsets, by "struct.field" (kernelBtf() in
   * probeProgram.ts): the program reads the kernel's structs at them
   * (go_http2.bt, NO CASTS).
   */
  kernelOffsets: Readonly<Record<string, number>>;
}

const TEMPLATE = "go_http2.bt";

/** The template's sections (`// @name` lines start them). */
const SECTIONS = ["socket-of-cc", "peer-of-socket", "print-path", "print-request", "exit", "unfollow", "tick", "end", ...HTTP2_FUNCTIONS] as const;

/** The 4-byte fields, which the template reads as the top half of the word that ends with them (NO CASTS): each at 4 or more. */
const FOUR_BYTE_FIELDS = ["streamId", "frameStreamId", "rstErrCode", "goAwayLastStreamId", "goAwayErrCode"] as const;

/** The byte offsets the template reads at, by placeholder: the family's layout, each field as the probe adds it to the pointer it holds. */
function layoutValues(l: Http2Layout): Record<string, number> {
  for (const field of FOUR_BYTE_FIELDS) {
    if (l[field] < 4) throw new RangeError(`Go probe layout: ${field} at byte ${l[field]}; a 4-byte field is read from the 4 bytes before it, so it must be at 4 or more`);
  }
  return {
    STREAM_CONN: l.streamConn,
    STREAM_ID: l.streamId,
    REQUEST_METHOD: l.requestMethod,
    REQUEST_METHOD_LEN: l.requestMethod + 8,
    REQUEST_URL: l.requestUrl,
    URL_PATH: l.urlPath,
    URL_PATH_LEN: l.urlPath + 8,
    // Interfaces (net.Conn): their data word, 8 after the type word.
    CONN_TCONN_DATA: l.connTconn + 8,
    TLS_CONN_CONN_DATA: l.tlsConnConn + 8,
    TCP_CONN_FD: l.tcpConnFd,
    NET_FD_SYSFD: l.netFdSysfd,
    READ_LOOP_CONN: l.readLoopConn,
    META_HEADERS_FRAME: l.metaHeadersFrame,
    META_FIELDS: l.metaFields,
    META_FIELDS_LEN: l.metaFields + 8,
    FRAME_STREAM_ID: l.frameStreamId,
    FIELD_NAME: l.fieldName,
    FIELD_NAME_LEN: l.fieldName + 8,
    FIELD_VALUE: l.fieldValue,
    FIELD_VALUE_LEN: l.fieldValue + 8,
    RST_ERR_CODE: l.rstErrCode,
    GOAWAY_LAST_STREAM_ID: l.goAwayLastStreamId,
    GOAWAY_ERR_CODE: l.goAwayErrCode,
    PATH_PART: PATH_PART_BYTES,
    TWO_PATH_PARTS: 2 * PATH_PART_BYTES,
    THREE_PATH_PARTS: PATH_PARTS * PATH_PART_BYTES,
    SLOTS: INFLIGHT_SLOTS,
    SLOT_MASK: INFLIGHT_SLOTS - 1,
  };
}

function fill(text: string, values: Record<string, string | number>): string {
  return text.replace(/__([A-Z_]+?)__/g, (placeholder, name: string) => {
    const value = values[name];
    if (value === undefined) throw new Error(`${TEMPLATE}: unknown placeholder ${placeholder}`);
    return String(value);
  });
}

const nonEmpty = (section: string[]): string[] => section.filter((line) => line.trim() !== "");

/** `text` with each `offsetof(struct S, F)` replaced by the kernel's offset of S.F. */
function fillKernelOffsets(text: string, offsets: Readonly<Record<string, number>>): string {
  return text.replace(OFFSETOF, (_, struct: string, field: string) => {
    const offset = offsets[`${struct}.${field}`];
    if (offset === undefined) throw new RangeError(`${TEMPLATE}: the kernel's offset of ${struct}.${field} is not known`);
    return String(offset);
  });
}

/** `text` with each line that is only a fragment's placeholder (`__PRINT_PATH__`) replaced by the fragment. */
function withFragments(text: string, fragments: Record<string, string>): string {
  return text.replace(/^__([A-Z_]+)__$/gm, (placeholder, name: string) => fragments[name] ?? placeholder);
}

/** What follows `uprobe:FILE:` for one function, by where the binary's probes go. */
function attachPoint(placement: ProbePlacement | undefined, family: Http2FamilyName, fn: Http2Function, location: FunctionLocation): string {
  if (placement === "named branch" && location.branchVaddr !== null) return probeSymbolName(family, fn);
  const at = placement === "entry" || placement === "named branch" ? location.vaddr : location.probeOffset;
  return `0x${at.toString(16)}`;
}

/** The program text; bpftrace runs it as `bpftrace --unsafe -f json FILE AGENT_HOST_PID`. */
export function renderGoProgram(target: GoProbeTarget): string {
  if (/["\s]/.test(target.binary)) throw new RangeError(`Go probe binary path must not hold quotes or spaces: "${target.binary}"`);
  if (target.families.length === 0) throw new RangeError(`Go probe for ${target.binary}: no HTTP/2 family to probe`);
  const t = templateSections(TEMPLATE, SECTIONS);
  const windowMs = target.correlationWindowMs ?? 10_000;
  if (!Number.isFinite(windowMs) || windowMs < 0) throw new RangeError(`Go probe correlationWindowMs: expected a duration in ms, got ${windowMs}`);
  const answerWatchNs = BigInt(Math.ceil(windowMs) + ANSWER_WATCH_MARGIN_MS) * 1_000_000n;
  const fragments: Record<string, string> = {
    SOCKET_OF_CC: nonEmpty(t["socket-of-cc"]).join("\n"),
    PEER_OF_SOCKET: nonEmpty(t["peer-of-socket"]).join("\n"),
    PRINT_PATH: nonEmpty(t["print-path"]).join("\n"),
  };
  // A request printed from its slot prints its peer and its path too.
  fragments.PRINT_REQUEST = withFragments(nonEmpty(t["print-request"]).join("\n"), fragments);
  const probes = target.families.flatMap((family) => {
    const offsets = layoutValues(family.layout);
    return HTTP2_FUNCTIONS.map((fn) => {
      const location = family.functions[fn];
      const text = withFragments(nonEmpty(t[fn]).join("\n"), fragments);
      const probe = fill(fillKernelOffsets(text, target.kernelOffsets), { ...offsets, ANSWER_WATCH_NS: answerWatchNs.toString(), BINARY: target.binary, AT: attachPoint(target.probePlacement, family.name, fn, location), FOLLOWED, ANNOUNCE });
      return `// ${location.symbol}\n${probe}`;
    });
  });
  return renderUprobeProgram({
    comment: [
      "// Generated by lostwrite for one Go binary from probes/go_http2.bt: see agent/src/sources/goHttp2/goProbeProgram.ts.",
      `// Families: ${target.families.map((f) => f.name).join(", ")}; program ${target.programId}.`,
    ],
    follow: { ...target, onThreadExit: `\n${nonEmpty(t.exit).join("\n")}`, onUnfollow: `\n${nonEmpty(t.unfollow).map((line) => `\t\t\t\t${line}`).join("\n")}` },
    probes: [...probes, nonEmpty(t.tick).join("\n")],
    end: nonEmpty(t.end).map((line) => line.replace(/^\t/, "")).join("\n\t"),
  });
}
