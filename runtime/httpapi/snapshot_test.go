package httpapi_test

import (
	"context"
	"testing"

	"github.com/switchboard-dev/switchboard/runtime/engine"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
)

// TestOneTableLoadPerSubmission: a submission loads the routing table once and decides
// everything from that snapshot — the namespaces its caller may use, its route, and the
// deployment of each attempt, credential included (spec/routing.md, "Attempts and
// fallback") — so that no two of them can come from different tables. The submission
// has a key and falls back once, so that every step that could load a table runs.
func TestOneTableLoadPerSubmission(t *testing.T) {
	e := newAuthEnv(t, withDeployments(inNamespace("team-a", "small"), inNamespace("team-a", "large"), inNamespace("team-b", "small")))
	e.setScript(func(ctx context.Context, a engine.Attempt, emit engine.Emitter) (engine.Outcome, error) {
		if a.Number == 1 {
			return engine.Outcome{}, protocol.NewError(protocol.CodeProviderUnavailable, "down")
		}
		return reply("ok")(ctx, a, emit)
	})
	before := e.table.loads.Load()
	acc := e.submitAs(t, aliceToken, "chat", "Idempotency-Key", "one-snapshot")
	eventually(t, "the execution's end", func() bool {
		st, err := e.store.Get(t.Context(), acc.ID)
		return err == nil && st.Terminal
	})
	st, err := e.store.Get(t.Context(), acc.ID)
	if err != nil || st.Attempts != 2 || st.State != protocol.StatusCompleted {
		t.Fatalf("execution %+v, %v; want it completed by its second attempt", st, err)
	}
	if n := e.table.loads.Load() - before; n != 1 {
		t.Errorf("the submission loaded the routing table %d times, want once", n)
	}
}
