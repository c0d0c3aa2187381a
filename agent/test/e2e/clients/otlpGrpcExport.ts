// Sends spans with the OpenTelemetry SDK's OTLP/gRPC exporter, as a Node
// operator would, from wherever it is run (the e2e tests run it inside a
// network namespace). Prints the export result as one JSON line.
//
//   node otlpGrpcExport.ts http://ADDR:4317 '<SpanDef[] as JSON>'
import { OTLPTraceExporter } from "@opentelemetry/exporter-trace-otlp-grpc";
import { readableSpan, type SpanDef } from "../../unit/sources/spans/otlpSpans.ts";

const [url, json] = process.argv.slice(2);
if (url === undefined || json === undefined) throw new Error("usage: otlpGrpcExport.ts URL SPANS_JSON");
const exporter = new OTLPTraceExporter({ url });
const result = await new Promise<{ code: number; error?: Error }>((resolve) =>
  exporter.export((JSON.parse(json) as SpanDef[]).map(readableSpan), resolve),
);
await exporter.shutdown();
process.stdout.write(`${JSON.stringify({ code: result.code, error: result.error?.message ?? null })}\n`);
