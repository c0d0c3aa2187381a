// Decodes an OTLP/HTTP JSON ExportTraceServiceRequest (the protobuf JSON
// mapping with OTLP's exceptions: trace and span ids are hex, not base64;
// enums are integers; 64-bit integers may be strings or numbers). Validated
// with zod; unknown fields are allowed, as the OTLP spec asks of receivers.
import { z } from "zod";
import { intValue } from "./otlpProtobuf.ts";
import type { WireRequest, WireSpan, WireValue } from "./otlpWire.ts";

const int64 = z.union([z.string().regex(/^-?\d{1,20}$/), z.number().int()]);
const uint64 = z.union([z.string().regex(/^\d{1,20}$/), z.number().int().nonnegative()]);
const hexId = z.string().regex(/^[0-9a-fA-F]*$/);

// Arrays, maps and bytes are accepted and decode to null: lostwrite reads none of them.
const anyValue = z.looseObject({
  stringValue: z.string().optional(),
  boolValue: z.boolean().optional(),
  intValue: int64.optional(),
  doubleValue: z.union([z.number(), z.enum(["NaN", "Infinity", "-Infinity"])]).optional(),
});

const keyValues = z.array(z.looseObject({ key: z.string(), value: anyValue.optional() })).optional();

const span = z.looseObject({
  traceId: hexId.optional(),
  spanId: hexId.optional(),
  parentSpanId: hexId.optional(),
  name: z.string().optional(),
  kind: z.number().int().optional(),
  startTimeUnixNano: uint64.optional(),
  endTimeUnixNano: uint64.optional(),
  attributes: keyValues,
  status: z.looseObject({ message: z.string().optional(), code: z.number().int().optional() }).optional(),
});

const request = z.looseObject({
  resourceSpans: z
    .array(
      z.looseObject({
        resource: z.looseObject({ attributes: keyValues }).optional(),
        scopeSpans: z.array(z.looseObject({ spans: z.array(span).optional() })).optional(),
      }),
    )
    .optional(),
});

type JsonKeyValues = z.infer<typeof keyValues>;
type JsonSpan = z.infer<typeof span>;

/** Decodes a JSON body; throws on invalid JSON or a request of the wrong shape. */
export function decodeJsonTraceRequest(body: Uint8Array): WireRequest {
  const text = new TextDecoder("utf-8", { fatal: true }).decode(body);
  const parsed = request.safeParse(JSON.parse(text));
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    throw new Error(`invalid OTLP JSON at ${issue?.path.join(".") ?? "?"}: ${issue?.message ?? "?"}`);
  }
  return {
    resourceSpans: (parsed.data.resourceSpans ?? []).map((rs) => ({
      resource: toAttributes(rs.resource?.attributes),
      spans: (rs.scopeSpans ?? []).flatMap((ss) => (ss.spans ?? []).map(toWireSpan)),
    })),
  };
}

function toWireSpan(s: JsonSpan): WireSpan {
  return {
    traceId: (s.traceId ?? "").toLowerCase(),
    spanId: (s.spanId ?? "").toLowerCase(),
    parentSpanId: (s.parentSpanId ?? "").toLowerCase(),
    name: s.name ?? "",
    kind: s.kind ?? 0,
    startNs: BigInt(s.startTimeUnixNano ?? 0),
    endNs: BigInt(s.endTimeUnixNano ?? 0),
    statusCode: s.status?.code ?? 0,
    statusMessage: s.status?.message ?? "",
    attributes: toAttributes(s.attributes),
  };
}

function toAttributes(kvs: JsonKeyValues): [string, WireValue][] {
  const out: [string, WireValue][] = [];
  for (const kv of kvs ?? []) {
    if (kv.key === "") continue;
    const v = kv.value;
    let value: WireValue = null;
    if (v?.stringValue !== undefined) value = v.stringValue;
    else if (v?.boolValue !== undefined) value = v.boolValue;
    else if (v?.intValue !== undefined) value = intValue(String(v.intValue));
    else if (typeof v?.doubleValue === "number") value = v.doubleValue;
    out.push([kv.key, value]);
  }
  return out;
}
