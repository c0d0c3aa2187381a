// Parses bpftrace's `-f json` output lines into typed records. Everything that
// comes out of bpftrace is outside input: a line that is too long, not JSON,
// of an unknown type or of an unexpected shape is an error the caller counts,
// never an exception that stops the stream.
import { z } from "zod";
import { isPrintfKind, parsePrintfFields, type PrintfRecord } from "./probeLines.ts";

export const MAX_LINE_BYTES = 4 * 1024 * 1024;

export type CounterMap = "writes" | "bytes" | "transient" | "failedSends" | "retransmits" | "goSent";

/**
 * One line of bpftrace output. The printf lines (hello, exec, send, connect,
 * close, ack, tick) have the fields PROBE_LINES in probeLines.ts gives them.
 */
export type ProbeRecord =
  | { type: "attached"; probes: number }
  | PrintfRecord
  | { type: "counters"; map: CounterMap; entries: { key: number[]; value: bigint }[] }
  | { type: "lost"; events: number };

/**
 * `part`: the line came from one part of a combined program (its printf
 * starts with `#<id> `, combinedProgram.ts), that part's id.
 */
type ParseResult = { ok: true; record: ProbeRecord; part?: number } | { ok: false; error: string };

const envelope = z.discriminatedUnion("type", [
  z.object({ type: z.literal("attached_probes"), data: z.object({ probes: z.number() }) }),
  z.object({ type: z.literal("printf"), data: z.string() }),
  z.object({ type: z.literal("map"), data: z.record(z.string(), z.record(z.string(), z.union([z.number(), z.bigint()]))) }),
  // bpftrace 0.17 prints {"events": N}; later versions add fields, which are ignored.
  z.object({ type: z.literal("lost_events"), data: z.looseObject({ events: z.number() }) }),
]);

const COUNTER_MAPS: Record<string, CounterMap> = {
  "@writes": "writes",
  "@bytes": "bytes",
  "@transient": "transient",
  "@failed_sends": "failedSends",
  "@retransmits": "retransmits",
  // A Go program's requests kept in the kernel, per pid (go_http2.bt, IN FLIGHT).
  "@go_sent": "goSent",
};

/** JSON.parse that keeps integers beyond 2^53 exact (cumulative byte counters). */
function parseJsonExact(text: string): unknown {
  return JSON.parse(text, (_key, value: unknown, context?: { source?: string }) =>
    typeof value === "number" && !Number.isSafeInteger(value) && context?.source && /^-?\d+$/.test(context.source)
      ? BigInt(context.source)
      : value,
  );
}

export function parseProbeLine(line: string): ParseResult {
  if (Buffer.byteLength(line) > MAX_LINE_BYTES) return { ok: false, error: `line longer than ${MAX_LINE_BYTES} bytes` };
  let json: unknown;
  try {
    json = parseJsonExact(line);
  } catch {
    return { ok: false, error: `not JSON: ${preview(line)}` };
  }
  const parsed = envelope.safeParse(json);
  if (!parsed.success) {
    const type = typeof json === "object" && json !== null && "type" in json ? String(json.type) : "none";
    return { ok: false, error: `unexpected line (type "${type}"): ${preview(line)}` };
  }
  const msg = parsed.data;
  switch (msg.type) {
    case "attached_probes":
      return { ok: true, record: { type: "attached", probes: msg.data.probes } };
    case "lost_events":
      return { ok: true, record: { type: "lost", events: msg.data.events } };
    case "map":
      return parseMap(msg.data);
    case "printf": {
      const text = msg.data.replace(/\n$/, "");
      const tagged = /^#(\d{1,3}) /.exec(text);
      if (tagged === null) return parsePrintf(text);
      const parsed = parsePrintf(text.slice(tagged[0].length));
      return parsed.ok ? { ...parsed, part: Number(tagged[1]) } : parsed;
    }
  }
}

function parseMap(data: Record<string, Record<string, number | bigint>>): ParseResult {
  const names = Object.keys(data);
  const name = names[0];
  // A combined program's part prints its maps renamed `@name__<id>` (combinedProgram.ts).
  const tagged = name === undefined ? null : /^(@\w+?)__(\d{1,3})$/.exec(name);
  const map = name === undefined ? undefined : COUNTER_MAPS[tagged ? tagged[1]! : name];
  if (names.length !== 1 || map === undefined) return { ok: false, error: `unknown map "${names.join(",")}"` };
  const entries: { key: number[]; value: bigint }[] = [];
  for (const [rawKey, value] of Object.entries(data[name!]!)) {
    const key = rawKey.split(",").map((part) => Number(part.trim()));
    if (key.some((k) => !Number.isSafeInteger(k))) return { ok: false, error: `map ${name}: bad key "${rawKey}"` };
    if (typeof value === "number" && (!Number.isInteger(value) || value < 0)) {
      return { ok: false, error: `map ${name}: bad value ${value} for key "${rawKey}"` };
    }
    entries.push({ key, value: BigInt(value) });
  }
  const record: ProbeRecord = { type: "counters", map, entries };
  return tagged ? { ok: true, record, part: Number(tagged[2]) } : { ok: true, record };
}

function parsePrintf(text: string): ParseResult {
  const [kind, ...words] = text.split(" ") as [string, ...string[]];
  if (!isPrintfKind(kind)) return { ok: false, error: `unknown printf kind "${kind}": ${preview(text)}` };
  const record = parsePrintfFields(kind, words);
  return record ? { ok: true, record } : { ok: false, error: `malformed "${kind}" line: ${preview(text)}` };
}

function preview(text: string): string {
  return JSON.stringify(text.length > 120 ? `${text.slice(0, 120)}…` : text);
}
