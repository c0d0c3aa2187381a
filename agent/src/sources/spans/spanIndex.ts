// The spans correlation needs, bounded by count and by age. Spans arrive
// seconds after they end and a loss waits at most the correlation window for
// them, so the index only has to remember a little longer than that.
//
// Times are wall-clock nanoseconds since the epoch as bigint (as OTLP sends
// them); age is measured from when a span was received, on the injected
// millisecond clock, so a replay evicts exactly like the live run.
import { BoundedMap } from "../../boundedMap.ts";
import type { AgentMetrics } from "../../telemetry/metrics.ts";
import type { IndexedSpan } from "./indexedSpans.ts";

interface SpanIndexOptions {
  /** Most spans held; the oldest received is evicted first. */
  capacity: number;
  /** Spans received longer ago than this are evicted. */
  maxAgeMs: number;
  metrics: AgentMetrics;
  /** Wall-clock milliseconds; injectable for replay and tests. */
  now?: () => number;
}

/** The process whose spans are asked for, as the kernel side knows it. */
export interface ProcessQuery {
  /** The pid the process sees for itself (innermost NSpid); equals the host pid outside containers. */
  nsPid: number | null;
  /** Its host pid, when known: spans whose connection proved their sender are matched on it. */
  hostPid?: number | null;
  /** Pod namespace and name; "" or null when unknown or not in Kubernetes. */
  namespace: string | null;
  pod: string | null;
}

interface Entry {
  span: IndexedSpan;
  receivedMs: number;
}

interface Bucket {
  keys: Set<string>;
  /**
   * Latest span end received, per sender (senderKey), with the sender to ask
   * sentBy about. Past MAX_SENDERS_PER_BUCKET the sender updated longest ago
   * is forgotten, counted: a kernel loss of its process may then wait for
   * spans that have already arrived.
   */
  latestEnd: BoundedMap<string, { process: IndexedSpan["process"]; endNs: bigint }>;
}

/** Senders sharing one pid bucket that are remembered for coverage; more is pathological. */
const MAX_SENDERS_PER_BUCKET = 256;

export class SpanIndex {
  readonly #opts: Required<SpanIndexOptions>;
  /** Insertion (receive) order: the first entry is always the oldest. */
  readonly #entries = new Map<string, Entry>();
  /** Spans per sending process: by `process.pid`, or by pod for spans without one. */
  readonly #buckets = new Map<string, Bucket>();

  constructor(opts: SpanIndexOptions) {
    if (!(opts.capacity >= 1)) throw new RangeError(`span index capacity must be >= 1, got ${opts.capacity}`);
    if (!(opts.maxAgeMs > 0)) throw new RangeError(`span index maxAgeMs must be > 0, got ${opts.maxAgeMs}`);
    this.#opts = { now: Date.now, ...opts };
    this.#opts.metrics.spanIndexSize.set(0);
    for (const reason of ["age", "capacity"]) this.#opts.metrics.spanIndexEvictions.inc({ reason }, 0);
  }

  get size(): number {
    return this.#entries.size;
  }

