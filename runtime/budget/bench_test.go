package budget_test

import (
	"cmp"
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/switchboard-dev/switchboard/runtime/budget"
	"github.com/switchboard-dev/switchboard/runtime/engine"
	redisstore "github.com/switchboard-dev/switchboard/runtime/eventstore/redis"
	"github.com/switchboard-dev/switchboard/runtime/routing"
)

// BenchmarkAdmitRedis measures what one Budget costs an execution on the Redis store,
// against a Redis round trip measured in the same run (spec/performance.md, "Budgets"):
// a reservation (Admit, one script) and its settlement (Settle, one script), each
// reported as a multiple of a PING ("pings/op"). The server is $SWITCHBOARD_REDIS_URL's
// (default redis://127.0.0.1:6379), database 10.
func BenchmarkAdmitRedis(b *testing.B) {
	opts, err := goredis.ParseURL(cmp.Or(os.Getenv("SWITCHBOARD_REDIS_URL"), "redis://127.0.0.1:6379"))
	if err != nil {
		b.Fatal(err)
	}
	opts.DB = 10
	c := goredis.NewClient(opts)
	ctx := context.Background()
	if err := c.FlushDB(ctx).Err(); err != nil {
		b.Fatalf("Redis at %s: %v", opts.Addr, err)
	}
	s, err := redisstore.NewFromClient(c)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close(); _ = c.Close() })

	table := new(routing.Holder)
	table.Store(routing.NewTable([]routing.Deployment{deployment("m", "p", nil, usd, 256)}))
	d, _ := table.Load().Get(routing.Ref{Namespace: "ai", Name: "m"})
	budgets := new(budget.Holder)
	budgets.Store(budget.NewSet([]budget.Budget{{UID: "bench", Namespace: "ai", Name: "bench",
		Limits: []budget.Limit{{Window: budget.Month, Location: time.UTC, Cost: 1 << 50, Requests: 1 << 50}}}}))
	e := budget.New(budget.Config{Store: s, Budgets: budgets, Table: table})
	candidates := []*routing.Deployment{d}

	ping := func(n int) time.Duration {
		start := time.Now()
		for range n {
			if err := c.Ping(ctx).Err(); err != nil {
				b.Fatal(err)
			}
		}
		return time.Since(start) / time.Duration(n)
	}
	for _, bc := range []struct {
		name   string
		settle bool
	}{{"admit", false}, {"admit+settle", true}} {
		b.Run(bc.name, func(b *testing.B) {
			var pings time.Duration
			i := 0
			for b.Loop() {
				c := engine.Claim{ID: "exe_" + strconv.Itoa(i), Request: request()}
				i++
				if _, err := e.Admit(ctx, c, candidates); err != nil {
					b.Fatal(err)
				}
				if bc.settle {
					e.Settle(ctx, c, engine.Spent{Deployment: d, Usage: tokens, Output: true})
				}
				if i%64 == 0 {
					pings += ping(4) // the baseline, interleaved with the runs
				}
			}
			if n := i / 64; n > 0 {
				b.ReportMetric(float64(b.Elapsed()-pings*4)/float64(i)/float64(pings/time.Duration(n)), "pings/op")
			}
		})
	}
}
