// OpenTelemetry for the operator, configured the standard way: exporter,
// endpoint, headers and protocol from OTEL_EXPORTER_OTLP_* (default
// http/protobuf to http://localhost:4318), service name from OTEL_SERVICE_NAME.
// The batch delay defaults to 200 ms instead of 5 s so spans reach a
// detector within about a second; OTEL_BSP_SCHEDULE_DELAY overrides it.
import { trace, type Tracer } from "@opentelemetry/api";
import { resourceFromAttributes } from "@opentelemetry/resources";
import { NodeSDK } from "@opentelemetry/sdk-node";

interface Telemetry {
  tracer: Tracer;
  shutdown(): Promise<void>;
}

export function startTelemetry(defaultServiceName: string): Telemetry {
  process.env.OTEL_BSP_SCHEDULE_DELAY ??= "200";
  const sdk = new NodeSDK({
    serviceName: process.env.OTEL_SERVICE_NAME ?? defaultServiceName,
    // process.pid is how lostwrite ties spans to the process its probes watch.
    resource: resourceFromAttributes({ "process.pid": process.pid }),
    instrumentations: [],
  });
  sdk.start();
  return {
    tracer: trace.getTracer("lostwrite-testbed-operator"),
    shutdown: () => sdk.shutdown(),
  };
}
