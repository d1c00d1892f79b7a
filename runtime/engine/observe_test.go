package engine_test

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/switchboard-dev/switchboard/runtime/engine"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
	"github.com/switchboard-dev/switchboard/runtime/routing"
)

// observer records the engine's Observer calls as lines.
type observer struct {
	mu      sync.Mutex
	calls   []string
	running int
}

func (o *observer) add(format string, args ...any) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.calls = append(o.calls, fmt.Sprintf(format, args...))
}

func (o *observer) Running(delta int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.running += delta
}
func (o *observer) ExecutionEnded(ability string, code protocol.Code) {
	o.add("ended %s %q", ability, code)
}
func (o *observer) Fallback(ability string) { o.add("fallback %s", ability) }
func (o *observer) AttemptEnded(r engine.AttemptReport) {
	o.add("attempt %s %q", r.Deployment.Ref, r.Code)
}
func (o *observer) FirstChunk(d *routing.Deployment, latency time.Duration) {
	o.add("first chunk %s", d.Ref)
}
func (o *observer) Usage(d *routing.Deployment, usage []protocol.Usage) {
	o.add("usage %s %d", d.Ref, len(usage))
}
func (o *observer) OrphanRecovered(outcome string) { o.add("orphan %s", outcome) }

func (o *observer) recorded() ([]string, int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.calls), o.running
}

// TestObserverSeesEachFactOnce: an execution that falls back from a 503 to a deployment
// that streams and reports usage is reported once per fact, in order, and stops counting
// as running once its terminal event is recorded.
func TestObserverSeesEachFactOnce(t *testing.T) {
	obs := &observer{}
	unavailable := protocol.NewError(protocol.CodeProviderUnavailable, "provider unavailable")
	usage := emit(protocol.EventUsageReported, protocol.UsageReportedData{Usage: []protocol.Usage{
		{Unit: protocol.UnitInputTokens, Quantity: 3, Source: protocol.SourceProvider},
		{Unit: "images", Quantity: -1, Source: protocol.SourceProvider}, // invalid: dropped, not observed
	}})
	h := newHarness(t, []routing.Deployment{deployment("a", withPriority(2)), deployment("b")},
		map[string]*script{"a": newScript(fail(unavailable)), "b": newScript(delta("one"), delta("two"), usage)},
		func(c *engine.Config) { c.Observer = obs })
	h.finish(h.Submit(request()).ID)

	want := []string{
		`attempt ai/a "provider_unavailable"`,
		`fallback chat`,
		`first chunk ai/b`,
		`usage ai/b 1`,
		`attempt ai/b ""`,
		`ended chat ""`,
	}
	var got []string
	running := -1
	for deadline := time.Now().Add(waitTimeout); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if got, running = obs.recorded(); len(got) == len(want) && running == 0 {
			break
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("observed calls (-want +got):\n%s", diff)
	}
	if running != 0 {
		t.Errorf("running = %d after the execution ended", running)
	}
}

// TestObserverSeesOrphanRecovered: the replica that ends an orphan reports it as
// recovered with the code it ends it with, and the execution as ended with that code.
func TestObserverSeesOrphanRecovered(t *testing.T) {
	obs := &observer{}
	s := newScript(delta("partial"), hang())
	r := newReplicas(t, 2, scriptProvider(s), func(c *engine.Config) {
		if c.Replica == "b" {
			c.Observer = obs
		}
	})
	id := r.submit(request())
	r.running(id)
	r.parts[0].cut.Store(true) // replica a stops reaching the store: its lease expires
	r.finish(id)

	var got []string
	for deadline := time.Now().Add(waitTimeout); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if got, _ = obs.recorded(); len(got) >= 2 {
			break
		}
	}
	want := []string{`orphan internal`, `ended chat "internal"`}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("replica b's observed calls (-want +got):\n%s", diff)
	}
}
