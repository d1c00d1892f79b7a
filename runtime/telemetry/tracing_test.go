package telemetry_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/switchboard-dev/switchboard/runtime/telemetry"
)

// unsetOTel clears the OTEL_* variables the test process may have inherited.
func unsetOTel(t *testing.T) {
	for _, k := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"} {
		t.Setenv(k, "")
	}
}

// TestTracingOffByDefault: without an endpoint there is no tracer provider, and the
// runtime's tracer is nil (every span is skipped).
func TestTracingOffByDefault(t *testing.T) {
	unsetOTel(t)
	tp, err := telemetry.Tracing(context.Background(), telemetry.TracingConfig{})
	if err != nil || tp != nil {
		t.Fatalf("Tracing = %v, %v; want nil, nil", tp, err)
	}
	if telemetry.Tracer(nil) != nil {
		t.Error("Tracer(nil) is not nil")
	}
	for _, bad := range []string{"otel-collector:4318", "ftp://x", "http://"} {
		if _, err := telemetry.Tracing(context.Background(), telemetry.TracingConfig{Endpoint: bad}); err == nil {
			t.Errorf("--otel-endpoint %q was accepted", bad)
		}
	}
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")
	if _, err := telemetry.Tracing(context.Background(), telemetry.TracingConfig{}); err == nil {
		t.Error("an unsupported protocol was accepted")
	}
}

// TestTracingExportsOverOTLP: with --otel-endpoint, or OTEL_EXPORTER_OTLP_ENDPOINT, spans
// reach the collector as OTLP/HTTP protobuf on /v1/traces when the provider shuts down.
func TestTracingExportsOverOTLP(t *testing.T) {
	for name, cfg := range map[string]func(t *testing.T, url string) telemetry.TracingConfig{
		"flag": func(_ *testing.T, url string) telemetry.TracingConfig {
			return telemetry.TracingConfig{Endpoint: url}
		},
		"environment": func(t *testing.T, url string) telemetry.TracingConfig {
			t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", url)
			return telemetry.TracingConfig{}
		},
	} {
		t.Run(name, func(t *testing.T) {
			unsetOTel(t)
			var exports atomic.Int32
			collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method == http.MethodPost && r.URL.Path == "/v1/traces" && r.Header.Get("Content-Type") == "application/x-protobuf" {
					exports.Add(1)
				}
				w.Header().Set("Content-Type", "application/x-protobuf")
			}))
			defer collector.Close()
			tp, err := telemetry.Tracing(context.Background(), cfg(t, collector.URL))
			if err != nil || tp == nil {
				t.Fatalf("Tracing = %v, %v", tp, err)
			}
			_, span := telemetry.Tracer(tp).Start(context.Background(), "test")
			span.End()
			if err := tp.Shutdown(context.Background()); err != nil {
				t.Fatal(err)
			}
			if exports.Load() == 0 {
				t.Error("the collector received no OTLP export")
			}
		})
	}
}
