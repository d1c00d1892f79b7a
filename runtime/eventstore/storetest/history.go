package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchboard-dev/switchboard/runtime/eventstore"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
)

// CheckHistories checks, in the manner of Jepsen, that a store keeps what it
// acknowledged and never lets two replicas write one execution (spec/events.md,
// "EventStore" and "Ownership and orphans"), also while calls fail.
//
// Each history is one execution with concurrent writers and readers, each on a handle
// of its own (a replica). The writers run the execution in turns, as replicas do: the
// holder of the lease appends events, renews, sometimes releases its lease or stalls
// past its expiry, and the others take the lease over when it expired or was released;
// the holder appends the terminal event after a random number of events. Calls may fail
// (HistoryConfig.FaultRate, or a backend that drops connections), and the writers
// recover as a careful runtime does: after a failed Append they read the log back to
// learn whether their event landed, and append it again (the same event repeats the
// append) if it did not. Readers tail the execution from random cursors with Read and
// Wait, retrying failed calls.
//
// At the end of each history the final log, what writers got acknowledged and what
// every reader saw are compared, and the anomalies counted (see HistoryCounts); all
// must be 0. The counts over all histories are logged.
func CheckHistories(t *testing.T, cfg HistoryConfig) HistoryCounts {
	t.Helper()
	seed := rand.Uint64()
	var (
		mu    sync.Mutex
		total HistoryCounts
		wg    sync.WaitGroup
	)
	slots := make(chan struct{}, historyParallel)
	for i := range cfg.Histories {
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			c := runHistory(t, cfg, rand.New(rand.NewPCG(seed, uint64(i))))
			mu.Lock()
			defer mu.Unlock()
			total.add(c)
		})
	}
	wg.Wait()
	t.Logf("histories checked: %d (seed %d)", total.Histories, seed)
	t.Logf("anomalies: lost %d, duplicated %d, reordered %d, gaps %d, stale-fence stored %d, divergent reads %d, unfinished %d, unrecognised repeats %d",
		total.Lost, total.Duplicated, total.Reordered, total.Gaps, total.StaleStored, total.DivergentReads, total.Unfinished,
		total.Unrecognised)
	t.Logf("activity: %d events acknowledged (%d learnt by reading back), %d takeovers, %d writes fenced off, %d injected faults, %d events read",
		total.Acknowledged, total.ReadBack, total.Takeovers, total.Fenced, total.Faults, total.Observed)
	if total.anomalies() > 0 {
		t.Errorf("%d anomalies in %d histories (seed %d)", total.anomalies(), total.Histories, seed)
	}
	return total
}

// HistoryConfig describes the stores CheckHistories runs against.
type HistoryConfig struct {
	// Histories is how many histories to run.
	Histories int
	// Replicas are the handles writers and readers use, each one picked at random, as
	// replicas of the runtime would. Their calls may fail (a proxy that drops
	// connections, say): writers and readers retry.
	Replicas []LeaseStore
	// Check is a handle whose calls do not fail, for the final reads.
	Check eventstore.Log
	// FaultRate is the probability that a call through Replicas fails with an injected
	// error: half of them before the store acted, half after it acted, as when a reply
	// is lost.
	FaultRate float64
}

// HistoryCounts counts what CheckHistories found. The anomalies must all be 0; the
// activity shows what the histories exercised.
type HistoryCounts struct {
	// Histories is the number of histories checked.
	Histories int

	// Lost counts acknowledged events that the final log does not hold.
	Lost int
	// Duplicated counts events stored twice, and events a reader saw twice.
	Duplicated int
	// Reordered counts events out of sequence order, in the final log or a reader's
	// view, and a writer's events stored in another order than it appended them.
	Reordered int
	// Gaps counts missing sequences, in the final log or a reader's view.
	Gaps int
	// StaleStored counts stored events whose fence was no longer current: appended after
	// a newer lease was acquired, or stored after an event with a newer fence.
	StaleStored int
	// DivergentReads counts events a reader saw that differ from the final log's.
	DivergentReads int
	// Unfinished counts histories without a terminal event in time, and readers that
	// ended without seeing it.
	Unfinished int
	// Unrecognised counts appends refused with ErrSequence. A writer appends the event
	// after the last one it knows stored, and while its fence is current nobody else
	// appends: only its own earlier attempt, the same event, can have taken the
	// sequence, and that is a repeat, which must succeed.
	Unrecognised int

	// Acknowledged counts events a writer knows to be stored.
	Acknowledged int
	// ReadBack counts those of them a writer learnt of by reading the log after its
	// Append failed.
	ReadBack int
	// Takeovers counts acquisitions of a lease that another writer held before.
	Takeovers int
	// Fenced counts writes and renewals refused with ErrLeaseLost.
	Fenced int
	// Faults counts injected faults (HistoryConfig.FaultRate).
	Faults int
	// Observed counts the events readers saw.
	Observed int
}

