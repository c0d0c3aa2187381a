// A real Jaeger v2 (the one `npm run tools` builds) for e2e tests: an OTLP/HTTP
// receiver and the query API on free loopback ports, memory storage. Its
// config is generated, modelled on Jaeger's own all-in-one.yaml with what a
// test does not use left out (the Jaeger and Zipkin receivers, OTLP/gRPC,
// remote sampling, the health check, expvar, zpages, its own metrics on
// :8888), so nothing listens outside loopback or on a fixed port.
//
// `trace(id)` reads a trace over /api/traces/{id}: the route Grafana's Jaeger
// data source calls for a trace-id query, so a test that resolves the
// dashboard's trace link reads exactly what Grafana would.
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { stringify } from "yaml";
import { z } from "zod";
import { freeLoopbackPort, startManagedProcess, waitUntilReady, type ManagedProcess } from "./managedProcess.ts";
import { builtTool, type LocatedTool } from "./tools.ts";

/** Jaeger v2 as `npm run tools` builds it. */
export const JAEGER_TOOL: LocatedTool = builtTool("jaeger");

/** One span of a trace as Jaeger's query API answers it, flattened for assertions. */
export interface JaegerSpan {
  /** 32 lowercase hex digits (Jaeger leaves out leading zeros; they are put back). */
  traceId: string;
  spanId: string;
  /** The span's CHILD_OF reference, or "" for a root span. */
  parentSpanId: string;
  name: string;
  /** The resource's service.name. */
  service: string;
  /** The resource's other attributes (process.pid, …), as Jaeger keeps them on the span's process. */
  resource: Record<string, unknown>;
  /** Span attributes, with Jaeger's own (span.kind, otel.status_code, error). */
  tags: Record<string, unknown>;
  /** Start, µs since the epoch (Jaeger's precision). */
  startTimeUs: number;
}

const keyValues = z.array(z.object({ key: z.string(), value: z.unknown() }).loose()).nullish();
const uiTrace = z.object({
  traceID: z.string().regex(/^[0-9a-f]{1,32}$/),
  spans: z.array(
    z
      .object({
        traceID: z.string().regex(/^[0-9a-f]{1,32}$/),
        spanID: z.string().regex(/^[0-9a-f]{16}$/),
        operationName: z.string(),
        references: z.array(z.object({ refType: z.string(), traceID: z.string(), spanID: z.string() })).nullish(),
        processID: z.string(),
        startTime: z.number(),
        tags: keyValues,
      })
      .loose(),
  ),
  processes: z.record(z.string(), z.object({ serviceName: z.string(), tags: keyValues }).loose()),
});
/** GET /api/traces/{id}: the Jaeger UI's JSON, which Grafana's Jaeger data source reads too. */
const traceAnswer = z.object({
  data: z.array(uiTrace).nullable(),
  errors: z.array(z.object({ code: z.number().optional(), msg: z.string() }).loose()).nullish(),
});

/** GET /api/services. */
const servicesAnswer = z.object({ data: z.array(z.string()).nullable() });

const fullTraceId = (id: string): string => id.padStart(32, "0");

function flatten(trace: z.infer<typeof uiTrace>): JaegerSpan[] {
  return trace.spans.map((span) => ({
    traceId: fullTraceId(span.traceID),
    spanId: span.spanID,
    parentSpanId: span.references?.find((r) => r.refType === "CHILD_OF")?.spanID ?? "",
    name: span.operationName,
    service: trace.processes[span.processID]?.serviceName ?? "",
    resource: Object.fromEntries((trace.processes[span.processID]?.tags ?? []).map(({ key, value }) => [key, value])),
    tags: Object.fromEntries((span.tags ?? []).map(({ key, value }) => [key, value])),
    startTimeUs: span.startTime,
  }));
}

/**
 * The trace behind a Jaeger query-API trace URL (`…/api/traces/{id}`): its
 * spans, or null when Jaeger has no such trace (404). Throws on anything else.
 */
export async function fetchJaegerTrace(url: string): Promise<JaegerSpan[] | null> {
  const response = await fetch(url, { signal: AbortSignal.timeout(10_000) });
  const text = await response.text();
  if (response.status === 404) return null;
  if (!response.ok) throw new Error(`GET ${url}: HTTP ${response.status}: ${text.slice(0, 500)}`);
  const answer = traceAnswer.parse(JSON.parse(text));
  if (answer.errors?.length) throw new Error(`GET ${url}: ${JSON.stringify(answer.errors)}`);
  if (answer.data?.length !== 1) throw new Error(`GET ${url}: expected one trace, got ${answer.data?.length ?? 0}`);
  return flatten(answer.data[0]!);
}

