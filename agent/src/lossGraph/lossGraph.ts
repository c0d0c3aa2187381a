// The loss graph: everything between what the sources saw and a loss event,
// built and connected here in one order, shared by the live agent and
// `lostwrite replay`.
//
//   probe records ──► TLS answers ──► judge ──► Go requests ──► correlator ──► sink
//   TLS verdicts ───┘                   │           ▲              ▲
//   Go lines, attachments ──────────────┼───────────┘              │
//   spans ──────────────────────────────┼──────────────────────────┘
//                                       ▼
//                              kernel counters (writes, syscall errors, connection losses)
//
// TLS answers: a followed OpenSSL client's close waits for what its SSL_read
// returned (sources/tls/tlsAnswers.ts); every other record passes. Go
// requests: a Go target's requests are followed one by one from its HTTP/2
// probe's lines; socket-path losses wait there in kernel-time order, so that
// one lost request is one event (sources/goHttp2/goRequests.ts). The
// correlator joins losses with the operators' spans (correlate/correlator.ts).
//
// One clock drives it (graphClock.ts): advance(nowNs) releases what waited
// long enough and closes correlation windows, called by one live timer
// (liveClock.ts) or by replay for each record; flush() lets everything out.
import type { Config } from "../config.ts";
import type { ConnectionLossReason, ProcessIdentity, SocketEvent } from "../model.ts";
import { Correlator } from "../correlate/correlator.ts";
import type { MonotonicClock } from "../correlate/monotonicClock.ts";
import type { IsApiserver } from "../correlate/spanVerdict.ts";
import { formatHostPort } from "../hostPort.ts";
import type { LossSink } from "../stage.ts";
import type { AgentMetrics } from "../telemetry/metrics.ts";
import { recordConnectionLoss, recordSocketEvent, workloadLabels } from "../telemetry/workloadSeries.ts";
import { GoRequests, type GoRecord } from "../sources/goHttp2/goRequests.ts";
import { CounterDeltas } from "../sources/probe/counterDeltas.ts";
import { parseEndpoint } from "../sources/probe/endpointKey.ts";
import type { ProbeRecord } from "../sources/probe/probeOutput.ts";
import { judge } from "../sources/probe/socketEvents.ts";
import type { IndexedSpan } from "../sources/spans/indexedSpans.ts";
import { SpanIndex } from "../sources/spans/spanIndex.ts";
import { TlsAnswers, type TlsAttachment } from "../sources/tls/tlsAnswers.ts";
import { errnoName } from "../vocabulary/errno.ts";
import { syscallName } from "../vocabulary/syscalls.ts";
import type { GraphClock } from "./graphClock.ts";

/** What is known of a target pid: identity for labels and events, NSpid for spans. */
type KnownProcess = { identity: Omit<ProcessIdentity, "tid">; nsPids: number[] | null; comm: string; sinceMs: number };

/** The targets, as the graph asks them (the live agent's TargetWatcher). */
interface KnownProcesses {
  identity(pid: number): KnownProcess | undefined;
}

/** The apiserver endpoints, as the graph asks them (the live agent's EndpointSync). */
interface Apiservers {
  has(host: string, port: number): boolean;
}

interface LossGraphOptions {
  config: Config;
  metrics: AgentMetrics;
  /** Kernel CLOCK_MONOTONIC → wall clock, for the events' times. */
  clock: Pick<MonotonicClock, "toWallNs">;
  /** The graph's time, moved only by advance(). */
  time: GraphClock;
  processes: KnownProcesses;
  /** Which addresses are apiserver endpoints: a span naming the Service matches a kernel event on a backend. Default: the configured ones. */
  apiservers?: Apiservers;
  /**
   * Socket-path losses pass through the Go request path first, so that a Go
   * target's lost request is one event: the live agent with Go probes, and
   * replay. Without, they go straight to the correlator.
   */
  goRequests: boolean;
  /**
   * With the sockets variant the kernel leaves the successful sends of a
   * process whose requests are followed one by one alone
   * (probes/apiserver_sockets.bt, REQUEST-LEVEL TARGETS): its writes are
   * counted per request, and its clean closes with requests unanswered are
   * told by the Go request path.
   */
  requestLevelSends: boolean;
  /** Where loss events go, with their meta. */
  sink: LossSink;
}

