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
// A process that has sent no span lately is not made to wait: its losses go
// out at once, as nobody will explain them. One lost request is one event:
// N status writes on one dead connection are N events, a later kernel echo
// of a death already reported folds into it, and a span that arrives after
// its kernel loss went out alone does not report it again. A rejected write
// that the client retried and then completed is a retry, not a loss.
//
// A kernel event may carry the request itself (Go's HTTP/2 probe reads it):
// it is then matched to spans by identity (same request, same object), a
// refusal among them waits for its retry, and span losses of such a process
// wait briefly for the kernel's verdict, which comes ordered and so a little
// later than the operator's spans.
//
// All time decisions use the injected `now()`, and work happens only in
// addSocketEvent / addSpans / tick, so a recorded session replays to the same
// events in the same order.
import type { KernelRequest, LossEvent, ProcessIdentity, SocketEvent } from "../model.ts";
import { isStatusWrite, stripQuery } from "../sources/spans/spanAttributes.ts";
import type { AgentMetrics } from "../telemetry/metrics.ts";
import type { IndexedSpan } from "../sources/spans/indexedSpans.ts";
import { type ProcessQuery, sentBy, type SpanIndex, spanKey, spanOfProcess } from "../sources/spans/spanIndex.ts";
import type { MonotonicClock } from "./monotonicClock.ts";
import {
  ancestryComplete,
  candidateOf,
  chooseCandidates,
  chooseForRequest,
  isRejectedStatusWrite,
  type IsApiserver,
  kernelRequestRef,
  noticedOf,
  reconcileSpanOf,
  requestRefOf,
  shared,
  type SpanLookup,
} from "./spanVerdict.ts";
import { BoundedMap, BoundedSet } from "../boundedMap.ts";
import type { DropStage } from "../vocabulary/drops.ts";
import { formatHostPort } from "../hostPort.ts";

export interface LossMeta {
  /** CLOCK_MONOTONIC ns of the kernel failure; null for a loss seen only in a span. */
  kernelTimeNs: bigint | null;
  /** Wall-clock ns of the failure (the event's `time`, at full precision). */
  wallTimeNs: bigint;
  /** The span the loss is attributed to (HTTP client span, else reconcile span); null unless correlation is `span`. */
  matchedSpan: { traceId: string; spanId: string } | null;
}

interface CorrelatorOptions {
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
  /** Wall-clock ms since which the host pid is a target; null when unknown. A process this young may not have exported its first span yet. */
  targetSinceMs?: (hostPid: number) => number | null;
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
  /** Span-sending processes remembered (default 4096), and for how long after their last span (default 24 h). */
  senderCapacity?: number;
  senderMemoryMs?: number;
  /**
   * How long a new target counts as a span sender before any span of it
   * arrived (default 60 s): exporters batch (the SDKs' default is every 5 s),
   * so an operator's first spans often arrive after its first failure.
   */
  senderGraceMs?: number;
  /** Whether an address is an apiserver endpoint (configured or discovered); spans naming the Service match its backends. */
  isApiserver?: IsApiserver;
  /**
   * How long after a failing span ends a kernel event describing it may still
   * arrive (default 1 s): the Go probe orders its lines before it judges, and
   * bpftrace hands its output over in batches, so its verdict can come after
   * the operator exported the span.
   */
  kernelLagMs?: number;
  /**
   * The same for any process's socket-path losses (default 0): with Go
   * probes, each waits for the Go lines of its time before it is judged
   * (goRequests.ts), also a process no Go program follows yet.
   */
  socketLagMs?: number;
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
  /** Keyed by span key, in arrival order; past capacity the oldest goes out at once, without waiting for its kernel event. */
  readonly #pendingSpanLosses: BoundedMap<string, PendingSpanLoss>;
  /** Span keys already part of an emitted event; oldest forgotten first. */
  readonly #claimed: BoundedSet<string>;
  /** Senders of spans by resource identity → when their latest span arrived; oldest forgotten first. */
  readonly #senders: BoundedMap<string, { process: IndexedSpan["process"]; lastMs: number }>;
  /** Kernel losses emitted without a span: a span of them arriving late is not a second loss. */
  readonly #uncorrelated: { query: ProcessQuery; wallNs: bigint; request: KernelRequest | null }[] = [];
  /** Status writes answered 2xx, by trace, parent and target → latest start: a retry that made it. */
  readonly #succeeded: BoundedMap<string, bigint>;
  /** Status writes a request-level probe saw answered 2xx, by host pid, method and path → latest kernel time. */
  readonly #kernelSucceeded: BoundedMap<string, bigint>;
  /** Processes whose requests a request-level probe reads (host pid → span query): their span losses wait kernelLagMs. */
  readonly #requestLevel: BoundedMap<number, ProcessQuery>;
  /** Told when a tick leaves losses waiting: whoever ticks should come back soon. */
  #onWaiting: () => void = () => {};

