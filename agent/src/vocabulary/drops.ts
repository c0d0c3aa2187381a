// Where the pipeline may drop something, and why: the labels of
// lostwrite_events_dropped_total. A closed set, so a new drop site must be
// named here (and in docs/metrics.md) before it can count.
export const DROP_STAGES = [
  "probeToCorrelator",
  "spansToCorrelator",
  "probeControl",
  "counters",
  "targets",
  "kubernetes",
  "correlate",
  "correlate_dedup",
  "correlate_senders",
  "correlate_retries",
  "feed",
  "log",
  "traces",
  "record",
  "otlp_forward",
  "otlp_senders",
  "go_probes",
  "go_requests",
  "go_inflight",
  "go_connections",
  "tls_answers",
] as const;
export type DropStage = (typeof DROP_STAGES)[number];

export const DROP_REASONS = ["queue_full", "capacity", "slow_client", "expired", "invalid", "upstream_error", "write_error", "not_a_target"] as const;
export type DropReason = (typeof DROP_REASONS)[number];