export class LossGraph {
  readonly #o: LossGraphOptions;
  readonly #counters = new CounterDeltas();
  readonly #isApiserver: IsApiserver;
  readonly #correlator: Correlator;
  readonly #tlsAnswers: TlsAnswers;
  readonly #goRequests: GoRequests;
  readonly #goAttachedListeners: ((pid: number, attached: boolean, atNs: bigint) => void)[] = [];
  readonly #requestLevelListeners: ((pid: number, on: boolean) => void)[] = [];

  constructor(opts: LossGraphOptions) {
    this.#o = opts;
    const { config, metrics, time } = opts;
    const now = (): number => time.wallMs();
    const apiservers = opts.apiservers;
    this.#isApiserver = apiservers ? (host, port) => apiservers.has(host, port) : configuredApiserver(config);
    const index = new SpanIndex({ capacity: 50_000, maxAgeMs: config["correlation-window"] + 60_000, metrics, now });
    this.#correlator = new Correlator({
      index,
      metrics,
      clock: opts.clock,
      node: config["node-name"],
      nsPidsOf: (pid) => opts.processes.identity(pid)?.nsPids ?? null,
      targetSinceMs: (pid) => opts.processes.identity(pid)?.sinceMs ?? null,
      onLoss: (event, meta) => opts.sink.publish(event, meta),
      windowMs: config["correlation-window"],
      senderGraceMs: config["span-grace"],
      isApiserver: this.#isApiserver,
      // Socket-path losses wait for the Go lines of their time first (the Go requests' hold, 50 ms, and its drain).
      socketLagMs: opts.goRequests ? 250 : 0,
      now,
    });
    this.#tlsAnswers = new TlsAnswers({
      release: (record) => this.#judge(record),
      unansweredMinBytes: config["unanswered-min-bytes"],
      onDrop: (reason) => metrics.eventsDropped.inc({ stage: "tls_answers", reason }),
    });
    this.#goRequests = this.#followGoRequests();
  }

  // --- inputs (the two a queue feeds are arrow properties: handed over as they are) ---

  /** A socket probe record, a TLS program's verdict or attachment: in the order they came. */
  readonly addRecord = (record: ProbeRecord | TlsAttachment): void => {
    if (record.type === "tls_attached") this.#tlsAnswers.setAttached(record.pid, record.attached, record.since);
    else if (record.type === "tls_close") this.#tlsAnswers.addVerdict(record);
    else if (!this.#tlsAnswers.offer(record)) this.#judge(record);
  };

  /** A line of a Go program. */
  addGoRecord(record: GoRecord): void {
    this.#goRequests.add(record);
  }

  /** The Go program of `pid` attached (following it since kernel time `atNs`) or went away (at `atNs`). */
  setGoAttached(pid: number, attached: boolean, atNs?: bigint): void {
    this.#goRequests.setAttached(pid, attached, atNs);
  }

  /** `pid` is no target any more: its requests in flight are followed no further once the Go lines before `atNs` are applied. */
  forgetGoProcess(pid: number, atNs: bigint): void {
    this.#goRequests.forget(pid, atNs);
  }

  readonly addSpans = (spans: readonly IndexedSpan[]): void => {
    this.#correlator.addSpans(spans);
  };

  /** A new socket probe instance started: its counters start at zero. */
  newProbeInstance(): void {
    this.#counters.reset();
  }

  /** Moves the graph's clock to kernel time `nowNs`: what waited long enough is released, correlation windows close. */
  advance(nowNs: bigint): void {
    const drain = (): void => {
      this.#goRequests.drain(this.#o.time.nowNs);
      this.#tlsAnswers.drain(this.#o.time.nowNs);
    };
    this.#o.time.advance(
      nowNs,
      () => {
        drain();
        this.#correlator.tick();
      },
      drain,
    );
  }

  /** Releases everything waiting, upstream first (the agent is stopping, or replay is done). */
  flush(): void {
    this.#tlsAnswers.flush();
    this.#goRequests.flush();
    this.#correlator.flush();
  }

  // --- what the live clock and the sources read --------------------------------

  /** Something waits for time to pass: the live clock ticks often while it does. */
  get busy(): boolean {
    return this.#goRequests.busy || this.#tlsAnswers.busy || this.#correlator.pendingCount > 0;
  }

  /** `listener` is told when something starts waiting (the live clock wakes on it). */
  onWaiting(listener: () => void): void {
    this.#goRequests.onQueued(listener);
    this.#tlsAnswers.onWaiting(listener);
    this.#correlator.onWaiting(listener);
  }

  /** Go lines waiting to be applied. */
  get goLinesWaiting(): number {
    return this.#goRequests.size.queued;
  }

  /** Pids whose sends the kernel should leave alone: their requests are counted one by one (empty unless requestLevelSends). */
  requestLevelPids(): number[] {
    return this.#o.requestLevelSends ? this.#goRequests.attachedPids() : [];
  }

  /** The probe's request-level switch for `pid` (only with requestLevelSends). */
  onRequestLevel(listener: (pid: number, on: boolean) => void): void {
    this.#requestLevelListeners.push(listener);
  }

  /** Every change of which pids a Go program follows (for the recorder). */
  onGoAttached(listener: (pid: number, attached: boolean, atNs: bigint) => void): void {
    this.#goAttachedListeners.push(listener);
  }

  /** The counters of `pid` the kernel keeps per syscall and errno, as seen printed. */
  syscallCounterKeys(pid: number): ReturnType<CounterDeltas["syscallKeysOf"]> {
    return this.#counters.syscallKeysOf(pid);
  }

  /** The kernel deleted the counters of `pid`: their baselines go too. */
  forgetCounters(pid: number): void {
    this.#counters.forget(pid);
  }

  // --- inside ------------------------------------------------------------------

  #judge(record: ProbeRecord): void {
    if (record.type === "counters") return this.#count(record);
    const { metrics, config } = this.#o;
    const verdict = judge(record, { unansweredMinBytes: config["unanswered-min-bytes"] });
    if (verdict.kind === "connection_loss") {
      recordConnectionLoss(metrics, workloadLabels(this.#identityOf(verdict.pid, verdict.pid, verdict.process)), verdict.reason);
    } else if (verdict.kind === "loss") {
      const { event } = verdict;
      const identity = this.#identityOf(event.pid, event.tid, event.process);
      // A failed send is counted from the kernel's @failed_sends; a failed connect only here.
      if (record.type === "connect") recordSocketEvent(metrics, event, identity);
      if (verdict.connectionLoss) recordConnectionLoss(metrics, identity, verdict.connectionLoss);
      // A failed send on a socket whose death was already reported never gets
      // here: the kernel prints only the first (probes/apiserver_sockets.bt,
      // ONE DEAD SOCKET, ONE LINE).
      if (this.#o.goRequests) this.#goRequests.offerSocketEvent(event, identity);
      else this.#correlator.addSocketEvent(event, identity);
    }
  }

  /** The kernel's per-pid counters, printed cumulative: their growth is counted. */
  #count(record: Extract<ProbeRecord, { type: "counters" }>): void {
    const { metrics } = this.#o;
    const droppedBefore = this.#counters.dropped;
    const deltas = this.#counters.update(record.map, record.entries);
    // Baselines at capacity: those counters are not exported until some are forgotten.
    if (this.#counters.dropped > droppedBefore) metrics.eventsDropped.inc({ stage: "counters", reason: "capacity" }, this.#counters.dropped - droppedBefore);
    for (const { key, delta } of deltas) {
      const pid = key[0]!;
      const labels = workloadLabels(this.#processIdentity(pid));
      if (record.map === "writes") metrics.writes.inc(labels, Number(delta));
      else if (record.map === "bytes") metrics.writeBytes.inc(labels, Number(delta));
      else if (record.map === "retransmits") metrics.retransmits.inc(labels, Number(delta));
      else {
        // transient: EAGAIN, EINTR, EINPROGRESS, failed syscalls the caller
        // retries, counted but not losses. failedSends: every other failed
        // (or, errno 0, zero-byte) send, counted in the kernel because only
        // the first failure per socket is printed.
        const [, nr = -1, errno = 0] = key;
        recordSocketEvent(metrics, { syscall: syscallName(nr), errno: errno === 0 ? null : errnoName(errno) }, labels, Number(delta));
      }
    }
  }

  /** The Go HTTP/2 request path, its verdicts on to the correlator and the counters. */
  #followGoRequests(): GoRequests {
    const { metrics, requestLevelSends } = this.#o;
    const correlator = this.#correlator;
    return new GoRequests({
      isApiserver: this.#isApiserver,
      // A loss a request-level probe saw: labelled with what is known of its process.
      onLoss: (event) => {
        const identity = this.#identityOf(event.pid, event.tid, event.process || (this.#o.processes.identity(event.pid)?.comm ?? "unknown"));
        correlator.addSocketEvent({ ...event, process: identity.process }, identity);
      },
      // A write retried: counted once, and its refused span is no loss.
      onRetry: (event, code) => correlator.addKernelRetry(event, this.#identityOf(event.pid, event.tid, event.process || "unknown"), code),
      onAnswered: (event) => correlator.addKernelSuccess(event, this.#identityOf(event.pid, event.tid, this.#o.processes.identity(event.pid)?.comm ?? "unknown")),
      onAttached: (pid, attached, atNs) => {
        if (attached) correlator.noteRequestLevel(pid, this.#processIdentity(pid));
        for (const listener of this.#goAttachedListeners) listener(pid, attached, atNs);
        if (requestLevelSends) for (const listener of this.#requestLevelListeners) listener(pid, attached);
      },
      ...(requestLevelSends
        ? {
            // Writes of a process whose sends the kernel leaves alone.
            onRequests: (pid: number, count: number) => metrics.writes.inc(workloadLabels(this.#processIdentity(pid)), count),
            // A connection closed cleanly with requests unanswered.
            onConnectionLoss: (pid: number, reason: ConnectionLossReason) => recordConnectionLoss(metrics, workloadLabels(this.#processIdentity(pid)), reason),
          }
        : {}),
      forward: (event: SocketEvent, identity: ProcessIdentity) => correlator.addSocketEvent(event, identity),
      onDrop: (reason) => metrics.eventsDropped.inc({ stage: "go_requests", reason }),
      onKernelInflightFull: () => metrics.eventsDropped.inc({ stage: "go_inflight", reason: "capacity" }),
    });
  }

  #identityOf(pid: number, tid: number, comm: string): ProcessIdentity {
    const known = this.#o.processes.identity(pid)?.identity;
    return known ? { ...known, tid } : { pid, tid, process: comm, namespace: "", pod: "", container: "", controller: "" };
  }

  /** A process as a whole (its main thread), by what is known of it. */
  #processIdentity(pid: number): ProcessIdentity {
    return this.#identityOf(pid, pid, this.#o.processes.identity(pid)?.comm ?? "unknown");
  }
}

function configuredApiserver(config: Config): IsApiserver {
  const texts = new Set(config.apiserver.map((value) => parseEndpoint(value).text));
  return (host, port) => texts.has(formatHostPort(host, port));
}
