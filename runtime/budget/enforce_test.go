package budget_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchboard-dev/switchboard/runtime/budget"
	"github.com/switchboard-dev/switchboard/runtime/engine"
	"github.com/switchboard-dev/switchboard/runtime/eventstore"
	"github.com/switchboard-dev/switchboard/runtime/eventstore/memory"
	"github.com/switchboard-dev/switchboard/runtime/pricing"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
	"github.com/switchboard-dev/switchboard/runtime/routing"
)

// fixed is an adapter whose every attempt answers "ok" and reports fixed usage, or
// fails before output with a retryable error when fail is set.
type fixed struct {
	usage []protocol.Usage
	fail  bool
	calls *atomic.Int64
}

func (f fixed) Execute(_ context.Context, _ engine.Attempt, em engine.Emitter) (engine.Outcome, error) {
	f.calls.Add(1)
	if f.fail {
		return engine.Outcome{}, protocol.NewError(protocol.CodeProviderUnavailable, "down")
	}
	if err := em.Text(0, "ok"); err != nil {
		return engine.Outcome{}, err
	}
	if err := em.Usage(f.usage); err != nil {
		return engine.Outcome{}, err
	}
	return engine.Outcome{FinishReason: "stop"}, nil
}

// world is an engine with the Budget enforcer, on one memory store and one clock.
type world struct {
	store   *memory.Store
	table   *routing.Holder
	budgets *budget.Holder
	enf     *budget.Enforcer
	eng     *engine.Engine
	calls   map[string]*atomic.Int64
	now     time.Time
}

var usd = &pricing.Prices{Currency: "USD", Input: 2_000_000, Output: 10_000_000, CacheRead: 2_000_000, CacheWrite: 2_000_000, Reasoning: 10_000_000}

// tokens is the usage every successful attempt reports: 1000 in, 100 out, which at usd
// costs 0.002 + 0.001 = 0.003 USD.
var tokens = []protocol.Usage{
	{Unit: protocol.UnitInputTokens, Quantity: 1000, Source: protocol.SourceProvider},
	{Unit: protocol.UnitOutputTokens, Quantity: 100, Source: protocol.SourceProvider},
}

func newWorld(t *testing.T, budgets []budget.Budget, deployments ...routing.Deployment) *world {
	t.Helper()
	w := &world{store: memory.New(), table: new(routing.Holder), budgets: new(budget.Holder), calls: map[string]*atomic.Int64{},
		now: time.Date(2026, 12, 6, 12, 0, 30, 0, time.UTC)}
	w.table.Store(routing.NewTable(deployments))
	w.budgets.Store(budget.NewSet(budgets))
	w.enf = budget.New(budget.Config{Store: w.store, Budgets: w.budgets, Table: w.table, Now: func() time.Time { return w.now }})
	providers := map[string]engine.Provider{}
	for _, d := range deployments {
		calls := new(atomic.Int64)
		w.calls[d.Ref.Name] = calls
		a := fixed{usage: tokens, fail: d.Model == "down", calls: calls}
		prev := providers[d.Provider].New
		providers[d.Provider] = engine.Provider{New: func(dd *routing.Deployment) (engine.Adapter, error) {
			if dd.Ref.Name == d.Ref.Name {
				return a, nil
			}
			return prev(dd)
		}}
	}
	w.eng = engine.New(engine.Config{Store: w.store, Table: w.table, Providers: providers, Admission: w.enf, MaxConcurrent: 1000})
	t.Cleanup(func() {
		_ = w.eng.Close()
		_ = w.store.Close()
	})
	return w
}

func deployment(name, provider string, labels map[string]string, prices *pricing.Prices, outputCap int64) routing.Deployment {
	return routing.Deployment{
		Ref: routing.Ref{Namespace: "ai", Name: name}, Provider: provider, Model: name, Abilities: []string{"chat"},
		Capabilities: routing.CapsOf(protocol.CapInputText, protocol.CapOutputText), Priority: 0, Weight: 1,
		Labels: labels, Pricing: prices, MaxOutputTokens: outputCap,
	}
}

func request() *protocol.Request {
	return &protocol.Request{Ability: "chat", Input: []protocol.Part{{Type: protocol.PartText, Text: "hello"}}}
}

