package memory_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/switchboard-dev/switchboard/runtime/eventstore"
	"github.com/switchboard-dev/switchboard/runtime/eventstore/memory"
	"github.com/switchboard-dev/switchboard/runtime/eventstore/storetest"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
)

// TestConformance runs the suite of every role, on a fresh store for each test.
func TestConformance(t *testing.T) {
	t.Run("Log", func(t *testing.T) {
		t.Parallel()
		storetest.Log(t, harness(func(s *memory.Store) eventstore.Log { return s }))
	})
	t.Run("Reservations", func(t *testing.T) {
		t.Parallel()
		storetest.Reservations(t, harness(func(s *memory.Store) storetest.ReservationStore {
			return storetest.ReservationStore{Log: s, Reservations: s}
		}))
	})
	t.Run("Cancels", func(t *testing.T) {
		t.Parallel()
		storetest.Cancels(t, harness(func(s *memory.Store) storetest.CancelStore {
			return storetest.CancelStore{Log: s, Cancels: s}
		}))
	})
	t.Run("Leases", func(t *testing.T) {
		t.Parallel()
		storetest.Leases(t, harness(func(s *memory.Store) storetest.LeaseStore {
			return storetest.LeaseStore{Log: s, Leases: s}
		}))
	})
	t.Run("Secrets", func(t *testing.T) {
		t.Parallel()
		storetest.Secrets(t, harness(func(s *memory.Store) eventstore.Secrets { return s }))
	})
	t.Run("Budgets", func(t *testing.T) {
		t.Parallel()
		storetest.Budgets(t, harness(func(s *memory.Store) storetest.BudgetStore {
			return storetest.BudgetStore{Budgets: s}
		}))
	})
}

// harness returns the factory of a suite's harnesses: a fresh store on a clock of its
// own, seen as the roles the suite tests (as).
func harness[S any](as func(*memory.Store) S) func(t *testing.T) storetest.Harness[S] {
	return func(t *testing.T) storetest.Harness[S] {
		clk := storetest.NewClock(time.Date(2026, 12, 2, 13, 0, 0, 0, time.UTC))
		// No background sweep: the suite's Advance decides when expiry happens.
		s := memory.New(memory.WithClock(clk.Now), memory.WithSweepInterval(0))
		t.Cleanup(func() { s.Close() })
		return storetest.Harness[S]{
			Store:     as(s),
			Close:     s.Close,
			Retention: memory.DefaultRetention,
			Advance: func(d time.Duration) {
				clk.Advance(d)
				s.Sweep()
			},
			Now: clk.Now,
		}
	}
}

// TestRefusalsRetainNothing checks that reservations released at once, as refused
// submissions release theirs, leave the heap as it was: before the release removed its
// expiry entry, each kept its key there for the reservation's ttl.
func TestRefusalsRetainNothing(t *testing.T) {
	s := memory.New(memory.WithSweepInterval(0))
	defer s.Close()
	storetest.CheckRefusals(t, storetest.RefusalConfig{
		Store: s,
		Retained: func() int64 {
			var m runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&m)
			return int64(m.HeapAlloc)
		},
		// The collector's own noise; the leak was about 300 bytes per cycle.
		MaxGrowth: 1 << 20,
	})
}

// TestBackgroundSweep checks that expiry happens without anyone calling Sweep.
func TestBackgroundSweep(t *testing.T) {
	s := memory.New(memory.WithRetention(time.Millisecond), memory.WithSweepInterval(time.Millisecond))
	defer s.Close()
	ctx := t.Context()
	if _, err := s.Create(ctx, eventstore.Record{ID: "exe_1"}, "", 0); err != nil {
		t.Fatal(err)
	}
	if err := s.Append(ctx, eventstore.NoFence, protocol.Event{ExecutionID: "exe_1", Sequence: 1, Type: protocol.EventFailed, Data: json.RawMessage(`{}`)}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := s.Get(ctx, "exe_1")
		if errors.Is(err, eventstore.ErrNotFound) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("Get long after retention: %v, want ErrNotFound", err)
		}
		time.Sleep(time.Millisecond)
	}
}

// The terminal event of a large execution does not copy its payloads or its output
// to pack them, which would make the heap hold all of them twice for a moment, whether
// they were recorded in large events or in many small ones.
func TestTerminalEventOfLargeExecution(t *testing.T) {
	const output = 8 << 20
	for _, size := range []int{64 << 10, 1 << 10} {
		t.Run(fmt.Sprintf("deltas of %d bytes", size), func(t *testing.T) {
			s := memory.New(memory.WithSweepInterval(0))
			defer s.Close()
			ctx := t.Context()
			const id = "exe_large"
			if _, err := s.Create(ctx, eventstore.Record{ID: id}, "", 0); err != nil {
				t.Fatal(err)
			}
			delta := json.RawMessage(`{"index":0,"text":"` + strings.Repeat("x", size) + `"}`)
			seq := uint64(0)
			for range output / size {
				seq++
				if err := s.Append(ctx, eventstore.NoFence, protocol.Event{ExecutionID: id, Sequence: seq, Type: protocol.EventOutputDelta, Data: delta}); err != nil {
					t.Fatal(err)
				}
			}
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			end := protocol.Event{ExecutionID: id, Sequence: seq + 1, Type: protocol.EventCompleted, Data: json.RawMessage(`{}`)}
			if err := s.Append(ctx, eventstore.NoFence, end); err != nil {
				t.Fatal(err)
			}
			runtime.ReadMemStats(&after)
			// What it may allocate is the trimmed event slice: 64 bytes an event.
			if allocated := after.TotalAlloc - before.TotalAlloc; allocated > output/4 {
				t.Errorf("the terminal event allocated %.1f MiB after %d MiB of output, want at most %d MiB",
					float64(allocated)/(1<<20), output>>20, output/4>>20)
			}
			snap, err := s.Snapshot(ctx, id)
			if err != nil || len(snap.Output) != 1 || len(snap.Output[0].Text) != output || snap.Status != protocol.StatusCompleted {
				t.Errorf("snapshot after the terminal event: %d parts, %v; want the whole output, completed", len(snap.Output), err)
			}
		})
	}
}

