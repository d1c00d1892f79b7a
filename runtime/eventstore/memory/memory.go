// Package memory is the embedded EventStore: everything lives in this process and
// is lost on restart, so it suits a single replica. It is the default store.
package memory

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"github.com/switchboard-dev/switchboard/runtime/eventstore"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
)

const (
	// DefaultRetention is how long a terminal execution is kept (spec/events.md,
	// "EventStore").
	DefaultRetention = time.Hour
	// maxSweepInterval bounds how late a removal may be with the default sweep interval.
	maxSweepInterval = time.Minute
	// minSweepInterval keeps a tiny retention from turning the sweeper into a busy loop.
	minSweepInterval = time.Second
)

// Option configures a Store.
type Option func(*config)

type config struct {
	retention   time.Duration
	now         func() time.Time
	interval    time.Duration
	intervalSet bool // WithSweepInterval was given
}

// WithRetention sets how long a terminal execution is kept after its terminal event
// (default DefaultRetention). A negative d is treated as 0: removed at the next sweep.
func WithRetention(d time.Duration) Option {
	return func(c *config) { c.retention = max(d, 0) }
}

// WithClock replaces time.Now, so that tests can move time and call Sweep instead of
// sleeping.
func WithClock(now func() time.Time) Option {
	return func(c *config) { c.now = now }
}

// WithSweepInterval sets how often expired executions, reservations and budget counters
// are removed in the background; 0 disables the background sweep (then only Sweep
// removes them). The default is a tenth of the retention, between one second and one
// minute.
func WithSweepInterval(d time.Duration) Option {
	return func(c *config) { c.interval, c.intervalSet = max(d, 0), true }
}

// Store is the in-memory EventStore, which implements every role of package eventstore.
// Create it with New and release it with Close.
//
// Executions sit in a map behind a read-write lock that is held only to find or insert
// an execution; each execution then has its own lock, so appends to one execution do not
// contend with reads of another. Idempotency reservations have a lock of their own, and
// each scope's reservations a queue by expiry (see resQueue), which is also their count.
//
// Each execution keeps its result snapshot, which Append folds each event into under
// the execution's lock (protocol.Snapshot.Apply, O(event) with its builders), so Get and
// Snapshot never refold the events.
//
// Budget counters and what each execution holds on them have one lock of their own
// (see budgets.go): a Hold across several counters is one atomic step.
//
// Each execution also holds its lease (spec/events.md, "Ownership and orphans"), checked
// and changed under the execution's lock, and, while it is leased and not terminal, an
// item in the orphan index: a heap by lease expiry with a lock of its own, taken inside
// an execution's lock, so that Orphans reads it without touching any execution. Lease
// expiry is measured on the store's clock (WithClock).
type Store struct {
	now       func() time.Time
	retention time.Duration

	mu    sync.RWMutex
	execs map[string]*execution

	expMu       sync.Mutex
	execExpires expiryQueue // terminal executions by removal time

	leaseMu sync.Mutex
	leases  leaseIndex // leased non-terminal executions by lease expiry

	resMu        sync.Mutex
	reservations map[string]reservation
	resScopes    map[string]*resQueue // each scope's reservations; no queue is empty
	secrets      map[string]secret    // under resMu

	budgetMu       sync.Mutex
	counters       map[string]budgetCounter
	counterExpires expiryQueue            // counters by expiry
	budgetHolds    map[string]budgetHolds // what each execution holds

	closed    chan struct{} // closed by Close, wakes every waiter
	isClosed  atomic.Bool   // cheap check for the non-blocking methods
	closeOnce sync.Once
	sweeper   sync.WaitGroup
}

var (
	_ eventstore.Log          = (*Store)(nil)
	_ eventstore.Reservations = (*Store)(nil)
	_ eventstore.Cancels      = (*Store)(nil)
	_ eventstore.Leases       = (*Store)(nil)
	_ eventstore.Secrets      = (*Store)(nil)
	_ eventstore.Budgets      = (*Store)(nil)
)

