package engine

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"go.opentelemetry.io/otel/trace"

	"github.com/switchboard-dev/switchboard/runtime/eventstore"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
	"github.com/switchboard-dev/switchboard/runtime/routing"
	"github.com/switchboard-dev/switchboard/runtime/telemetry/lazylog"
)

// Defaults of Config.
const (
	// DefaultMaxConcurrent is the default of --max-concurrent-executions.
	DefaultMaxConcurrent = 256
	// DefaultCleanupGrace is the default of --cleanup-grace (spec/events.md).
	DefaultCleanupGrace = 10 * time.Second
	// DefaultMaxEvents is the default of --max-events-per-execution (spec/http-api.md,
	// "Limits").
	DefaultMaxEvents = 100_000
	// DefaultMaxOutputBytes is the default of --max-output-bytes: the materialized
	// output (text, tool arguments and result) one execution may record.
	DefaultMaxOutputBytes = 64 << 20
	// MinMaxEvents is the smallest event limit that lets an execution record anything:
	// execution.accepted, route.selected, one output event and the terminal event.
	MinMaxEvents = 4
)

// Store is what the engine needs of the EventStore: the log it records executions in,
// the idempotency reservations of their submissions, their cancel requests and their
// leases.
type Store interface {
	eventstore.Log
	eventstore.Reservations
	eventstore.Cancels
	eventstore.Leases
}

// Config configures an Engine.
type Config struct {
	// Store records executions and events. Required. Shut the engine down before closing
	// the store, so that the terminal events of running executions can be written.
	Store Store
	// Table publishes the routing table (a *routing.Holder); nil routes nothing (every
	// Submit gives unsupported_capability).
	Table TableSource
	// Providers holds the adapters, by provider name (Deployment.Provider). A deployment
	// whose provider has none is never eligible.
	Providers map[string]Provider
	// MaxConcurrent bounds the executions running on this engine; further submits get
	// rate_limited. 0 means DefaultMaxConcurrent.
	MaxConcurrent int
	// MaxPerPrincipal bounds the executions one principal (Principal.Name) runs at once
	// on this engine; further submits of that principal get rate_limited. 0 means no
	// bound.
	MaxPerPrincipal int
	// IdempotencyTTL is how long an idempotency key is remembered (--idempotency-ttl).
	// 0 means DefaultIdempotencyTTL.
	IdempotencyTTL time.Duration
	// MaxReservations bounds the unexpired idempotency reservations of one idempotency
	// scope (Idempotency.Scope; --max-reservations-per-principal): a caller
	// principal's, or the runtime's when callers are not authenticated. A submission
	// with a new key beyond it gets rate_limited before anything is created. The store
	// counts, so the bound holds for all replicas sharing it. 0 means no limit.
	MaxReservations int
	// CleanupGrace bounds how long an adapter may take to return after its attempt was
	// cancelled or ran out of time. 0 means DefaultCleanupGrace.
	CleanupGrace time.Duration
	// MaxEvents bounds the events one execution records, its terminal event included;
	// past it the execution fails with output_too_large. 0 means DefaultMaxEvents;
	// smaller than MinMaxEvents means MinMaxEvents.
	MaxEvents int
	// MaxOutputBytes bounds one execution's materialized output: the bytes of text
	// deltas, tool argument fragments and output.result results. Past it the execution
	// fails with output_too_large. 0 means DefaultMaxOutputBytes.
	MaxOutputBytes int64
	// Replica names this replica as the owner of the execution leases it holds; empty
	// means a random name.
	Replica string
	// Lease is how long an execution's lease lasts unless renewed
	// (--execution-lease). The replica running an execution renews it every third of
	// this, and every replica sweeps for orphans as often. 0 means DefaultLease.
	Lease time.Duration
	// HandOver makes Shutdown hand the executions still running when its grace ends
	// over to other replicas — their adapters stop without cancelling remote work and
	// their leases are released, for a peer to adopt or end them — instead of ending
	// them with internal. Set it when replicas share the store.
	HandOver bool
	// Now is the clock for timestamps and deadlines; nil means time.Now.
	Now func() time.Time
	// Logger receives the engine's logs; the zero Logger discards them.
	Logger logr.Logger
	// Observer receives the engine's measurements (spec/observability.md); nil records
	// none.
	Observer Observer
	// Tracer traces executions and their attempts (spec/observability.md, "Tracing");
	// nil traces nothing, at no cost.
	Tracer trace.Tracer
	// Admission reserves what each attempt may spend and settles what executions spent
	// (spec/budgets.md); nil limits nothing.
	Admission Admission
}

