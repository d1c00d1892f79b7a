package httpapi_test

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchboard-dev/switchboard/runtime/engine"
	"github.com/switchboard-dev/switchboard/runtime/eventstore/memory"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
)

// BenchmarkAccept measures POST /v1/executions → 202 in process: decoding, the
// idempotency reservation, routing, creation and the 202 body. The executions complete
// at once in the background; their work is included in the allocation count, as it is
// in a real server.
func BenchmarkAccept(b *testing.B) {
	body := []byte(`{"ability":"chat","input":[{"type":"text","role":"system","text":"Answer briefly."},{"type":"text","text":"What is the capital of France?"}],"metadata":{"team":"search"},"deadline_ms":60000}`)
	for _, withKey := range []bool{false, true} {
		name := "no-key"
		if withKey {
			name = "idempotency-key"
		}
		b.Run(name, func(b *testing.B) {
			// Executions are removed right after they end, so memory stays flat.
			e := newEnv(b, withMaxConcurrent(1<<20), withStore(memory.WithRetention(0), memory.WithSweepInterval(50*time.Millisecond)))
			e.setScript(func(context.Context, engine.Attempt, engine.Emitter) (engine.Outcome, error) {
				return engine.Outcome{}, nil
			})
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				req := httptest.NewRequest(http.MethodPost, "/v1/executions", bytes.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				if withKey {
					req.Header.Set("Idempotency-Key", "bench-"+strconv.Itoa(i))
					i++
				}
				rec := httptest.NewRecorder()
				e.handler.ServeHTTP(rec, req)
				if rec.Code != http.StatusAccepted {
					b.Fatalf("status %d: %s", rec.Code, rec.Body)
				}
			}
		})
	}
}

// BenchmarkSSEFanout streams one execution to 1,000 subscribers over real HTTP. Each
// iteration appends one event and waits until every subscriber has received it; lag is
// the time from the event's timestamp (taken when the engine appends it) to its receipt
// by a subscriber's client, reported as p50 and p99 over all deliveries.
func BenchmarkSSEFanout(b *testing.B) {
	const subscribers = 1000
	e := newEnv(b)
	g := newGate()
	e.setScript(g.script)
	id := e.submit(b, chat("fan-out"))

	var (
		received atomic.Int64 // deliveries of timed events so far
		target   atomic.Int64 // deliveries that complete the current iteration
		reached  = make(chan struct{}, 1)
		lagMu    sync.Mutex
		lags     []time.Duration
		ready    sync.WaitGroup
		done     sync.WaitGroup
	)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for range subscribers {
		ready.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			st, err := e.client.Events(ctx, id, 0)
			if err != nil {
				ready.Done()
				b.Error(err)
				return
			}
			defer st.Close()
			var mine []time.Duration
			for st.Next() {
				ev := st.Event()
				if ev.Sequence == 2 { // accepted, route.selected: connected and caught up
					ready.Done()
					continue
				}
				if ev.Type != protocol.EventOutputDelta {
					continue
				}
				mine = append(mine, time.Since(ev.Timestamp))
				if received.Add(1) == target.Load() {
					reached <- struct{}{}
				}
			}
			lagMu.Lock()
			lags = append(lags, mine...)
			lagMu.Unlock()
		}()
	}
	ready.Wait()

	b.ResetTimer()
	for i := 1; i <= b.N; i++ {
		target.Store(int64(i) * subscribers)
		g.delta(b, "x")
		<-reached
	}
	b.StopTimer()
	g.finish()
	done.Wait()

	if len(lags) != b.N*subscribers {
		b.Fatalf("%d deliveries, want %d", len(lags), b.N*subscribers)
	}
	slices.Sort(lags)
	b.ReportMetric(float64(lags[len(lags)/2].Microseconds()), "p50-lag-µs")
	b.ReportMetric(float64(lags[len(lags)*99/100].Microseconds()), "p99-lag-µs")
}
