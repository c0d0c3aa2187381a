// Pure rules that turn "the spans of a process open at the failure" into a
// verdict: which span the loss belongs to, its reconcile, whether the
// operator noticed. Kept apart from the buffering in correlator.ts so each
// rule can be read, and tested, on its own.
import { parseApiPath } from "../apiPath.ts";
import type { CandidateSpan, KernelRequest, Noticed, RequestRef } from "../model.ts";
import type { IndexedSpan } from "../sources/spans/indexedSpans.ts";
import { isStatusWrite, isWrite, stripQuery } from "../sources/spans/spanAttributes.ts";
import { splitHostPort, unbracketHost } from "../hostPort.ts";

/** Looks a span up by id; the span index's `get`. */
export type SpanLookup = (traceId: string, spanId: string) => IndexedSpan | undefined;

/** Parent hops followed to find a reconcile span; real traces are shallow. */
const MAX_PARENT_HOPS = 32;

/** HTTP statuses that mean the apiserver refused a status write. */
export function isRejectedStatus(code: number): boolean {
  return code === 409 || code === 422 || code === 429 || code >= 500;
}

/** The span recorded an error: status ERROR, an error.type, or an HTTP status >= 400. */
function spanRecordedError(span: IndexedSpan): boolean {
  if (span.status === "error") return true;
  if (span.request?.errorType != null) return true;
  return span.request?.statusCode != null && span.request.statusCode >= 400;
}

/** A client span for a status write that the apiserver refused or that died in transport. */
export function isRejectedStatusWrite(span: IndexedSpan): boolean {
  const req = span.request;
  if (req === null || !isStatusWrite(req.method, req.path)) return false;
  if (req.statusCode !== null) return isRejectedStatus(req.statusCode);
  return span.status === "error" || req.errorType !== null;
}

/** The nearest reconcile span: the span itself or an ancestor held in the index. */
export function reconcileSpanOf(span: IndexedSpan, lookup: SpanLookup): IndexedSpan | null {
  let current: IndexedSpan | undefined = span;
  for (let hops = 0; current !== undefined && hops <= MAX_PARENT_HOPS; hops++) {
    if (current.reconcile !== null) return current;
    if (current.parentSpanId === null) return null;
    current = lookup(current.traceId, current.parentSpanId);
  }
  return null;
}

/** True when the walk to a reconcile span or to the trace root is complete in the index. */
export function ancestryComplete(span: IndexedSpan, lookup: SpanLookup): boolean {
  let current: IndexedSpan | undefined = span;
  for (let hops = 0; current !== undefined && hops <= MAX_PARENT_HOPS; hops++) {
    if (current.reconcile !== null || current.parentSpanId === null) return true;
    current = lookup(current.traceId, current.parentSpanId);
  }
  return false;
}

export function requestRefOf(span: IndexedSpan): RequestRef | null {
  if (span.request === null) return null;
  return { method: span.request.method, path: span.request.path, status_code: span.request.statusCode };
}

/**
 * Whether the operator noticed: judged on the reconcile span when there is
 * one, because that is the operator's own verdict on its work (an HTTP
 * client span records every transport error, whether the operator then
 * handles it or swallows it). A span whose parent has not arrived may still
 * have a reconcile above it: "unknown", never a guess from the client span.
 * Only a span with no reconcile above it at all is judged on itself.
 */
export function noticedOf(matched: IndexedSpan, lookup: SpanLookup): Noticed {
  const reconcile = reconcileSpanOf(matched, lookup);
  if (reconcile !== null) return spanRecordedError(reconcile) ? "yes" : "no";
  if (!ancestryComplete(matched, lookup)) return "unknown";
  return spanRecordedError(matched) ? "yes" : "no";
}

/** Whether an address and port is one of the apiserver endpoints the agent filters on (configured or discovered). */
export type IsApiserver = (host: string, port: number) => boolean;

/**
 * What a kernel event's apiserver peer ("addr:port", "[v6]:port") says about
 * a span's server. With socket-level load balancing the span names the
 * Service ClusterIP while the kernel sees the backend: two addresses that are
 * both apiserver endpoints are the same apiserver.
 */
function sameServer(span: IndexedSpan, apiserver: string, isApiserver: IsApiserver = () => false): boolean {
  const req = span.request;
  if (req === null) return true;
  const peer = splitHostPort(apiserver);
  if (peer === null) return true;
  // Only an address literal can be compared; a DNS name may resolve to this peer.
  if (req.serverAddress === null || !isIpLiteral(req.serverAddress)) return req.serverPort === null || req.serverPort === peer.port;
  const host = unbracketHost(req.serverAddress);
  const port = req.serverPort ?? peer.port;
  if (host.toLowerCase() === peer.host.toLowerCase() && port === peer.port) return true;
  return isApiserver(host, port) && isApiserver(peer.host, peer.port);
}

