package engine

import (
	"context"

	"github.com/switchboard-dev/switchboard/runtime/pricing"
	"github.com/switchboard-dev/switchboard/runtime/protocol"
	"github.com/switchboard-dev/switchboard/runtime/routing"
)

// Admission decides, before each attempt, whether an execution may spend what the
// attempt could cost, and settles what it spent when it ends (spec/budgets.md,
// "Enforcement"). The engine knows no Budget, price or window: it asks Admit which of
// the route's candidates the execution may run on, and tells Settle what its last
// attempt used. Config.Admission is nil when nothing limits spend.
type Admission interface {
	// Admit returns the index of the first of candidates (in attempt order) that c may
	// run its next attempt on, having reserved that attempt's worst case in the same
	// step and given back whatever c reserved before (an execution that falls back to
	// another model holds for that model alone). When none may, it returns a
	// *protocol.Error (quota_exhausted) and changes nothing: what c reserved before
	// stays reserved until the engine settles it.
	Admit(ctx context.Context, c Claim, candidates []*routing.Deployment) (int, error)

	// Settle turns c's reservation into what it spent, exactly once whichever replica
	// ends the execution. The engine calls it after recording the terminal event of an
	// execution it started, and with a zero Spent for one it could not create. An
	// execution ended by another replica (its runner died) is settled by the
	// implementation's own sweep of reservations that outlived their execution.
	Settle(ctx context.Context, c Claim, s Spent)
}

// Claim is the execution an Admission decides on.
type Claim struct {
	// ID is the execution id.
	ID string
	// Principal is the caller that submitted it.
	Principal Principal
	// Request is the validated request; it must not be modified.
	Request *protocol.Request
}

// Spent is what an execution's last attempt used: what an Admission settles.
type Spent struct {
	// Deployment is the deployment of the last attempt; nil when no attempt started
	// (nothing was spent).
	Deployment *routing.Deployment
	// Counting is how that deployment's provider counts tokens (Provider.Counting).
	Counting pricing.Counting
	// Usage is what the last attempt reported, its entries in order.
	Usage []protocol.Usage
	// OutputBytes is the materialized output the execution recorded.
	OutputBytes int64
	// Output reports whether the last attempt recorded output.
	Output bool
	// Failed reports whether the execution ended failed (cancelled and out of time
	// included).
	Failed bool
}
