// Joins kernel socket failures with the operators' spans and emits the loss
// events of the public contract.
//
// Spans arrive seconds after they end, kernel events at once, so a kernel
// event waits in a bounded pending buffer until the spans covering it have
// arrived (a span of its process that ended after the failure, plus slack,
// was received: exporters send spans in the order they end) or until the
// correlation window has passed. Client spans that show a rejected status
// write (409/422/429/5xx, or a transport error) are losses of their own
// (cause http_rejected); they wait too, for their reconcile span and for any
// kernel event that describes the same failure — a kernel event and a span
// for one failure make one event, and the kernel event names the cause.
//
// All time decisions use the injected `now()`, and work happens only in
// addSocketEvent / addSpans / tick, so a recorded session replays to the same
// events in the same order.
import type { LossEvent, ProcessIdentity, SocketEvent } from "../model.ts";
import type { AgentMetrics } from "../sinks/metrics.ts";
import type { IndexedSpan } from "../sources/spans/indexedSpans.ts";
import { type ProcessQuery, type SpanIndex, spanKey, spanOfProcess } from "../sources/spans/spanIndex.ts";
import type { MonotonicClock } from "./monotonicClock.ts";
import {
  ancestryComplete,
  candidateOf,
  chooseCandidates,
  isRejectedStatusWrite,
  noticedBy,
  reconcileSpanOf,
  requestRefOf,
  shared,
  type SpanLookup,
} from "./spanVerdict.ts";
import { formatHostPort } from "../hostPort.ts";

export interface LossMeta {
  /** CLOCK_MONOTONIC ns of the kernel failure; null for a loss seen only in a span. */
  kernelTimeNs: bigint | null;
  /** Wall-clock ns of the failure (the event's `time`, at full precision). */
  wallTimeNs: bigint;
  /** The span the loss is attributed to (HTTP client span, else reconcile span); null unless correlation is `span`. */
  matchedSpan: { traceId: string; spanId: string } | null;
}

export interface CorrelatorOptions {
  /** The correlator adds received spans to it (addSpans) and queries it. */
  index: SpanIndex;
  metrics: AgentMetrics;
  /** Kernel CLOCK_MONOTONIC → wall clock. */
  clock: Pick<MonotonicClock, "toWallNs">;
  /** Node name for the `node` field. */
  node: string;
  /**
   * NSpid of a host pid, outermost first (sources/targets/pidNamespace.ts);
   * the last entry is the pid the process sees for itself, which is what
   * its spans carry as process.pid. Null when unknown.
   */
  nsPidsOf: (hostPid: number) => readonly number[] | null;
  onLoss: (event: LossEvent, meta: LossMeta) => void;
  /** Longest wait for spans, ms (default 10000). */
  windowMs?: number;
  /** A span covers a failure if open within this many ms of it (default 100). */
  slackMs?: number;
  /** Kernel events waiting for spans (default 1024). */
  pendingCapacity?: number;
  /** Span-seen losses waiting (default 1024). */
  pendingSpanLossCapacity?: number;
  /** Span ids remembered as already reported, for de-duplication (default 8192). */
  claimedCapacity?: number;
  /** Wall-clock ms; injected by replay and tests. */
  now?: () => number;
}

interface PendingKernel {
  event: SocketEvent;
  identity: ProcessIdentity;
  wallNs: bigint;
  query: ProcessQuery;
  deadlineMs: number;
}

interface PendingSpanLoss {
  span: IndexedSpan;
  deadlineMs: number;
}

const STAGE = "correlate";

export class Correlator {
  readonly #o: Required<CorrelatorOptions>;
  readonly #slackNs: bigint;
  readonly #lookup: SpanLookup;
  /** Arrival order; resolved entries leave from anywhere. */
  readonly #pending: PendingKernel[] = [];
  /** Keyed by span key; Map keeps arrival order. */
  readonly #pendingSpanLosses = new Map<string, PendingSpanLoss>();
  /** Span keys already part of an emitted event; oldest forgotten first. */
  readonly #claimed = new Set<string>();

