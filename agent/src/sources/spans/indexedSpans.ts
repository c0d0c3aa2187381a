// Turns a decoded OTLP request into the spans the index holds: ids checked,
// only the attributes lostwrite reads kept, reconcile and HTTP facts parsed
// once at intake so correlation never re-reads attribute lists.
import type { ReconcileRef } from "../../model.ts";
import type { WireRequest, WireValue } from "./otlpWire.ts";
import {
  type AttributeValue,
  type Attributes,
  CONTROLLER_ATTRIBUTES,
  ERROR_TYPE_ATTRIBUTE,
  firstInteger,
  firstString,
  HTTP_METHOD_ATTRIBUTES,
  HTTP_PATH_ATTRIBUTES,
  HTTP_STATUS_CODE_ATTRIBUTES,
  HTTP_URL_ATTRIBUTES,
  KEPT_SPAN_ATTRIBUTES,
  OBJECT_KIND_ATTRIBUTES,
  OBJECT_NAME_ATTRIBUTES,
  OBJECT_NAMESPACE_ATTRIBUTES,
  pathOf,
  PROCESS_ATTRIBUTES,
  RECONCILE_NAME_PREFIXES,
  SERVER_ADDRESS_ATTRIBUTES,
  SERVER_PORT_ATTRIBUTES,
  THREAD_ID_ATTRIBUTE,
} from "./spanAttributes.ts";

export type SpanKindName = "unspecified" | "internal" | "server" | "client" | "producer" | "consumer";
const KINDS: readonly SpanKindName[] = ["unspecified", "internal", "server", "client", "producer", "consumer"];
export type SpanStatus = "unset" | "ok" | "error";
const STATUSES: readonly SpanStatus[] = ["unset", "ok", "error"];

/**
 * How the process of a span was decided (sources/spans/senderTrust.ts):
 * `process`, the target process holding the client end of the connection
 * (`hostPid` says which); `claimed`, as the resource says (a configured
 * forwarder's, or a recording made before connections were judged); `pod`,
 * the pod the sender's address belongs to; `node`, a process of the node
 * outside any pod (a loopback or node-address sender naming no pod).
 */
export type SpanSender = "process" | "claimed" | "pod" | "node";

/** Who sent a span: resource attributes plus the peer that sent the request. */
export interface SpanProcess {
  sender: SpanSender;
  /** `process.pid`: the pid in the sender's own PID namespace. */
  pid: number | null;
  /** The sender's host pid, when its connection proved it (sender `process`). */
  hostPid: number | null;
  podUid: string | null;
  podName: string | null;
  namespace: string | null;
  containerId: string | null;
  serviceName: string | null;
  /** Remote address of the OTLP request, when it came over the network. */
  peerAddress: string | null;
}

/** An HTTP client request, from a client-kind span's semantic-convention attributes. */
export interface SpanRequest {
  method: string | null;
  path: string | null;
  statusCode: number | null;
  serverAddress: string | null;
  serverPort: number | null;
  errorType: string | null;
}

export interface IndexedSpan {
  /** Lower-case hex, 32 and 16 characters. */
  traceId: string;
  spanId: string;
  parentSpanId: string | null;
  name: string;
  kind: SpanKindName;
  /**
   * Wall-clock nanoseconds since the Unix epoch, as OTLP carries them.
   * bigint, because epoch nanoseconds exceed 2^53 and the kernel's
   * CLOCK_MONOTONIC times they are compared with are bigint too.
   */
  startNs: bigint;
  endNs: bigint;
  status: SpanStatus;
  /** Only the attributes in KEPT_SPAN_ATTRIBUTES. */
  attributes: Attributes;
  process: SpanProcess;
  /** Set when this is a reconcile span. */
  reconcile: ReconcileRef | null;
  /** Set when this is a client span with HTTP attributes. */
  request: SpanRequest | null;
  /** `thread.id` when the sender records it. */
  threadId: number | null;
}

/** Thrown for a request whose spans break the protocol (bad ids, end before start). */
class InvalidSpanError extends Error {}

const TRACE_ID = /^[0-9a-f]{32}$/;
const SPAN_ID = /^[0-9a-f]{16}$/;
const ZERO_TRACE = "0".repeat(32);
const ZERO_SPAN = "0".repeat(16);

