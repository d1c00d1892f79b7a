package engine

import (
	"context"
	"errors"
	"time"

	"github.com/switchboard-dev/switchboard/runtime/protocol"
	"github.com/switchboard-dev/switchboard/runtime/routing"
)

// Adapter runs attempts against one configured model. It is built from one routing-table
// entry (endpoint, model, credential — credentials are constructor inputs only) and only
// produces event data: the engine assigns every envelope (sequence, timestamp, execution
// id), decides fallback and enforces deadlines.
type Adapter interface {
	// Execute runs one attempt. It emits output through emit as it arrives and returns
	// when the provider is done. A failure is returned as a *protocol.Error with a fixed
	// message (any other error is recorded as internal, its text only logged). ctx ends
	// on cancellation, deadline or attempt timeout; once it has ended the engine decides
	// the outcome from the reason, whatever Execute returns. An adapter that must clean
	// up remotely (cancel a job) may do so with context.WithoutCancel bounded by
	// Attempt.CleanupGrace — the engine waits no longer, then records the terminal event
	// and refuses the adapter's later emits.
	Execute(ctx context.Context, a Attempt, emit Emitter) (Outcome, error)
}

// Attempt is what an adapter needs for one attempt.
type Attempt struct {
	// ExecutionID identifies the execution, for logs and provider-side correlation.
	ExecutionID string
	// Number is the attempt number, from 1.
	Number int
	// Request is the decoded request; adapters must not modify it.
	Request *protocol.Request
	// Deployment is the routing-table entry the attempt runs on.
	Deployment *routing.Deployment
	// CleanupGrace bounds remote cleanup after ctx ends.
	CleanupGrace time.Duration
}

// Emitter records event data for the running attempt. It is safe for concurrent use.
//
// Only output.delta, tool.call.started, tool.call.arguments.delta, execution.progress,
// output.result and usage.reported may be emitted; lifecycle types (accepted, route.*,
// terminal events) give ErrInvalidEvent. data is the type's protocol payload
// (protocol.OutputDeltaData, …, as a value or pointer) or anything that encodes to that
// JSON shape; data that does not fit the type gives ErrInvalidEvent, so every recorded
// event folds into the result snapshot. Usage entries that are not protocol.Usage.Valid
// (NaN, infinite, negative, unknown unit or source) are dropped and logged; when none
// remain nothing is recorded and Emit returns nil.
//
// Emit returns nil once the event is recorded, ErrAttemptOver once the attempt's ctx has
// ended or Execute has returned, and a store error if recording failed (then nothing was
// recorded).
type Emitter interface {
	Emit(typ protocol.EventType, data any) error
}

// Errors returned by Emitter.Emit; test with errors.Is.
var (
	// ErrAttemptOver: the attempt has ended (cancelled, timed out, past its deadline, or
	// Execute returned), so nothing more is recorded for it.
	ErrAttemptOver = errors.New("engine: attempt is over")
	// ErrInvalidEvent: the event type may not be emitted by an adapter, or its data does
	// not have the type's shape.
	ErrInvalidEvent = errors.New("engine: invalid event")
)

// Outcome is the result of a successful attempt.
type Outcome struct {
	// FinishReason is the provider's finish reason, if any.
	FinishReason string
}

// Factory builds the adapter for a deployment. The engine calls it once per attempt with
// the deployment from the execution's route snapshot, so a rotated credential is used
// by the next attempt. A *protocol.Error it returns is recorded as is; any other error
// becomes provider_rejected (the deployment's configuration is unusable).
type Factory func(d *routing.Deployment) (Adapter, error)