func (c *HistoryCounts) add(o HistoryCounts) {
	c.Histories += o.Histories
	c.Lost += o.Lost
	c.Duplicated += o.Duplicated
	c.Reordered += o.Reordered
	c.Gaps += o.Gaps
	c.StaleStored += o.StaleStored
	c.DivergentReads += o.DivergentReads
	c.Unfinished += o.Unfinished
	c.Unrecognised += o.Unrecognised
	c.Acknowledged += o.Acknowledged
	c.ReadBack += o.ReadBack
	c.Takeovers += o.Takeovers
	c.Fenced += o.Fenced
	c.Faults += o.Faults
	c.Observed += o.Observed
}

func (c *HistoryCounts) anomalies() int {
	return c.Lost + c.Duplicated + c.Reordered + c.Gaps + c.StaleStored + c.DivergentReads + c.Unfinished +
		c.Unrecognised
}

const (
	// historyLease is the writers' lease: short, so that stalls and releases lead to
	// takeovers within a history.
	historyLease = 30 * time.Millisecond
	// historyWriters and historyReaders are the replicas of one history.
	historyWriters = 3
	historyReaders = 3
	// historyParallel is how many histories run at once.
	historyParallel = 8
	// historyDeadline bounds a history; only a broken store reaches it.
	historyDeadline = 20 * time.Second
	// retryPause is how long writers and readers wait before retrying a failed call.
	retryPause = time.Millisecond
)

// history is the shared record of one history: what writers were told, for the check.
type history struct {
	id     string
	target uint64 // the sequence of the terminal event

	mu       sync.Mutex
	ended    bool
	acquired map[eventstore.Fence]time.Time // when the call that took each fence returned
	started  map[string]time.Time           // when the Append of each payload was first called
	acked    map[uint64]string              // sequence → payload of acknowledged events
	counts   HistoryCounts                  // the activity
}

// payload is the data of a history's events: unique to each append attempt, so the
// check can tell who wrote an event, under which fence, and which attempt it was.
type payload struct {
	Writer       string           `json:"writer"`
	Fence        eventstore.Fence `json:"fence"`
	N            int              `json:"n"`
	FinishReason string           `json:"finish_reason,omitempty"` // of the terminal event
}

func runHistory(t *testing.T, cfg HistoryConfig, rng *rand.Rand) HistoryCounts {
	ctx, cancel := context.WithTimeout(t.Context(), historyDeadline)
	defer cancel()
	var injected atomic.Int64
	replica := func() LeaseStore {
		s := cfg.Replicas[rng.IntN(len(cfg.Replicas))]
		if cfg.FaultRate > 0 {
			f := faults{rate: cfg.FaultRate, injected: &injected}
			return LeaseStore{Log: faultyLog{s.Log, f}, Leases: faultyLeases{s.Leases, f}}
		}
		return s
	}
	h := &history{
		id:       newID(t),
		target:   10 + uint64(rng.IntN(30)),
		acquired: map[eventstore.Fence]time.Time{},
		started:  map[string]time.Time{},
		acked:    map[uint64]string{},
	}
	writers := make([]*writer, historyWriters)
	for i := range writers {
		writers[i] = &writer{h: h, name: fmt.Sprintf("writer-%d", i), store: replica(), rng: rand.New(rand.NewPCG(rng.Uint64(), 0))}
	}
	if !writers[0].create(ctx) {
		return HistoryCounts{Histories: 1, Unfinished: 1}
	}

	var wg sync.WaitGroup
	for _, w := range writers {
		wg.Go(func() { w.run(ctx) })
	}
	views := make([]view, historyReaders)
	for i := range views {
		s, seed := replica(), rng.Uint64()
		wg.Go(func() { views[i] = tail(ctx, s, h.id, rand.New(rand.NewPCG(seed, 1))) })
	}
	wg.Wait()

	c := h.check(t, cfg.Check, views)
	c.Faults = int(injected.Load())
	return c
}

