package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/switchboard-dev/switchboard/runtime/engine"
	"github.com/switchboard-dev/switchboard/runtime/eventstore"
	"github.com/switchboard-dev/switchboard/runtime/eventstore/memory"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
	"github.com/switchboard-dev/switchboard/runtime/routing"
)

// testLease is short, so that orphans are found within a fraction of a second.
// It is still several times the longest a busy test machine (two cores, -race) may
// leave a renewal waiting.
const testLease = 400 * time.Millisecond

const orphanMessage = "the runtime replica running this execution stopped"

// partitioned cuts the engine of a harness off from the store, as a replica that died
// or lost its network: its writes, renewals and cancel watches fail, while the store
// itself (and every other engine on it) carries on.
type partition struct {
	engine.Store
	cut atomic.Bool
}

var errPartitioned = errors.New("injected partition: the store is unreachable")

func (p *partition) Append(ctx context.Context, fence eventstore.Fence, ev protocol.Event) error {
	if p.cut.Load() {
		return errPartitioned
	}
	return p.Store.Append(ctx, fence, ev)
}

func (p *partition) Renew(ctx context.Context, id string, fence eventstore.Fence, ttl time.Duration) (eventstore.Lease, error) {
	if p.cut.Load() {
		return eventstore.Lease{}, errPartitioned
	}
	return p.Store.Renew(ctx, id, fence, ttl)
}

func (p *partition) WaitCancel(ctx context.Context, id string) error {
	err := p.Store.WaitCancel(ctx, id)
	if p.cut.Load() {
		<-ctx.Done() // a cut-off replica never hears of a cancel
		return ctx.Err()
	}
	return err
}

func (p *partition) Get(ctx context.Context, id string) (eventstore.Status, error) {
	if p.cut.Load() {
		return eventstore.Status{}, errPartitioned
	}
	return p.Store.Get(ctx, id)
}

func (p *partition) Orphans(ctx context.Context, limit int) ([]string, error) {
	if p.cut.Load() {
		return nil, errPartitioned
	}
	return p.Store.Orphans(ctx, limit)
}

// remoteAdapter is a fake adapter of a provider whose work continues remotely: Execute
// starts a job, records its handle and waits for the job to finish; Resume follows the
// job from a handle. A job finishes when finish is closed; cancelling one is recorded.
type remoteAdapter struct {
	finish chan struct{}

	mu        sync.Mutex
	resumed   []json.RawMessage
	attempts  []int
	cancelled int
	detached  int
}

func newRemoteAdapter() *remoteAdapter { return &remoteAdapter{finish: make(chan struct{})} }

var _ engine.Resumer = (*remoteAdapter)(nil)

func (r *remoteAdapter) Execute(ctx context.Context, a engine.Attempt, em engine.Emitter) (engine.Outcome, error) {
	if err := em.Progress(protocol.ProgressData{Stage: protocol.StageRunning, Message: "started"}); err != nil {
		return engine.Outcome{}, err
	}
	if err := em.RemoteJob(json.RawMessage(`{"job":"j-1"}`)); err != nil {
		return engine.Outcome{}, err
	}
	return r.follow(ctx, em)
}

func (r *remoteAdapter) Resume(ctx context.Context, a engine.Attempt, handle json.RawMessage, em engine.Emitter) (engine.Outcome, error) {
	r.mu.Lock()
	r.resumed = append(r.resumed, handle)
	r.attempts = append(r.attempts, a.Number)
	r.mu.Unlock()
	return r.follow(ctx, em)
}

func (r *remoteAdapter) follow(ctx context.Context, em engine.Emitter) (engine.Outcome, error) {
	select {
	case <-r.finish:
		err := em.Result(protocol.OutputResultData{Result: json.RawMessage(`"done"`)})
		return engine.Outcome{FinishReason: "succeeded"}, err
	case <-ctx.Done():
		r.mu.Lock()
		defer r.mu.Unlock()
		if engine.Detached(ctx) {
			r.detached++ // the job is someone else's now: leave it running
		} else {
			r.cancelled++
		}
		return engine.Outcome{}, protocol.NewError(protocol.CodeProviderUnavailable, "job stopped")
	}
}

