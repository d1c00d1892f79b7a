package telemetry

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"

	"github.com/go-logr/logr"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/switchboard-dev/switchboard/runtime/version"
)

// TracerName is the instrumentation scope of the runtime's spans.
const TracerName = "github.com/switchboard-dev/switchboard"

// TracingConfig says whether and where the runtime exports traces
// (spec/observability.md, "Tracing").
type TracingConfig struct {
	// Endpoint is the OTLP endpoint's base URL (--otel-endpoint), as
	// OTEL_EXPORTER_OTLP_ENDPOINT would give it, e.g. http://otel-collector:4318: spans
	// go to its path /v1/traces over HTTP. Empty: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or
	// OTEL_EXPORTER_OTLP_ENDPOINT; none of them set means tracing is off.
	Endpoint string
	// Logger receives the SDK's export errors; the zero Logger discards them.
	Logger logr.Logger
}

// Tracing returns the tracer provider of the runtime's spans, or nil when tracing is off.
// Spans go to an OTLP exporter over HTTP/protobuf, or gRPC when
// OTEL_EXPORTER_OTLP_TRACES_PROTOCOL or OTEL_EXPORTER_OTLP_PROTOCOL says grpc; the
// exporter and the SDK read the other OTEL_* variables themselves (headers, TLS,
// timeouts, sampler, batching, resource attributes). Shut the provider down on exit to
// flush what is buffered.
func Tracing(ctx context.Context, cfg TracingConfig) (*sdktrace.TracerProvider, error) {
	if cfg.Endpoint == "" && os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" && os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" {
		return nil, nil
	}
	var base *url.URL
	if cfg.Endpoint != "" {
		u, err := url.Parse(cfg.Endpoint)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			// The value is not echoed: a URL may carry credentials.
			return nil, errors.New("--otel-endpoint: want an http or https URL with a host, such as http://otel-collector:4318")
		}
		base = u
	}
	protocol := os.Getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if protocol == "" {
		protocol = os.Getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	var (
		exporter sdktrace.SpanExporter
		err      error
	)
	switch strings.TrimSpace(protocol) {
	case "", "http/protobuf":
		var opts []otlptracehttp.Option
		if base != nil {
			opts = append(opts, otlptracehttp.WithEndpointURL(base.JoinPath("v1/traces").String()))
		}
		exporter, err = otlptracehttp.New(ctx, opts...)
	case "grpc":
		var opts []otlptracegrpc.Option
		if base != nil {
			opts = append(opts, otlptracegrpc.WithEndpointURL(base.String()))
		}
		exporter, err = otlptracegrpc.New(ctx, opts...)
	default:
		return nil, fmt.Errorf("OTEL_EXPORTER_OTLP_PROTOCOL: unsupported protocol %q (want http/protobuf or grpc)", protocol)
	}
	if err != nil {
		return nil, fmt.Errorf("otlp trace exporter: %w", err)
	}
	// Later sources win: OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES override the
	// defaults.
	res, err := resource.New(ctx,
		resource.WithAttributes(
			attribute.String("service.name", "switchboard"),
			attribute.String("service.version", version.Get().Version),
		),
		resource.WithTelemetrySDK(),
		resource.WithFromEnv(),
	)
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return nil, fmt.Errorf("trace resource: %w", err)
	}
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		cfg.Logger.Error(err, "Cannot export spans")
	}))
	return sdktrace.NewTracerProvider(sdktrace.WithBatcher(exporter), sdktrace.WithResource(res)), nil
}

// Tracer returns the runtime's tracer from tp, or nil when tp is nil (tracing off): the
// engine and the HTTP API then skip every span.
func Tracer(tp *sdktrace.TracerProvider) trace.Tracer {
	if tp == nil {
		return nil
	}
	return tp.Tracer(TracerName, trace.WithInstrumentationVersion(version.Get().Version))
}
