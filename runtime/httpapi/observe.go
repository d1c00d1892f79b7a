package httpapi

import (
	"net/http"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/switchboard-dev/switchboard/runtime/engine"
)

// Observer receives what the HTTP API measures (spec/observability.md, "Metrics").
// Implementations must be cheap, non-blocking and safe for concurrent use. Every string
// passed is from a bounded set: a route pattern, a fixed reason.
type Observer interface {
	// Request is called once per request, when its handler returns: route is the
	// pattern it matched (never the path), status the response status.
	Request(route string, status int, d time.Duration)
	// Subscribers is called with +1 when an event stream starts and -1 when it ends.
	Subscribers(delta int)
	// StreamDropped is called when the server ends an event stream before the
	// execution's terminal event, for a reason of its own (one of the Drop* reasons).
	StreamDropped(reason string)
	// IdempotencyReplay is called when a POST is answered with the execution an earlier
	// request with its Idempotency-Key created.
	IdempotencyReplay()
}

// Reasons of Observer.StreamDropped.
const (
	// DropWriteTimeout: the client did not take a frame within the write timeout.
	DropWriteTimeout = "write_timeout"
	// DropStoreError: the EventStore failed.
	DropStoreError = "store_error"
	// DropShutdown: the store is closing as the replica shuts down.
	DropShutdown = "shutdown"
	// DropRemoved: the execution was removed by retention while streaming.
	DropRemoved = "removed"
)

// nopObserver is the Observer of a server configured without one.
type nopObserver struct{}

func (nopObserver) Request(string, int, time.Duration) {}
func (nopObserver) Subscribers(int)                    {}
func (nopObserver) StreamDropped(string)               {}
func (nopObserver) IdempotencyReplay()                 {}

// AccessEntry is one request's access log line (spec/observability.md, "Access log").
// It holds no body, header, query string or token: only the route pattern, the status,
// the duration, who asked, and which execution it concerned.
type AccessEntry struct {
	// Route is the pattern the request matched, never its path.
	Route string
	// Method is the request's method, or "_OTHER" for one HTTP does not define.
	Method string
	// Status is the response status.
	Status int
	// Duration is the time from the request's arrival to its handler's return.
	Duration time.Duration
	// Principal is the authenticated caller, empty when authentication failed.
	Principal string
	// Execution is the execution the request created or named, empty when none (a
	// path id is kept only when it has the form of an execution id).
	Execution string
	// Bytes is the size of the response body written.
	Bytes int64
}

// traceContext reads and writes W3C traceparent headers. Baggage is deliberately not
// propagated: a caller's baggage is caller content.
var traceContext = propagation.TraceContext{}

// exchange is what one request's access log line, metrics and span report. It wraps the
// response writer to learn the status and size; handlers add the principal and the
// execution through note. Unwrap lets http.ResponseController reach the connection.
type exchange struct {
	http.ResponseWriter
	status    int
	bytes     int64
	principal string
	execution string
}

func (x *exchange) WriteHeader(code int) {
	if x.status == 0 {
		x.status = code
	}
	x.ResponseWriter.WriteHeader(code)
}

func (x *exchange) Write(b []byte) (int, error) {
	if x.status == 0 {
		x.status = http.StatusOK
	}
	n, err := x.ResponseWriter.Write(b)
	x.bytes += int64(n)
	return n, err
}

func (x *exchange) Unwrap() http.ResponseWriter { return x.ResponseWriter }

// note returns the exchange behind w, so that a handler can name the request's principal
// and execution; a writer that is not one (a handler called directly) gives a scratch
// exchange.
func note(w http.ResponseWriter) *exchange {
	if x, ok := w.(*exchange); ok {
		return x
	}
	return &exchange{}
}

// observed wraps an endpoint registered under route with the server span, the access log
// line and the request metrics (spec/observability.md). With tracing off the span costs
// nothing: no header is parsed and no context is made.
func (s *server) observed(route string, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		x := &exchange{ResponseWriter: w}
		var span trace.Span
		if s.tracer != nil {
			ctx := traceContext.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
			ctx, span = s.tracer.Start(ctx, route, trace.WithSpanKind(trace.SpanKindServer),
				trace.WithAttributes(
					attribute.String("http.request.method", method(r)),
					attribute.String("http.route", route),
					attribute.String("url.scheme", scheme(r)),
				))
			r = r.WithContext(ctx)
		}
		h.ServeHTTP(x, r)

		d := time.Since(start)
		if x.status == 0 {
			x.status = http.StatusOK // nothing written: net/http answers 200
		}
		if x.execution == "" {
			// A caller-supplied id is logged only when it has the form of one.
			if id := r.PathValue("id"); engine.IsExecutionID(id) {
				x.execution = id
			}
		}
		s.obs.Request(route, x.status, d)
		if span != nil {
			span.SetAttributes(attribute.Int("http.response.status_code", x.status))
			if x.execution != "" {
				span.SetAttributes(attribute.String("switchboard.execution.id", x.execution))
			}
			if x.status >= http.StatusInternalServerError {
				span.SetStatus(codes.Error, strconv.Itoa(x.status))
			}
			span.End()
		}
		if s.access != nil {
			s.access(AccessEntry{Route: route, Method: method(r), Status: x.status, Duration: d,
				Principal: x.principal, Execution: x.execution, Bytes: x.bytes})
		}
	})
}

// method is the request's method when it is one of HTTP's, else "_OTHER" (as the
// OpenTelemetry HTTP conventions say): a caller's made-up method is never logged.
func method(r *http.Request) string {
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodConnect, http.MethodOptions, http.MethodTrace:
		return r.Method
	}
	return "_OTHER"
}

// scheme is the request's URL scheme as the server sees it.
func scheme(r *http.Request) string {
	if r.TLS != nil {
		return "https"
	}
	return "http"
}
