package telemetry_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/switchboard-dev/switchboard/runtime/engine"
	"github.com/switchboard-dev/switchboard/runtime/eventstore"
	"github.com/switchboard-dev/switchboard/runtime/eventstore/memory"
	"github.com/switchboard-dev/switchboard/runtime/httpapi"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
	"github.com/switchboard-dev/switchboard/runtime/routing"
	"github.com/switchboard-dev/switchboard/runtime/telemetry"
)

// gated is an adapter whose attempts wait until the gate current when they started is
// opened, then succeed with one delta and usage. Rounds of the benchmark open it after
// their timed part, so that executions run outside it; a nil gate is always open.
type gated struct {
	gate *atomic.Pointer[chan struct{}]
}

func (g gated) Execute(ctx context.Context, _ engine.Attempt, em engine.Emitter) (engine.Outcome, error) {
	if ch := g.gate.Load(); ch != nil {
		select {
		case <-*ch:
		case <-ctx.Done():
			return engine.Outcome{}, ctx.Err()
		}
	}
	if err := em.Text(0, "ok"); err != nil {
		return engine.Outcome{}, err
	}
	err := em.Usage([]protocol.Usage{
		{Unit: protocol.UnitInputTokens, Quantity: 12, Source: protocol.SourceProvider},
		{Unit: protocol.UnitOutputTokens, Quantity: 1, Source: protocol.SourceProvider},
	})
	return engine.Outcome{FinishReason: "stop"}, err
}

// runtimeStore is what the engine and the HTTP API use of their store together.
type runtimeStore interface {
	engine.Store
	httpapi.Store
}

// acceptServer is the runtime's HTTP API in process on a memory store, observed the way
// the binary observes it (metrics, the access log through the binary's zap logger, no
// tracing) or not at all.
func acceptServer(b *testing.B, observed bool, gate *atomic.Pointer[chan struct{}]) (http.Handler, eventstore.Reader) {
	mem := memory.New(memory.WithRetention(0), memory.WithSweepInterval(50*time.Millisecond))
	b.Cleanup(func() { _ = mem.Close() })
	var (
		store     runtimeStore = mem
		engineObs engine.Observer
		httpObs   httpapi.Observer
		access    func(httpapi.AccessEntry)
		holder    = &routing.Holder{}
		opts      []routing.RegistryOption
	)
	if observed {
		m := telemetry.NewMetrics()
		m.MustRegister(prometheus.NewRegistry())
		store = timed(mem, m.Store("memory"))
		engineObs, httpObs = m.Engine(), m.HTTP()
		al := telemetry.NewAccessLog(zap.Options{DestWriter: io.Discard})
		b.Cleanup(al.Close)
		access = al.Write
		opts = append(opts, routing.OnPublish(m.TablePublished))
	}
	registry := routing.NewRegistry(holder, opts...)
	d := routing.Deployment{
		Ref: routing.Ref{Namespace: "team", Name: "instant"}, Provider: "instant", Model: "m",
		Abilities: []string{"chat"}, Capabilities: routing.CapsOf(protocol.CapInputText, protocol.CapOutputText, protocol.CapStreaming),
		Weight: 100,
	}
	registry.Set(d.Ref, &d)
	registry.Start()
	eng := engine.New(engine.Config{
		Store: store, Table: holder, MaxConcurrent: 1 << 20, Observer: engineObs,
		Providers: map[string]engine.Provider{"instant": {New: func(*routing.Deployment) (engine.Adapter, error) { return gated{gate}, nil }}},
	})
	b.Cleanup(func() { _ = eng.Close() })
	return httpapi.NewServer(httpapi.Config{Engine: eng, Store: store, Observer: httpObs, AccessLog: access}), store
}

// BenchmarkObservabilityOverhead measures what metrics and the access log add, with
// tracing off, to the accept path — POST /v1/executions → 202, while the executions wait
// in their adapter — and to whole executions — accept, one attempt with one delta and
// usage, terminal event. The same workload runs on an unobserved and an observed server
// in alternating rounds, so that machine drift hits both, and the ratios observed /
// unobserved of time (the median of adjacent rounds' ratios) and allocations per request
// are reported as time-ratio and allocs-ratio.
func BenchmarkObservabilityOverhead(b *testing.B) {
	b.Run("accept", func(b *testing.B) { benchOverhead(b, true) })
	b.Run("execution", func(b *testing.B) { benchOverhead(b, false) })
}

