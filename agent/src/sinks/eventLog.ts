// The loss-event log: one JSON line per event, the LossEvent schema of
// model.ts, nothing added (stdout by default).
import type { LossEvent } from "../model.ts";
import type { AgentMetrics } from "../telemetry/metrics.ts";

interface EventLogOptions {
  metrics: AgentMetrics;
  /**
   * Bytes the stream may hold unwritten before events are dropped (counted in
   * lostwrite_events_dropped_total{stage="log",reason="queue_full"}). A stuck
   * stdout pipe must not grow the agent's memory. Default 4 MiB.
   */
  maxBufferedBytes?: number;
}

interface EventLog {
  write(event: LossEvent): void;
}

/** One JSON line per loss event, exactly the event schema, nothing added. */
export function createEventLog(out: NodeJS.WritableStream, opts: EventLogOptions): EventLog {
  const maxBufferedBytes = opts.maxBufferedBytes ?? 4 * 1024 * 1024;
  opts.metrics.eventsDropped.inc({ stage: "log", reason: "queue_full" }, 0);
  return {
    write(event) {
      const text = JSON.stringify(event) + "\n";
      if (bufferedBytes(out) + text.length > maxBufferedBytes) {
        opts.metrics.eventsDropped.inc({ stage: "log", reason: "queue_full" });
        return;
      }
      out.write(text);
    },
  };
}

function bufferedBytes(out: NodeJS.WritableStream): number {
  const length = (out as { writableLength?: unknown }).writableLength;
  return typeof length === "number" ? length : 0;
}
