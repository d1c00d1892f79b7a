package storetest

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchboard-dev/switchboard/runtime/eventstore"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
)

// CompletedExecution returns the events of a typical completed text execution: 20 events
// carrying 1 KiB of output text in total. Implementations use it for their benchmarks
// (the same workload for every store, so figures compare).
func CompletedExecution(id string) []protocol.Event {
	text := strings.Repeat("0123456789abcdef", 4) // 16 deltas of 64 bytes: 1 KiB
	deltas := make([]protocol.OutputDeltaData, 16)
	for i := range deltas {
		deltas[i] = protocol.OutputDeltaData{Index: i, Type: "text", Text: text}
	}
	return textExecution(id, deltas, []protocol.Usage{}, time.Millisecond)
}

// textExecution returns the events of a completed text execution: execution.accepted,
// route.selected, the deltas, usage.reported with usage and execution.completed, step
// apart.
func textExecution(id string, deltas []protocol.OutputDeltaData, usage []protocol.Usage, step time.Duration) []protocol.Event {
	at := time.Date(2026, 12, 2, 13, 0, 0, 0, time.UTC)
	type payload struct {
		typ  protocol.EventType
		data any
	}
	payloads := []payload{
		{protocol.EventAccepted, protocol.AcceptedData{Ability: "chat", DeadlineAt: at.Add(time.Minute)}},
		{protocol.EventRouteSelected, protocol.RouteSelectedData{Attempt: 1, Deployment: "ai/gpt-4o-mini", Provider: "openai", Model: "gpt-4o-mini"}},
	}
	for _, d := range deltas {
		payloads = append(payloads, payload{protocol.EventOutputDelta, d})
	}
	payloads = append(payloads,
		payload{protocol.EventUsageReported, protocol.UsageReportedData{Usage: usage}},
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
			Timestamp:   at.Add(time.Duration(i) * step),
			Type:        p.typ,
			Data:        data,
		}
	}
	return evs
}

// BenchmarkAppend measures one Append of an output.delta. Every 1,000 events the
// execution ends (untimed) and expire is called, so the store does not grow with b.N;
// expire may be nil when the store expires terminal executions by itself.
func BenchmarkAppend(b *testing.B, s eventstore.Log, expire func()) {
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
				end := protocol.Event{ExecutionID: id, Sequence: perExecution + 1, Type: protocol.EventCompleted, Data: json.RawMessage(`{}`)}
				if err := s.Append(ctx, eventstore.NoFence, end); err != nil {
					b.Fatal(err)
				}
				if expire != nil {
					expire()
				}
				b.StartTimer()
			}
			id = fmt.Sprintf("exe_bench_%d", i)
			if _, err := s.Create(ctx, eventstore.Record{ID: id}, "", 0); err != nil {
				b.Fatal(err)
			}
		}
		ev.ExecutionID, ev.Sequence = id, seq
		if err := s.Append(ctx, eventstore.NoFence, ev); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRead20 measures reading a whole completed execution (20 events).
