// Exports each matched loss as a span inside the operator's own trace: a
// child of the span the loss was matched to, at the kernel time of the
// failure. Someone reading the reconcile trace in Tempo or Jaeger then sees the
// write that never arrived right under the request that sent it.
//
// The exporter is the OpenTelemetry Node SDK configured by the standard
// OTEL_* environment (OTEL_TRACES_EXPORTER, OTEL_EXPORTER_OTLP_ENDPOINT,
// OTEL_EXPORTER_OTLP_TRACES_PROTOCOL, OTEL_BSP_*, ...). Telemetry must never
// break the data path: export() does not throw, and SDK errors (an unreachable
// collector, a full batch queue) are logged rate-limited.
//
// The SDK is loaded only when export is on: it is the agent's heaviest
// dependency (about 50 MiB of resident memory on a node that never uses it).
import {
  context,
  diag,
  DiagLogLevel,
  isValidSpanId,
  isValidTraceId,
  logs,
  propagation,
  ROOT_CONTEXT,
  SpanKind,
  SpanStatusCode,
  trace,
  TraceFlags,
  type Attributes,
  type DiagLogger,
  type Tracer,
} from "@opentelemetry/api";
import type { LossEvent } from "../model.ts";
import type { Logger } from "../telemetry/log.ts";
import type { AgentMetrics } from "../telemetry/metrics.ts";
import { nsToHrTime, parseRfc3339Ns } from "./rfc3339.ts";
import { splitHostPort } from "../hostPort.ts";

const LOST_WRITE_SPAN_NAME = "status write lost";

interface TraceSinkOptions {
  enabled: boolean;
  /** Overrides OTEL_SERVICE_NAME; without either the resource says service.name=lostwrite. */
  serviceName?: string;
  /** Where export problems go, rate-limited. Without it they are dropped silently. */
  logger?: Logger;
  /** Counts events that could not be exported (stage "traces", reason "invalid"). */
  metrics?: AgentMetrics;
  /** Longest shutdown waits for the last batch (a dead collector is retried until OTEL_EXPORTER_OTLP_TIMEOUT). Default 5 s. */
  shutdownTimeoutMs?: number;
}

export interface TraceSink {
  export(event: LossEvent): void;
  /** Flushes what is queued and stops the SDK. */
  shutdown(): Promise<void>;
}

/** The sink of a disabled export: takes every event, sends none. */
export const DISABLED_TRACE_SINK: TraceSink = { export: () => {}, shutdown: () => Promise.resolve() };

export async function createTraceSink(opts: TraceSinkOptions): Promise<TraceSink> {
  if (!opts.enabled) return DISABLED_TRACE_SINK;
  const [{ NodeSDK }, { defaultResource, resourceFromAttributes }] = await Promise.all([
    import("@opentelemetry/sdk-node"),
    import("@opentelemetry/resources"),
  ]);
  const { logger, metrics } = opts;
  metrics?.eventsDropped.inc({ stage: "traces", reason: "invalid" }, 0);

  if (logger !== undefined && process.env.OTEL_LOG_LEVEL === undefined) {
    diag.setLogger(diagToLogger(logger), { logLevel: DiagLogLevel.WARN, suppressOverrideMessage: true });
  }

  const sdk = new NodeSDK({
    // OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES still apply over this default.
    resource: defaultResource().merge(resourceFromAttributes({ "service.name": "lostwrite" })),
    ...(opts.serviceName !== undefined ? { serviceName: opts.serviceName } : {}),
    // Only traces: metrics are Prometheus (telemetry/metrics.ts), logs are JSON lines.
    metricReaders: [],
    logRecordProcessors: [],
    // Parents are set explicitly from the loss event; nothing propagates.
    textMapPropagator: null,
  });
  sdk.start();
  const tracer: Tracer = trace.getTracer("lostwrite");

  function skip(reason: string, event: LossEvent): void {
    metrics?.eventsDropped.inc({ stage: "traces", reason: "invalid" });
    logger?.warnRateLimited(`traces:${reason}`, `loss event not exported as a span: ${reason}`, {
      time: event.time,
      trace_id: event.trace_id,
      span_id: event.span_id,
    });
  }

  return {
    export(event) {
      try {
        const { trace_id: traceId, span_id: spanId } = event;
        if (traceId === null || spanId === null) return;
        if (!isValidTraceId(traceId) || !isValidSpanId(spanId)) return skip("invalid trace_id or span_id", event);
        const timeNs = parseRfc3339Ns(event.time);
        if (timeNs === null) return skip("time is not RFC 3339", event);

        // The matched span reached us, so it was sampled: the child is sampled too.
        const parent = trace.setSpanContext(ROOT_CONTEXT, {
          traceId,
          spanId,
          traceFlags: TraceFlags.SAMPLED,
          isRemote: true,
        });
        const time = nsToHrTime(timeNs);
        const span = tracer.startSpan(
          LOST_WRITE_SPAN_NAME,
          { kind: SpanKind.INTERNAL, startTime: time, attributes: lossAttributes(event) },
          parent,
        );
        span.setStatus({ code: SpanStatusCode.ERROR, message: [event.cause, event.errno].filter(Boolean).join(" ") });
        span.end(time);
      } catch (err) {
        logger?.warnRateLimited("traces:export", "exporting a loss span failed", { err });
      }
    },
    async shutdown() {
      let timer: NodeJS.Timeout | undefined;
      try {
        const timeoutMs = opts.shutdownTimeoutMs ?? 5000;
        const timedOut = new Promise<never>((_resolve, reject) => {
          timer = setTimeout(() => reject(new Error(`gave up flushing spans after ${timeoutMs} ms`)), timeoutMs);
        });
        await Promise.race([sdk.shutdown(), timedOut]);
      } catch (err) {
        logger?.warn("trace exporter shutdown failed", { err });
      } finally {
        clearTimeout(timer);
        // The SDK registered these globals; release them so the process (or
        // the next sink, in tests) starts clean.
        trace.disable();
        logs.disable();
        context.disable();
        propagation.disable();
      }
    },
  };
}

/** The attributes of the exported "status write lost" span; unknown (null) values are left out, not invented. */
export function lossAttributes(event: LossEvent): Attributes {
  const server = event.apiserver === null ? null : splitHostPort(event.apiserver);
  const attributes: Attributes = {
    "lostwrite.cause": event.cause,
    "lostwrite.errno": event.errno ?? undefined,
    "lostwrite.syscall": event.syscall ?? undefined,
    "lostwrite.noticed": event.noticed,
    "process.pid": event.pid ?? undefined,
    "thread.id": event.tid ?? undefined,
    "k8s.namespace.name": event.namespace || undefined,
    "k8s.pod.name": event.pod || undefined,
    "k8s.container.name": event.container || undefined,
    "server.address": server?.host,
    "server.port": server?.port,
    "error.type": event.errno ?? event.cause,
    "http.response.status_code": event.request?.status_code ?? undefined,
  };
  for (const key of Object.keys(attributes)) if (attributes[key] === undefined) delete attributes[key];
  return attributes;
}

function diagToLogger(logger: Logger): DiagLogger {
  // Keyed by the message's start, so a collector outage logs once a minute
  // with a count instead of once per batch.
  const warn = (message: string, ...args: unknown[]) =>
    logger.warnRateLimited(`otel:${message.slice(0, 48)}`, `opentelemetry: ${message}`, args.length > 0 ? { details: args.map(String) } : undefined);
  return { error: warn, warn, info: () => {}, debug: () => {}, verbose: () => {} };
}