// New returns an empty Store and starts its background sweep.
func New(opts ...Option) *Store {
	c := config{retention: DefaultRetention, now: time.Now}
	for _, o := range opts {
		o(&c)
	}
	if !c.intervalSet {
		c.interval = min(max(c.retention/10, minSweepInterval), maxSweepInterval)
	}
	s := &Store{
		now:          c.now,
		retention:    c.retention,
		execs:        make(map[string]*execution),
		reservations: make(map[string]reservation),
		resScopes:    make(map[string]*resQueue),
		secrets:      make(map[string]secret),
		counters:     make(map[string]budgetCounter),
		budgetHolds:  make(map[string]budgetHolds),
		closed:       make(chan struct{}),
	}
	if c.interval > 0 {
		s.sweeper.Go(func() { s.sweepEvery(c.interval) })
	}
	return s
}

// execution is one stored execution. Its fields are guarded by mu.
type execution struct {
	mu              sync.RWMutex
	rec             eventstore.Record
	events          []entry // events[i] has sequence i+1
	updatedAt       time.Time
	terminal        bool
	expiresAt       time.Time // set with terminal
	cancelRequested bool
	removed         bool // deleted from the map by a sweep; lookups that raced it see this

	// payloads holds copies of the running execution's payloads, end to end (see keep).
	payloads []byte

	lease  eventstore.Lease // zero until the first acquisition
	leased *leaseItem       // its item in the orphan index; nil when unleased or terminal
	remote json.RawMessage  // the handle of SetRemote

	// snap is the fold of events; its builders are dropped at the terminal event.
	snap     protocol.Snapshot
	attempts int                   // route.selected events
	route    *protocol.RouteStatus // of the last route.selected
	output   bool                  // an output or tool event is stored
	outBytes int64                 // the materialized output stored (Status.OutputBytes)

	// changed is closed (and forgotten) on the next append or removal. It is made only
	// when someone waits, so appends nobody waits for and retained executions carry no
	// channel. One channel serves every waiter: a broadcast that never fills up.
	changed chan struct{}
	// signal is closed (and forgotten) on a cancel request, the terminal event or
	// removal: whatever ends WaitCancel. Made only when someone waits.
	signal chan struct{}
}

// The buffers of a running execution: its events have room for initialEvents (a
// streamed answer of a few tokens fits without growing), and payloads are copied into
// chunks that double from minPayloadChunk up to maxPayloadChunk. The terminal event
// packs both to their size (compact).
const (
	initialEvents   = 16
	minPayloadChunk = 512
	maxPayloadChunk = 16 << 10
)

// maxPacked bounds what the terminal event packs into one allocation: an execution's
// payload chunks (compact) and its snapshot's text builders (protocol.Snapshot.Compact).
// Packing saves their slack, up to their size when they are small, at most a quarter of
// it beyond (a chunk of maxPayloadChunk leaves less than a quarter unused; Go grows a
// large buffer by a quarter), and costs, while the copy is made, a second copy of all
// of it: for the output limit's worth, 64 MiB more heap to save at most 16.
const maxPacked = 1 << 20

// keep returns a copy of data (nil for nil) in e's payload chunks. A chunk is only ever
// appended to, and one that is full is left where the earlier copies point rather than
// grown by moving them: so a copy costs an allocation per chunk instead of one per event.
// A payload larger than a quarter of the largest chunk gets an allocation of its own,
// so that the room a chunk is left with when the next payload does not fit stays below
// a quarter of it, however long the execution runs. Called with e.mu held.
func (e *execution) keep(data []byte) json.RawMessage {
	if data == nil {
		return nil
	}
	if !chunked(data) {
		return bytes.Clone(data)
	}
	if len(e.payloads)+len(data) > cap(e.payloads) {
		size := min(max(2*cap(e.payloads), minPayloadChunk), maxPayloadChunk)
		e.payloads = make([]byte, 0, max(size, len(data)))
	}
	start := len(e.payloads)
	e.payloads = append(e.payloads, data...)
	// Capped at its end, so that appending to the copy cannot reach the next one.
	return e.payloads[start:len(e.payloads):len(e.payloads)]
}

// entry is a stored event: ExecutionID and Sequence are implied by its position.
type entry struct {
	ts   time.Time
	typ  protocol.EventType
	data json.RawMessage
}

type reservation struct {
	r    eventstore.Reservation
	item *resItem // in the queue of r.Scope
}

