// The judging half of the data path, shared by the live agent and
// `lostwrite replay`: probe records and spans in, counted and correlated loss
// events out.
import type { Config } from "./config.ts";
import type { ConnectionLossReason, LossEvent, ProcessIdentity, SocketEvent } from "./model.ts";
import { Correlator } from "./correlate/correlator.ts";
import type { IsApiserver } from "./correlate/spanVerdict.ts";
import { formatHostPort } from "./hostPort.ts";
import { parseEndpoint } from "./sources/probe/endpointKey.ts";
import type { MonotonicClock } from "./correlate/monotonicClock.ts";
import { BoundedLabel, recordConnectionLoss, recordLoss, recordSocketEvent, workloadLabels } from "./sinks/lossMetrics.ts";
import type { AgentMetrics } from "./sinks/metrics.ts";
import { CounterDeltas } from "./sources/probe/counterDeltas.ts";
import type { ProbeRecord } from "./sources/probe/probeOutput.ts";
import { judge } from "./sources/probe/socketEvents.ts";
import { errnoName } from "./vocabulary/errno.ts";
import { syscallName } from "./vocabulary/syscalls.ts";
import { GoRequests, type GoRequest } from "./sources/goHttp2/goRequests.ts";
import { SpanIndex } from "./sources/spans/spanIndex.ts";
import { TlsAnswers, type TlsAttachment } from "./sources/tls/tlsAnswers.ts";

export interface LossStagesOptions {
  config: Config;
  metrics: AgentMetrics;
  clock: Pick<MonotonicClock, "toWallNs">;
  /** What is known of a target pid: identity for labels and events, NSpid for spans. */
  identity: (pid: number) => { identity: Omit<ProcessIdentity, "tid">; nsPids: number[] | null; comm: string; sinceMs: number } | undefined;
  emit: (event: LossEvent) => void;
  /** Whether an address is an apiserver endpoint: a span naming the Service matches a kernel event on a backend. Default: the configured ones (replay). */
  isApiserver?: IsApiserver;
  /** Wall-clock ms; replay drives it from the recording. */
  now?: () => number;
  /** Offered every socket-path loss first; true when another path (Go's HTTP/2 probe) takes it and will hand it back if it does not speak for it. */
  claimSocketEvent?: (event: SocketEvent, identity: ProcessIdentity) => boolean;
  /** Something did not fit in a stage here: lostwrite_events_dropped_total's stage and reason. */
  onDrop?: (stage: "tls_answers", reason: "capacity") => void;
}

/**
 * The stages the live agent and `lostwrite replay` share: probe records and
 * spans in, counted and correlated loss events out.
 *
 *   probe record ──► TLS answers ──► judge ──► kernel metrics ──► correlator ◄── spans
 *                                                                      │
 *                                                                      ▼
 *                                                           loss metrics ──► emit
 *
 * TLS answers: a followed OpenSSL client's close is judged by what its
 * SSL_read returned (sources/tls/tlsAnswers.ts); every other record passes.
 */
