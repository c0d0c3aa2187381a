// What a loss event says happened, as closed sets: the event schema, the
// metric labels, the demo's table and the docs all take them from here.

/** Why a status write was lost, as the event's `cause` and the metric's label. */
export const LOSS_CAUSES = [
  "write_failed",
  "zero_byte_write",
  "connect_failed",
  "connection_reset",
  "connection_closed_unanswered",
  "http_rejected",
  // Seen per request, by the Go HTTP/2 probe: the server reset the request's stream…
  "stream_reset",
  // …or the client abandoned the request before any answer (its timeout or a cancel).
  "client_gave_up",
] as const;
export type LossCause = (typeof LOSS_CAUSES)[number];

/**
 * How an apiserver connection died with a request still unanswered:
 * closed_unanswered is the apiserver's close (or a close nobody can tell),
 * closed_by_client the client's own (its timeout, a cancel).
 */
export const CONNECTION_LOSS_REASONS = ["reset", "timeout", "closed_unanswered", "closed_by_client"] as const;
export type ConnectionLossReason = (typeof CONNECTION_LOSS_REASONS)[number];

/** Whether the operator's own telemetry recorded the failure. */
export const NOTICED = ["yes", "no", "unknown"] as const;
export type Noticed = (typeof NOTICED)[number];

/** Which kind of request was lost: a status write, another request, or not known (socket path without a span). */
export const REQUESTS = ["status", "other", "unknown"] as const;

/** Whether the kernel could tell the request went unanswered: uncertain where a TLS 1.3 session ticket may have looked like its answer. */
export const VERDICTS = ["certain", "uncertain"] as const;
