package budget

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/switchboard-dev/switchboard/runtime/engine"
	"github.com/switchboard-dev/switchboard/runtime/eventstore"
	"github.com/switchboard-dev/switchboard/runtime/pricing"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
	"github.com/switchboard-dev/switchboard/runtime/routing"
)

// Settle implements engine.Admission: the execution's reservation becomes what its last
// attempt spent (spentOf), exactly once. A failure to reach the store is logged; the
// sweep settles the reservation later from the execution's events.
func (e *Enforcer) Settle(ctx context.Context, c engine.Claim, s engine.Spent) {
	e.heldMu.Lock()
	held := e.held[c.ID]
	delete(e.held, c.ID)
	e.heldMu.Unlock()
	if !held {
		return
	}
	var spent Amounts
	if s.Deployment != nil {
		spent = spentOf(s.Deployment, s.Counting, estimateOf(c.Request), s.Usage, s.OutputBytes, s.Output, s.Failed)
	}
	e.settle(ctx, c.ID, s.Deployment, spent)
}

// settle records spent for execution id, which ran its last attempt on d (nil: none).
func (e *Enforcer) settle(ctx context.Context, id string, d *routing.Deployment, spent Amounts) {
	settled, err := e.store.Settle(ctx, id, map[string]int64{UnitCost: spent.Cost, UnitTokens: spent.Tokens, UnitRequests: spent.Requests})
	if err != nil {
		e.log.Error(err, "Cannot settle a budget reservation; the sweep settles it later", "execution", id)
		return
	}
	if settled && d != nil && d.Pricing != nil {
		e.obs.Spent(d, d.Pricing.Currency, spent.Cost)
	}
}

// spentOf is what an execution spent (spec/budgets.md, "Settlement"): nothing but the
// request when its last attempt failed before any output; else what the provider
// reported, each token once, at d's prices; else what the runtime derives — the input
// estimate and ⌈output bytes / 4⌉ tokens.
func spentOf(d *routing.Deployment, counting pricing.Counting, est estimate, usage []protocol.Usage, outputBytes int64, output, failed bool) Amounts {
	spent := Amounts{Requests: 1}
	if failed && !output {
		return spent
	}
	var reported []protocol.Usage
	for _, u := range usage {
		if u.Source == protocol.SourceProvider {
			reported = append(reported, u)
		}
	}
	if len(reported) == 0 {
		counting = pricing.Counting{}
		reported = []protocol.Usage{
			{Unit: protocol.UnitInputTokens, Quantity: float64(est.input)},
			{Unit: protocol.UnitOutputTokens, Quantity: float64((outputBytes + 3) / 4)},
			{Unit: protocol.UnitImages, Quantity: float64(est.images)},
		}
	}
	m := pricing.Measure(reported, counting, d.Pricing)
	spent.Cost, spent.Tokens = m.Cost, m.Tokens
	return spent
}

// Sweep settles, every interval until ctx ends, the reservations of executions that
// ended without their runner settling them: the runner died (kill -9, node loss) and
// another replica ended or adopted the execution, or the runner's settlement failed.
// Every replica may sweep: Settle decides which one settles.
func (e *Enforcer) Sweep(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		e.SweepOnce(ctx, e.now().Add(-interval))
	}
}

// sweepPage bounds the reservations one sweep looks at: more than this replica set's
// running executions, which are skipped until they end.
const sweepPage = 1000

// SweepOnce settles the reservations made before `before` whose executions are terminal
// or gone, and returns how many it settled.
func (e *Enforcer) SweepOnce(ctx context.Context, before time.Time) int {
	pending, err := e.store.Pending(ctx, before, sweepPage)
	if err != nil {
		if ctx.Err() == nil {
			e.log.Error(err, "Cannot list budget reservations to settle")
		}
		return 0
	}
	n := 0
	for _, p := range pending {
		if ctx.Err() != nil {
			return n
		}
		if e.sweepOne(ctx, p) {
			n++
		}
	}
	return n
}

// sweepOne settles p if its execution ended; it reports whether it did.
func (e *Enforcer) sweepOne(ctx context.Context, p eventstore.PendingHold) bool {
	var n note
	_ = json.Unmarshal(p.Note, &n) // a note this version cannot read settles at the worst case
	st, err := e.store.Get(ctx, p.ID)
	switch {
	case errors.Is(err, eventstore.ErrNotFound):
		// Never created: its replica reserved, then failed to create it or died before
		// (an ended execution is settled within a sweep, long before its retention
		// removes it). It spent nothing.
		e.settle(ctx, p.ID, nil, Amounts{})
		return true
	case err != nil:
		e.log.Error(err, "Cannot read an execution to settle its budget", "execution", p.ID)
		return false
	case !st.Terminal:
		return false
	}
	events, err := e.store.Read(ctx, p.ID, 0, 0)
	if err != nil {
		e.log.Error(err, "Cannot read an execution to settle its budget", "execution", p.ID)
		return false
	}
	ref, _ := routing.ParseRef(n.Deployment)
	d, ok := e.table.Load().Get(ref)
	if !ok {
		e.settle(ctx, p.ID, nil, n.Worst) // its deployment is gone: its prices with it
		return true
	}
	usage, output, failed := lastAttempt(events)
	e.settle(ctx, p.ID, d, spentOf(d, e.counting(d.Provider), estimate{input: n.Input, images: n.Images}, usage, st.OutputBytes, output, failed))
	return true
}

// lastAttempt returns what the last attempt of a recorded execution reported, whether
// it recorded output, and whether the execution failed.
func lastAttempt(events []protocol.Event) (usage []protocol.Usage, output, failed bool) {
	for _, ev := range events {
		switch {
		case ev.Type == protocol.EventRouteSelected:
			usage, output = nil, false
		case ev.Type == protocol.EventUsageReported:
			var d protocol.UsageReportedData
			if json.Unmarshal(ev.Data, &d) == nil {
				usage = append(usage, d.Usage...)
			}
		case ev.Type.IsOutput():
			output = true
		case ev.Type == protocol.EventFailed:
			failed = true
		}
	}
	return usage, output, failed
}
