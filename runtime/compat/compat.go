// Package compat is what the compatible front doors share (spec/compat.md): the Kit
// through which a front door reaches the runtime's API layer, the Route it serves, and
// helpers for the streams it writes.
//
// A front door (compat/openai, compat/anthropic) is a translation at the edge. It decodes
// a vendor-shaped request into a protocol.Request, submits it through Kit.Submit — the
// engine's one submission function, behind the same authentication, limits and
// idempotency as POST /v1/executions — and projects the execution's events, which it
// follows with Kit.Follow, back into the vendor's wire format. Nothing below the API
// layer knows that front doors exist: the engine, routing, the stores and the adapters
// see ordinary executions.
package compat

import (
	"context"
	"net/http"

	"github.com/go-logr/logr"

	"github.com/switchboard-dev/switchboard/runtime/engine"
	"github.com/switchboard-dev/switchboard/runtime/eventstore"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
)

// ExecutionHeader is the response header naming the execution a front-door call is
// (spec/compat.md): GET /v1/executions/{id} and its events and result read it like any
// other.
const ExecutionHeader = "Switchboard-Execution-Id"

// Door is a front door: the routes it serves, given the Kit of the server it is served
// by.
type Door interface {
	Routes(k Kit) []Route
}

// Route is one endpoint of a front door.
type Route struct {
	// Pattern is the http.ServeMux pattern with its method: "POST /v1/chat/completions".
	Pattern string
	// Handle serves the endpoint. It returns an error instead of writing one, and the
	// server answers it with WriteError; once it has written its response head, it must
	// not return one (a stream ends with an error frame of its own instead).
	Handle func(w http.ResponseWriter, r *http.Request) error
	// WriteError writes a portable error in the front door's shape with status; the
	// server has set Retry-After when e has a retry delay. Errors of authentication, of
	// the request's size and media type, and of an unknown method on the path are
	// written with it too.
	WriteError func(w http.ResponseWriter, status int, e *protocol.Error)
	// APIKeyHeader, if not empty, names a header that carries the caller's bearer token
	// when the request has no Authorization header (Anthropic's x-api-key).
	APIKeyHeader string
}

// Submission is what Kit.Submit returns: the accepted execution and whether it is a
// replay of the request's Idempotency-Key.
type Submission struct {
	engine.Accepted
	// Replayed is true when the request's Idempotency-Key named an execution created
	// before, which this is.
	Replayed bool
	// Keyed is true when the request carried an Idempotency-Key: a caller that leaves
	// then does not cancel the execution, and may re-attach by retrying.
	Keyed bool
}

// Model is a model name a caller may use on a front door (spec/compat.md, "Model
// names"): an ability served by at least one deployment visible to it, or a visible
// deployment.
type Model struct {
	// ID is the name callers send: the ability, or the deployment's "namespace/name".
	ID string
	// Ability is the ability an execution for this name asks for: ID itself, or the
	// deployment's first ability.
	Ability string
	// Deployment is the deployment's "namespace/name" when the name pins one, which the
	// execution is then restricted to (protocol.Routing.Only); empty for an ability.
	Deployment string
	// Namespace is the deployment's namespace; empty for an ability.
	Namespace string
	// Provider and ProviderModel are the pinned deployment's provider and spec.model;
	// empty for an ability.
	Provider, ProviderModel string
}

// Kit is what a front door asks of the API layer that serves it. Every method that
// takes a request acts for the request's authenticated caller; every method that names
// an execution answers a not_found *protocol.Error when the caller may not see it.
type Kit interface {
	// ReadBody reads a JSON request body under the server's limits: a body not
	// declared application/json, too large or unreadable is an error (415, 413, 400).
	ReadBody(w http.ResponseWriter, r *http.Request) ([]byte, error)
	// Submit submits the native request native (the JSON of a protocol.Request, which
	// the front door translated the caller's body into) for the caller, under the
	// request's Idempotency-Key header, whose fingerprint is that of body, the caller's
	// own. native is decoded and checked by protocol.DecodeRequest, as a body of POST
	// /v1/executions is, so every limit of the native API holds on every front door; a
	// violation is an invalid_request *protocol.Error naming the native field. Submit
	// records the execution id for the access log; the front door answers with it in
	// ExecutionHeader.
	Submit(w http.ResponseWriter, r *http.Request, native, body []byte) (Submission, error)
	// Follow calls fn with the events of execution id after sequence after, in order and
	// in batches, until the terminal event has been passed to fn (then it returns nil),
	// ctx ends, fn returns an error (which it returns) or the store fails. When no event
	// came for the server's keep-alive interval it calls idle, if not nil; an error of
	// idle ends Follow too. It does not check access: call it on an execution the caller
	// just submitted or read with Status.
	Follow(ctx context.Context, id string, after uint64, fn func(events []protocol.Event) error, idle func() error) error
	// Status returns execution id's status, when the caller may read it.
	Status(ctx context.Context, id string) (eventstore.Status, error)
	// Snapshot returns execution id's result snapshot, when the caller may read it.
	Snapshot(ctx context.Context, id string) (protocol.Snapshot, error)
	// Cancel cancels execution id, when the caller may cancel it. It does not stop when
	// ctx ends.
	Cancel(ctx context.Context, id string) (engine.Cancellation, error)
	// Remove removes execution id from every read, when the caller may cancel it, as
	// the end of its retention would; a running execution is cancelled first and
	// removed once it has ended (engine.Engine.Remove). Afterwards every read of it,
	// native or through a front door, answers not_found.
	Remove(ctx context.Context, id string) error
	// Models lists the model names the caller may use now, sorted by ID.
	Models(ctx context.Context) ([]Model, error)
	// Model returns the model name id, or ok=false when the caller may not use it (it
	// names nothing, or nothing the caller may see). A caller who may use no namespace
	// at all gets a permission_denied *protocol.Error instead, whatever the name, as a
	// native submission does.
	Model(ctx context.Context, id string) (m Model, ok bool, err error)
	// Classify returns the HTTP status and portable error that err is answered with, as
	// the native API answers it; errors that are not portable are logged and become
	// internal. For a stream that fails after its head was written.
	Classify(r *http.Request, err error) (int, *protocol.Error)
	// NewStream returns a writer of whole frames to w's event stream (see Stream).
	NewStream(w http.ResponseWriter) *Stream
	// Logger receives what a front door logs; never caller content.
	Logger() logr.Logger
}
