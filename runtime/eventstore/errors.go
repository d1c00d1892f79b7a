package eventstore

import (
	"errors"
	"fmt"
	"time"
)

// Sentinel errors of every implementation of the roles. Implementations wrap them with
// context (the execution id, the rejected sequence); callers test with errors.Is.
var (
	// ErrNotFound: the execution is unknown, or was removed when its retention ended.
	ErrNotFound = errors.New("eventstore: execution not found")
	// ErrExists: Create was given an id that is already stored.
	ErrExists = errors.New("eventstore: execution already exists")
	// ErrSequence: Append was given a sequence other than the next one (a duplicate, a
	// gap or a reordering); nothing was stored.
	ErrSequence = errors.New("eventstore: sequence is not next")
	// ErrTerminated: the execution already has its terminal event, so no event may be
	// appended, no cancel takes effect, and waiting for either is pointless.
	ErrTerminated = errors.New("eventstore: execution is terminal")
	// ErrNotTerminal: Remove was given an execution without its terminal event, which a
	// runner may still be writing; nothing was removed.
	ErrNotTerminal = errors.New("eventstore: execution is not terminal")
	// ErrInvalid: an argument is malformed (empty id, type or key, ttl <= 0; see
	// CheckCreate and the other checks): a bug in the caller, never caused by a
	// client's request.
	ErrInvalid = errors.New("eventstore: invalid argument")
	// ErrLeaseHeld: Acquire found an unexpired lease on the execution.
	ErrLeaseHeld = errors.New("eventstore: lease is held")
	// ErrLeaseLost: a write or a lease change carried a fence that is not the
	// execution's current one: another replica acquired its lease since.
	ErrLeaseLost = errors.New("eventstore: lease lost")
	// ErrClosed: the store was closed.
	ErrClosed = errors.New("eventstore: store closed")
	// ErrUnavailable: the store's backend cannot be reached now (a database restarting,
	// a connection refused); the same call may succeed later. Stores that know it wrap
	// their connection failures with it, so that the runtime answers 503 and retries
	// rather than failing for good.
	ErrUnavailable = errors.New("eventstore: backend unavailable")
)

// ReservationLimitError is Reserve's error when the reservation's scope holds its limit
// of unexpired reservations already; nothing was stored.
type ReservationLimitError struct {
	// Limit is the limit Reserve was given.
	Limit int
	// RetryAfter is how long, on the store's clock, until the earliest of the scope's
	// reservations expires and leaves room; a Release may leave room sooner.
	RetryAfter time.Duration
}

func (e *ReservationLimitError) Error() string {
	return fmt.Sprintf("eventstore: the scope holds %d reservations, its limit; the earliest expires in %v", e.Limit, e.RetryAfter)
}