export function buildLossStages(opts: LossStagesOptions) {
  const { config, metrics } = opts;
  const now = opts.now ?? Date.now;
  const counters = new CounterDeltas();
  const controllers = new BoundedLabel(256);
  const index = new SpanIndex({ capacity: 50_000, maxAgeMs: config["correlation-window"] + 60_000, metrics, now });

  const identityOf = (pid: number, tid: number, comm: string): ProcessIdentity => {
    const known = opts.identity(pid)?.identity;
    return known ? { ...known, tid } : { pid, tid, process: comm, namespace: "", pod: "", container: "", controller: "" };
  };
  /** A process as a whole (its main thread), by what is known of it. */
  const processIdentity = (pid: number): ProcessIdentity => identityOf(pid, pid, opts.identity(pid)?.comm ?? "unknown");

  const correlator = new Correlator({
    index,
    metrics,
    clock: opts.clock,
    node: config["node-name"],
    nsPidsOf: (pid) => opts.identity(pid)?.nsPids ?? null,
    targetSinceMs: (pid) => opts.identity(pid)?.sinceMs ?? null,
    onLoss: (event) => {
      const identity = event.pid === null ? null : opts.identity(event.pid)?.identity;
      recordLoss(metrics, event, controllers.value(event.reconcile?.controller ?? identity?.controller ?? ""));
      opts.emit(event);
    },
    windowMs: config["correlation-window"],
    senderGraceMs: config["span-grace"],
    isApiserver: opts.isApiserver ?? configuredApiserver(config),
    // Socket-path losses wait for the Go lines of their time first (the Go requests' hold, 50 ms, and its drain).
    socketLagMs: opts.claimSocketEvent ? 250 : 0,
    now,
  });

  const tlsAnswers = new TlsAnswers({
    release: (record) => judgeRecord(record),
    unansweredMinBytes: config["unanswered-min-bytes"],
    onDrop: (reason) => opts.onDrop?.("tls_answers", reason),
  });

  /** A probe record, or a TLS program's attachment, in the order they came. */
  const handleRecord = (record: ProbeRecord | TlsAttachment): void => {
    if (record.type === "tls_attached") tlsAnswers.setAttached(record.pid, record.attached, record.since);
    else if (record.type === "tls_close") tlsAnswers.addVerdict(record);
    else if (!tlsAnswers.offer(record)) judgeRecord(record);
  };

  const judgeRecord = (record: ProbeRecord): void => {
    if (record.type === "counters") {
      const droppedBefore = counters.dropped;
      const deltas = counters.update(record.map, record.entries);
      // Baselines at capacity: those counters are not exported until some are forgotten.
      if (counters.dropped > droppedBefore) metrics.eventsDropped.inc({ stage: "counters", reason: "capacity" }, counters.dropped - droppedBefore);
      for (const { key, delta } of deltas) {
        const pid = key[0]!;
        const labels = workloadLabels(processIdentity(pid));
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
      return;
    }
    const verdict = judge(record, { unansweredMinBytes: config["unanswered-min-bytes"] });
    if (verdict.kind === "connection_loss") {
      recordConnectionLoss(metrics, workloadLabels(identityOf(verdict.pid, verdict.pid, verdict.process)), verdict.reason);
    } else if (verdict.kind === "loss") {
      const { event } = verdict;
      const identity = identityOf(event.pid, event.tid, event.process);
      // A failed send is counted from the kernel's @failed_sends; a failed connect only here.
      if (record.type === "connect") recordSocketEvent(metrics, event, identity);
      if (verdict.connectionLoss) recordConnectionLoss(metrics, identity, verdict.connectionLoss);
      if (opts.claimSocketEvent?.(event, identity)) return;
      addSocketEvent(event, identity);
    }
  };

  /**
   * A socket-path loss, judged: on to the correlator. A failed send on a
   * socket whose death was already reported never gets here: the kernel
   * prints only the first (probes/apiserver_sockets.bt, ONE DEAD SOCKET, ONE LINE).
   */
  const addSocketEvent = (event: SocketEvent, identity: ProcessIdentity): void => correlator.addSocketEvent(event, identity);

  /** A loss a request-level probe saw: labelled with what is known of its process, then correlated. */
  const addRequestLoss = (event: SocketEvent): void => {
    const identity = identityOf(event.pid, event.tid, event.process || (opts.identity(event.pid)?.comm ?? "unknown"));
    correlator.addSocketEvent({ ...event, process: identity.process }, identity);
  };

  /** A write a request-level probe saw retried: counted once, and its refused span is no loss. */
  const addRequestRetry = (event: SocketEvent, code: string): void => {
    correlator.addKernelRetry(event, identityOf(event.pid, event.tid, event.process || "unknown"), code);
  };

  /** A status write a request-level probe saw answered 2xx. */
  const addRequestAnswer = (event: SocketEvent): void =>
    correlator.addKernelSuccess(event, identityOf(event.pid, event.tid, opts.identity(event.pid)?.comm ?? "unknown"));

  /** A request-level probe now reads this process's requests. */
  const noteRequestLevel = (pid: number): void => correlator.noteRequestLevel(pid, processIdentity(pid));

  /** A request a request-level probe saw written: one write of a process whose sends the kernel leaves alone. */
  const countRequest = (pid: number): void => {
    metrics.writes.inc(workloadLabels(processIdentity(pid)));
  };

  /** A connection a request-level probe saw closed cleanly with requests unanswered. */
  const addRequestConnectionLoss = (pid: number, reason: ConnectionLossReason): void => recordConnectionLoss(metrics, workloadLabels(processIdentity(pid)), reason);

  return {
    handleRecord,
    tlsAnswers,
    addSocketEvent,
    addRequestLoss,
    addRequestRetry,
    addRequestAnswer,
    noteRequestLevel,
    countRequest,
    addRequestConnectionLoss,
    correlator,
    counters,
  };
}

export type LossStages = ReturnType<typeof buildLossStages>;

export interface GoRequestWiring {
  isApiserver: IsApiserver;
  /** The kernel leaves followed processes' sends alone (sockets variant): their writes and clean closes are counted from their requests. */
  requestLevelSends: boolean;
  /** Besides telling the correlator: a followed process's program attached or went away. */
  onAttached?: (pid: number, attached: boolean, atNs: bigint) => void;
  onDrop: (reason: "capacity") => void;
}

/**
 * The Go HTTP/2 requests path, wired into the loss stages as the live agent
 * and `lostwrite replay` both wire it. The stages must offer it their socket
 * events (`claimSocketEvent: (event, identity) => requests.offerSocketEvent(event, identity)`).
 */
export function followGoRequests(judged: LossStages, wiring: GoRequestWiring): GoRequests {
  return new GoRequests({
    isApiserver: wiring.isApiserver,
    onLoss: (event) => judged.addRequestLoss(event),
    onRetry: (event, code) => judged.addRequestRetry(event, code),
    onAnswered: (event) => judged.addRequestAnswer(event),
    onAttached: (pid, attached, atNs) => {
      if (attached) judged.noteRequestLevel(pid);
      wiring.onAttached?.(pid, attached, atNs);
    },
    ...(wiring.requestLevelSends
      ? {
          onRequest: (request: GoRequest) => judged.countRequest(request.pid),
          onConnectionLoss: (pid: number, reason: ConnectionLossReason) => judged.addRequestConnectionLoss(pid, reason),
        }
      : {}),
    forward: (event, identity) => judged.addSocketEvent(event, identity),
    onDrop: wiring.onDrop,
  });
}

function configuredApiserver(config: Config): IsApiserver {
  const texts = new Set(config.apiserver.map((value) => parseEndpoint(value).text));
  return (host, port) => texts.has(formatHostPort(host, port));
}
