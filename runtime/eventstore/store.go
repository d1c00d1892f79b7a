// Package eventstore defines the EventStore: the record of every execution's events,
// its idempotency reservations, its cancel requests and its lease, and the secrets the
// runtime's replicas share (spec/events.md, "EventStore"). It is the only state runtime
// replicas share, so any replica can serve an execution's events, its status, its
// result and its cancellation while another replica runs it.
//
// A store is a set of small roles, one interface each: Log records executions and
// their events and, as a Reader, reads them back; Reservations holds the idempotency
// reservations of submissions, Cancels the cancel requests, Leases the ownership of
// running executions, Secrets values every replica shares, and Budgets the counters of
// spend limits (spec/budgets.md); Announcer, which only
// some stores implement, hands readers the events their wake-ups carried. A consumer
// depends on the roles it uses and declares the composition of those it needs
// together, as users of package io compose io.Reader and io.Writer.
//
// Implementations live in subpackages (memory, redis). Each implements every role,
// makes its argument checks with this package's (CheckCreate, …), so that all refuse
// the same calls alike, and passes the conformance suite of each role in package
// storetest: a new store can be written and tested role by role. Every method of every
// role is safe for concurrent use, also across processes sharing one backend. Values
// passed in are copied and values returned are the caller's own: mutating either never
// changes what is stored. A store's Close wakes blocked callers, which return
// ErrClosed, as do all later calls.
//
// A store also folds every event into the execution's status and result snapshot as it
// records it, so that Get and Snapshot cost the same whatever the number of events
// (spec/http-api.md, "Status" and "Result"): a long stream of small deltas must not make
// each read refold the whole log.
package eventstore

import (
	"context"
	"encoding/json"
	"strconv"
	"time"

	"github.com/switchboard-dev/switchboard/runtime/protocol"
)

// Log records executions and their events, and reads them back (Reader): the role
// every store has, and the one the others build on.
type Log interface {
	Reader

	// Create registers a new execution with no events. It returns ErrExists if another
	// execution with rec.ID is already stored and ErrInvalid if rec.ID is empty. A
	// record with the same ID, CreatedAt and Info (nil or not, and the same bytes) is
	// the caller's own Create again, as when a call whose answer was lost is retried: it
	// succeeds, changes nothing and returns the execution's current lease.
	//
	// With an owner, the execution is created leased to it for ttl (see
	// Leases.Acquire) with fence FirstFence, in the same atomic step; ttl <= 0 then
	// gives ErrInvalid. Without one (owner ""), it is created unleased: its fence is
	// NoFence until an Acquire.
	//
	// When rec.IdempotencyKey is set and the reservation stored under it names rec.ID,
	// Create marks that reservation Created in the same atomic step, so that a
	// reservation whose execution is missing tells an execution that was never created
	// from one removed after its retention.
	Create(ctx context.Context, rec Record, owner string, ttl time.Duration) (Lease, error)

	// Append records ev as the next event of execution ev.ExecutionID. ev.Sequence must
	// be exactly one more than the last recorded sequence (1 for the first event), else
	// ErrSequence. Nothing may follow a terminal event (ErrTerminated); appending one
	// starts the execution's retention period. An unknown execution gives ErrNotFound,
	// an empty ExecutionID or Type ErrInvalid. Whenever an error is returned nothing was
	// stored, so sequences stay gap-free. An ev identical to the last recorded event
	// (the same Sequence, Type, Timestamp and Data, nil or not) is a repeat of the append
	// that recorded it, as when a call whose answer was lost is retried: it succeeds,
	// also after a terminal event, and stores nothing (and folds nothing). Any other
	// event with that sequence is rejected as above.
	//
	// The store folds ev into the execution's Status and Snapshot in the same atomic
	// step. So ev's Data must decode as the data of its type (spec/events.md, "Event
	// types") for every type that is folded: output.delta, tool.call.started,
	// tool.call.arguments.delta, output.result, usage.reported, route.selected,
	// execution.completed and execution.failed; otherwise Append returns ErrInvalid
	// (after the checks above, which take precedence) and stores nothing.
	// protocol.Materialize skips such an event, and every later one then leaves a gap,
	// so a recorded one would leave no snapshot that agrees with both the log and the
	// sequence; the engine never records one. The data of the other types, and of types
	// this version does not know, is stored as it is: they only advance the sequence.
	//
	// fence must be the execution's current fence (see Lease): NoFence for an execution
	// that was never leased, else the fence of the last acquisition, expired or not.
	// Any other fence gives ErrLeaseLost (after the ErrNotFound and ErrInvalid checks,
	// before all others) and stores nothing: a runner whose lease was taken over stops
	// writing, so two replicas never both write one execution. A terminal event ends
	// the lease: the execution leaves the orphan index.
	Append(ctx context.Context, fence Fence, ev protocol.Event) error

	// Remove removes a terminal execution at once, as the end of its retention would:
	// its events, status and snapshot, for every handle on the store's data, so that
	// every later call naming it answers ErrNotFound and its waiters return ErrNotFound.
	// An execution without its terminal event gives ErrNotTerminal and stays as it is:
	// its runner may still write it, so it is cancelled and waited for first. Removing
	// an unknown or removed execution is not an error, so that a retried call whose
	// answer was lost succeeds again. The idempotency reservation the execution was
	// created for is left as it is, as at the end of retention: a replay of its key
	// names the removed execution (spec/events.md, "EventStore").
	Remove(ctx context.Context, id string) error
}

