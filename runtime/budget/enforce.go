package budget

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"time"

	"github.com/go-logr/logr"

	"github.com/switchboard-dev/switchboard/runtime/engine"
	"github.com/switchboard-dev/switchboard/runtime/eventstore"
	"github.com/switchboard-dev/switchboard/runtime/pricing"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
	"github.com/switchboard-dev/switchboard/runtime/routing"
)

// Store is what the Enforcer needs of the EventStore: the Budgets counters, and the log
// it reads what an execution ended by another replica spent from.
type Store interface {
	eventstore.Budgets
	eventstore.Reader
}

// Observer receives the Enforcer's measurements (spec/observability.md); every method
// must be safe for concurrent use and fast.
type Observer interface {
	// Rejected counts a reservation b refused.
	Rejected(b *Budget)
	// Spent adds what an execution settled on d cost, in micro-units of currency.
	Spent(d *routing.Deployment, currency string, cost pricing.Micro)
}

// Config configures an Enforcer.
type Config struct {
	// Store keeps the counters. Required.
	Store Store
	// Budgets publishes the Budgets to enforce. Required.
	Budgets *Holder
	// Table publishes the routing table, for the deployments a Budget governs.
	// Required.
	Table engine.TableSource
	// Now is the clock windows are computed on; nil means time.Now.
	Now func() time.Time
	// Counting says how each provider counts tokens (engine.Provider.Counting), for
	// settling from a recorded log; nil counts every provider with the zero Counting.
	Counting func(provider string) pricing.Counting
	// Observer receives measurements; nil records none.
	Observer Observer
	// Logger receives logs; the zero Logger discards them.
	Logger logr.Logger
}

// Enforcer is the engine's Admission for Budgets. Create it with New; it is safe for
// concurrent use.
type Enforcer struct {
	store    Store
	budgets  *Holder
	table    engine.TableSource
	now      func() time.Time
	obs      Observer
	log      logr.Logger
	counting func(provider string) pricing.Counting

	// held names the executions of this replica that hold a reservation, so that an
	// execution no Budget governs costs no call to the store, at admission or at its
	// end.
	heldMu sync.Mutex
	held   map[string]bool

	// governed caches which deployments each Budget governs, for the table and set it
	// was computed from (currencies).
	governedMu sync.Mutex
	governed   *governance
}

var _ engine.Admission = (*Enforcer)(nil)

// New returns an Enforcer. It panics when a required field is missing, a programming
// error.
func New(cfg Config) *Enforcer {
	if cfg.Store == nil || cfg.Budgets == nil || cfg.Table == nil {
		panic("budget: Config needs Store, Budgets and Table")
	}
	e := &Enforcer{store: cfg.Store, budgets: cfg.Budgets, table: cfg.Table, now: cfg.Now, obs: cfg.Observer, log: cfg.Logger, counting: cfg.Counting, held: map[string]bool{}}
	if e.now == nil {
		e.now = time.Now
	}
	if e.obs == nil {
		e.obs = nopObserver{}
	}
	if e.counting == nil {
		e.counting = func(string) pricing.Counting { return pricing.Counting{} }
	}
	return e
}

// counterSlack keeps a counter beyond its window's end: an execution admitted in one
// window settles into that window's counters, however long it runs (the longest
// deadline a policy can allow is below it).
const counterSlack = 25 * time.Hour

// holdPlan is the reservation of one attempt on one deployment: the holds, and for each
// the Budget and the end of the window it counts in.
type holdPlan struct {
	holds  []eventstore.Hold
	budget []*Budget
	ends   []time.Time
	worst  Amounts
}

func (a Amounts) of(unit string) int64 {
	switch unit {
	case UnitCost:
		return a.Cost
	case UnitTokens:
		return a.Tokens
	default:
		return a.Requests
	}
}

// note is what a reservation records for the sweep that settles it when its runner is
// gone: the deployment and the request's estimates.
type note struct {
	Deployment string  `json:"deployment"`
	Input      int64   `json:"input"`
	Images     int64   `json:"images"`
	Worst      Amounts `json:"worst"`
}