// Create implements eventstore.Log. The execution becomes visible, leased and indexed,
// and its reservation marked Created, all under the map's lock: no reader sees one
// without the others.
func (s *Store) Create(_ context.Context, rec eventstore.Record, owner string, ttl time.Duration) (eventstore.Lease, error) {
	if err := eventstore.CheckCreate(rec, owner, ttl); err != nil {
		return eventstore.Lease{}, err
	}
	if s.isClosed.Load() {
		return eventstore.Lease{}, eventstore.ErrClosed
	}
	e := &execution{rec: copyRecord(rec), updatedAt: rec.CreatedAt, snap: protocol.NewSnapshot(rec.ID),
		events: make([]entry, 0, initialEvents)}
	s.mu.Lock()
	defer s.mu.Unlock()
	if cur, ok := s.execs[rec.ID]; ok {
		// cur.rec never changes, and cur is not removed while it is in the map.
		if !sameRecord(cur.rec, rec) {
			return eventstore.Lease{}, fmt.Errorf("create execution %s: %w", rec.ID, eventstore.ErrExists)
		}
		cur.mu.RLock()
		defer cur.mu.RUnlock()
		return cur.lease, nil // a repeat of the Create that stored it
	}
	now := s.now()
	if owner != "" {
		e.lease = eventstore.Lease{Owner: owner, Fence: eventstore.FirstFence, Expires: now.Add(ttl)}
		s.indexLease(e)
	}
	if rec.IdempotencyKey != "" {
		s.markCreated(rec.IdempotencyKey, rec.ID, now)
	}
	s.execs[rec.ID] = e
	return e.lease, nil
}

// markCreated marks the unexpired reservation under key Created if it names id.
func (s *Store) markCreated(key, id string, now time.Time) {
	s.resMu.Lock()
	defer s.resMu.Unlock()
	if cur, ok := s.reservations[key]; ok && cur.r.ExecutionID == id && now.Before(cur.item.expires) {
		cur.r.Created = true
		s.reservations[key] = cur
	}
}