func (r *remoteAdapter) counts() (resumed, cancelled, detached int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.resumed), r.cancelled, r.detached
}

// replicas is several engines on one memory store, each with its own partition switch.
type replicas struct {
	t       *testing.T
	store   engine.Store
	table   *routing.Holder
	engines []*engine.Engine
	parts   []*partition
}

func newReplicas(t *testing.T, n int, providers map[string]engine.Provider, opts ...func(*engine.Config)) *replicas {
	t.Helper()
	store := memory.New()
	t.Cleanup(func() { _ = store.Close() })
	table := new(routing.Holder)
	table.Store(routing.NewTable([]routing.Deployment{deployment("a")}))
	r := &replicas{t: t, store: store, table: table}
	for i := range n {
		p := &partition{Store: store}
		cfg := engine.Config{
			Store:        p,
			Table:        table,
			Providers:    providers,
			CleanupGrace: 100 * time.Millisecond,
			Replica:      string(rune('a' + i)),
			Lease:        testLease,
		}
		for _, o := range opts {
			o(&cfg)
		}
		e := engine.New(cfg)
		t.Cleanup(func() { _ = e.Close() })
		r.engines = append(r.engines, e)
		r.parts = append(r.parts, p)
	}
	return r
}

func remoteProvider(a *remoteAdapter) map[string]engine.Provider {
	return map[string]engine.Provider{"fake": {New: func(*routing.Deployment) (engine.Adapter, error) { return a, nil }}}
}

func scriptProvider(s *script) map[string]engine.Provider {
	return map[string]engine.Provider{"fake": {New: func(*routing.Deployment) (engine.Adapter, error) { return s, nil }}}
}

// submit submits req on the first replica.
func (r *replicas) submit(req *protocol.Request) string {
	r.t.Helper()
	acc, _, err := r.engines[0].Submit(r.t.Context(), engine.Principal{}, req, engine.Idempotency{})
	if err != nil {
		r.t.Fatalf("Submit: %v", err)
	}
	return acc.ID
}

// running waits until execution id has recorded its first attempt's first event.
func (r *replicas) running(id string) {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(r.t.Context(), waitTimeout)
	defer cancel()
	if err := r.store.Wait(ctx, id, 2); err != nil {
		r.t.Fatalf("waiting for %s to run: %v", id, err)
	}
}

// finish waits for the terminal event of id and returns every event, checked.
func (r *replicas) finish(id string) []protocol.Event {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(r.t.Context(), waitTimeout)
	defer cancel()
	for {
		evs, err := r.store.Read(ctx, id, 0, 0)
		if err != nil {
			r.t.Fatal(err)
		}
		if len(evs) > 0 && evs[len(evs)-1].Type.Terminal() {
			checkEvents(r.t, id, evs)
			return evs
		}
		if err := r.store.Wait(ctx, id, uint64(len(evs))); err != nil {
			r.t.Fatalf("waiting for the end of %s: %v", id, err)
		}
	}
}