// writer is one replica running the execution when it holds the lease.
type writer struct {
	h     *history
	name  string
	store LeaseStore
	rng   *rand.Rand
	fence eventstore.Fence // the lease it holds; NoFence when none
	last  uint64           // the last sequence it knows stored
	n     int              // append attempts, which make payloads unique
}

// create creates the execution leased to w, retrying failed calls: a repeated Create
// succeeds and returns the current lease.
func (w *writer) create(ctx context.Context) bool {
	rec := eventstore.Record{ID: w.h.id, CreatedAt: base}
	for ctx.Err() == nil {
		lease, err := w.store.Create(ctx, rec, w.name, historyLease)
		if err == nil {
			if lease.Owner == w.name && lease.Fence == eventstore.FirstFence {
				w.fence = lease.Fence
				w.h.noteAcquired(lease.Fence)
			}
			return true
		}
		time.Sleep(retryPause)
	}
	return false
}

func (w *writer) run(ctx context.Context) {
	for ctx.Err() == nil && !w.h.isEnded() {
		if w.fence == eventstore.NoFence {
			w.acquire(ctx)
			continue
		}
		switch r := w.rng.IntN(100); {
		case r < 3: // a pause past the lease (GC, a partition): the lease may be taken over
			time.Sleep(historyLease + time.Duration(w.rng.Int64N(int64(historyLease))))
		case r < 6:
			// A careful runtime stops writing before it releases: whatever the outcome,
			// the lease is no longer its to use.
			_ = w.store.ReleaseLease(ctx, w.h.id, w.fence)
			w.fence = eventstore.NoFence
		case r < 20:
			w.renew(ctx)
		default:
			w.appendNext(ctx)
		}
		time.Sleep(time.Duration(w.rng.IntN(500)) * time.Microsecond)
	}
}

func (w *writer) acquire(ctx context.Context) {
	lease, err := w.store.Acquire(ctx, w.h.id, w.name, historyLease)
	switch {
	case err == nil:
		w.h.noteAcquired(lease.Fence)
		w.h.count(func(c *HistoryCounts) { c.Takeovers++ })
		w.fence = lease.Fence
		// An adopter learns where the log ends before it writes.
		for ctx.Err() == nil {
			st, err := w.store.Get(ctx, w.h.id)
			if err == nil {
				w.last = st.LastSequence
				return
			}
			time.Sleep(retryPause)
		}
	case errors.Is(err, eventstore.ErrTerminated):
		w.h.end()
	default: // held by another, or failed: try again later
		time.Sleep(time.Duration(1+w.rng.IntN(10)) * time.Millisecond)
	}
}

func (w *writer) renew(ctx context.Context) {
	_, err := w.store.Renew(ctx, w.h.id, w.fence, historyLease)
	switch {
	case errors.Is(err, eventstore.ErrLeaseLost):
		w.h.count(func(c *HistoryCounts) { c.Fenced++ })
		w.fence = eventstore.NoFence
	case errors.Is(err, eventstore.ErrTerminated):
		w.h.end()
	}
}

// appendNext appends the next event, the terminal one at the history's target, until
// it knows the outcome.
func (w *writer) appendNext(ctx context.Context) {
	seq := w.last + 1
	p := payload{Writer: w.name, Fence: w.fence, N: w.n}
	typ := protocol.EventProgress
	if seq >= w.h.target {
		typ, p.FinishReason = protocol.EventCompleted, "stop"
	}
	w.n++
	data, err := json.Marshal(p)
	if err != nil {
		panic(err)
	}
	ev := protocol.Event{ExecutionID: w.h.id, Sequence: seq, Timestamp: base, Type: typ, Data: data}
	w.h.noteStarted(string(data))
	for ctx.Err() == nil {
		err := w.store.Append(ctx, w.fence, ev)
		switch {
		case err == nil:
			w.stored(ev, false)
			return
		case errors.Is(err, eventstore.ErrLeaseLost):
			w.h.count(func(c *HistoryCounts) { c.Fenced++ })
			w.fence = eventstore.NoFence
			return
		case errors.Is(err, eventstore.ErrTerminated):
			w.h.end()
			return
		case errors.Is(err, eventstore.ErrSequence):
			w.h.count(func(c *HistoryCounts) { c.Unrecognised++ })
			w.fence = eventstore.NoFence // it cannot tell where the log ends any more
			return
		}
		// The outcome is unknown: read the log back.
		at, ok := w.readBack(ctx, seq)
		switch {
		case !ok:
			return
		case at == nil: // not stored: append it again
		case string(at.Data) == string(ev.Data):
			w.stored(ev, true)
			return
		default: // another writer's: the lease is lost
			w.fence = eventstore.NoFence
			return
		}
		time.Sleep(retryPause)
	}
}