// TableSource publishes the current routing table: an immutable snapshot, of which a
// submission loads one and uses it from start to finish (spec/routing.md, "Attempts and
// fallback").
type TableSource interface {
	Load() *routing.Table
}

// Engine runs executions. Create it with New; it is safe for concurrent use.
type Engine struct {
	store     Store
	table     TableSource
	providers map[string]Provider
	grace     time.Duration
	limits    limits
	now       func() time.Time
	log       logr.Logger
	replica   string
	lease     time.Duration
	handOver  bool
	obs       Observer
	tracer    trace.Tracer // nil: tracing is off
	admission Admission    // nil: spend is not limited

	// idempotencyTTL and maxReservations are Config's.
	idempotencyTTL  time.Duration
	maxReservations int
	// replayWait bounds how long a duplicate waits for its key's outcome
	// (defaultReplayWait); a field so that tests can shorten it.
	replayWait time.Duration

	// perPrincipal counts the running executions of each principal, for
	// MaxPerPrincipal.
	maxPerPrincipal int
	principalsMu    sync.Mutex
	perPrincipal    map[string]int

	// slots holds one token per running execution. A buffered channel gives a
	// lock-free, exact limit, and Shutdown waits for executions by taking every token.
	slots chan struct{}

	root      context.Context // ends when Shutdown's grace ends, with the cause to stop with
	stop      context.CancelCauseFunc
	stopSweep context.CancelFunc
	closing   atomic.Bool
	shutdown  sync.Once
	drained   chan struct{} // closed once Shutdown holds every slot
}

// New returns an engine. It panics if cfg.Store is nil, a programming error.
func New(cfg Config) *Engine {
	if cfg.Store == nil {
		panic("engine: Config.Store is nil")
	}
	e := &Engine{
		store:     cfg.Store,
		table:     cfg.Table,
		providers: maps.Clone(cfg.Providers),
		grace:     cfg.CleanupGrace,
		limits:    limits{events: uint64(cfg.MaxEvents), outputBytes: cfg.MaxOutputBytes},
		now:       cfg.Now,
		log:       cfg.Logger,
		replica:   cfg.Replica,
		lease:     cfg.Lease,
		handOver:  cfg.HandOver,
		obs:       cfg.Observer,
		tracer:    cfg.Tracer,
		admission: cfg.Admission,
		drained:   make(chan struct{}),

		idempotencyTTL:  cfg.IdempotencyTTL,
		maxReservations: cfg.MaxReservations,
		replayWait:      defaultReplayWait,

		maxPerPrincipal: cfg.MaxPerPrincipal,
		perPrincipal:    make(map[string]int),
	}
	if e.replica == "" {
		e.replica = "replica-" + randomSuffix()
	}
	if e.obs == nil {
		e.obs = nopObserver{}
	}
	if e.lease <= 0 {
		e.lease = DefaultLease
	}
	if e.idempotencyTTL <= 0 {
		e.idempotencyTTL = DefaultIdempotencyTTL
	}
	if cfg.MaxEvents <= 0 {
		e.limits.events = DefaultMaxEvents
	}
	e.limits.events = max(e.limits.events, MinMaxEvents)
	if e.limits.outputBytes <= 0 {
		e.limits.outputBytes = DefaultMaxOutputBytes
	}
	if e.table == nil {
		e.table = new(routing.Holder)
	}
	if e.grace <= 0 {
		e.grace = DefaultCleanupGrace
	}
	if e.now == nil {
		e.now = time.Now
	}
	n := cfg.MaxConcurrent
	if n <= 0 {
		n = DefaultMaxConcurrent
	}
	e.slots = make(chan struct{}, n)
	e.root, e.stop = context.WithCancelCause(context.Background())
	var sweepCtx context.Context
	sweepCtx, e.stopSweep = context.WithCancel(context.Background())
	go e.sweep(sweepCtx)
	return e
}

