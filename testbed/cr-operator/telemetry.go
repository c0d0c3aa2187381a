package main

// OpenTelemetry, configured by the standard environment as the SDK reads it:
// OTEL_EXPORTER_OTLP_ENDPOINT (or …_TRACES_ENDPOINT) for OTLP/HTTP,
// OTEL_SERVICE_NAME, OTEL_BSP_SCHEDULE_DELAY. Without an endpoint spans are
// made (so the code path is the same) and dropped.

import (
	"context"
	"net/http"
	"os"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"k8s.io/client-go/rest"
)

// The SDK's default batch delay is 5 s; the testbed's operators export
// within about a second so that tests see a reconcile's spans promptly.
const defaultBatchDelay = 200 * time.Millisecond

func setupTracing(ctx context.Context) (*sdktrace.TracerProvider, error) {
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", "cr-operator")),
		resource.WithFromEnv(), // OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES override the default name
		resource.WithProcessPID(),
	)
	if err != nil {
		return nil, err
	}
	options := []sdktrace.TracerProviderOption{sdktrace.WithResource(res)}
	if os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "" {
		exporter, err := otlptracehttp.New(ctx)
		if err != nil {
			return nil, err
		}
		var batch []sdktrace.BatchSpanProcessorOption
		// An option given here overrides the environment, so only when the environment says nothing.
		if os.Getenv("OTEL_BSP_SCHEDULE_DELAY") == "" {
			batch = append(batch, sdktrace.WithBatchTimeout(defaultBatchDelay))
		}
		options = append(options, sdktrace.WithBatcher(exporter, batch...))
	}
	provider := sdktrace.NewTracerProvider(options...)
	otel.SetTracerProvider(provider)
	otel.SetTextMapPropagator(propagation.TraceContext{})
	return provider, nil
}

// traceRequests makes every apiserver request a CLIENT span, child of the
// span in its context (the reconcile span for a status write), with the
// HTTP semantic conventions' attributes. It wraps client-go's transport, so
// requests still go over client-go's one HTTP/2 connection.
func traceRequests(config *rest.Config, provider *sdktrace.TracerProvider) {
	config.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return otelhttp.NewTransport(rt, otelhttp.WithTracerProvider(provider))
	})
}