func benchOverhead(b *testing.B, acceptOnly bool) {
	body := []byte(`{"ability":"chat","input":[{"type":"text","role":"system","text":"Answer briefly."},{"type":"text","text":"What is the capital of France?"}],"metadata":{"team":"search"},"deadline_ms":60000}`)
	var (
		gate    atomic.Pointer[chan struct{}]
		servers [2]http.Handler
		stores  [2]eventstore.Reader
	)
	servers[0], stores[0] = acceptServer(b, false, &gate)
	servers[1], stores[1] = acceptServer(b, true, &gate)
	const round = 200
	ctx := context.Background()
	post := func(w int) string {
		req := httptest.NewRequest(http.MethodPost, "/v1/executions", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		servers[w].ServeHTTP(rec, req)
		if rec.Code != http.StatusAccepted {
			b.Fatalf("status %d: %s", rec.Code, rec.Body)
		}
		return strings.TrimPrefix(rec.Header().Get("Location"), "/v1/executions/")
	}
	// wait returns once execution id has ended (or was removed, retention being 0).
	wait := func(w int, id string) {
		for after := uint64(0); ; {
			evs, err := stores[w].Read(ctx, id, after, 32)
			if errors.Is(err, eventstore.ErrNotFound) {
				return
			}
			if err != nil {
				b.Fatal(err)
			}
			for _, ev := range evs {
				if ev.Type.Terminal() {
					return
				}
				after = ev.Sequence
			}
			if err := stores[w].Wait(ctx, id, after); errors.Is(err, eventstore.ErrNotFound) {
				return
			} else if err != nil {
				b.Fatal(err)
			}
		}
	}
	var (
		elapsed [2][]time.Duration // per round
		allocs  [2]uint64
		began   time.Time
		mallocs uint64
		ms      runtime.MemStats
		ids     = make([]string, 0, round)
	)
	// Warm both up (first routes, pools, label children).
	for w := range 2 {
		for range round {
			wait(w, post(w))
		}
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		which := (i / round) % 2
		if i%round == 0 {
			if acceptOnly {
				ch := make(chan struct{})
				gate.Store(&ch)
			}
			runtime.ReadMemStats(&ms)
			began, mallocs = time.Now(), ms.Mallocs
		}
		id := post(which)
		if acceptOnly {
			ids = append(ids, id)
		} else {
			wait(which, id)
		}
		if i++; i%round == 0 {
			elapsed[which] = append(elapsed[which], time.Since(began))
			runtime.ReadMemStats(&ms)
			allocs[which] += ms.Mallocs - mallocs
			if acceptOnly {
				// Let the round's executions run to their end, untimed.
				close(*gate.Load())
				for _, id := range ids {
					wait(which, id)
				}
				ids = ids[:0]
			}
		}
	}
	if ch := gate.Load(); ch != nil && len(ids) > 0 {
		close(*ch)
	}
	pairs := min(len(elapsed[0]), len(elapsed[1]))
	if pairs == 0 {
		b.Logf("ratios need at least %d iterations (-benchtime=%dx)", 2*round, 100*round)
		return
	}
	// The time ratio is the median of the ratios of adjacent rounds, so that a
	// collection or a scheduling hiccup during one round does not decide it.
	ratios := make([]float64, pairs)
	var total [2]time.Duration
	for k := range pairs {
		ratios[k] = float64(elapsed[1][k]) / float64(elapsed[0][k])
		total[0] += elapsed[0][k]
		total[1] += elapsed[1][k]
	}
	slices.Sort(ratios)
	per := func(v float64) float64 { return v / float64(pairs*round) }
	baseAllocs, obsAllocs := per(float64(allocs[0])), per(float64(allocs[1]))
	b.ReportMetric(per(float64(total[0])), "unobserved-ns/req")
	b.ReportMetric(per(float64(total[1])), "observed-ns/req")
	b.ReportMetric(ratios[pairs/2], "time-ratio")
	b.ReportMetric(baseAllocs, "unobserved-allocs/req")
	b.ReportMetric(obsAllocs, "observed-allocs/req")
	b.ReportMetric(obsAllocs/baseAllocs, "allocs-ratio")
}