function isIpLiteral(address: string): boolean {
  return /^\d{1,3}(\.\d{1,3}){3}$/.test(address) || unbracketHost(address).includes(":");
}

interface KernelFailure {
  /** Wall-clock ns of the failure. */
  wallNs: bigint;
  tid: number;
  apiserver: string;
}

/**
 * Chooses the spans a kernel failure belongs to among the spans of its
 * process open at that time. Client requests still unanswered come first
 * (a request that got an HTTP status arrived, so it is not the one lost),
 * ranked: writes over reads, status writes over other writes, the failing
 * thread's span over others. Without such a client span, the open
 * reconcile spans are the candidates. Ties are kept: the caller reports
 * them as ambiguous instead of picking one.
 */
export function chooseCandidates(open: readonly IndexedSpan[], failure: KernelFailure, isApiserver?: IsApiserver): IndexedSpan[] {
  const clients = open.filter(
    (s) => s.kind === "client" && s.request !== null && s.request.statusCode === null && sameServer(s, failure.apiserver, isApiserver),
  );
  if (clients.length > 0) {
    return best(clients, (s) => [
      isWrite(s.request?.method ?? null) ? 1 : 0,
      isStatusWrite(s.request?.method ?? null, s.request?.path ?? null) ? 1 : 0,
      s.threadId === failure.tid ? 1 : 0,
    ]);
  }
  const reconciles = open.filter((s) => s.reconcile !== null);
  return best(reconciles, (s) => [s.threadId === failure.tid ? 1 : 0]);
}

/**
 * As chooseCandidates, for a failure whose request the kernel read (Go's
 * HTTP/2 client): matched by identity, not by time alone. A client span must
 * be the same request (method, path, and the same answer: none, or the
 * status the kernel saw); a reconcile span must be of the object the path
 * names, or name no object at all.
 */
export function chooseForRequest(open: readonly IndexedSpan[], failure: KernelFailure, request: KernelRequest, isApiserver?: IsApiserver): IndexedSpan[] {
  const path = stripQuery(request.path);
  const clients = open.filter(
    (s) =>
      s.kind === "client" &&
      s.request !== null &&
      s.request.method?.toUpperCase() === request.method.toUpperCase() &&
      s.request.path !== null &&
      stripQuery(s.request.path) === path &&
      (s.request.statusCode === null || s.request.statusCode === request.statusCode) &&
      sameServer(s, failure.apiserver, isApiserver),
  );
  if (clients.length > 0) return best(clients, (s) => [s.request?.statusCode === request.statusCode ? 1 : 0, s.threadId === failure.tid ? 1 : 0]);
  const object = parseApiPath(path);
  const reconciles = open.filter((s) => {
    const r = s.reconcile;
    if (r === null) return false;
    if (object === null || r.name === null) return true;
    return r.name === object.name && (r.namespace === null || r.namespace === object.namespace);
  });
  return best(reconciles, (s) => [s.reconcile?.name === object?.name ? 1 : 0, s.threadId === failure.tid ? 1 : 0]);
}

/** The event's request as the kernel read it, with the object its path names. */
export function kernelRequestRef(request: KernelRequest): RequestRef {
  return {
    method: request.method,
    path: request.path,
    status_code: request.statusCode,
    stream_id: request.streamId,
    object: parseApiPath(request.path),
  };
}

function best(spans: IndexedSpan[], score: (s: IndexedSpan) => number[]): IndexedSpan[] {
  let top: IndexedSpan[] = [];
  let topScore: number[] | null = null;
  for (const span of spans) {
    const s = score(span);
    const cmp = topScore === null ? 1 : compare(s, topScore);
    if (cmp > 0) {
      top = [span];
      topScore = s;
    } else if (cmp === 0) {
      top.push(span);
    }
  }
  return top;
}

function compare(a: number[], b: number[]): number {
  for (let i = 0; i < a.length; i++) {
    const d = (a[i] ?? 0) - (b[i] ?? 0);
    if (d !== 0) return d;
  }
  return 0;
}

export function candidateOf(span: IndexedSpan, lookup: SpanLookup): CandidateSpan {
  const reconcile = reconcileSpanOf(span, lookup);
  return {
    trace_id: span.traceId,
    span_id: span.spanId,
    reconcile: reconcile?.reconcile ?? null,
    request: requestRefOf(span),
  };
}

/** The value all items share, or null when they differ (an ambiguous verdict invents nothing). */
export function shared<T>(values: readonly T[]): T | null {
  if (values.length === 0) return null;
  const first = JSON.stringify(values[0]);
  return values.every((v) => JSON.stringify(v) === first) ? (values[0] ?? null) : null;
}

