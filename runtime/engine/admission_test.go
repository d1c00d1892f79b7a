package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/switchboard-dev/switchboard/runtime/engine"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
	"github.com/switchboard-dev/switchboard/runtime/routing"
)

// admissions records what the engine asks of its Admission, and refuses the
// deployments named in refuse.
type admissions struct {
	mu      sync.Mutex
	refuse  map[string]bool
	asked   [][]string // the candidates of each Admit call, by name
	settled []engine.Spent
	ids     []string
}

func (a *admissions) Admit(_ context.Context, c engine.Claim, candidates []*routing.Deployment) (int, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	var names []string
	for _, d := range candidates {
		names = append(names, d.Ref.Name)
	}
	a.asked = append(a.asked, names)
	for i, d := range candidates {
		if !a.refuse[d.Ref.Name] {
			return i, nil
		}
	}
	return 0, protocol.NewError(protocol.CodeQuotaExhausted, "the budget for this request is exhausted")
}

func (a *admissions) Settle(_ context.Context, c engine.Claim, s engine.Spent) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.settled = append(a.settled, s)
	a.ids = append(a.ids, c.ID)
}

func (a *admissions) snapshot() ([][]string, []engine.Spent, []string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.asked), slices.Clone(a.settled), slices.Clone(a.ids)
}

// waitSettled waits until n settlements were made: the engine settles right after the
// terminal event, so a reader may see the event first.
func (a *admissions) waitSettled(t *testing.T, n int) []engine.Spent {
	t.Helper()
	for range 2000 {
		if _, s, _ := a.snapshot(); len(s) >= n {
			return s
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("fewer than %d settlements", n)
	return nil
}

// The engine asks its Admission before the first attempt and before each fallback,
// skips what it refuses, and settles once with what the last attempt used.
func TestAdmissionBeforeEachAttemptAndOneSettlement(t *testing.T) {
	a := &admissions{refuse: map[string]bool{"first": true}}
	scripts := map[string]*script{
		"first":  newScript(delta("never")),
		"second": newScript(fail(protocol.NewError(protocol.CodeProviderUnavailable, "down"))),
		"third": newScript(delta("hi"), emit(protocol.EventUsageReported, protocol.UsageReportedData{
			Usage: []protocol.Usage{{Unit: protocol.UnitOutputTokens, Quantity: 2, Source: protocol.SourceProvider}}})),
	}
	h := newHarness(t, []routing.Deployment{
		deployment("first", withPriority(3)), deployment("second", withPriority(2)), deployment("third", withPriority(1)),
	}, scripts, func(c *engine.Config) { c.Admission = a })

	acc := h.Submit(request())
	evs := h.finish(acc.ID)
	var routes []string
	for _, ev := range evs {
		if ev.Type == protocol.EventRouteSelected {
			routes = append(routes, string(ev.Data))
		}
	}
	if len(routes) != 2 {
		t.Fatalf("route.selected events %v, want attempts 1 on second and 2 on third", routes)
	}
	settled := a.waitSettled(t, 1)
	asked, _, ids := a.snapshot()
	if want := [][]string{{"first", "second", "third"}, {"third"}}; !slices.EqualFunc(asked, want, slices.Equal) {
		t.Fatalf("Admit asked about %v, want %v", asked, want)
	}
	if scripts["first"].callCount() != 0 {
		t.Fatal("a refused candidate was called")
	}
	if len(settled) != 1 || ids[0] != acc.ID {
		t.Fatalf("settlements %+v for %v, want one for %s", settled, ids, acc.ID)
	}
	s := settled[0]
	if s.Deployment == nil || s.Deployment.Ref.Name != "third" || !s.Output || s.Failed || s.OutputBytes != 2 ||
		len(s.Usage) != 1 || s.Usage[0].Quantity != 2 {
		t.Fatalf("spent = %+v, want third's output and usage", s)
	}
}

// A refusal before the first attempt is Submit's answer: nothing is created and
// nothing is settled; a fallback refused ends the execution with the refusal.
func TestAdmissionRefusals(t *testing.T) {
	a := &admissions{refuse: map[string]bool{"only": true}}
	scripts := map[string]*script{"only": newScript(delta("never"))}
	h := newHarness(t, []routing.Deployment{deployment("only")}, scripts, func(c *engine.Config) { c.Admission = a })
	_, _, err := h.Engine.Submit(t.Context(), engine.Principal{Name: "p"}, request(), engine.Idempotency{})
	var pe *protocol.Error
	if !errors.As(err, &pe) || pe.Code != protocol.CodeQuotaExhausted {
		t.Fatalf("Submit = %v, want quota_exhausted", err)
	}
	if _, settled, _ := a.snapshot(); len(settled) != 0 {
		t.Fatalf("a refused submission was settled: %+v", settled)
	}

	b := &admissions{refuse: map[string]bool{}}
	scripts = map[string]*script{
		"one": newScript(fail(protocol.NewError(protocol.CodeProviderUnavailable, "down"))),
		"two": newScript(delta("never")),
	}
	h = newHarness(t, []routing.Deployment{deployment("one", withPriority(2)), deployment("two", withPriority(1))}, scripts,
		func(c *engine.Config) { c.Admission = b })
	b.mu.Lock()
	b.refuse["two"] = true // admitted on one; its fallback to two is refused
	b.mu.Unlock()
	acc := h.Submit(request())
	evs := h.finish(acc.ID)
	last := evs[len(evs)-1]
	var failed protocol.FailedData
	if err := json.Unmarshal(last.Data, &failed); err != nil || failed.Error == nil || failed.Error.Code != protocol.CodeQuotaExhausted {
		t.Fatalf("terminal %s %s, want execution.failed quota_exhausted", last.Type, last.Data)
	}
	s := b.waitSettled(t, 1)[0]
	if s.Deployment == nil || s.Deployment.Ref.Name != "one" || !s.Failed || s.Output {
		t.Fatalf("spent = %+v, want one's failed attempt without output", s)
	}
}
