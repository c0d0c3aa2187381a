// Builds OTLP request bodies the way an operator's SDK would: ReadableSpans
// serialized by OpenTelemetry's own serializers, with ids and times chosen by
// the test so assertions can name them.
import { SpanKind, SpanStatusCode, TraceFlags, type Attributes } from "@opentelemetry/api";
import { JsonTraceSerializer, ProtobufTraceSerializer } from "@opentelemetry/otlp-transformer";
import { resourceFromAttributes } from "@opentelemetry/resources";
import type { ReadableSpan } from "@opentelemetry/sdk-trace";

export interface SpanDef {
  traceId: string;
  spanId: string;
  parentSpanId?: string;
  name: string;
  kind?: SpanKind;
  /** Wall-clock milliseconds since the epoch (fractions allowed). */
  startMs: number;
  endMs: number;
  status?: SpanStatusCode;
  attributes?: Attributes;
  resource?: Attributes;
}

/**
 * A reconcile span of widgets/w1 around a write about to fail: it began a
 * second before `nowMs` and stays open a minute past it, however slow the
 * machine or the senders are to start.
 */
export function openReconcile(traceId: string, nowMs: number, over: Partial<SpanDef> = {}): SpanDef {
  return {
    traceId,
    spanId: traceId.slice(0, 16),
    name: "reconcile widget",
    startMs: nowMs - 1_000,
    endMs: nowMs + 60_000,
    attributes: { controller: "widget", controllerKind: "Widget", namespace: "widgets", name: "w1" },
    ...over,
  };
}

/**
 * A reconcile's failed status PATCH, answered `code`, under its span
 * `parent` (from `startMs`, for 100 ms): with the parent, what an operator
 * whose write was refused exports, a loss seen only in spans.
 */
export function refusedStatusPatch(parent: SpanDef, path: string, code: number, startMs: number, attributes: Attributes = {}): SpanDef[] {
  return [
    {
      traceId: parent.traceId,
      spanId: `${parent.traceId.slice(16, 30)}aa`,
      parentSpanId: parent.spanId,
      name: "PATCH",
      kind: SpanKind.CLIENT,
      startMs,
      endMs: startMs + 100,
      status: SpanStatusCode.ERROR,
      attributes: { "http.request.method": "PATCH", "url.path": path, "http.response.status_code": code, ...attributes },
      resource: parent.resource,
    },
    parent,
  ];
}

function hrTime(ms: number): [number, number] {
  const ns = BigInt(Math.round(ms * 1e6));
  return [Number(ns / 1_000_000_000n), Number(ns % 1_000_000_000n)];
}

export function readableSpan(def: SpanDef): ReadableSpan {
  const ctx = { traceId: def.traceId, spanId: def.spanId, traceFlags: TraceFlags.SAMPLED };
  return {
    name: def.name,
    kind: def.kind ?? SpanKind.INTERNAL,
    spanContext: () => ctx,
    ...(def.parentSpanId !== undefined
      ? { parentSpanContext: { traceId: def.traceId, spanId: def.parentSpanId, traceFlags: TraceFlags.SAMPLED } }
      : {}),
    startTime: hrTime(def.startMs),
    endTime: hrTime(def.endMs),
    status: { code: def.status ?? SpanStatusCode.UNSET },
    attributes: def.attributes ?? {},
    links: [],
    events: [],
    duration: hrTime(def.endMs - def.startMs),
    ended: true,
    resource: resourceFromAttributes(def.resource ?? { "service.name": "widget-operator" }),
    instrumentationScope: { name: "test" },
    droppedAttributesCount: 0,
    droppedEventsCount: 0,
    droppedLinksCount: 0,
  };
}

export function protobufBody(defs: SpanDef[]): Buffer {
  const bytes = ProtobufTraceSerializer.serializeRequest(defs.map(readableSpan));
  if (bytes === undefined) throw new Error("serializer returned nothing");
  return Buffer.from(bytes);
}

export function jsonBody(defs: SpanDef[]): Buffer {
  const bytes = JsonTraceSerializer.serializeRequest(defs.map(readableSpan));
  if (bytes === undefined) throw new Error("serializer returned nothing");
  return Buffer.from(bytes);
}