  add(spans: readonly IndexedSpan[]): void {
    const now = this.#opts.now();
    for (const span of spans) {
      const key = spanKey(span.traceId, span.spanId);
      if (this.#entries.has(key)) this.#remove(key);
      this.#entries.set(key, { span, receivedMs: now });
      const bucketKey = bucketKeyOf(span.process.pid, span.process.namespace, span.process.podName);
      let bucket = this.#buckets.get(bucketKey);
      if (bucket === undefined) {
        bucket = { keys: new Set(), latestEnd: new BoundedMap(MAX_SENDERS_PER_BUCKET, () => this.#opts.metrics.eventsDropped.inc({ stage: "correlate_senders", reason: "capacity" })) };
        this.#buckets.set(bucketKey, bucket);
      }
      bucket.keys.add(key);
      const sender = senderKey(span.process);
      const latest = bucket.latestEnd.get(sender);
      if (latest === undefined || span.endNs > latest.endNs) {
        bucket.latestEnd.set(sender, { process: span.process, endNs: span.endNs });
      }
    }
    this.#evict(now);
  }

  get(traceId: string, spanId: string): IndexedSpan | undefined {
    return this.#entries.get(spanKey(traceId, spanId))?.span;
  }

  /** Spans of `proc` open at `wallNs` ± `slackNs`, in the order they were received. */
  openAt(proc: ProcessQuery, wallNs: bigint, slackNs: bigint): IndexedSpan[] {
    const out: IndexedSpan[] = [];
    for (const bucket of this.#bucketsOf(proc)) {
      for (const key of bucket.keys) {
        const span = this.#entries.get(key)?.span;
        if (span === undefined || !spanOfProcess(span, proc)) continue;
        if (span.startNs - slackNs <= wallNs && wallNs <= span.endNs + slackNs) out.push(span);
      }
    }
    return out;
  }

  /** The latest end time of any span received from `proc`; null if none is held. */
  latestEndNs(proc: ProcessQuery): bigint | null {
    let latest: bigint | null = null;
    for (const bucket of this.#bucketsOf(proc)) {
      for (const { process, endNs } of bucket.latestEnd.values()) {
        if (!sentBy(process, proc)) continue;
        if (latest === null || endNs > latest) latest = endNs;
      }
    }
    return latest;
  }

  /** Evicts what has aged out; call periodically when no spans arrive. */
  evictExpired(): void {
    this.#evict(this.#opts.now());
  }

  #bucketsOf(proc: ProcessQuery): Bucket[] {
    const keys = new Set<string>();
    if (proc.nsPid !== null) keys.add(bucketKeyOf(proc.nsPid, null, null));
    if (known(proc.pod)) keys.add(bucketKeyOf(null, proc.namespace, proc.pod));
    const out: Bucket[] = [];
    for (const key of keys) {
      const bucket = this.#buckets.get(key);
      if (bucket !== undefined) out.push(bucket);
    }
    return out;
  }

  #evict(now: number): void {
    const { capacity, maxAgeMs, metrics } = this.#opts;
    for (const [key, entry] of this.#entries) {
      if (this.#entries.size > capacity) {
        metrics.spanIndexEvictions.inc({ reason: "capacity" });
      } else if (entry.receivedMs < now - maxAgeMs) {
        metrics.spanIndexEvictions.inc({ reason: "age" });
      } else {
        break;
      }
      this.#remove(key);
    }
    metrics.spanIndexSize.set(this.#entries.size);
  }

  #remove(key: string): void {
    const entry = this.#entries.get(key);
    if (entry === undefined) return;
    this.#entries.delete(key);
    const p = entry.span.process;
    const bucketKey = bucketKeyOf(p.pid, p.namespace, p.podName);
    const bucket = this.#buckets.get(bucketKey);
    if (bucket === undefined) return;
    bucket.keys.delete(key);
    if (bucket.keys.size === 0) this.#buckets.delete(bucketKey);
  }
}

export function spanKey(traceId: string, spanId: string): string {
  return `${traceId}/${spanId}`;
}

function bucketKeyOf(pid: number | null, namespace: string | null, pod: string | null): string {
  return pid !== null ? `pid:${pid}` : `pod:${podKey(namespace, pod)}`;
}

function podKey(namespace: string | null, pod: string | null): string {
  return `${namespace ?? ""}/${pod ?? ""}`;
}

function senderKey(p: IndexedSpan["process"]): string {
  return `${p.sender}|${p.hostPid ?? ""}|${p.pid ?? ""}|${podKey(p.namespace, p.podName)}`;
}

function known(value: string | null): value is string {
  return value !== null && value !== "";
}

/**
 * Whether `span` was sent by `proc`. Pids inside pods repeat (every
 * container may be pid 1), so the pod decides first and the pid only within
 * it. In Kubernetes mode the pod is the sender's (its address's), not the
 * resource's word; outside it, the resource's pod where both sides know one.
 */
export function spanOfProcess(span: IndexedSpan, proc: ProcessQuery): boolean {
  return sentBy(span.process, proc);
}

/** Whether a span's sender (its resource's process and pod) is `proc`; the rule of spanOfProcess. */
export function sentBy(p: IndexedSpan["process"], proc: ProcessQuery): boolean {
  // Proven by its connection: exactly that process, whatever pod or pid namespace.
  if (p.sender === "process") return p.hostPid !== null && p.hostPid === proc.hostPid;
  if (p.sender === "pod") {
    if (p.podName !== proc.pod || p.namespace !== proc.namespace) return false;
    // A span without process.pid is any process of its pod's.
    return p.pid === null || p.pid === proc.nsPid;
  }
  // The node's own processes are in no pod, and their pid is the host pid.
  if (p.sender === "node") return !known(proc.pod) && p.pid !== null && p.pid === proc.nsPid;
  if (known(p.podName) && known(proc.pod) && p.podName !== proc.pod) return false;
  if (known(p.namespace) && known(proc.namespace) && p.namespace !== proc.namespace) return false;
  // A span without process.pid is only found through its pod.
  if (p.pid === null) return known(p.podName) && known(proc.pod);
  return p.pid === proc.nsPid;
}