// The running replica renews its lease: an execution that outlives the lease many
// times over is never taken for an orphan.
func TestLeaseRenewedWhileRunning(t *testing.T) {
	blocked, release := block(t)
	s := newScript(delta("a"), blocked, delta("b"))
	r := newReplicas(t, 2, scriptProvider(s))
	id := r.submit(request())
	r.running(id)
	first, err := r.store.Get(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * testLease)
	st, err := r.store.Get(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	if st.Lease.Owner != "a" || st.Lease.Fence != eventstore.FirstFence || !st.Lease.Expires.After(first.Lease.Expires) {
		t.Errorf("lease %+v after %+v: want a's first lease, renewed", st.Lease, first.Lease)
	}
	release()
	evs := r.finish(id)
	if diff := cmp.Diff([]protocol.EventType{evAccepted, evSelected, evDelta, evDelta, evCompleted}, types(evs)); diff != "" {
		t.Errorf("event types (-want +got):\n%s", diff)
	}
}

// A replica that stops renewing (dead, partitioned) loses its executions to a peer,
// which ends each exactly once, by the rules of spec/events.md, "Ownership and orphans".
func TestOrphansEndedByPeer(t *testing.T) {
	for _, tt := range []struct {
		name    string
		req     *protocol.Request
		cancel  bool
		code    protocol.Code
		message string
	}{
		{"stream died", request(), false, protocol.CodeInternal, orphanMessage},
		{"cancel requested", request(), true, protocol.CodeCancelled, ""},
		{"deadline passed", request(withDeadline(testLease.Milliseconds())), false, protocol.CodeDeadlineExceeded, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := newScript(delta("partial"), hang())
			r := newReplicas(t, 2, scriptProvider(s))
			id := r.submit(tt.req)
			r.running(id)
			r.parts[0].cut.Store(true)
			if tt.cancel {
				if _, err := r.engines[1].Cancel(t.Context(), id); err != nil {
					t.Fatal(err)
				}
			}
			evs := r.finish(id)
			e := terminalError(t, evs)
			if e.Code != tt.code || e.Retryable || (tt.message != "" && e.Message != tt.message) {
				t.Errorf("terminal error %+v, want %s, not retryable %q", e, tt.code, tt.message)
			}
			st, err := r.store.Get(t.Context(), id)
			if err != nil || st.Lease.Owner != "b" || st.Lease.Fence != 2 {
				t.Errorf("lease %+v, %v: want b's, the second", st.Lease, err)
			}
			// The partition heals: the first replica's writes are refused, and it
			// stops without a second terminal event.
			r.parts[0].cut.Store(false)
			time.Sleep(3 * testLease)
			after, err := r.store.Read(t.Context(), id, 0, 0)
			if err != nil || len(after) != len(evs) {
				t.Errorf("%d events after the partition healed (%v), want %d", len(after), err, len(evs))
			}
		})
	}
}

// An orphan whose last attempt recorded a remote job is adopted: the peer resumes the
// attempt from the handle and the execution completes. The replica that lost it leaves
// the job alone.
func TestOrphanRemoteJobAdopted(t *testing.T) {
	a := newRemoteAdapter()
	r := newReplicas(t, 2, remoteProvider(a))
	id := r.submit(request())
	r.running(id) // accepted, route.selected, progress
	waitRemote(t, r.store, id)
	r.parts[0].cut.Store(true)
	waitUntil(t, func() bool { n, _, _ := a.counts(); return n == 1 })
	r.parts[0].cut.Store(false)
	close(a.finish)

	evs := r.finish(id)
	want := []protocol.EventType{evAccepted, evSelected, protocol.EventProgress, protocol.EventOutputResult, evCompleted}
	if diff := cmp.Diff(want, types(evs)); diff != "" {
		t.Errorf("event types (-want +got):\n%s", diff)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if string(a.resumed[0]) != `{"job":"j-1"}` || a.attempts[0] != 1 || a.cancelled != 0 {
		t.Errorf("resumed %s as attempt %d, %d cancels; want the recorded handle, attempt 1, none", a.resumed[0], a.attempts[0], a.cancelled)
	}
}

// A cancel requested before the takeover is carried out by the adopter: it resumes the
// job only to cancel it remotely, and the execution ends cancelled.
func TestAdoptedJobCancelled(t *testing.T) {
	a := newRemoteAdapter()
	r := newReplicas(t, 2, remoteProvider(a))
	id := r.submit(request())
	waitRemote(t, r.store, id)
	r.parts[0].cut.Store(true)
	if err := r.store.RequestCancel(t.Context(), id); err != nil {
		t.Fatal(err)
	}
	evs := r.finish(id)
	if e := terminalError(t, evs); e.Code != protocol.CodeCancelled {
		t.Errorf("terminal error %+v, want cancelled", e)
	}
	if resumed, cancelled, _ := a.counts(); resumed != 1 || cancelled != 1 {
		t.Errorf("resumed %d, cancelled %d remotely; want the adopter to cancel the job once", resumed, cancelled)
	}
}

// Shutdown lets running executions finish within its grace, refusing new ones.
func TestShutdownDrains(t *testing.T) {
	blocked, release := block(t)
	s := newScript(delta("a"), blocked)
	r := newReplicas(t, 1, scriptProvider(s))
	id := r.submit(request())
	r.running(id)
	done := make(chan error, 1)
	go func() { done <- r.engines[0].Shutdown(context.Background()) }()
	waitUntil(t, func() bool {
		_, _, err := r.engines[0].Submit(t.Context(), engine.Principal{}, request(), engine.Idempotency{})
		var pe *protocol.Error
		return errors.As(err, &pe) && pe.Code == protocol.CodeProviderUnavailable && pe.Retryable
	})
	release()
	if err := <-done; err != nil {
		t.Errorf("Shutdown: %v, want every execution finished in time", err)
	}
	if evs := r.finish(id); evs[len(evs)-1].Type != evCompleted {
		t.Errorf("events %v, want the execution completed", types(evs))
	}
}

// With HandOver, what still runs when the grace ends is handed over: the adapter stops
// without cancelling its remote job, the lease is released at once (no wait for its
// expiry) and a peer adopts the job.
func TestShutdownHandsOver(t *testing.T) {
	a := newRemoteAdapter()
	r := newReplicas(t, 2, remoteProvider(a), func(c *engine.Config) { c.HandOver = true; c.Lease = time.Hour })
	id := r.submit(request())
	waitRemote(t, r.store, id)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel()
	if err := r.engines[0].Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Shutdown: %v, want the grace's end", err)
	}
	if _, cancelled, detached := a.counts(); cancelled != 0 || detached != 1 {
		t.Fatalf("%d remote cancels, %d detached stops; want the job left running", cancelled, detached)
	}
	if n := r.engines[1].Sweep(t.Context()); n != 1 {
		t.Fatalf("peer took over %d executions, want the released one", n)
	}
	close(a.finish)
	evs := r.finish(id)
	if evs[len(evs)-1].Type != evCompleted {
		t.Errorf("events %v, want the adopted execution completed", types(evs))
	}
}