// submit submits as principal and waits for the terminal event; it returns the
// submission's error, or the events.
func (w *world) submit(t *testing.T, p engine.Principal) ([]protocol.Event, error) {
	t.Helper()
	acc, _, err := w.eng.Submit(t.Context(), p, request(), engine.Idempotency{})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	for {
		if err := w.store.Wait(ctx, acc.ID, 0); err != nil && !errors.Is(err, eventstore.ErrTerminated) {
			t.Fatalf("wait: %v", err)
		}
		st, err := w.store.Get(ctx, acc.ID)
		if err != nil {
			t.Fatal(err)
		}
		if st.Terminal {
			events, err := w.store.Read(ctx, acc.ID, 0, 0)
			if err != nil {
				t.Fatal(err)
			}
			w.settled(t, acc.ID)
			return events, nil
		}
		if err := w.store.Wait(ctx, acc.ID, st.LastSequence); err != nil && !errors.Is(err, eventstore.ErrTerminated) {
			t.Fatalf("wait: %v", err)
		}
	}
}

// settled waits until execution id holds nothing: its runner settles right after
// recording the terminal event.
func (w *world) settled(t *testing.T, id string) {
	t.Helper()
	for range 1000 {
		pending, err := w.store.Pending(t.Context(), time.Now().Add(time.Hour), 0)
		if err != nil {
			t.Fatal(err)
		}
		held := false
		for _, p := range pending {
			held = held || p.ID == id
		}
		if !held {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("execution %s was never settled", id)
}

func (w *world) used(t *testing.T, b *budget.Budget) []budget.WindowUsage {
	t.Helper()
	r, err := budget.Report(t.Context(), w.store, b, w.now)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func quota(t *testing.T, err error) *protocol.Error {
	t.Helper()
	var pe *protocol.Error
	if !errors.As(err, &pe) || pe.Code != protocol.CodeQuotaExhausted || pe.Retryable {
		t.Fatalf("error = %v, want quota_exhausted, not retryable", err)
	}
	return pe
}

func TestRequestsLimitRefusesTheNextWithRetryAfter(t *testing.T) {
	b := budget.Budget{UID: "u1", Namespace: "ai", Name: "team", Limits: []budget.Limit{{Window: budget.Minute, Location: time.UTC, Requests: 2}}}
	w := newWorld(t, []budget.Budget{b}, deployment("m", "p", nil, nil, 0))
	for range 2 {
		if _, err := w.submit(t, engine.Principal{Name: "alice"}); err != nil {
			t.Fatalf("within the limit: %v", err)
		}
	}
	_, err := w.submit(t, engine.Principal{Name: "alice"})
	pe := quota(t, err)
	if pe.RetryAfterMs != 30_000 { // the clock stands at 12:00:30, the window resets at 12:01
		t.Fatalf("retry_after_ms = %d, want 30000", pe.RetryAfterMs)
	}
	if got := w.used(t, &b)[0].Used.Requests; got != 2 {
		t.Fatalf("requests used = %d, want 2", got)
	}
	if n := w.calls["m"].Load(); n != 2 {
		t.Fatalf("the provider was called %d times, want 2: a refused request must not reach it", n)
	}
	// The next window takes requests again.
	w.now = w.now.Add(30 * time.Second)
	if _, err := w.submit(t, engine.Principal{Name: "alice"}); err != nil {
		t.Fatalf("in the next window: %v", err)
	}
}

func TestCostSettlesToTheReportedUsage(t *testing.T) {
	b := budget.Budget{UID: "u2", Namespace: "ai", Name: "money", Limits: []budget.Limit{{Window: budget.Month, Location: time.UTC, Cost: 1_000_000, Tokens: 1_000_000}}}
	w := newWorld(t, []budget.Budget{b}, deployment("m", "p", nil, usd, 4096))
	events, err := w.submit(t, engine.Principal{Name: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	u := w.used(t, &b)[0]
	if u.Used.Cost != 3000 || u.Used.Tokens != 1100 {
		t.Fatalf("used = %+v, want cost 3000 micro-USD and 1100 tokens", u.Used)
	}
	// The usage event carries the derived cost fact.
	var fact *protocol.Usage
	for _, ev := range events {
		if ev.Type == protocol.EventUsageReported {
			var d protocol.UsageReportedData
			if err := json.Unmarshal(ev.Data, &d); err != nil {
				t.Fatal(err)
			}
			for i := range d.Usage {
				if d.Usage[i].Unit == "cost.usd" {
					fact = &d.Usage[i]
				}
			}
		}
	}
	if fact == nil || fact.Quantity != 0.003 || fact.Source != protocol.SourceDerived {
		t.Fatalf("cost fact = %+v, want cost.usd 0.003 derived", fact)
	}
}

func TestFallbackToAModelWithBudgetLeft(t *testing.T) {
	premium := budget.Budget{UID: "u3", Namespace: "ai", Name: "premium", Selects: func(l map[string]string) bool { return l["tier"] == "premium" },
		Limits: []budget.Limit{{Window: budget.Day, Location: time.UTC, Requests: 1}}}
	w := newWorld(t, []budget.Budget{premium},
		deployment("big", "p", map[string]string{"tier": "premium"}, nil, 0),
		deployment("small", "q", nil, nil, 0))
	req := func() *protocol.Request {
		r := request()
		r.Routing = &protocol.Routing{Prefer: []string{"ai/big"}}
		return r
	}
	for i, want := range []string{"ai/big", "ai/small"} {
		acc, _, err := w.eng.Submit(t.Context(), engine.Principal{Name: "alice"}, req(), engine.Idempotency{})
		if err != nil {
			t.Fatalf("submission %d: %v", i, err)
		}
		st := waitRoute(t, w, acc.ID)
		if st != want {
			t.Fatalf("submission %d ran on %s, want %s", i, st, want)
		}
	}
}

func waitRoute(t *testing.T, w *world, id string) string {
	t.Helper()
	for range 1000 {
		st, err := w.store.Get(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		if st.Terminal && st.Route != nil {
			w.settled(t, id)
			return st.Route.Deployment
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatal("never ended")
	return ""
}

func TestBothExhaustedIs429(t *testing.T) {
	all := budget.Budget{UID: "u4", Namespace: "ai", Name: "all", Limits: []budget.Limit{{Window: budget.Hour, Location: time.UTC, Requests: 1}}}
	w := newWorld(t, []budget.Budget{all}, deployment("a", "p", nil, nil, 0), deployment("b", "q", nil, nil, 0))
	if _, err := w.submit(t, engine.Principal{Name: "alice"}); err != nil {
		t.Fatal(err)
	}
	pe := quota(t, func() error { _, err := w.submit(t, engine.Principal{Name: "alice"}); return err }())
	if want := int64(59*60*1000 + 30*1000); pe.RetryAfterMs != want {
		t.Fatalf("retry_after_ms = %d, want %d (to 13:00)", pe.RetryAfterMs, want)
	}
}

func TestFailClosedWithoutPricing(t *testing.T) {
	b := budget.Budget{UID: "u5", Namespace: "ai", Name: "money", Limits: []budget.Limit{{Window: budget.Month, Location: time.UTC, Cost: 1_000_000}}}
	for name, d := range map[string]routing.Deployment{
		"no pricing":    deployment("m", "p", nil, nil, 4096),
		"no output cap": deployment("m", "p", nil, usd, 0),
	} {
		t.Run(name, func(t *testing.T) {
			w := newWorld(t, []budget.Budget{b}, d)
			_, err := w.submit(t, engine.Principal{Name: "alice"})
			pe := quota(t, err)
			if pe.RetryAfterMs != 0 {
				t.Fatalf("retry_after_ms = %d: no reset makes an unpriced model chargeable", pe.RetryAfterMs)
			}
			if w.calls["m"].Load() != 0 {
				t.Fatal("the provider was called")
			}
		})
	}
	// A caller the Budget does not count is not affected.
	sa := b
	sa.Subjects = []budget.Subject{{Kind: budget.ServiceAccount, Namespace: "search", Name: "indexer"}}
	w := newWorld(t, []budget.Budget{sa}, deployment("m", "p", nil, nil, 0))
	if _, err := w.submit(t, engine.Principal{Name: "alice"}); err != nil {
		t.Fatalf("a caller outside the subjects: %v", err)
	}
	_, err := w.submit(t, engine.Principal{Name: "system:serviceaccount:search:indexer"})
	quota(t, err)
}

func TestMixedCurrenciesFailClosed(t *testing.T) {
	eur := *usd
	eur.Currency = "EUR"
	b := budget.Budget{UID: "u6", Namespace: "ai", Name: "money", Limits: []budget.Limit{{Window: budget.Month, Location: time.UTC, Cost: 1_000_000}}}
	w := newWorld(t, []budget.Budget{b}, deployment("a", "p", nil, usd, 100), deployment("b", "q", nil, &eur, 100))
	_, err := w.submit(t, engine.Principal{Name: "alice"})
	quota(t, err)
}

func TestAuditCountsAndNeverRefuses(t *testing.T) {
	b := budget.Budget{UID: "u7", Namespace: "ai", Name: "watch", Audit: true, Limits: []budget.Limit{{Window: budget.Minute, Location: time.UTC, Requests: 1}}}
	w := newWorld(t, []budget.Budget{b}, deployment("m", "p", nil, nil, 0))
	for range 3 {
		if _, err := w.submit(t, engine.Principal{Name: "alice"}); err != nil {
			t.Fatal(err)
		}
	}
	u := w.used(t, &b)[0]
	if u.Used.Requests != 3 || u.Percent() != 300 || !u.Exhausted() {
		t.Fatalf("audit window = %+v (percent %d)", u, u.Percent())
	}
}

func TestPerSubjectGivesEachCallerTheLimit(t *testing.T) {
	b := budget.Budget{UID: "u8", Namespace: "ai", Name: "each", PerSubject: true, Limits: []budget.Limit{{Window: budget.Minute, Location: time.UTC, Requests: 1}}}
	w := newWorld(t, []budget.Budget{b}, deployment("m", "p", nil, nil, 0))
	for _, who := range []string{"alice", "bob"} {
		if _, err := w.submit(t, engine.Principal{Name: who}); err != nil {
			t.Fatalf("%s: %v", who, err)
		}
	}
	_, err := w.submit(t, engine.Principal{Name: "alice"})
	quota(t, err)
	if got := w.used(t, &b)[0].Used.Requests; got != 2 {
		t.Fatalf("the Budget's total = %d, want 2", got)
	}
}

func TestFailedBeforeOutputCostsOnlyTheRequest(t *testing.T) {
	b := budget.Budget{UID: "u9", Namespace: "ai", Name: "money", Limits: []budget.Limit{{Window: budget.Month, Location: time.UTC, Cost: 1_000_000, Requests: 100}}}
	w := newWorld(t, []budget.Budget{b}, deployment("down", "p", nil, usd, 100))
	if _, err := w.submit(t, engine.Principal{Name: "alice"}); err != nil {
		t.Fatal(err)
	}
	u := w.used(t, &b)[0]
	if u.Used.Cost != 0 || u.Used.Requests != 1 {
		t.Fatalf("used = %+v, want no cost and one request", u.Used)
	}
}

// TestConcurrentReservationsNeverOvershoot is the edge of a limit under load: 300
// simultaneous executions against room for 100 of them (each reserves its worst case,
// 1 request) on one memory store: exactly 100 run, 200 are refused, and what the
// counter holds after settlement is the sum of what was settled.
func TestConcurrentReservationsNeverOvershoot(t *testing.T) {
	b := budget.Budget{UID: "u10", Namespace: "ai", Name: "edge", Limits: []budget.Limit{{Window: budget.Day, Location: time.UTC, Requests: 100, Cost: 10_000_000}}}
	w := newWorld(t, []budget.Budget{b}, deployment("m", "p", nil, usd, 100))
	var admitted, refused atomic.Int64
	ids := make(chan string, 300)
	var wg sync.WaitGroup
	for range 300 {
		wg.Go(func() {
			acc, _, err := w.eng.Submit(t.Context(), engine.Principal{Name: "alice"}, request(), engine.Idempotency{})
			var pe *protocol.Error
			switch {
			case err == nil:
				admitted.Add(1)
				ids <- acc.ID
			case errors.As(err, &pe) && pe.Code == protocol.CodeQuotaExhausted:
				refused.Add(1)
			default:
				t.Errorf("Submit: %v, want success or quota_exhausted", err)
			}
		})
	}
	wg.Wait()
	close(ids)
	for id := range ids {
		waitRoute(t, w, id) // terminal and settled
	}
	if admitted.Load() != 100 || refused.Load() != 200 {
		t.Fatalf("admitted %d, refused %d; want 100 and 200", admitted.Load(), refused.Load())
	}
	u := w.used(t, &b)[0]
	if u.Used.Requests != 100 || u.Used.Cost != 100*3000 {
		t.Fatalf("used = %+v, want 100 requests and %d micro-USD", u.Used, 100*3000)
	}
}
