// Package httpapi serves Switchboard's execution HTTP API (spec/http-api.md,
// spec/events.md): submitting executions (with Idempotency-Key), their status, result
// snapshot and cancellation, and their event stream as server-sent events or as a polling
// JSON page.
//
// The package holds no execution state of its own. It decodes and checks requests, hands
// submissions to the engine (which names them, creates them and answers idempotent
// replays) and renders its answers, and reads everything else from the EventStore, so
// any replica sharing the store answers for any execution. Event streams are
// pull-based: a subscriber keeps only its cursor and alternates Store.Read and
// Store.Wait, so a slow reader costs no memory beyond one batch and never holds up the
// engine or other readers.
package httpapi

import (
	"context"
	"net/http"
	"time"

	"github.com/go-logr/logr"
	"go.opentelemetry.io/otel/trace"

	"github.com/switchboard-dev/switchboard/runtime/auth"
	"github.com/switchboard-dev/switchboard/runtime/compat"
	"github.com/switchboard-dev/switchboard/runtime/engine"
	"github.com/switchboard-dev/switchboard/runtime/eventstore"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
)

// Defaults of the Config fields left zero; each matches the flag of the same name in
// spec/http-api.md ("Connections") and spec/events.md ("Keep-alive and timeouts").
const (
	// DefaultMaxRequestBytes bounds a request body (--max-request-bytes).
	DefaultMaxRequestBytes = protocol.DefaultMaxRequestBytes
	// DefaultSSEKeepAlive is the idle time after which a stream gets a keep-alive
	// comment (--sse-keepalive).
	DefaultSSEKeepAlive = 15 * time.Second
	// DefaultSSEWriteTimeout bounds each write to a stream (--sse-write-timeout).
	DefaultSSEWriteTimeout = 30 * time.Second
)

// Engine is what the API asks of the engine (an *engine.Engine): to submit executions,
// which it names, creates and, for a repeated idempotency key, replays, to cancel them,
// and to remove them (a front door's delete).
type Engine interface {
	Submit(ctx context.Context, p engine.Principal, req *protocol.Request, idem engine.Idempotency) (engine.Accepted, bool, error)
	Cancel(ctx context.Context, id string) (engine.Cancellation, error)
	Remove(ctx context.Context, id string) error
}

// Store is what the API reads from the EventStore the engine records into: executions'
// status, results and events.
type Store interface {
	eventstore.Reader
}

// Config holds the server's dependencies and limits.
type Config struct {
	// Engine accepts new executions and cancels running ones. Required.
	Engine Engine
	// Store is the EventStore the engine records into; status, results and events are
	// read from it. Required.
	Store Store
	// Announcer is the store's when its wake-ups carry the events they announce (the
	// Redis store): a woken event stream takes them from it rather than reading the
	// store. Nil means a store without.
	Announcer eventstore.Announcer
	// MaxRequestBytes bounds request bodies; larger ones get 413. Default
	// DefaultMaxRequestBytes.
	MaxRequestBytes int64
	// SSEKeepAlive is the idle time after which an event stream gets a ": keep-alive"
	// comment, so that proxies do not time the connection out. Default
	// DefaultSSEKeepAlive.
	SSEKeepAlive time.Duration
	// SSEWriteTimeout bounds each write to an event stream: a reader that does not take
	// a frame within it is dropped. Default DefaultSSEWriteTimeout.
	SSEWriteTimeout time.Duration
	// Auth identifies callers and decides what they may do (spec/authentication.md);
	// nil means no authentication: every caller is auth.Anonymous, allowed everything.
	Auth *auth.Auth
	// StreamTokens signs the read tokens of the 202 body's events and result links and
	// verifies them; nil means links without tokens. Only used with Auth.
	StreamTokens *auth.StreamTokens
	// Logger receives internal errors (whose text never reaches a caller). Default: a
	// logger that discards.
	Logger logr.Logger
	// AccessLog is called once per request, when its handler returns, to write the
	// access log line (spec/observability.md, "Access log"); nil writes none.
	AccessLog func(AccessEntry)
	// Observer receives the server's measurements; nil records none.
	Observer Observer
	// Tracer makes a server span per request, honouring an incoming traceparent
	// (spec/observability.md, "Tracing"); nil traces nothing, at no cost.
	Tracer trace.Tracer
	// Now returns the current time, at which stream tokens are checked. Default
	// time.Now.
	Now func() time.Time
	// FrontDoors are the compatible front doors served beside the native API
	// (spec/compat.md); none when empty.
	FrontDoors []compat.Door
	// Table is the routing table the engine routes on; the front doors list and
	// resolve model names from it. Required with FrontDoors.
	Table engine.TableSource
}

// server is the handler NewServer returns.
type server struct {
	engine          Engine
	store           Store
	announcer       eventstore.Announcer // Config.Announcer; may be nil
	maxRequestBytes int64
	keepAlive       time.Duration
	writeTimeout    time.Duration
	log             logr.Logger
	access          func(AccessEntry)
	obs             Observer
	tracer          trace.Tracer // nil: tracing is off
	now             func() time.Time
	mux             *http.ServeMux
	table           engine.TableSource // Config.Table; may be nil without front doors

	auth   *auth.Auth
	tokens *auth.StreamTokens
}

// NewServer returns the HTTP handler of the execution API.
//
// Event streams last as long as their executions. To end them on shutdown, give the
// http.Server a BaseContext that is cancelled when shutdown starts (request contexts
// derive from it) or close the store; http.Server.Shutdown alone waits for them.
//
// Middleware that wraps the http.ResponseWriter must implement Unwrap (see
// http.ResponseController) and must not compress or buffer text/event-stream: streams
// flush every frame and bound every write with SSEWriteTimeout through the controller.
func NewServer(cfg Config) http.Handler {
	return newServer(cfg).mux
}

// newServer builds the server NewServer serves.
func newServer(cfg Config) *server {
	s := &server{
		engine:          cfg.Engine,
		store:           cfg.Store,
		announcer:       cfg.Announcer,
		maxRequestBytes: cfg.MaxRequestBytes,
		keepAlive:       cfg.SSEKeepAlive,
		writeTimeout:    cfg.SSEWriteTimeout,
		log:             cfg.Logger,
		access:          cfg.AccessLog,
		obs:             cfg.Observer,
		tracer:          cfg.Tracer,
		now:             cfg.Now,
		mux:             http.NewServeMux(),
		auth:            cfg.Auth,
		table:           cfg.Table,
	}
	if s.auth != nil {
		s.tokens = cfg.StreamTokens
	}
	if s.maxRequestBytes <= 0 {
		s.maxRequestBytes = DefaultMaxRequestBytes
	}
	if s.keepAlive <= 0 {
		s.keepAlive = DefaultSSEKeepAlive
	}
	if s.writeTimeout <= 0 {
		s.writeTimeout = DefaultSSEWriteTimeout
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.obs == nil {
		s.obs = nopObserver{}
	}
	s.routes()
	s.doorRoutes(cfg.FrontDoors)
	return s
}