// A replica that stopped between creating an execution and recording execution.accepted
// leaves a record without events; the sweeper gives it a complete log.
func TestOrphanWithoutEvents(t *testing.T) {
	r := newReplicas(t, 1, scriptProvider(newScript()))
	id := engine.NewExecutionID()
	info := []byte(`{"ability":"chat","deadline_at":"2099-01-01T00:00:00Z","created_at":"2026-01-01T00:00:00Z"}`)
	if _, err := r.store.Create(t.Context(), eventstore.Record{ID: id, CreatedAt: time.Now().UTC(), Info: info}, "dead", time.Millisecond); err != nil {
		t.Fatal(err)
	}
	evs := r.finish(id)
	if diff := cmp.Diff([]protocol.EventType{evAccepted, protocol.EventFailed}, types(evs)); diff != "" {
		t.Errorf("event types (-want +got):\n%s", diff)
	}
}

// Several replicas racing to recover the same orphans end each exactly once.
func TestRacingSweepers(t *testing.T) {
	const orphans = 100
	r := newReplicas(t, 3, scriptProvider(newScript()), func(c *engine.Config) { c.Lease = time.Hour })
	ids := make([]string, orphans)
	for i := range ids {
		ids[i] = engine.NewExecutionID()
		if _, err := r.store.Create(t.Context(), eventstore.Record{ID: ids[i], CreatedAt: time.Now().UTC()}, "dead", time.Millisecond); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(5 * time.Millisecond)
	var taken atomic.Int64
	var wg sync.WaitGroup
	for _, e := range r.engines {
		wg.Go(func() { taken.Add(int64(e.Sweep(t.Context()))) })
	}
	wg.Wait()
	if taken.Load() != orphans {
		t.Errorf("%d takeovers, want %d", taken.Load(), orphans)
	}
	for _, id := range ids {
		evs := r.finish(id)
		if n := len(evs); n != 2 {
			t.Errorf("%s: %v, want accepted and one terminal event", id, types(evs))
		}
	}
}

// waitRemote waits until execution id has a remote job recorded.
func waitRemote(t *testing.T, s eventstore.Reader, id string) {
	t.Helper()
	waitUntil(t, func() bool {
		st, err := s.Get(t.Context(), id)
		return err == nil && len(st.Remote) > 0
	})
}

// waitUntil polls cond until it holds, failing the test after waitTimeout.
func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
