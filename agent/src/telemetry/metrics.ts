// Every metric the agent exports is declared here, in one module, so the
// public contract (docs/metrics.md, dashboards, alerts) has one source.
// Label values come from closed sets; anything outside a set becomes "other",
// so no label can grow with pids, object names, paths or trace ids: a trace
// id rides on a series as its OpenMetrics exemplar instead (see below).
import { Counter, Gauge, Histogram, Registry, type LabelValues } from "prom-client";
import type { DropReason, DropStage } from "../vocabulary/drops.ts";
import { SENDER_REJECT_REASONS } from "../sources/spans/senderTrust.ts";

export const PROBE_RESTART_REASONS = ["exited", "heartbeat_missed", "spawn_failed"] as const;
export type ProbeRestartReason = (typeof PROBE_RESTART_REASONS)[number];
/** The socket probe's: also restarted to attach its send hook (sendHook.ts), which bpftrace cannot add to a running program. */
export const SOCKET_PROBE_RESTART_REASONS = [...PROBE_RESTART_REASONS, "send_hook"] as const;
/** The agent's bpftrace programs by kind: the socket probe, and the uprobe programs (Go requests, TLS answers). */
export const PROBE_PROGRAM_KINDS = ["socket", "uprobe"] as const;
export type ProbeProgramKind = (typeof PROBE_PROGRAM_KINDS)[number];
/** Why the uprobe programs were compiled again into one bpftrace (sources/probe/uprobeHost.ts): several merged, or a file's probes taken out of a merged one. */
export const UPROBE_RELOAD_REASONS = ["merged", "file_removed"] as const;
export const SPAN_REJECT_REASONS = [
  "malformed",
  "unsupported_media_type",
  "too_large",
  "queue_full",
  "method_not_allowed",
  ...SENDER_REJECT_REASONS,
] as const;
export type SpanRejectReason = (typeof SPAN_REJECT_REASONS)[number];
export const TARGET_SOURCES = ["pid", "comm", "cmdline", "kubernetes"] as const;
/** What Kubernetes mode lists and watches (its ClusterRole grants exactly these). */
export const KUBERNETES_WATCHED = ["pods", "endpointslices"] as const;
/** Why a list or watch failed: RBAC or credentials (the agent is blind until fixed), or anything else (retried). */
export const KUBERNETES_WATCH_ERRORS = ["forbidden", "unauthorized", "other"] as const;
/**
 * lostwrite_go_targets: how a Go target is covered. "requests": followed one
 * by one; "unverified_layout": its HTTP/2 client is of a Go or x/net version
 * whose struct layout is not verified, so it is on the socket path alone.
 */
export const GO_COVERAGES = ["requests", "unverified_layout"] as const;

/** Keeps a label value inside its closed set. */
export function closed<T extends readonly string[]>(set: T, value: string): T[number] | "other" {
  return (set as readonly string[]).includes(value) ? (value) : "other";
}

const workload = ["namespace", "pod", "container", "process"] as const;

/** The metrics whose series carry the trace of their latest increment as an exemplar (docs/metrics.md). */
export const EXEMPLAR_METRICS = ["lostwrite_status_write_lost_total"] as const;

/** An exemplar's labels: the trace, and the span within it when known. */
interface ExemplarLabels {
  trace_id: string;
  span_id?: string;
}

/** OpenMetrics caps an exemplar's label names and values at 128 characters together. */
export const EXEMPLAR_LABELS_MAX_CHARS = 128;

const TRACE_ID = /^[0-9a-f]{32}$/;
const SPAN_ID = /^[0-9a-f]{16}$/;
const INVALID_TRACE_ID = "0".repeat(32);
const INVALID_SPAN_ID = "0".repeat(16);

/**
 * The exemplar labels for a W3C trace and span id, or null without a valid
 * trace id (ids come from the operators' spans, i.e. from outside). A span id
 * that is not valid is left out; both ids valid are 63 characters, well
 * inside the OpenMetrics limit.
 */
