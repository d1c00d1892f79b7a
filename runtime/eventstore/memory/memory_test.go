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

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) storetest.Harness {
		clk := storetest.NewClock(time.Date(2026, 12, 2, 13, 0, 0, 0, time.UTC))
		// No background sweep: the suite's Advance decides when expiry happens.
		s := memory.New(memory.WithClock(clk.Now), memory.WithSweepInterval(0))
		t.Cleanup(func() { s.Close() })
		return storetest.Harness{
			Store:     s,
			Retention: memory.DefaultRetention,
			Advance: func(d time.Duration) {
				clk.Advance(d)
				s.Sweep()
			},
		}
	})
}

// TestBackgroundSweep checks that expiry happens without anyone calling Sweep.
func TestBackgroundSweep(t *testing.T) {
	s := memory.New(memory.WithRetention(time.Millisecond), memory.WithSweepInterval(time.Millisecond))
	defer s.Close()
	ctx := t.Context()
	if err := s.Create(ctx, eventstore.Record{ID: "exe_1"}); err != nil {
		t.Fatal(err)
	}
	if err := s.Append(ctx, protocol.Event{ExecutionID: "exe_1", Sequence: 1, Type: protocol.EventFailed}); err != nil {
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

// completed returns the events of a typical completed text execution: 20 events
// carrying 1 KiB of output text in total.
func completed(id string) []protocol.Event {
	at := time.Date(2026, 12, 2, 13, 0, 0, 0, time.UTC)
	type payload struct {
		typ  protocol.EventType
		data any
	}
	payloads := []payload{
		{protocol.EventAccepted, protocol.AcceptedData{Ability: "chat", DeadlineAt: at.Add(time.Minute)}},
		{protocol.EventRouteSelected, protocol.RouteSelectedData{Attempt: 1, Deployment: "ai/gpt-4o-mini", Provider: "openai", Model: "gpt-4o-mini"}},
	}
	text := strings.Repeat("0123456789abcdef", 4) // 16 deltas of 64 bytes: 1 KiB
	for i := range 16 {
		payloads = append(payloads, payload{protocol.EventOutputDelta, protocol.OutputDeltaData{Index: i, Type: "text", Text: text}})
	}
	payloads = append(payloads,
		payload{protocol.EventUsageReported, protocol.UsageReportedData{Usage: []protocol.Usage{}}},
		payload{protocol.EventCompleted, protocol.CompletedData{FinishReason: "stop"}},
	)
	evs := make([]protocol.Event, len(payloads))
	for i, p := range payloads {
		data, err := json.Marshal(p.data)
		if err != nil {
			panic(err)
		}
		evs[i] = protocol.Event{
			ExecutionID: id,
			Sequence:    uint64(i) + 1,
			Timestamp:   at.Add(time.Duration(i) * time.Millisecond),
			Type:        p.typ,
			Data:        data,
		}
	}
	return evs
}

func BenchmarkAppend(b *testing.B) {
	ctx := context.Background()
	s := memory.New(memory.WithRetention(0), memory.WithSweepInterval(0))
	defer s.Close()
	const perExecution = 1000
	ev := completed("")[2] // an output.delta
	var id string
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		seq := uint64(i%perExecution) + 1
		if seq == 1 {
			// Executions end and are swept so that memory does not grow with b.N.
			if id != "" {
				b.StopTimer()
				ev := protocol.Event{ExecutionID: id, Sequence: perExecution + 1, Type: protocol.EventCompleted}
				if err := s.Append(ctx, ev); err != nil {
					b.Fatal(err)
				}
				s.Sweep()
				b.StartTimer()
			}
			id = fmt.Sprintf("exe_%d", i)
			if err := s.Create(ctx, eventstore.Record{ID: id}); err != nil {
				b.Fatal(err)
			}
		}
		ev.ExecutionID, ev.Sequence = id, seq
		if err := s.Append(ctx, ev); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkRead20(b *testing.B) {
	ctx := context.Background()
	s := memory.New(memory.WithSweepInterval(0))
	defer s.Close()
	if err := s.Create(ctx, eventstore.Record{ID: "exe_1"}); err != nil {
		b.Fatal(err)
	}
	for _, ev := range completed("exe_1") {
		if err := s.Append(ctx, ev); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		evs, err := s.Read(ctx, "exe_1", 0, 20)
		if err != nil || len(evs) != 20 {
			b.Fatalf("Read: %d events, %v", len(evs), err)
		}
	}
}

// BenchmarkRetainedExecution measures the heap held per completed execution kept for
// its retention period: what sizing a replica's memory depends on.
func BenchmarkRetainedExecution(b *testing.B) {
	const executions = 10_000
	ctx := context.Background()
	template := completed("")
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
			if err := s.Create(ctx, eventstore.Record{ID: id, Info: json.RawMessage(`{"ability":"chat"}`)}); err != nil {
				b.Fatal(err)
			}
			for _, ev := range template {
				ev.ExecutionID = id
				if err := s.Append(ctx, ev); err != nil {
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