// Reader reads what a Log recorded: an execution's status, its result snapshot and its
// events, and waits for new ones. It is what serving an execution to its clients needs.
type Reader interface {
	// Get returns the execution's record and progress, or ErrNotFound. Its cost does not
	// depend on the number of recorded events.
	Get(ctx context.Context, id string) (Status, error)

	// Snapshot returns the execution's result snapshot after its last recorded event:
	// exactly what protocol.Materialize returns for all its events (Read(ctx, id, 0, 0)),
	// with Sequence equal to Get's LastSequence at one instant. The store keeps it up to
	// date as events are appended, so its cost grows with the size of the output it
	// returns, not with the number of events. It returns ErrNotFound for an unknown or
	// removed execution.
	Snapshot(ctx context.Context, id string) (protocol.Snapshot, error)

	// Read returns, in sequence order, the events of execution id whose sequence is
	// greater than after, at most limit of them (limit <= 0: no limit). An empty result
	// is not an error; an unknown execution is (ErrNotFound).
	//
	// A store serves a long read in steps whose size does not grow with the log, so
	// that no read holds up the backend for the others (the Redis store reads pages of
	// XRANGE … COUNT). The events still land in the caller's memory all at once: the
	// runtime reads with a limit, and what it needs of the whole log (where to
	// continue after a takeover) it takes from Get.
	Read(ctx context.Context, id string, after uint64, limit int) ([]protocol.Event, error)

	// Wait blocks until execution id has an event with a sequence greater than after and
	// then returns nil; it returns nil at once if such an event already exists. It
	// returns ErrTerminated when the execution is terminal and nothing newer than after
	// exists (nothing ever will), ErrNotFound when the execution is unknown or removed,
	// and ctx.Err() when ctx ends. Readers tail an execution by alternating Read and
	// Wait with their own cursor: the store keeps no per-reader state, so a slow reader
	// costs no memory and never holds up the writer. It returns no other error than
	// these and ErrClosed: a failure to reach the backend is retried until ctx ends.
	Wait(ctx context.Context, id string, after uint64) error
}

// Reservations holds the idempotency reservations of submissions (spec/http-api.md,
// "Idempotency"): which execution an idempotency key was used for, and the answer to
// replay.
type Reservations interface {
	// Reserve stores r under the idempotency key unless an unexpired reservation is
	// already stored there, atomically. It returns the reservation now stored and
	// reserved=true if it was r, or the existing one and reserved=false. An existing
	// reservation with r's ExecutionID and Fingerprint is the caller's own Reserve
	// again, as when a call whose answer was lost is retried: it is returned with
	// reserved=true and left as it is, its expiry included. The reservation expires ttl
	// after it was made. Empty keys and ttl <= 0 give ErrInvalid.
	//
	// The store counts the stored, unexpired reservations of each scope (r.Scope; ""
	// is a scope too), in the same atomic step, so the count is exact whichever
	// handles on the store's data reserve. With limit > 0, storing r when its scope
	// holds limit reservations already is refused with a *ReservationLimitError, and
	// nothing is stored; an existing reservation under key is returned as above
	// whatever the limit. limit <= 0 refuses nothing, and what is stored is counted
	// all the same. A reservation leaves the count when it is released or expires.
	Reserve(ctx context.Context, key string, r Reservation, ttl time.Duration, limit int) (existing Reservation, reserved bool, err error)

	// Release deletes the reservation under key if it names executionID. Matching the
	// execution keeps a late Release (after expiry and a new reservation by another
	// request) from deleting a reservation it does not own. Releasing a missing or
	// foreign reservation is not an error. A released reservation leaves its scope's
	// count at once and costs the store nothing from then on: a submission refused
	// after reserving its key releases it (spec/http-api.md, "Idempotency").
	Release(ctx context.Context, key, executionID string) error
}

