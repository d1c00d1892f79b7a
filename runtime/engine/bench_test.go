package engine_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/switchboard-dev/switchboard/runtime/engine"
	"github.com/switchboard-dev/switchboard/runtime/eventstore/memory"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
	"github.com/switchboard-dev/switchboard/runtime/routing"
)

// trivial emits one delta and one usage report and succeeds.
type trivial struct{}

// trivialUsage is the usage trivial reports.
var trivialUsage = []protocol.Usage{
	{Unit: protocol.UnitInputTokens, Quantity: 1, Source: protocol.SourceProvider},
	{Unit: protocol.UnitOutputTokens, Quantity: 1, Source: protocol.SourceProvider},
}

func (trivial) Execute(_ context.Context, _ engine.Attempt, em engine.Emitter) (engine.Outcome, error) {
	if err := em.Text(0, "ok"); err != nil {
		return engine.Outcome{}, err
	}
	if err := em.Usage(trivialUsage); err != nil {
		return engine.Outcome{}, err
	}
	return engine.Outcome{FinishReason: "stop"}, nil
}

// BenchmarkSubmit measures one whole execution: Submit, the run to the terminal event
// (six events), and the wait for it.
func BenchmarkSubmit(b *testing.B) {
	store := memory.New(memory.WithSweepInterval(0))
	defer store.Close()
	holder := new(routing.Holder)
	holder.Store(routing.NewTable([]routing.Deployment{deployment("a"), deployment("b", withPriority(-1))}))
	eng := engine.New(engine.Config{
		Store: store,
		Table: holder,
		Providers: map[string]engine.Provider{
			"fake": {New: func(*routing.Deployment) (engine.Adapter, error) { return trivial{}, nil }},
		},
	})
	defer eng.Close()
	req := request()
	ctx := context.Background()

	b.ReportAllocs()
	for b.Loop() {
		acc, _, err := eng.Submit(ctx, engine.Principal{}, req, engine.Idempotency{})
		if err != nil {
			b.Fatal(err)
		}
		for after := uint64(0); ; after++ {
			if err := store.Wait(ctx, acc.ID, after); err != nil {
				break // ErrTerminated: the terminal event is recorded
			}
		}
	}
}

// BenchmarkAdmitLargeAbility routes through 10,000 deployments of one ability that share
// a configuration, with an adapter check that counts its calls: the reported
// checks/op is how often the adapter is asked per Submit (10,000 if every deployment
// were asked; the engine asks once per distinct configuration).
func BenchmarkAdmitLargeAbility(b *testing.B) {
	ds := make([]routing.Deployment, 10_000)
	for i := range ds {
		ds[i] = deployment("d" + strconv.Itoa(i))
	}
	store := memory.New(memory.WithSweepInterval(0))
	defer store.Close()
	holder := new(routing.Holder)
	holder.Store(routing.NewTable(ds))
	var checks atomic.Int64
	eng := engine.New(engine.Config{
		Store: store,
		Table: holder,
		Providers: map[string]engine.Provider{"fake": {
			New: func(*routing.Deployment) (engine.Adapter, error) { return trivial{}, nil },
			CanEncode: func(*protocol.Request, *routing.Deployment) *protocol.Error {
				checks.Add(1)
				return nil
			},
		}},
	})
	defer eng.Close()
	req := request()
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		acc, _, err := eng.Submit(ctx, engine.Principal{}, req, engine.Idempotency{})
		if err != nil {
			b.Fatal(err)
		}
		for after := uint64(0); ; after++ {
			if err := store.Wait(ctx, acc.ID, after); err != nil {
				break
			}
		}
	}
	b.ReportMetric(float64(checks.Load())/float64(b.N), "checks/op")
}