// Append implements eventstore.Log.
func (s *Store) Append(_ context.Context, fence eventstore.Fence, ev protocol.Event) error {
	if err := eventstore.CheckAppend(&ev); err != nil {
		return err
	}
	e, err := s.lookup(ev.ExecutionID)
	if err != nil {
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if repeat, err := e.admit(fence, &ev); repeat || err != nil {
		return err
	}
	var route *protocol.RouteStatus
	if ev.Type == protocol.EventRouteSelected {
		if route, err = routeOf(&ev); err != nil {
			return err
		}
	}
	// Apply is atomic: an event whose data does not decode leaves the snapshot as it was.
	// It decodes with protocol.CheckData's rule (one switch in protocol), so calling
	// CheckData first would only decode every event twice.
	if err := e.snap.Apply(ev); err != nil {
		return invalidData(&ev, err)
	}
	if route != nil {
		e.attempts++
		e.route = route
	}
	if ev.Type.IsOutput() {
		e.output = true
		e.outBytes += outputBytes(&ev)
	}
	e.events = append(e.events, entry{ts: ev.Timestamp, typ: ev.Type, data: e.keep(ev.Data)})
	e.updatedAt = ev.Timestamp
	if ev.Type.Terminal() {
		s.terminate(e)
	}
	e.notify()
	return nil
}

// The helpers of Append below keep its rarer branches out of its frame. Append runs on
// the engine's execution goroutine, whose stack starts small; with their code in it,
// Append's frame was 976 bytes and the goroutine's stack was copied to twice its size at
// the first route.selected.

// admit checks that ev, the next event Append is to store, may be stored: repeat is
// true for a repeat of the Append that stored it, which stores nothing and succeeds.
// The caller holds e.mu.
func (e *execution) admit(fence eventstore.Fence, ev *protocol.Event) (repeat bool, err error) {
	switch next := uint64(len(e.events)) + 1; {
	case e.removed:
		return false, notFound(ev.ExecutionID)
	case fence != e.lease.Fence:
		return false, leaseLost("append to", ev.ExecutionID, fence, e.lease.Fence)
	case ev.Sequence == next-1 && next > 1 && e.events[next-2].same(*ev):
		return true, nil // a repeat of the Append that stored it, terminal or not
	case e.terminal:
		return false, fmt.Errorf("append to %s: %w", ev.ExecutionID, eventstore.ErrTerminated)
	case ev.Sequence != next:
		return false, fmt.Errorf("append to %s: sequence %d, next is %d: %w",
			ev.ExecutionID, ev.Sequence, next, eventstore.ErrSequence)
	}
	return false, nil
}

// routeOf is the route a route.selected event records.
func routeOf(ev *protocol.Event) (*protocol.RouteStatus, error) {
	var d protocol.RouteSelectedData
	if err := protocol.UnmarshalData(ev.Data, &d); err != nil {
		return nil, invalidData(ev, err)
	}
	return &protocol.RouteStatus{Deployment: d.Deployment, Provider: d.Provider, Model: d.Model}, nil
}

// outputBytes is the materialized output ev, an output or tool event that Apply has
// folded, adds (Status.OutputBytes). Its data decodes, as Apply has just found; Apply
// keeps what it decoded to itself, so this decodes it a second time (a delta in its
// usual form: one scan, no allocation).
func outputBytes(ev *protocol.Event) int64 {
	switch ev.Type {
	case protocol.EventOutputDelta:
		d, _ := protocol.DecodeDelta(ev.Data)
		return int64(len(d.Text))
	case protocol.EventToolCallArgsDelta:
		var d protocol.ToolCallArgsDeltaData
		_ = protocol.UnmarshalData(ev.Data, &d)
		return int64(len(d.Delta))
	case protocol.EventOutputResult:
		var d protocol.OutputResultData
		_ = protocol.UnmarshalData(ev.Data, &d)
		return int64(len(d.Result))
	}
	return 0
}

// terminate ends e after its terminal event was stored: it keeps e for the retention,
// compacted, wakes its cancel watchers and takes it out of the orphan index. The caller
// holds e.mu.
func (s *Store) terminate(e *execution) {
	e.terminal = true
	e.expiresAt = s.now().Add(s.retention)
	e.compact()
	if e.outBytes <= maxPacked {
		e.snap.Compact()
	}
	e.fire()
	s.expMu.Lock()
	s.execExpires.add(e.expiresAt, e.rec.ID)
	s.expMu.Unlock()
	s.indexLease(e) // out of the orphan index
}

// Get implements eventstore.Log.
func (s *Store) Get(_ context.Context, id string) (eventstore.Status, error) {
	e, err := s.lookup(id)
	if err != nil {
		return eventstore.Status{}, err
	}
	e.mu.RLock()
	defer e.mu.RUnlock()
	if e.removed {
		return eventstore.Status{}, notFound(id)
	}
	st := eventstore.Status{
		Record:          copyRecord(e.rec),
		LastSequence:    uint64(len(e.events)),
		Terminal:        e.terminal,
		UpdatedAt:       e.updatedAt,
		Output:          e.output,
		OutputBytes:     e.outBytes,
		CancelRequested: e.cancelRequested,
		State:           e.snap.Status,
		Attempts:        e.attempts,
		Error:           e.snap.Error.Clone(),
		Lease:           e.lease,
		Remote:          bytes.Clone(e.remote),
	}
	if e.route != nil {
		r := *e.route
		st.Route = &r
	}
	return st, nil
}

// Snapshot implements eventstore.Log. The copy costs O(output parts, tool calls,
// artifacts and usage entries): the texts are immutable strings, shared, not copied.
func (s *Store) Snapshot(_ context.Context, id string) (protocol.Snapshot, error) {
	e, err := s.lookup(id)
	if err != nil {
		return protocol.Snapshot{}, err
	}
	e.mu.RLock()
	defer e.mu.RUnlock()
	if e.removed {
		return protocol.Snapshot{}, notFound(id)
	}
	return e.snap.Clone(), nil
}

// Read implements eventstore.Log.
func (s *Store) Read(_ context.Context, id string, after uint64, limit int) ([]protocol.Event, error) {
	e, err := s.lookup(id)
	if err != nil {
		return nil, err
	}
	e.mu.RLock()
	defer e.mu.RUnlock()
	if e.removed {
		return nil, notFound(id)
	}
	if after >= uint64(len(e.events)) {
		return nil, nil
	}
	src := e.events[after:]
	if limit > 0 && len(src) > limit {
		src = src[:limit]
	}
	// One buffer holds every payload copy: two allocations per Read whatever its length.
	size := 0
	for _, en := range src {
		size += len(en.data)
	}
	buf := make([]byte, 0, size)
	out := make([]protocol.Event, len(src))
	for i, en := range src {
		out[i] = protocol.Event{
			ExecutionID: e.rec.ID,
			Sequence:    after + uint64(i) + 1,
			Timestamp:   en.ts,
			Type:        en.typ,
		}
		if en.data != nil {
			start := len(buf)
			buf = append(buf, en.data...)
			// Cap at the end of this payload so appending to it cannot reach the next.
			out[i].Data = buf[start:len(buf):len(buf)]
		}
	}
	return out, nil
}

// Wait implements eventstore.Log.
func (s *Store) Wait(ctx context.Context, id string, after uint64) error {
	e, err := s.lookup(id)
	if err != nil {
		return err
	}
	ready := func() (bool, error) {
		switch {
		case e.removed:
			return true, notFound(id)
		case uint64(len(e.events)) > after:
			return true, nil
		case e.terminal:
			return true, fmt.Errorf("wait on %s after %d: %w", id, after, eventstore.ErrTerminated)
		}
		return false, nil
	}
	return s.block(ctx, e, ready, func() *chan struct{} { return &e.changed })
}

// RequestCancel implements eventstore.Cancels.
func (s *Store) RequestCancel(_ context.Context, id string) error {
	e, err := s.lookup(id)
	if err != nil {
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	switch {
	case e.removed:
		return notFound(id)
	case e.terminal:
		return fmt.Errorf("cancel %s: %w", id, eventstore.ErrTerminated)
	}
	e.cancelRequested = true
	e.fire()
	return nil
}

// WaitCancel implements eventstore.Cancels.
func (s *Store) WaitCancel(ctx context.Context, id string) error {
	e, err := s.lookup(id)
	if err != nil {
		return err
	}
	ready := func() (bool, error) {
		switch {
		case e.removed:
			return true, notFound(id)
		case e.cancelRequested:
			return true, nil
		case e.terminal:
			return true, errWaitTerminal
		}
		return false, nil
	}
	return s.block(ctx, e, ready, func() *chan struct{} { return &e.signal })
}

// errWaitTerminal ends WaitCancel at the terminal event, the end of every execution's
// cancel watch: one value, not one formatted per execution.
var errWaitTerminal = fmt.Errorf("wait for cancel: %w", eventstore.ErrTerminated)

// block waits until ready reports done, re-checking whenever the channel in *wake() is
// closed. ready and wake run under e's lock.
func (s *Store) block(ctx context.Context, e *execution, ready func() (bool, error), wake func() *chan struct{}) error {
	for {
		// Most calls find their answer, or the wake-up channel another waiter installed,
		// under the shared lock (after an append, the subscribers of an execution wait
		// again all at once); only the first caller that has to sleep takes the exclusive
		// one to install the channel.
		e.mu.RLock()
		done, err := ready()
		var c chan struct{}
		if !done {
			c = *wake()
		}
		e.mu.RUnlock()
		if done {
			return err
		}
		if c == nil {
			e.mu.Lock()
			done, err = ready()
			ch := wake()
			if !done && *ch == nil {
				*ch = make(chan struct{})
			}
			c = *ch
			e.mu.Unlock()
			if done {
				return err
			}
		}
		select {
		case <-c:
		case <-ctx.Done():
			return ctx.Err()
		case <-s.closed:
			return eventstore.ErrClosed
		}
	}
}

// Reserve implements eventstore.Reservations. The scope's expired reservations are removed
// first, so that its count, the length of its queue, is exact whatever the sweep
// interval.
func (s *Store) Reserve(_ context.Context, key string, r eventstore.Reservation, ttl time.Duration, limit int) (eventstore.Reservation, bool, error) {
	if err := eventstore.CheckReserve(key, ttl); err != nil {
		return eventstore.Reservation{}, false, err
	}
	if s.isClosed.Load() {
		return eventstore.Reservation{}, false, eventstore.ErrClosed
	}
	now := s.now()
	s.resMu.Lock()
	defer s.resMu.Unlock()
	if cur, ok := s.reservations[key]; ok {
		if now.Before(cur.item.expires) {
			// The same execution and fingerprint: a repeat of the Reserve that stored it.
			mine := cur.r.ExecutionID == r.ExecutionID && cur.r.Fingerprint == r.Fingerprint
			return copyReservation(cur.r), mine, nil
		}
		// Expired, and the sweep has not reached it yet: it counts as absent.
		s.unreserve(key, cur)
	}
	q := s.resScopes[r.Scope]
	if q == nil {
		q = new(resQueue)
	} else {
		s.expire(r.Scope, q, now)
		if limit > 0 && q.Len() >= limit {
			return eventstore.Reservation{}, false, &eventstore.ReservationLimitError{Limit: limit, RetryAfter: (*q)[0].expires.Sub(now)}
		}
	}
	stored := reservation{r: copyReservation(r), item: q.add(key, now.Add(ttl))}
	stored.r.Created = false // only Create marks it
	s.reservations[key] = stored
	s.resScopes[r.Scope] = q
	return copyReservation(stored.r), true, nil
}

// Release implements eventstore.Reservations.
func (s *Store) Release(_ context.Context, key, executionID string) error {
	if s.isClosed.Load() {
		return eventstore.ErrClosed
	}
	s.resMu.Lock()
	defer s.resMu.Unlock()
	if cur, ok := s.reservations[key]; ok && cur.r.ExecutionID == executionID {
		s.unreserve(key, cur)
	}
	return nil
}

// unreserve forgets the reservation cur stored under key. Called with s.resMu held.
func (s *Store) unreserve(key string, cur reservation) {
	q := s.resScopes[cur.r.Scope]
	q.remove(cur.item)
	if q.Len() == 0 {
		delete(s.resScopes, cur.r.Scope)
	}
	delete(s.reservations, key)
}

// expire forgets the reservations of scope, whose queue is q, that expired at or
// before now. Called with s.resMu held.
func (s *Store) expire(scope string, q *resQueue, now time.Time) {
	for _, key := range q.due(now) {
		delete(s.reservations, key)
	}
	if q.Len() == 0 {
		delete(s.resScopes, scope)
	}
}

// Secret implements eventstore.Secrets. Expired secrets are dropped here, on every call:
// there are a few of them (one per rotation period of the stream-link key).
func (s *Store) Secret(_ context.Context, name string, candidate []byte, ttl time.Duration) ([]byte, error) {
	if err := eventstore.CheckSecret(name, candidate, ttl); err != nil {
		return nil, err
	}
	if s.isClosed.Load() {
		return nil, eventstore.ErrClosed
	}
	now := s.now()
	s.resMu.Lock()
	defer s.resMu.Unlock()
	maps.DeleteFunc(s.secrets, func(_ string, v secret) bool { return !now.Before(v.expiresAt) })
	cur, ok := s.secrets[name]
	if !ok {
		cur = secret{value: bytes.Clone(candidate), expiresAt: now.Add(ttl)}
		s.secrets[name] = cur
	}
	return bytes.Clone(cur.value), nil
}

// secret is a value Secret stored.
type secret struct {
	value     []byte
	expiresAt time.Time
}

// Acquire implements eventstore.Leases.
func (s *Store) Acquire(_ context.Context, id, owner string, ttl time.Duration) (eventstore.Lease, error) {
	if err := eventstore.CheckAcquire(id, owner, ttl); err != nil {
		return eventstore.Lease{}, err
	}
	e, err := s.lookup(id)
	if err != nil {
		return eventstore.Lease{}, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	now := s.now()
	switch {
	case e.removed:
		return eventstore.Lease{}, notFound(id)
	case e.terminal:
		return eventstore.Lease{}, fmt.Errorf("acquire lease of %s: %w", id, eventstore.ErrTerminated)
	case e.lease.Expires.After(now):
		return eventstore.Lease{}, fmt.Errorf("acquire lease of %s: held by %s until %v: %w",
			id, e.lease.Owner, e.lease.Expires, eventstore.ErrLeaseHeld)
	}
	e.lease = eventstore.Lease{Owner: owner, Fence: e.lease.Fence + 1, Expires: now.Add(ttl)}
	s.indexLease(e)
	return e.lease, nil
}

// Renew implements eventstore.Leases. NoFence names no lease: ErrInvalid.
func (s *Store) Renew(_ context.Context, id string, fence eventstore.Fence, ttl time.Duration) (eventstore.Lease, error) {
	if err := eventstore.CheckRenew(id, fence, ttl); err != nil {
		return eventstore.Lease{}, err
	}
	var lease eventstore.Lease
	err := s.fenced(id, fence, "renew lease of", func(e *execution) error {
		if e.terminal {
			return fmt.Errorf("renew lease of %s: %w", id, eventstore.ErrTerminated)
		}
		e.lease.Expires = s.now().Add(ttl)
		s.indexLease(e)
		lease = e.lease
		return nil
	})
	return lease, err
}

// ReleaseLease implements eventstore.Leases. NoFence names no lease: ErrInvalid.
func (s *Store) ReleaseLease(_ context.Context, id string, fence eventstore.Fence) error {
	if err := eventstore.CheckReleaseLease(id, fence); err != nil {
		return err
	}
	return s.fenced(id, fence, "release lease of", func(e *execution) error {
		if now := s.now(); !e.terminal && e.lease.Expires.After(now) {
			e.lease.Expires = now
			s.indexLease(e)
		}
		return nil
	})
}

// Orphans implements eventstore.Leases.
func (s *Store) Orphans(_ context.Context, limit int) ([]string, error) {
	if s.isClosed.Load() {
		return nil, eventstore.ErrClosed
	}
	limit = eventstore.OrphanLimit(limit)
	now := s.now()
	s.leaseMu.Lock()
	defer s.leaseMu.Unlock()
	return s.leases.expired(now, limit), nil
}

// SetRemote implements eventstore.Leases.
func (s *Store) SetRemote(_ context.Context, id string, fence eventstore.Fence, handle json.RawMessage) error {
	return s.fenced(id, fence, "set remote of", func(e *execution) error {
		if e.terminal {
			return fmt.Errorf("set remote of %s: %w", id, eventstore.ErrTerminated)
		}
		e.remote = bytes.Clone(handle)
		return nil
	})
}

// fenced runs f on execution id under its lock, after the checks every fenced change
// shares: the execution exists (ErrNotFound) and fence is its current fence
// (ErrLeaseLost, naming op).
func (s *Store) fenced(id string, fence eventstore.Fence, op string, f func(e *execution) error) error {
	e, err := s.lookup(id)
	if err != nil {
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	switch {
	case e.removed:
		return notFound(id)
	case fence != e.lease.Fence:
		return leaseLost(op, id, fence, e.lease.Fence)
	}
	return f(e)
}

// indexLease files e in the orphan index under its lease expiry, or takes it out once
// it is terminal. Called with e.mu held (or before e is shared).
func (s *Store) indexLease(e *execution) {
	s.leaseMu.Lock()
	defer s.leaseMu.Unlock()
	if e.terminal {
		s.leases.remove(e.leased)
		e.leased = nil
		return
	}
	e.leased = s.leases.set(e.leased, e.rec.ID, e.lease.Expires)
}

// Remove implements eventstore.Log. The execution leaves the map and is marked removed
// under both locks, as a sweep removes it; its entry in the expiry queue stays behind
// and the sweep skips it when it comes due.
func (s *Store) Remove(_ context.Context, id string) error {
	if s.isClosed.Load() {
		return eventstore.ErrClosed
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.execs[id]
	if e == nil {
		return nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.terminal {
		return fmt.Errorf("remove %s: %w", id, eventstore.ErrNotTerminal)
	}
	delete(s.execs, id)
	e.removed = true
	e.notify()
	e.fire()
	return nil
}

// Sweep removes terminal executions whose retention has ended, expired reservations and
// expired budget counters.
// A background goroutine calls it periodically (see WithSweepInterval); tests call it
// after moving their clock. Waiters of a removed execution return ErrNotFound.
func (s *Store) Sweep() {
	now := s.now()

	s.expMu.Lock()
	due := s.execExpires.due(now)
	s.expMu.Unlock()
	if len(due) > 0 {
		s.mu.Lock()
		for _, id := range due {
			e := s.execs[id]
			if e == nil {
				continue
			}
			e.mu.Lock()
			if e.terminal && !e.expiresAt.After(now) {
				delete(s.execs, id)
				e.removed = true
				e.notify()
				e.fire()
			}
			e.mu.Unlock()
		}
		s.mu.Unlock()
	}

	// A sweep visits every scope, a caller principal each: there are few of them, and
	// in each it costs only what it removes.
	s.resMu.Lock()
	for scope, q := range s.resScopes {
		s.expire(scope, q, now)
	}
	s.resMu.Unlock()

	s.budgetMu.Lock()
	s.expireCounters(now)
	s.budgetMu.Unlock()
}

// Close wakes blocked callers, which return ErrClosed, as do later calls, and stops the
// background sweep. It is idempotent. Stored data stays until the Store is garbage.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.isClosed.Store(true)
		close(s.closed)
	})
	s.sweeper.Wait()
	return nil
}

func (s *Store) sweepEvery(d time.Duration) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-s.closed:
			return
		case <-t.C:
			s.Sweep()
		}
	}
}