// Cancels records cancel requests and wakes the replica running the execution, wherever
// it was requested.
type Cancels interface {
	// RequestCancel records that the execution should be cancelled and wakes its
	// WaitCancel callers on every replica. It is idempotent. It returns ErrNotFound for
	// an unknown execution and ErrTerminated for a terminal one, where cancelling has no
	// effect (callers answer such a cancel as a no-op).
	RequestCancel(ctx context.Context, id string) error

	// WaitCancel blocks until a cancel of execution id is requested and then returns
	// nil; it returns nil at once if one already was. It returns ErrTerminated once the
	// execution is terminal without a cancel request, ErrNotFound when the execution is
	// unknown or removed, and ctx.Err() when ctx ends; no other error than these and
	// ErrClosed, since a failure to reach the backend is retried until ctx ends. The
	// replica running an execution calls it in a goroutine to learn of cancels made on
	// any replica.
	WaitCancel(ctx context.Context, id string) error
}

// Leases is the ownership of running executions (spec/events.md, "Ownership and
// orphans"): the lease of the replica that runs one, the fence its writes carry (see
// Log.Append), the orphans whose replica stopped, and the remote job an execution left
// running.
type Leases interface {
	// Acquire takes the lease on execution id for owner, for ttl on the store's clock,
	// if no unexpired lease is held on it: it was never leased, its lease expired or was
	// let go (ReleaseLease). The new lease's fence is one more than the execution's
	// current one, so the previous holder's writes are refused from now on. It returns
	// ErrLeaseHeld (wrapped, with nothing changed) while another lease is unexpired — the
	// holder's own included: a holder extends its lease with Renew —, ErrTerminated for a
	// terminal execution, ErrNotFound for an unknown one and ErrInvalid for an empty
	// owner or ttl <= 0. Acquisitions are atomic: of several callers racing for one
	// expired lease exactly one succeeds.
	Acquire(ctx context.Context, id, owner string, ttl time.Duration) (Lease, error)

	// Renew extends the lease with fence to ttl from now on the store's clock and
	// returns it. A lease that expired is renewed too as long as nobody acquired it
	// since (its fence is still current). It returns ErrLeaseLost when fence is not the
	// execution's current fence, ErrTerminated once the execution is terminal and
	// ErrNotFound for an unknown execution.
	Renew(ctx context.Context, id string, fence Fence, ttl time.Duration) (Lease, error)

	// ReleaseLease lets go of the lease with fence before it expires: the execution
	// becomes an orphan at once, for another replica to Acquire. The fence stays
	// current, so the releaser may still write until then; callers stop writing before
	// releasing. It returns ErrLeaseLost when fence is not current and ErrNotFound for
	// an unknown execution; releasing the lease of a terminal execution does nothing.
	ReleaseLease(ctx context.Context, id string, fence Fence) error

	// Orphans returns the ids of at most limit (limit <= 0: 100) non-terminal
	// executions whose lease has expired or was released, earliest expiry first. It
	// costs O(log n + limit) in the number of leased executions, never a scan of all
	// executions. The list is a hint: an id may have been renewed, acquired or ended
	// since; Acquire decides.
	Orphans(ctx context.Context, limit int) ([]string, error)

	// SetRemote records handle as the execution's remote job (Status.Remote), replacing
	// any earlier one; a nil handle clears it. The handle is opaque to the store. It is
	// fenced like Append (ErrLeaseLost) and returns ErrTerminated for a terminal
	// execution and ErrNotFound for an unknown one.
	SetRemote(ctx context.Context, id string, fence Fence, handle json.RawMessage) error
}

// Secrets keeps values every replica of the runtime shares, such as the keys of its
// signed stream links (spec/authentication.md).
type Secrets interface {
	// Secret returns the secret stored under name, storing candidate there first, to
	// expire ttl later, when there is none, atomically: every replica that asks gets the
	// same bytes, whatever candidate each offered, until the secret expires; asking does
	// not extend it. An empty name or candidate, or a ttl <= 0, gives ErrInvalid. The
	// runtime keeps the keys of its signed stream links here, one per rotation period
	// (spec/authentication.md).
	Secret(ctx context.Context, name string, candidate []byte, ttl time.Duration) ([]byte, error)
}

