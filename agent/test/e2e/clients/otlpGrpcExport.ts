// Sends spans with the OpenTelemetry SDK's OTLP/gRPC exporter, as a Node
// operator would, from wherever it is run (the e2e tests run it inside a
// network namespace or a pod's cgroup). Prints each export's result as one
// JSON line.
//
//   node otlpGrpcExport.ts http://ADDR:4317 '<SpanDef[] as JSON>'   one export
//   node otlpGrpcExport.ts http://ADDR:4317                         one export per stdin line
//
// Reading stdin, the process is there before it sends anything, and every
// export goes over one exporter's channel, as an SDK's do: a test can wait
// until the agent follows the process, so that the process is a target when
// its connection is looked up.
import { createInterface } from "node:readline";
import { OTLPTraceExporter } from "@opentelemetry/exporter-trace-otlp-grpc";
import { readableSpan, type SpanDef } from "../../unit/sources/spans/otlpSpans.ts";

const [url, json] = process.argv.slice(2);
if (url === undefined) throw new Error("usage: otlpGrpcExport.ts URL [SPANS_JSON]");
const exporter = new OTLPTraceExporter({ url });

async function exportOnce(text: string): Promise<void> {
  const result = await new Promise<{ code: number; error?: Error }>((resolve) =>
    exporter.export((JSON.parse(text) as SpanDef[]).map(readableSpan), resolve),
  );
  process.stdout.write(`${JSON.stringify({ code: result.code, error: result.error?.message ?? null })}\n`);
}

if (json !== undefined) {
  await exportOnce(json);
} else {
  for await (const line of createInterface({ input: process.stdin })) {
    if (line.trim()) await exportOnce(line);
  }
}
await exporter.shutdown();
