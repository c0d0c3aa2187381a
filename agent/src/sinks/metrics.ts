// Every metric the agent exports is declared here, in one module, so the
// public contract (docs/metrics.md, dashboards, alerts) has one source.
// Label values come from closed sets; anything outside a set becomes "other",
// so no label can grow with pids, object names, paths or trace ids.
import { Counter, Gauge, Histogram, Registry } from "prom-client";

export const CAUSES = [
  "write_failed",
  "zero_byte_write",
  "connect_failed",
  "connection_reset",
  "connection_closed_unanswered",
  "http_rejected",
] as const;
export const NOTICED = ["yes", "no", "unknown"] as const;
export const REQUESTS = ["status", "other", "unknown"] as const;
export const SYSCALLS = ["write", "writev", "sendto", "sendmsg", "connect", "unknown"] as const;
export const CONNECTION_LOSS_REASONS = ["reset", "timeout", "closed_unanswered"] as const;
export const PROBE_RESTART_REASONS = ["exited", "heartbeat_missed", "spawn_failed"] as const;
export const SPAN_REJECT_REASONS = [
  "malformed",
  "unsupported_media_type",
  "too_large",
  "queue_full",
  "method_not_allowed",
] as const;
export const DROP_REASONS = ["queue_full", "capacity", "slow_client", "expired", "invalid", "upstream_error", "write_error", "not_a_target"] as const;
export const TARGET_SOURCES = ["pid", "comm", "cmdline", "kubernetes"] as const;

/** Keeps a label value inside its closed set. */
export function closed<T extends readonly string[]>(set: T, value: string): T[number] | "other" {
  return (set as readonly string[]).includes(value) ? (value) : "other";
}

const workload = ["namespace", "pod", "container", "process"] as const;

export class AgentMetrics {
  readonly registry = new Registry();

  readonly statusWriteLost = new Counter({
    name: "lostwrite_status_write_lost_total",
    help: "Writes to the apiserver that did not arrive or were not answered.",
    labelNames: [...workload, "controller", "request", "cause", "errno", "noticed"],
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
    help: "The probe program variant chosen for this kernel (value is always 1).",
    labelNames: ["variant", "bpftrace_version"],
    registers: [this.registry],
  });
  readonly probeRestarts = new Counter({
    name: "lostwrite_probe_restarts_total",
    help: "bpftrace restarts by the supervisor, by reason.",
    labelNames: ["reason"],
    registers: [this.registry],
  });
  readonly probeControlFailures = new Counter({
    name: "lostwrite_probe_control_failures_total",
    help: "Target or endpoint changes the probe did not acknowledge after every retry.",
    registers: [this.registry],
  });
  readonly probeEventsLost = new Counter({
    name: "lostwrite_probe_events_lost_total",
    help: "Events the kernel dropped before bpftrace read them.",
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
    help: "OTLP requests rejected by the receiver, by reason.",
    labelNames: ["reason"],
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
  readonly eventsDropped = new Counter({
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

  constructor() {
    // Closed label sets start at zero so rate() and absent-series alerts work
    // from the first scrape.
    for (const reason of PROBE_RESTART_REASONS) this.probeRestarts.inc({ reason }, 0);
    for (const reason of SPAN_REJECT_REASONS) this.spansRejected.inc({ reason }, 0);
    for (const source of TARGET_SOURCES) this.targets.set({ source }, 0);
    this.probeUp.set(0);
    this.probeEventsLost.inc(0);
    this.probeControlFailures.inc(0);
    this.probeParseErrors.inc(0);
    this.spansReceived.inc(0);
  }

  text(): Promise<string> {
    return this.registry.metrics();
  }
}
