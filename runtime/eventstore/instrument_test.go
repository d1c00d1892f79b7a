package eventstore_test

import (
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/switchboard-dev/switchboard/runtime/eventstore"
	"github.com/switchboard-dev/switchboard/runtime/eventstore/memory"
)

// TestInstrumentBudgets: every Budgets call is timed once under its own op, and its
// results, a refusal included, pass through unchanged.
func TestInstrumentBudgets(t *testing.T) {
	s := memory.New(memory.WithSweepInterval(0))
	defer s.Close()
	var mu sync.Mutex
	timed := map[string]int{}
	b := eventstore.InstrumentBudgets(s, func(op eventstore.Op, _ time.Duration) {
		mu.Lock()
		defer mu.Unlock()
		timed[op.String()]++
	})
	ctx := t.Context()
	h := eventstore.Hold{Counter: "c", Unit: "requests", Amount: 1, Limit: 1, Expires: time.Now().Add(time.Hour)}
	if err := b.Hold(ctx, "exe_1", []eventstore.Hold{h}, json.RawMessage(`{}`)); err != nil {
		t.Fatalf("Hold: %v", err)
	}
	var refused *eventstore.HoldRefusedError
	if err := b.Hold(ctx, "exe_2", []eventstore.Hold{h}, nil); !errors.As(err, &refused) || refused.Used != 1 {
		t.Fatalf("Hold past the limit: %v, want a refusal at 1", err)
	}
	if pending, err := b.Pending(ctx, time.Now().Add(time.Hour), 0); err != nil || len(pending) != 1 || pending[0].ID != "exe_1" {
		t.Fatalf("Pending: %v, %v; want exe_1", pending, err)
	}
	if values, err := b.Counters(ctx, []string{"c"}); err != nil || !cmp.Equal(values, []int64{1}) {
		t.Fatalf("Counters: %v, %v; want [1]", values, err)
	}
	if settled, err := b.Settle(ctx, "exe_1", nil); err != nil || !settled {
		t.Fatalf("Settle: %v, %v; want settled", settled, err)
	}
	want := map[string]int{"hold": 2, "pending": 1, "counters": 1, "settle": 1}
	if diff := cmp.Diff(want, timed); diff != "" {
		t.Errorf("timed ops (-want +got):\n%s", diff)
	}
}
