package budget

import (
	"context"
	"time"

	"github.com/switchboard-dev/switchboard/runtime/eventstore"
	"github.com/switchboard-dev/switchboard/runtime/pricing"
)

// WindowUsage is what one limit's current window has used: what Budget status and
// metrics report (spec/budgets.md, "Status"). Used counts what running executions hold
// as well as what ended executions spent.
type WindowUsage struct {
	Window   Window
	TimeZone string
	// Start and ResetAt bound the window.
	Start, ResetAt time.Time
	// Used and Limit are in the counters' units: cost in micro-units.
	Used, Limit Amounts
}

// Amounts are quantities of each unit; 0 where a limit sets none.
type Amounts struct {
	Cost     pricing.Micro `json:"cost"`
	Tokens   int64         `json:"tokens"`
	Requests int64         `json:"requests"`
}

// UnitValue is one unit of a window in the units metrics report.
type UnitValue struct {
	// Unit is cost, tokens or requests.
	Unit string
	// Used and Limit are currency units for cost, counts otherwise.
	Used, Limit float64
}

// Units lists the units the window limits, with their use, in a fixed order.
func (w WindowUsage) Units() []UnitValue {
	var out []UnitValue
	if w.Limit.Cost > 0 {
		out = append(out, UnitValue{UnitCost, float64(w.Used.Cost) / pricing.MicroPerUnit, float64(w.Limit.Cost) / pricing.MicroPerUnit})
	}
	if w.Limit.Tokens > 0 {
		out = append(out, UnitValue{UnitTokens, float64(w.Used.Tokens), float64(w.Limit.Tokens)})
	}
	if w.Limit.Requests > 0 {
		out = append(out, UnitValue{UnitRequests, float64(w.Used.Requests), float64(w.Limit.Requests)})
	}
	return out
}

// Percent is the largest share of a limit the window has used, in whole percent
// (rounded down; above 100 for an Audit Budget past its limit).
func (w WindowUsage) Percent() int64 {
	var p int64
	for _, pair := range [][2]int64{{w.Used.Cost, w.Limit.Cost}, {w.Used.Tokens, w.Limit.Tokens}, {w.Used.Requests, w.Limit.Requests}} {
		if pair[1] > 0 {
			p = max(p, pair[0]*100/pair[1])
		}
	}
	return p
}

// Exhausted reports whether some unit of the window has reached its limit.
func (w WindowUsage) Exhausted() bool {
	return (w.Limit.Cost > 0 && w.Used.Cost >= w.Limit.Cost) ||
		(w.Limit.Tokens > 0 && w.Used.Tokens >= w.Limit.Tokens) ||
		(w.Limit.Requests > 0 && w.Used.Requests >= w.Limit.Requests)
}

// Report reads what b's limits have used in their windows at now, one WindowUsage per
// limit in b's order. A PerSubject Budget reports what all its subjects used together
// (each of them has the whole limit).
func Report(ctx context.Context, store eventstore.Budgets, b *Budget, now time.Time) ([]WindowUsage, error) {
	out := make([]WindowUsage, len(b.Limits))
	var names []string
	for i, l := range b.Limits {
		start, end := l.Window.Bounds(now, l.Location)
		out[i] = WindowUsage{Window: l.Window, TimeZone: l.Location.String(), Start: start, ResetAt: end,
			Limit: Amounts{Cost: l.Cost, Tokens: l.Tokens, Requests: l.Requests}}
		for _, unit := range []string{UnitCost, UnitTokens, UnitRequests} {
			names = append(names, b.Counter(start, l.Window, unit, ""))
		}
	}
	values, err := store.Counters(ctx, names)
	if err != nil {
		return nil, err
	}
	for i := range out {
		out[i].Used = Amounts{Cost: values[3*i], Tokens: values[3*i+1], Requests: values[3*i+2]}
	}
	return out, nil
}