func BenchmarkAppend(b *testing.B) {
	s := memory.New(memory.WithRetention(0), memory.WithSweepInterval(0))
	defer s.Close()
	storetest.BenchmarkAppend(b, s, s.Sweep)
}

func BenchmarkRead20(b *testing.B) {
	s := memory.New(memory.WithSweepInterval(0))
	defer s.Close()
	storetest.BenchmarkRead20(b, s)
}

// BenchmarkRetainedExecution measures the heap held per completed execution kept for
// its retention period: what sizing a replica's memory depends on.
func BenchmarkRetainedExecution(b *testing.B) {
	const executions = 10_000
	ctx := context.Background()
	template := storetest.CompletedExecution("")
	ids := make([]string, executions)
	for i := range ids {
		ids[i] = fmt.Sprintf("exe_%032d", i) // as long as real ids
	}
	var perExecution float64
	for b.Loop() {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		s := memory.New(memory.WithSweepInterval(0))
		for _, id := range ids {
			if _, err := s.Create(ctx, eventstore.Record{ID: id, Info: json.RawMessage(`{"ability":"chat"}`)}, "", 0); err != nil {
				b.Fatal(err)
			}
			for _, ev := range template {
				ev.ExecutionID = id
				if err := s.Append(ctx, eventstore.NoFence, ev); err != nil {
					b.Fatal(err)
				}
			}
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		perExecution = float64(after.HeapAlloc-before.HeapAlloc) / executions
		runtime.KeepAlive(s)
		s.Close()
	}
	b.ReportMetric(perExecution, "B/execution")
}

// BenchmarkRetainedReservation measures the heap held per idempotency reservation at
// the longest key (255 characters, in the scope of a service account), holding what the
// engine's reservations hold (the execution's id and creation time, also as JSON): what
// --max-reservations-per-principal bounds per caller. As in a submission, every string
// is the reservation's own.
func BenchmarkRetainedReservation(b *testing.B) {
	const reservations = 10_000
	ctx := context.Background()
	principal := "system:serviceaccount:team-a:batch-runner"
	var perReservation float64
	for b.Loop() {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		s := memory.New(memory.WithSweepInterval(0))
		for i := range reservations {
			scope := "principal:" + principal
			id := fmt.Sprintf("exe_%036d", i)
			created := time.Now().UTC().Truncate(time.Microsecond)
			r := eventstore.Reservation{
				Scope:       scope,
				Fingerprint: fmt.Sprintf("%064x", i),
				ExecutionID: id,
				Response:    json.RawMessage(`{"id":"` + id + `","created_at":"` + created.Format(time.RFC3339Nano) + `"}`),
				CreatedAt:   created,
			}
			if _, _, err := s.Reserve(ctx, fmt.Sprintf("%s %0255d", scope, i), r, 24*time.Hour, 0); err != nil {
				b.Fatal(err)
			}
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		perReservation = float64(after.HeapAlloc-before.HeapAlloc) / reservations
		runtime.KeepAlive(s)
		s.Close()
	}
	b.ReportMetric(perReservation, "B/reservation")
}

func BenchmarkStatusAndResult(b *testing.B) {
	s := memory.New(memory.WithSweepInterval(0))
	defer s.Close()
	storetest.BenchmarkStatusAndResult(b, s)
}

func BenchmarkRenew(b *testing.B) {
	s := memory.New(memory.WithSweepInterval(0))
	defer s.Close()
	storetest.BenchmarkRenew(b, storetest.LeaseStore{Log: s, Leases: s})
}

func BenchmarkOrphans(b *testing.B) {
	s := memory.New(memory.WithSweepInterval(0))
	defer s.Close()
	storetest.BenchmarkOrphans(b, storetest.LeaseStore{Log: s, Leases: s})
}

// TestHistories runs the history check on one store shared by every replica, with
// injected faults: half of them after the store acted, as lost replies.
func TestHistories(t *testing.T) {
	s := memory.New()
	defer s.Close()
	histories := 300
	if testing.Short() {
		histories = 50
	}
	storetest.CheckHistories(t, storetest.HistoryConfig{
		Histories: histories,
		Replicas:  []storetest.LeaseStore{{Log: s, Leases: s}},
		Check:     s,
		FaultRate: 0.05,
	})
}
