package memory

import (
	"testing"
	"time"

	"github.com/switchboard-dev/switchboard/runtime/eventstore"
)

// TestReservationQueueHoldsOnlyStored checks that the queue holds exactly the stored
// reservations: a reservation replaced after its expiry, before any sweep, and one
// released leave no entry behind.
func TestReservationQueueHoldsOnlyStored(t *testing.T) {
	now := time.Date(2026, 12, 2, 13, 0, 0, 0, time.UTC)
	s := New(WithClock(func() time.Time { return now }), WithSweepInterval(0))
	defer s.Close()
	ctx := t.Context()
	check := func(when string, want int) {
		t.Helper()
		s.resMu.Lock()
		defer s.resMu.Unlock()
		queued := 0
		for _, q := range s.resScopes {
			queued += q.Len()
		}
		if len(s.reservations) != want || queued != want {
			t.Errorf("%s: %d reservations and %d queued, want %d and %d",
				when, len(s.reservations), queued, want, want)
		}
		if want == 0 && len(s.resScopes) != 0 {
			t.Errorf("%s: %d scopes left without reservations", when, len(s.resScopes))
		}
	}
	for _, id := range []string{"exe_first", "exe_second"} {
		if _, reserved, err := s.Reserve(ctx, "k", eventstore.Reservation{ExecutionID: id}, time.Minute, 0); err != nil || !reserved {
			t.Fatalf("Reserve for %s: reserved %v, %v", id, reserved, err)
		}
		check("after Reserve for "+id, 1)
		now = now.Add(2 * time.Minute) // expired, not swept
	}
	if _, reserved, err := s.Reserve(ctx, "k2", eventstore.Reservation{ExecutionID: "exe_third"}, time.Hour, 0); err != nil || !reserved {
		t.Fatalf("Reserve k2: reserved %v, %v", reserved, err)
	}
	s.Sweep()
	check("after the sweep", 1)
	if err := s.Release(ctx, "k2", "exe_third"); err != nil {
		t.Fatal(err)
	}
	check("after Release", 0)
}
