package storetest

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/switchboard-dev/switchboard/runtime/eventstore"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
)

// CompletedExecution returns the events of a typical completed text execution: 20 events
// carrying 1 KiB of output text in total. Implementations use it for their benchmarks
// (the same workload for every store, so figures compare).
func CompletedExecution(id string) []protocol.Event {
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

// BenchmarkAppend measures one Append of an output.delta. Every 1,000 events the
// execution ends (untimed) and expire is called, so the store does not grow with b.N;
// expire may be nil when the store expires terminal executions by itself.
func BenchmarkAppend(b *testing.B, s eventstore.Store, expire func()) {
	ctx := context.Background()
	const perExecution = 1000
	ev := CompletedExecution("")[2] // an output.delta
	var id string
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		seq := uint64(i%perExecution) + 1
		if seq == 1 {
			if id != "" {
				b.StopTimer()
				end := protocol.Event{ExecutionID: id, Sequence: perExecution + 1, Type: protocol.EventCompleted}
				if err := s.Append(ctx, end); err != nil {
					b.Fatal(err)
				}
				if expire != nil {
					expire()
				}
				b.StartTimer()
			}
			id = fmt.Sprintf("exe_bench_%d", i)
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

// BenchmarkRead20 measures reading a whole completed execution (20 events).
func BenchmarkRead20(b *testing.B, s eventstore.Store) {
	ctx := context.Background()
	const id = "exe_bench_read"
	if err := s.Create(ctx, eventstore.Record{ID: id}); err != nil {
		b.Fatal(err)
	}
	for _, ev := range CompletedExecution(id) {
		if err := s.Append(ctx, ev); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		evs, err := s.Read(ctx, id, 0, 20)
		if err != nil || len(evs) != 20 {
			b.Fatalf("Read: %d events, %v", len(evs), err)
		}
	}
}
