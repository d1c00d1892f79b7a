package engine

import (
	"errors"
	"time"

	"github.com/go-logr/logr"

	"github.com/switchboard-dev/switchboard/runtime/eventstore"

	"github.com/switchboard-dev/switchboard/runtime/protocol"
)

// Causes of an execution context's end; causeError turns them into portable errors.
var (
	errDeadline        = errors.New("execution deadline exceeded")
	errCancelRequested = errors.New("execution cancel requested")
	errShutdown        = errors.New("engine shut down")
	errAttemptTimeout  = errors.New("attempt timeout exceeded")
	errOutputLimit     = errors.New("execution output limit reached")
	// errHandedOver: the replica is shutting down and lets another replica take the
	// execution over; errLeaseLost: another replica already has (see Detached).
	errHandedOver = errors.New("execution handed over to another replica")
	errLeaseLost  = errors.New("execution lease lost to another replica")
)

// rateLimitRetryAfter is the retry hint of a rejection at the concurrency limit: long
// enough for short executions to free a slot, short enough not to idle the caller.
const rateLimitRetryAfter = time.Second

// The portable errors the engine creates. Each call returns a new value, since callers
// own what they are given. Messages are fixed templates (spec/http-api.md, "Errors").

func errInvalidRequest() *protocol.Error {
	return protocol.NewError(protocol.CodeInvalidRequest, "request is missing")
}

// admissionError is Submit's answer when Config.Admission refused or failed: its
// *protocol.Error as it is, anything else (a bug in it) internal, only logged.
func admissionError(err error, log logr.Logger, id string) *protocol.Error {
	var pe *protocol.Error
	if errors.As(err, &pe) && pe.Code.Known() {
		return pe.Clone()
	}
	log.Error(err, "Admission failed with an unmapped error", "execution", id)
	return errInternal()
}

// storeError is Submit's answer when the store failed before the execution existed:
// provider_unavailable (503, retryable) when its backend cannot be reached now
// (eventstore.ErrUnavailable: a database restarting), internal otherwise.
func storeError(err error) *protocol.Error {
	if errors.Is(err, eventstore.ErrUnavailable) {
		return protocol.NewError(protocol.CodeProviderUnavailable, "the event store cannot be reached; retry later")
	}
	return errInternal()
}

func errRateLimited() *protocol.Error {
	e := protocol.NewError(protocol.CodeRateLimited, "too many executions are running; retry later")
	e.RetryAfterMs = rateLimitRetryAfter.Milliseconds()
	return e
}

func errPrincipalLimited() *protocol.Error {
	e := protocol.NewError(protocol.CodeRateLimited, "too many executions of this caller are running; retry later")
	e.RetryAfterMs = rateLimitRetryAfter.Milliseconds()
	return e
}

func errShuttingDown() *protocol.Error {
	return protocol.NewError(protocol.CodeProviderUnavailable, "the runtime is shutting down; retry on another replica")
}

func errDeadlineExceeded() *protocol.Error {
	return protocol.NewError(protocol.CodeDeadlineExceeded, "the execution deadline passed before it finished")
}

func errCancelled() *protocol.Error {
	return protocol.NewError(protocol.CodeCancelled, "the execution was cancelled")
}

func errOutputTooLarge() *protocol.Error {
	return protocol.NewError(protocol.CodeOutputTooLarge, "the execution reached its limit of events or output bytes")
}

func errProviderTimeout() *protocol.Error {
	return protocol.NewError(protocol.CodeProviderTimeout, "the attempt timed out")
}

func errNoAdapter() *protocol.Error {
	return protocol.NewError(protocol.CodeInternal, "no adapter is available for the deployment's provider")
}

func errAdapterUnusable() *protocol.Error {
	return protocol.NewError(protocol.CodeProviderRejected, "the deployment's adapter cannot be configured")
}

func errInternal() *protocol.Error {
	return protocol.NewError(protocol.CodeInternal, "internal error")
}

func errNotFound() *protocol.Error {
	return protocol.NewError(protocol.CodeNotFound, "execution not found")
}

// causeError is the terminal error for an execution context that has ended.
func causeError(cause error) *protocol.Error {
	switch {
	case errors.Is(cause, errCancelRequested):
		return errCancelled()
	case errors.Is(cause, errShutdown), errors.Is(cause, errHandedOver), errors.Is(cause, errLeaseLost):
		// A replica that stops with its executions ends them itself; one that hands
		// them over, or lost them, records nothing (run), so this is only a fallback.
		return errOrphaned()
	case errors.Is(cause, errOutputLimit):
		return errOutputTooLarge()
	default:
		// errDeadline, and anything unexpected: the execution ran out of time.
		return errDeadlineExceeded()
	}
}

// settle applies the retryable rule (spec/http-api.md, "Errors") to a failure about to
// be recorded: retryable says whether resubmitting the same request is safe. It is never
// more than the code's table value (an adapter or provider hint may lower it, never
// raise it), and never true once the execution has recorded output (output), since
// downstream effects may exist. A retry hint goes with retryable.
func settle(pe *protocol.Error, output bool) *protocol.Error {
	c := pe.Clone()
	c.Retryable = pe.Retryable && pe.Code.Retryable() && !output
	if !c.Retryable {
		c.RetryAfterMs = 0
	}
	return c
}

// errStillStopping answers a removal of an execution that did not end in time after
// its cancel: retrying later finds it terminal.
func errStillStopping() *protocol.Error {
	return protocol.NewError(protocol.CodeConflict, "the execution is still stopping; retry later")
}
