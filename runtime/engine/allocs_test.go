//go:build !race

package engine

import (
	"context"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"github.com/switchboard-dev/switchboard/runtime/eventstore"
	"github.com/switchboard-dev/switchboard/runtime/eventstore/memory"
	"github.com/switchboard-dev/switchboard/runtime/routing"
)

// Allocation bounds of the emitter's hot path: a regression guard that counts instead of
// timing. The race detector changes the counts, so this file is built only without it,
// and `make test` runs these tests in a run of their own without -race.

// maxAllocsPerText bounds one Text on a memory store: the delta's encoding, plus the
// store's and the snapshot's amortized growth (measured: 1.00). Emit, which took the
// payload as an interface, moved it to the heap too (measured: 2.00).
const maxAllocsPerText = 1.1

// TestTextAllocations: recording a text delta allocates its encoding and nothing else.
func TestTextAllocations(t *testing.T) {
	ctx := context.Background()
	store := memory.New(memory.WithSweepInterval(0))
	t.Cleanup(func() { _ = store.Close() })
	const id = "exe_allocs"
	if _, err := store.Create(ctx, eventstore.Record{ID: id, CreatedAt: time.Now()}, "", 0); err != nil {
		t.Fatal(err)
	}
	w := &writer{store: store, ctx: ctx, id: id, now: time.Now}
	em := &emitter{w: w, ctx: ctx, log: logr.Discard(), deployment: &routing.Deployment{}, obs: nopObserver{}, start: time.Now()}
	allocs := testing.AllocsPerRun(1000, func() {
		if err := em.Text(0, "a delta of some forty bytes of text, say"); err != nil {
			t.Fatal(err)
		}
	})
	t.Logf("%.2f allocations per text delta", allocs)
	if allocs > maxAllocsPerText {
		t.Errorf("%.2f allocations per text delta, bound %.1f", allocs, maxAllocsPerText)
	}
}