// estimate is a request's input, as admission counts it: ⌈its JSON's bytes / 4⌉ tokens
// and the images it carries.
type estimate struct{ input, images int64 }

func estimateOf(req *protocol.Request) estimate {
	var est estimate
	if b, err := json.Marshal(req); err == nil {
		est.input = (int64(len(b)) + 3) / 4
	}
	for _, p := range req.Input {
		if p.Type == protocol.PartImage {
			est.images++
		}
	}
	return est
}

// outputCap is what an attempt on d may produce: the deployment's cap, lowered by the
// caller's own; 0 when neither caps it.
func outputCap(req *protocol.Request, d *routing.Deployment) int64 {
	out := d.MaxOutputTokens
	if g, err := protocol.Generation(req); err == nil && g.MaxOutputTokens != nil {
		if c := *g.MaxOutputTokens; c > 0 && (out == 0 || c < out) {
			out = c
		}
	}
	return out
}

// Admit implements engine.Admission: the first candidate whose Budgets can take the
// attempt's worst case, reserved; quota_exhausted when none can.
func (e *Enforcer) Admit(ctx context.Context, c engine.Claim, candidates []*routing.Deployment) (int, error) {
	set := e.budgets.Load()
	if set.Len() == 0 {
		return 0, e.release(ctx, c.ID)
	}
	now := e.now()
	var est *estimate
	var r refusal
	for i, d := range candidates {
		governing := e.governing(set, d, c.Principal)
		if len(governing) == 0 {
			return i, e.release(ctx, c.ID)
		}
		if est == nil {
			v := estimateOf(c.Request)
			est = &v
		}
		plan, closed := e.plan(governing, d, c, *est, now)
		if closed {
			r.closed = true
			continue
		}
		n, _ := json.Marshal(note{Deployment: d.RefString(), Input: est.input, Images: est.images, Worst: plan.worst})
		err := e.store.Hold(ctx, c.ID, plan.holds, n)
		var refused *eventstore.HoldRefusedError
		switch {
		case err == nil:
			e.heldMu.Lock()
			e.held[c.ID] = true
			e.heldMu.Unlock()
			return i, nil
		case errors.As(err, &refused) && refused.Index < len(plan.holds):
			h := plan.holds[refused.Index]
			e.obs.Rejected(plan.budget[refused.Index])
			if h.Amount <= h.Limit {
				r.reset(plan.ends[refused.Index].Sub(now))
			} else {
				r.tooLarge = true
			}
		default:
			// The reservation may have landed: give it back, or leave it to the sweep,
			// which gives back what an execution that was never created holds.
			e.log.Error(err, "Cannot reserve budget", "execution", c.ID)
			_ = e.store.Hold(ctx, c.ID, nil, nil)
			return 0, errBudgetUnavailable()
		}
	}
	return 0, r.error()
}

// governing returns the Budgets that govern d and count p's executions.
func (e *Enforcer) governing(set *Set, d *routing.Deployment, p engine.Principal) []*Budget {
	var out []*Budget
	for _, b := range set.In(d.Ref.Namespace) {
		if b.Governs(d) && b.Counts(p.Name, p.Groups) {
			out = append(out, b)
		}
	}
	return out
}

