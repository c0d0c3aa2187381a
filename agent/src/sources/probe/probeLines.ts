// The printf lines of probes/*.bt, as data: one entry per line kind, its
// fields in the order the probe prints them after the kind word, each with
// the type it is parsed to. This table drives the parser (probeOutput.ts),
// the record types are derived from it, and a unit test
// (agent/test/unit/sources/probe/probeLines.test.ts) checks every printf of every
// probe and the OUTPUT section of every probe's header comment against it.
//
// Field types, what they are parsed to, and the printf conversions a probe
// may print them with (PRINTF_CONVERSIONS):
//   int   a decimal integer, to a number           %d, %lld, %llu
//   u64   a decimal integer, to an exact bigint    %llu only: bpftrace 0.17
//         truncates a %d to 32 bits whatever the value's type
//   bool  a decimal integer, to true unless 0      %d
//   word  one space-free word (ntop's address)     %s
//   address  a peer's address: a word, or an IPv6   %s, %016llx%016llx
//         address's 16 bytes as two little-endian words in hex (a Go program
//         cannot hand ntop an IPv6 address: go_http2.bt, NO CASTS), parsed
//         to the text ntop would print
//   rest  the rest of the line, spaces included    %s (last field only: comm)
// Field keys are the record's keys; the headers name them in UPPER_SNAKE_CASE
// (headerName). Record keys come in the table's order.

import { ipv6Text } from "../../ipAddress.ts";

export type FieldType = "int" | "u64" | "bool" | "word" | "address" | "rest";

const HELLO = { ts: "u64", agentPid: "int" } as const;
const TICK = { ts: "u64" } as const;
/** A uprobe program's answer to the agent's "are you there" (followChannel.ts): a tick out of the timer's turn. */
const BEAT = { ts: "u64" } as const;
// A uprobe program follows a pid (since: when it started following it, kernel
// ns), or no longer does (sources/probe/followedPids.ts).
const FOLLOW = { ts: "u64", pid: "int", since: "u64" } as const;
const UNFOLLOW = { ts: "u64", pid: "int" } as const;

/** The lines of each probe family: the socket programs (probes/*.bt), the per-binary Go HTTP/2 programs (goProbeProgram.ts) and the per-library TLS programs (probes/tls_answers.bt, rendered by tlsProbeProgram.ts). */
export const PROBE_FAMILIES = {
  sockets: {
    hello: HELLO,
    exec: { ts: "u64", pid: "int", cgroup: "u64", comm: "rest" },
    // sk: the socket's kernel address (send and close lines), as a TLS program names the connection.
    send: { ts: "u64", pid: "int", tid: "int", syscallNr: "int", ret: "int", port: "int", addr: "word", sk: "u64", comm: "rest" },
    connect: { ts: "u64", pid: "int", tid: "int", err: "int", port: "int", addr: "word", comm: "rest" },
    close: {
      ts: "u64",
      pid: "int",
      tid: "int",
      err: "int",
      reset: "bool",
      // Who ended the connection: vocabulary/closedBy.ts (CLOSED_BY in the headers).
      closedBy: "int",
      unansweredBytes: "int",
      waitedNs: "u64",
      retransmits: "int",
      port: "int",
      addr: "word",
      sk: "u64",
      comm: "rest",
    },
    // Printed right before a close line whose request only TLS session tickets may have answered (AMBIGUOUS in the probe).
    ambiguous: { ts: "u64", pid: "int", sk: "u64", bytes: "int", waitedNs: "u64" },
    ack: { seq: "int" },
    // A Go operator's connection the socket probe follows since (control op 12: ADOPTED CONNECTIONS).
    adopted: { ts: "u64", pid: "int", sk: "u64" },
    tick: TICK,
  },
  goHttp2: {
    hello: HELLO,
    follow: FOLLOW,
    unfollow: UNFOLLOW,
    // A request's HEADERS went out (ts): conn and stream are Go's *ClientConn
    // and *clientStream (addresses, the keys of everything after), port and
    // addr the connection's peer read through its file descriptor. pathNow:
    // 3, printed late from the kernel's in-flight map, which counted it, and
    // its peer is its process's go_peer (port 0, addr "go_peer"); 1 or 2,
    // printed as it went out (go_http2.bt, IN FLIGHT). Its go_path lines
    // follow. (0: record format 4, its path came before the line that needed it.)
    go_request: { ts: "u64", pid: "int", tid: "int", conn: "u64", stream: "u64", streamId: "int", pathLen: "int", pathNow: "int", method: "word", port: "int", addr: "address" },
    // One piece of a request's URL path (long paths come in several): right
    // after its go_request (format 4: also right before the line its death or answer printed).
    go_path: { pid: "int", stream: "u64", offset: "int", part: "rest" },
    // The peer of the process's first request kept in the kernel, whose requests @go_sent counts.
    go_peer: { ts: "u64", pid: "int", port: "int", addr: "address" },
    // The process exited, or the agent let it go: its last count of requests kept in the kernel (the @go_sent map between).
    go_sent: { ts: "u64", pid: "int", sent: "u64" },
    // A response's :status (format 4's go_headers lines, `:status N`, are read as these).
    go_status: { ts: "u64", pid: "int", conn: "u64", streamId: "int", status: "int" },
    go_reset: { ts: "u64", pid: "int", conn: "u64", streamId: "int", code: "int" },
    go_goaway: { ts: "u64", pid: "int", conn: "u64", lastStreamId: "int", code: "int" },
    // A connection's socket and the task that found it, at its first request: what the socket probe adopts the connection by.
    go_conn_sk: { ts: "u64", pid: "int", conn: "u64", sk: "u64", task: "u64" },
    // The connection's read loop ended; state is its TCP state then (7 CLOSE, 8 CLOSE_WAIT; 0 unreadable).
    go_conn_closed: { ts: "u64", pid: "int", conn: "u64", state: "int", port: "int", addr: "address" },
    // The client reset one of its streams (it gave up, or its write failed): code is the RST_STREAM's error code.
    go_abort: { ts: "u64", pid: "int", tid: "int", conn: "u64", streamId: "int", code: "int" },
    tick: TICK,
    beat: BEAT,
  },
  tls: {
    hello: HELLO,
    follow: FOLLOW,
    unfollow: UNFOLLOW,
    // A connection whose requests went through OpenSSL reached CLOSE: the
    // plaintext bytes written since the last answer the client read (0: all
    // answered), how long the oldest of them waited, and whether the server
    // had ended the session (its close_notify read: SSL_ERROR_ZERO_RETURN).
    tls_close: { ts: "u64", pid: "int", sk: "u64", unansweredBytes: "int", waitedNs: "u64", peerClosed: "bool" },
    tick: TICK,
    beat: BEAT,
  },
} as const satisfies Record<string, Record<string, Record<string, FieldType>>>;

