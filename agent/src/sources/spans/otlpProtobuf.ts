// Decodes an OTLP/HTTP protobuf ExportTraceServiceRequest.
//
// Why protobufjs with a schema here rather than @opentelemetry/otlp-transformer:
// otlp-transformer 0.301 only *encodes* requests (its protobuf code is a
// private hand-written writer plus a response reader); it no longer ships the
// generated protobufjs root that older versions had, and no maintained npm
// package ships the opentelemetry-proto .proto files. So the schema below is
// the subset of opentelemetry-proto v1 (common.proto, resource.proto,
// trace.proto, trace_service.proto) that lostwrite reads, with the official
// field numbers and types, and protobufjs does all the wire decoding
// (bounds checks, nesting limit, skipping the fields left out: events, links,
// trace_state, flags, scope). Field numbers are the stable part of the
// protocol; tests encode with the OpenTelemetry SDK's own serializer.
import protobuf from "protobufjs/light.js";
import type { WireRequest, WireResourceSpans, WireSpan, WireValue } from "./otlpWire.ts";

const root = protobuf.Root.fromJSON({
  nested: {
    otlp: {
      nested: {
        AnyValue: {
          oneofs: {
            value: {
              oneof: [
                "stringValue",
                "boolValue",
                "intValue",
                "doubleValue",
                "arrayValue",
                "kvlistValue",
                "bytesValue",
              ],
            },
          },
          fields: {
            stringValue: { type: "string", id: 1 },
            boolValue: { type: "bool", id: 2 },
            intValue: { type: "int64", id: 3 },
            doubleValue: { type: "double", id: 4 },
            arrayValue: { type: "ArrayValue", id: 5 },
            kvlistValue: { type: "KeyValueList", id: 6 },
            bytesValue: { type: "bytes", id: 7 },
          },
        },
        ArrayValue: { fields: { values: { rule: "repeated", type: "AnyValue", id: 1 } } },
        KeyValueList: { fields: { values: { rule: "repeated", type: "KeyValue", id: 1 } } },
        KeyValue: {
          fields: { key: { type: "string", id: 1 }, value: { type: "AnyValue", id: 2 } },
        },
        Resource: { fields: { attributes: { rule: "repeated", type: "KeyValue", id: 1 } } },
        Status: { fields: { message: { type: "string", id: 2 }, code: { type: "int32", id: 3 } } },
        Span: {
          fields: {
            traceId: { type: "bytes", id: 1 },
            spanId: { type: "bytes", id: 2 },
            parentSpanId: { type: "bytes", id: 4 },
            name: { type: "string", id: 5 },
            // An enum on the wire; read as its number so an unknown value is not an error.
            kind: { type: "int32", id: 6 },
            startTimeUnixNano: { type: "fixed64", id: 7 },
            endTimeUnixNano: { type: "fixed64", id: 8 },
            attributes: { rule: "repeated", type: "KeyValue", id: 9 },
            status: { type: "Status", id: 15 },
          },
        },
        ScopeSpans: { fields: { spans: { rule: "repeated", type: "Span", id: 2 } } },
        ResourceSpans: {
          fields: {
            resource: { type: "Resource", id: 1 },
            scopeSpans: { rule: "repeated", type: "ScopeSpans", id: 2 },
          },
        },
        ExportTraceServiceRequest: {
          fields: { resourceSpans: { rule: "repeated", type: "ResourceSpans", id: 1 } },
        },
        ExportTracePartialSuccess: {
          fields: { rejectedSpans: { type: "int64", id: 1 }, errorMessage: { type: "string", id: 2 } },
        },
        ExportTraceServiceResponse: {
          fields: { partialSuccess: { type: "ExportTracePartialSuccess", id: 1 } },
        },
      },
    },
  },
});

const requestType = root.lookupType("otlp.ExportTraceServiceRequest");
const responseType = root.lookupType("otlp.ExportTraceServiceResponse");

/** Spans of a request that were refused, and why, for the response's partial_success. */
export interface PartialSuccess {
  rejectedSpans: number;
  errorMessage: string;
}

