// The `--record FILE` format: JSON lines, one record per line, the header
// first. It holds the agent's inputs, not its outputs (raw bpftrace lines and
// OTLP bodies as received), so `lostwrite replay` runs the same pipeline on
// them and must reach the same events. Times are CLOCK_MONOTONIC nanoseconds
// as decimal strings: JSON numbers lose precision past 2^53.
//
//   {"t":"…","kind":"header","version":4,"node":"n1","clockOffsetNs":"…","recordedAt":"…","agent":{…}}
//   {"t":"…","kind":"probe","line":"<raw bpftrace -f json line>"}
//   {"t":"…","kind":"spans","peer":"127.0.0.1:40312","contentType":"application/x-protobuf","body":"<base64>",
//    "sender":{"kind":"target","pid":4242,"nsPid":1,"comm":"manager","namespace":"ops","pod":"widget-7d9"}}
//   {"t":"…","kind":"clock","clockOffsetNs":"…"}
//   {"t":"…","kind":"goProbe","line":"<raw line of a Go program's bpftrace>"}
//   {"t":"…","kind":"goAttached","pid":4242,"attached":true,"since":"…"}
//   {"t":"…","kind":"tlsProbe","line":"<raw line of a TLS program's bpftrace>"}
//   {"t":"…","kind":"tlsAttached","pid":4242,"attached":true,"since":"…"}
//   {"t":"…","kind":"target","pid":4242,"process":"manager","added":true}
//
// A `target` record is the name the live agent gave a process when it became
// a target (or that it is no target any more): replay names its events alike,
// whichever of its exec and a /proc scan told the agent first, and whatever
// its threads are called since. Files without them are named from the lines.
//
// Version 2 added SK (the socket's address) to the socket probe's send and
// close lines; a version 1 file is read with SK 0 there (upgradeProbeLine).
// Version 3 added `sender` to spans records: who held the request's
// connection (a target process, a configured forwarder, or anything else),
// so that replay judges the resources' claims as the live agent did. A
// record without it (versions 1 and 2) is taken as its resources claim.
// Version 4 added PATH_NOW to the Go program's go_request lines (whether the
// path follows at once or stays in the kernel); an older file's are read
// with PATH_NOW 1, as their paths did follow at once (upgradeGoProbeLine).
// Version 5: a Go request answered 2xx that nothing waits for prints no line
// (the kernel counts it: go_peer, go_sent and the @go_sent map; PATH_NOW 3
// lines come late, right before the line that needs them) and an answer is
// a go_status line; an older file's `go_headers … :status N` lines are read
// as `go_status … N`, its other go_headers lines (trailers, which the agent
// never used) as they are, and go no further than the parser.
import { z } from "zod";
import { valueAt } from "../../valueAt.ts";

export const RECORD_FORMAT_VERSION = 5;
/** The versions a reader takes: older versions' lines are upgraded as they are read. */
export const READABLE_FORMAT_VERSIONS = [1, 2, 3, 4, 5] as const;
const RECORD_KINDS = ["header", "probe", "spans", "clock", "goProbe", "goAttached", "tlsProbe", "tlsAttached", "target"] as const;

export interface HeaderRecord {
  kind: "header";
  t: bigint;
  version: (typeof READABLE_FORMAT_VERSIONS)[number];
  node: string;
  /** Wall-clock epoch ns minus CLOCK_MONOTONIC ns when recording started. */
  clockOffsetNs: bigint;
  /** RFC 3339 wall time when recording started, for people reading the file. */
  recordedAt: string;
  /** What the agent was running with: its version and a summary of its config. */
  agent: { version: string; config: Record<string, unknown> };
}

/** One line bpftrace printed, exactly as read. */
export interface ProbeRecord {
  kind: "probe";
  t: bigint;
  line: string;
}

/** Who held the client end of a spans request's connection (sources/spans/senderTrust.ts ConnectionSender). */
export type RecordedSender =
  | { kind: "target"; pid: number; nsPid: number; comm: string; namespace: string | null; pod: string | null }
  | { kind: "forwarder" }
  | { kind: "other" };

/** One OTLP/HTTP request body as received (after Content-Encoding is undone). */
export interface SpansRecord {
  kind: "spans";
  t: bigint;
  peer: string;
  contentType: string;
  body: Buffer;
  /** Absent in files before version 3, and when the agent judged no connection. */
  sender?: RecordedSender;
}

/** The monotonic-to-wall offset the agent measured anew at `t`. */
export interface ClockRecord {
  kind: "clock";
  t: bigint;
  clockOffsetNs: bigint;
}

/** One line a Go program's bpftrace printed (the Go HTTP/2 probe), exactly as read. */
export interface GoProbeRecord {
  kind: "goProbe";
  t: bigint;
  line: string;
}

/** The Go program of `pid` attached or went away: from then on its requests are read, or no longer. */
export interface GoAttachedRecord {
  kind: "goAttached";
  t: bigint;
  pid: number;
  attached: boolean;
  /** Attached: since when (kernel ns) the program follows the pid; recordings before it have none (then `t`). */
  since?: bigint;
}

