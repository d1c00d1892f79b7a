package eventstore

import (
	"fmt"
	"time"

	"github.com/switchboard-dev/switchboard/runtime/protocol"
)

// The argument checks of every implementation: each method below calls its check
// before anything else, the closed check included, and returns its error as it is, so
// that every store refuses the same calls with the same errors (ErrInvalid).

// DefaultOrphans is how many ids Orphans returns when given no limit.
const DefaultOrphans = 100

// DefaultPending is how many executions Budgets.Pending returns when given no limit.
const DefaultPending = 100

// CheckCreate checks the arguments of Create: an id, and a ttl for a leased execution.
func CheckCreate(rec Record, owner string, ttl time.Duration) error {
	if rec.ID == "" {
		return fmt.Errorf("create execution: empty id: %w", ErrInvalid)
	}
	if owner != "" && ttl <= 0 {
		return fmt.Errorf("create execution %s: lease ttl %v: %w", rec.ID, ttl, ErrInvalid)
	}
	return nil
}

// CheckAppend checks the arguments of Append: an execution id and a type. The event's
// data is the store's to check, as it folds it.
func CheckAppend(ev *protocol.Event) error {
	if ev.ExecutionID == "" || ev.Type == "" {
		return fmt.Errorf("append event: empty execution id or type: %w", ErrInvalid)
	}
	return nil
}

// CheckReserve checks the arguments of Reserve: a key and a positive ttl.
func CheckReserve(key string, ttl time.Duration) error {
	if key == "" || ttl <= 0 {
		return fmt.Errorf("reserve: empty key or ttl %v: %w", ttl, ErrInvalid)
	}
	return nil
}

// CheckAcquire checks the arguments of Acquire: an owner and a positive ttl.
func CheckAcquire(id, owner string, ttl time.Duration) error {
	if owner == "" || ttl <= 0 {
		return fmt.Errorf("acquire lease of %s: owner %q, ttl %v: %w", id, owner, ttl, ErrInvalid)
	}
	return nil
}

// CheckRenew checks the arguments of Renew: a fence (NoFence names no lease) and a
// positive ttl.
func CheckRenew(id string, fence Fence, ttl time.Duration) error {
	if fence == NoFence || ttl <= 0 {
		return fmt.Errorf("renew lease of %s: fence %d, ttl %v: %w", id, fence, ttl, ErrInvalid)
	}
	return nil
}

// CheckReleaseLease checks the arguments of ReleaseLease: a fence (NoFence names no
// lease).
func CheckReleaseLease(id string, fence Fence) error {
	if fence == NoFence {
		return fmt.Errorf("release lease of %s: no fence: %w", id, ErrInvalid)
	}
	return nil
}

// OrphanLimit is the number of ids Orphans returns at most when given limit:
// DefaultOrphans for limit <= 0.
func OrphanLimit(limit int) int {
	if limit <= 0 {
		return DefaultOrphans
	}
	return limit
}

// CheckSecret checks the arguments of Secret: a name, a candidate and a positive ttl.
func CheckSecret(name string, candidate []byte, ttl time.Duration) error {
	if name == "" || len(candidate) == 0 || ttl <= 0 {
		return fmt.Errorf("secret %q: empty name or candidate, or ttl %v: %w", name, ttl, ErrInvalid)
	}
	return nil
}

// MaxAmount is the largest amount, limit or spent amount of the Budgets role. The Redis
// store does its arithmetic in Lua, whose numbers are doubles, exact for integers up to
// 2^53; so a counter is exact while its value stays within this bound too: 9·10^15
// micro-units, nine billion of a currency.
const MaxAmount = 1<<53 - 1

// CheckHold checks the arguments of Hold: an execution id, and holds that each name a
// counter and a unit, reserve an amount in 0..MaxAmount under a limit of at most
// MaxAmount, say when the counter may expire and name a counter none of the others
// names.
func CheckHold(id string, holds []Hold) error {
	if id == "" {
		return fmt.Errorf("hold budget: empty execution id: %w", ErrInvalid)
	}
	seen := make(map[string]int, len(holds))
	for i, h := range holds {
		switch {
		case h.Counter == "":
			return fmt.Errorf("hold budget for %s: hold %d: empty counter: %w", id, i, ErrInvalid)
		case h.Unit == "":
			return fmt.Errorf("hold budget for %s: hold %d (%s): empty unit: %w", id, i, h.Counter, ErrInvalid)
		case h.Amount < 0 || h.Amount > MaxAmount:
			return fmt.Errorf("hold budget for %s: hold %d (%s): amount %d outside 0..%d: %w", id, i, h.Counter, h.Amount, MaxAmount, ErrInvalid)
		case h.Limit > MaxAmount:
			return fmt.Errorf("hold budget for %s: hold %d (%s): limit %d above %d: %w", id, i, h.Counter, h.Limit, MaxAmount, ErrInvalid)
		case h.Expires.IsZero():
			return fmt.Errorf("hold budget for %s: hold %d (%s): zero expiry: %w", id, i, h.Counter, ErrInvalid)
		}
		if j, ok := seen[h.Counter]; ok {
			return fmt.Errorf("hold budget for %s: holds %d and %d name counter %s: %w", id, j, i, h.Counter, ErrInvalid)
		}
		seen[h.Counter] = i
	}
	return nil
}

// CheckSettle checks the arguments of Settle: an execution id and spent amounts in
// 0..MaxAmount.
func CheckSettle(id string, spent map[string]int64) error {
	if id == "" {
		return fmt.Errorf("settle budget: empty execution id: %w", ErrInvalid)
	}
	for unit, n := range spent {
		if n < 0 || n > MaxAmount {
			return fmt.Errorf("settle budget of %s: spent %d %s outside 0..%d: %w", id, n, unit, MaxAmount, ErrInvalid)
		}
	}
	return nil
}

// PendingLimit is the number of executions Pending returns at most when given limit:
// DefaultPending for limit <= 0.
func PendingLimit(limit int) int {
	if limit <= 0 {
		return DefaultPending
	}
	return limit
}