func BenchmarkRead20(b *testing.B, s eventstore.Log) {
	ctx := context.Background()
	const id = "exe_bench_read"
	if _, err := s.Create(ctx, eventstore.Record{ID: id}, "", 0); err != nil {
		b.Fatal(err)
	}
	for _, ev := range CompletedExecution(id) {
		if err := s.Append(ctx, eventstore.NoFence, ev); err != nil {
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

// BenchmarkStatusAndResult measures the reads behind GET /v1/executions/{id} (Get) and
// GET …/result (Snapshot) for a completed execution of 100 events and one of 100,000
// events, almost all one-character text deltas (spec/http-api.md, "Status" and
// "Result"). Both carry the same output, so what differs is the number of events only.
// As the baseline, measured in the same run, it also times the read path before the
// store folded events: every event read and folded by protocol.Materialize.
//
// Each read is a sub-benchmark; the last one, ratio, reports how much longer each read
// takes at 100,000 events than at 100 (get-x-100k/100, result-x-100k/100 and, for the
// baseline, fold-x-100k/100), which is about 1 for reads that cost O(1) in the number
// of events.
func BenchmarkStatusAndResult(b *testing.B, s eventstore.Log) {
	ctx := context.Background()
	const small, large = 100, 100_000
	ids := map[int]string{}
	for _, n := range []int{small, large} {
		ids[n] = fmt.Sprintf("exe_bench_reads_%d", n)
		if _, err := s.Create(ctx, eventstore.Record{ID: ids[n]}, "", 0); err != nil {
			b.Fatal(err)
		}
		for _, ev := range deltaExecution(ids[n], n, large-4) {
			if err := s.Append(ctx, eventstore.NoFence, ev); err != nil {
				b.Fatal(err)
			}
		}
	}
	reads := []struct {
		name string
		read func(id string) error
	}{
		{"get", func(id string) error { _, err := s.Get(ctx, id); return err }},
		{"result", func(id string) error { _, err := s.Snapshot(ctx, id); return err }},
		{"fold", func(id string) error {
			evs, err := s.Read(ctx, id, 0, 0)
			protocol.Materialize(id, evs)
			return err
		}},
	}
	nsPerRead := map[string]float64{}
	for _, r := range reads {
		for _, n := range []int{small, large} {
			name := fmt.Sprintf("%s/%d", r.name, n)
			b.Run(name, func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					if err := r.read(ids[n]); err != nil {
						b.Fatal(err)
					}
				}
				nsPerRead[name] = float64(b.Elapsed().Nanoseconds()) / float64(b.N)
			})
		}
	}
	b.Run("ratio", func(b *testing.B) {
		for b.Loop() {
		}
		for _, r := range reads {
			if base := nsPerRead[fmt.Sprintf("%s/%d", r.name, small)]; base > 0 {
				b.ReportMetric(nsPerRead[fmt.Sprintf("%s/%d", r.name, large)]/base, r.name+"-x-100k/100")
			}
		}
	})
}

// The lease of a running execution as the runtime holds it by default (spec/events.md,
// "Ownership and orphans"): BenchmarkRenew prices renewals at this rate.
const (
	benchLease = 15 * time.Second
	benchRenew = 5 * time.Second
)

// BenchmarkRenew measures one Renew of a running execution's lease. Besides ns/op it
// reports ns/execution/s: the time spent renewing per running execution and second at
// the default lease (15s, renewed every 5s), so that, say, 10,000 running executions
// cost 10,000 times that every second.
func BenchmarkRenew(b *testing.B, s LeaseStore) {
	ctx := context.Background()
	const id = "exe_bench_renew"
	lease, err := s.Create(ctx, eventstore.Record{ID: id}, "replica-bench", benchLease)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.Renew(ctx, id, lease.Fence, benchLease); err != nil {
			b.Fatal(err)
		}
	}
	nsPerRenew := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
	renewalsPerSecond := float64(time.Second) / float64(benchRenew)
	b.ReportMetric(nsPerRenew*renewalsPerSecond, "ns/execution/s")
}

// BenchmarkOrphans measures Orphans (its default limit, 100) among 10,000 leased
// running executions: none-expired with none of their leases expired, what a sweeper
// finds almost always, and 100-expired with 100 more whose leases expired, what it finds
// after a replica died. As the baseline, measured in the same run, it times both among
// 100 running executions; the last sub-benchmark, ratio, reports how much longer each
// takes among 10,000 (none-expired-x-10000/100, 100-expired-x-10000/100): about 1 for
// an index that costs O(log n + limit).
func BenchmarkOrphans(b *testing.B, s LeaseStore) {
	ctx := context.Background()
	const small, large, expired = 100, 10_000, 100
	nsPerList := map[string]float64{}
	list := func(name string, want int) {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				ids, err := s.Orphans(ctx, 0)
				if err != nil || len(ids) != want {
					b.Fatalf("Orphans: %d ids, %v; want %d", len(ids), err, want)
				}
			}
			nsPerList[name] = float64(b.Elapsed().Nanoseconds()) / float64(b.N)
		})
	}
	// orphans creates n executions whose leases expire at once.
	orphans := func(batch string) []string {
		ids := createLeasedRange(b, s, "expired_"+batch, 0, expired, time.Millisecond)
		time.Sleep(20 * time.Millisecond) // the store's clock is real time here
		return ids
	}

	createLeasedRange(b, s, "running", 0, small, time.Hour)
	list(fmt.Sprintf("none-expired/%d", small), 0)
	ended := orphans("small")
	list(fmt.Sprintf("100-expired/%d", small), expired)
	for _, id := range ended { // out of the index, for the large measurements
		end := protocol.Event{ExecutionID: id, Sequence: 1, Type: protocol.EventCompleted, Data: json.RawMessage(`{}`)}
		if err := s.Append(ctx, eventstore.FirstFence, end); err != nil {
			b.Fatal(err)
		}
	}
	createLeasedRange(b, s, "running", small, large, time.Hour)
	list(fmt.Sprintf("none-expired/%d", large), 0)
	orphans("large")
	list(fmt.Sprintf("100-expired/%d", large), expired)

	b.Run("ratio", func(b *testing.B) {
		for b.Loop() {
		}
		for _, name := range []string{"none-expired", "100-expired"} {
			if base := nsPerList[fmt.Sprintf("%s/%d", name, small)]; base > 0 {
				b.ReportMetric(nsPerList[fmt.Sprintf("%s/%d", name, large)]/base, fmt.Sprintf("%s-x-%d/%d", name, large, small))
			}
		}
	})
}