// Announcer is implemented by a store whose wake-ups carry the events they announce
// (the Redis store, whose readers would otherwise make a round trip to Redis after each
// one). A reader tailing an execution takes the events from Announced after Wait has
// returned, and Reads only when it returns nil.
type Announcer interface {
	// Announced returns, in sequence order, the events of execution id after `after`
	// that this store's wake-ups have carried, at most limit of them (limit <= 0: no
	// limit), or nil when it does not hold the event after `after`. It never blocks nor
	// calls the backend. The events are what Read would have returned when the last of
	// them was announced; an event announced since comes with a later call, so unlike
	// Read it may return fewer events than are stored. They are the caller's own.
	Announced(id string, after uint64, limit int) []protocol.Event
}

// Record is what the engine registers when it creates an execution.
type Record struct {
	// ID is the execution id (exe_…).
	ID string
	// CreatedAt is when the execution was accepted.
	CreatedAt time.Time
	// Info is opaque to the store and owned by the engine (ability, metadata, deadline,
	// …); JSON so that every implementation can persist it as it is.
	Info json.RawMessage
	// IdempotencyKey is the store key of the reservation the execution was created
	// for, or empty. See Create.
	IdempotencyKey string
}

// Fence is a lease's fencing token: it grows by one at every acquisition of an
// execution's lease, and every write to the execution must carry the current one.
type Fence uint64

const (
	// NoFence is the fence of an execution that was never leased.
	NoFence Fence = 0
	// FirstFence is the fence of the lease an execution is created with.
	FirstFence Fence = 1
)

// Lease is the right to write an execution (spec/events.md, "Ownership and orphans"):
// the replica running an execution holds it and renews it, and when it stops renewing,
// another replica acquires it and ends (or adopts) the execution.
type Lease struct {
	// Owner names the holder: a replica's id.
	Owner string
	// Fence is the lease's fencing token.
	Fence Fence
	// Expires is when the lease expires unless renewed, on the store's clock; the zero
	// time for an execution that was never leased, and at most the release time for a
	// released lease.
	Expires time.Time
}

// Status is an execution's record and its progress so far: what an execution's status
// (spec/http-api.md, "Status") is built from, folded from the events as they were
// recorded.
type Status struct {
	Record
	// LastSequence is the sequence of the last recorded event; 0 before the first.
	// Sequences have no gaps, so it is also the number of recorded events.
	LastSequence uint64
	// Terminal reports whether the last recorded event is terminal.
	Terminal bool
	// UpdatedAt is the Timestamp of the last recorded event, or CreatedAt before the
	// first, so that every replica reports the same value.
	UpdatedAt time.Time
	// Output reports whether an output or tool event (protocol.EventType.IsOutput) is
	// recorded.
	Output bool
	// OutputBytes is the materialized output recorded (spec/http-api.md, "Limits"):
	// the bytes of the text of every output.delta, of the fragment of every
	// tool.call.arguments.delta and of the result of every output.result, as their
	// data decodes.
	OutputBytes int64
	// CancelRequested reports whether a cancel was requested (Cancels.RequestCancel).
	CancelRequested bool
	// State is the execution's status as protocol.Snapshot.Apply assigns it: accepted
	// before any event and after execution.accepted, completed or failed after the
	// terminal event, running after any other event.
	State protocol.Status
	// Attempts is the number of recorded route.selected events.
	Attempts int
	// Route is the route of the last route.selected event; nil before the first.
	Route *protocol.RouteStatus
	// Error is the error of execution.failed; nil otherwise.
	Error *protocol.Error
	// Lease is the execution's current (or last) lease; zero if it was never leased.
	// A terminal execution keeps the lease it ended under, which no longer matters.
	Lease Lease
	// Remote is the handle last recorded with Leases.SetRemote; nil if none.
	Remote json.RawMessage
}

// Reservation is what an idempotency key maps to: enough to answer a replay with the
// original response, even after the execution itself has been removed.
type Reservation struct {
	// Scope is the key space the reservation belongs to (spec/http-api.md,
	// "Idempotency": a caller principal's, or the runtime's), stored with it: the unit
	// whose reservations Reserve counts. The store never reads it out of the key, which
	// is opaque to it.
	Scope string
	// Fingerprint is the hash of the canonical request body; a replay with another
	// fingerprint is a reuse of the key.
	Fingerprint string
	// ExecutionID is the execution created for the key.
	ExecutionID string
	// Response is the original 202 response body.
	Response json.RawMessage
	// CreatedAt is when the reservation was made.
	CreatedAt time.Time
	// Created is set by the store when the execution was created for the reservation
	// (see Log.Create); Reserve ignores the caller's value.
	Created bool
}

