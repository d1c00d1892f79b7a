// Package storetest is the conformance suite of eventstore.Store (spec/events.md,
// "EventStore"): every implementation runs it from its own tests, so all of them provide
// the same guarantees, including a result snapshot and status that always equal a fold
// of the stored events (protocol.Materialize).
//
// An implementation's test supplies a factory for fresh harnesses:
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) storetest.Harness {
//			clk := storetest.NewClock(time.Now())
//			s := memory.New(memory.WithClock(clk.Now), memory.WithSweepInterval(0))
//			t.Cleanup(func() { s.Close() })
//			return storetest.Harness{
//				Store:     s,
//				Retention: memory.DefaultRetention,
//				Advance:   func(d time.Duration) { clk.Advance(d); s.Sweep() },
//				Now:       clk.Now,
//			}
//		})
//	}
//
// A store whose expiry runs on real time (Redis key TTLs) is created with a short
// retention, say 500ms, and advances with time.Sleep; its Peer is a second client of
// the same server.
//
// CheckHistories is the randomized complement of Run: concurrent writers that take
// leases from each other and readers, on handles whose calls fail, and a check that
// nothing acknowledged was lost, duplicated or reordered and that no stale writer's
// event was stored. Implementations run it from their tests too, and BenchmarkRenew,
// BenchmarkOrphans and the other benchmarks from their benchmarks.
package storetest

import (
	"sync"
	"testing"
	"time"

	"github.com/switchboard-dev/switchboard/runtime/eventstore"
)

// Harness is one store under test and the means to move its time.
type Harness struct {
	// Store is the store under test, a handle of this subtest's own: the suite may
	// close it. The data behind it must be this subtest's own too (a store, a Redis key
	// prefix): the lease tests compare the whole list of orphans. The factory closes it
	// with t.Cleanup, so Close must be idempotent.
	Store eventstore.Store
	// Peer is a second handle on the same data, as another replica would open it (for
	// Redis, another client of the same server). The suite cancels and tails through
	// it to prove that state is shared. Nil means Store.
	Peer eventstore.Store
	// Retention is how long Store keeps terminal executions. The suite also uses it as
	// the ttl of its idempotency reservations.
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

// Run runs the conformance suite against the stores newHarness returns. Each subtest
// calls newHarness once, and subtests run in parallel, so newHarness must be safe for
// concurrent use and must give each call its own time (its own clock) unless Advance
// only sleeps.
func Run(t *testing.T, newHarness func(t *testing.T) Harness) {
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t)
			if h.Peer == nil {
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