// lookup finds an execution. Callers must check e.removed under e.mu, since a sweep
// may remove it between the two locks.
func (s *Store) lookup(id string) (*execution, error) {
	if s.isClosed.Load() {
		return nil, eventstore.ErrClosed
	}
	s.mu.RLock()
	e := s.execs[id]
	s.mu.RUnlock()
	if e == nil {
		return nil, notFound(id)
	}
	return e, nil
}

// notify wakes Wait callers. Called with e.mu held.
func (e *execution) notify() {
	if e.changed != nil {
		close(e.changed)
		e.changed = nil
	}
}

// fire wakes WaitCancel callers. Called with e.mu held.
func (e *execution) fire() {
	if e.signal != nil {
		close(e.signal)
		e.signal = nil
	}
}

// compact trims a terminal execution's event slice to its length and packs the
// payloads that keep copied into chunks into one buffer, when they hold at most
// maxPacked bytes. Nothing can be appended any more, and retained terminal executions
// are most of the store's memory: this saves the slice's spare room and the chunks'
// slack. A payload that has an allocation of its own has no slack and stays where it
// is. Called with e.mu held.
func (e *execution) compact() {
	size := 0
	for _, en := range e.events {
		if chunked(en.data) {
			size += len(en.data)
		}
	}
	pack := size <= maxPacked
	var buf []byte
	if pack {
		buf = make([]byte, 0, size)
	}
	events := make([]entry, len(e.events))
	for i, en := range e.events {
		events[i] = en
		if pack && chunked(en.data) {
			start := len(buf)
			buf = append(buf, en.data...)
			events[i].data = buf[start:len(buf):len(buf)]
		}
	}
	e.events, e.payloads = events, nil
}