// execution is one running execution: its plan and its writer.
type execution struct {
	id         string
	ability    string // the routed ability, for metrics
	req        *protocol.Request
	route      routing.Route // from the one table snapshot the execution uses
	deadlineAt time.Time
	// cancelRequested: a cancel was requested before this replica took the execution
	// over, so it ends cancelled.
	cancelRequested bool
	// principal is the caller that submitted it on this replica, counted for
	// MaxPerPrincipal until it ends; empty for executions taken over.
	principal string
	// claim is what Config.Admission admitted it as, settled when it ends; nil for
	// executions taken over, which the Admission's own sweep settles.
	claim *Claim
	// spent is what its last attempt used, for claim's settlement.
	spent Spent
	w     writer
	log   logr.Logger
}

// startOf counts a new running execution of principal, unless it is at
// MaxPerPrincipal; it reports whether it counted it.
func (e *Engine) startOf(principal string) bool {
	if e.maxPerPrincipal <= 0 || principal == "" {
		return true
	}
	e.principalsMu.Lock()
	defer e.principalsMu.Unlock()
	if e.perPrincipal[principal] >= e.maxPerPrincipal {
		return false
	}
	e.perPrincipal[principal]++
	return true
}

// endOf uncounts a running execution of principal (see startOf).
func (e *Engine) endOf(principal string) {
	if e.maxPerPrincipal <= 0 || principal == "" {
		return
	}
	e.principalsMu.Lock()
	defer e.principalsMu.Unlock()
	if e.perPrincipal[principal]--; e.perPrincipal[principal] <= 0 {
		delete(e.perPrincipal, principal)
	}
}

// admitter returns routing's admission check for req: a deployment is eligible only if
// the engine has an adapter for its provider and that adapter can encode req for it.
//
// A verdict depends only on the provider, capabilities and parameters of a deployment
// (see EncodeCheck), and an ability is often served by many deployments sharing them,
// so the verdicts of one request are remembered: a lookup in a large table asks each
// adapter once per distinct configuration, not once per deployment.
func (e *Engine) admitter(req *protocol.Request) func(d *routing.Deployment) error {
	type verdict struct {
		d   *routing.Deployment // the first deployment judged with this configuration
		err error
	}
	var known []verdict // few distinct configurations: a scan beats a map here
	return func(d *routing.Deployment) error {
		for _, v := range known {
			if v.d.Provider == d.Provider && v.d.Capabilities == d.Capabilities && slices.Equal(v.d.Parameters, d.Parameters) {
				return v.err
			}
		}
		var err error
		switch p, ok := e.providers[d.Provider]; {
		case !ok || p.New == nil:
			err = errNoAdapter()
		case p.CanEncode != nil:
			if pe := p.CanEncode(req, d); pe != nil {
				err = pe
			}
		}
		if len(known) < maxVerdicts {
			known = append(known, verdict{d, err})
		}
		return err
	}
}

// maxVerdicts bounds the verdicts one request remembers, so a table of all-distinct
// deployments costs no more than asking each adapter.
const maxVerdicts = 16

// noRouteError is the synchronous error for a request no deployment is eligible for.
// When the only deployments with the right capabilities refused a request the caller
// must change (a model parameter they do not allow), that refusal is answered (400);
// otherwise it is unsupported_capability (422), whose message names capability ids (a
// closed set) or the adapter's fixed refusal, never the ability.
func noRouteError(ne *routing.NoEligibleError) *protocol.Error {
	var pe *protocol.Error
	if ne.Unmet == 0 && !ne.NoAbility && errors.As(ne.Refused, &pe) {
		if pe.Code == protocol.CodeInvalidRequest {
			return pe.Clone()
		}
		return protocol.NewError(protocol.CodeUnsupportedCapability, ne.Error()+": "+pe.Message)
	}
	return protocol.NewError(protocol.CodeUnsupportedCapability, ne.Error())
}

// query builds the routing query of req with the contract's defaults applied.
func query(req *protocol.Request) routing.Query {
	q := routing.Query{
		Ability:     req.Ability,
		Required:    routing.Required(req.Requirements, req.Input),
		Deadline:    time.Duration(req.DeadlineOrDefault()) * time.Millisecond,
		MaxAttempts: req.MaxAttemptsOrDefault(),
	}
	if req.Routing != nil {
		q.Prefer = refs(req.Routing.Prefer)
		q.Only = refs(req.Routing.Only)
	}
	if len(req.Extensions) > 0 {
		q.ExtensionKeys = make([]string, 0, len(req.Extensions))
		for k := range req.Extensions {
			q.ExtensionKeys = append(q.ExtensionKeys, k)
		}
	}
	return q
}