  constructor(opts: CorrelatorOptions) {
    this.#o = {
      windowMs: 10_000,
      slackMs: 100,
      pendingCapacity: 1024,
      pendingSpanLossCapacity: 1024,
      claimedCapacity: 8192,
      now: Date.now,
      ...opts,
    };
    for (const key of ["windowMs", "slackMs", "pendingCapacity", "pendingSpanLossCapacity", "claimedCapacity"] as const) {
      const v = this.#o[key];
      if (!(Number.isFinite(v) && v >= 0)) throw new RangeError(`correlator ${key}: expected a number >= 0, got ${v}`);
    }
    this.#slackNs = BigInt(Math.round(this.#o.slackMs * 1e6));
    this.#lookup = (traceId, spanId) => this.#o.index.get(traceId, spanId);
    this.#o.metrics.queueLength.set({ queue: "correlatorPending" }, 0);
  }

  get pendingCount(): number {
    return this.#pending.length + this.#pendingSpanLosses.size;
  }

  addSocketEvent(event: SocketEvent, identity: ProcessIdentity): void {
    if (this.#pending.length >= this.#o.pendingCapacity) {
      // Never lose the event: emit the oldest with what is known now, and count the cut wait.
      const oldest = this.#pending.shift();
      if (oldest !== undefined) {
        this.#o.metrics.eventsDropped.inc({ stage: STAGE, reason: "capacity" });
        this.#emitKernel(oldest);
      }
    }
    this.#pending.push({
      event,
      identity,
      wallNs: this.#o.clock.toWallNs(event.kernelTimeNs),
      query: this.#queryFor(event.pid, identity),
      deadlineMs: this.#o.now() + this.#o.windowMs,
    });
    this.tick();
  }

  /** Adds spans to the index, notes rejected status writes, and resolves what became ready. */
  addSpans(spans: readonly IndexedSpan[]): void {
    this.#o.index.add(spans);
    const deadlineMs = this.#o.now() + this.#o.windowMs;
    for (const span of spans) {
      if (span.kind !== "client" || !isRejectedStatusWrite(span)) continue;
      const key = spanKey(span.traceId, span.spanId);
      if (this.#claimed.has(key) || this.#pendingSpanLosses.has(key)) continue;
      if (this.#pendingSpanLosses.size >= this.#o.pendingSpanLossCapacity) {
        const [oldestKey, oldest] = this.#pendingSpanLosses.entries().next().value ?? [];
        if (oldestKey !== undefined && oldest !== undefined) {
          this.#pendingSpanLosses.delete(oldestKey);
          this.#o.metrics.eventsDropped.inc({ stage: STAGE, reason: "capacity" });
          this.#emitSpanLoss(oldest);
        }
      }
      this.#pendingSpanLosses.set(key, { span, deadlineMs });
    }
    this.tick();
  }

  /** Emits every pending loss that is ready or past its deadline. Call periodically. */
  tick(): void {
    const now = this.#o.now();
    this.#o.index.evictExpired();
    for (let i = 0; i < this.#pending.length; ) {
      const entry = this.#pending[i];
      if (entry !== undefined && (now >= entry.deadlineMs || this.#spansArrived(entry))) {
        this.#pending.splice(i, 1);
        this.#emitKernel(entry);
      } else {
        i++;
      }
    }
    for (const [key, entry] of this.#pendingSpanLosses) {
      if (this.#claimed.has(key)) {
        this.#pendingSpanLosses.delete(key);
        continue;
      }
      const expired = now >= entry.deadlineMs;
      if (!expired && (!ancestryComplete(entry.span, this.#lookup) || this.#kernelEventMayClaim(entry.span))) continue;
      this.#pendingSpanLosses.delete(key);
      this.#emitSpanLoss(entry);
    }
    this.#o.metrics.queueLength.set({ queue: "correlatorPending" }, this.pendingCount);
  }

  /** Emits everything pending now (shutdown, end of a replay). */
  flush(): void {
    for (let entry = this.#pending.shift(); entry !== undefined; entry = this.#pending.shift()) {
      this.#emitKernel(entry);
    }
    for (const [key, entry] of this.#pendingSpanLosses) {
      this.#pendingSpanLosses.delete(key);
      if (!this.#claimed.has(key)) this.#emitSpanLoss(entry);
    }
    this.#o.metrics.queueLength.set({ queue: "correlatorPending" }, 0);
  }

  /** Calls tick() every `intervalMs` until the returned function is called. Does not keep the process alive. */
  startTicking(intervalMs: number): () => void {
    const timer = setInterval(() => this.tick(), intervalMs);
    timer.unref();
    return () => clearInterval(timer);
  }

  #queryFor(hostPid: number, identity: ProcessIdentity): ProcessQuery {
    const nsPids = this.#o.nsPidsOf(hostPid);
    const inPod = identity.pod !== "";
    // Outside containers the pid a process sees is the host pid; inside a pod
    // without a known NSpid, only the pod identifies its spans.
    const nsPid = nsPids !== null && nsPids.length > 0 ? (nsPids[nsPids.length - 1] ?? null) : inPod ? null : hostPid;
    return { nsPid, namespace: identity.namespace || null, pod: identity.pod || null };
  }

  #spansArrived(entry: PendingKernel): boolean {
    const latest = this.#o.index.latestEndNs(entry.query);
    return latest !== null && latest > entry.wallNs + this.#slackNs;
  }

  /** A pending kernel event of the span's process near the span's time may still claim it. */
  #kernelEventMayClaim(span: IndexedSpan): boolean {
    if (span.request?.statusCode !== null) return false; // answered: no kernel event describes it
    return this.#pending.some(
      (p) =>
        spanOfProcess(span, p.query) &&
        span.startNs - this.#slackNs <= p.wallNs &&
        p.wallNs <= span.endNs + this.#slackNs,
    );
  }

  #claim(span: IndexedSpan): void {
    const key = spanKey(span.traceId, span.spanId);
    this.#claimed.delete(key);
    this.#claimed.add(key);
    if (this.#claimed.size > this.#o.claimedCapacity) {
      const oldest = this.#claimed.values().next().value;
      if (oldest !== undefined) {
        this.#claimed.delete(oldest);
        this.#o.metrics.eventsDropped.inc({ stage: "correlate_dedup", reason: "capacity" });
      }
    }
    this.#pendingSpanLosses.delete(key);
  }

  #emitKernel(entry: PendingKernel): void {
    const { event, identity, wallNs } = entry;
    const open = this.#o.index.openAt(entry.query, wallNs, this.#slackNs);
    const candidates = chooseCandidates(open, { wallNs, tid: event.tid, apiserver: event.apiserver });
    for (const span of candidates) if (span.kind === "client") this.#claim(span);

    const base: LossEvent = {
      kind: "status_write_lost",
      time: formatWallNs(wallNs),
      node: this.#o.node,
      namespace: identity.namespace || null,
      pod: identity.pod || null,
      container: identity.container || null,
      process: identity.process || event.process || null,
      pid: event.pid,
      tid: event.tid,
      cause: event.cause,
      syscall: event.syscall,
      errno: event.errno,
      ret: event.ret,
      bytes: event.bytes,
      apiserver: event.apiserver || null,
      noticed: "unknown",
      correlation: "none",
      trace_id: null,
      span_id: null,
      reconcile: null,
      request: null,
      unanswered_bytes: event.unansweredBytes,
      unanswered_for_ms: event.unansweredForMs,
      retransmits: event.retransmits,
    };
    let matchedSpan: LossMeta["matchedSpan"] = null;
    const [only] = candidates;
    if (candidates.length === 1 && only !== undefined) {
      const reconcile = reconcileSpanOf(only, this.#lookup);
      Object.assign(base, {
        correlation: "span",
        trace_id: only.traceId,
        span_id: only.spanId,
        reconcile: reconcile?.reconcile ?? null,
        request: requestRefOf(only),
        noticed: noticedBy(only, reconcile),
      } satisfies Partial<LossEvent>);
      matchedSpan = { traceId: only.traceId, spanId: only.spanId };
    } else if (candidates.length > 1) {
      const listed = candidates.map((s) => candidateOf(s, this.#lookup));
      Object.assign(base, {
        correlation: "ambiguous",
        trace_id: shared(listed.map((c) => c.trace_id)),
        reconcile: shared(listed.map((c) => c.reconcile)),
        request: shared(listed.map((c) => c.request)),
        noticed: shared(candidates.map((s) => noticedBy(s, reconcileSpanOf(s, this.#lookup)))) ?? "unknown",
        candidates: listed,
      } satisfies Partial<LossEvent>);
    }
    this.#emit(base, { kernelTimeNs: event.kernelTimeNs, wallTimeNs: wallNs, matchedSpan });
  }

  #emitSpanLoss(entry: PendingSpanLoss): void {
    const { span } = entry;
    this.#claim(span);
    const reconcile = reconcileSpanOf(span, this.#lookup);
    const req = span.request;
    const event: LossEvent = {
      kind: "status_write_lost",
      time: formatWallNs(span.endNs),
      node: this.#o.node,
      // Seen only in spans: what the span says of its sender. Its process.pid
      // is the pid inside the pod, not the host pid, so it is not reported as one.
      namespace: span.process.namespace,
      pod: span.process.podName,
      container: null,
      process: null,
      pid: null,
      tid: null,
      cause: "http_rejected",
      syscall: null,
      errno: null,
      ret: null,
      bytes: null,
      apiserver: formatServer(req?.serverAddress ?? null, req?.serverPort ?? null),
      noticed: noticedBy(span, reconcile),
      correlation: "span",
      trace_id: span.traceId,
      span_id: span.spanId,
      reconcile: reconcile?.reconcile ?? null,
      request: requestRefOf(span),
      unanswered_bytes: null,
      unanswered_for_ms: null,
      retransmits: null,
    };
    this.#emit(event, {
      kernelTimeNs: null,
      wallTimeNs: span.endNs,
      matchedSpan: { traceId: span.traceId, spanId: span.spanId },
    });
  }

  #emit(event: LossEvent, meta: LossMeta): void {
    const latencyS = (this.#o.now() * 1e6 - Number(meta.wallTimeNs)) / 1e9;
    if (latencyS >= 0) this.#o.metrics.detectionLatency.observe(latencyS);
    this.#o.onLoss(event, meta);
  }
}

/** RFC 3339 UTC with microseconds, as the event schema shows. */
export function formatWallNs(wallNs: bigint): string {
  const ms = wallNs / 1_000_000n;
  const micros = (wallNs % 1_000_000_000n) / 1_000n;
  const iso = new Date(Number(ms)).toISOString(); // 2026-12-02T15:04:05.123Z
  return `${iso.slice(0, 19)}.${micros.toString().padStart(6, "0")}Z`;
}

function formatServer(address: string | null, port: number | null): string | null {
  if (address === null || port === null) return null;
  return formatHostPort(address, port);
}