// chunked reports whether keep copied data into a payload chunk rather than into an
// allocation of its own.
func chunked(data []byte) bool {
	return data != nil && len(data) <= maxPayloadChunk/4
}

func notFound(id string) error {
	return fmt.Errorf("execution %s: %w", id, eventstore.ErrNotFound)
}

// leaseLost reports a write or lease change with a fence that is not current.
func leaseLost(op, id string, fence, current eventstore.Fence) error {
	return fmt.Errorf("%s %s: fence %d, current is %d: %w", op, id, fence, current, eventstore.ErrLeaseLost)
}

// invalidData reports an event whose data does not decode as its type's data.
func invalidData(ev *protocol.Event, err error) error {
	return fmt.Errorf("append to %s: event %d (%s): %w: %w", ev.ExecutionID, ev.Sequence, ev.Type, eventstore.ErrInvalid, err)
}

// same reports whether ev, at this entry's sequence, is the event stored there.
func (en entry) same(ev protocol.Event) bool {
	return en.typ == ev.Type && en.ts.Equal(ev.Timestamp) && sameBytes(en.data, ev.Data)
}

// sameRecord reports whether b registers the execution a records.
func sameRecord(a, b eventstore.Record) bool {
	return a.ID == b.ID && a.CreatedAt.Equal(b.CreatedAt) && sameBytes(a.Info, b.Info)
}

// sameBytes is bytes.Equal that tells nil from empty, as stored payloads do.
func sameBytes(a, b []byte) bool {
	return (a == nil) == (b == nil) && bytes.Equal(a, b)
}

func copyRecord(r eventstore.Record) eventstore.Record {
	r.Info = bytes.Clone(r.Info)
	return r
}

func copyReservation(r eventstore.Reservation) eventstore.Reservation {
	r.Response = bytes.Clone(r.Response)
	return r
}
