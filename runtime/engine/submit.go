package engine

import (
	"context"
	"errors"
	"time"

	"github.com/switchboard-dev/switchboard/runtime/protocol"
	"github.com/switchboard-dev/switchboard/runtime/routing"
)

// Principal is the caller of a submission, as the front door authenticated it.
type Principal struct {
	// Name and UID identify the caller; UID is empty when it has none. The caller owns
	// the executions it submits (spec/authentication.md; see Owner), and
	// MaxPerPrincipal counts them by Name.
	Name, UID string
	// Visible restricts routing to the deployments of the namespaces the caller may use
	// (routing.Query.Visible); nil allows every one. An error of Visible that is a
	// *protocol.Error is Submit's answer.
	Visible routing.Visibility
	// Groups are the caller's groups (a ServiceAccount's, from its token review), which
	// Budget subjects match; nil for none.
	Groups []string
}

// RuntimeScope is the idempotency scope of callers that are not authenticated: they
// share one key space (spec/http-api.md, "Idempotency").
const RuntimeScope = "runtime"

// IdempotencyScope is p's idempotency key space when callers are authenticated
// (spec/http-api.md, "Idempotency"): its own, named by its name and, when it has one,
// its uid, so that a ServiceAccount created again under a deleted one's name does not
// replay, and learn, its predecessor's executions. The scope is stored with every
// reservation: it must not change between versions.
func (p Principal) IdempotencyScope() string {
	if p.UID != "" {
		return "principal-uid:" + p.UID + "/" + p.Name
	}
	return "principal:" + p.Name
}

// Idempotency makes a submission safe to repeat (spec/http-api.md, "Idempotency"); the
// zero value is a submission without a key, which is not remembered.
type Idempotency struct {
	// Scope is the key space of Key: RuntimeScope, or the caller's
	// Principal.IdempotencyScope. The store counts each scope's reservations
	// (Config.MaxReservations).
	Scope string
	// Key is the caller's idempotency key; empty: none.
	Key string
	// Fingerprint identifies the request (the SHA-256 of its body's canonical JSON,
	// protocol.Fingerprint): the key used again with another fingerprint is
	// idempotency_key_reused.
	Fingerprint string
}

// Accepted describes the execution a submission created or, for a replay, the one its
// idempotency key created: what a front door answers with.
type Accepted struct {
	// ID is the execution id (NewExecutionID).
	ID string
	// CreatedAt is when the execution was accepted (UTC, microseconds, as every read of
	// it reports it).
	CreatedAt time.Time
	// DeadlineAt is when the execution's deadline passes; zero for a replay of an
	// execution that retention has removed.
	DeadlineAt time.Time
}

// Submit creates an execution of req for p and starts it or, when idem's key was used
// before for the same request, returns the execution the key created, with
// replayed=true. Every front door submits through it: the engine names the execution and
// its creation time, and owns the key's reservation, its replay and its release after a
// refusal; the caller renders what it returns.
//
// Every check happens before anything exists, in the order of spec/http-api.md ("Order
// of checks"): the key first — a replay, idempotency_key_reused, rate_limited when the
// scope holds MaxReservations keys already, conflict (retryable) when the key's first
// request has neither created its execution nor been refused within a few seconds —
// so that a replay answers whatever the routing table says now; then routing
// (unsupported_capability, or p.Visible's refusal); then rate_limited at MaxConcurrent
// or MaxPerPrincipal, and provider_unavailable after Shutdown. Each error is a
// *protocol.Error, and nothing was created. Otherwise the execution is stored with
// execution.accepted, leased to this replica, and runs in the background.
//
// ctx only carries values. Its end neither cuts Submit short, so that a key it reserved
// always gets its outcome (its execution, or its release), nor ends the execution (use
// Cancel).
//
// req must be decoded and validated (protocol.DecodeRequest) and not modified later.
func (e *Engine) Submit(ctx context.Context, p Principal, req *protocol.Request, idem Idempotency) (Accepted, bool, error) {
	if req == nil {
		return Accepted{}, false, errInvalidRequest()
	}
	ctx = context.WithoutCancel(ctx)
	id := NewExecutionID()
	// The store keeps microseconds; the time answered is the one every read returns.
	createdAt := e.now().UTC().Truncate(time.Microsecond)
	if idem.Key == "" {
		acc, err := e.start(ctx, id, createdAt, p, req, "")
		return acc, false, err
	}
	key := reservationKey(idem)
	prev, replayed, err := e.reserve(ctx, key, reservationOf(id, createdAt, idem))
	if err != nil || replayed {
		return prev, replayed, err
	}
	acc, err := e.start(ctx, id, createdAt, p, req, key)
	if err != nil {
		e.releaseUnlessCreated(ctx, key, id)
		return Accepted{}, false, err
	}
	return acc, false, nil
}

// start routes req on one snapshot of the routing table and creates its execution id,
// created at createdAt for p, then runs it. key is the store key of the idempotency
// reservation the execution is created for ("" for none): the store marks the
// reservation created in the same step (eventstore.Record.IdempotencyKey).
func (e *Engine) start(ctx context.Context, id string, createdAt time.Time, p Principal, req *protocol.Request, key string) (Accepted, error) {
	if e.closing.Load() {
		return Accepted{}, errShuttingDown()
	}
	q := query(req)
	q.Admit = e.admitter(req)
	q.Visible = p.Visible
	route, err := e.table.Load().Route(q)
	if err != nil {
		var ne *routing.NoEligibleError
		if errors.As(err, &ne) {
			return Accepted{}, noRouteError(ne)
		}
		var pe *protocol.Error
		if errors.As(err, &pe) {
			return Accepted{}, pe // the caller's visibility refused (Principal.Visible)
		}
		e.log.Error(err, "Cannot route execution", "execution", id)
		return Accepted{}, errInternal()
	}

	select {
	case e.slots <- struct{}{}:
	default:
		return Accepted{}, errRateLimited()
	}
	// Shutdown may have started after the first check; it is waiting for this slot.
	if e.closing.Load() {
		<-e.slots
		return Accepted{}, errShuttingDown()
	}
	if !e.startOf(p.Name) {
		<-e.slots
		return Accepted{}, errPrincipalLimited()
	}
	// Spend is reserved last, so that no other refusal leaves a reservation behind.
	claim := &Claim{ID: id, Principal: p, Request: req}
	if e.admission != nil {
		i, err := e.admission.Admit(ctx, *claim, route.Candidates)
		if err != nil {
			e.endOf(p.Name)
			<-e.slots
			return Accepted{}, admissionError(err, e.log, id)
		}
		route.Candidates = route.Candidates[i:]
	}

	acc, x, err := e.create(ctx, id, createdAt, req, route, p, key)
	if err != nil {
		if e.admission != nil {
			e.admission.Settle(ctx, *claim, Spent{}) // nothing ran: everything goes back
		}
		e.endOf(p.Name)
		<-e.slots
		return Accepted{}, err
	}
	x.principal = p.Name
	x.claim = claim
	go e.run(ctx, x, e.attempts)
	return acc, nil
}