// readBack returns the event stored at seq, or nil if there is none yet; ok is false
// when ctx ended first.
func (w *writer) readBack(ctx context.Context, seq uint64) (at *protocol.Event, ok bool) {
	for ctx.Err() == nil {
		evs, err := w.store.Read(ctx, w.h.id, seq-1, 1)
		if err == nil {
			if len(evs) == 0 {
				return nil, true
			}
			return &evs[0], true
		}
		time.Sleep(retryPause)
	}
	return nil, false
}

// stored records that ev is known stored.
func (w *writer) stored(ev protocol.Event, readBack bool) {
	w.last = ev.Sequence
	w.h.mu.Lock()
	defer w.h.mu.Unlock()
	w.h.acked[ev.Sequence] = string(ev.Data)
	w.h.counts.Acknowledged++
	if readBack {
		w.h.counts.ReadBack++
	}
	if ev.Type.Terminal() {
		w.h.ended = true
	}
}

// view is what one reader saw: its starting cursor, the events in the order it saw
// them, and whether it reached the end.
type view struct {
	from     uint64
	events   []protocol.Event
	complete bool
}

// tail reads execution id from a random cursor to its terminal event, alternating Read
// (in random batch sizes) and Wait, and retrying failed calls.
func tail(ctx context.Context, s eventstore.Log, id string, rng *rand.Rand) view {
	v := view{from: uint64(rng.IntN(4))}
	after := v.from
	for ctx.Err() == nil {
		evs, err := s.Read(ctx, id, after, 1+rng.IntN(8))
		if err != nil {
			time.Sleep(retryPause)
			continue
		}
		for _, ev := range evs {
			v.events = append(v.events, ev)
			after = max(after, ev.Sequence)
			if ev.Type.Terminal() {
				v.complete = true
				return v
			}
		}
		if len(evs) > 0 {
			continue
		}
		switch err := s.Wait(ctx, id, after); {
		case errors.Is(err, eventstore.ErrTerminated):
			return v // terminal, yet its terminal event unseen: incomplete
		case err != nil:
			time.Sleep(retryPause)
		}
	}
	return v
}

func (h *history) noteAcquired(f eventstore.Fence) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.acquired[f] = time.Now()
}

func (h *history) noteStarted(data string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.started[data] = time.Now()
}

func (h *history) count(f func(*HistoryCounts)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	f(&h.counts)
}

func (h *history) end() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ended = true
}

func (h *history) isEnded() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.ended
}

// check compares the final log, read through s, with the acknowledgements and the
// readers' views.
func (h *history) check(t *testing.T, s eventstore.Log, views []view) HistoryCounts {
	c := h.counts
	c.Histories = 1
	// t.Context may have ended, and the check must still read.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(t.Context()), timeout)
	defer cancel()
	log, err := s.Read(ctx, h.id, 0, 0)
	if err != nil {
		t.Errorf("history %s: final Read: %v", h.id, err)
		c.Unfinished++
		return c
	}
	if len(log) == 0 || !log[len(log)-1].Type.Terminal() {
		c.Unfinished++
	}

	// The log itself: sequences 1, 2, 3, … and fences that never go back.
	stored := map[string]bool{}         // payloads
	lastN := map[eventstore.Fence]int{} // per fence (so per writer): its last attempt stored
	var fence eventstore.Fence
	for i, ev := range log {
		switch want := uint64(i) + 1; {
		case ev.Sequence < want:
			c.Reordered++
		case ev.Sequence > want:
			c.Gaps++
		}
		if stored[string(ev.Data)] {
			c.Duplicated++
		}
		stored[string(ev.Data)] = true
		var p payload
		if err := json.Unmarshal(ev.Data, &p); err != nil {
			t.Errorf("history %s: event %d: %v", h.id, ev.Sequence, err)
			continue
		}
		if p.Fence < fence || h.supersededBefore(p.Fence, h.started[string(ev.Data)]) {
			c.StaleStored++
		}
		fence = max(fence, p.Fence)
		// One writer under one fence appends in order (the fence is a writer's own).
		if n, ok := lastN[p.Fence]; ok && p.N < n {
			c.Reordered++
		}
		lastN[p.Fence] = p.N
	}
	for seq, data := range h.acked {
		if seq > uint64(len(log)) || string(log[seq-1].Data) != data {
			c.Lost++
		}
	}

	// Every reader saw a contiguous stretch of the log, in order, up to its end.
	for _, v := range views {
		c.Observed += len(v.events)
		if !v.complete {
			c.Unfinished++
		}
		prev := v.from
		read := map[uint64]bool{}
		for _, ev := range v.events {
			switch {
			case read[ev.Sequence]:
				c.Duplicated++
			case ev.Sequence <= prev:
				c.Reordered++
			case ev.Sequence > prev+1:
				c.Gaps++
			}
			read[ev.Sequence] = true
			if ev.Sequence == 0 || ev.Sequence > uint64(len(log)) || string(log[ev.Sequence-1].Data) != string(ev.Data) ||
				log[ev.Sequence-1].Type != ev.Type {
				c.DivergentReads++
			}
			prev = max(prev, ev.Sequence)
		}
	}
	return c
}