// refs parses the deployment references of a request's routing hints; nil for none.
func refs(list []string) []routing.Ref {
	if len(list) == 0 {
		return nil
	}
	out := make([]routing.Ref, 0, len(list))
	for _, s := range list {
		// The decoder validated the refs; one that still does not parse can match
		// nothing anyway.
		if ref, ok := routing.ParseRef(s); ok {
			out = append(out, ref)
		}
	}
	return out
}

// create stores the execution and its execution.accepted event, for the idempotency
// reservation under key when key is not empty.
func (e *Engine) create(ctx context.Context, id string, createdAt time.Time, req *protocol.Request, route routing.Route, p Principal, key string) (Accepted, *execution, error) {
	acc := Accepted{ID: id, CreatedAt: createdAt, DeadlineAt: createdAt.Add(route.Deadline)}
	log := lazylog.WithValues(e.log, "execution", id)

	info, err := json.Marshal(Info{
		Ability:      req.Ability,
		Metadata:     req.Metadata,
		DeadlineAt:   acc.DeadlineAt,
		CreatedAt:    createdAt,
		Principal:    p.Name,
		PrincipalUID: p.UID,
		Namespace:    route.Candidates[0].Ref.Namespace,
	})
	if err != nil {
		log.Error(err, "Cannot encode execution info")
		return Accepted{}, nil, errInternal()
	}
	// Once creation starts it must finish: an execution stored without its accepted
	// event would never end. ctx, which Submit detached from the caller's cancellation,
	// is also the context of the execution's writes.
	rec := eventstore.Record{ID: id, CreatedAt: createdAt, Info: info, IdempotencyKey: key}
	lease, err := e.store.Create(ctx, rec, e.replica, e.lease)
	if err != nil {
		log.Error(err, "Cannot create execution")
		return Accepted{}, nil, storeError(err)
	}
	x := &execution{
		id:         id,
		ability:    req.Ability,
		req:        req,
		route:      route,
		deadlineAt: acc.DeadlineAt,
		w:          writer{store: e.store, ctx: ctx, id: id, now: e.now, fence: lease.Fence, last: createdAt, limits: e.limits},
		log:        log,
	}
	// execution.accepted carries the creation time, so that its timestamp and the
	// status's created_at agree; later events never precede it.
	// The record exists now, so a failed write is tried again a few times (it may have
	// landed: appendRetry checks before writing again). If it still fails, the record
	// stays without events: nothing else is recorded for it, it never runs, and the
	// caller is told internal — Submit treats an execution without execution.accepted
	// as never created and releases its idempotency key (releaseUnlessCreated).
	accepted := protocol.AcceptedData{Ability: req.Ability, DeadlineAt: acc.DeadlineAt}
	if err := x.w.appendRetry(protocol.EventAccepted, accepted, createdAt, retryPolicy{tries: acceptedTries}, log); err != nil {
		log.Error(err, "Cannot record execution.accepted; the execution will not run")
		return Accepted{}, nil, storeError(err)
	}
	return acc, x, nil
}

// acceptedTries bounds the tries of writing execution.accepted: Submit's caller waits.
const acceptedTries = 4

// Cancellation is what Cancel reports: the execution's status after the request, and
// whether the request was a no-op.
type Cancellation struct {
	eventstore.Status
	// AlreadyTerminal reports that the execution was already terminal when the cancel
	// was requested (the store refused it with ErrTerminated): nothing changes, and the
	// HTTP API answers 200 instead of 202. It is decided by the store at the moment of
	// the request, not by an earlier read, so it never races with the execution ending.
	AlreadyTerminal bool
}