export function traceExemplar(traceId: string | null | undefined, spanId: string | null | undefined): ExemplarLabels | null {
  const trace = traceId?.toLowerCase() ?? "";
  if (!TRACE_ID.test(trace) || trace === INVALID_TRACE_ID) return null;
  const span = spanId?.toLowerCase() ?? "";
  return SPAN_ID.test(span) && span !== INVALID_SPAN_ID ? { trace_id: trace, span_id: span } : { trace_id: trace };
}

interface Exemplar {
  labels: ExemplarLabels;
  value: number;
  /** Seconds since the epoch, when the increment was counted. */
  timestamp: number;
}

/** One key per series: its label values in label-name order. */
function seriesKey(labels: Record<string, string | number | undefined>): string {
  return JSON.stringify(
    Object.keys(labels)
      .filter((name) => labels[name] !== undefined)
      .sort()
      .map((name) => [name, String(labels[name])]),
  );
}

function escapeOpenMetrics(text: string): string {
  return text.replace(/\\/g, "\\\\").replace(/\n/g, "\\n").replace(/"/g, '\\"');
}

function formatLabels(labels: Record<string, string | number | undefined>): string {
  const pairs = Object.entries(labels)
    .filter(([, value]) => value !== undefined)
    .map(([name, value]) => `${name}="${escapeOpenMetrics(String(value))}"`);
  return pairs.length > 0 ? `{${pairs.join(",")}}` : "";
}

function formatNumber(value: number): string {
  if (Number.isNaN(value)) return "NaN";
  if (value === Infinity) return "+Inf";
  if (value === -Infinity) return "-Inf";
  return String(value);
}

/** lostwrite_events_dropped_total, whose labels only take values of the drop vocabulary. */
type DropCounter = Omit<Counter<"stage" | "reason">, "inc"> & {
  inc(labels: { stage: DropStage; reason: DropReason }, value?: number): void;
};

export class AgentMetrics {
  readonly registry = new Registry();

  readonly statusWriteLost = new Counter({
    name: "lostwrite_status_write_lost_total",
    help: "Writes to the apiserver that did not arrive or were not answered.",
    labelNames: [...workload, "controller", "request", "cause", "errno", "noticed", "verdict"],
    registers: [this.registry],
  });
  readonly statusWriteRetries = new Counter({
    name: "lostwrite_status_write_retried_total",
    help: "Status writes the apiserver refused (409/422/429/5xx or a transport error) that the client sent again in the same reconcile and got answered 2xx: retries, not losses.",
    labelNames: ["namespace", "pod", "code"],
    registers: [this.registry],
  });
  readonly syscallErrors = new Counter({
    name: "lostwrite_apiserver_syscall_errors_total",
    help: "Failed or zero-byte write-family or connect syscalls on apiserver sockets, before correlation.",
    labelNames: [...workload, "syscall", "errno"],
    registers: [this.registry],
  });
  readonly writes = new Counter({
    name: "lostwrite_apiserver_writes_total",
    help: "Successful write-family syscalls on apiserver sockets.",
    labelNames: workload,
    registers: [this.registry],
  });
  readonly writeBytes = new Counter({
    name: "lostwrite_apiserver_write_bytes_total",
    help: "Bytes sent by successful write-family syscalls on apiserver sockets.",
    labelNames: workload,
    registers: [this.registry],
  });
  readonly connectionLosses = new Counter({
    name: "lostwrite_apiserver_connection_losses_total",
    help: "Apiserver connections that died: reset or timeout (with or without a request in flight), or closed with a request unanswered.",
    labelNames: [...workload, "reason"],
    registers: [this.registry],
  });
  readonly retransmits = new Counter({
    name: "lostwrite_apiserver_retransmits_total",
    help: "TCP retransmits on apiserver connections.",
    labelNames: workload,
    registers: [this.registry],
  });
  readonly targets = new Gauge({
    name: "lostwrite_targets",
    help: "Processes watched now, by the rule that selected them.",
    labelNames: ["source"],
    registers: [this.registry],
  });
  readonly probeUp = new Gauge({
    name: "lostwrite_probe_up",
    help: "1 while bpftrace is attached and beating.",
    registers: [this.registry],
  });
  readonly probeInfo = new Gauge({
    name: "lostwrite_probe_info",
    help: "The probe program variant chosen for this kernel and what it takes for an answer (value is always 1).",
    labelNames: ["variant", "bpftrace_version", "answer_rule"],
    registers: [this.registry],
  });
  readonly probeSendHook = new Gauge({
    name: "lostwrite_probe_send_hook",
    help: "1 while the socket probe has its program on sock:sock_send_length (every send of every process on the node pays it), 0 while no target needs it.",
    registers: [this.registry],
  });
  readonly probeAdoptedConnections = new Counter({
    name: "lostwrite_probe_adopted_connections_total",
    help: "Go operators' apiserver connections the socket probe follows since their Go program found their socket, having not seen them open (it started after them).",
    registers: [this.registry],
  });
  readonly probeCompilerPageOuts = new Counter({
    name: "lostwrite_probe_compiler_page_outs_total",
    help: "Page-outs of bpftrace's compiler code (LLVM, clang) once a program attached, by result (done, failed).",
    labelNames: ["result"],
    registers: [this.registry],
  });
  readonly probeCompilerPagedOutBytes = new Counter({
    name: "lostwrite_probe_compiler_paged_out_bytes_total",
    help: "Memory bpftrace processes gave back when their compiler code was paged out (its resident pages before, less after).",
    registers: [this.registry],
  });
  readonly probeRestarts = new Counter({
    name: "lostwrite_probe_restarts_total",
    help: "bpftrace restarts by the supervisor, by reason.",
    labelNames: ["reason"],
    registers: [this.registry],
  });
  readonly goProbesAttached = new Gauge({
    name: "lostwrite_go_probes_attached",
    help: "Go HTTP/2 probe programs attached now, one per probed binary.",
    registers: [this.registry],
  });
  readonly goProbeRestarts = new Counter({
    name: "lostwrite_go_probe_restarts_total",
    help: "Restarts of Go HTTP/2 probe programs by the supervisor, by reason.",
    labelNames: ["reason"],
    registers: [this.registry],
  });
  readonly uprobeProgramReloads = new Counter<"reason">({
    name: "lostwrite_uprobe_program_reloads_total",
    help: "Merges of the uprobe programs (Go binaries' and OpenSSL files') into one bpftrace, once the probed files have not changed for a minute: merged (several programs into one) or file_removed (a file gone from a merged program).",
    labelNames: ["reason"],
    registers: [this.registry],
  });
  readonly tlsProbesAttached = new Gauge({
    name: "lostwrite_tls_probes_attached",
    help: "TLS probe programs attached now, one per probed OpenSSL file (a libssl, or an executable with OpenSSL linked in).",
    registers: [this.registry],
  });
  readonly tlsProbeRestarts = new Counter({
    name: "lostwrite_tls_probe_restarts_total",
    help: "Restarts of TLS probe programs by the supervisor, by reason.",
    labelNames: ["reason"],
    registers: [this.registry],
  });
  readonly goTargets = new Gauge({
    name: "lostwrite_go_targets",
    help: "Go targets by coverage: requests followed one by one (requests), or on the socket path alone because their HTTP/2 client's Go or x/net version has no verified layout (unverified_layout).",
    labelNames: ["coverage"],
    registers: [this.registry],
  });
  readonly probeControlFailures = new Counter({
    name: "lostwrite_probe_control_failures_total",
    help: "Target or endpoint changes the probe did not acknowledge after every retry.",
    registers: [this.registry],
  });
  readonly kubernetesWatchErrors = new Counter({
    name: "lostwrite_kubernetes_watch_errors_total",
    help: "Failed lists and watches of this node's pods or the kubernetes EndpointSlice, by resource and reason.",
    labelNames: ["resource", "reason"],
    registers: [this.registry],
  });
  readonly probeEventsLost = new Counter({
    name: "lostwrite_probe_events_lost_total",
    help: "Events the kernel dropped before bpftrace read them.",
    registers: [this.registry],
  });
  readonly probeMissedRuns = new Counter({
    name: "lostwrite_probe_missed_runs_total",
    help: "Probe hits the kernel did not run a program for, because another BPF program was running on that CPU, by program (socket, uprobe).",
    labelNames: ["program"],
    registers: [this.registry],
  });
  readonly probeParseErrors = new Counter({
    name: "lostwrite_probe_parse_errors_total",
    help: "bpftrace output lines that were malformed, oversized or of an unknown type.",
    registers: [this.registry],
  });
  readonly spansReceived = new Counter({
    name: "lostwrite_spans_received_total",
    help: "Spans accepted by the OTLP receiver.",
    registers: [this.registry],
  });
  readonly spansRejected = new Counter({
    name: "lostwrite_spans_rejected_total",
    help: "OTLP requests the span intake refused, wholly or in part, by reason.",
    labelNames: ["reason"],
    registers: [this.registry],
  });
  readonly spanSenderConnections = new Gauge({
    name: "lostwrite_span_sender_connections",
    help: "OTLP connections whose sending process is remembered now (looked up once per connection).",
    registers: [this.registry],
  });
  readonly spanLossesUntrusted = new Counter({
    name: "lostwrite_span_losses_untrusted_total",
    help: "Refused status writes seen only in spans whose sender is not a proven target process: not reported as losses.",
    registers: [this.registry],
  });
  readonly spanIndexSize = new Gauge({
    name: "lostwrite_span_index_spans",
    help: "Spans held in the span index now.",
    registers: [this.registry],
  });
  readonly spanIndexEvictions = new Counter({
    name: "lostwrite_span_index_evictions_total",
    help: "Spans evicted from the span index, by reason (age or capacity).",
    labelNames: ["reason"],
    registers: [this.registry],
  });
  readonly eventsDropped: DropCounter = new Counter({
    name: "lostwrite_events_dropped_total",
    help: "Events dropped anywhere in the pipeline, by stage and reason.",
    labelNames: ["stage", "reason"],
    registers: [this.registry],
  });
  readonly queueLength = new Gauge({
    name: "lostwrite_queue_length",
    help: "Events waiting in a bounded pipeline queue now.",
    labelNames: ["queue"],
    registers: [this.registry],
  });
  readonly feedClients = new Gauge({
    name: "lostwrite_feed_clients",
    help: "WebSocket clients connected to /events.",
    registers: [this.registry],
  });
  readonly detectionLatency = new Histogram({
    name: "lostwrite_detection_latency_seconds",
    help: "Kernel time of the failure to the loss event being emitted.",
    buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 15, 30],
    registers: [this.registry],
  });

  /**
   * Exemplars by metric, then by series. Kept here rather than with
   * prom-client's `enableExemplars`: that switches a counter's `inc` to an
   * object-only form (a classic `inc(labels)` would then silently count the
   * unlabelled series), and prom-client's OpenMetrics registry renames the
   * counters it renders in place, which would break the classic exposition.
   */
  private readonly exemplars = new Map<object, Map<string, Exemplar>>();
  /** Wall-clock ms for an exemplar's timestamp; replay passes the recording's, so its metrics are reproducible. */
  private readonly now: () => number;

  constructor(opts: { now?: () => number } = {}) {
    this.now = opts.now ?? Date.now;
    // Closed label sets start at zero so rate() and absent-series alerts work
    // from the first scrape.
    for (const reason of SOCKET_PROBE_RESTART_REASONS) this.probeRestarts.inc({ reason }, 0);
    for (const reason of PROBE_RESTART_REASONS) this.goProbeRestarts.inc({ reason }, 0);
    for (const reason of PROBE_RESTART_REASONS) this.tlsProbeRestarts.inc({ reason }, 0);
    for (const reason of UPROBE_RELOAD_REASONS) this.uprobeProgramReloads.inc({ reason }, 0);
    this.goProbesAttached.set(0);
    this.tlsProbesAttached.set(0);
    for (const coverage of GO_COVERAGES) this.goTargets.set({ coverage }, 0);
    for (const reason of SPAN_REJECT_REASONS) this.spansRejected.inc({ reason }, 0);
    for (const source of TARGET_SOURCES) this.targets.set({ source }, 0);
    for (const resource of KUBERNETES_WATCHED) {
      for (const reason of KUBERNETES_WATCH_ERRORS) this.kubernetesWatchErrors.inc({ resource, reason }, 0);
    }
    this.probeUp.set(0);
    this.probeSendHook.set(0);
    this.probeAdoptedConnections.inc(0);
    for (const result of ["done", "failed"]) this.probeCompilerPageOuts.inc({ result }, 0);
    this.probeCompilerPagedOutBytes.inc(0);
    this.probeEventsLost.inc(0);
    for (const program of PROBE_PROGRAM_KINDS) this.probeMissedRuns.inc({ program }, 0);
    this.probeControlFailures.inc(0);
    this.probeParseErrors.inc(0);
    this.spansReceived.inc(0);
    this.spanLossesUntrusted.inc(0);
  }

  /**
   * Increments `counter`'s series for `labels`; with a trace, that trace
   * becomes the series' exemplar (the latest increment's), served in the
   * OpenMetrics exposition only.
   */
  incWithExemplar<T extends string>(counter: Counter<T>, labels: LabelValues<T>, exemplar: ExemplarLabels | null, value = 1): void {
    counter.inc(labels, value);
    if (exemplar === null) return;
    const size = Object.entries(exemplar).reduce((sum, [name, v]) => sum + name.length + String(v).length, 0);
    if (size > EXEMPLAR_LABELS_MAX_CHARS) return;
    let series = this.exemplars.get(counter);
    if (!series) this.exemplars.set(counter, (series = new Map<string, Exemplar>()));
    series.set(seriesKey(labels), { labels: { ...exemplar }, value, timestamp: this.now() / 1000 });
  }

  /** Removes a series of `counter` and its exemplar. */
  removeSeries<T extends string>(counter: Counter<T>, labels: LabelValues<T>): void {
    counter.remove(labels);
    this.exemplars.get(counter)?.delete(seriesKey(labels));
  }

  /** The classic Prometheus text format (0.0.4), without exemplars. */
  text(): Promise<string> {
    return this.registry.metrics();
  }

  /**
   * The same metrics in the OpenMetrics text format (1.0.0), with exemplars.
   * Rendered from the registry's values, so the registry and the classic
   * format are untouched.
   */
  async openMetrics(): Promise<string> {
    const lines: string[] = [];
    for (const family of await this.registry.getMetricsAsJSON()) {
      const type = String(family.type);
      // OpenMetrics names a counter family without `_total` and its samples with it.
      const name = type === "counter" ? family.name.replace(/_total$/, "") : family.name;
      lines.push(`# HELP ${name} ${escapeOpenMetrics(family.help)}`, `# TYPE ${name} ${type}`);
      const metric = this.registry.getSingleMetric(family.name);
      const exemplars = metric && this.exemplars.get(metric);
      for (const sample of family.values) {
        const sampleName = "metricName" in sample && typeof sample.metricName === "string"
          ? sample.metricName
          : type === "counter" ? `${name}_total` : name;
        let line = `${sampleName}${formatLabels(sample.labels)} ${formatNumber(sample.value)}`;
        const exemplar = exemplars?.get(seriesKey(sample.labels));
        if (exemplar) {
          line += ` # ${formatLabels({ ...exemplar.labels })} ${formatNumber(exemplar.value)} ${exemplar.timestamp.toFixed(3)}`;
        }
        lines.push(line);
      }
    }
    return `${lines.join("\n")}\n# EOF\n`;
  }
}