// supersededBefore reports whether a lease newer than fence f had been acquired
// before start, the time an append with f was called: such an append must be refused.
func (h *history) supersededBefore(f eventstore.Fence, start time.Time) bool {
	for g, at := range h.acquired {
		if g > f && at.Before(start) {
			return true
		}
	}
	return false
}

// faults injects failures into the calls writers and readers make, at rate, counting
// them in injected.
type faults struct {
	rate     float64
	injected *atomic.Int64
}

// errInjected is the failure faults injects.
var errInjected = errors.New("storetest: injected fault")

// call runs f unless a fault is injected before it, and fails it after it ran if one
// is injected after: the store acted, but its answer is lost.
func call[T any](fs faults, f func() (T, error)) (T, error) {
	var zero T
	if rand.Float64() >= fs.rate {
		return f()
	}
	fs.injected.Add(1)
	if rand.IntN(2) == 0 {
		return zero, errInjected
	}
	_, _ = f()
	return zero, errInjected
}

// faultyLog is a Log whose calls that histories make fail at times.
type faultyLog struct {
	eventstore.Log
	faults faults
}

func (s faultyLog) Create(ctx context.Context, rec eventstore.Record, owner string, ttl time.Duration) (eventstore.Lease, error) {
	return call(s.faults, func() (eventstore.Lease, error) { return s.Log.Create(ctx, rec, owner, ttl) })
}

func (s faultyLog) Append(ctx context.Context, fence eventstore.Fence, ev protocol.Event) error {
	_, err := call(s.faults, func() (struct{}, error) { return struct{}{}, s.Log.Append(ctx, fence, ev) })
	return err
}

func (s faultyLog) Get(ctx context.Context, id string) (eventstore.Status, error) {
	return call(s.faults, func() (eventstore.Status, error) { return s.Log.Get(ctx, id) })
}

func (s faultyLog) Read(ctx context.Context, id string, after uint64, limit int) ([]protocol.Event, error) {
	return call(s.faults, func() ([]protocol.Event, error) { return s.Log.Read(ctx, id, after, limit) })
}

// faultyLeases is Leases whose calls that histories make fail at times.
type faultyLeases struct {
	eventstore.Leases
	faults faults
}

func (s faultyLeases) Acquire(ctx context.Context, id, owner string, ttl time.Duration) (eventstore.Lease, error) {
	return call(s.faults, func() (eventstore.Lease, error) { return s.Leases.Acquire(ctx, id, owner, ttl) })
}

func (s faultyLeases) Renew(ctx context.Context, id string, fence eventstore.Fence, ttl time.Duration) (eventstore.Lease, error) {
	return call(s.faults, func() (eventstore.Lease, error) { return s.Leases.Renew(ctx, id, fence, ttl) })
}

func (s faultyLeases) ReleaseLease(ctx context.Context, id string, fence eventstore.Fence) error {
	_, err := call(s.faults, func() (struct{}, error) { return struct{}{}, s.Leases.ReleaseLease(ctx, id, fence) })
	return err
}
