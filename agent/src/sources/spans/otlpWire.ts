// One shape for a decoded OTLP trace request, whichever encoding it came in
// (protobuf or JSON), so the span conversion after it is written once.

/** Scalar attribute values; arrays, maps and bytes decode to null (lostwrite reads none). */
export type WireValue = string | number | boolean | null;

export interface WireSpan {
  /** Lower-case hex; "" when absent. Checked for length by the conversion. */
  traceId: string;
  spanId: string;
  parentSpanId: string;
  name: string;
  /** OTLP SpanKind number (0 unspecified … 5 consumer). */
  kind: number;
  /** Wall-clock nanoseconds since the Unix epoch. */
  startNs: bigint;
  endNs: bigint;
  /** OTLP StatusCode number: 0 unset, 1 ok, 2 error. */
  statusCode: number;
  statusMessage: string;
  attributes: [string, WireValue][];
}

export interface WireResourceSpans {
  resource: [string, WireValue][];
  spans: WireSpan[];
}

export interface WireRequest {
  resourceSpans: WireResourceSpans[];
}
