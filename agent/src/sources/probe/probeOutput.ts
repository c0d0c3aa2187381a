// Parses bpftrace's `-f json` output lines into typed records. Everything that
// comes out of bpftrace is outside input: a line that is too long, not JSON,
// of an unknown type or of an unexpected shape is an error the caller counts,
// never an exception that stops the stream.
import { z } from "zod";

export const MAX_LINE_BYTES = 4 * 1024 * 1024;

export type CounterMap = "writes" | "bytes" | "transient" | "retransmits";

export type ProbeRecord =
  | { type: "attached"; probes: number }
  | { type: "hello"; ts: bigint; agentPid: number }
  | {
      type: "send";
      ts: bigint;
      pid: number;
      tid: number;
      syscallNr: number;
      ret: number;
      port: number;
      addr: string;
      comm: string;
    }
  | { type: "connect"; ts: bigint; pid: number; tid: number; err: number; port: number; addr: string; comm: string }
  | {
      type: "close";
      ts: bigint;
      pid: number;
      tid: number;
      err: number;
      reset: boolean;
      unansweredBytes: number;
      waitedNs: bigint;
      retransmits: number;
      port: number;
      addr: string;
      comm: string;
    }
  | { type: "exec"; ts: bigint; pid: number; cgroup: bigint; comm: string }
  | { type: "ack"; seq: number }
  | { type: "tick"; ts: bigint }
  | { type: "counters"; map: CounterMap; entries: { key: number[]; value: bigint }[] }
  | { type: "lost"; events: number };

export type ParseResult = { ok: true; record: ProbeRecord } | { ok: false; error: string };

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
  "@retransmits": "retransmits",
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
    case "printf":
      return parsePrintf(msg.data.replace(/\n$/, ""));
  }
}

function parseMap(data: Record<string, Record<string, number | bigint>>): ParseResult {
  const names = Object.keys(data);
  const name = names[0];
  const map = name === undefined ? undefined : COUNTER_MAPS[name];
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
  return { ok: true, record: { type: "counters", map, entries } };
}

const int = /^-?\d+$/;

/**
 * Splits a printf line into its numeric fields, then `words` space-free words,
 * then the rest (comm, which may hold spaces). Null when the shape is wrong.
 */
function fields(text: string, numeric: number, words = 0, rest = false): { nums: string[]; words: string[]; rest: string } | null {
  const parts = text.split(" ").slice(1);
  const fixed = numeric + words;
  if (rest ? parts.length <= fixed : parts.length !== fixed) return null;
  const nums = parts.slice(0, numeric);
  if (!nums.every((part) => int.test(part))) return null;
  return { nums, words: parts.slice(numeric, fixed), rest: parts.slice(fixed).join(" ") };
}

function parsePrintf(text: string): ParseResult {
  const kind = text.slice(0, text.indexOf(" ") === -1 ? text.length : text.indexOf(" "));
  const bad = (): ParseResult => ({ ok: false, error: `malformed "${kind}" line: ${preview(text)}` });
  const n = (s: string): number => Number(s);
  switch (kind) {
    case "hello": {
      const f = fields(text, 2);
      if (!f) return bad();
      return { ok: true, record: { type: "hello", ts: BigInt(f.nums[0]!), agentPid: n(f.nums[1]!) } };
    }
    case "tick": {
      const f = fields(text, 1);
      if (!f) return bad();
      return { ok: true, record: { type: "tick", ts: BigInt(f.nums[0]!) } };
    }
    case "ack": {
      const f = fields(text, 1);
      if (!f) return bad();
      return { ok: true, record: { type: "ack", seq: n(f.nums[0]!) } };
    }
    case "exec": {
      const f = fields(text, 3, 0, true);
      if (!f) return bad();
      const [ts, pid, cgroup] = f.nums as [string, string, string];
      return { ok: true, record: { type: "exec", ts: BigInt(ts), pid: n(pid), cgroup: BigInt(cgroup), comm: f.rest } };
    }
    case "send": {
      const f = fields(text, 6, 1, true);
      if (!f) return bad();
      const [ts, pid, tid, nr, ret, port] = f.nums as [string, string, string, string, string, string];
      const addr = f.words[0]!;
      const comm = f.rest;
      return {
        ok: true,
        record: { type: "send", ts: BigInt(ts), pid: n(pid), tid: n(tid), syscallNr: n(nr), ret: n(ret), port: n(port), addr, comm },
      };
    }
    case "connect": {
      const f = fields(text, 5, 1, true);
      if (!f) return bad();
      const [ts, pid, tid, err, port] = f.nums as [string, string, string, string, string];
      const addr = f.words[0]!;
      const comm = f.rest;
      return {
        ok: true,
        record: { type: "connect", ts: BigInt(ts), pid: n(pid), tid: n(tid), err: n(err), port: n(port), addr, comm },
      };
    }
    case "close": {
      const f = fields(text, 9, 1, true);
      if (!f) return bad();
      const [ts, pid, tid, err, rst, unanswered, waited, retrans, port] = f.nums as [
        string, string, string, string, string, string, string, string, string,
      ];
      const addr = f.words[0]!;
      const comm = f.rest;
      return {
        ok: true,
        record: {
          type: "close",
          ts: BigInt(ts),
          pid: n(pid),
          tid: n(tid),
          err: n(err),
          reset: rst !== "0",
          unansweredBytes: n(unanswered),
          waitedNs: BigInt(waited),
          retransmits: n(retrans),
          port: n(port),
          addr,
          comm,
        },
      };
    }
    default:
      return { ok: false, error: `unknown printf kind "${kind}": ${preview(text)}` };
  }
}

function preview(text: string): string {
  return JSON.stringify(text.length > 120 ? `${text.slice(0, 120)}…` : text);
}
