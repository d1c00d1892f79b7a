package providerhttp

import (
	"context"
	"io"
	"mime"
	"net/http"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// NewRequest is http.NewRequestWithContext for a request to a provider. When ctx
// carries a traced span (the attempt's, with tracing on) it sends the span's W3C
// traceparent, so the provider's side of the call joins the attempt's trace
// (spec/observability.md, "Tracing"). Only traceparent and tracestate are sent: baggage
// may hold caller content and never leaves.
func NewRequest(ctx context.Context, method, url string, body io.Reader) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, method, url, body)
	if err != nil {
		return nil, err
	}
	if trace.SpanContextFromContext(ctx).IsValid() {
		propagation.TraceContext{}.Inject(ctx, propagation.HeaderCarrier(req.Header))
	}
	return req, nil
}

// IsJSON reports whether a response is one JSON document rather than an event stream:
// a streamed call that a compatible server or proxy answered whole.
func IsJSON(h http.Header) bool {
	mt, _, err := mime.ParseMediaType(h.Get("Content-Type"))
	return err == nil && mt == "application/json"
}