// plan computes the holds of an attempt on d against budgets. closed reports that one
// of them takes d out for its subjects (spec/budgets.md, "Fail closed": no pricing, no
// output cap or more than one currency where it counts cost).
func (e *Enforcer) plan(budgets []*Budget, d *routing.Deployment, c engine.Claim, est estimate, now time.Time) (plan holdPlan, closed bool) {
	out := outputCap(c.Request, d)
	plan.worst = Amounts{
		Cost:     pricing.Worst(est.input, out, est.images, d.Pricing),
		Tokens:   est.input + out,
		Requests: 1,
	}
	for _, b := range budgets {
		if reason := e.Readiness(b, d); reason != "" {
			return holdPlan{}, true
		}
		subject := ""
		if b.PerSubject {
			subject = c.Principal.Name
		}
		for _, l := range b.Limits {
			start, end := l.Window.Bounds(now, l.Location)
			for _, u := range []struct {
				unit  string
				limit int64
			}{{UnitCost, l.Cost}, {UnitTokens, l.Tokens}, {UnitRequests, l.Requests}} {
				if u.limit <= 0 {
					continue
				}
				limit := u.limit
				if b.Audit {
					limit = 0 // counted, never refused
				}
				h := eventstore.Hold{
					Counter: b.Counter(start, l.Window, u.unit, subject),
					Unit:    u.unit,
					Amount:  plan.worst.of(u.unit),
					Limit:   limit,
					Expires: end.Add(counterSlack),
				}
				plan.add(h, b, end)
				if subject != "" {
					// Each subject has the whole limit; the Budget's own counter, never
					// refusing, adds them up for status and metrics.
					h.Counter, h.Limit = b.Counter(start, l.Window, u.unit, ""), 0
					plan.add(h, b, end)
				}
			}
		}
	}
	return plan, false
}

// add appends h, or narrows the hold already on its counter: two limits of a Budget
// over the same window and unit are one counter, held against the tighter limit.
func (p *holdPlan) add(h eventstore.Hold, b *Budget, end time.Time) {
	for i := range p.holds {
		if p.holds[i].Counter == h.Counter {
			if h.Limit > 0 && (p.holds[i].Limit <= 0 || h.Limit < p.holds[i].Limit) {
				p.holds[i].Limit = h.Limit
			}
			return
		}
	}
	p.holds = append(p.holds, h)
	p.budget = append(p.budget, b)
	p.ends = append(p.ends, end)
}

// release gives back what execution id held, when it held anything: it falls back to
// a deployment no Budget governs.
func (e *Enforcer) release(ctx context.Context, id string) error {
	e.heldMu.Lock()
	held := e.held[id]
	delete(e.held, id)
	e.heldMu.Unlock()
	if !held {
		return nil
	}
	if err := e.store.Hold(ctx, id, nil, nil); err != nil {
		e.log.Error(err, "Cannot give back a budget reservation", "execution", id)
		return errBudgetUnavailable()
	}
	return nil
}

// refusal gathers why no candidate was admitted.
type refusal struct {
	closed  bool          // a Budget took a candidate out (fail closed)
	after   time.Duration // the earliest reset of an exhausted window; 0: none
	limited bool          // some window was exhausted
	// tooLarge: the worst case alone is more than a whole limit, so no reset helps.
	tooLarge bool
}

func (r *refusal) reset(d time.Duration) {
	d = max(d, time.Millisecond)
	if !r.limited || d < r.after {
		r.after = d
	}
	r.limited = true
}

func (r *refusal) error() *protocol.Error {
	if r.limited {
		e := protocol.NewError(protocol.CodeQuotaExhausted, "the budget for this request is exhausted")
		e.RetryAfterMs = r.after.Milliseconds()
		if e.RetryAfterMs == 0 {
			e.RetryAfterMs = 1
		}
		return e
	}
	if r.tooLarge {
		return protocol.NewError(protocol.CodeQuotaExhausted, "the request could cost more than its budget allows in a whole window")
	}
	return protocol.NewError(protocol.CodeQuotaExhausted, "no model the request may use can be charged to its budget")
}

// errBudgetUnavailable is the answer when the counters cannot be reached: spend cannot
// be checked, so nothing runs (fail closed), and a retry may succeed.
func errBudgetUnavailable() *protocol.Error {
	return protocol.NewError(protocol.CodeProviderUnavailable, "budgets cannot be checked right now; retry later")
}

type nopObserver struct{}

func (nopObserver) Rejected(*Budget)                                 {}
func (nopObserver) Spent(*routing.Deployment, string, pricing.Micro) {}