/** An ExportTraceServiceResponse: empty when everything was accepted. */
export function encodeProtobufTraceResponse(partial: PartialSuccess | null): Uint8Array {
  const message = partial === null ? {} : { partialSuccess: { rejectedSpans: partial.rejectedSpans, errorMessage: partial.errorMessage } };
  return responseType.encode(responseType.create(message)).finish();
}

// The shapes protobufjs decodes into (only what the schema above declares).
interface PbLong {
  toString(): string;
}
interface PbAnyValue {
  stringValue?: string;
  boolValue?: boolean;
  intValue?: PbLong | number;
  doubleValue?: number;
  bytesValue?: Uint8Array;
  arrayValue?: unknown;
  kvlistValue?: unknown;
}
interface PbKeyValue {
  key?: string;
  value?: PbAnyValue | null;
}
interface PbSpan {
  traceId?: Uint8Array;
  spanId?: Uint8Array;
  parentSpanId?: Uint8Array;
  name?: string;
  kind?: number;
  startTimeUnixNano?: PbLong | number;
  endTimeUnixNano?: PbLong | number;
  attributes?: PbKeyValue[];
  status?: { message?: string; code?: number } | null;
}
interface PbRequest {
  resourceSpans?: { resource?: { attributes?: PbKeyValue[] } | null; scopeSpans?: { spans?: PbSpan[] }[] }[];
}

/** Decodes a protobuf body; throws on anything that is not a well-formed request. */
export function decodeProtobufTraceRequest(body: Uint8Array): WireRequest {
  const decoded = requestType.decode(body) as unknown as PbRequest;
  const resourceSpans: WireResourceSpans[] = [];
  for (const rs of decoded.resourceSpans ?? []) {
    const spans: WireSpan[] = [];
    for (const ss of rs.scopeSpans ?? []) {
      for (const span of ss.spans ?? []) spans.push(toWireSpan(span));
    }
    resourceSpans.push({ resource: toAttributes(rs.resource?.attributes), spans });
  }
  return { resourceSpans };
}

function toWireSpan(span: PbSpan): WireSpan {
  return {
    traceId: hex(span.traceId),
    spanId: hex(span.spanId),
    parentSpanId: hex(span.parentSpanId),
    name: span.name ?? "",
    kind: span.kind ?? 0,
    startNs: BigInt((span.startTimeUnixNano ?? 0).toString()),
    endNs: BigInt((span.endTimeUnixNano ?? 0).toString()),
    statusCode: span.status?.code ?? 0,
    statusMessage: span.status?.message ?? "",
    attributes: toAttributes(span.attributes),
  };
}

function toAttributes(kvs: PbKeyValue[] | undefined): [string, WireValue][] {
  const out: [string, WireValue][] = [];
  for (const kv of kvs ?? []) {
    if (kv.key === undefined || kv.key === "") continue;
    out.push([kv.key, toValue(kv.value)]);
  }
  return out;
}

function toValue(v: PbAnyValue | null | undefined): WireValue {
  if (v === undefined || v === null) return null;
  // protobufjs puts field defaults on the prototype: only own properties were on the wire.
  if (Object.hasOwn(v, "stringValue") && v.stringValue !== undefined) return v.stringValue;
  if (Object.hasOwn(v, "boolValue") && v.boolValue !== undefined) return v.boolValue;
  if (Object.hasOwn(v, "intValue") && v.intValue !== undefined) return intValue(v.intValue.toString());
  if (Object.hasOwn(v, "doubleValue") && v.doubleValue !== undefined) return v.doubleValue;
  // Arrays, maps and bytes are never among the attributes lostwrite reads.
  return null;
}

/** int64 as a number when exact, else as its decimal text. */
export function intValue(text: string): number | string {
  const n = Number(text);
  return Number.isSafeInteger(n) ? n : text;
}

function hex(bytes: Uint8Array | null | undefined): string {
  return bytes === undefined || bytes === null ? "" : Buffer.from(bytes).toString("hex");
}