/** Socket-family kinds only probes/apiserver_sockets.bt prints: they need its answer rule (tcp_sock's counters), or its adoption of Go operators' connections, which the syscalls variant has not. */
export const SOCKETS_VARIANT_ONLY: readonly string[] = ["ambiguous", "adopted"];

/** Every line kind of every family, for the parser. */
export const PROBE_LINES = { ...PROBE_FAMILIES.sockets, ...PROBE_FAMILIES.goHttp2, ...PROBE_FAMILIES.tls } as const satisfies Record<string, Record<string, FieldType>>;

export const PRINTF_CONVERSIONS: Record<FieldType, readonly string[]> = {
  int: ["%d", "%lld", "%llu"],
  u64: ["%llu"],
  bool: ["%d"],
  word: ["%s"],
  address: ["%s", "%016llx%016llx"],
  rest: ["%s"],
};

/**
 * A field's name in the probes' header comments: the record key in
 * UPPER_SNAKE_CASE (syscallNr is SYSCALL_NR), except where the header keeps
 * the probe's own shorter name.
 */
export function headerName(key: string): string {
  const renamed: Record<string, string> = { reset: "RST", unansweredBytes: "UNANSWERED", retransmits: "RETRANS" };
  return renamed[key] ?? key.replace(/[A-Z]/g, (c) => `_${c}`).toUpperCase();
}

export type PrintfKind = keyof typeof PROBE_LINES;

interface ValueOf {
  int: number;
  u64: bigint;
  bool: boolean;
  word: string;
  address: string;
  rest: string;
}

type Fields<K extends PrintfKind> = (typeof PROBE_LINES)[K];

/** The record of one printf line kind, e.g. { type: "tick"; ts: bigint }. */
export type PrintfRecordOf<K extends PrintfKind> = { type: K } & { -readonly [F in keyof Fields<K>]: ValueOf[Fields<K>[F] & FieldType] };

export type PrintfRecord = { [K in PrintfKind]: PrintfRecordOf<K> }[PrintfKind];

export function isPrintfKind(kind: string): kind is PrintfKind {
  return Object.hasOwn(PROBE_LINES, kind);
}

const INTEGER = /^-?\d+$/;
const FIELD_LISTS = new Map<string, [string, FieldType][]>(Object.entries(PROBE_LINES).map(([kind, fields]) => [kind, Object.entries(fields)]));

const IPV6_WORDS = /^([0-9a-f]{16})([0-9a-f]{16})$/;

/** An address word as ntop prints it: an IPv6 address printed as two little-endian words in hex becomes its text. */
function addressOf(word: string): string {
  const m = IPV6_WORDS.exec(word);
  if (m === null) return word;
  const bytes = new Uint8Array(16);
  const view = new DataView(bytes.buffer);
  view.setBigUint64(0, BigInt(`0x${m[1]}`), true);
  view.setBigUint64(8, BigInt(`0x${m[2]}`), true);
  return ipv6Text(bytes);
}

/**
 * The record of a line of a known kind from the words after its kind word (the
 * line split on single spaces). Null when the shape is wrong: too few or too
 * many words, or a numeric field that is not a decimal integer.
 */
export function parsePrintfFields(kind: PrintfKind, words: string[]): PrintfRecord | null {
  const fields = FIELD_LISTS.get(kind)!;
  const hasRest = fields.at(-1)?.[1] === "rest";
  if (hasRest ? words.length < fields.length : words.length !== fields.length) return null;
  const record: Record<string, unknown> = { type: kind };
  for (const [i, [key, type]] of fields.entries()) {
    const word = words[i]!;
    if ((type === "int" || type === "u64" || type === "bool") && !INTEGER.test(word)) return null;
    if (type === "int") record[key] = Number(word);
    else if (type === "u64") record[key] = BigInt(word);
    else if (type === "bool") record[key] = word !== "0";
    else if (type === "word") record[key] = word;
    else if (type === "address") record[key] = addressOf(word);
    else record[key] = words.slice(i).join(" ");
  }
  return record as PrintfRecord;
}
