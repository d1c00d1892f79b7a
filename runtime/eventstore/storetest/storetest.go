// Package storetest is the conformance suite of the roles of an EventStore
// (spec/events.md, "EventStore"): every implementation runs it from its own tests, so all
// of them provide the same guarantees, including a result snapshot and status that
// always equal a fold of the stored events (protocol.Materialize).
//
// There is one entry point per role of package eventstore — Log, Reservations, Cancels,
// Leases, Secrets and Budgets — so that a new store can be written and tested role by
// role. Each takes a factory for fresh harnesses of the store seen as the roles its
// tests use: the Log suite a Log; the Reservations, Cancels and Leases suites their role
// beside the Log that creates and reads the executions they work on (ReservationStore,
// CancelStore, LeaseStore); the Secrets suite Secrets; the Budgets suite a BudgetStore,
// which needs no Log. An implementation's test runs each suite:
//
//	func TestConformance(t *testing.T) {
//		storetest.Leases(t, func(t *testing.T) storetest.Harness[storetest.LeaseStore] {
//			clk := storetest.NewClock(time.Now())
//			s := memory.New(memory.WithClock(clk.Now), memory.WithSweepInterval(0))
//			t.Cleanup(func() { s.Close() })
//			return storetest.Harness[storetest.LeaseStore]{
//				Store:     storetest.LeaseStore{Log: s, Leases: s},
//				Close:     s.Close,
//				Retention: memory.DefaultRetention,
//				Advance:   func(d time.Duration) { clk.Advance(d); s.Sweep() },
//				Now:       clk.Now,
//			}
//		})
//		// … and storetest.Log, Reservations, Cancels, Secrets and Budgets alike.
//	}
//
// A store whose expiry runs on real time (Redis key TTLs) is created with a short
// retention, say 500ms, and advances with time.Sleep; its Peer is a second client of
// the same server.
//
// CheckHistories is the randomized complement of the Log and Leases suites: concurrent
// writers that take leases from each other and readers, on handles whose calls fail,
// and a check that nothing acknowledged was lost, duplicated or reordered and that no
// stale writer's event was stored. CheckRefusals checks that released reservations
// cost nothing. Implementations run both from their tests too, and BenchmarkRenew,
// BenchmarkOrphans and the other benchmarks from their benchmarks.
package storetest

import (
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/switchboard-dev/switchboard/runtime/eventstore"
)

// Harness is one store under test, seen as S, the roles a suite tests it as, and the
// means to move its time.
type Harness[S any] struct {
	// Store is the store under test, a handle of this subtest's own: the suite may
	// close it. The data behind it must be this subtest's own too (a store, a Redis key
	// prefix): the lease tests compare the whole list of orphans. The factory closes it
	// with t.Cleanup, so Close must be idempotent.
	Store S
	// Peer is a second handle on the same data, as another replica would open it (for
	// Redis, another client of the same server). The suite cancels and tails through
	// it to prove that state is shared. The zero value means Store.
	Peer S
	// Close closes Store's handle, as the store's own Close does: the suites check that
	// blocked calls and later ones return eventstore.ErrClosed. The Secrets suite does
	// not use it.
	Close func() error
	// Retention is how long Store keeps terminal executions. The suite also uses it as
	// the ttl of its idempotency reservations and secrets.
	Retention time.Duration
	// Advance moves the store's time forward by d and performs whatever expiry is due
	// by then: advance an injected clock and sweep, or sleep for a store on real time.
	// The suite checks presence Retention/2 after an expiry was set and absence
	// Retention later, so a real-time store has Retention/2 of slack either way. The
	// lease tests advance by a few hundred milliseconds past a lease's expiry.
	Advance func(d time.Duration)
	// Now reads the store's clock, which leases expire on; nil means time.Now. The
	// suite checks lease expiries against it, allowing for a store on another
	// machine's clock.
	Now func() time.Time
}

// The roles the suites of Reservations, Cancels and Leases test a store as: theirs,
// and the Log that creates the executions they work on and reads back what they did.
// A factory sets both fields to the same store.

// ReservationStore is a store as the Reservations suite tests it: Create marks the
// reservation an execution was created for.
type ReservationStore struct {
	eventstore.Log
	eventstore.Reservations
}

// CancelStore is a store as the Cancels suite tests it.
type CancelStore struct {
	eventstore.Log
	eventstore.Cancels
}

// LeaseStore is a store as the Leases suite tests it, and CheckHistories and the lease
// benchmarks use it: Create leases an execution and Append is fenced.
type LeaseStore struct {
	eventstore.Log
	eventstore.Leases
}

// test is one test of a suite.
type test[S any] struct {
	name string
	run  func(t *testing.T, h Harness[S])
}

// run runs tests in parallel, each on a harness of its own from newHarness (see Log).
func run[S any](t *testing.T, tests []test[S], newHarness func(t *testing.T) Harness[S]) {
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t)
			if reflect.ValueOf(&h.Peer).Elem().IsZero() {
				h.Peer = h.Store
			}
			if h.Now == nil {
				h.Now = time.Now
			}
			tc.run(t, h)
		})
	}
}

// Clock is a manual clock for stores that take one (for example memory.WithClock), so
// that the suite can move time without sleeping. It is safe for concurrent use.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// NewClock returns a Clock reading start.
func NewClock(start time.Time) *Clock {
	return &Clock{now: start}
}

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}