/** One line a TLS program's bpftrace printed (the OpenSSL probe), exactly as read. */
export interface TlsProbeRecord {
  kind: "tlsProbe";
  t: bigint;
  line: string;
}

/** The TLS program of `pid` attached or went away: from then on its connections' answers are read, or no longer. */
export interface TlsAttachedRecord {
  kind: "tlsAttached";
  t: bigint;
  pid: number;
  attached: boolean;
  /** As GoAttachedRecord's. */
  since?: bigint;
}

/** A process became a target under this name (added), or is no target any more. */
export interface TargetRecord {
  kind: "target";
  t: bigint;
  pid: number;
  process: string;
  added: boolean;
}

export type DataRecord = ProbeRecord | SpansRecord | ClockRecord | GoProbeRecord | GoAttachedRecord | TlsProbeRecord | TlsAttachedRecord | TargetRecord;
export type RecordEntry = HeaderRecord | DataRecord;

// Limits on what one record may hold, so a damaged file cannot blow memory.
const MAX_PROBE_LINE_CHARS = 64 * 1024;
const MAX_SPANS_BODY_BASE64_CHARS = 32 * 1024 * 1024;

const monotonicNs = z
  .string({ error: "want CLOCK_MONOTONIC nanoseconds as a decimal string" })
  .regex(/^\d{1,20}$/, { error: "want CLOCK_MONOTONIC nanoseconds as a decimal string" })
  .transform((s) => BigInt(s));
const signedNs = z
  .string({ error: "want signed nanoseconds as a decimal string" })
  .regex(/^-?\d{1,20}$/, { error: "want signed nanoseconds as a decimal string" })
  .transform((s) => BigInt(s));

const headerSchema = z.strictObject({
  t: monotonicNs,
  kind: z.literal("header"),
  version: z.union(READABLE_FORMAT_VERSIONS.map((v) => z.literal(v)), { error: `want format version ${READABLE_FORMAT_VERSIONS.join(" or ")}` }),
  node: z.string().max(253),
  clockOffsetNs: signedNs,
  recordedAt: z.iso.datetime({ offset: true, error: "want an RFC 3339 time" }),
  agent: z.strictObject({ version: z.string().max(64), config: z.record(z.string(), z.unknown()) }),
});

/** A raw bpftrace line: the socket probe's (`probe`), a Go program's (`goProbe`) or a TLS program's (`tlsProbe`). */
const lineSchema = <K extends "probe" | "goProbe" | "tlsProbe">(kind: K) =>
  z.strictObject({
    t: monotonicNs,
    kind: z.literal(kind),
    line: z.string().max(MAX_PROBE_LINE_CHARS),
  });

const pid = z.int().positive().max(2 ** 22);
const senderSchema = z.discriminatedUnion("kind", [
  z.strictObject({
    kind: z.literal("target"),
    pid,
    nsPid: pid,
    comm: z.string().max(64),
    namespace: z.string().max(253).nullable(),
    pod: z.string().max(253).nullable(),
  }),
  z.strictObject({ kind: z.literal("forwarder") }),
  z.strictObject({ kind: z.literal("other") }),
]);

const spansSchema = z.strictObject({
  t: monotonicNs,
  kind: z.literal("spans"),
  peer: z.string().max(64),
  contentType: z.string().max(128),
  body: z
    .base64({ error: "want base64" })
    .max(MAX_SPANS_BODY_BASE64_CHARS)
    .transform((b) => Buffer.from(b, "base64")),
  sender: senderSchema.optional(),
});

const clockSchema = z.strictObject({
  t: monotonicNs,
  kind: z.literal("clock"),
  clockOffsetNs: signedNs,
});

const attachedSchema = <K extends "goAttached" | "tlsAttached">(kind: K) =>
  z.strictObject({
    t: monotonicNs,
    kind: z.literal(kind),
    pid,
    attached: z.boolean(),
    since: monotonicNs.optional(),
  });

const schemaByKind = {
  header: headerSchema,
  probe: lineSchema("probe"),
  spans: spansSchema,
  clock: clockSchema,
  goProbe: lineSchema("goProbe"),
  goAttached: attachedSchema("goAttached"),
  tlsProbe: lineSchema("tlsProbe"),
  tlsAttached: attachedSchema("tlsAttached"),
  target: z.strictObject({
    t: monotonicNs,
    kind: z.literal("target"),
    pid,
    process: z.string().max(256),
    added: z.boolean(),
  }),
} as const;

type ParseResult = { ok: true; record: RecordEntry } | { ok: false; error: string };