export interface RunningJaeger {
  /** The query API's base URL, e.g. http://127.0.0.1:41234: what a Grafana Jaeger data source's URL is set to. */
  readonly url: string;
  /** OTLP/HTTP base URL, for OTEL_EXPORTER_OTLP_ENDPOINT (the exporter adds /v1/traces). */
  readonly otlpEndpoint: string;
  /** The full OTLP/HTTP traces URL, for the agent's --otlp-forward. */
  readonly otlpTracesUrl: string;
  /** The trace's spans as stored now, or null while Jaeger has none of it. */
  trace(traceId: string): Promise<JaegerSpan[] | null>;
  /** The services Jaeger has spans of. */
  services(): Promise<string[]>;
  /** Jaeger's log so far (for assertion messages). */
  output(): string;
  stop(): Promise<void>;
  [Symbol.asyncDispose](): Promise<void>;
}

/** Jaeger's configuration: all-in-one.yaml's shape, on the given loopback ports, memory storage only. */
export function jaegerConfig(ports: { otlpHttp: number; queryHttp: number; queryGrpc: number }): Record<string, unknown> {
  const loopback = (port: number): string => `127.0.0.1:${port}`;
  return {
    service: {
      extensions: ["jaeger_storage", "jaeger_query"],
      pipelines: {
        traces: { receivers: ["otlp"], processors: ["batch"], exporters: ["jaeger_storage_exporter"] },
      },
      telemetry: {
        resource: { "service.name": "jaeger" },
        // Its own metrics would listen on :8888.
        metrics: { level: "none", readers: [] },
        logs: { level: "info" },
      },
    },
    extensions: {
      jaeger_query: {
        storage: { traces: "memory_store" },
        http: { endpoint: loopback(ports.queryHttp) },
        // Not used, but served anyway (default :16685 on every interface).
        grpc: { endpoint: loopback(ports.queryGrpc) },
      },
      jaeger_storage: { backends: { memory_store: { memory: { max_traces: 10_000 } } } },
    },
    receivers: { otlp: { protocols: { http: { endpoint: loopback(ports.otlpHttp) } } } },
    processors: { batch: { timeout: "100ms" } },
    exporters: { jaeger_storage_exporter: { trace_storage: "memory_store" } },
  };
}

/**
 * Waits until the OTLP receiver takes a (empty) trace request: the collector
 * starts receivers last, after the storage, the exporter and the query API.
 */
async function waitForOtlpReceiver(url: string, process: ManagedProcess, timeoutMs = 20_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let last = "no answer yet";
  while (Date.now() < deadline) {
    if (process.exited()) throw new Error(`${process.name} exited before its OTLP receiver was up:\n${process.output()}`);
    try {
      const response = await fetch(url, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ resourceSpans: [] }),
        signal: AbortSignal.timeout(1000),
      });
      await response.arrayBuffer();
      if (response.ok) return;
      last = `HTTP ${response.status}`;
    } catch (error) {
      last = String(error);
    }
    await sleep(100);
  }
  throw new Error(`${process.name}: OTLP receiver not up at ${url} after ${timeoutMs} ms (${last}):\n${process.output()}`);
}

export async function startJaeger(tool: LocatedTool = JAEGER_TOOL): Promise<RunningJaeger> {
  const binary = tool.path ?? (() => { throw new Error(tool.reason); })();
  const dir = mkdtempSync(join(tmpdir(), "lostwrite-jaeger-"));
  const picked = new Set<number>();
  while (picked.size < 3) picked.add(await freeLoopbackPort());
  const [otlpHttp, queryHttp, queryGrpc] = [...picked] as [number, number, number];
  const ports = { otlpHttp, queryHttp, queryGrpc };
  const configPath = join(dir, "jaeger.yaml");
  writeFileSync(configPath, stringify(jaegerConfig(ports)));
  const server = startManagedProcess("jaeger", binary, ["--config", configPath]);
  const url = `http://127.0.0.1:${ports.queryHttp}`;
  const otlpEndpoint = `http://127.0.0.1:${ports.otlpHttp}`;
  const stop = async (): Promise<void> => {
    await server.stop();
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    await waitUntilReady(`${url}/api/services`, server);
    await waitForOtlpReceiver(`${otlpEndpoint}/v1/traces`, server);
  } catch (error) {
    await stop();
    throw error;
  }
  return {
    url,
    otlpEndpoint,
    otlpTracesUrl: `${otlpEndpoint}/v1/traces`,
    trace: (traceId) => fetchJaegerTrace(`${url}/api/traces/${encodeURIComponent(traceId)}`),
    services: async () => servicesAnswer.parse(await (await fetch(`${url}/api/services`, { signal: AbortSignal.timeout(10_000) })).json()).data ?? [],
    output: () => server.output(),
    stop,
    [Symbol.asyncDispose]: stop,
  };
}