export function toIndexedSpans(request: WireRequest, peerAddress: string | null): IndexedSpan[] {
  const out: IndexedSpan[] = [];
  for (const rs of request.resourceSpans) {
    const resource = keep(rs.resource, null);
    const process: SpanProcess = {
      sender: "claimed",
      pid: firstInteger(resource, [PROCESS_ATTRIBUTES.pid]),
      hostPid: null,
      podUid: firstString(resource, [PROCESS_ATTRIBUTES.podUid]),
      podName: firstString(resource, [PROCESS_ATTRIBUTES.podName]),
      namespace: firstString(resource, [PROCESS_ATTRIBUTES.namespace]),
      containerId: firstString(resource, [PROCESS_ATTRIBUTES.containerId]),
      serviceName: firstString(resource, [PROCESS_ATTRIBUTES.serviceName]),
      peerAddress,
    };
    for (const span of rs.spans) {
      if (!TRACE_ID.test(span.traceId) || span.traceId === ZERO_TRACE) {
        throw new InvalidSpanError(`span "${span.name}": invalid trace id "${span.traceId}"`);
      }
      if (!SPAN_ID.test(span.spanId) || span.spanId === ZERO_SPAN) {
        throw new InvalidSpanError(`span "${span.name}": invalid span id "${span.spanId}"`);
      }
      const parent = span.parentSpanId === "" || span.parentSpanId === ZERO_SPAN ? null : span.parentSpanId;
      if (parent !== null && !SPAN_ID.test(parent)) {
        throw new InvalidSpanError(`span "${span.name}": invalid parent span id "${parent}"`);
      }
      if (span.endNs < span.startNs) {
        throw new InvalidSpanError(`span "${span.name}": ends before it starts`);
      }
      const attributes = keep(span.attributes, KEPT_SPAN_ATTRIBUTES);
      const kind = KINDS[span.kind] ?? "unspecified";
      out.push({
        traceId: span.traceId,
        spanId: span.spanId,
        parentSpanId: parent,
        name: span.name,
        kind,
        startNs: span.startNs,
        endNs: span.endNs,
        status: STATUSES[span.statusCode] ?? "unset",
        attributes,
        process,
        reconcile: reconcileOf(span.name, attributes),
        request: kind === "client" ? requestOf(attributes) : null,
        threadId: firstInteger(attributes, [THREAD_ID_ATTRIBUTE]),
      });
    }
  }
  return out;
}

function keep(kvs: [string, WireValue][], names: ReadonlySet<string> | null): Attributes {
  const out: Record<string, AttributeValue> = {};
  for (const [key, value] of kvs) {
    if (value === null || (names !== null && !names.has(key))) continue;
    if (names === null && !RESOURCE_KEYS.has(key)) continue;
    // First occurrence wins, as for the attribute lists.
    if (!Object.hasOwn(out, key)) out[key] = value;
  }
  return out;
}
const RESOURCE_KEYS: ReadonlySet<string> = new Set(Object.values(PROCESS_ATTRIBUTES));

function reconcileOf(name: string, attrs: Attributes): ReconcileRef | null {
  const controller = firstString(attrs, CONTROLLER_ATTRIBUTES);
  if (controller === null && !RECONCILE_NAME_PREFIXES.some((p) => name.startsWith(p))) return null;
  return {
    controller,
    namespace: firstString(attrs, OBJECT_NAMESPACE_ATTRIBUTES),
    name: firstString(attrs, OBJECT_NAME_ATTRIBUTES),
    kind: firstString(attrs, OBJECT_KIND_ATTRIBUTES),
  };
}

function requestOf(attrs: Attributes): SpanRequest | null {
  const method = firstString(attrs, HTTP_METHOD_ATTRIBUTES);
  const target = firstString(attrs, HTTP_PATH_ATTRIBUTES);
  const url = firstString(attrs, HTTP_URL_ATTRIBUTES);
  if (method === null && target === null && url === null) return null;
  return {
    method: method?.toUpperCase() ?? null,
    path: (target !== null ? pathOf(target) : null) ?? (url !== null ? pathOf(url) : null),
    statusCode: firstInteger(attrs, HTTP_STATUS_CODE_ATTRIBUTES),
    serverAddress: firstString(attrs, SERVER_ADDRESS_ATTRIBUTES),
    serverPort: firstInteger(attrs, SERVER_PORT_ATTRIBUTES),
    errorType: firstString(attrs, [ERROR_TYPE_ATTRIBUTE]),
  };
}