/** Validates one line of a record file; errors name the key and quote the value. */
export function parseRecordLine(text: string): ParseResult {
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (err) {
    return { ok: false, error: `not JSON (${(err as Error).message})` };
  }
  if (typeof json !== "object" || json === null || Array.isArray(json)) {
    return { ok: false, error: `want a JSON object, got ${preview(json)}` };
  }
  const kind = (json as { kind?: unknown }).kind;
  if (typeof kind !== "string" || !(kind in schemaByKind)) {
    return { ok: false, error: `key "kind": want one of ${RECORD_KINDS.join(", ")}, got ${preview(kind)}` };
  }
  const result = schemaByKind[kind as keyof typeof schemaByKind].safeParse(json);
  if (result.success) return { ok: true, record: result.data as RecordEntry };
  const issue = result.error.issues[0];
  if (issue === undefined) return { ok: false, error: "invalid record" };
  if (issue.code === "unrecognized_keys") {
    return { ok: false, error: `unknown key ${issue.keys.map((k) => JSON.stringify(k)).join(", ")} in a "${kind}" record` };
  }
  const key = issue.path.map(String).join(".");
  return { ok: false, error: `key "${key}": ${issue.message}, got ${preview(valueAt(json, issue.path))}` };
}

/** The line for a record, with `t` first as the format shows it. */
export function serializeRecord(record: RecordEntry): string {
  switch (record.kind) {
    case "header":
      return JSON.stringify({
        t: record.t.toString(),
        kind: record.kind,
        version: record.version,
        node: record.node,
        clockOffsetNs: record.clockOffsetNs.toString(),
        recordedAt: record.recordedAt,
        agent: record.agent,
      });
    case "probe":
      return JSON.stringify({ t: record.t.toString(), kind: record.kind, line: record.line });
    case "spans":
      return JSON.stringify({
        t: record.t.toString(),
        kind: record.kind,
        peer: record.peer,
        contentType: record.contentType,
        body: record.body.toString("base64"),
        ...(record.sender ? { sender: record.sender } : {}),
      });
    case "clock":
      return JSON.stringify({ t: record.t.toString(), kind: record.kind, clockOffsetNs: record.clockOffsetNs.toString() });
    case "goProbe":
    case "tlsProbe":
      return JSON.stringify({ t: record.t.toString(), kind: record.kind, line: record.line });
    case "goAttached":
    case "tlsAttached":
      return JSON.stringify({
        t: record.t.toString(),
        kind: record.kind,
        pid: record.pid,
        attached: record.attached,
        ...(record.since !== undefined ? { since: record.since.toString() } : {}),
      });
    case "target":
      return JSON.stringify({ t: record.t.toString(), kind: record.kind, pid: record.pid, process: record.process, added: record.added });
  }
}

/** Fields before COMM in version 1's send and close lines, where version 2 put SK. */
const V1_FIELDS_BEFORE_COMM: Record<string, number> = { send: 7, close: 11 };
/** Fields before METHOD in version 1 to 3's go_request lines, where version 4 put PATH_NOW. */
const V3_FIELDS_BEFORE_METHOD: Record<string, number> = { go_request: 7 };

/**
 * A socket probe line of a version 1 recording in version 2's shape: SK 0
 * (not known) before the comm of send and close lines; other lines as they are.
 */
export function upgradeProbeLine(line: string): string {
  return insertField(line, V1_FIELDS_BEFORE_COMM, "0");
}

/**
 * A Go program's line of a version 1 to 4 recording in version 5's shape:
 * PATH_NOW 1 (its path lines follow) before the method of go_request lines
 * of versions 1 to 3; a go_headers line with :status as the go_status line
 * of that status; other lines as they are.
 */
export function upgradeGoProbeLine(line: string, version: number): string {
  return statusLine(version < 4 ? insertField(line, V3_FIELDS_BEFORE_METHOD, "1") : line);
}

/** `go_headers TS PID CONN STREAM_ID :status N` as `go_status TS PID CONN STREAM_ID N`; any other line as it is. */
function statusLine(line: string): string {
  const text = printfText(line);
  if (text === null) return line;
  const words = text.replace(/\n$/, "").split(" ");
  if (words[0] !== "go_headers" || words.length !== 7 || words[5] !== ":status") return line;
  const data = ["go_status", ...words.slice(1, 5), words[6]].join(" ");
  return JSON.stringify({ type: "printf", data: `${data}\n` });
}

/** A bpftrace printf line's text; null for any other line, or one that is no JSON (the parser reports it). */
function printfText(line: string): string | null {
  let json: { type?: unknown; data?: unknown };
  try {
    json = JSON.parse(line) as typeof json;
  } catch {
    return null;
  }
  return json.type === "printf" && typeof json.data === "string" ? json.data : null;
}

/** `value` inserted as a printf line's field after the `before[kind]` fields of its kind; other lines as they are. */
function insertField(line: string, before: Record<string, number>, value: string): string {
  const text = printfText(line);
  if (text === null) return line;
  const words = text.split(" ");
  const fields = before[words[0]!];
  if (fields === undefined || words.length < fields + 2) return line;
  words.splice(fields + 1, 0, value);
  // In place, so the rest of the line stays byte for byte what bpftrace printed.
  return line.replace(JSON.stringify(text).slice(1, -1), JSON.stringify(words.join(" ")).slice(1, -1));
}

function preview(value: unknown): string {
  if (value === undefined) return "nothing";
  const text = JSON.stringify(value) ?? `a ${typeof value}`;
  return text.length > 80 ? `${text.slice(0, 77)}...` : text;
}