// Cancel requests the cancellation of execution id and returns its status. The request
// is recorded in the store, so it works whichever replica runs the execution; that
// replica ends it with execution.failed (cancelled). Cancelling a terminal execution
// changes nothing and returns its status with AlreadyTerminal set: answer it as a no-op.
// An unknown execution gives a not_found *protocol.Error.
func (e *Engine) Cancel(ctx context.Context, id string) (Cancellation, error) {
	var c Cancellation
	err := e.store.RequestCancel(ctx, id)
	switch {
	case err == nil:
	case errors.Is(err, eventstore.ErrTerminated):
		c.AlreadyTerminal = true
	case errors.Is(err, eventstore.ErrNotFound):
		return Cancellation{}, errNotFound()
	default:
		e.log.Error(err, "Cannot request cancel", "execution", id)
		return Cancellation{}, errInternal()
	}
	st, err := e.store.Get(ctx, id)
	switch {
	case err == nil:
		c.Status = st
		return c, nil
	case errors.Is(err, eventstore.ErrNotFound):
		// Removed by retention between the two calls.
		return Cancellation{}, errNotFound()
	default:
		e.log.Error(err, "Cannot read execution", "execution", id)
		return Cancellation{}, errInternal()
	}
}

// Remove removes execution id from every read, as the end of its retention would
// (spec/events.md, "EventStore"). A running execution is cancelled first and removed
// once its terminal event is recorded, so that no runner writes to an execution that
// is gone; that takes at most the cleanup grace while its replica runs it, the lease
// and the grace when its replica died. If it is not terminal within that bound (plus
// removeSlack), or ctx ends first, nothing is removed and Remove answers conflict,
// retryable: the execution is still stopping. An unknown or removed execution gives a
// not_found *protocol.Error.
func (e *Engine) Remove(ctx context.Context, id string) error {
	if _, err := e.Cancel(ctx, id); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, e.lease+e.grace+removeSlack)
	defer cancel()
	for {
		st, err := e.store.Get(ctx, id)
		switch {
		case errors.Is(err, eventstore.ErrNotFound):
			return errNotFound()
		case err != nil && ctx.Err() != nil:
			return errStillStopping()
		case err != nil:
			e.log.Error(err, "Cannot read execution", "execution", id)
			return errInternal()
		}
		if st.Terminal {
			break
		}
		err = e.store.Wait(ctx, id, st.LastSequence)
		switch {
		case err == nil, errors.Is(err, eventstore.ErrTerminated):
		case errors.Is(err, eventstore.ErrNotFound):
			return errNotFound()
		case ctx.Err() != nil:
			return errStillStopping()
		default:
			e.log.Error(err, "Cannot wait for execution", "execution", id)
			return errInternal()
		}
	}
	if err := e.store.Remove(context.WithoutCancel(ctx), id); err != nil {
		e.log.Error(err, "Cannot remove execution", "execution", id)
		return errInternal()
	}
	return nil
}

// removeSlack is what Remove waits beyond the lease and the cleanup grace for a
// cancelled execution to record its terminal event: the writes of the replica ending it.
const removeSlack = 5 * time.Second

// Shutdown drains the engine (spec/events.md, "Shutdown"): it stops accepting executions
// (Submit answers provider_unavailable) and sweeping for orphans, and lets the running
// executions finish until ctx ends. Then it stops the rest: with Config.HandOver each is
// handed over — its adapter is stopped without cancelling remote work, and its lease is
// released for another replica to adopt or end it — else each ends with internal. It
// returns once every execution has recorded its terminal event or let go of its lease:
// after ctx ends, each waits at most CleanupGrace for its adapter and retries its last
// write for at most CleanupGrace more. It returns ctx.Err() when executions had to be
// stopped, nil when all finished in time. It may be called more than once.
func (e *Engine) Shutdown(ctx context.Context) error {
	e.shutdown.Do(func() {
		e.closing.Store(true)
		e.stopSweep()
		go func() {
			// Every running execution holds a slot until its terminal event is written;
			// holding all of them means none runs, and none can start.
			for range cap(e.slots) {
				e.slots <- struct{}{}
			}
			close(e.drained)
		}()
	})
	select {
	case <-e.drained:
		return nil
	case <-ctx.Done():
	}
	cause := errShutdown
	if e.handOver {
		cause = errHandedOver
	}
	e.stop(cause)
	<-e.drained
	return ctx.Err()
}

// Close stops the engine at once: Shutdown without a grace for running executions.
func (e *Engine) Close() error {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_ = e.Shutdown(ctx)
	return nil
}