  constructor(opts: CorrelatorOptions) {
    this.#o = {
      windowMs: 10_000,
      slackMs: 100,
      pendingCapacity: 1024,
      pendingSpanLossCapacity: 1024,
      claimedCapacity: 8192,
      senderCapacity: 4096,
      senderMemoryMs: 86_400_000,
      senderGraceMs: 60_000,
      isApiserver: () => false,
      kernelLagMs: 1000,
      socketLagMs: 0,
      targetSinceMs: () => null,
      now: Date.now,
      ...opts,
    };
    for (const key of ["windowMs", "slackMs", "pendingCapacity", "pendingSpanLossCapacity", "claimedCapacity", "senderCapacity", "senderMemoryMs", "senderGraceMs", "kernelLagMs", "socketLagMs"] as const) {
      const v = this.#o[key];
      if (!(Number.isFinite(v) && v >= 0)) throw new RangeError(`correlator ${key}: expected a number >= 0, got ${v}`);
    }
    this.#slackNs = BigInt(Math.round(this.#o.slackMs * 1e6));
    const { metrics, pendingSpanLossCapacity, claimedCapacity, senderCapacity } = this.#o;
    const dropped = (stage: DropStage) => () => metrics.eventsDropped.inc({ stage, reason: "capacity" });
    this.#pendingSpanLosses = new BoundedMap(pendingSpanLossCapacity, (_key, oldest) => {
      dropped(STAGE)();
      this.#emitSpanLoss(oldest);
    });
    this.#claimed = new BoundedSet(claimedCapacity, dropped("correlate_dedup"));
    this.#senders = new BoundedMap(senderCapacity, dropped("correlate_senders"));
    this.#succeeded = new BoundedMap(claimedCapacity, dropped("correlate_retries"));
    this.#kernelSucceeded = new BoundedMap(claimedCapacity, dropped("correlate_retries"));
    // Forgotten, a process's span losses no longer wait for its request-level verdicts.
    this.#requestLevel = new BoundedMap(senderCapacity, dropped("correlate_senders"));
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
    if (event.request) this.#noteRequestLevel(event.pid, identity);
    const entry: PendingKernel = {
      event,
      identity,
      wallNs: this.#o.clock.toWallNs(event.kernelTimeNs),
      query: this.#queryFor(event.pid, identity),
      deadlineMs: this.#o.now() + this.#o.windowMs,
    };
    // Nobody will explain it: waiting would only hide it for the window. A
    // process that became a target lately gets the benefit of the doubt: its
    // first spans may still be in its exporter's batch.
    const since = this.#o.targetSinceMs(event.pid);
    const young = since !== null && this.#o.now() - since < this.#o.senderGraceMs;
    // A refused write the kernel read waits anyway: for its retry.
    const rejection = event.request?.statusCode != null;
    if (!young && !rejection && !this.#sendsSpans(entry.query)) {
      this.#emitKernel(entry);
      return;
    }
    this.#pending.push(entry);
    this.tick();
  }

  /** A status write a request-level probe saw answered 2xx: a pending refusal of the same write becomes a retry. */
  addKernelSuccess(event: SocketEvent, identity: ProcessIdentity): void {
    const key = kernelWriteKey(event);
    if (key === null) return;
    this.#noteRequestLevel(event.pid, identity);
    this.#kernelSucceeded.set(key, event.kernelTimeNs);
    this.tick();
  }

  /**
   * A write that Go sent again by itself (GOAWAY, REFUSED_STREAM): a retry,
   * counted once; the span of the refused try is not a loss either.
   */
  addKernelRetry(event: SocketEvent, identity: ProcessIdentity, code: string): void {
    this.#o.metrics.statusWriteRetries.inc({ namespace: identity.namespace, pod: identity.pod, code });
    this.#rememberUncorrelated({ query: this.#queryFor(event.pid, identity), wallNs: this.#o.clock.toWallNs(event.kernelTimeNs), event });
  }

  /** Adds spans to the index, notes rejected status writes, and resolves what became ready. */
  addSpans(spans: readonly IndexedSpan[]): void {
    this.#o.index.add(spans);
    const deadlineMs = this.#o.now() + this.#o.windowMs;
    for (const span of spans) {
      this.#rememberSender(span);
      if (span.kind === "client") this.#rememberSuccess(span);
    }
    for (const span of spans) {
      if (span.kind !== "client" || !isRejectedStatusWrite(span)) continue;
      const key = spanKey(span.traceId, span.spanId);
      if (this.#claimed.has(key) || this.#pendingSpanLosses.has(key)) continue;
      if (this.#explainsUncorrelatedLoss(span)) {
        this.#claim(span);
        continue;
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
      if (entry !== undefined && this.#kernelRetried(entry)) {
        this.#pending.splice(i, 1);
        this.#foldKernelRetry(entry);
      } else if (entry !== undefined && (now >= entry.deadlineMs || (this.#settledWithoutRetry(entry) && (this.#spansArrived(entry) || this.#requestSpanArrived(entry)) && this.#verdictSettled(entry)))) {
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
      const endMs = Number(entry.span.endNs / 1_000_000n);
      const kernelMayFollow = now < endMs + this.#o.socketLagMs || (now < endMs + this.#o.kernelLagMs && this.#readByRequestProbe(entry.span));
      if (!expired && (kernelMayFollow || !ancestryComplete(entry.span, this.#lookup))) continue;
      const describedBy = this.#kernelEventsThatMayClaim(entry.span);
      if (!expired && describedBy.length > 0) continue;
      if (describedBy.length > 0) {
        // Expired, and the kernel's event of the same failure came later (it
        // waited for the Go lines of its time): it speaks for the span, now.
        for (const kernel of describedBy) {
          this.#pending.splice(this.#pending.indexOf(kernel), 1);
          this.#emitKernel(kernel);
        }
        if (this.#claimed.has(key)) {
          this.#pendingSpanLosses.delete(key);
          continue;
        }
      }
      this.#pendingSpanLosses.delete(key);
      if (this.#retriedAndAnswered(entry.span)) {
        this.#claim(entry.span);
        this.#countRetry(entry.span);
        continue;
      }
      this.#emitSpanLoss(entry);
    }
    this.#o.metrics.queueLength.set({ queue: "correlatorPending" }, this.pendingCount);
    if (this.pendingCount > 0) this.#onWaiting();
  }

  /** Emits everything pending now (shutdown, end of a replay). */
  flush(): void {
    for (let entry = this.#pending.shift(); entry !== undefined; entry = this.#pending.shift()) {
      this.#emitKernel(entry);
    }
    for (const [key, entry] of this.#pendingSpanLosses) {
      this.#pendingSpanLosses.delete(key);
      if (this.#claimed.has(key)) continue;
      if (this.#retriedAndAnswered(entry.span)) this.#countRetry(entry.span);
      else this.#emitSpanLoss(entry);
    }
    this.#o.metrics.queueLength.set({ queue: "correlatorPending" }, 0);
  }

  /** `listener` is told when losses are left waiting after a tick (the graph's clock wakes on it). */
  onWaiting(listener: () => void): void {
    this.#onWaiting = listener;
  }

  /**
   * A refusal the kernel read, answered 2xx on a later try of the same write:
   * seen by the kernel, or in the spans of its reconcile (which may come first).
   */
  #kernelRetried(entry: PendingKernel): boolean {
    const key = kernelWriteKey(entry.event);
    if (key === null || entry.event.request?.statusCode == null) return false;
    const answeredAt = this.#kernelSucceeded.get(key);
    if (answeredAt !== undefined && answeredAt > entry.event.kernelTimeNs) return true;
    return this.#candidatesOf(entry).candidates.some((span) => span.kind === "client" && this.#retriedAndAnswered(span));
  }

  /**
   * Without spans nothing tells when a refused write's retries are over: it
   * waits the whole window. With spans, the reconcile span ending settles it.
   */
  #settledWithoutRetry(entry: PendingKernel): boolean {
    return entry.event.request?.statusCode == null || this.#sendsSpans(entry.query);
  }

  #foldKernelRetry(entry: PendingKernel): void {
    for (const span of this.#candidatesOf(entry).candidates) if (span.kind === "client") this.#claim(span);
    this.addKernelRetry(entry.event, entry.identity, String(entry.event.request?.statusCode));
  }

  /** A request-level probe now reads this process's requests: its span losses wait kernelLagMs for its verdicts. */
  noteRequestLevel(hostPid: number, identity: ProcessIdentity): void {
    this.#noteRequestLevel(hostPid, identity);
  }

  #noteRequestLevel(hostPid: number, identity: ProcessIdentity): void {
    this.#requestLevel.set(hostPid, this.#queryFor(hostPid, identity));
  }

  /** The span's process has its requests read by a request-level probe (Go's HTTP/2 client). */
  #readByRequestProbe(span: IndexedSpan): boolean {
    for (const query of this.#requestLevel.values()) if (spanOfProcess(span, query)) return true;
    return false;
  }

  #queryFor(hostPid: number, identity: ProcessIdentity): ProcessQuery {
    const nsPids = this.#o.nsPidsOf(hostPid);
    const inPod = identity.pod !== "";
    // Outside containers the pid a process sees is the host pid; inside a pod
    // without a known NSpid, only the pod identifies its spans.
    const nsPid = nsPids !== null && nsPids.length > 0 ? (nsPids[nsPids.length - 1] ?? null) : inPod ? null : hostPid;
    return { nsPid, hostPid, namespace: identity.namespace || null, pod: identity.pod || null };
  }

  /** A request the kernel read is matched by identity: once the span of that very request is in, nothing later can change the match. */
  #requestSpanArrived(entry: PendingKernel): boolean {
    return entry.event.request !== undefined && this.#candidatesOf(entry).candidates.some((span) => span.kind === "client");
  }

  #spansArrived(entry: PendingKernel): boolean {
    const latest = this.#o.index.latestEndNs(entry.query);
    return latest !== null && latest > entry.wallNs + this.#slackNs;
  }

  /** Every span the verdict would name has its reconcile (or its root) in the index: noticed can be judged. */
  #verdictSettled(entry: PendingKernel): boolean {
    return this.#candidatesOf(entry).candidates.every((span) => ancestryComplete(span, this.#lookup));
  }

  #candidatesOf(entry: PendingKernel): { candidates: IndexedSpan[]; allClaimed: boolean } {
    const open = this.#o.index.openAt(entry.query, entry.wallNs, this.#slackNs);
    const failure = { wallNs: entry.wallNs, tid: entry.event.tid, apiserver: entry.event.apiserver };
    const request = entry.event.request;
    const chosen = request ? chooseForRequest(open, failure, request, this.#o.isApiserver) : chooseCandidates(open, failure, this.#o.isApiserver);
    if (!chosen.some((s) => s.kind === "client")) return { candidates: chosen, allClaimed: false };
    // Requests an earlier event already reported are not lost twice; all of them: this event is its echo.
    const candidates = chosen.filter((s) => !this.#claimed.has(spanKey(s.traceId, s.spanId)));
    return { candidates, allClaimed: candidates.length === 0 };
  }

  #rememberSender(span: IndexedSpan): void {
    const p = span.process;
    const key = `${p.hostPid ?? ""}|${p.pid ?? ""}|${p.namespace ?? ""}|${p.podName ?? ""}`;
    this.#senders.set(key, { process: p, lastMs: this.#o.now() });
  }

  #sendsSpans(query: ProcessQuery): boolean {
    const since = this.#o.now() - this.#o.senderMemoryMs;
    for (const { process, lastMs } of this.#senders.values()) if (lastMs >= since && sentBy(process, query)) return true;
    return false;
  }

  #rememberSuccess(span: IndexedSpan): void {
    const req = span.request;
    if (req?.statusCode == null || req.statusCode < 200 || req.statusCode > 299 || !isStatusWrite(req.method, req.path)) return;
    const key = retryKey(span);
    const latest = this.#succeeded.get(key);
    this.#succeeded.set(key, latest !== undefined && latest > span.startNs ? latest : span.startNs);
  }

  /** The same write, in the same reconcile, was sent again after this attempt and answered 2xx. */
  #retriedAndAnswered(span: IndexedSpan): boolean {
    const answeredAt = this.#succeeded.get(retryKey(span));
    return answeredAt !== undefined && answeredAt >= span.endNs - this.#slackNs;
  }

  #countRetry(span: IndexedSpan): void {
    const code = span.request?.statusCode;
    this.#o.metrics.statusWriteRetries.inc({
      namespace: span.process.namespace ?? "",
      pod: span.process.podName ?? "",
      code: code == null ? "none" : String(code),
    });
  }

  /**
   * A failure's span, late: the kernel loss (or retry) it describes already
   * went out without it. An answered span only matches a kernel verdict on
   * the same request with the same status.
   */
  #explainsUncorrelatedLoss(span: IndexedSpan): boolean {
    const code = span.request?.statusCode ?? null;
    const i = this.#uncorrelated.findIndex(
      (u) =>
        (code === null || (u.request?.statusCode === code && samePath(u.request, span))) &&
        spanOfProcess(span, u.query) &&
        span.startNs - this.#slackNs <= u.wallNs &&
        u.wallNs <= span.endNs + this.#slackNs,
    );
    if (i < 0) return false;
    this.#uncorrelated.splice(i, 1);
    return true;
  }

  /** A pending kernel event of the span's process near the span's time may still claim it. */
  #kernelEventsThatMayClaim(span: IndexedSpan): PendingKernel[] {
    const code = span.request?.statusCode ?? null;
    // An answered span is described only by a kernel event that read the same answer (Go's HTTP/2 probe).
    return this.#pending.filter(
      (p) =>
        (code === null || (p.event.request?.statusCode === code && samePath(p.event.request, span))) &&
        spanOfProcess(span, p.query) &&
        span.startNs - this.#slackNs <= p.wallNs &&
        p.wallNs <= span.endNs + this.#slackNs,
    );
  }

  #claim(span: IndexedSpan): void {
    const key = spanKey(span.traceId, span.spanId);
    this.#claimed.add(key);
    this.#pendingSpanLosses.delete(key);
  }

  #emitKernel(entry: PendingKernel): void {
    const { event, identity, wallNs } = entry;
    const { candidates, allClaimed } = this.#candidatesOf(entry);
    if (allClaimed) return; // counted as a syscall error or connection loss already; reported once
    const meta = { kernelTimeNs: event.kernelTimeNs, wallTimeNs: wallNs };
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
      request: event.request ? kernelRequestRef(event.request) : null,
      unanswered_bytes: event.unansweredBytes,
      unanswered_for_ms: event.unansweredForMs,
      retransmits: event.retransmits,
      ...(event.verdict ? { verdict: event.verdict } : {}),
    };
    if (candidates.length === 0) {
      this.#rememberUncorrelated(entry);
      this.#emit(base, { ...meta, matchedSpan: null });
      return;
    }
    // A connection that died with several status writes in flight lost each of them.
    const each = candidates.length === 1 || (isConnectionDeath(event) && candidates.every(isUnansweredStatusWrite)) ? candidates : null;
    if (each !== null) {
      for (const span of each) {
        // The kernel's reading of the request, when it has one, is the more exact (stream id, object).
        const verdict = { ...base, ...this.#verdictOf(span), ...(event.request ? { request: base.request } : {}) };
        this.#emit(verdict, { ...meta, matchedSpan: { traceId: span.traceId, spanId: span.spanId } });
      }
      return;
    }
    const listed = candidates.map((s) => candidateOf(s, this.#lookup));
    const ambiguous: Partial<LossEvent> = {
      correlation: "ambiguous",
      trace_id: shared(listed.map((c) => c.trace_id)),
      reconcile: shared(listed.map((c) => c.reconcile)),
      request: event.request ? base.request : shared(listed.map((c) => c.request)),
      noticed: shared(candidates.map((s) => noticedOf(s, this.#lookup))) ?? "unknown",
      candidates: listed,
    };
    this.#emit({ ...base, ...ambiguous }, { ...meta, matchedSpan: null });
  }

  /** What a loss attributed to `span` says: its trace, reconcile, request and whether the operator noticed. */
  #verdictOf(span: IndexedSpan): Partial<LossEvent> {
    const reconcile = reconcileSpanOf(span, this.#lookup);
    return {
      correlation: "span",
      trace_id: span.traceId,
      span_id: span.spanId,
      reconcile: reconcile?.reconcile ?? null,
      request: requestRefOf(span),
      noticed: noticedOf(span, this.#lookup),
    };
  }

  #rememberUncorrelated(entry: Pick<PendingKernel, "query" | "wallNs" | "event">): void {
    this.#uncorrelated.push({ query: entry.query, wallNs: entry.wallNs, request: entry.event.request ?? null });
    if (this.#uncorrelated.length > this.#o.pendingCapacity) {
      this.#uncorrelated.shift();
      this.#o.metrics.eventsDropped.inc({ stage: "correlate_dedup", reason: "capacity" });
    }
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
      // Seen only in spans: what the span says of its sender. Only spans of a
      // proven sender get here (the target holding the request's connection, or
      // a configured forwarder: sources/spans/senderTrust.ts); any other
      // sender's refused writes were counted as untrusted at intake. Its
      // process.pid is the pid inside the pod, not the host pid, so it is not
      // reported as one.
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
      noticed: noticedOf(span, this.#lookup),
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

/** One status write of one process, as a request-level probe read it. */
function kernelWriteKey(event: SocketEvent): string | null {
  const request = event.request;
  return request ? `${event.pid}|${request.method.toUpperCase()}|${stripQuery(request.path)}` : null;
}

function samePath(request: KernelRequest | null | undefined, span: IndexedSpan): boolean {
  const path = span.request?.path ?? null;
  return request != null && path !== null && stripQuery(path) === stripQuery(request.path);
}

function isConnectionDeath(event: SocketEvent): boolean {
  return event.cause === "connection_reset" || event.cause === "connection_closed_unanswered";
}

function isUnansweredStatusWrite(span: IndexedSpan): boolean {
  return span.kind === "client" && span.request?.statusCode === null && isStatusWrite(span.request.method, span.request.path);
}

/** One write: its trace and parent (the reconcile that made it), method and target. */
function retryKey(span: IndexedSpan): string {
  return `${span.traceId}|${span.parentSpanId ?? ""}|${span.request?.method ?? ""}|${span.request?.path ?? ""}`;
}