// Budgets holds the counters of spend limits (spec/budgets.md): what executions have
// reserved and spent in each window of each Budget, and what each running execution
// holds. The store knows counters, amounts and limits, never Budgets, prices or
// windows: the runtime names the counters (a Budget's uid, a window's start, a unit,
// a subject) and computes the amounts.
type Budgets interface {
	// Hold reserves, in one atomic step across every replica, holds[i].Amount on each
	// counter holds[i].Counter for execution id, after giving back whatever id held
	// before (so the holds of an execution that falls back to another model replace
	// those of the first, also on counters the new holds do not name). Either every
	// counter takes its amount or nothing changes: a counter takes it when its Limit is
	// <= 0 (counted, never refused: an Audit Budget's) or when its value, less what id
	// held on it before, plus the amount stays <= Limit. On a refusal Hold returns a
	// *HoldRefusedError naming the first hold that did not fit, and id keeps what it
	// held before. A counter lives until the latest Expires of the holds that touched it
	// (a window's end plus some slack), on the store's clock; a counter that expired
	// counts 0, as one never used. Holds last until Settle, however late; note is
	// opaque to the store and returned by Pending. An empty id, counter or unit, an
	// amount outside 0..MaxAmount, a limit above MaxAmount, a zero Expires or the same
	// counter twice gives ErrInvalid (see CheckHold) and changes nothing. An empty holds
	// gives back what id held and holds nothing: Settle then reports false.
	Hold(ctx context.Context, id string, holds []Hold, note json.RawMessage) error

	// Settle ends execution id's holds exactly once: each held counter is changed by
	// spent[hold.Unit] - hold.Amount (a unit missing from spent counts 0), never
	// below 0, and the holds are forgotten, in one atomic step. A held counter that has
	// expired since stays gone: its window is over. It reports whether id held anything:
	// of two replicas settling one execution, one gets true and the other false, having
	// changed nothing. An empty id or a spent amount outside 0..MaxAmount gives
	// ErrInvalid (see CheckSettle) and changes nothing.
	Settle(ctx context.Context, id string, spent map[string]int64) (settled bool, err error)

	// Pending returns at most limit (limit <= 0: DefaultPending) executions holding
	// something since before `before` (PendingHold.Since < before, on the store's
	// clock), oldest first, for the sweeper that settles those whose runner died after
	// their terminal event. The list is a hint: Settle decides.
	Pending(ctx context.Context, before time.Time, limit int) ([]PendingHold, error)

	// Counters returns the values of the named counters, 0 for one that does not
	// exist (never used, or expired), in the order of names. Values are exact up to
	// MaxAmount.
	Counters(ctx context.Context, names []string) ([]int64, error)
}

// Hold is one amount an execution reserves on one counter.
type Hold struct {
	// Counter names the counter (opaque to the store).
	Counter string
	// Unit is what Settle's spent amount for this counter is keyed by: "cost" (in
	// micro-units of a currency), "tokens" or "requests".
	Unit string
	// Amount is what is reserved, in 0..MaxAmount.
	Amount int64
	// Limit is the most the counter may hold after the reservation, at most
	// MaxAmount; <= 0: no limit.
	Limit int64
	// Expires is when the counter may be forgotten: the end of its window plus slack.
	Expires time.Time
}

// PendingHold is an execution that holds something (Budgets.Pending).
type PendingHold struct {
	// ID is the execution id.
	ID string
	// Since is when its holds were last made, on the store's clock.
	Since time.Time
	// Note is the note of its last Hold.
	Note json.RawMessage
}

// HoldRefusedError is the refusal of Budgets.Hold: the counter of Holds[Index] cannot
// take its amount without passing its limit.
type HoldRefusedError struct {
	// Index is the index in the refused call's holds of the first one that did not fit.
	Index int
	// Used is that counter's value at the refusal, which the refusal left as it was:
	// what Counters returns, including whatever the refused execution held on it
	// before.
	Used int64
}

func (e *HoldRefusedError) Error() string {
	return "eventstore: budget counter " + strconv.Itoa(e.Index) + " cannot take the hold"
}
