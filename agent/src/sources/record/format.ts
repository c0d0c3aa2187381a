// The `--record FILE` format: JSON lines, one record per line, the header
// first. It holds the agent's inputs, not its outputs (raw bpftrace lines and
// OTLP bodies as received), so `lostwrite replay` runs the same pipeline on
// them and must reach the same events. Times are CLOCK_MONOTONIC nanoseconds
// as decimal strings: JSON numbers lose precision past 2^53.
//
//   {"t":"…","kind":"header","version":1,"node":"n1","clockOffsetNs":"…","recordedAt":"…","agent":{…}}
//   {"t":"…","kind":"probe","line":"<raw bpftrace -f json line>"}
//   {"t":"…","kind":"spans","peer":"127.0.0.1:40312","contentType":"application/x-protobuf","body":"<base64>"}
//   {"t":"…","kind":"clock","clockOffsetNs":"…"}
//   {"t":"…","kind":"goProbe","line":"<raw line of a Go program's bpftrace>"}
//   {"t":"…","kind":"goAttached","pid":4242,"attached":true}
import { z } from "zod";

export const RECORD_FORMAT_VERSION = 1;
export const RECORD_KINDS = ["header", "probe", "spans", "clock", "goProbe", "goAttached"] as const;

export interface HeaderRecord {
  kind: "header";
  t: bigint;
  version: typeof RECORD_FORMAT_VERSION;
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

/** One OTLP/HTTP request body as received (after Content-Encoding is undone). */
export interface SpansRecord {
  kind: "spans";
  t: bigint;
  peer: string;
  contentType: string;
  body: Buffer;
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
}

export type DataRecord = ProbeRecord | SpansRecord | ClockRecord | GoProbeRecord | GoAttachedRecord;
export type RecordEntry = HeaderRecord | DataRecord;

// Limits on what one record may hold, so a damaged file cannot blow memory.
export const MAX_PROBE_LINE_CHARS = 64 * 1024;
export const MAX_SPANS_BODY_BASE64_CHARS = 32 * 1024 * 1024;

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
  version: z.literal(RECORD_FORMAT_VERSION, { error: `want format version ${RECORD_FORMAT_VERSION}` }),
  node: z.string().max(253),
  clockOffsetNs: signedNs,
  recordedAt: z.iso.datetime({ offset: true, error: "want an RFC 3339 time" }),
  agent: z.strictObject({ version: z.string().max(64), config: z.record(z.string(), z.unknown()) }),
});

/** A raw bpftrace line: the socket probe's (`probe`) or a Go program's (`goProbe`). */
const lineSchema = <K extends "probe" | "goProbe">(kind: K) =>
  z.strictObject({
    t: monotonicNs,
    kind: z.literal(kind),
    line: z.string().max(MAX_PROBE_LINE_CHARS),
  });

const spansSchema = z.strictObject({
  t: monotonicNs,
  kind: z.literal("spans"),
  peer: z.string().max(64),
  contentType: z.string().max(128),
  body: z
    .base64({ error: "want base64" })
    .max(MAX_SPANS_BODY_BASE64_CHARS)
    .transform((b) => Buffer.from(b, "base64")),
});

const clockSchema = z.strictObject({
  t: monotonicNs,
  kind: z.literal("clock"),
  clockOffsetNs: signedNs,
});

const goAttachedSchema = z.strictObject({
  t: monotonicNs,
  kind: z.literal("goAttached"),
  pid: z.int().positive().max(2 ** 22),
  attached: z.boolean(),
});

const schemaByKind = {
  header: headerSchema,
  probe: lineSchema("probe"),
  spans: spansSchema,
  clock: clockSchema,
  goProbe: lineSchema("goProbe"),
  goAttached: goAttachedSchema,
} as const;

export type ParseResult = { ok: true; record: RecordEntry } | { ok: false; error: string };

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
      });
    case "clock":
      return JSON.stringify({ t: record.t.toString(), kind: record.kind, clockOffsetNs: record.clockOffsetNs.toString() });
    case "goProbe":
      return JSON.stringify({ t: record.t.toString(), kind: record.kind, line: record.line });
    case "goAttached":
      return JSON.stringify({ t: record.t.toString(), kind: record.kind, pid: record.pid, attached: record.attached });
  }
}

function valueAt(json: unknown, path: readonly PropertyKey[]): unknown {
  let value: unknown = json;
  for (const key of path) {
    if (typeof value !== "object" || value === null) return undefined;
    value = (value as Record<PropertyKey, unknown>)[key];
  }
  return value;
}

function preview(value: unknown): string {
  if (value === undefined) return "nothing";
  const text = JSON.stringify(value) ?? `a ${typeof value}`;
  return text.length > 80 ? `${text.slice(0, 77)}...` : text;
}
