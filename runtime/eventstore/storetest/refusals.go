package storetest

import (
	"crypto/rand"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/switchboard-dev/switchboard/runtime/eventstore"
)

// RefusalConfig configures CheckRefusals.
type RefusalConfig struct {
	// Store is the store under test.
	Store eventstore.Reservations
	// Cycles is how many keys are reserved and released; default 100,000.
	Cycles int
	// Retained measures what Store holds, in bytes, the way the implementation's test
	// can: runtime.MemStats after a collection for an embedded store, the keys of the
	// store's prefix for a server.
	Retained func() int64
	// MaxGrowth is how many bytes Retained may grow over all the cycles.
	MaxGrowth int64
}

// refusalKeyBytes is the length of the keys CheckRefusals reserves: a long key, as an
// attacker would send (spec/http-api.md allows 255 characters).
const refusalKeyBytes = 250

// refusalWorkers reserve and release at once, as concurrent refused submissions do.
const refusalWorkers = 32

// CheckRefusals reserves unique keys of about 250 bytes and releases each at once,
// cfg.Cycles times, as submissions that the engine refuses do (spec/http-api.md,
// "Idempotency": rejected requests are not remembered), and fails unless what the store
// retains stayed flat: a released reservation must cost nothing until its ttl, which
// here is a day. The keys share one scope whose limit is the number of concurrent
// cycles, so a release that did not leave the scope's count fails the next Reserve.
func CheckRefusals(t *testing.T, cfg RefusalConfig) {
	t.Helper()
	if cfg.Cycles <= 0 {
		cfg.Cycles = 100_000
	}
	run := rand.Text() // the keys of this run, and no other
	cycles := func(from, to int) {
		var wg sync.WaitGroup
		for w := range refusalWorkers {
			wg.Go(func() {
				for i := from + w; i < to && !t.Failed(); i += refusalWorkers {
					refuse(t, cfg.Store, "principal:"+run, fmt.Sprintf("%s-%0*d", run, refusalKeyBytes-len(run)-1, i), i)
				}
			})
		}
		wg.Wait()
	}
	// The first cycles warm up what a store allocates once (maps, pools, scripts).
	warmUp := min(1000, cfg.Cycles)
	cycles(0, warmUp)
	before := cfg.Retained()
	start := time.Now()
	cycles(warmUp, cfg.Cycles)
	elapsed := time.Since(start)
	after := cfg.Retained()
	t.Logf("%d reserve/release cycles in %v: retained %d → %d bytes", cfg.Cycles-warmUp, elapsed.Round(time.Millisecond), before, after)
	if growth := after - before; growth > cfg.MaxGrowth {
		t.Errorf("released reservations left %d bytes behind (%.0f per cycle), want at most %d in all",
			growth, float64(growth)/float64(cfg.Cycles-warmUp), cfg.MaxGrowth)
	}
}

// refuse reserves key in scope for a new execution and releases it, as a refused
// submission does.
func refuse(t *testing.T, s eventstore.Reservations, scope, key string, i int) {
	ctx := t.Context()
	r := scoped(scope, fmt.Sprintf("exe_refused_%d", i))
	if _, reserved, err := s.Reserve(ctx, key, r, 24*time.Hour, refusalWorkers); err != nil || !reserved {
		t.Errorf("Reserve %d: reserved %v, %v", i, reserved, err)
		return
	}
	if err := s.Release(ctx, key, r.ExecutionID); err != nil {
		t.Errorf("Release %d: %v", i, err)
	}
}