// createLeasedRange creates the executions exe_bench_<batch>_<from> up to (not
// including) <to>, leased for ttl, a few at a time, and returns their ids.
func createLeasedRange(b *testing.B, s eventstore.Log, batch string, from, to int, ttl time.Duration) []string {
	b.Helper()
	ids := make([]string, 0, to-from)
	for i := from; i < to; i++ {
		ids = append(ids, fmt.Sprintf("exe_bench_%s_%d", batch, i))
	}
	const workers = 16
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			for i := w; i < len(ids); i += workers {
				if _, err := s.Create(context.Background(), eventstore.Record{ID: ids[i]}, "replica-bench", ttl); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		b.Fatal(err)
	}
	return ids
}

// deltaExecution returns the events of a completed execution of n events: accepted,
// route.selected, n-4 text deltas that together carry textBytes bytes, usage and
// execution.completed.
func deltaExecution(id string, n, textBytes int) []protocol.Event {
	deltas := make([]protocol.OutputDeltaData, n-4)
	for i := range deltas {
		size := textBytes / len(deltas)
		if i < textBytes%len(deltas) {
			size++ // spread the remainder
		}
		deltas[i] = protocol.OutputDeltaData{Type: "text", Text: strings.Repeat("x", size)}
	}
	usage := []protocol.Usage{{Unit: protocol.UnitOutputTokens, Quantity: float64(len(deltas)), Source: protocol.SourceProvider}}
	return textExecution(id, deltas, usage, time.Microsecond)
}

// BenchmarkConcurrentAppend measures Append under load: goroutines (parallelism × GOMAXPROCS
// of them) each append output.delta events to an execution of their own, as the engine
// does for concurrent executions, one event at a time. ns/op is wall time per append
// across all goroutines, so its inverse is the store's append throughput. Every 200
// events a goroutine ends its execution (timed: a terminal append is part of the load)
// and starts another.
func BenchmarkConcurrentAppend(b *testing.B, s eventstore.Log, parallelism int) {
	ctx := context.Background()
	const perExecution = 200
	var next atomic.Int64
	delta := CompletedExecution("")[2]
	b.ReportAllocs()
	b.SetParallelism(parallelism)
	b.RunParallel(func(pb *testing.PB) {
		var id string
		seq := uint64(0)
		for pb.Next() {
			if id == "" || seq == perExecution {
				if id != "" {
					end := protocol.Event{ExecutionID: id, Sequence: seq + 1, Type: protocol.EventCompleted, Data: json.RawMessage(`{}`)}
					if err := s.Append(ctx, eventstore.NoFence, end); err != nil {
						b.Error(err)
						return
					}
				}
				id, seq = fmt.Sprintf("exe_bench_c%d", next.Add(1)), 0
				if _, err := s.Create(ctx, eventstore.Record{ID: id}, "", 0); err != nil {
					b.Error(err)
					return
				}
			}
			seq++
			ev := delta
			ev.ExecutionID, ev.Sequence = id, seq
			if err := s.Append(ctx, eventstore.NoFence, ev); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
